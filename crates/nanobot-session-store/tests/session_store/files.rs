//! The file backend: nanobot-ai's format, append-only writes, repairs, bad input, several
//! writers, nanobot-ai's own layout.

use std::fs;
use std::sync::Arc;

use nanobot_session_store::{
    Durability, FileSessionStore, FileStoreOptions, Repair, Session, SessionError, SessionManager,
    SessionStore, SessionStoreExt,
};
use serde_json::{Value, json};

use nanobot_bench_workload::testing::{peer_python, run_peer};

use crate::support::{FixedClock, TempDir, a, at, counter, file_store, key, u};

fn lines(path: &std::path::Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn format_is_nanobots_line_for_line() {
    let dir = TempDir::new("format");
    let store = file_store(dir.path());
    let k = key("test:1");
    let mut session = Session::new(k.clone(), at(1));
    session.add_message(u("héllo 日本"), at(2));
    session.add_message(a("hi"), at(3));
    session.metadata_mut().insert("title".into(), json!("T"));
    store.save_changes(&mut session, None).await.unwrap();

    let path = store.path_of(&k);
    assert_eq!(path.file_name().unwrap(), "dGVzdDox.jsonl");
    let lines = lines(&path);
    assert_eq!(lines.len(), 3);
    assert_eq!(
        lines[0].trim_end(),
        r#"{"_type": "metadata", "key": "test:1", "created_at": "2026-03-04T05:06:01", "updated_at": "2026-03-04T05:06:03", "metadata": {"title": "T"}, "last_archived": 0, "last_consolidated": 0, "_nanobot_rs": {"messages": 2, "bytes": 797, "sum": "0099b97fd25a8e02"}}"#
    );
    assert_eq!(
        lines[1],
        r#"{"role": "user", "content": "héllo 日本", "timestamp": "2026-03-04T05:06:02"}"#
    );
    // Every line parses as JSON on its own, padding included (nanobot-ai reads line 1 alone).
    for line in &lines {
        assert!(serde_json::from_str::<Value>(line).unwrap().is_object());
    }
    assert!(
        dir.path().read_dir().unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .ends_with(".tmp"))
    );
}

#[tokio::test]
async fn saving_one_message_appends_one_line() {
    let dir = TempDir::new("append");
    let store = file_store(dir.path());
    let k = key("cli:append");
    let mut session = Session::new(k.clone(), at(0));
    session.add_message(u("first"), at(0));
    let mut revision = store
        .save_changes(&mut session, None)
        .await
        .unwrap()
        .unwrap();
    let path = store.path_of(&k);
    let before = fs::read(&path).unwrap();
    // Each message moves updated_at, which is not worth a record: one line per message.
    for i in 0..5 {
        session.add_message(u(&format!("next {i}")), at(i + 1));
        revision = store
            .save_changes(&mut session, Some(revision))
            .await
            .unwrap()
            .unwrap();
    }
    let after = fs::read(&path).unwrap();
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "earlier bytes are never rewritten"
    );
    let added = String::from_utf8(after[before.len()..].to_vec()).unwrap();
    assert_eq!(added.lines().count(), 5);
    assert!(added.starts_with(r#"{"role": "user", "content": "next 0""#));

    // The turn ends: line 1 takes the newest updated_at in place, and a reload sees it.
    // Line 1 is the metadata's only copy here, and spans two sectors: the record goes to the
    // end first, so a power loss that tears line 1 loses nothing.
    let flushed = store.flush(&k, revision).await.unwrap();
    let mirror = &fs::read_to_string(&path).unwrap()[after.len()..];
    assert_eq!(flushed.offset, revision.offset + mirror.len() as u64);
    assert!(mirror.starts_with(r#"{"_type": "metadata""#), "{mirror}");
    assert!(
        mirror.contains(r#""updated_at": "2026-03-04T05:06:05""#),
        "{mirror}"
    );
    let line1: Value = serde_json::from_str(&lines(&path)[0]).unwrap();
    assert_eq!(line1["updated_at"], "2026-03-04T05:06:05");
    // With a copy after it, later flushes rewrite line 1 in place and append nothing.
    session.add_message(u("last"), at(6));
    let revision = store
        .save_changes(&mut session, Some(flushed))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(store.flush(&k, revision).await.unwrap(), revision);
    let line1: Value = serde_json::from_str(&lines(&path)[0]).unwrap();
    assert_eq!(line1["updated_at"], "2026-03-04T05:06:06");
    let loaded = store.load(&k).await.unwrap().unwrap();
    assert_eq!(loaded.session, session);
}

#[tokio::test]
async fn metadata_changes_append_records_and_flush_updates_line_one_in_place() {
    let dir = TempDir::new("flush");
    let store = file_store(dir.path());
    let k = key("cli:flush");
    let mut session = Session::new(k.clone(), at(0));
    session.add_message(u("q"), at(1));
    let mut revision = store
        .save_changes(&mut session, None)
        .await
        .unwrap()
        .unwrap();
    session
        .metadata_mut()
        .insert("title".into(), json!("Renamed"));
    session.set_last_consolidated(1).unwrap();
    revision = store
        .save_changes(&mut session, Some(revision))
        .await
        .unwrap()
        .unwrap();
    let path = store.path_of(&k);
    let appended = lines(&path);
    assert_eq!(appended.len(), 3, "the new metadata is appended");
    assert!(!appended[0].contains("Renamed"));
    // Our reader takes the last record already.
    assert_eq!(
        store
            .load(&k)
            .await
            .unwrap()
            .unwrap()
            .session
            .meta()
            .metadata["title"],
        "Renamed"
    );

    let flushed = store.flush(&k, revision).await.unwrap();
    assert_eq!(flushed, revision, "an in-place update keeps the revision");
    let line1: Value = serde_json::from_str(&lines(&path)[0]).unwrap();
    assert_eq!(line1["metadata"]["title"], "Renamed");
    assert_eq!(line1["last_consolidated"], 1);
    assert_eq!(line1["last_archived"], 1);
}

#[tokio::test]
async fn compaction_keeps_content_and_bounds_the_file() {
    let dir = TempDir::new("compact");
    let store = file_store(dir.path());
    let k = key("cli:compact");
    let mut session = Session::new(k.clone(), at(0));
    session.add_message(u("q"), at(1));
    let mut revision = store
        .save_changes(&mut session, None)
        .await
        .unwrap()
        .unwrap();
    for i in 0..600 {
        session
            .metadata_mut()
            .insert("counter".into(), json!(format!("{i:0>200}")));
        revision = store
            .save_changes(&mut session, Some(revision))
            .await
            .unwrap()
            .unwrap();
        revision = store.flush(&k, revision).await.unwrap();
    }
    let size = fs::metadata(store.path_of(&k)).unwrap().len();
    assert!(
        size < 200_000,
        "superseded records are compacted away: {size} bytes"
    );
    let loaded = store.load(&k).await.unwrap().unwrap();
    assert_eq!(loaded.session, session);
    assert_eq!(loaded.revision, revision);
}

#[tokio::test]
async fn nanobot_written_files_load() {
    // Exactly what nanobot-ai 0.3.5 writes (spec 2.4), provider state included.
    let dir = TempDir::new("nanobot-file");
    let store = file_store(dir.path());
    let k = key("telegram:42");
    let text = concat!(
        r#"{"_type": "metadata", "key": "telegram:42", "created_at": "2026-08-20T05:20:56.943199", "updated_at": "2026-08-20T05:21:00.000001", "metadata": {"title": "T", "_last_summary": {"text": "s", "last_active": "2026-08-20T05:21:00"}}, "last_archived": 2, "last_consolidated": 2}"#,
        "\n",
        r#"{"_type": "provider_state", "state": {"kind": "k", "provider": "p", "model": "mm", "version": 1, "payload": {"encrypted_content": "SECRET"}, "pending_messages": []}}"#,
        "\n",
        r#"{"role": "user", "content": "héllo 日本", "timestamp": "2026-08-20T05:20:57.1", "media": ["/m/a.png"]}"#,
        "\n",
        r#"{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "exec", "arguments": "{\"cmd\": \"ls\"}"}, "extra_content": {"google": {"thought_signature": "x"}}}], "reasoning_content": "r", "timestamp": "2026-08-20T05:20:58"}"#,
        "\n",
        r#"{"role": "tool", "content": "ok", "tool_call_id": "c1", "name": "exec", "timestamp": "2026-08-20T05:20:59"}"#,
        "\n",
    );
    fs::write(store.path_of(&k), text).unwrap();
    let loaded = store.load(&k).await.unwrap().unwrap();
    assert!(loaded.repairs.is_empty(), "{:?}", loaded.repairs);
    let session = &loaded.session;
    assert_eq!(session.messages().len(), 3);
    assert_eq!(session.last_consolidated(), 2);
    assert_eq!(
        session.meta().provider_state.as_ref().unwrap()["payload"]["encrypted_content"],
        "SECRET"
    );
    assert_eq!(
        session.meta().created_at.to_string(),
        "2026-08-20 05:20:56.943199"
    );
    // Rewriting it loses nothing: every message line comes back byte for byte.
    let mut session = loaded.session.clone();
    session.replace_messages(session.messages().to_vec(), session.meta().updated_at);
    store
        .save_changes(&mut session, Some(loaded.revision))
        .await
        .unwrap();
    let rewritten = fs::read_to_string(store.path_of(&k)).unwrap();
    for line in text.lines().skip(2) {
        assert!(rewritten.contains(line), "{line}");
    }
    // Listings never show the provider's payload.
    let rows = store.list().await.unwrap();
    assert!(!format!("{rows:?}").contains("SECRET"));
    assert_eq!(rows[0].preview, "héllo 日本");
}

#[tokio::test]
async fn torn_last_line_is_cut_kept_aside_and_reported() {
    let dir = TempDir::new("torn");
    let store = file_store(dir.path());
    let k = key("cli:torn");
    let mut session = Session::new(k.clone(), at(0));
    session.add_message(u("valid"), at(1));
    store.save_changes(&mut session, None).await.unwrap();
    let path = store.path_of(&k);
    let mut bytes = fs::read(&path).unwrap();
    bytes.extend_from_slice(br#"{"role": "assistant", "content": "partial"#);
    fs::write(&path, &bytes).unwrap();

    let loaded = store.load(&k).await.unwrap().unwrap();
    assert_eq!(loaded.session.messages().len(), 1);
    assert!(
        matches!(loaded.repairs[..], [Repair::TornTail { .. }]),
        "{:?}",
        loaded.repairs
    );
    let sidecar = fs::read_to_string(store.sidecar_of(&k)).unwrap();
    assert!(sidecar.contains(r#""content": "partial"#));
    assert!(fs::read_to_string(&path).unwrap().ends_with('\n'));
    // And the session goes on.
    let mut session = loaded.session;
    session.add_message(a("more"), at(2));
    store
        .save_changes(&mut session, Some(loaded.revision))
        .await
        .unwrap();
    assert_eq!(
        store
            .load(&k)
            .await
            .unwrap()
            .unwrap()
            .session
            .messages()
            .len(),
        2
    );
}

#[tokio::test]
async fn damaged_lines_are_moved_aside_never_dropped() {
    let dir = TempDir::new("damage");
    let store = file_store(dir.path());
    let k = key("cli:damage");
    let mut bytes = Vec::new();
    bytes.extend_from_slice(b"NOT VALID JSON!!!\n");
    bytes.extend_from_slice(br#"{"role": "user", "content": "msg1"}"#);
    bytes.extend_from_slice(b"\n[1, 2]\n\xff\xfe not utf8\n\n   \n");
    bytes.extend_from_slice(br#"{"role": "user", "content": "msg2"}"#);
    bytes.extend_from_slice(b"\n\"just a string\"\n");
    fs::write(store.path_of(&k), &bytes).unwrap();

    let loaded = store.load(&k).await.unwrap().unwrap();
    let texts: Vec<&str> = loaded
        .session
        .messages()
        .iter()
        .map(|m| m.content().unwrap().as_str().unwrap())
        .collect();
    assert_eq!(texts, ["msg1", "msg2"]);
    let corrupt: Vec<usize> = loaded
        .repairs
        .iter()
        .filter_map(|r| match r {
            Repair::CorruptLine { line, .. } => Some(*line),
            _ => None,
        })
        .collect();
    assert_eq!(corrupt, [1, 3, 4, 8]);
    let sidecar = fs::read(store.sidecar_of(&k)).unwrap();
    for piece in [
        &b"NOT VALID JSON!!!"[..],
        b"[1, 2]",
        b"\xff\xfe not utf8",
        b"\"just a string\"",
    ] {
        assert!(
            sidecar.windows(piece.len()).any(|w| w == piece),
            "{piece:?} kept aside"
        );
    }
    // The file was rewritten clean: loading again repairs nothing.
    let again = store.load(&k).await.unwrap().unwrap();
    assert!(again.repairs.is_empty());
    assert_eq!(again.session.messages().len(), 2);
    let first: Value = serde_json::from_str(&lines(&store.path_of(&k))[0]).unwrap();
    assert_eq!(first["_type"], "metadata");
}

#[tokio::test]
async fn bad_metadata_fields_are_reset_and_reported() {
    let dir = TempDir::new("badmeta");
    let store = file_store(dir.path());
    let cases = [
        (json!(-5), "-5"),
        (json!(0.5), "0.5"),
        (json!(true), "true"),
        (json!("999"), "\"999\""),
        (json!(99), "99"),
    ];
    for (i, (pointer, found)) in cases.into_iter().enumerate() {
        let k = key(&format!("cli:pointer-{i}"));
        let text = format!(
            "{}\n{}\n",
            json!({"_type": "metadata", "key": k.as_str(), "created_at": "not-a-date", "metadata": null, "last_consolidated": pointer}),
            json!({"role": "user", "content": "x"})
        );
        fs::write(store.path_of(&k), text).unwrap();
        let loaded = store.load(&k).await.unwrap().unwrap();
        assert_eq!(loaded.session.last_consolidated(), 0);
        assert!(
            loaded.repairs.contains(&Repair::PointerReset {
                found: found.into()
            }),
            "{:?}",
            loaded.repairs
        );
        assert!(loaded.repairs.iter().any(|r| matches!(
            r,
            Repair::BadTimestamp {
                field: "created_at",
                ..
            }
        )));
        assert_eq!(loaded.session.messages().len(), 1);
    }
}

#[tokio::test]
async fn odd_files_have_defined_outcomes() {
    let dir = TempDir::new("odd");
    let store = file_store(dir.path());
    // Empty file: an empty session, which the next save gives a metadata line.
    let empty = key("cli:empty");
    fs::write(store.path_of(&empty), "").unwrap();
    let loaded = store.load(&empty).await.unwrap().unwrap();
    assert!(loaded.session.messages().is_empty());
    let mut session = loaded.session;
    session.add_message(u("hello"), at(1));
    store
        .save_changes(&mut session, Some(loaded.revision))
        .await
        .unwrap();
    let first: Value = serde_json::from_str(&lines(&store.path_of(&empty))[0]).unwrap();
    assert_eq!(first["_type"], "metadata");

    // Duplicate metadata records: the last wins; a metadata record after messages counts.
    let dup = key("cli:dup");
    let text = format!(
        "{}\n{}\n{}\n",
        json!({"_type": "metadata", "metadata": {"title": "old"}}),
        json!({"role": "user", "content": "x"}),
        json!({"_type": "metadata", "metadata": {"title": "new"}, "last_consolidated": 1}),
    );
    fs::write(store.path_of(&dup), text).unwrap();
    let loaded = store.load(&dup).await.unwrap().unwrap();
    assert_eq!(loaded.session.meta().metadata["title"], "new");
    assert_eq!(loaded.session.last_consolidated(), 1);

    // Records without a role or with unknown roles are kept on disk (and skipped by replay).
    let odd = key("cli:roles");
    let text = format!(
        "{}\n{}\n{}\n",
        json!({"_type": "future", "x": 1}),
        json!({"role": "wizard", "content": "?"}),
        json!({"role": "user", "content": "real"}),
    );
    fs::write(store.path_of(&odd), &text).unwrap();
    let loaded = store.load(&odd).await.unwrap().unwrap();
    assert_eq!(loaded.session.messages().len(), 3);
    let mut session = loaded.session;
    session.replace_messages(session.messages().to_vec(), at(5));
    store
        .save_changes(&mut session, Some(loaded.revision))
        .await
        .unwrap();
    let kept = fs::read_to_string(store.path_of(&odd)).unwrap();
    assert!(kept.contains(r#"{"_type": "future", "x": 1}"#) && kept.contains("wizard"));
}

#[tokio::test]
async fn long_keys_use_hashed_files_that_check_their_key() {
    let dir = TempDir::new("hashed");
    let store = file_store(dir.path());
    let long = key(&"k".repeat(700));
    let mut session = Session::new(long.clone(), at(0));
    session.add_message(u("hi"), at(1));
    store.save_changes(&mut session, None).await.unwrap();
    assert!(
        store
            .path_of(&long)
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("~h")
    );
    assert_eq!(
        store
            .load(&long)
            .await
            .unwrap()
            .unwrap()
            .session
            .messages()
            .len(),
        1
    );
    assert_eq!(store.list().await.unwrap()[0].key, long);
    // A hand-edited file claiming another key is refused, not served.
    let path = store.path_of(&long);
    let text = fs::read_to_string(&path)
        .unwrap()
        .replace(&"k".repeat(700), "someone:else");
    fs::write(&path, text).unwrap();
    assert!(matches!(
        store.load(&long).await.unwrap_err(),
        SessionError::KeyMismatch { .. }
    ));
}

#[tokio::test]
async fn two_stores_on_one_directory_lose_nothing() {
    // Two "processes" (independent stores and managers) share a workspace.
    let dir = TempDir::new("two");
    let clock = Arc::new(FixedClock);
    let one = SessionManager::new(Arc::new(file_store(dir.path())), clock.clone(), counter());
    let two = SessionManager::new(Arc::new(file_store(dir.path())), clock, counter());
    let k = key("cli:shared");
    let first = one.get_or_create(&k).await.unwrap();
    first.add_message(u("from one"));
    one.save(&first).await.unwrap();

    let second = two.get_or_create(&k).await.unwrap();
    assert_eq!(second.message_count(), 1);
    second.add_message(u("from two"));
    two.save(&second).await.unwrap();

    // `one` is stale now: its save merges instead of overwriting.
    first.add_message(a("one again"));
    first.update(|s| {
        s.metadata_mut().insert("title".into(), json!("set by one"));
    });
    one.save(&first).await.unwrap();

    let fresh = SessionManager::new(
        Arc::new(file_store(dir.path())),
        Arc::new(FixedClock),
        counter(),
    );
    let all = fresh.get_or_create(&k).await.unwrap();
    let texts: Vec<String> = all.read(|s| {
        s.messages()
            .iter()
            .map(|m| m.content().unwrap().as_str().unwrap().to_owned())
            .collect()
    });
    assert_eq!(texts, ["from one", "from two", "one again"]);
    assert_eq!(
        all.read(|s| s.meta().metadata["title"].clone()),
        "set by one"
    );
}

#[tokio::test]
async fn a_stale_rewrite_is_a_conflict() {
    let dir = TempDir::new("stale");
    let one = file_store(dir.path());
    let two = file_store(dir.path());
    let k = key("cli:stale");
    let mut session = Session::new(k.clone(), at(0));
    session.add_message(u("a"), at(1));
    let base = one.save_changes(&mut session, None).await.unwrap();
    let mut other = two.load(&k).await.unwrap().unwrap().session;
    session.add_message(u("b"), at(2));
    one.save_changes(&mut session, base).await.unwrap();
    other.clear(at(3));
    assert!(
        two.save_changes(&mut other, base)
            .await
            .unwrap_err()
            .is_conflict()
    );
    assert_eq!(
        one.load(&k)
            .await
            .unwrap()
            .unwrap()
            .session
            .messages()
            .len(),
        2
    );
}

#[tokio::test]
async fn durability_always_and_none_both_round_trip() {
    for durability in [Durability::Always, Durability::None, Durability::TurnEnd] {
        let dir = TempDir::new("durable");
        let options = {
            let mut value = FileStoreOptions::default();
            value.durability = durability;
            value.clock = Arc::new(FixedClock);
            value
        };
        let store = FileSessionStore::open(dir.path(), options).unwrap();
        let k = key("cli:durable");
        let mut session = Session::new(k.clone(), at(0));
        let mut revision = None;
        for i in 0..3 {
            session.add_message(u(&format!("m{i}")), at(1));
            revision = store.save_changes(&mut session, revision).await.unwrap();
        }
        store.flush(&k, revision.unwrap()).await.unwrap();
        assert_eq!(store.load(&k).await.unwrap().unwrap().session, session);
    }
}

#[tokio::test]
async fn nanobot_layout_namespace() {
    let root = TempDir::new("nanobot-layout");
    let workspace = root.path().join("ws");
    let sessions_root = root.path().join("data/sessions");
    let store =
        FileSessionStore::open_nanobot(&workspace, &sessions_root, FileStoreOptions::default())
            .unwrap();
    let id = fs::read_to_string(workspace.join(".nanobot/workspace-id")).unwrap();
    let id = id.trim();
    assert_eq!(id.len(), 32);
    assert_eq!(
        store.dir(),
        fs::canonicalize(&sessions_root).unwrap().join(id)
    );
    let marker = fs::read_to_string(store.dir().join(".workspace")).unwrap();
    assert_eq!(
        marker,
        format!("{}\n", fs::canonicalize(&workspace).unwrap().display())
    );

    let k = key("cli:direct");
    let mut session = Session::new(k.clone(), at(0));
    session.add_message(u("kept outside the workspace"), at(1));
    store.save_changes(&mut session, None).await.unwrap();
    assert!(!workspace.join("sessions").exists());

    // Opening again finds the same namespace; a lost id file is recovered from the marker.
    let again =
        FileSessionStore::open_nanobot(&workspace, &sessions_root, FileStoreOptions::default())
            .unwrap();
    assert_eq!(again.dir(), store.dir());
    fs::remove_dir_all(workspace.join(".nanobot")).unwrap();
    let recovered =
        FileSessionStore::open_nanobot(&workspace, &sessions_root, FileStoreOptions::default())
            .unwrap();
    assert_eq!(recovered.dir(), store.dir());
    assert_eq!(
        recovered
            .load(&k)
            .await
            .unwrap()
            .unwrap()
            .session
            .messages()
            .len(),
        1
    );

    // A copied workspace gets its own, empty namespace.
    let copy = root.path().join("ws-copy");
    fs::create_dir_all(copy.join(".nanobot")).unwrap();
    fs::copy(
        workspace.join(".nanobot/workspace-id"),
        copy.join(".nanobot/workspace-id"),
    )
    .unwrap();
    let copied =
        FileSessionStore::open_nanobot(&copy, &sessions_root, FileStoreOptions::default()).unwrap();
    assert_ne!(copied.dir(), store.dir());
    assert!(copied.load(&k).await.unwrap().is_none());

    // Refusals: storage inside the workspace, a malformed id.
    let inside = FileSessionStore::open_nanobot(
        &workspace,
        &workspace.join("sessions"),
        FileStoreOptions::default(),
    );
    assert!(matches!(
        inside.unwrap_err(),
        SessionError::InvalidStorage { .. }
    ));
    fs::write(workspace.join(".nanobot/workspace-id"), "not-an-id\n").unwrap();
    let bad =
        FileSessionStore::open_nanobot(&workspace, &sessions_root, FileStoreOptions::default());
    assert!(
        bad.unwrap_err()
            .to_string()
            .contains("restore its original identifier")
    );
}

/// nanobot-ai itself reads what we write and we read what it writes. Runs when
/// `NANOBOT_PEER_PYTHON` names the Python of a nanobot-ai 0.3.5 install (`cargo xtask ci` sets it).
#[tokio::test]
async fn interoperates_with_nanobot_ai() {
    let Some(python) = peer_python("nanobot-ai interop test") else {
        return;
    };
    let root = TempDir::new("interop");
    let workspace = root.path().join("ws");
    let sessions_root = root.path().join("state/sessions");
    let store =
        FileSessionStore::open_nanobot(&workspace, &sessions_root, FileStoreOptions::default())
            .unwrap();
    let manager = SessionManager::new(
        Arc::new(store),
        Arc::new(nanobot_llm_port::SystemClock),
        counter(),
    );
    let k = key("telegram:42");
    let handle = manager.get_or_create(&k).await.unwrap();
    handle.add_message(u("héllo from rust"));
    handle.add_message(a("answer from rust").with("reasoning_content", "r"));
    handle.update(|s| {
        s.metadata_mut().insert("title".into(), json!("Rust title"));
        s.set_last_consolidated(1).unwrap();
    });
    manager.end_turn(&handle).await.unwrap();

    let script = r#"
import json, os, sys
from pathlib import Path
from nanobot.session.manager import SessionManager
ws, root = Path(sys.argv[1]), Path(sys.argv[2])
os.environ["HOME"] = str(ws.parent)
m = SessionManager(ws, sessions_root=root)
s = m.get_or_create("telegram:42")
rows = m.list_sessions()
out = {"messages": [x["content"] for x in s.messages], "lc": s.last_consolidated,
       "title": s.metadata.get("title"), "listed": [r["key"] if isinstance(r, dict) else r.key for r in rows]}
s.add_message("assistant", "answer from python")
m.save(s)
print(json.dumps(out))
"#;
    let seen = run_peer(
        &python,
        script,
        &[workspace.as_os_str(), sessions_root.as_os_str()],
        None,
    );
    assert_eq!(
        seen["messages"],
        json!(["héllo from rust", "answer from rust"])
    );
    assert_eq!(seen["lc"], 1);
    assert_eq!(seen["title"], "Rust title");
    assert_eq!(seen["listed"], json!(["telegram:42"]));

    // And nanobot-ai's rewrite reads back here.
    let store =
        FileSessionStore::open_nanobot(&workspace, &sessions_root, FileStoreOptions::default())
            .unwrap();
    let loaded = store.load(&k).await.unwrap().unwrap();
    assert!(loaded.repairs.is_empty());
    let texts: Vec<&str> = loaded
        .session
        .messages()
        .iter()
        .map(|m| m.content().unwrap().as_str().unwrap())
        .collect();
    assert_eq!(
        texts,
        ["héllo from rust", "answer from rust", "answer from python"]
    );
    assert_eq!(loaded.session.last_consolidated(), 1);
}

/// The writer half of `a_killed_writer_leaves_a_consistent_file`: runs only when the parent
/// test starts it with `SESSION_STORE_CRASH_DIR`, appending until it is killed and printing
/// each count it saved.
#[tokio::test]
async fn crash_writer_child() {
    let Ok(dir) = std::env::var("SESSION_STORE_CRASH_DIR") else {
        return;
    };
    let store = file_store(std::path::Path::new(&dir));
    let k = key("cli:crash");
    let mut session = Session::new(k.clone(), at(0));
    let mut revision = None;
    let big = "x".repeat(256 * 1024);
    for i in 0.. {
        session.add_message(u(&format!("{i} {big}")), at(1));
        if i % 5 == 0 {
            session.metadata_mut().insert("turn".into(), json!(i));
        }
        revision = store.save_changes(&mut session, revision).await.unwrap();
        if i % 7 == 0 {
            revision = Some(store.flush(&k, revision.unwrap()).await.unwrap());
        }
        println!("saved {}", i + 1);
    }
}

#[tokio::test]
async fn a_killed_writer_leaves_a_consistent_file() {
    use std::io::BufRead;
    let dir = TempDir::new("crash");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "files::crash_writer_child", "--nocapture"])
        .env("SESSION_STORE_CRASH_DIR", dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut saved = 0usize;
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if let Some(count) = line.strip_prefix("saved ") {
            saved = count.parse().unwrap();
            if saved >= 40 {
                child.kill().unwrap();
                break;
            }
        }
    }
    child.wait().unwrap();
    assert!(saved >= 40, "the writer never got going");

    let store = file_store(dir.path());
    let k = key("cli:crash");
    let loaded = store.load(&k).await.unwrap().unwrap();
    let count = loaded.session.messages().len();
    assert!(
        count >= saved && count <= saved + 1,
        "saved {saved}, found {count}"
    );
    for (i, message) in loaded.session.messages().iter().enumerate() {
        let text = message.content().unwrap().as_str().unwrap();
        assert!(
            text.starts_with(&format!("{i} ")) && text.len() > 256 * 1024,
            "message {i} is whole"
        );
    }
    // The file is consistent: it can be appended to and reloaded without further repair.
    let mut session = loaded.session;
    session.add_message(a("after the crash"), at(2));
    store
        .save_changes(&mut session, Some(loaded.revision))
        .await
        .unwrap();
    let again = store.load(&k).await.unwrap().unwrap();
    assert!(again.repairs.is_empty(), "{:?}", again.repairs);
    assert_eq!(again.session.messages().len(), count + 1);
}

#[tokio::test]
async fn case_98_99_100_listing_titles_and_previews() {
    let dir = TempDir::new("previews");
    let file = file_store(dir.path());
    let memory = nanobot_session_store::InMemorySessionStore::new();
    let stores: [&dyn SessionStore; 2] = [&file, &memory];
    for store in stores {
        let mut trace = Session::new(key("c:trace"), at(0));
        for i in 0..220 {
            trace.add_message(a(&format!("assistant trace {i}")), at(1));
        }
        trace.add_message(u("late user"), at(1));
        store.save_changes(&mut trace, None).await.unwrap();

        let mut chinese = Session::new(key("c:zh"), at(0));
        chinese.add_message(u("帮我总结一下这份报告"), at(2));
        chinese.add_message(a("可以"), at(2));
        chinese
            .metadata_mut()
            .insert("title".into(), json!("自动生成标题"));
        store.save_changes(&mut chinese, None).await.unwrap();

        let mut long = Session::new(key("c:long"), at(0));
        long.add_message(u(&"word ".repeat(100)), at(3));
        long.metadata_mut()
            .insert("title".into(), json!("<think> The user said hi"));
        store.save_changes(&mut long, None).await.unwrap();

        let mut edited = Session::new(key("c:edited"), at(0));
        edited.add_message(u("hello"), at(4));
        edited
            .metadata_mut()
            .insert("title".into(), json!("<think> kept"));
        edited
            .metadata_mut()
            .insert("title_user_edited".into(), json!(true));
        store.save_changes(&mut edited, None).await.unwrap();

        let rows = store.list().await.unwrap();
        let row = |k: &str| rows.iter().find(|r| r.key.as_str() == k).unwrap().clone();
        assert_eq!(row("c:trace").preview, "assistant trace 0");
        assert_eq!(row("c:trace").message_count, 221);
        assert_eq!(row("c:zh").preview, "帮我总结一下这份报告");
        assert_eq!(row("c:zh").title.as_deref(), Some("自动生成标题"));
        let long = row("c:long");
        assert_eq!(long.preview.chars().count(), 120);
        assert!(long.preview.ends_with('…'));
        assert_eq!(long.title.as_deref(), Some(""));
        assert_eq!(row("c:edited").title.as_deref(), Some("<think> kept"));
    }
}

#[tokio::test]
async fn case_92_moved_and_symlinked_workspaces_keep_their_sessions() {
    let root = TempDir::new("moved");
    let sessions_root = root.path().join("state");
    let workspace = root.path().join("ws");
    let store =
        FileSessionStore::open_nanobot(&workspace, &sessions_root, FileStoreOptions::default())
            .unwrap();
    let k = key("cli:moved");
    let mut session = Session::new(k.clone(), at(0));
    session.add_message(u("before the move"), at(1));
    store.save_changes(&mut session, None).await.unwrap();
    let namespace = store.dir().to_owned();

    let moved = root.path().join("ws-renamed");
    fs::rename(&workspace, &moved).unwrap();
    let after = FileSessionStore::open_nanobot(&moved, &sessions_root, FileStoreOptions::default())
        .unwrap();
    assert_eq!(after.dir(), namespace);
    assert_eq!(
        after
            .load(&k)
            .await
            .unwrap()
            .unwrap()
            .session
            .messages()
            .len(),
        1
    );
    let marker = fs::read_to_string(namespace.join(".workspace")).unwrap();
    assert_eq!(
        marker.trim_end(),
        fs::canonicalize(&moved).unwrap().to_str().unwrap()
    );

    #[cfg(unix)]
    {
        let link = root.path().join("ws-link");
        std::os::unix::fs::symlink(&moved, &link).unwrap();
        let via_link =
            FileSessionStore::open_nanobot(&link, &sessions_root, FileStoreOptions::default())
                .unwrap();
        assert_eq!(via_link.dir(), namespace);
    }

    let other = FileSessionStore::open_nanobot(
        &root.path().join("another"),
        &sessions_root,
        FileStoreOptions::default(),
    )
    .unwrap();
    assert_ne!(other.dir(), namespace);
    assert!(other.load(&k).await.unwrap().is_none());
}

/// A listing whose directory has not changed uses its rows without looking at any file;
/// another process's turn end, a new session and this process's own appends all show.
#[tokio::test]
async fn a_listing_trusts_an_unchanged_directory_and_sees_every_turn_end() {
    let dir = TempDir::new("listing-trust");
    let lister = file_store(dir.path());
    let writer = file_store(dir.path());
    let k = key("cli:trusted");
    let mut session = Session::new(k.clone(), at(0));
    session.add_message(u("first question"), at(1));
    let mut revision = writer
        .save_changes(&mut session, None)
        .await
        .unwrap()
        .unwrap();
    revision = writer.flush(&k, revision).await.unwrap();
    let count = |rows: Vec<nanobot_session_store::SessionInfo>| {
        rows.into_iter()
            .find(|r| r.key == k)
            .map(|r| r.message_count)
    };
    std::thread::sleep(std::time::Duration::from_millis(60));
    assert_eq!(count(lister.list().await.unwrap()), Some(1));

    // Changed in place behind the directory's back: the trusted row stays as it was.
    let path = writer.path_of(&k);
    let original = fs::read_to_string(&path).unwrap();
    fs::write(&path, original.replace("first question", "changed unseen")).unwrap();
    let rows = lister.list().await.unwrap();
    assert_eq!(
        rows[0].preview, "first question",
        "the directory was trusted"
    );
    fs::write(&path, &original).unwrap();

    // Another process appends and ends its turn: the flush tells the directory.
    session.add_message(a("an answer"), at(2));
    revision = writer
        .save_changes(&mut session, Some(revision))
        .await
        .unwrap()
        .unwrap();
    writer.flush(&k, revision).await.unwrap();
    assert_eq!(count(lister.list().await.unwrap()), Some(2));

    // This process's own appends show without a flush.
    let mut own = lister.load(&k).await.unwrap().unwrap();
    own.session.add_message(u("mine"), at(3));
    lister
        .save_changes(&mut own.session, Some(own.revision))
        .await
        .unwrap();
    assert_eq!(count(lister.list().await.unwrap()), Some(3));

    // A new session (a new name in the directory) shows at once.
    let mut second = Session::new(key("cli:second"), at(4));
    second.add_message(u("hello"), at(4));
    writer.save_changes(&mut second, None).await.unwrap();
    assert_eq!(lister.list().await.unwrap().len(), 2);
}

#[tokio::test]
async fn the_listing_index_never_serves_a_stale_row() {
    let dir = TempDir::new("listing");
    let store = file_store(dir.path());
    let k = key("cli:listed");
    let mut session = Session::new(k.clone(), at(0));
    session.add_message(u("first question"), at(1));
    let mut revision = store
        .save_changes(&mut session, None)
        .await
        .unwrap()
        .unwrap();
    let row = |rows: Vec<nanobot_session_store::SessionInfo>| {
        rows.into_iter().find(|r| r.key == k).unwrap()
    };
    assert_eq!(row(store.list().await.unwrap()).message_count, 1);
    assert!(dir.path().join(".listing/index.bin").exists());

    // An append changes the size.
    session.add_message(a("an answer"), at(2));
    revision = store
        .save_changes(&mut session, Some(revision))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row(store.list().await.unwrap()).message_count, 2);

    // A flush rewrites line 1 in place: same size, new updated_at.
    session.add_message(u("again"), at(30));
    revision = store
        .save_changes(&mut session, Some(revision))
        .await
        .unwrap()
        .unwrap();
    let before = row(store.list().await.unwrap()).updated_at;
    store.flush(&k, revision).await.unwrap();
    let listed = row(store.list().await.unwrap());
    assert_eq!((listed.message_count, listed.updated_at), (3, at(30)));
    assert!(listed.updated_at >= before);

    // Another store (another process) reads the index and agrees; a damaged index is rebuilt.
    let other = file_store(dir.path());
    assert_eq!(row(other.list().await.unwrap()).message_count, 3);
    fs::write(dir.path().join(".listing/index.bin"), "{ not an index").unwrap();
    // An earlier version's JSON index beside it is removed.
    fs::write(dir.path().join(".listing/index.json"), "{}").unwrap();
    let third = file_store(dir.path());
    assert_eq!(row(third.list().await.unwrap()).message_count, 3);
    assert!(!dir.path().join(".listing/index.json").exists());

    // A session written by someone else (nanobot-ai replaces whole files) is picked up.
    std::thread::sleep(std::time::Duration::from_millis(60));
    let path = store.path_of(&k);
    let replace = |from: &str, to: &str| {
        let text = fs::read_to_string(&path).unwrap().replace(from, to);
        let temp = dir.path().join(".replacing.tmp");
        fs::write(&temp, text).unwrap();
        fs::rename(&temp, &path).unwrap();
    };
    replace("first question", "edited elsewhere");
    assert_eq!(row(third.list().await.unwrap()).preview, "edited elsewhere");

    // An edit made in place (an editor) leaves the directory as it was: it shows at the
    // next full check, at once for a store that checks every time.
    std::thread::sleep(std::time::Duration::from_millis(60));
    let text = fs::read_to_string(&path)
        .unwrap()
        .replace("edited elsewhere", "edited in place");
    fs::write(&path, text).unwrap();
    let checking = FileSessionStore::open(
        dir.path(),
        FileStoreOptions::default().listing_recheck(std::time::Duration::ZERO),
    )
    .unwrap();
    assert_eq!(
        row(checking.list().await.unwrap()).preview,
        "edited in place"
    );

    assert!(store.delete(&k).await.unwrap());
    assert!(store.list().await.unwrap().is_empty());
}

/// Replay from the tail gives exactly the whole session's replay, whatever the pointer and
/// however the file got its shape (flushed, appended since, nanobot-ai's own format).
#[tokio::test]
async fn open_for_replay_matches_the_full_replay() {
    use nanobot_session_store::HistoryOptions;
    let dir = TempDir::new("replay");
    let store = file_store(dir.path());
    let counter = nanobot_llm_port::Cl100kBase;
    let stream = nanobot_bench_workload::message_stream(7, 400);
    let options = [
        HistoryOptions::default(),
        HistoryOptions::with_token_budget(3_000),
        {
            let mut value = HistoryOptions::default();
            value.max_messages = 5;
            value.extend_to_user = true;
            value
        },
    ];
    for (case, pointer) in [0usize, 1, 150, 390, 396, 400].into_iter().enumerate() {
        let k = key(&format!("cli:replay-{case}"));
        let mut session = Session::new(k.clone(), at(0));
        for (i, spec) in stream.iter().enumerate() {
            let mut message =
                nanobot_session_store::StoredMessage::from_map(spec.as_object().cloned().unwrap());
            if i % 37 == 5 {
                message = message.with("_channel_delivery", true);
            }
            session.add_message(message, at(1));
        }
        session.set_last_consolidated(pointer).unwrap();
        let mut revision = store
            .save_changes(&mut session, None)
            .await
            .unwrap()
            .unwrap();
        revision = store.flush(&k, revision).await.unwrap();
        // Appended since the flush: more messages and a metadata record.
        for i in 0..12 {
            session.add_message(
                if i % 3 == 0 {
                    u(&format!("late {i}"))
                } else {
                    a(&format!("reply {i}"))
                },
                at(2),
            );
        }
        session
            .metadata_mut()
            .insert("title".into(), json!("later"));
        store
            .save_changes(&mut session, Some(revision))
            .await
            .unwrap();

        let view = store.open_for_replay(&k).await.unwrap().unwrap();
        assert_eq!(view.message_count, session.messages().len());
        assert_eq!(view.meta.metadata["title"], "later");
        assert_eq!(view.meta.last_consolidated, pointer);
        for option in &options {
            let full =
                nanobot_session_store::get_history(session.messages(), pointer, option, &counter);
            assert_eq!(
                view.history(option, &counter),
                full,
                "case {case}, {option:?}"
            );
        }
        if pointer >= 390 {
            assert!(
                view.tail_start > 300,
                "only the live tail is read: {}",
                view.tail_start
            );
        }
    }

    // A file nanobot-ai wrote has no mark: the view falls back to the whole file.
    let k = key("telegram:1");
    let text = format!(
        "{}\n{}\n{}\n",
        json!({"_type": "metadata", "key": "telegram:1", "metadata": {}, "last_consolidated": 1}),
        json!({"role": "user", "content": "one"}),
        json!({"role": "assistant", "content": "two"}),
    );
    fs::write(store.path_of(&k), text).unwrap();
    let view = store.open_for_replay(&k).await.unwrap().unwrap();
    assert_eq!((view.tail_start, view.message_count), (0, 2));
    assert!(
        store
            .open_for_replay(&key("nobody:1"))
            .await
            .unwrap()
            .is_none()
    );
}

/// Issue 12.1: a session file nanobot-ai wrote has an unpadded line 1. Continuing it here
/// must never write line 1 past its own bytes, whatever the metadata does: shrink a little
/// (the marked line then fits, and `format!` width padding, which counts characters, wrote
/// non-ASCII lines past their newline), grow by a few bytes, or grow by kilobytes.
/// nanobot-ai reloads every message after each step.
#[tokio::test]
async fn foreign_unpadded_line1_is_never_overrun() {
    let Some(python) = peer_python("foreign line 1 test") else {
        return;
    };
    let original = "摘要：花园里的玫瑰需要在傍晚浇水 — ".repeat(12);
    let cases: [(&str, [String; 3]); 3] = [
        (
            "shrinks a little",
            [
                original.chars().skip(30).collect(),
                original.chars().skip(31).collect(),
                "ok".to_owned(),
            ],
        ),
        (
            "grows by a few bytes",
            [
                format!("{original}é"),
                format!("{original}éü"),
                format!("{original}éüö—"),
            ],
        ),
        (
            "grows by kilobytes",
            [
                format!("{original}{}", "記憶 memory — ".repeat(300)),
                format!("{original}{}", "記憶 memory — ".repeat(600)),
                "short again".to_owned(),
            ],
        ),
    ];
    let write = r#"
import json, os, sys
from pathlib import Path
from nanobot.session.manager import SessionManager
ws, root, note = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
os.environ["HOME"] = str(ws.parent)
m = SessionManager(ws, sessions_root=root)
s = m.get_or_create("cli:direct")
for i in range(10):
    s.add_message("user", f"question {i}: what about the garden?")
    s.add_message("assistant", f"answer {i}: water it in the evening")
s.metadata["note"] = note
m.save(s)
print(json.dumps({"path": str(m._get_session_path("cli:direct"))}))
"#;
    let reload = r#"
import json, os, sys
from pathlib import Path
from nanobot.session.manager import SessionManager
ws, root = Path(sys.argv[1]), Path(sys.argv[2])
os.environ["HOME"] = str(ws.parent)
m = SessionManager(ws, sessions_root=root)
s = m.get_or_create("cli:direct")
print(json.dumps({"count": len(s.messages), "first": s.messages[0]["content"],
                  "lc": s.last_consolidated, "note": s.metadata.get("note"),
                  "listed": [r["key"] if isinstance(r, dict) else r.key for r in m.list_sessions()]}))
"#;
    for (case, notes) in &cases {
        let root = TempDir::new("foreign-line1");
        let workspace = root.path().join("ws");
        let sessions_root = root.path().join("state/sessions");
        fs::create_dir_all(&workspace).unwrap();
        let written = run_peer(
            &python,
            write,
            &[
                workspace.as_os_str(),
                sessions_root.as_os_str(),
                std::ffi::OsStr::new(&original),
            ],
            None,
        );
        let path = std::path::PathBuf::from(written["path"].as_str().unwrap());
        let line1 = fs::read_to_string(&path)
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .to_owned();
        assert_eq!(line1.trim_end(), line1, "nanobot-ai pads nothing");

        for (round, note) in notes.iter().enumerate() {
            // A fresh process each step, as `nanobot run` is.
            let store = FileSessionStore::open_nanobot(
                &workspace,
                &sessions_root,
                FileStoreOptions::default(),
            )
            .unwrap();
            let manager = SessionManager::new(
                Arc::new(store),
                Arc::new(nanobot_llm_port::SystemClock),
                counter(),
            );
            let k = key("cli:direct");
            let handle = manager.get_or_create(&k).await.unwrap();
            assert_eq!(handle.message_count(), 20 + 2 * round, "{case}");
            handle.add_message(u(&format!("turn {round}")));
            handle.add_message(a(&format!("reply {round}")));
            handle.update(|s| {
                s.metadata_mut().insert("note".into(), json!(note));
                s.set_last_consolidated(2 * (round + 1)).unwrap();
            });
            manager.end_turn(&handle).await.unwrap();
            drop(manager);

            let label = format!("{case}, step {}", round + 1);
            for (n, line) in fs::read_to_string(&path).unwrap().lines().enumerate() {
                assert!(
                    serde_json::from_str::<Value>(line).is_ok(),
                    "{label}: line {} is not JSON: {line:.160}",
                    n + 1
                );
            }
            let seen = run_peer(
                &python,
                reload,
                &[workspace.as_os_str(), sessions_root.as_os_str()],
                None,
            );
            assert_eq!(seen["count"], 22 + 2 * round, "{label}: {seen}");
            assert_eq!(
                seen["first"], "question 0: what about the garden?",
                "{label}"
            );
            assert_eq!(seen["lc"], 2 * (round + 1), "{label}");
            assert_eq!(seen["note"], json!(note), "{label}");
            assert_eq!(seen["listed"], json!(["cli:direct"]), "{label}");
        }
    }
}

/// Line 1 as found, with `from` replaced by `to` (same length, so the padding stays).
fn edit_line1(path: &std::path::Path, from: &str, to: &str) {
    assert_eq!(from.len(), to.len());
    let text = fs::read_to_string(path).unwrap();
    let (line1, rest) = text.split_once('\n').unwrap();
    assert!(line1.contains(from), "{line1}");
    fs::write(path, format!("{}\n{rest}", line1.replacen(from, to, 1))).unwrap();
}

#[tokio::test]
async fn a_torn_line1_that_still_parses_is_caught_by_its_sum_and_a_hand_edit_is_kept() {
    let dir = TempDir::new("line1-sum");
    let store = file_store(dir.path());
    let k = key("cli:sum");
    let path = store.path_of(&k);
    let (old, new) = ("a".repeat(600), "b".repeat(600));

    // A mix of a new first sector and an old rest (what a power loss in the middle of the
    // in-place rewrite leaves) is valid JSON here: the sum tells it apart.
    let mut session = Session::new(k.clone(), at(0));
    session.metadata_mut().insert("note".into(), json!(old));
    session.add_message(u("q"), at(1));
    let revision = store.save_changes(&mut session, None).await.unwrap();
    session.metadata_mut().insert("note".into(), json!(new));
    let revision = store
        .save_changes(&mut session, revision)
        .await
        .unwrap()
        .unwrap();
    store.flush(&k, revision).await.unwrap();
    let tail = &new[500..];
    edit_line1(&path, tail, &old[..tail.len()]);
    // Replay (on a copy: it falls back to the full loader, which repairs) does not trust it.
    let copy = TempDir::new("line1-sum-copy");
    fs::copy(&path, copy.path().join(path.file_name().unwrap())).unwrap();
    let replay = file_store(copy.path())
        .open_for_replay(&k)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        replay.meta.metadata["note"],
        json!(new),
        "replay trusts no torn line 1"
    );
    let fresh = file_store(dir.path());
    let loaded = fresh.load(&k).await.unwrap().unwrap();
    assert_eq!(loaded.session.meta().metadata["note"], json!(new));
    assert!(
        matches!(loaded.repairs[..], [Repair::TornLine1 { .. }]),
        "{:?}",
        loaded.repairs
    );
    assert!(
        fs::read_to_string(store.sidecar_of(&k))
            .unwrap()
            .contains(&old[..100])
    );
    let line1: Value = serde_json::from_str(&lines(&path)[0]).unwrap();
    assert_eq!(line1["metadata"]["note"], json!(new), "line 1 is rebuilt");

    // A hand edit of a line 1 that is the only copy of the metadata is taken as written.
    let k = key("cli:edited");
    let path = store.path_of(&k);
    let mut session = Session::new(k.clone(), at(0));
    session.metadata_mut().insert("note".into(), json!(old));
    session.add_message(u("q"), at(1));
    store.save_changes(&mut session, None).await.unwrap();
    edit_line1(&path, &old, &new);
    let fresh = file_store(dir.path());
    let replay = fresh.open_for_replay(&k).await.unwrap().unwrap();
    assert_eq!(replay.meta.metadata["note"], json!(new));
    let loaded = fresh.load(&k).await.unwrap().unwrap();
    assert_eq!(loaded.session.meta().metadata["note"], json!(new));
    assert!(loaded.repairs.is_empty(), "{:?}", loaded.repairs);

    // Flush never rewrites such a line 1 in place before a record after it holds the same.
    fresh.flush(&k, loaded.revision).await.unwrap();
    let all = lines(&path);
    let last_record = all
        .iter()
        .rev()
        .find(|l| l.starts_with(r#"{"_type": "metadata""#))
        .unwrap();
    assert!(last_record.contains(&new) && !std::ptr::eq(last_record, &all[0]));
}
