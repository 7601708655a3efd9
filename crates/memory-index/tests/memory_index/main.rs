//! The memory-index crate's integration tests: the normaliser, the chunkers and the
//! in-memory index through the conformance suite.

mod chunking;
mod in_memory;
mod normalizing;
