//! A Dream process killed (SIGABRT: no unwinding, no destructors) at each point of applying
//! a finished run: before any file, between files, after the files, after the version;
//! and while waiting for the model. A fresh process then finds files, cursor and
//! repository consistent, and the lease free.

use crate::support::WriteAny as _;
use nanobot_memory_store::MemoryDocumentsExt as _;
use std::process::Command;
use std::sync::Arc;

use nanobot_dream::{Dream, RunStatus, Trigger};
use nanobot_llm_port::Utf8Bytes;
use nanobot_llm_port::testing::ScriptedLlm;
use nanobot_memory_store::{
    AuxFile, Compaction, Document, FileDocuments, FileJournal, FileLease, GitVersions,
    HistoryJournal, HistoryJournalExt, JournalEntry, MemoryDocuments, MemoryError, MemoryVersions,
    NewEntry,
};

use crate::support::{TestClock, config, edit, script, write};

const WORKSPACE: &str = "DREAM_KILL_WORKSPACE";
const POINT: &str = "DREAM_KILL_POINT";

/// Counts writes and aborts the process at the chosen one.
struct Killer {
    point: String,
    writes: std::sync::atomic::AtomicUsize,
}

impl Killer {
    fn write(&self) {
        let n = self
            .writes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if self.point == format!("write:{n}") {
            std::process::abort();
        }
    }
}

struct Docs(FileDocuments, Arc<Killer>);
struct Journal(FileJournal, Arc<Killer>);

#[async_trait::async_trait]
impl MemoryDocuments for Docs {
    async fn read(
        &self,
        d: Document,
    ) -> Result<Option<nanobot_memory_store::DocumentText>, MemoryError> {
        self.0.read(d).await
    }
    async fn write(
        &self,
        d: Document,
        t: &str,
        e: nanobot_memory_store::Expected,
    ) -> Result<nanobot_memory_store::DocVersion, MemoryError> {
        self.1.write();
        self.0.write(d, t, e).await
    }
    async fn skills(&self) -> Result<nanobot_memory_store::SkillSet, MemoryError> {
        self.0.skills().await
    }
    async fn read_skill(
        &self,
        n: &str,
    ) -> Result<Option<nanobot_memory_store::DocumentText>, MemoryError> {
        self.0.read_skill(n).await
    }
    async fn write_skill(
        &self,
        n: &str,
        t: &str,
        e: nanobot_memory_store::Expected,
    ) -> Result<nanobot_memory_store::DocVersion, MemoryError> {
        self.1.write();
        self.0.write_skill(n, t, e).await
    }
    async fn delete_skill(
        &self,
        n: &str,
        e: nanobot_memory_store::Expected,
    ) -> Result<bool, MemoryError> {
        self.0.delete_skill(n, e).await
    }
    async fn read_aux(&self, f: AuxFile) -> Result<Option<String>, MemoryError> {
        self.0.read_aux(f).await
    }
    async fn write_aux(&self, f: AuxFile, t: &str) -> Result<(), MemoryError> {
        self.0.write_aux(f, t).await
    }
    async fn stamp(&self) -> Result<Option<nanobot_memory_store::DocumentsStamp>, MemoryError> {
        self.0.stamp().await
    }
    fn capabilities(&self) -> nanobot_memory_store::DocumentCapabilities {
        self.0.capabilities()
    }
}

#[async_trait::async_trait]
impl HistoryJournal for Journal {
    async fn append(&self, e: &[NewEntry<'_>]) -> Result<Vec<u64>, MemoryError> {
        self.0.append(e).await
    }
    async fn read_since(&self, c: u64, l: Option<usize>) -> Result<Vec<JournalEntry>, MemoryError> {
        self.0.read_since(c, l).await
    }
    async fn read_last(&self, n: usize) -> Result<Vec<JournalEntry>, MemoryError> {
        self.0.read_last(n).await
    }
    async fn latest_cursor(&self) -> Result<u64, MemoryError> {
        self.0.latest_cursor().await
    }
    async fn dream_cursor(&self) -> Result<u64, MemoryError> {
        self.0.dream_cursor().await
    }
    async fn set_dream_cursor(&self, c: u64) -> Result<(), MemoryError> {
        if self.1.point == "cursor" {
            std::process::abort();
        }
        self.0.set_dream_cursor(c).await
    }
    async fn compact(&self, m: usize) -> Result<Compaction, MemoryError> {
        self.0.compact(m).await
    }
    async fn remove_entries(&self, cursors: &[u64]) -> Result<usize, MemoryError> {
        self.0.remove_entries(cursors).await
    }
    fn capabilities(&self) -> nanobot_memory_store::JournalCapabilities {
        self.0.capabilities()
    }
}

fn dream_over(ws: &std::path::Path, llm: ScriptedLlm, killer: Arc<Killer>) -> Dream {
    Dream::new(
        config(),
        Arc::new(llm),
        nanobot_dream::DreamStores::stepwise(
            Arc::new(Journal(FileJournal::open(ws).unwrap(), killer.clone())),
            Arc::new(Docs(FileDocuments::open(ws).unwrap(), killer)),
            Ok(Arc::new(GitVersions::open(ws).unwrap()) as Arc<dyn MemoryVersions>),
            Arc::new(FileLease::open(ws).unwrap()),
        ),
        TestClock::new(),
        Arc::new(Utf8Bytes),
    )
    .unwrap()
}

/// The child: runs Dream on the workspace it is given and dies at the chosen point.
#[tokio::test]
#[ignore = "run by killed::a_killed_run_leaves_memory_consistent in a child process"]
async fn child_process() {
    let (Ok(ws), Ok(point)) = (std::env::var(WORKSPACE), std::env::var(POINT)) else {
        return;
    };
    let killer = Arc::new(Killer {
        point: point.clone(),
        writes: Default::default(),
    });
    let llm = if point == "model" {
        ScriptedLlm::new().then_tool_call("c", "edit_file", serde_json::json!({"path": "SOUL.md", "old_text": "- Helpful", "new_text": "- Precise"})).then_hang()
    } else {
        script(
            &[&[
                edit("SOUL.md", "- Helpful", "- Precise"),
                write("USER.md", "# User\n"),
                write("skills/a/SKILL.md", "---\nname: a\n---\n"),
            ]],
            "done",
        )
    };
    let dream = dream_over(std::path::Path::new(&ws), llm, killer);
    if point == "model" {
        // Die while the model is still thinking.
        std::thread::spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(300));
            std::process::abort();
        });
    }
    let _ = dream.run(Trigger::Manual).await;
    // Reaching here means the kill point was never hit: fail loudly.
    std::process::exit(3);
}

#[tokio::test]
async fn a_killed_run_leaves_memory_consistent() {
    for point in ["model", "write:0", "write:1", "write:2", "cursor"] {
        let ws = nanobot_bench_workload::testing::TempDir::new("dream-killed");
        let docs = FileDocuments::open(ws.path()).unwrap();
        docs.write_doc_any(Document::Soul, "# Soul\n\n- Helpful\n")
            .await
            .unwrap();
        FileJournal::open(ws.path())
            .unwrap()
            .append_one(NewEntry::text("- [permanent] be precise"))
            .await
            .unwrap();

        let status = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "killed::child_process",
                "--ignored",
                "--nocapture",
            ])
            .env(WORKSPACE, ws.path())
            .env(POINT, point)
            .output()
            .unwrap();
        assert!(
            !status.status.success() && status.status.code() != Some(3),
            "{point}: the child was not killed ({:?})",
            status.status
        );

        // A new process: the lease is free, and the first run finishes or discards.
        let killer = Arc::new(Killer {
            point: String::new(),
            writes: Default::default(),
        });
        let dream = dream_over(
            ws.path(),
            ScriptedLlm::new().then_text("nothing new"),
            killer,
        );
        let report = dream.run(Trigger::Scheduled).await.unwrap();
        let journal = FileJournal::open(ws.path()).unwrap();
        let versions = GitVersions::open(ws.path()).unwrap();
        let soul = docs.read_text(Document::Soul).await.unwrap().unwrap();
        let cursor = journal.dream_cursor().await.unwrap();
        let head = versions.log(1).await.unwrap();
        if point == "model" {
            // Nothing was applied; the batch is simply done again by the next run.
            assert_eq!(soul, "# Soul\n\n- Helpful\n", "{point}");
            assert_eq!(report.status, RunStatus::Completed, "{point}");
            assert_eq!(report.batch, Some((1, 1, 1)));
            assert_eq!(cursor, 1);
            continue;
        }
        assert_eq!(
            report.status,
            RunStatus::NothingToDo,
            "{point}: the interrupted run's batch is done"
        );
        assert_eq!(soul, "# Soul\n\n- Precise\n", "{point}");
        assert_eq!(
            docs.read_text(Document::User).await.unwrap().as_deref(),
            Some("# User\n"),
            "{point}"
        );
        assert!(docs.read_skill("a").await.unwrap().is_some(), "{point}");
        assert_eq!(cursor, 1, "{point}");
        let files = versions.files_at(&head[0].id).await.unwrap();
        assert_eq!(
            files.get("SOUL.md").map(String::as_str),
            Some("# Soul\n\n- Precise\n"),
            "{point}"
        );
        assert_eq!(
            files.get("memory/.dream_cursor").map(String::as_str),
            Some("1"),
            "{point}"
        );
        assert!(
            head[0]
                .message
                .starts_with("dream: manual run, journal entries 1-1"),
            "{point}: {}",
            head[0].message
        );
        assert_eq!(
            docs.read_aux(AuxFile::DreamPending)
                .await
                .unwrap()
                .as_deref(),
            Some(""),
            "{point}"
        );
    }
}
