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
    /// A backend-specific failure (e.g. a database error), with its description.
    Backend {
        /// What happened.
        message: String,
    },
}

impl SessionError {
    #[cfg_attr(not(feature = "fs"), allow(dead_code))]
    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        SessionError::Io {
            action,
            path: path.into(),
            source,
        }
    }

    /// Refuses a consolidation pointer past `messages`.
    pub(crate) fn check_pointer(
        key: &SessionKey,
        pointer: usize,
        messages: usize,
    ) -> Result<(), Self> {
        Self::check_append_pointer(key, None, pointer, messages)
    }

    /// Refuses an appended pointer past `messages` or below the stored one.
    pub(crate) fn check_append_pointer(
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

    /// A write expected `expected` and found `found`; no error when they agree.
    pub(crate) fn check_revision(
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
    /// session) or after a reload (a conflict).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            SessionError::Conflict { .. } | SessionError::Busy { .. }
        )
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
            SessionError::Backend { message } => write!(f, "session backend failed: {message}"),
        }
    }
}

impl std::error::Error for SessionError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SessionError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

#[cfg(feature = "fs")]
impl From<fs_support::FsError> for SessionError {
    fn from(e: fs_support::FsError) -> Self {
        SessionError::Io {
            action: e.action,
            path: e.path,
            source: e.source,
        }
    }
}
