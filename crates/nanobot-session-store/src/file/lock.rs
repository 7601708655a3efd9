//! Locks: the session file's `flock`, nanobot-ai's namespace lock, and the revision a
//! locked file is at.

use super::*;

impl FileSessionStore {
    /// nanobot-ai's namespace lock, in its layout.
    pub(super) fn lock_namespace(&self) -> Result<Option<File>, SessionError> {
        let Some(path) = &self.namespace_lock else {
            return Ok(None);
        };
        let file = fsio::open(path, Open::WRITE_OR_CREATE)
            .map_err(|e| SessionError::io("open the namespace lock", path, e))?;
        file.lock()
            .map_err(|e| SessionError::io("lock the namespace", path, e))?;
        Ok(Some(file))
    }

    /// Opens and locks the file at `path`, making sure the lock is on the file the path
    /// names now (a rename by another writer replaces it).
    pub(super) fn open_locked(&self, path: &Path) -> Result<Option<Locked>, SessionError> {
        loop {
            let namespace = self.lock_namespace()?;
            let file = match fsio::open(path, Open::READ_WRITE) {
                Ok(file) => file,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(SessionError::io("open", path, e)),
            };
            file.lock().map_err(|e| SessionError::io("lock", path, e))?;
            let held = revision_of(&file, path)?;
            match fs::metadata(path) {
                Ok(now) if identity(&now) == held.epoch => {
                    return Ok(Some(Locked {
                        file,
                        _namespace: namespace,
                    }));
                }
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(SessionError::io("inspect", path, e)),
            }
        }
    }
}

/// An open, locked session file (and the namespace lock, in nanobot-ai's layout).
pub(super) struct Locked {
    pub(super) file: File,
    pub(super) _namespace: Option<File>,
}

#[cfg(unix)]
pub(super) fn identity(metadata: &fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt;
    metadata.ino() ^ metadata.dev().rotate_left(32)
}

#[cfg(not(unix))]
pub(super) fn identity(_metadata: &fs::Metadata) -> u64 {
    0
}

pub(super) fn revision_of(file: &File, path: &Path) -> Result<Revision, SessionError> {
    let metadata = file
        .metadata()
        .map_err(|e| SessionError::io("inspect", path, e))?;
    Ok(revision_from(&metadata))
}

/// A file's revision: its identity and length.
pub(super) fn revision_from(metadata: &fs::Metadata) -> Revision {
    Revision {
        epoch: identity(metadata),
        offset: metadata.len(),
    }
}

pub(super) fn random_u64() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    RandomState::new().hash_one((nanos, std::process::id()))
}

pub(super) fn conflict(
    key: &SessionKey,
    expected: Option<Revision>,
    found: Option<Revision>,
) -> SessionError {
    SessionError::Conflict {
        key: key.to_string(),
        expected,
        found,
    }
}
