//! The memory-index crate's integration tests: the normaliser, the chunkers and the
//! in-memory index through the conformance suite.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod chunking;
mod in_memory;
mod normalizing;
mod vectors;
