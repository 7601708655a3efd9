//! nanobot-turn's tests: the turn over scoped memory.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use nanobot_llm_port::{Cl100kBase, SystemClock};
use nanobot_turn::InMemoryBackend;

/// Acceptance 2 and 3 of issue 14 on the in-memory backend.
#[tokio::test]
async fn the_in_memory_backend_keeps_scopes_apart() {
    let backend = Arc::new(InMemoryBackend::new(
        Arc::new(SystemClock),
        Arc::new(Cl100kBase),
    ));
    nanobot_turn::conformance::isolation_suite(backend).await;
}

#[test]
fn every_port_method_has_an_isolation_case() {
    assert_eq!(
        nanobot_turn::conformance::uncovered_methods(),
        Vec::<String>::new()
    );
    let methods = nanobot_turn::conformance::port_methods();
    assert!(methods.iter().all(|(_, m)| !m.is_empty()), "{methods:?}");
}

/// A backend that forgets the scope (every scope gets one set of stores): the suite must
/// catch it, or it proves nothing.
struct ForgetsTheScope(InMemoryBackend);

#[async_trait::async_trait]
impl nanobot_turn::MemoryBackend for ForgetsTheScope {
    async fn open(
        &self,
        _scope: &nanobot_memory_scope::ScopeKey,
    ) -> Result<nanobot_turn::ScopeStores, nanobot_turn::TurnError> {
        self.0
            .open(&nanobot_memory_scope::ScopeKey::local(
                nanobot_memory_scope::Subject::Agent,
            ))
            .await
    }
    async fn scopes_with_dream_work(
        &self,
    ) -> Result<Vec<nanobot_memory_scope::ScopeKey>, nanobot_turn::TurnError> {
        self.0.scopes_with_dream_work().await
    }
    fn shared_prompt_files(&self) -> Arc<dyn nanobot_prompt_inputs::PromptFiles> {
        self.0.shared_prompt_files()
    }
}

#[tokio::test]
async fn the_suite_catches_a_backend_that_shares_one_memory() {
    let backend = Arc::new(ForgetsTheScope(InMemoryBackend::new(
        Arc::new(SystemClock),
        Arc::new(Cl100kBase),
    )));
    let outcome = tokio::spawn(nanobot_turn::conformance::isolation_suite(backend)).await;
    let panic = outcome.expect_err("the suite passed a backend that mixes two users' memory");
    assert!(panic.is_panic());
}
mod scopes;
mod tools;
