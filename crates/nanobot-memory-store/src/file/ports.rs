//! The journal ports on the file journal.

use super::*;

#[async_trait]
impl crate::journal::JournalImport for FileJournal {
    async fn import(
        &self,
        entries: &[JournalEntry],
        latest: u64,
        dream: u64,
    ) -> Result<usize, MemoryError> {
        FileJournal::import(self, entries, latest, dream)
    }
}

impl FileJournal {
    /// The history file's bytes, `None` when there is no file yet.
    fn history_bytes(&self) -> Result<Option<Vec<u8>>, MemoryError> {
        let path = self.path(HISTORY);
        match fsio::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(MemoryError::io("read", &path, e)),
        }
    }
}

#[async_trait]
impl HistoryJournal for FileJournal {
    async fn append(&self, entries: &[NewEntry<'_>]) -> Result<Vec<u64>, MemoryError> {
        let mut state = self.state();
        let _held = self.hold()?;
        self.refresh(&mut state)?;
        self.append_locked(&mut state, entries)
    }

    async fn read_since(
        &self,
        cursor: u64,
        limit: Option<usize>,
    ) -> Result<Vec<JournalEntry>, MemoryError> {
        let mut state = self.state();
        let _held = self.hold()?;
        self.refresh(&mut state)?;
        // In cursor order: the parse skips a line whose cursor does not follow, appends
        // allocate upwards.
        Ok(entries_after(&state.entries, cursor, limit))
    }

    async fn read_last(&self, count: usize) -> Result<Vec<JournalEntry>, MemoryError> {
        let mut state = self.state();
        let _held = self.hold()?;
        self.refresh(&mut state)?;
        let from = state.entries.len().saturating_sub(count);
        Ok(state.entries[from..].to_vec())
    }

    async fn latest_cursor(&self) -> Result<u64, MemoryError> {
        let mut state = self.state();
        let _held = self.hold()?;
        self.refresh(&mut state)?;
        Ok(state.latest)
    }

    async fn dream_cursor(&self) -> Result<u64, MemoryError> {
        Ok(read_number(&self.path(DREAM_CURSOR))?.unwrap_or(0))
    }

    async fn set_dream_cursor(&self, cursor: u64) -> Result<(), MemoryError> {
        let mut state = self.state();
        let _held = self.hold()?;
        self.refresh(&mut state)?;
        if cursor > state.latest {
            return Err(MemoryError::InvalidCursor {
                cursor,
                latest: state.latest,
            });
        }
        self.write_number_atomic(DREAM_CURSOR, cursor)
    }

    async fn compact(&self, max_entries: usize) -> Result<Compaction, MemoryError> {
        let mut state = self.state();
        let _held = self.hold()?;
        self.refresh(&mut state)?;
        let Some(bytes) = self.history_bytes()? else {
            return Ok(Compaction::default());
        };
        // Every object line counts, valid entry or not, as in nanobot-ai.
        let lines: Vec<&[u8]> = bytes
            .split(|&b| b == b'\n')
            .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
            .collect();
        let cursors: Vec<Option<u64>> = lines
            .iter()
            .map(|l| {
                serde_json::from_slice::<Map<String, Value>>(l)
                    .ok()
                    .and_then(|r| r.get("cursor").and_then(Value::as_u64))
            })
            .collect();
        let dream = read_number(&self.path(DREAM_CURSOR))?.unwrap_or(0);
        let start = compaction_start(&cursors, max_entries, dream);
        let report = Compaction {
            before: lines.len(),
            dropped: start,
            kept: lines.len() - start,
        };
        if start > 0 {
            self.rewrite(lines[start..].iter().copied())?;
            state.seen = None;
            state.entries.clear();
            state.index.clear();
            self.refresh(&mut state)?;
        }
        Ok(report)
    }

    async fn remove_entries(&self, cursors: &[u64]) -> Result<usize, MemoryError> {
        let mut state = self.state();
        let _held = self.hold()?;
        self.refresh(&mut state)?;
        let Some(bytes) = self.history_bytes()? else {
            return Ok(0);
        };
        let lines: Vec<&[u8]> = bytes
            .split(|&b| b == b'\n')
            .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
            .collect();
        let gone = |line: &[u8]| {
            serde_json::from_slice::<Map<String, Value>>(line)
                .ok()
                .and_then(|r| r.get("cursor").and_then(Value::as_u64))
                .is_some_and(|c| cursors.contains(&c))
        };
        let kept: Vec<&[u8]> = lines.iter().copied().filter(|l| !gone(l)).collect();
        let removed = lines.len() - kept.len();
        if removed > 0 {
            // The counter holds the latest cursor first: a removed newest entry's number is
            // never handed out again.
            self.write_counter(&mut state)?;
            self.rewrite(kept.into_iter())?;
            state.seen = None;
            state.entries.clear();
            state.index.clear();
            self.refresh(&mut state)?;
        }
        Ok(removed)
    }

    fn capabilities(&self) -> JournalCapabilities {
        JournalCapabilities {
            shared_storage: true,
        }
    }
}

#[async_trait]
impl ArchiveJournal for FileJournal {
    async fn archives_from(
        &self,
        session: &str,
        from: u64,
    ) -> Result<Vec<ArchiveFound>, MemoryError> {
        let mut state = self.state();
        let _held = self.hold()?;
        self.refresh(&mut state)?;
        Ok(state.index.find(&state.entries, session, from))
    }

    async fn append_archive(
        &self,
        entries: &[NewEntry<'_>],
    ) -> Result<(Vec<u64>, bool), MemoryError> {
        let mut state = self.state();
        let _held = self.hold()?;
        self.refresh(&mut state)?;
        if let (Some(session), Some((from, _))) = (
            entries.first().and_then(|e| e.session_key),
            entries.first().and_then(|e| e.message_range),
        ) {
            let found = state.index.find(&state.entries, session, from);
            if let Some(archive) = matching_archive(&found, entries) {
                return Ok((archive.cursors.clone(), true));
            }
        }
        Ok((self.append_locked(&mut state, entries)?, false))
    }
}
