//! The session store's one error type.

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::key::SessionKey;
use crate::store::Revision;

/// Why a session operation failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum SessionError {
    /// The key was refused (empty, too long, NUL).
    InvalidKey {
        /// An excerpt of the key.
        key: String,
        /// Why it was refused.
        reason: String,
    },
    /// Another writer (another process, or a detached copy of the session) changed the
    /// session since it was read. Reload it and apply the change again; nothing was written.
    Conflict {
        /// The session.
        key: String,
        /// The revision the writer expected (`None`: it expected no session).
        expected: Option<Revision>,
        /// The revision found (`None`: there is no session).
        found: Option<Revision>,
    },
    /// A write would move the consolidation pointer past the end of the messages.
    InvalidPointer {
        /// The session.
        key: String,
        /// The pointer asked for.
        pointer: usize,
        /// The number of messages the session would have.
        messages: usize,
    },
    /// An append would move the consolidation pointer backwards. Archived messages stay
    /// archived; only a rewrite (clear, retention, replacement) may lower the pointer.
    PointerMovedBack {
        /// The session.
        key: String,
        /// The stored pointer.
        from: usize,
        /// The pointer asked for.
        to: usize,
    },
    /// A hashed file name belongs to another key (a hash collision or a hand-edited file).
    KeyMismatch {
        /// The key asked for.
        key: String,
        /// The key the file records.
        found: String,
        /// The file.
        path: PathBuf,
    },
    /// The storage could not be read or written.
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// The storage holds something this crate refuses to touch, e.g. a nanobot-ai workspace
    /// id that is not 32 hex digits.
    InvalidStorage {
        /// The file or directory.
        path: PathBuf,
        /// What is wrong and what to do.
        reason: String,
    },
    /// Another turn holds the session (in this process or another) and did not finish
    /// within the wait. Nothing was written; try again when that turn has finished.
    Busy {
        /// The session.
        key: String,
        /// How long this caller waited.
        waited: std::time::Duration,
    },
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

impl SessionError {
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

    #[cfg_attr(not(feature = "fs"), allow(dead_code))]
    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        SessionError::Io {
            action,
            path: path.into(),
            source,
        }
    }

    /// Refuses a consolidation pointer past `messages` (the rule every backend checks).
    pub fn check_pointer(key: &SessionKey, pointer: usize, messages: usize) -> Result<(), Self> {
        Self::check_append_pointer(key, None, pointer, messages)
    }

    /// Refuses an appended pointer past `messages` or below the stored one (the rule every
    /// backend checks on append).
    pub fn check_append_pointer(
        key: &SessionKey,
        stored: Option<usize>,
        pointer: usize,
        messages: usize,
    ) -> Result<(), Self> {
        if let Some(from) = stored.filter(|&from| pointer < from) {
            return Err(SessionError::PointerMovedBack {
                key: key.to_string(),
                from,
                to: pointer,
            });
        }
        if pointer > messages {
            Err(SessionError::InvalidPointer {
                key: key.to_string(),
                pointer,
                messages,
            })
        } else {
            Ok(())
        }
    }

    /// A write expected `expected` and found `found`; no error when they agree (the
    /// stale-writer rule every backend checks).
    pub fn check_revision(
        key: &SessionKey,
        expected: Option<Revision>,
        found: Option<Revision>,
    ) -> Result<(), Self> {
        if expected == found {
            Ok(())
        } else {
            Err(SessionError::Conflict {
                key: key.to_string(),
                expected,
                found,
            })
        }
    }

    /// Whether reloading the session and retrying may succeed.
    pub fn is_conflict(&self) -> bool {
        matches!(self, SessionError::Conflict { .. })
    }

    /// Whether the same operation may succeed if tried again later, unchanged (a busy
    /// session, a busy or interrupted disk, a backend that says so) or after a reload (a
    /// conflict). A refused key or pointer will not change.
    pub fn is_retryable(&self) -> bool {
        match self {
            SessionError::Conflict { .. } | SessionError::Busy { .. } => true,
            SessionError::Io { source, .. } => nanobot_fs_support::is_transient(source.kind()),
            SessionError::Backend { retryable, .. } => *retryable,
            _ => false,
        }
    }
}

impl fmt::Display for SessionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SessionError::InvalidKey { key, reason } => {
                write!(f, "session key {key:?} is refused: {reason}")
            }
            SessionError::Conflict { key, .. } => write!(
                f,
                "session {key:?} was changed by another writer since it was read; reload it and \
                 apply the change again (nothing was written)"
            ),
            SessionError::Busy { key, waited } => write!(
                f,
                "session {key:?} is busy: another turn has held it for more than {:.1} s \
                 (nothing was written; try again when it has finished)",
                waited.as_secs_f64()
            ),
            SessionError::InvalidPointer {
                key,
                pointer,
                messages,
            } => write!(
                f,
                "session {key:?}: the consolidation pointer {pointer} is past its {messages} \
                 messages"
            ),
            SessionError::PointerMovedBack { key, from, to } => write!(
                f,
                "session {key:?}: the consolidation pointer cannot move back from {from} to {to} \
                 by appending; archived messages stay archived"
            ),
            SessionError::KeyMismatch { key, found, path } => write!(
                f,
                "session file {} belongs to key {found:?}, not {key:?}",
                path.display()
            ),
            SessionError::Io {
                action,
                path,
                source,
            } => write!(f, "could not {action} {}: {source}", path.display()),
            SessionError::InvalidStorage { path, reason } => {
                write!(f, "{}: {reason}", path.display())
            }
            SessionError::Backend { message, .. } => write!(f, "session backend failed: {message}"),
        }
    }
}

impl std::error::Error for SessionError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SessionError::Io { source, .. } => Some(source),
            SessionError::Backend {
                source: Some(source),
                ..
            } => Some(source.as_ref()),
            _ => None,
        }
    }
}

#[cfg(feature = "fs")]
impl From<nanobot_fs_support::FsError> for SessionError {
    fn from(e: nanobot_fs_support::FsError) -> Self {
        SessionError::Io {
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
        let transient = SessionError::backend_caused_by("the query failed", true, Dropped);
        assert!(transient.is_retryable());
        assert_eq!(
            transient.source().map(ToString::to_string).as_deref(),
            Some("connection reset")
        );
        assert!(!SessionError::backend("the schema is newer than this program").is_retryable());
        let busy_disk = SessionError::io("read", "/x", io::Error::from(io::ErrorKind::Interrupted));
        assert!(busy_disk.is_retryable());
        let denied = SessionError::io(
            "read",
            "/x",
            io::Error::from(io::ErrorKind::PermissionDenied),
        );
        assert!(!denied.is_retryable());
    }
}
