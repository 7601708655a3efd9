//! prompt-inputs' integration tests, one binary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod front_matter;
mod loader;
mod through_the_port;
