//! The durability mapping: with `TurnEnd` (the default) and `None` message appends commit
//! without waiting for the disk and everything else waits; with `Always` appends wait too.
//! At a turn's end (`flush`) a `TurnEnd` store commits a write that waits, so the appends
//! before it are durable with it, and a stale caller is still told it is stale.

use std::time::Duration;

use nanobot_memory_scope::{ScopeKey, Subject};
use nanobot_session_store::{Append, SessionError, SessionKey, SessionStore, StoredMessage};
use nanobot_store_postgres::testing::{append_commit_mode, url};
use nanobot_store_postgres::{Durability, PgStore};
use sqlx::postgres::PgPoolOptions;

use crate::support::{available, store};

async fn store_with(durability: Durability) -> (PgStore, PgStore) {
    // The test schema (dropped with `keep`) opened again with the durability asked for.
    let keep = store().await;
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(30))
        .connect(&url().unwrap())
        .await
        .unwrap();
    let store = PgStore::with_pool_and_durability(pool, keep.schema().name(), durability)
        .await
        .unwrap();
    (keep, store)
}

async fn main_mode(store: &PgStore) -> String {
    sqlx::query_scalar("SHOW synchronous_commit")
        .fetch_one(&store.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn appends_wait_for_the_disk_only_when_asked() {
    if !available() {
        return;
    }
    let default = store().await;
    assert_eq!(default.durability(), Durability::TurnEnd);
    assert_eq!(append_commit_mode(&default).await, "off");
    assert_eq!(main_mode(&default).await, "on");

    let (_keep, always) = store_with(Durability::Always).await;
    assert_eq!(append_commit_mode(&always).await, "on");
    let (_keep, none) = store_with(Durability::None).await;
    assert_eq!(append_commit_mode(&none).await, "off");
}

#[tokio::test]
async fn a_turn_end_flush_keeps_the_revision_and_refuses_a_stale_caller() {
    if !available() {
        return;
    }
    for durability in [Durability::TurnEnd, Durability::None, Durability::Always] {
        let (_keep, store) = store_with(durability).await;
        let scope = store.scope(&ScopeKey::local(Subject::Agent)).await.unwrap();
        let key = SessionKey::new("cli:durable").unwrap();
        let first = scope
            .append(
                &key,
                None,
                Append {
                    messages: &[StoredMessage::user("one")],
                    meta: None,
                },
            )
            .await
            .unwrap();
        let second = scope
            .append(
                &key,
                Some(first),
                Append {
                    messages: &[StoredMessage::assistant("two")],
                    meta: None,
                },
            )
            .await
            .unwrap();
        assert_eq!(
            scope.flush(&key, second).await.unwrap(),
            second,
            "{durability:?}"
        );
        assert_eq!(scope.current_revision(&key).await.unwrap(), Some(second));
        match scope.flush(&key, first).await {
            Err(SessionError::Conflict { .. }) => {}
            other => panic!("{durability:?}: a stale flush gave {other:?}"),
        }
        let loaded = scope.load(&key).await.unwrap().unwrap();
        assert_eq!(loaded.session.messages().len(), 2);
        assert_eq!(loaded.revision, second);
    }
}
