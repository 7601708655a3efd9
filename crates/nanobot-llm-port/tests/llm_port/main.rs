//! llm-port's integration tests, one binary.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod decorators;
mod errors;
mod fakes;
mod serde_round_trip;
mod text_calls;
mod tokens;
