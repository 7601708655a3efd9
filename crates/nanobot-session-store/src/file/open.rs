//! Session files kept open between appends: a save during a turn then costs a lock, a
//! `stat`, one write and an unlock, where opening the file again costs a path lookup, an
//! open, a check that the path still names the file, and a close.
//!
//! The kept file is only used while it is still the session's file: its identity is the
//! revision the writer expects, and it still has exactly one name (a file replaced by a
//! rename, deleted, or given a second name by a backup tool, goes the slow way, which
//! checks the path). Cross-process exclusion is the same `flock` as the slow way; a mutex
//! keeps two writers of this process apart (they would share one lock).

use super::*;

/// At most this many files are kept open (a server touches thousands of sessions).
const MAX_KEPT_OPEN: usize = 64;

/// An open session file, unlocked between appends.
pub(super) struct KeptOpen {
    file: File,
    path: PathBuf,
}

/// A kept file and the identity it had when kept (readable without waiting for its use).
pub(super) struct Kept {
    epoch: u64,
    open: Mutex<KeptOpen>,
}

/// The files kept open, by session.
pub(super) type KeptFiles = Mutex<HashMap<SessionKey, Arc<Kept>>>;

impl FileSessionStore {
    /// Keeps `locked`'s file open for the next append to `key` (unlocking it), when the
    /// store's layout allows appending without the namespace lock.
    /// `epoch` is the file's identity, as the append that just went through it found.
    pub(super) fn keep_open(&self, key: &SessionKey, path: PathBuf, locked: Locked, epoch: u64) {
        if self.namespace_lock.is_some() {
            return;
        }
        let Locked { file, .. } = locked;
        if file.unlock().is_err() {
            return;
        }
        let kept = Kept {
            epoch,
            open: Mutex::new(KeptOpen { file, path }),
        };
        let mut files = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        if files.len() >= MAX_KEPT_OPEN && !files.contains_key(key) {
            let Some(evicted) = files.keys().next().cloned() else {
                return;
            };
            files.remove(&evicted);
        }
        files.insert(key.clone(), Arc::new(kept));
    }

    /// Closes the kept file of `key`, if any.
    pub(super) fn close_kept(&self, key: &SessionKey) {
        let mut files = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        files.remove(key);
    }

    /// Appends through the kept file of `key`: `None` when there is none, or when it is no
    /// longer the session's file at `expected` (the caller then goes the slow way, which
    /// decides what happened).
    pub(super) fn append_kept_open(
        &self,
        key: &SessionKey,
        expected: Revision,
        append: &Append<'_>,
    ) -> Result<Option<Revision>, SessionError> {
        let Some(kept) = self.kept_file(key, expected.epoch) else {
            return Ok(None);
        };
        let kept = kept.open.lock().unwrap_or_else(|p| p.into_inner());
        let path = &kept.path;
        kept.file
            .lock()
            .map_err(|e| SessionError::io("lock", path, e))?;
        let result = self.append_locked_kept(key, expected, append, &kept);
        // Closing the file would unlock it too; an unlock that fails leaves it to that.
        if kept.file.unlock().is_err() {
            drop(kept);
            self.close_kept(key);
        }
        result
    }

    fn kept_file(&self, key: &SessionKey, epoch: u64) -> Option<Arc<Kept>> {
        let files = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        files.get(key).filter(|kept| kept.epoch == epoch).cloned()
    }

    /// The append itself, with the kept file locked.
    fn append_locked_kept(
        &self,
        key: &SessionKey,
        expected: Revision,
        append: &Append<'_>,
        kept: &KeptOpen,
    ) -> Result<Option<Revision>, SessionError> {
        let path = &kept.path;
        let metadata = kept
            .file
            .metadata()
            .map_err(|e| SessionError::io("inspect", path, e))?;
        let found = revision_from(&metadata);
        if links(&metadata) != 1 || found != expected || found.offset == 0 {
            return Ok(None);
        }
        let Some(mut state) = self.take_state(key, expected) else {
            return Ok(None);
        };
        let (out, count) = self.append_bytes(key, &mut state, found, append)?;
        self.write_append(key, (&kept.file, path), state, found, (&out, count))
            .map(Some)
    }
}

#[cfg(unix)]
fn links(metadata: &fs::Metadata) -> u64 {
    std::os::unix::fs::MetadataExt::nlink(metadata)
}

#[cfg(not(unix))]
fn links(_metadata: &fs::Metadata) -> u64 {
    // Without a link count the kept file cannot be shown to be the session's: never used.
    0
}
