//! A stalled file write in one session does not hold up another session's turn: the file
//! backend's blocking IO runs with the runtime's worker handed off (`OffWorker`).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nanobot_bench_workload::testing::TempDir;
use nanobot_fs_support::observe::{Observer, Op, watch};
use nanobot_llm_port::testing::ScriptedLlm;
use nanobot_memory::sessions::SessionKey;
use nanobot_memory::{Bot, Speaker};

/// How long the stalled write waits at most for the test to release it.
const STALL_LIMIT: Duration = Duration::from_secs(10);

/// Blocks the thread that writes the stalled session's file the first time it does, until
/// the test sets `release` (or [`STALL_LIMIT`] passes).
struct Stall {
    stem: String,
    stalled: AtomicBool,
    release: Arc<AtomicBool>,
}

impl Observer for Stall {
    fn before(&self, op: &Op<'_>) -> std::io::Result<Option<usize>> {
        let write = matches!(op, Op::Write { path, .. } if is_of(path, &self.stem));
        if write && !self.stalled.swap(true, Ordering::SeqCst) {
            // Bounded, so that without the hand-off (the only worker blocked here, timers
            // and all) the test fails instead of hanging.
            let started = std::time::Instant::now();
            while !self.release.load(Ordering::SeqCst) && started.elapsed() < STALL_LIMIT {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        Ok(None)
    }

    fn after(&self, _: &Op<'_>) {}
}

fn is_of(path: &Path, stem: &str) -> bool {
    path.file_stem().and_then(|s| s.to_str()) == Some(stem)
}

// One worker thread: without the hand-off, the stalled write would hold the only worker and
// every other task with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_stalled_write_in_one_session_does_not_hold_up_another() {
    let root = TempDir::new("assembly-stall");
    let workspace = root.path().canonicalize().unwrap();
    let bot = Arc::new(
        Bot::builder()
            .files(&workspace)
            .llm(Arc::new(ScriptedLlm::new().then_text("ok").then_text("ok")))
            .build()
            .await
            .unwrap(),
    );
    let release = Arc::new(AtomicBool::new(false));
    let stall = Arc::new(Stall {
        stem: SessionKey::new("cli:slow").unwrap().storage_stem(),
        stalled: AtomicBool::new(false),
        release: release.clone(),
    });
    let _watching = watch(&workspace, stall.clone());

    let slow_bot = bot.clone();
    let slow = tokio::spawn(async move {
        slow_bot
            .turn(&Speaker::anonymous(), "cli:slow", "I write slowly")
            .await
    });
    while !stall.stalled.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let fast_bot = bot.clone();
    let fast = tokio::spawn(async move {
        fast_bot
            .turn(&Speaker::anonymous(), "cli:fast", "and I do not")
            .await
    });
    // The other session's whole turn (its own writes included) ends while the first is
    // still stalled.
    let fast = fast.await.unwrap().unwrap();
    let slow_still_stalled = !slow.is_finished();
    release.store(true, Ordering::SeqCst);
    assert!(
        slow_still_stalled,
        "the other session's turn waited for the stalled write"
    );
    assert_eq!(fast.answer, "ok");
    let slow = slow.await.unwrap().unwrap();
    assert_eq!(slow.answer, "ok");
}
