//! Archiving a slice: asked, committed with the session's pointer, raw when the model fails.

use super::*;

impl Consolidator {
    /// Archives the messages from the pointer to `end` of a session the caller holds the lock
    /// of (nanobot's `/new` archives a detached copy this way). The entries and the pointer
    /// move are one commit ([`SessionArchive`]); the pointer moves to `end` whatever the
    /// model answered, except when storage fails or another writer archived the messages
    /// first ([`Archived::Superseded`]).
    pub async fn archive(
        &self,
        handle: &SessionHandle,
        end: usize,
    ) -> Result<ArchiveRecord, ConsolidationError> {
        let record = self.archive_uncounted(handle, end).await?;
        record.outcome.count();
        Ok(record)
    }

    async fn archive_uncounted(
        &self,
        handle: &SessionHandle,
        end: usize,
    ) -> Result<ArchiveRecord, ConsolidationError> {
        let key = handle.key().clone();
        let (start, chunk) = handle.read(|s| {
            let start = s.last_consolidated();
            (
                start,
                s.messages()[start.min(end)..end.min(s.messages().len())].to_vec(),
            )
        });
        if chunk.is_empty() {
            return Ok(ArchiveRecord {
                start,
                end: start,
                outcome: Archived::Nothing,
            });
        }
        if let Some((to, cursor)) = self.already_archived(handle, start).await? {
            let outcome = match self.commit(handle, start, to, &[]).await? {
                Some(_) => Archived::Recovered { cursor },
                None => Archived::Superseded,
            };
            return Ok(ArchiveRecord {
                start,
                end: to,
                outcome,
            });
        }
        let request = handle.read(|session| self.build_request(session, start, end));
        let prepared = self
            .journal_archive(&key, start, end, &chunk, request)
            .await?;
        let outcome = match self.commit(handle, start, end, &prepared.entries()).await? {
            Some(cursors) => prepared.committed(cursors),
            None => Archived::Superseded,
        };
        Ok(ArchiveRecord {
            start,
            end,
            outcome,
        })
    }

    /// Commits the archive of `[start, end)` with `entries`: the journal entries and the
    /// pointer move (and the provider's continuation state dropped) as one operation. A
    /// session another writer changed meanwhile is reloaded and the commit tried again;
    /// `None` when the pointer is no longer at `start` (someone else archived it).
    pub(super) async fn commit(
        &self,
        handle: &SessionHandle,
        start: usize,
        end: usize,
        entries: &[String],
    ) -> Result<Option<Vec<u64>>, ConsolidationError> {
        let key = handle.key().clone();
        let mut attempt = 1;
        loop {
            let digest = handle.read(|s| {
                let messages = s.messages();
                archive_digest(&messages[start.min(messages.len())..end.min(messages.len())])
            });
            let result = self
                .sessions
                .commit_meta(
                    handle,
                    |s| {
                        if s.last_consolidated() != start || s.set_last_consolidated(end).is_err() {
                            return false;
                        }
                        s.set_provider_state(None);
                        true
                    },
                    async |expected, meta| {
                        let committed = self
                            .archive
                            .commit_archive(&ArchiveCommit {
                                session: &key,
                                expected,
                                from: start as u64,
                                to: end as u64,
                                digest: &digest,
                                entries,
                                meta,
                            })
                            .await?;
                        Ok::<_, ConsolidationError>((committed.revision, committed.cursors))
                    },
                )
                .await;
            match result {
                Err(ConsolidationError::Memory(MemoryError::Conflict { .. }))
                    if attempt < MAX_WRITE_ATTEMPTS =>
                {
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// Archives the live part of a detached copy of a session into the journal, moving no
    /// pointer anywhere: nanobot's `/new`, which empties the session at once and archives
    /// what it held in the background. The caller keeps the session's lock only for the
    /// clear, not for this call.
    pub async fn archive_snapshot(
        &self,
        snapshot: &Session,
    ) -> Result<ArchiveRecord, ConsolidationError> {
        let record = self.archive_snapshot_uncounted(snapshot).await?;
        record.outcome.count();
        Ok(record)
    }

    async fn archive_snapshot_uncounted(
        &self,
        snapshot: &Session,
    ) -> Result<ArchiveRecord, ConsolidationError> {
        let (start, end) = (snapshot.last_consolidated(), snapshot.messages().len());
        let chunk = &snapshot.messages()[start.min(end)..];
        if chunk.is_empty() {
            return Ok(ArchiveRecord {
                start,
                end: start,
                outcome: Archived::Nothing,
            });
        }
        let request = self.build_request(snapshot, start, end);
        let prepared = self
            .journal_archive(snapshot.key(), start, end, chunk, request)
            .await?;
        let digest = archive_digest(chunk);
        let texts = prepared.entries();
        let entries: Vec<NewEntry<'_>> = texts
            .iter()
            .map(|text| {
                NewEntry::text(text)
                    .from_session(snapshot.key().as_str())
                    .covering(start as u64, end as u64)
                    .with_digest(&digest)
            })
            .collect();
        let cursors = self.journal.append(&entries).await?;
        Ok(ArchiveRecord {
            start,
            end,
            outcome: prepared.committed(cursors),
        })
    }

    /// Journals the archive of `[start, end)`: the model's answer when the request could
    /// be made, else the messages themselves.
    pub(super) async fn journal_archive(
        &self,
        key: &SessionKey,
        start: usize,
        end: usize,
        chunk: &[nanobot_session_store::StoredMessage],
        request: Result<LlmRequest, RawReason>,
    ) -> Result<Prepared, ConsolidationError> {
        // Capabilities are asked only when they matter (a usable first answer needs none).
        let structured = || self.llm.capabilities().supports_structured_output;
        let first = if self.config.structured_first && structured() {
            None
        } else {
            let reason = match request {
                Err(reason) => reason,
                Ok(request) => match self.ask(&request).await? {
                    Ok(done) => return Ok(done),
                    Err(reason) => reason,
                },
            };
            let worth_retrying = !matches!(reason, RawReason::NoBudget | RawReason::CallFailed(_));
            if !(self.config.structured_retry && worth_retrying && structured()) {
                return Ok(self.archive_raw(key, start, end, chunk, reason));
            }
            Some(Box::new(reason))
        };
        match self.ask_structured(chunk).await? {
            Ok(done) => Ok(done),
            Err(second) => {
                let reason = RawReason::Retried {
                    first,
                    structured: Box::new(second),
                };
                Ok(self.archive_raw(key, start, end, chunk, reason))
            }
        }
    }

    /// An archive of this session from `start` that is journaled but whose pointer move was
    /// lost (a crash between the two steps of a backend without transactions): one whose
    /// digest matches the session's messages, found by the journal's index. Its end and
    /// first cursor.
    pub(super) async fn already_archived(
        &self,
        handle: &SessionHandle,
        start: usize,
    ) -> Result<Option<(usize, u64)>, ConsolidationError> {
        let found = self
            .archive
            .find_archive(handle.key(), start as u64)
            .await?;
        Ok(found.iter().rev().find_map(|archive| {
            let to = usize::try_from(archive.to).ok()?;
            let matches = handle.read(|s| {
                let messages = s.messages();
                to > start
                    && to <= messages.len()
                    && archive.digest.as_deref()
                        == Some(archive_digest(&messages[start..to]).as_str())
            });
            matches.then(|| (to, archive.cursors.first().copied().unwrap_or_default()))
        }))
    }

    /// The messages themselves as the archive, split into parts rather than cut.
    pub(super) fn archive_raw(
        &self,
        key: &SessionKey,
        start: usize,
        end: usize,
        chunk: &[nanobot_session_store::StoredMessage],
        reason: RawReason,
    ) -> Prepared {
        tracing::warn!(
            session = %key.log_id(),
            start,
            end,
            reason = %reason,
            "archive fell back to the raw messages"
        );
        let lines = format_messages(chunk);
        Prepared::Raw {
            parts: raw_entries(chunk.len(), &lines, self.config.raw_part_max_chars),
            reason,
        }
    }

    /// Adds `summary` to the session's summary (`_last_summary`): the previous text is
    /// kept ahead of the new one, oldest lines dropped first when the whole would exceed
    /// twice the summary cap.
    pub(super) async fn remember_summary(
        &self,
        handle: &SessionHandle,
        summary: &str,
        last_active: Option<chrono::NaiveDateTime>,
    ) -> Result<(), ConsolidationError> {
        let limit = self.config.summary_max_chars * 2;
        handle.update(|s| {
            let previous = s
                .meta()
                .metadata
                .get(LAST_SUMMARY_KEY)
                .and_then(|v| v.get("text"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let mut text = if previous.is_empty() {
                summary.to_owned()
            } else {
                format!("{previous}\n{summary}")
            };
            while text.chars().count() > limit {
                match text.find('\n') {
                    Some(cut) => text.replace_range(..=cut, ""),
                    None => {
                        text = text.chars().skip(text.chars().count() - limit).collect();
                    }
                }
            }
            let active = last_active.unwrap_or(s.meta().updated_at);
            s.metadata_mut().insert(
                LAST_SUMMARY_KEY.into(),
                json!({"text": text, "last_active": python_isoformat(active)}),
            );
        });
        self.sessions.save(handle).await?;
        Ok(())
    }
}
