//! Writing: atomic installs, damage kept aside, compaction.

use super::*;

impl FileSessionStore {
    pub(super) fn sync_dir(&self) -> Result<(), SessionError> {
        if self.options.durability == Durability::None {
            return Ok(());
        }
        Ok(fs_support::sync_dir(&self.dir)?)
    }

    /// Writes `content` as the file of `key` through a temporary file and a rename (or, when
    /// `create_only`, a hard link that fails if the file exists). Returns the new file's
    /// revision.
    pub(super) fn install(
        &self,
        path: &Path,
        content: &[u8],
        create_only: bool,
    ) -> Result<Revision, SessionError> {
        let how = if create_only {
            fs_support::Install::CreateNew
        } else {
            fs_support::Install::Replace
        };
        let sync = if self.options.durability == Durability::None {
            fs_support::Sync::No
        } else {
            fs_support::Sync::Yes
        };
        Ok(revision_from(&fs_support::install(
            path, content, how, sync,
        )?))
    }

    /// Creates the file of a new session whole, or fails with a conflict if it exists.
    pub(super) fn create(
        &self,
        key: &SessionKey,
        path: &Path,
        content: Rendered,
        messages: usize,
    ) -> Result<Revision, SessionError> {
        let revision = self
            .install(path, content.bytes.as_bytes(), true)
            .map_err(|e| match e {
                SessionError::Io { source, .. }
                    if source.kind() == io::ErrorKind::AlreadyExists =>
                {
                    conflict(key, None, None)
                }
                other => other,
            })?;
        self.remember(key, content.state(revision, messages));
        Ok(revision)
    }

    /// Keeps damaged bytes beside the session file.
    pub(super) fn keep_aside(
        &self,
        key: &SessionKey,
        pieces: &[(String, Vec<u8>)],
    ) -> Result<(), SessionError> {
        let stamp = python_isoformat(self.now());
        Ok(fs_support::keep_aside(
            &self.sidecar_of(key),
            &stamp,
            pieces,
        )?)
    }

    pub(super) fn compact_locked(
        &self,
        key: &SessionKey,
        path: &Path,
        locked: &mut Locked,
        pending_updated_at: Option<NaiveDateTime>,
    ) -> Result<Revision, SessionError> {
        let mut loaded = self.read_locked(key, path, locked)?;
        if let Some(updated_at) = pending_updated_at {
            let newest = loaded.session.meta().updated_at.max(updated_at);
            loaded.session.touch(newest);
        }
        let content = render_session(&loaded.session);
        let revision = self.install(path, content.bytes.as_bytes(), false)?;
        self.remember(
            key,
            content.state(revision, loaded.session.messages().len()),
        );
        Ok(revision)
    }
}

pub(super) trait WriteAtEnd {
    fn write_all_at_end(&mut self, bytes: &[u8]) -> io::Result<()>;
}

impl WriteAtEnd for File {
    fn write_all_at_end(&mut self, bytes: &[u8]) -> io::Result<()> {
        use std::io::{Seek, SeekFrom};
        self.seek(SeekFrom::End(0))?;
        self.write_all(bytes)
    }
}

#[cfg(unix)]
pub(super) fn write_at_start(file: &File, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.write_all_at(bytes, 0)
}

#[cfg(not(unix))]
pub(super) fn write_at_start(file: &File, bytes: &[u8]) -> io::Result<()> {
    use std::io::{Seek, SeekFrom};
    let mut file = file;
    file.seek(SeekFrom::Start(0))?;
    file.write_all(bytes)
}
