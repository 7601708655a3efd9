//! A scope's stores together: the archive commit and the memory commit.

use super::*;

/// The stores of one scope, for the suites that span several ports.
pub struct ScopeParts {
    /// Sessions.
    pub sessions: Arc<dyn SessionStore>,
    /// The journal.
    pub journal: Arc<dyn HistoryJournal>,
    /// Documents.
    pub documents: Arc<dyn MemoryDocuments>,
    /// Versions.
    pub versions: Arc<dyn MemoryVersions>,
    /// The Dream lease.
    pub lease: Arc<dyn MemoryLease>,
    /// The archive commit over `sessions` and `journal`.
    pub archive: Arc<dyn SessionArchive>,
    /// The memory commit over the others.
    pub commit: Arc<dyn MemoryCommit>,
}

impl ScopeParts {
    /// Every part in memory, with `broken` switched off where it lives (the journal's
    /// commit order, the documents' compare-and-set, the lease's fence, the archive's
    /// once-per-slice), to show that the suites notice.
    pub fn in_memory(broken: Option<crate::BrokenRule>) -> ScopeParts {
        use crate::BrokenRule as Rule;
        let clock: Arc<dyn nanobot_llm_port::Clock> = Arc::new(nanobot_llm_port::SystemClock);
        let sessions: Arc<dyn SessionStore> =
            Arc::new(nanobot_session_store::InMemorySessionStore::new());
        let journal = Arc::new(match broken {
            Some(Rule::JournalCommitOrder) => {
                crate::InMemoryJournal::broken(Rule::JournalCommitOrder, clock.clone())
            }
            _ => crate::InMemoryJournal::new(clock.clone()),
        });
        let documents: Arc<dyn MemoryDocuments> = Arc::new(match broken {
            Some(Rule::DocumentCompareAndSet) => {
                crate::InMemoryDocuments::broken(Rule::DocumentCompareAndSet)
            }
            _ => crate::InMemoryDocuments::new(),
        });
        let lease: Arc<dyn MemoryLease> = Arc::new(match broken {
            Some(Rule::LeaseFence) => crate::InMemoryLease::broken(Rule::LeaseFence, clock),
            _ => crate::InMemoryLease::with_clock(clock),
        });
        let versions: Arc<dyn MemoryVersions> = Arc::new(crate::InMemoryVersions::new());
        let archive: Arc<dyn SessionArchive> = Arc::new(match broken {
            Some(Rule::ArchiveOnce) => {
                crate::TwoStepArchive::broken(Rule::ArchiveOnce, journal.clone(), sessions.clone())
            }
            _ => crate::TwoStepArchive::new(journal.clone(), sessions.clone()),
        });
        let commit = Arc::new(crate::StepwiseCommit::new(
            documents.clone(),
            journal.clone(),
            Some(versions.clone()),
            lease.clone(),
        ));
        ScopeParts {
            sessions,
            journal,
            documents,
            versions,
            lease,
            archive,
            commit,
        }
    }
}

pub(super) fn turn(i: usize) -> StoredMessage {
    let message = if i.is_multiple_of(2) {
        StoredMessage::user(format!("question {i}"))
    } else {
        StoredMessage::assistant(format!("answer {i}"))
    };
    message.with("timestamp", format!("2026-01-02T03:04:{:02}", i % 60))
}

/// A stored session of `count` messages; its revision.
pub(super) async fn seed_session(
    sessions: &dyn SessionStore,
    key: &SessionKey,
    count: usize,
) -> (Session, nanobot_session_store::Revision) {
    let now = chrono::NaiveDate::from_ymd_opt(2026, 1, 2)
        .unwrap()
        .and_hms_opt(3, 4, 0)
        .unwrap();
    let mut session = Session::new(key.clone(), now);
    for i in 0..count {
        session.add_message(turn(i), now);
    }
    let revision = sessions
        .save_changes(&mut session, None)
        .await
        .unwrap()
        .unwrap();
    (session, revision)
}

/// The metadata after archiving up to `to`.
pub(super) fn moved(session: &Session, to: usize) -> nanobot_session_store::SessionMeta {
    let mut after = session.clone();
    after.set_last_consolidated(to).unwrap();
    after.meta().clone()
}

/// The entries of `journal` that archive `session` from `from`.
pub(super) async fn archives_of(
    journal: &dyn HistoryJournal,
    session: &SessionKey,
    from: u64,
) -> usize {
    journal
        .read_since(0, None)
        .await
        .unwrap()
        .iter()
        .filter(|e| {
            e.session_key.as_deref() == Some(session.as_str())
                && e.message_range.is_some_and(|(f, _)| f == from)
        })
        .count()
}

/// An archive commit journals the entries (naming the session, the slice and its digest)
/// and moves the pointer; the revision it returns is the session's.
pub async fn archive_commit(parts: ScopeParts) {
    let key = SessionKey::new("telegram:archive").unwrap();
    let (session, revision) = seed_session(parts.sessions.as_ref(), &key, 6).await;
    let digest = archive_digest(&session.messages()[0..4]);
    let entries = vec!["- [durable] asked four questions".to_owned()];
    let committed = parts
        .archive
        .commit_archive(&ArchiveCommit {
            session: &key,
            expected: revision,
            from: 0,
            to: 4,
            digest: &digest,
            entries: &entries,
            meta: &moved(&session, 4),
        })
        .await
        .unwrap();
    assert!(!committed.reused);
    assert_eq!(committed.cursors.len(), 1);
    assert_eq!(
        parts.sessions.current_revision(&key).await.unwrap(),
        Some(committed.revision)
    );
    let loaded = parts.sessions.load(&key).await.unwrap().unwrap();
    assert_eq!(loaded.session.last_consolidated(), 4);
    assert_eq!(loaded.session.messages().len(), 6);
    let journaled = parts.journal.read_since(0, None).await.unwrap();
    assert_eq!(journaled.len(), 1);
    assert_eq!(journaled[0].content, entries[0]);
    assert_eq!(journaled[0].session_key.as_deref(), Some(key.as_str()));
    assert_eq!(journaled[0].message_range, Some((0, 4)));
    assert_eq!(
        journaled[0].message_digest.as_deref(),
        Some(digest.as_str())
    );
    // An archive with nothing worth keeping still moves the pointer.
    let digest = archive_digest(&loaded.session.messages()[4..6]);
    parts
        .archive
        .commit_archive(&ArchiveCommit {
            session: &key,
            expected: committed.revision,
            from: 4,
            to: 6,
            digest: &digest,
            entries: &[],
            meta: &moved(&loaded.session, 6),
        })
        .await
        .unwrap();
    assert_eq!(
        parts
            .sessions
            .load(&key)
            .await
            .unwrap()
            .unwrap()
            .session
            .last_consolidated(),
        6
    );
    assert_eq!(parts.journal.latest_cursor().await.unwrap(), 1);
}

/// An archive made from a revision the session has left is refused: nothing is journaled
/// and the pointer stays.
pub async fn archive_stale_refused(parts: ScopeParts) {
    let key = SessionKey::new("telegram:stale").unwrap();
    let (mut session, revision) = seed_session(parts.sessions.as_ref(), &key, 4).await;
    session.add_message(turn(4), session.meta().updated_at);
    parts
        .sessions
        .save_changes(&mut session, Some(revision))
        .await
        .unwrap();
    let digest = archive_digest(&session.messages()[0..2]);
    let error = parts
        .archive
        .commit_archive(&ArchiveCommit {
            session: &key,
            expected: revision,
            from: 0,
            to: 2,
            digest: &digest,
            entries: &["- stale summary".to_owned()],
            meta: &moved(&session, 2),
        })
        .await
        .unwrap_err();
    assert!(matches!(error, MemoryError::Conflict { .. }), "{error}");
    assert_eq!(parts.journal.latest_cursor().await.unwrap(), 0);
    let loaded = parts.sessions.load(&key).await.unwrap().unwrap();
    assert_eq!(loaded.session.last_consolidated(), 0);
    assert_eq!(loaded.session.messages().len(), 5);
}

/// Once per slice: an archive already journaled (an attempt whose pointer move was lost to
/// a crash) is reused by the commit that repeats it, never appended twice.
pub async fn archive_once_per_slice(parts: ScopeParts) {
    let key = SessionKey::new("telegram:once").unwrap();
    let (session, revision) = seed_session(parts.sessions.as_ref(), &key, 6).await;
    let digest = archive_digest(&session.messages()[0..4]);
    let text = "- [durable] the lost attempt's summary".to_owned();
    // The earlier attempt: journaled, then the process died before the pointer moved.
    let lost = parts
        .journal
        .append(&[NewEntry::text(&text)
            .from_session(key.as_str())
            .covering(0, 4)
            .with_digest(&digest)])
        .await
        .unwrap();
    let found = parts.archive.find_archive(&key, 0).await.unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].cursors, lost);
    assert_eq!(found[0].to, 4);
    let committed = parts
        .archive
        .commit_archive(&ArchiveCommit {
            session: &key,
            expected: revision,
            from: 0,
            to: 4,
            digest: &digest,
            entries: &[text],
            meta: &moved(&session, 4),
        })
        .await
        .unwrap();
    assert!(committed.reused, "the journaled archive was appended again");
    assert_eq!(committed.cursors, lost);
    assert_eq!(archives_of(parts.journal.as_ref(), &key, 0).await, 1);
    assert_eq!(
        parts
            .sessions
            .load(&key)
            .await
            .unwrap()
            .unwrap()
            .session
            .last_consolidated(),
        4
    );
}

/// Archives are found by an index: however many entries other sessions appended since.
/// A slice with the same first message but other messages (after a `/new`) is another
/// archive, told apart by its digest.
pub async fn archive_found_by_index(parts: ScopeParts) {
    let key = SessionKey::new("telegram:indexed").unwrap();
    let (session, revision) = seed_session(parts.sessions.as_ref(), &key, 4).await;
    let old_digest = "0123456789abcdef";
    parts
        .journal
        .append(&[NewEntry::text("- before a /new")
            .from_session(key.as_str())
            .covering(0, 4)
            .with_digest(old_digest)])
        .await
        .unwrap();
    let crowd: Vec<String> = (0..300).map(|i| format!("- other session {i}")).collect();
    for chunk in crowd.chunks(50) {
        let entries: Vec<NewEntry<'_>> = chunk
            .iter()
            .enumerate()
            .map(|(i, text)| {
                NewEntry::text(text)
                    .from_session("discord:other")
                    .covering(i as u64, i as u64 + 1)
            })
            .collect();
        parts.journal.append(&entries).await.unwrap();
    }
    let digest = archive_digest(&session.messages()[0..4]);
    assert_ne!(digest, old_digest);
    let committed = parts
        .archive
        .commit_archive(&ArchiveCommit {
            session: &key,
            expected: revision,
            from: 0,
            to: 4,
            digest: &digest,
            entries: &["- after the /new".to_owned()],
            meta: &moved(&session, 4),
        })
        .await
        .unwrap();
    assert!(
        !committed.reused,
        "an older slice from message 0 was taken for this one"
    );
    let found = parts.archive.find_archive(&key, 0).await.unwrap();
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(found[0].digest.as_deref(), Some(old_digest));
    assert_eq!(found[1].digest.as_deref(), Some(digest.as_str()));
    assert_eq!(found[1].cursors, committed.cursors);
    assert!(
        parts
            .archive
            .find_archive(&key, 1)
            .await
            .unwrap()
            .is_empty()
    );
}

/// A memory commit writes the files, records the version and moves Dream's cursor.
pub async fn commit_applies_everything(parts: ScopeParts) {
    let lease = parts
        .lease
        .try_acquire("dream", 60 * SECOND)
        .await
        .unwrap()
        .unwrap();
    for i in 0..3 {
        parts
            .journal
            .append_one(NewEntry::text(&format!("- fact {i}")))
            .await
            .unwrap();
    }
    let user = parts.documents.read(Document::User).await.unwrap();
    let files = snapshot(&[
        ("USER.md", "# User\n- fact 0\n"),
        ("skills/tea/SKILL.md", "brew\n"),
        ("memory/.dream_cursor", "3"),
    ]);
    let version = parts
        .commit
        .commit(&MemoryChange {
            fence: lease.fence,
            files: vec![
                FileChange {
                    file: MemoryFile::Document(Document::User),
                    expected: Expected::from_read(user.as_ref()),
                    text: Some("# User\n- fact 0\n".into()),
                },
                FileChange {
                    file: MemoryFile::Skill("tea".into()),
                    expected: Expected::Absent,
                    text: Some("brew\n".into()),
                },
            ],
            cursor: Some(3),
            version: Some(VersionRecord {
                message: "dream: manual run, journal entries 1-3".into(),
                files: files.clone(),
            }),
            time: minute(5),
        })
        .await
        .unwrap()
        .expect("a version");
    assert_eq!(
        parts
            .documents
            .read_text(Document::User)
            .await
            .unwrap()
            .as_deref(),
        Some("# User\n- fact 0\n")
    );
    assert_eq!(
        parts
            .documents
            .read_skill("tea")
            .await
            .unwrap()
            .unwrap()
            .text,
        "brew\n"
    );
    assert_eq!(parts.journal.dream_cursor().await.unwrap(), 3);
    assert_eq!(parts.versions.log(1).await.unwrap()[0].id, version.id);
    assert_eq!(parts.versions.files_at(&version.id).await.unwrap(), files);
    assert_eq!(
        parts.commit.recover(lease.fence).await.unwrap(),
        crate::Recovery::Nothing
    );
}

/// A commit under a fence that no longer holds the lease is refused, and writes nothing.
pub async fn commit_fenced(parts: ScopeParts) {
    parts
        .journal
        .append_one(NewEntry::text("- fact"))
        .await
        .unwrap();
    let stale = parts
        .lease
        .try_acquire("first run", 60 * SECOND)
        .await
        .unwrap()
        .unwrap();
    let fence = stale.fence;
    parts.lease.release(stale).await.unwrap();
    let _current = parts
        .lease
        .try_acquire("second run", 60 * SECOND)
        .await
        .unwrap()
        .unwrap();
    let error = parts
        .commit
        .commit(&MemoryChange {
            fence,
            files: vec![FileChange {
                file: MemoryFile::Document(Document::Memory),
                expected: Expected::Absent,
                text: Some("# Memory\n- from a lost lease\n".into()),
            }],
            cursor: Some(1),
            version: Some(VersionRecord {
                message: "dream: lost".into(),
                files: snapshot(&[("memory/MEMORY.md", "# Memory\n- from a lost lease\n")]),
            }),
            time: minute(1),
        })
        .await
        .unwrap_err();
    assert!(matches!(error, MemoryError::LeaseLost { .. }), "{error}");
    assert_eq!(parts.documents.read(Document::Memory).await.unwrap(), None);
    assert_eq!(parts.journal.dream_cursor().await.unwrap(), 0);
    assert!(parts.versions.log(10).await.unwrap().is_empty());
}

/// A commit made from a file that changed since is a conflict: nothing is written.
pub async fn commit_compare_and_set(parts: ScopeParts) {
    parts
        .journal
        .append_one(NewEntry::text("- fact"))
        .await
        .unwrap();
    let lease = parts
        .lease
        .try_acquire("dream", 60 * SECOND)
        .await
        .unwrap()
        .unwrap();
    let first = parts
        .documents
        .write(Document::Memory, "# Memory\n", Expected::Absent)
        .await
        .unwrap();
    // Someone edits the file while the run thinks.
    parts
        .documents
        .write(
            Document::Memory,
            "# Memory\n- edited by hand\n",
            Expected::Version(first),
        )
        .await
        .unwrap();
    let error = parts
        .commit
        .commit(&MemoryChange {
            fence: lease.fence,
            files: vec![
                FileChange {
                    file: MemoryFile::Document(Document::User),
                    expected: Expected::Absent,
                    text: Some("# User\n".into()),
                },
                FileChange {
                    file: MemoryFile::Document(Document::Memory),
                    expected: Expected::Version(first),
                    text: Some("# Memory\n- from the run\n".into()),
                },
            ],
            cursor: Some(1),
            version: None,
            time: minute(1),
        })
        .await
        .unwrap_err();
    assert!(matches!(error, MemoryError::Conflict { .. }), "{error}");
    assert_eq!(
        parts
            .documents
            .read_text(Document::Memory)
            .await
            .unwrap()
            .as_deref(),
        Some("# Memory\n- edited by hand\n")
    );
    assert_eq!(parts.documents.read(Document::User).await.unwrap(), None);
    assert_eq!(parts.journal.dream_cursor().await.unwrap(), 0);
}

/// The cursor a commit moves never passes the journal's latest cursor.
pub async fn commit_cursor_bounded(parts: ScopeParts) {
    parts
        .journal
        .append_one(NewEntry::text("- one"))
        .await
        .unwrap();
    let lease = parts
        .lease
        .try_acquire("dream", 60 * SECOND)
        .await
        .unwrap()
        .unwrap();
    parts
        .commit
        .commit(&MemoryChange {
            fence: lease.fence,
            files: Vec::new(),
            cursor: Some(9),
            version: None,
            time: minute(1),
        })
        .await
        .unwrap();
    assert_eq!(parts.journal.dream_cursor().await.unwrap(), 1);
}
