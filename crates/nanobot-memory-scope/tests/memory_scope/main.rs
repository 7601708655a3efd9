//! memory-scope's tests: hostile ids, resolution, links, scope directories.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod dirs;
mod links;
mod resolve;
