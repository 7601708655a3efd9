//! session-store's integration tests, one binary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod conformance;
mod damage;
mod files;
mod history;
mod keys;
mod manager;
mod power;
mod support;
