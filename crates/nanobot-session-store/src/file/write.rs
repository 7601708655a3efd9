//! Writing: atomic installs, damage kept aside, compaction.

use super::*;

impl FileSessionStore {
    pub(super) fn sync_dir(&self) -> Result<(), SessionError> {
        if self.options.durability == Durability::None {
            return Ok(());
        }
        Ok(nanobot_fs_support::sync_dir(&self.dir)?)
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
            nanobot_fs_support::Install::CreateNew
        } else {
            nanobot_fs_support::Install::Replace
        };
        let sync = if self.options.durability == Durability::None {
            nanobot_fs_support::Sync::No
        } else {
            nanobot_fs_support::Sync::Yes
        };
        if sync == nanobot_fs_support::Sync::Yes
            && self.broken == Some(super::BrokenRule::SkipDirSync)
        {
            return skipping_dir_sync(path, content, create_only);
        }
        Ok(revision_from(&nanobot_fs_support::install(
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
            .install(path, &content.bytes, true)
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
        Ok(nanobot_fs_support::keep_aside(
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
        let revision = self.install(path, &content.bytes, false)?;
        self.remember(
            key,
            content.state(revision, loaded.session.messages().len()),
        );
        Ok(revision)
    }
}

/// [`FileSessionStore::install`] as the broken rule `SkipDirSync` does it: the file synced,
/// its name not.
fn skipping_dir_sync(
    path: &Path,
    content: &[u8],
    create_only: bool,
) -> Result<Revision, SessionError> {
    let temp = path.with_extension("jsonl.broken.tmp");
    let file =
        fsio::open(&temp, Open::TRUNCATE).map_err(|e| SessionError::io("create", &temp, e))?;
    fsio::write_at(&file, &temp, 0, content)
        .and_then(|()| fsio::sync_all(&file, &temp))
        .map_err(|e| SessionError::io("write", &temp, e))?;
    let placed = if create_only {
        fsio::hard_link(&temp, path).and_then(|()| fsio::remove_file(&temp))
    } else {
        fsio::rename(&temp, path)
    };
    placed.map_err(|e| SessionError::io("create", path, e))?;
    let metadata = std::fs::metadata(path).map_err(|e| SessionError::io("inspect", path, e))?;
    Ok(revision_from(&metadata))
}
