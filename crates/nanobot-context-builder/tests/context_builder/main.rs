//! The context builder's integration tests: the spec's acceptance cases as snapshots, byte
//! parity with nanobot-ai's system prompt, and invariants over random inputs.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod cases;
mod govern;
mod parity;
mod properties;
mod support;
