//! memory-core's integration tests, one binary.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    unreachable_pub
)]

mod autocompact;
mod consolidation;
mod idle;
mod instances;
mod properties;
mod raw;
mod summary;
mod support;
