//! The context builder's one error type.

use std::fmt;

/// Why a prompt could not be built. Everything else the builder meets (missing files,
/// unedited templates, non-images among the images, oversized sections) has a defined
/// outcome and shows in the build report instead.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ContextError {
    /// A runtime-context block has no source name; every block must say where it comes
    /// from, because the source is persisted and shown in the session.
    EmptyRuntimeSource {
        /// The block's position among the blocks passed in.
        index: usize,
    },
}

impl fmt::Display for ContextError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ContextError::EmptyRuntimeSource { index } => write!(
                f,
                "runtime-context block {index} has an empty source; give every block the name of what produced it"
            ),
        }
    }
}

impl std::error::Error for ContextError {}
