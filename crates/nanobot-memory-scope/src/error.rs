//! The one error type of this crate.

use std::fmt;
use std::path::PathBuf;

/// What went wrong with a scope, a link or a scope directory.
#[derive(Debug)]
#[non_exhaustive]
pub enum ScopeError {
    /// A key, platform or id that cannot name a scope (fix the input).
    InvalidKey {
        /// An excerpt of what was given.
        key: String,
        /// Why it was refused.
        reason: String,
    },
    /// A link that would make no sense (an identity linked to itself, unlinking what is
    /// not linked).
    InvalidLink {
        /// Why.
        reason: String,
    },
    /// No such scope.
    NotFound {
        /// The scope asked for.
        scope: String,
    },
    /// The storage failed (disk, database); `retryable` says whether trying again can
    /// help (a busy lock, a dropped connection) or not (permissions, a full disk).
    Storage {
        /// What was being done.
        action: String,
        /// Where, when it is a file.
        path: Option<PathBuf>,
        /// Whether a retry can help.
        retryable: bool,
        /// The cause.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A stored record that cannot be read (kept as it is; nothing is overwritten).
    Corrupt {
        /// The file or record.
        what: String,
        /// Why.
        reason: String,
    },
}

impl ScopeError {
    /// Whether trying the same call again can succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ScopeError::Storage {
                retryable: true,
                ..
            }
        )
    }

    #[cfg(feature = "fs")]
    pub(crate) fn io(action: impl Into<String>, path: &std::path::Path, e: std::io::Error) -> Self {
        let retryable = nanobot_fs_support::is_transient(e.kind());
        ScopeError::Storage {
            action: action.into(),
            path: Some(path.to_path_buf()),
            retryable,
            source: Box::new(e),
        }
    }
}

impl fmt::Display for ScopeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScopeError::InvalidKey { key, reason } => {
                write!(f, "{key:?} cannot name a scope: {reason}")
            }
            ScopeError::InvalidLink { reason } => write!(f, "cannot link: {reason}"),
            ScopeError::NotFound { scope } => write!(f, "no scope {scope}"),
            ScopeError::Storage {
                action,
                path,
                source,
                ..
            } => match path {
                Some(path) => write!(f, "could not {action} {}: {source}", path.display()),
                None => write!(f, "could not {action}: {source}"),
            },
            ScopeError::Corrupt { what, reason } => write!(f, "{what} cannot be read: {reason}"),
        }
    }
}

impl std::error::Error for ScopeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ScopeError::Storage { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }
}

#[cfg(feature = "fs")]
impl From<nanobot_fs_support::FsError> for ScopeError {
    fn from(e: nanobot_fs_support::FsError) -> Self {
        ScopeError::io(e.action, &e.path.clone(), e.source)
    }
}
