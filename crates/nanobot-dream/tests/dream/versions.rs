//! Versioned memory: log, show, restore (and undoing a restore), edits made outside Dream,
//! crash recovery, and the whole stack on files with a real git repository.

use crate::support::WriteAny as _;
use nanobot_memory_store::MemoryDocumentsExt as _;
use std::sync::Arc;

use nanobot_dream::{DreamError, Trigger, format};
use nanobot_llm_port::Utf8Bytes;
use nanobot_llm_port::testing::ScriptedLlm;
use nanobot_memory_store::{
    AuxFile, Document, FileDocuments, FileJournal, FileLease, GitVersions, HistoryJournal,
    HistoryJournalExt, MemoryDocuments, MemoryError, MemoryVersions, NewEntry,
};

use crate::support::{TestClock, config, edit, fixture, script, write};

#[tokio::test]
async fn log_show_and_restore_with_undo() {
    let f = fixture(
        script(&[&[edit("SOUL.md", "- Helpful", "- Precise"), write("skills/tea/SKILL.md", "---\nname: tea\ndescription: Tea\n---\nBrew.\n")]], "one")
            .then(nanobot_llm_port::LlmResponse::tool_calls(vec![nanobot_llm_port::ToolCall::with_json("c", "edit_file", &serde_json::json!({"path": "memory/MEMORY.md", "old_text": "- Project X active", "new_text": "- Project X done"}))]))
            .then_text("two"),
    );
    f.seed().await;
    f.append(&["- [permanent] be precise"]).await;
    let first = f.dream.run(Trigger::Manual).await.unwrap().version.unwrap();
    f.clock.advance(chrono::Duration::minutes(5));
    f.append(&["- [correction] project X is done"]).await;
    let second = f
        .dream
        .run(Trigger::Scheduled)
        .await
        .unwrap()
        .version
        .unwrap();
    assert_eq!(f.cursor().await, 2);

    let log = f.dream.log(10).await.unwrap();
    assert_eq!(log.len(), 3);
    insta::assert_snapshot!(
        "log",
        format::log(&log)
            .replace(first.short_id(), "<first>")
            .replace(second.short_id(), "<second>")
            .replace(log[2].short_id(), "<initial>")
    );
    let (shown, diffs) = f.dream.show(&first.id[..6]).await.unwrap();
    assert_eq!(shown.id, first.id);
    insta::assert_snapshot!(
        "show",
        format::show(&shown, &diffs).replace(first.short_id(), "<first>")
    );

    // Restore to before the first run: both runs' changes and the cursor go back.
    let restored = f.dream.restore(first.short_id()).await.unwrap();
    assert_eq!(
        f.doc(Document::Soul).await.unwrap(),
        "# Soul\n\n- Helpful\n"
    );
    assert_eq!(
        f.doc(Document::Memory).await.unwrap(),
        "# Memory\n\n- Project X active\n"
    );
    assert_eq!(f.documents.read_skill("tea").await.unwrap(), None);
    assert_eq!(f.cursor().await, 0);
    let restore_version = restored.version.clone().unwrap();
    assert!(
        restore_version
            .message
            .starts_with(&format!("dream: restore to before {}", first.short_id()))
    );
    let reply = format::restore_reply(&restored);
    assert!(reply.starts_with(&format!(
        "Restored Dream memory to the state before `{}`.",
        first.short_id()
    )));
    assert!(reply.contains("`SOUL.md`") && reply.contains("`skills/tea/SKILL.md`"));

    // The restore is a version of its own: restoring it undoes the restore.
    f.dream.restore(restore_version.short_id()).await.unwrap();
    assert_eq!(
        f.doc(Document::Soul).await.unwrap(),
        "# Soul\n\n- Precise\n"
    );
    assert_eq!(
        f.doc(Document::Memory).await.unwrap(),
        "# Memory\n\n- Project X done\n"
    );
    assert!(f.documents.read_skill("tea").await.unwrap().is_some());
    assert_eq!(f.cursor().await, 2);
}

#[tokio::test]
async fn only_dream_versions_with_a_past_can_be_restored() {
    let f = fixture(script(
        &[&[edit("SOUL.md", "- Helpful", "- Precise")]],
        "done",
    ));
    f.seed().await;
    f.append(&["x"]).await;
    f.dream.run(Trigger::Manual).await.unwrap();
    let log = f.dream.log(10).await.unwrap();
    let initial = log.last().unwrap();
    let err = f.dream.restore(initial.short_id()).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("only Dream versions can be restored"),
        "{err}"
    );
    for bad in ["zz", "abc", "ffffffff"] {
        assert!(
            matches!(
                f.dream.restore(bad).await,
                Err(DreamError::Memory(MemoryError::UnknownVersion { .. }))
            ),
            "{bad}"
        );
    }
}

#[tokio::test]
async fn edits_outside_dream_get_their_own_version() {
    let f = fixture(script(&[], "ok").then_text("ok"));
    f.seed().await;
    f.append(&["one"]).await;
    f.dream.run(Trigger::Manual).await.unwrap();
    f.documents
        .write_doc_any(Document::User, "# User\n\nEdited by hand.\n")
        .await
        .unwrap();
    f.append(&["two"]).await;
    let report = f.dream.run(Trigger::Manual).await.unwrap();
    let outside = report.outside_edits.unwrap();
    assert!(
        outside
            .message
            .starts_with("memory: edits made outside Dream\n\nUSER.md: +3 -0")
    );
    assert_eq!(report.version, None);
}

/// A document store that fails the n-th write once, as a crash in the middle of applying.
struct Crashing {
    inner: FileDocuments,
    writes_left: std::sync::Mutex<Option<usize>>,
}

impl Crashing {
    fn tick(&self) -> Result<(), MemoryError> {
        let mut left = self.writes_left.lock().unwrap();
        match *left {
            Some(0) => {
                *left = None;
                Err(MemoryError::backend("crash"))
            }
            Some(n) => {
                *left = Some(n - 1);
                Ok(())
            }
            None => Ok(()),
        }
    }
}

#[async_trait::async_trait]
impl MemoryDocuments for Crashing {
    async fn read(
        &self,
        d: Document,
    ) -> Result<Option<nanobot_memory_store::DocumentText>, MemoryError> {
        self.inner.read(d).await
    }
    async fn write(
        &self,
        d: Document,
        t: &str,
        e: nanobot_memory_store::Expected,
    ) -> Result<nanobot_memory_store::DocVersion, MemoryError> {
        self.tick()?;
        self.inner.write(d, t, e).await
    }
    async fn skills(&self) -> Result<nanobot_memory_store::SkillSet, MemoryError> {
        self.inner.skills().await
    }
    async fn read_skill(
        &self,
        n: &str,
    ) -> Result<Option<nanobot_memory_store::DocumentText>, MemoryError> {
        self.inner.read_skill(n).await
    }
    async fn write_skill(
        &self,
        n: &str,
        t: &str,
        e: nanobot_memory_store::Expected,
    ) -> Result<nanobot_memory_store::DocVersion, MemoryError> {
        self.tick()?;
        self.inner.write_skill(n, t, e).await
    }
    async fn delete_skill(
        &self,
        n: &str,
        e: nanobot_memory_store::Expected,
    ) -> Result<bool, MemoryError> {
        self.inner.delete_skill(n, e).await
    }
    async fn read_aux(&self, f: AuxFile) -> Result<Option<String>, MemoryError> {
        self.inner.read_aux(f).await
    }
    async fn write_aux(&self, f: AuxFile, t: &str) -> Result<(), MemoryError> {
        self.inner.write_aux(f, t).await
    }
    async fn stamp(&self) -> Result<Option<nanobot_memory_store::DocumentsStamp>, MemoryError> {
        self.inner.stamp().await
    }
    fn capabilities(&self) -> nanobot_memory_store::DocumentCapabilities {
        self.inner.capabilities()
    }
}

// A run killed while applying its changes: the next start finishes them, and files,
// cursor and repository agree, whichever write the crash hit.
#[tokio::test]
async fn a_crash_while_applying_is_finished_on_the_next_start() {
    for crash_at in 0..3 {
        let ws = nanobot_bench_workload::testing::TempDir::new("dream-crash");
        let clock = TestClock::new();
        let journal = Arc::new(FileJournal::open(ws.path()).unwrap());
        let documents = Arc::new(Crashing {
            inner: FileDocuments::open(ws.path()).unwrap(),
            writes_left: std::sync::Mutex::new(None),
        });
        documents
            .inner
            .write_doc_any(Document::Soul, "# Soul\n\n- Helpful\n")
            .await
            .unwrap();
        journal
            .append_one(NewEntry::text("- [permanent] precise"))
            .await
            .unwrap();
        let versions = Arc::new(GitVersions::open(ws.path()).unwrap());
        let make = |llm: ScriptedLlm| {
            nanobot_dream::Dream::new(
                config(),
                Arc::new(llm),
                nanobot_dream::DreamStores::stepwise(
                    journal.clone(),
                    documents.clone(),
                    Ok(versions.clone() as Arc<dyn MemoryVersions>),
                    Arc::new(FileLease::open(ws.path()).unwrap()),
                ),
                clock.clone(),
                Arc::new(Utf8Bytes),
            )
            .unwrap()
        };
        let dream = make(script(
            &[&[
                edit("SOUL.md", "- Helpful", "- Precise"),
                write("USER.md", "# User\n"),
                write("skills/a/SKILL.md", "---\nname: a\n---\n"),
            ]],
            "done",
        ));
        *documents.writes_left.lock().unwrap() = Some(crash_at);
        let err = dream.run(Trigger::Manual).await.unwrap_err();
        assert!(err.to_string().contains("crash"), "{err}");
        assert_eq!(
            journal.dream_cursor().await.unwrap(),
            0,
            "crash at {crash_at}: the cursor must not move first"
        );
        assert!(
            std::fs::read_to_string(ws.path().join("memory/.dream_pending.json"))
                .unwrap()
                .contains("Precise")
        );

        // The next start (any run) finishes the change before doing anything else.
        let again = make(ScriptedLlm::new());
        let report = again.run(Trigger::Scheduled).await.unwrap();
        assert_eq!(report.status, nanobot_dream::RunStatus::NothingToDo);
        assert_eq!(
            documents.read_text(Document::Soul).await.unwrap().unwrap(),
            "# Soul\n\n- Precise\n"
        );
        assert_eq!(
            documents.read_text(Document::User).await.unwrap().unwrap(),
            "# User\n"
        );
        assert!(documents.read_skill("a").await.unwrap().is_some());
        assert_eq!(journal.dream_cursor().await.unwrap(), 1);
        let head = versions.log(1).await.unwrap().remove(0);
        assert!(
            head.message
                .starts_with("dream: manual run, journal entries 1-1"),
            "{}",
            head.message
        );
        let files = versions.files_at(&head.id).await.unwrap();
        assert_eq!(files.get("SOUL.md").unwrap(), "# Soul\n\n- Precise\n");
        assert_eq!(files.get("memory/.dream_cursor").unwrap(), "1");
        assert_eq!(
            std::fs::read_to_string(ws.path().join("memory/.dream_pending.json")).unwrap(),
            ""
        );
    }
}

// The whole stack on files: the repository is readable by git.
#[tokio::test]
async fn on_files_with_a_real_git_repository() {
    let ws = nanobot_bench_workload::testing::TempDir::new("dream-files");
    let clock = TestClock::new();
    let journal = Arc::new(FileJournal::open(ws.path()).unwrap());
    let documents = Arc::new(FileDocuments::open(ws.path()).unwrap());
    let versions = Arc::new(GitVersions::open(ws.path()).unwrap());
    let dream = nanobot_dream::Dream::new(
        config(),
        Arc::new(script(
            &[&[write("memory/MEMORY.md", "# Memory\n\n- Ada likes tea\n")]],
            "done",
        )),
        nanobot_dream::DreamStores::stepwise(
            journal.clone(),
            documents.clone(),
            Ok(versions.clone() as Arc<dyn MemoryVersions>),
            Arc::new(FileLease::open(ws.path()).unwrap()),
        ),
        clock,
        Arc::new(Utf8Bytes),
    )
    .unwrap();
    journal
        .append_one(NewEntry::text("- [permanent] Ada likes tea"))
        .await
        .unwrap();
    let report = dream.run(Trigger::Manual).await.unwrap();
    let version = report.version.unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.path().join("memory/MEMORY.md")).unwrap(),
        "# Memory\n\n- Ada likes tea\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("memory/.dream_cursor"))
            .unwrap()
            .trim(),
        "1"
    );
    if !nanobot_bench_workload::testing::git_program("git reads Dream's versions") {
        return;
    }
    let out = std::process::Command::new("git")
        .args([
            "--git-dir",
            versions.dir().to_str().unwrap(),
            "log",
            "--format=%H %s",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with(&format!(
            "{} dream: manual run, journal entries 1-1",
            version.id
        )),
        "{text}"
    );
    assert!(text.contains(" memory: initial state"));
}
