//! Two instances (their own managers, journals and Consolidators, as two processes would
//! have) over one workspace archive the same idle session at once: the slice is journaled
//! once, the pointer ends at the message count, and the loser says its archive was
//! superseded.

use std::sync::Arc;

use async_trait::async_trait;
use nanobot_bench_workload::testing::TempDir;
use nanobot_llm_port::{Capabilities, LlmClient, LlmError, LlmRequest, LlmResponse, SystemClock};
use nanobot_memory_core::{Archived, Consolidator, PlainPrompt};
use nanobot_memory_store::{FileJournal, HistoryJournal, TwoStepArchive};
use nanobot_session_store::{FileSessionStore, SessionKey, SessionManager};

use crate::support::{config, flat_counter, turns};

/// A model that answers only when both instances have asked: each read the session before
/// either commits, every round.
struct Together(Arc<tokio::sync::Barrier>);

#[async_trait]
impl LlmClient for Together {
    async fn complete(&self, _request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        self.0.wait().await;
        Ok(LlmResponse::text(
            "- [durable] the user asked six questions",
        ))
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::new(100_000)
    }
}

fn instance(
    workspace: &std::path::Path,
    barrier: &Arc<tokio::sync::Barrier>,
) -> (Arc<SessionManager>, Consolidator) {
    let store = FileSessionStore::open_workspace(workspace, Default::default()).unwrap();
    let sessions = Arc::new(SessionManager::new(
        Arc::new(store),
        Arc::new(SystemClock),
        Arc::new(nanobot_llm_port::Cl100kBase),
    ));
    let journal = Arc::new(FileJournal::open(workspace).unwrap());
    let archive = Arc::new(TwoStepArchive::new(
        journal.clone(),
        sessions.store().clone(),
    ));
    let consolidator = Consolidator::new(
        config(100_000, 0.5),
        Arc::new(Together(barrier.clone())),
        journal,
        archive,
        sessions.clone(),
        Arc::new(PlainPrompt::default()),
        flat_counter(10),
    )
    .unwrap();
    (sessions, consolidator)
}

#[tokio::test]
async fn two_instances_archiving_one_session_journal_it_once() {
    for round in 0..20 {
        let ws = TempDir::new("two-instances");
        let key = SessionKey::new("telegram:42").unwrap();
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let (sessions, first) = instance(ws.path(), &barrier);
        let handle = sessions.get_or_create(&key).await.unwrap();
        for message in turns(6) {
            handle.add_message(message);
        }
        sessions.end_turn(&handle).await.unwrap();
        let (_, second) = instance(ws.path(), &barrier);
        let (a, b) = tokio::join!(first.compact_idle(&key), second.compact_idle(&key));
        let outcomes: Vec<Archived> = [a, b]
            .into_iter()
            .map(|r| r.unwrap().unwrap().outcome)
            .collect();
        let summaries = outcomes
            .iter()
            .filter(|o| matches!(o, Archived::Summary { .. }))
            .count();
        assert_eq!(summaries, 1, "round {round}: {outcomes:?}");
        assert!(
            outcomes.contains(&Archived::Superseded),
            "round {round}: {outcomes:?}"
        );
        let journal = FileJournal::open(ws.path()).unwrap();
        let entries = journal.read_since(0, None).await.unwrap();
        assert_eq!(entries.len(), 1, "round {round}: one entry per slice");
        assert_eq!(entries[0].message_range, Some((0, 6)));
        let fresh = instance(ws.path(), &barrier).0;
        let reloaded = fresh.get_or_create(&key).await.unwrap();
        assert_eq!(reloaded.last_consolidated(), 6, "round {round}");
    }
}
