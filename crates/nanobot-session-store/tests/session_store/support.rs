//! Helpers shared by the test modules.

use std::sync::Arc;

use chrono::{NaiveDate, NaiveDateTime};
use nanobot_llm_port::{Cl100kBase, Clock, TokenCounter};
use nanobot_session_store::{FileSessionStore, FileStoreOptions, SessionKey, StoredMessage};
use serde_json::{Value, json};

pub(crate) fn at(second: u32) -> NaiveDateTime {
    NaiveDate::from_ymd_opt(2026, 3, 4)
        .unwrap()
        .and_hms_opt(5, 6, second % 60)
        .unwrap()
}

pub(crate) fn key(name: &str) -> SessionKey {
    SessionKey::new(name).unwrap()
}

pub(crate) fn msg(value: Value) -> StoredMessage {
    StoredMessage::from_map(value.as_object().cloned().unwrap())
}

pub(crate) fn u(text: &str) -> StoredMessage {
    msg(json!({"role": "user", "content": text}))
}

pub(crate) fn a(text: &str) -> StoredMessage {
    msg(json!({"role": "assistant", "content": text}))
}

/// `TT(p, i)`: an assistant with two tool calls and their two results.
pub(crate) fn tt(prefix: &str, i: usize) -> Vec<StoredMessage> {
    let ids = [format!("{prefix}_{i}_a"), format!("{prefix}_{i}_b")];
    let calls: Vec<Value> = ids
        .iter()
        .map(|id| json!({"id": id, "type": "function", "function": {"name": "exec", "arguments": "{}"}}))
        .collect();
    let mut out = vec![msg(
        json!({"role": "assistant", "content": "", "tool_calls": calls}),
    )];
    for id in &ids {
        out.push(msg(
            json!({"role": "tool", "content": "ok", "tool_call_id": id, "name": "exec"}),
        ));
    }
    out
}

pub(crate) fn contents(history: &[nanobot_session_store::Replayed]) -> Vec<String> {
    history
        .iter()
        .map(|m| match &m["content"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect()
}

pub(crate) fn counter() -> Arc<dyn TokenCounter> {
    Arc::new(Cl100kBase)
}

/// A clock frozen at a fixed time; sleeping is not used by these tests.
#[derive(Debug)]
pub(crate) struct FixedClock;

impl Clock for FixedClock {
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        chrono::DateTime::parse_from_rfc3339("2026-03-04T05:06:07Z")
            .unwrap()
            .to_utc()
    }

    fn sleep(&self, _duration: std::time::Duration) -> nanobot_llm_port::BoxFuture<'static, ()> {
        Box::pin(std::future::ready(()))
    }
}

pub(crate) fn file_store(dir: &std::path::Path) -> FileSessionStore {
    FileSessionStore::open(dir, {
        let mut value = FileStoreOptions::default();
        value.clock = Arc::new(FixedClock);
        value
    })
    .unwrap()
}

pub(crate) use nanobot_bench_workload::testing::TempDir;
