//! Memory versions: outside edits recorded, the log, a version shown and restored.

use super::*;

impl Dream {
    /// The tracked files now: the durable documents, the skills and Dream's cursor (without
    /// the agent's shared files when this Dream serves another scope).
    pub(super) async fn snapshot_now(&self) -> Result<Snapshot, DreamError> {
        let mut files = Snapshot::new();
        let own = |t: &Target| !(self.config.propose_shared && is_shared(t));
        for document in Document::ALL {
            if !own(&Target::Document(document)) {
                continue;
            }
            if let Some(text) = self.documents.read_text(document).await? {
                files.insert(document.path().to_owned(), text);
            }
        }
        if own(&Target::Skill(String::new())) {
            for skill in self.documents.skills().await?.skills {
                files.insert(Target::Skill(skill.name).path(), skill.document.text);
            }
        }
        files.insert(
            CURSOR_PATH.to_owned(),
            self.journal.dream_cursor().await?.to_string(),
        );
        Ok(files)
    }

    /// Saves a version for edits made outside Dream since the latest one (or the first
    /// version), so a Dream version only ever holds Dream's own changes.
    pub(super) async fn record_outside_edits(
        &self,
        lease: &Lease,
    ) -> Result<Option<Version>, DreamError> {
        let Ok(versions) = &self.versions else {
            return Ok(None);
        };
        self.lease.check(lease.fence).await?;
        let now = self.snapshot_now().await?;
        let latest = versions.log(1).await?;
        let message = match latest.first() {
            None => "memory: initial state".to_owned(),
            Some(v) => {
                let before = versions.files_at(&v.id).await?;
                if before == now {
                    return Ok(None);
                }
                format!(
                    "memory: edits made outside Dream\n\n{}",
                    summary(&diff_snapshots(&before, &now))
                )
            }
        };
        Ok(versions.commit(&message, &now, self.clock.now()).await?)
    }

    /// Applies `plan` through the commit port under `lease`: each file changes only if it
    /// is still as `now` had it.
    pub(super) async fn apply(
        &self,
        plan: Plan,
        now: &Snapshot,
        lease: &Lease,
    ) -> Result<Option<Version>, DreamError> {
        let mut files = Vec::new();
        let mut tracked = now.clone();
        for (path, text) in &plan.files {
            let target = sandbox::parse(path).map_err(|reason| {
                DreamError::Memory(MemoryError::InvalidName {
                    name: path.clone(),
                    reason,
                })
            })?;
            let current = match &target {
                Target::Document(d) => self.documents.read(*d).await?,
                Target::Skill(name) => self.documents.read_skill(name).await?,
            };
            // The restore was decided on `now`: a file changed since is a conflict.
            let expected = match (&current, now.get(path)) {
                (Some(read), Some(seen)) if read.text == *seen => Expected::Version(read.version),
                (None, None) => Expected::Absent,
                _ => {
                    return Err(DreamError::Memory(MemoryError::Conflict {
                        what: format!(
                            "{path} changed while the restore was prepared; run it again"
                        ),
                    }));
                }
            };
            match text {
                Some(text) => tracked.insert(path.clone(), text.clone()),
                None => tracked.remove(path),
            };
            files.push(FileChange {
                file: target,
                expected,
                text: text.clone(),
            });
        }
        if let Some(cursor) = plan.cursor {
            tracked.insert(CURSOR_PATH.to_owned(), cursor.to_string());
        }
        let change = MemoryChange {
            fence: lease.fence,
            files,
            cursor: plan.cursor,
            version: plan.message.map(|message| VersionRecord {
                message,
                files: tracked,
            }),
            time: self.clock.now(),
        };
        Ok(self.commit.commit(&change).await?)
    }

    /// The newest `limit` versions, newest first.
    pub async fn log(&self, limit: usize) -> Result<Vec<Version>, DreamError> {
        Ok(self.versions()?.log(limit).await?)
    }

    /// Version `id` and its changes against the version before it.
    pub async fn show(&self, id: &str) -> Result<(Version, Vec<FileDiff>), DreamError> {
        let versions = self.versions()?;
        let version = versions.resolve(id).await?;
        let after = versions.files_at(&version.id).await?;
        let before = match &version.parent {
            Some(parent) => versions.files_at(parent).await?,
            None => Snapshot::new(),
        };
        Ok((version, diff_snapshots(&before, &after)))
    }

    /// Brings the memory files and the cursor back to their state before version `id` (a
    /// Dream version), recorded as a new version that can itself be restored (undone).
    pub async fn restore(&self, id: &str) -> Result<RestoreReport, DreamError> {
        let lease = self.acquire("restore").await?;
        let result = self.restore_leased(id, &lease).await;
        self.give_back(lease).await;
        result
    }

    pub(super) async fn restore_leased(
        &self,
        id: &str,
        lease: &Lease,
    ) -> Result<RestoreReport, DreamError> {
        self.recover(lease).await?;
        let versions = self.versions()?;
        let undone = versions.resolve(id).await?;
        if !undone.message.starts_with("dream:") {
            return Err(DreamError::Memory(MemoryError::UnknownVersion {
                id: format!(
                    "{id} (version {} was not made by Dream; only Dream versions can be restored)",
                    undone.short_id()
                ),
            }));
        }
        let Some(parent) = &undone.parent else {
            return Err(DreamError::NothingBefore {
                id: undone.short_id().to_owned(),
            });
        };
        // Edits made outside Dream since the last version are kept in a version first.
        self.record_outside_edits(lease).await?;
        let target = versions.files_at(parent).await?;
        let now = self.snapshot_now().await?;
        let changes = diff_snapshots(&now, &target);
        let mut files = BTreeMap::new();
        let paths: BTreeSet<&String> = now.keys().chain(target.keys()).collect();
        for path in paths {
            if path == CURSOR_PATH || now.get(path) == target.get(path) {
                continue;
            }
            files.insert(path.clone(), target.get(path).cloned());
        }
        let cursor = target
            .get(CURSOR_PATH)
            .and_then(|c| c.trim().parse::<u64>().ok());
        let message = format!(
            "dream: restore to before {}\n\nUndoes {} \"{}\" and everything after it; restore this version to undo the restore.\n\n{}",
            undone.short_id(),
            undone.short_id(),
            undone.subject(),
            summary(&changes)
        );
        let version = self
            .apply(
                Plan {
                    files,
                    cursor,
                    message: Some(message),
                },
                &now,
                lease,
            )
            .await?;
        Ok(RestoreReport {
            undone,
            version,
            changes,
        })
    }
}

/// Changes to apply as one unit: path to new text (`None` deletes a skill), Dream's cursor
/// afterwards, and the version message when the change is recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Plan {
    pub(super) files: BTreeMap<String, Option<String>>,
    pub(super) cursor: Option<u64>,
    pub(super) message: Option<String>,
}

/// File diffs between two snapshots (Dream's cursor left out).
pub fn diff_snapshots(before: &Snapshot, after: &Snapshot) -> Vec<FileDiff> {
    let paths: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    paths
        .into_iter()
        .filter(|p| p.as_str() != CURSOR_PATH)
        .filter_map(|p| {
            file_diff(
                p,
                before.get(p).map(String::as_str),
                after.get(p).map(String::as_str),
            )
        })
        .collect()
}
