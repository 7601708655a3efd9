//! The `SessionStore` port over the files.

use super::*;

#[async_trait]
impl SessionStore for FileSessionStore {
    async fn try_lock_turn(&self, key: &SessionKey) -> Result<Option<TurnLock>, SessionError> {
        let path = self.turn_lock_of(key);
        if let Some(parent) = path.parent() {
            fsio::create_dir_all(parent)
                .map_err(|e| SessionError::io("create the turn-lock directory", parent, e))?;
        }
        // The lock file is never removed (removing a file someone waits on would hand two
        // holders two different files); it is empty and tiny.
        let file = fsio::open(&path, Open::WRITE_OR_CREATE)
            .map_err(|e| SessionError::io("open the turn lock", &path, e))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(TurnLock::new(file))),
            Err(fs::TryLockError::WouldBlock) => Ok(None),
            Err(fs::TryLockError::Error(e)) => Err(SessionError::io("lock the turn of", &path, e)),
        }
    }

    async fn current_revision(&self, key: &SessionKey) -> Result<Option<Revision>, SessionError> {
        let path = self.path_of(key);
        match fs::metadata(&path) {
            Ok(metadata) => Ok(Some(revision_from(&metadata))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(SessionError::io("inspect", &path, e)),
        }
    }

    async fn load(&self, key: &SessionKey) -> Result<Option<Loaded>, SessionError> {
        let path = self.path_of(key);
        let Some(mut locked) = self.open_locked(&path)? else {
            self.forget(key);
            return Ok(None);
        };
        self.read_locked(key, &path, &mut locked).map(Some)
    }

    async fn append(
        &self,
        key: &SessionKey,
        expected: Option<Revision>,
        append: Append<'_>,
    ) -> Result<Revision, SessionError> {
        let Some(expected) = expected else {
            return self.append_new(key, &self.path_of(key), append);
        };
        // The kept file knows its path: the name is only made when it is not used.
        if let Some(revision) = self.append_kept_open(key, expected, &append)? {
            return Ok(revision);
        }
        let path = self.path_of(key);
        let Some(mut locked) = self.open_locked(&path)? else {
            return Err(conflict(key, Some(expected), None));
        };
        let found = revision_of(&locked.file, &path)?;
        SessionError::check_revision(key, Some(expected), Some(found))?;
        let mut state = self.state_locked(key, &path, &mut locked, expected)?;
        let (out, count) = self.append_bytes(key, &mut state, found, &append)?;
        let revision =
            self.write_append(key, (&locked.file, &path), state, found, (&out, count))?;
        self.keep_open(key, path, locked, revision.epoch);
        Ok(revision)
    }

    async fn rewrite(
        &self,
        session: &Session,
        expected: Option<Revision>,
    ) -> Result<Revision, SessionError> {
        let key = session.key();
        let path = self.path_of(key);
        let content = render_session(session);
        let messages = session.messages().len();
        let Some(expected) = expected else {
            let _namespace = self.lock_namespace()?;
            return self.create(key, &path, content, messages);
        };
        let Some(locked) = self.open_locked(&path)? else {
            return Err(conflict(key, Some(expected), None));
        };
        let found = revision_of(&locked.file, &path)?;
        SessionError::check_revision(key, Some(expected), Some(found))?;
        let revision = self.install(&path, &content.bytes, false)?;
        drop(locked);
        self.remember(key, content.state(revision, messages));
        Ok(revision)
    }

    async fn list(&self) -> Result<Vec<SessionInfo>, SessionError> {
        let mut index = self.listing.lock().unwrap_or_else(|p| p.into_inner());
        index.load_once(&self.dir);
        let modified_ns = listing::dir_modified_ns(&self.dir)
            .map_err(|e| SessionError::io("list", &self.dir, e))?;
        let started_ns = listing::now_ns();
        if index.trusts(modified_ns, started_ns, self.options.listing_recheck) {
            for file in index.doubtful(&self.written_sizes()) {
                self.recheck_row(&mut index, &file)?;
            }
        } else {
            self.check_every_row(&mut index)?;
            index.checked(listing::DirCheck {
                modified_ns,
                checked_ns: started_ns,
            });
        }
        let mut rows = index.rows();
        index.save(&self.dir);
        sort_listing(&mut rows);
        Ok(rows)
    }

    async fn delete(&self, key: &SessionKey) -> Result<bool, SessionError> {
        let path = self.path_of(key);
        let _namespace = self.lock_namespace()?;
        self.forget(key);
        self.close_kept(key);
        let existed = match fsio::remove_file(&path) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(SessionError::io("delete", &path, e)),
        };
        match fsio::remove_file(&self.sidecar_of(key)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(SessionError::io("delete", self.sidecar_of(key), e)),
        }
        if existed {
            self.sync_dir()?;
        }
        Ok(existed)
    }

    async fn open_for_replay(&self, key: &SessionKey) -> Result<Option<ReplayView>, SessionError> {
        let path = self.path_of(key);
        let Some(mut locked) = self.open_locked(&path)? else {
            return Ok(None);
        };
        if let Some(view) = self.read_tail(key, &path, &locked)? {
            return Ok(Some(view));
        }
        let loaded = self.read_locked(key, &path, &mut locked)?;
        Ok(Some(ReplayView::of_session(
            loaded.session,
            loaded.revision,
        )))
    }

    async fn flush(&self, key: &SessionKey, expected: Revision) -> Result<Revision, SessionError> {
        let path = self.path_of(key);
        let Some(mut locked) = self.open_locked(&path)? else {
            return Err(conflict(key, Some(expected), None));
        };
        let mut found = revision_of(&locked.file, &path)?;
        SessionError::check_revision(key, Some(expected), Some(found))?;
        let mut state = self.state_locked(key, &path, &mut locked, expected)?;
        let current_line = line1_update(key, &state);
        let mut mark = TailMark {
            messages: state.messages,
            bytes: found.offset,
        };
        let line1_stale =
            !state.line1_current || current_line.is_some() || state.line1_mark != Some(mark);
        let line1_text = current_line.unwrap_or_else(|| state.meta_line.clone());
        let mut marked = with_mark(&line1_text, mark);
        let wasteful =
            state.dead_bytes >= COMPACT_MIN_DEAD_BYTES && state.dead_bytes * 2 >= found.offset;
        let overrun = self.broken == Some(super::BrokenRule::Line1Overrun);
        let outgrown = line1_stale
            && ((marked.len() > state.line1_capacity && !overrun)
                || !line1_ends_at(&locked.file, &path, state.line1_capacity, found.offset)
                    .map_err(|e| SessionError::io("read line 1 of", &path, e))?);
        if wasteful || outgrown {
            // A record that no longer fits line 1 (or a line 1 that is not what this process
            // recorded) goes through the atomic rewrite, never past line 1's own bytes.
            return self.compact_locked(key, &path, &mut locked, state.pending_updated_at);
        }
        if line1_stale && !state.meta_after_line1 && state.line1_capacity > SECTOR {
            // Line 1 is the metadata's only copy, and a crash can tear a write that spans
            // sectors (new first sector, old rest): append the record first, durably, so
            // line 1 is only ever rewritten over a copy of what a later record holds.
            let record = format!("{line1_text}\n");
            fsio::append(&mut locked.file, &path, record.as_bytes())
                .map_err(|e| SessionError::io("append to", &path, e))?;
            if self.options.durability != Durability::None {
                fsio::sync_data(&locked.file, &path)
                    .map_err(|e| SessionError::io("sync", &path, e))?;
            }
            found.offset += record.len() as u64;
            state.revision = found;
            state.meta_after_line1 = true;
            // The record only mirrors line 1 once line 1 is rewritten below.
            state.dead_bytes += record.len() as u64;
            mark.bytes = found.offset;
            marked = with_mark(&line1_text, mark);
        }
        if line1_stale {
            let line1 = pad_to_bytes(marked, state.line1_capacity);
            // `outgrown` sent anything longer to the compaction: this is line 1's width.
            debug_assert!(line1.len() == state.line1_capacity || overrun);
            fsio::write_at(&locked.file, &path, 0, line1.as_bytes())
                .map_err(|e| SessionError::io("update line 1 of", &path, e))?;
            if !state.line1_current {
                // The appended record now only mirrors line 1: it counts as dead weight.
                state.dead_bytes += state.meta_line.len() as u64 + 1;
            }
            state.line1_current = true;
            state.line1_mark = Some(mark);
            if let (Some(recorded), Some(updated_at)) =
                (state.recorded.as_mut(), state.pending_updated_at.take())
            {
                recorded.updated_at = updated_at;
                state.meta_line = line1_text;
            }
        }
        if self.options.durability != Durability::None {
            fsio::sync_data(&locked.file, &path).map_err(|e| SessionError::io("sync", &path, e))?;
        }
        if line1_stale || state.touched_at != Some(found) {
            // Appends and line 1 leave the directory as it was: tell other processes'
            // listings that this file changed.
            listing::touch_dir(&self.dir);
            state.touched_at = Some(found);
        }
        self.remember(key, state);
        Ok(found)
    }

    fn capabilities(&self) -> crate::store::SessionCapabilities {
        crate::store::SessionCapabilities {
            shared_storage: true,
            partial_replay: true,
        }
    }
}

impl FileSessionStore {
    /// What an append writes to a file at `found` whose state is `state` (updated for the
    /// metadata it records), and the message count after it.
    pub(super) fn append_bytes(
        &self,
        key: &SessionKey,
        state: &mut FileState,
        found: Revision,
        append: &Append<'_>,
    ) -> Result<(Vec<u8>, usize), SessionError> {
        let count = state.messages + append.messages.len();
        let mut out = Vec::with_capacity(append.messages.len() * 512 + 512);
        let empty_file = found.offset == 0;
        let meta = match (append.meta, empty_file) {
            (Some(meta), _) => Some(meta.clone()),
            // An empty file (nanobot-ai accepts one) gets its metadata line first.
            (None, true) => Some(SessionMeta::new(self.now())),
            (None, false) => None,
        };
        if let Some(meta) = &meta {
            let stored = state.recorded.as_ref().map(|r| r.last_consolidated);
            SessionError::check_append_pointer(key, stored, meta.last_consolidated, count)?;
        }
        if empty_file && let Some(meta) = &meta {
            state.meta_line = metadata_line(key, meta);
            let line1 = padded(&state.meta_line);
            state.line1_capacity = line1.len();
            state.line1_current = true;
            out.extend_from_slice(line1.as_bytes());
            out.push(b'\n');
        }
        for message in append.messages {
            message.write_python_json(&mut out);
            out.push(b'\n');
        }
        if let (Some(meta), false) = (&meta, empty_file) {
            record_meta(key, meta, state, &mut out);
        }
        Ok((out, count))
    }

    /// Writes an append's bytes (`written`: the bytes and the message count after them) at
    /// the end of the locked file, which is at `found`, syncs as the options say, and
    /// records the state after it.
    pub(super) fn write_append(
        &self,
        key: &SessionKey,
        (file, path): (&File, &Path),
        mut state: FileState,
        found: Revision,
        (out, count): (&[u8], usize),
    ) -> Result<Revision, SessionError> {
        fsio::write_at(file, path, found.offset, out)
            .map_err(|e| SessionError::io("append to", path, e))?;
        if self.options.durability == Durability::Always {
            fsio::sync_data(file, path).map_err(|e| SessionError::io("sync", path, e))?;
        }
        state.revision = Revision {
            epoch: found.epoch,
            offset: found.offset + out.len() as u64,
        };
        state.messages = count;
        let revision = state.revision;
        self.remember(key, state);
        Ok(revision)
    }

    /// Every session file's row brought up to date: files whose stamp changed are read again,
    /// rows of files that are gone are dropped.
    fn check_every_row(&self, index: &mut ListingIndex) -> Result<(), SessionError> {
        let entries =
            fs::read_dir(&self.dir).map_err(|e| SessionError::io("list", &self.dir, e))?;
        let mut present = std::collections::HashSet::new();
        for entry in entries {
            let entry = entry.map_err(|e| SessionError::io("list", &self.dir, e))?;
            let name = entry.file_name();
            let Some(file) = name.to_str() else {
                continue;
            };
            let Some(canonical) = session_file_key(file) else {
                continue;
            };
            let stamp = match entry.metadata() {
                Ok(metadata) => Stamp::of(&metadata),
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(SessionError::io("inspect", entry.path(), e)),
            };
            present.insert(file.to_owned());
            if !index.is_fresh(file, stamp) {
                self.read_row(index, file, canonical, stamp)?;
            }
        }
        index.retain(&present);
        Ok(())
    }

    /// One file's row brought up to date (see [`Self::check_every_row`]).
    fn recheck_row(&self, index: &mut ListingIndex, file: &str) -> Result<(), SessionError> {
        let Some(canonical) = session_file_key(file) else {
            return Ok(());
        };
        let path = self.dir.join(file);
        let stamp = match fs::metadata(&path) {
            Ok(metadata) => Stamp::of(&metadata),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                index.remove(file);
                return Ok(());
            }
            Err(e) => return Err(SessionError::io("inspect", &path, e)),
        };
        if !index.is_fresh(file, stamp) {
            self.read_row(index, file, canonical, stamp)?;
        }
        Ok(())
    }

    /// Reads `file`'s listing row into the index (stamped with what `stat` said before the
    /// read, so a change during the read is seen next time).
    fn read_row(
        &self,
        index: &mut ListingIndex,
        file: &str,
        canonical: Option<SessionKey>,
        stamp: Stamp,
    ) -> Result<(), SessionError> {
        let path = self.dir.join(file);
        let read_at = std::time::SystemTime::now();
        let bytes = match fsio::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                index.remove(file);
                return Ok(());
            }
            Err(e) => return Err(SessionError::io("read", &path, e)),
        };
        match list_row(&bytes, canonical, self.now()) {
            Some(row) => index.record(file.to_owned(), stamp, read_at, &row),
            None => index.remove(file),
        }
        Ok(())
    }

    /// The session files this process has written or read, with their size as it left them.
    fn written_sizes(&self) -> Vec<(String, u64)> {
        let states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        states
            .iter()
            .map(|(key, state)| {
                (
                    format!("{}.jsonl", key.storage_stem()),
                    state.revision.offset,
                )
            })
            .collect()
    }

    /// A new session: the whole file appears at once, or not at all if it exists.
    fn append_new(
        &self,
        key: &SessionKey,
        path: &Path,
        append: Append<'_>,
    ) -> Result<Revision, SessionError> {
        let _namespace = self.lock_namespace()?;
        if let Ok(existing) = File::open(path) {
            return Err(conflict(key, None, Some(revision_of(&existing, path)?)));
        }
        let now = self.now();
        let meta = append
            .meta
            .cloned()
            .unwrap_or_else(|| SessionMeta::new(now));
        SessionError::check_pointer(key, meta.last_consolidated, append.messages.len())?;
        let content = render(key, &meta, append.messages);
        self.create(key, path, content, append.messages.len())
    }
}

/// The key a session file's name gives (`Some(None)`: a hashed name, whose key is inside);
/// `None` for files that are not sessions.
fn session_file_key(file: &str) -> Option<Option<SessionKey>> {
    let stem = file.strip_suffix(".jsonl")?;
    let canonical = SessionKey::from_storage_stem(stem);
    (canonical.is_some() || SessionKey::is_hashed_stem(stem)).then_some(canonical)
}

/// The records an append adds after its messages: a changed provider state, and the
/// metadata unless only its time changed (line 1 takes that at flush).
fn record_meta(key: &SessionKey, meta: &SessionMeta, state: &mut FileState, out: &mut Vec<u8>) {
    if meta.provider_state != state.provider_state {
        out.extend_from_slice(provider_state_line(meta.provider_state.as_ref()).as_bytes());
        out.push(b'\n');
        state.provider_state = meta.provider_state.clone();
    }
    let only_time_changed = state.recorded.as_ref().is_some_and(|recorded| {
        SessionMeta {
            updated_at: recorded.updated_at,
            ..meta.clone()
        } == *recorded
    });
    if only_time_changed {
        // Not worth a record per message: line 1 gets it at flush.
        let recorded = state.recorded.as_ref().map(|r| r.updated_at);
        state.pending_updated_at = (Some(meta.updated_at) != recorded).then_some(meta.updated_at);
    } else {
        let line = metadata_line(key, meta);
        // The previous appended record is superseded; line 1 is only made stale.
        if !state.line1_current {
            state.dead_bytes += state.meta_line.len() as u64 + 1;
        }
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
        state.meta_line = line;
        state.line1_current = false;
        state.meta_after_line1 = true;
        state.recorded = Some(meta.clone());
        state.pending_updated_at = None;
    }
}

/// Line 1 as it should read now when only the time moved on since it was written: what
/// the last record says, with the newest updated_at (`None`: line 1 is the record).
fn line1_update(key: &SessionKey, state: &FileState) -> Option<String> {
    match (&state.recorded, state.pending_updated_at) {
        (Some(recorded), Some(updated_at)) => Some(metadata_line(
            key,
            &SessionMeta {
                updated_at,
                ..recorded.clone()
            },
        )),
        _ => None,
    }
}
