//! The memory store's one error type.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why a memory operation failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum MemoryError {
    /// The storage could not be read or written.
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// A cursor the caller gave cannot be: Dream's cursor past the last entry ever written.
    InvalidCursor {
        /// The cursor asked for.
        cursor: u64,
        /// The latest cursor allocated.
        latest: u64,
    },
    /// A name was refused (a skill name that could leave `skills/`, say).
    InvalidName {
        /// An excerpt of the name.
        name: String,
        /// What a valid name looks like.
        reason: String,
    },
    /// A file holds something that cannot be used as it is (a document that is not UTF-8).
    InvalidFile {
        /// The file.
        path: PathBuf,
        /// What is wrong and what to do.
        reason: String,
    },
    /// A version id that names no saved version.
    UnknownVersion {
        /// The id as given.
        id: String,
    },
    /// A short version id that names several saved versions.
    AmbiguousVersion {
        /// The id as given.
        id: String,
        /// The full ids it could mean.
        candidates: Vec<String>,
    },
    /// Memory versioning cannot be used here, and why (what to do about it).
    VersioningUnavailable {
        /// The reason, as a sentence.
        reason: String,
    },
    /// A file this store may read but not write: `SOUL.md` and skills belong to the agent
    /// scope, and a user's or a chat's scope only proposes changes to them.
    ReadOnly {
        /// The file.
        path: String,
    },
    /// A write found the stored state other than it expected (a document changed since it
    /// was read, a session moved on since an archive was made): nothing was changed. Read
    /// again and redo the change.
    Conflict {
        /// What differed, as a sentence.
        what: String,
    },
    /// The lease a commit was made under is no longer held (it expired and another holder
    /// took it): nothing was changed. The work must stop; the next holder redoes it.
    LeaseLost {
        /// What was refused, as a sentence.
        what: String,
    },
    /// The session store failed during an operation that spans it (an archive commit).
    Session(nanobot_session_store::SessionError),
    /// A backend-specific failure (e.g. a database error): what happened, whether trying
    /// again can help (a dropped connection, a serialization failure) and the backend's own
    /// error, kept as the source.
    Backend {
        /// What happened.
        message: String,
        /// Whether the same call may succeed when tried again.
        retryable: bool,
        /// The backend's error.
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
}

impl MemoryError {
    /// A backend failure that trying again will not mend, described by `message`.
    pub fn backend(message: impl Into<String>) -> Self {
        Self::Backend {
            message: message.into(),
            retryable: false,
            source: None,
        }
    }

    /// A backend failure caused by `source`; `retryable` says whether trying again can help.
    pub fn backend_caused_by(
        message: impl Into<String>,
        retryable: bool,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::Backend {
            message: message.into(),
            retryable,
            source: Some(Box::new(source)),
        }
    }

    /// Whether the same call may succeed when tried again: a busy or interrupted disk, a
    /// backend that says so. A refused name, a bad file or a conflict will not change.
    pub fn is_retryable(&self) -> bool {
        match self {
            MemoryError::Io { source, .. } => nanobot_fs_support::is_transient(source.kind()),
            MemoryError::Backend { retryable, .. } => *retryable,
            MemoryError::Session(e) => e.is_retryable(),
            _ => false,
        }
    }
    #[cfg_attr(not(feature = "fs"), allow(dead_code))]
    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        MemoryError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}

impl fmt::Display for MemoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemoryError::Io {
                action,
                path,
                source,
            } => write!(f, "could not {action} {}: {source}", path.display()),
            MemoryError::InvalidCursor { cursor, latest } => write!(
                f,
                "cursor {cursor} is past the latest journal entry ({latest}); nothing was changed"
            ),
            MemoryError::InvalidName { name, reason } => {
                write!(f, "the name {name:?} is refused: {reason}")
            }
            MemoryError::InvalidFile { path, reason } => write!(f, "{}: {reason}", path.display()),
            MemoryError::UnknownVersion { id } => {
                write!(
                    f,
                    "no saved memory version has the id {id:?}; list them with the log"
                )
            }
            MemoryError::AmbiguousVersion { id, candidates } => write!(
                f,
                "the id {id:?} matches {} versions ({}); give more characters",
                candidates.len(),
                candidates.join(", ")
            ),
            MemoryError::VersioningUnavailable { reason } => {
                write!(f, "memory versioning is unavailable: {reason}")
            }
            MemoryError::ReadOnly { path } => write!(
                f,
                "{path} belongs to the agent scope and is read-only here; propose the change instead"
            ),
            MemoryError::Conflict { what } => {
                write!(f, "conflicting change, nothing written: {what}")
            }
            MemoryError::LeaseLost { what } => {
                write!(f, "the lease is lost, nothing written: {what}")
            }
            MemoryError::Session(e) => write!(f, "{e}"),
            MemoryError::Backend { message, .. } => write!(f, "memory backend failed: {message}"),
        }
    }
}

impl std::error::Error for MemoryError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MemoryError::Io { source, .. } => Some(source),
            MemoryError::Session(e) => Some(e),
            MemoryError::Backend {
                source: Some(source),
                ..
            } => Some(source.as_ref()),
            _ => None,
        }
    }
}

#[cfg(feature = "fs")]
impl From<nanobot_fs_support::FsError> for MemoryError {
    fn from(e: nanobot_fs_support::FsError) -> Self {
        MemoryError::Io {
            action: e.action,
            path: e.path,
            source: e.source,
        }
    }
}

#[cfg(test)]
mod retry_tests {
    use super::*;

    #[derive(Debug)]
    struct Dropped;
    impl fmt::Display for Dropped {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("connection reset")
        }
    }
    impl std::error::Error for Dropped {}

    #[test]
    fn backend_errors_keep_their_source_and_say_whether_to_retry() {
        use std::error::Error as _;
        let transient = MemoryError::backend_caused_by("the query failed", true, Dropped);
        assert!(transient.is_retryable());
        assert_eq!(
            transient.source().map(ToString::to_string).as_deref(),
            Some("connection reset")
        );
        assert!(!MemoryError::backend("the schema is newer than this program").is_retryable());
        let busy_disk = MemoryError::io("read", "/x", io::Error::from(io::ErrorKind::Interrupted));
        assert!(busy_disk.is_retryable());
        let denied = MemoryError::io(
            "read",
            "/x",
            io::Error::from(io::ErrorKind::PermissionDenied),
        );
        assert!(!denied.is_retryable());
    }
}
