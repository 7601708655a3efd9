//! memory-store's integration tests, one binary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod broken;
mod conformance;
mod damage;
mod files;
mod power;
mod support;
mod versions;
