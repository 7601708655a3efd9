//! The file journal: nanobot-ai's format, cursor recovery from damaged or hand-edited files
//! (spec memory.md, cases 5.1), repairs, two processes, compaction on disk.

use std::fs;
use std::sync::Arc;

use nanobot_memory_store::{
    FileJournal, HistoryJournal, HistoryJournalExt, JournalRepair, MemoryError, NewEntry,
};

use crate::support::TempDir;
use serde_json::{Value, json};

use nanobot_bench_workload::testing::{peer_python, run_peer};

fn memory(dir: &TempDir) -> std::path::PathBuf {
    let path = dir.path().join("memory");
    fs::create_dir_all(&path).unwrap();
    path
}

fn write_lines(dir: &TempDir, lines: &[Value]) {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    fs::write(memory(dir).join("history.jsonl"), text).unwrap();
}

fn entry(cursor: Value) -> Value {
    json!({"cursor": cursor, "timestamp": "2026-04-03 00:02", "content": "x"})
}

async fn next_cursor(dir: &TempDir) -> u64 {
    FileJournal::open(dir.path())
        .unwrap()
        .append_one(NewEntry::text("next"))
        .await
        .unwrap()
}

#[tokio::test]
async fn lines_are_nanobots_format() {
    let dir = TempDir::new("format");
    let journal = FileJournal::open(dir.path()).unwrap();
    journal
        .append_one(NewEntry::text("- [durable] Uses PostgreSQL").from_session("telegram:123"))
        .await
        .unwrap();
    journal
        .append_one(NewEntry::text("日本 \"q\""))
        .await
        .unwrap();
    let text = fs::read_to_string(dir.path().join("memory/history.jsonl")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let stamp = journal.read_since(0, None).await.unwrap()[0]
        .timestamp
        .clone();
    assert_eq!(
        lines[0],
        format!(
            r#"{{"cursor": 1, "timestamp": "{stamp}", "content": "- [durable] Uses PostgreSQL", "session_key": "telegram:123"}}"#
        )
    );
    assert_eq!(
        lines[1],
        format!(r#"{{"cursor": 2, "timestamp": "{stamp}", "content": "日本 \"q\""}}"#)
    );
    assert_eq!(
        fs::read_to_string(dir.path().join("memory/.cursor")).unwrap(),
        "2"
    );
}

#[tokio::test]
async fn cases_6_to_8_invalid_lines_are_not_read() {
    let dir = TempDir::new("invalid");
    write_lines(
        &dir,
        &[
            json!({"timestamp": "t", "content": "no cursor"}),
            entry(json!(1)),
            json!({"cursor": 2, "timestamp": "t"}),
            json!({"cursor": 3, "content": "c"}),
            json!({"cursor": 4, "timestamp": "t", "content": 5}),
            json!({"cursor": 5, "timestamp": "t", "content": "c", "session_key": 7}),
            json!({"cursor": 6, "timestamp": "t", "content": "c", "session_key": "cli:direct", "custom": [1]}),
        ],
    );
    let journal = FileJournal::open(dir.path()).unwrap();
    let read = journal.read_since(0, None).await.unwrap();
    assert_eq!(read.iter().map(|e| e.cursor).collect::<Vec<_>>(), [1, 6]);
    assert_eq!(
        read[1].extra["custom"],
        json!([1]),
        "unknown fields are kept"
    );
    let invalid = journal
        .repairs()
        .iter()
        .filter(|r| matches!(r, JournalRepair::InvalidEntry { .. }))
        .count();
    assert_eq!(invalid, 5);
    // Invalid objects stay in the file (nanobot-ai keeps them too); cursors pass them all.
    assert_eq!(journal.append_one(NewEntry::text("next")).await.unwrap(), 7);
    assert_eq!(
        fs::read_to_string(dir.path().join("memory/history.jsonl"))
            .unwrap()
            .lines()
            .count(),
        8
    );

    let dir = TempDir::new("non-objects");
    fs::write(
        memory(&dir).join("history.jsonl"),
        format!("null\n[1,2]\ntrue\n{}\n", entry(json!(1))),
    )
    .unwrap();
    let journal = FileJournal::open(dir.path()).unwrap();
    assert_eq!(journal.read_since(0, None).await.unwrap().len(), 1);
    assert_eq!(journal.append_one(NewEntry::text("next")).await.unwrap(), 2);
    let sidecar = fs::read_to_string(dir.path().join("memory/history.jsonl.damaged")).unwrap();
    assert!(sidecar.contains("[1,2]") && sidecar.contains("null") && sidecar.contains("true"));
}

#[tokio::test]
async fn cases_9_to_14_cursors_survive_damaged_and_edited_files() {
    let cases: [(Option<&str>, Vec<Value>, u64); 9] = [
        (
            None,
            vec![entry(json!(5)), entry(json!(6)), entry(json!("bad"))],
            7,
        ),
        (None, vec![entry(json!("a")), entry(json!(1.5))], 1),
        (
            None,
            vec![
                entry(json!(3)),
                entry(json!(3.5)),
                entry(Value::Null),
                entry(json!([1, 2])),
            ],
            4,
        ),
        (Some("not_a_number"), vec![entry(json!(10))], 11),
        (Some("2"), vec![entry(json!(10))], 11),
        (Some("100"), vec![entry(json!(10))], 101),
        (Some("-5"), vec![], 1),
        (
            None,
            vec![entry(json!(100)), entry(json!(5)), entry(json!("bad"))],
            101,
        ),
        (None, vec![entry(json!(4)), entry(json!(true))], 5),
    ];
    for (counter, lines, expected) in cases {
        let dir = TempDir::new("cursors");
        write_lines(&dir, &lines);
        if let Some(counter) = counter {
            fs::write(memory(&dir).join(".cursor"), counter).unwrap();
        }
        assert_eq!(
            next_cursor(&dir).await,
            expected,
            "counter {counter:?}, lines {lines:?}"
        );
    }
    let dir = TempDir::new("negative");
    write_lines(&dir, &[entry(json!(-3))]);
    assert_eq!(next_cursor(&dir).await, 1);
}

#[tokio::test]
async fn a_torn_last_line_is_cut_and_the_next_entry_survives() {
    let dir = TempDir::new("torn");
    {
        let journal = FileJournal::open(dir.path()).unwrap();
        journal.append_one(NewEntry::text("whole")).await.unwrap();
    }
    let path = dir.path().join("memory/history.jsonl");
    let mut bytes = fs::read(&path).unwrap();
    bytes
        .extend_from_slice(br#"{"cursor": 2, "timestamp": "2026-01-01 00:00", "content": "cut he"#);
    fs::write(&path, bytes).unwrap();

    let journal = FileJournal::open(dir.path()).unwrap();
    assert!(
        matches!(journal.repairs()[..], [JournalRepair::TornTail { .. }]),
        "{:?}",
        journal.repairs()
    );
    // nanobot-ai would glue the next entry onto the torn line and lose it; here it is kept.
    let cursor = journal
        .append_one(NewEntry::text("after the crash"))
        .await
        .unwrap();
    assert_eq!(cursor, 2);
    let reopened = FileJournal::open(dir.path()).unwrap();
    let contents: Vec<String> = reopened
        .read_since(0, None)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.content)
        .collect();
    assert_eq!(contents, ["whole", "after the crash"]);
    assert!(reopened.repairs().is_empty());
    let sidecar = fs::read_to_string(dir.path().join("memory/history.jsonl.damaged")).unwrap();
    assert!(sidecar.contains("cut he"));
}

#[tokio::test]
async fn a_complete_last_line_without_newline_is_finished() {
    let dir = TempDir::new("unterminated");
    fs::write(
        memory(&dir).join("history.jsonl"),
        entry(json!(1)).to_string(),
    )
    .unwrap();
    let journal = FileJournal::open(dir.path()).unwrap();
    assert_eq!(journal.append_one(NewEntry::text("next")).await.unwrap(), 2);
    assert_eq!(journal.read_since(0, None).await.unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_never_share_a_cursor() {
    let dir = TempDir::new("two");
    let one = Arc::new(FileJournal::open(dir.path()).unwrap());
    let two = Arc::new(FileJournal::open(dir.path()).unwrap());
    let mut tasks = Vec::new();
    for i in 0..32 {
        let journal = if i % 2 == 0 {
            Arc::clone(&one)
        } else {
            Arc::clone(&two)
        };
        tasks.push(tokio::spawn(async move {
            journal
                .append_one(NewEntry::text(&format!("t{i}")))
                .await
                .unwrap()
        }));
    }
    let mut cursors = Vec::new();
    for task in tasks {
        cursors.push(task.await.unwrap());
    }
    cursors.sort_unstable();
    assert_eq!(cursors, (1..=32).collect::<Vec<_>>());
    // Each sees the other's entries.
    assert_eq!(one.read_since(0, None).await.unwrap().len(), 32);
    assert_eq!(two.latest_cursor().await.unwrap(), 32);
    // A compaction by one is seen by the other.
    one.set_dream_cursor(30).await.unwrap();
    one.compact(10).await.unwrap();
    assert_eq!(two.read_since(0, None).await.unwrap().len(), 10);
    assert_eq!(two.append_one(NewEntry::text("after")).await.unwrap(), 33);
}

#[tokio::test]
async fn dream_cursor_persists_and_compaction_leaves_no_temp() {
    let dir = TempDir::new("dream");
    {
        let journal = FileJournal::open(dir.path()).unwrap();
        for i in 0..5 {
            journal
                .append_one(NewEntry::text(&format!("e{i}")))
                .await
                .unwrap();
        }
        journal.set_dream_cursor(3).await.unwrap();
        journal.compact(2).await.unwrap();
    }
    let journal = FileJournal::open(dir.path()).unwrap();
    assert_eq!(journal.dream_cursor().await.unwrap(), 3);
    assert_eq!(
        fs::read_to_string(dir.path().join("memory/.dream_cursor")).unwrap(),
        "3"
    );
    assert_eq!(
        journal
            .read_since(0, None)
            .await
            .unwrap()
            .iter()
            .map(|e| e.cursor)
            .collect::<Vec<_>>(),
        [4, 5]
    );
    let names: Vec<String> = fs::read_dir(dir.path().join("memory"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.ends_with(".tmp")), "{names:?}");
    // An unreadable Dream cursor reads as 0.
    fs::write(dir.path().join("memory/.dream_cursor"), "garbage").unwrap();
    assert_eq!(journal.dream_cursor().await.unwrap(), 0);
}

/// nanobot-ai's own MemoryStore reads what we write and we read what it writes. Runs when
/// `NANOBOT_PEER_PYTHON` names the Python of a nanobot-ai 0.3.5 install (`cargo xtask ci` sets it).
#[tokio::test]
async fn interoperates_with_nanobot_ai() {
    let Some(python) = peer_python("nanobot-ai interop test") else {
        return;
    };
    let dir = TempDir::new("interop");
    let journal = FileJournal::open(dir.path()).unwrap();
    journal
        .append_one(
            NewEntry::text("- from rust 日本")
                .from_session("telegram:1")
                .covering(0, 4),
        )
        .await
        .unwrap();
    journal.append_one(NewEntry::text("second")).await.unwrap();
    journal.set_dream_cursor(1).await.unwrap();

    let script = r#"
import json, os, sys
from pathlib import Path
ws = Path(sys.argv[1])
os.environ["HOME"] = str(ws)
from nanobot.agent.memory import MemoryStore
store = MemoryStore(ws)
seen = store.read_unprocessed_history(0)
dream = store.get_last_dream_cursor()
cursor = store.append_history("from python", session_key="cli:direct")
print(json.dumps({"seen": [[e["cursor"], e["content"], e.get("session_key")] for e in seen], "dream": dream, "cursor": cursor}))
"#;
    let seen = run_peer(&python, script, &[dir.path().as_os_str()], None);
    assert_eq!(
        seen["seen"],
        json!([[1, "- from rust 日本", "telegram:1"], [2, "second", null]])
    );
    assert_eq!(seen["dream"], 1);
    assert_eq!(seen["cursor"], 3);

    // Our open journal notices nanobot-ai's append and continues after it.
    let read = journal.read_since(2, None).await.unwrap();
    assert_eq!(
        (read[0].cursor, read[0].content.as_str()),
        (3, "from python")
    );
    assert_eq!(
        journal
            .append_one(NewEntry::text("rust again"))
            .await
            .unwrap(),
        4
    );
}

#[tokio::test]
async fn documents_live_where_nanobot_keeps_them() {
    use nanobot_memory_store::{
        Document, Expected, FileDocuments, MemoryDocuments, MemoryDocumentsExt,
    };
    let dir = TempDir::new("documents-files");
    let docs = FileDocuments::open(dir.path()).unwrap();
    docs.initialize().await.unwrap();
    for (document, path) in [
        (Document::Soul, "SOUL.md"),
        (Document::User, "USER.md"),
        (Document::Memory, "memory/MEMORY.md"),
    ] {
        assert_eq!(
            fs::read_to_string(dir.path().join(path)).unwrap(),
            document.template()
        );
    }
    docs.write_skill(
        "my-skill",
        "---\nname: my-skill\n---\nDo it.\n",
        Expected::Absent,
    )
    .await
    .unwrap();
    assert_eq!(
        fs::read_to_string(dir.path().join("skills/my-skill/SKILL.md")).unwrap(),
        "---\nname: my-skill\n---\nDo it.\n"
    );
    // A folder without SKILL.md and a folder with an unusable name are not skills.
    fs::create_dir_all(dir.path().join("skills/empty")).unwrap();
    fs::create_dir_all(dir.path().join("skills/has space")).unwrap();
    fs::write(dir.path().join("skills/has space/SKILL.md"), "x").unwrap();
    let listed = docs.skills().await.unwrap();
    let names: Vec<&str> = listed.skills.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["my-skill"]);
    assert_eq!(listed.skipped.len(), 1, "{:?}", listed.skipped);
    assert!(
        listed.skipped[0].contains("has space"),
        "{:?}",
        listed.skipped
    );
    // No temporary file is left behind.
    let leftovers: Vec<String> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // A document that is not UTF-8 reads lossily and says so, so a prompt can show it and
    // nothing writes the replaced text back; its version is that of the bytes on disk.
    fs::write(dir.path().join("USER.md"), b"\xff\xfe name").unwrap();
    let read = docs.read(Document::User).await.unwrap().unwrap();
    assert!(read.decoded_lossily);
    assert_eq!(read.text, "\u{fffd}\u{fffd} name");
    assert_eq!(
        read.version,
        nanobot_memory_store::DocVersion::of_bytes(b"\xff\xfe name")
    );
}

#[test]
fn unedited_templates_are_recognised() {
    use nanobot_memory_store::Document;
    for document in Document::ALL {
        let template = document.template();
        assert!(document.is_unedited_template(template), "{document:?}");
        assert!(document.is_unedited_template(&format!("\n{template}\n\n")));
        assert!(!document.is_unedited_template(&format!("{template}\n- one fact\n")));
        assert!(!document.is_unedited_template(""));
    }
    assert!(!Document::User.is_unedited_template(Document::Soul.template()));
}

/// The templates are nanobot-ai's own bytes, and nanobot-ai treats a workspace initialised
/// here as unedited: no USER.md and no Memory section in its prompt, SOUL.md as is.
#[tokio::test]
async fn templates_are_nanobot_ais() {
    use nanobot_memory_store::{Document, FileDocuments, MemoryDocumentsExt};
    let Some(python) = peer_python("template parity test") else {
        return;
    };
    let dir = TempDir::new("templates-peer");
    FileDocuments::open(dir.path())
        .unwrap()
        .initialize()
        .await
        .unwrap();
    let script = r#"
import json, os, sys
from pathlib import Path
ws = Path(sys.argv[1])
os.environ["HOME"] = str(ws)
from nanobot.utils.helpers import load_bundled_template
from nanobot.agent.context import ContextBuilder
names = ["SOUL.md", "USER.md", "memory/MEMORY.md", "legacy/SOUL.md"]
prompt = ContextBuilder(ws).build_system_prompt()
print(json.dumps({"templates": [load_bundled_template(n) for n in names], "prompt": prompt}))
"#;
    let peer = run_peer(&python, script, &[dir.path().as_os_str()], None);
    let templates = peer["templates"].as_array().unwrap();
    for (document, template) in Document::ALL.iter().zip(templates) {
        assert_eq!(
            document.template(),
            template.as_str().unwrap(),
            "{document:?}"
        );
    }
    assert!(Document::Soul.is_unedited_template(templates[3].as_str().unwrap()));
    let prompt = peer["prompt"].as_str().unwrap();
    assert!(prompt.contains("## SOUL.md"), "nanobot keeps SOUL.md");
    assert!(
        !prompt.contains("## USER.md"),
        "an unedited USER.md stays out"
    );
    assert!(
        !prompt.contains("# Memory"),
        "an unedited MEMORY.md stays out"
    );
}

/// Issue 12.4: every input of the `journal_file` and `cursor_files` fuzz corpora
/// (`fuzz/corpus/`) is read without a panic, and cursors are never handed out twice (the
/// front matter corpus is replayed by prompt-inputs).
#[tokio::test]
async fn the_fuzz_corpora_replay() {
    let inputs = |target: &str| {
        nanobot_bench_workload::testing::fuzz_corpus(target)
            .into_iter()
            .map(|(path, _)| path)
    };
    for input in inputs("journal_file") {
        let ws = TempDir::new("fuzz-journal");
        fs::create_dir_all(ws.path().join("memory")).unwrap();
        fs::copy(&input, ws.path().join("memory/history.jsonl")).unwrap();
        let Ok(journal) = FileJournal::open(ws.path()) else {
            continue;
        };
        if let Ok(entries) = journal.read_since(0, None).await {
            assert!(
                entries.windows(2).all(|w| w[0].cursor < w[1].cursor),
                "{}",
                input.display()
            );
        }
    }
    for input in inputs("cursor_files") {
        let ws = TempDir::new("fuzz-cursors");
        let memory = ws.path().join("memory");
        fs::create_dir_all(&memory).unwrap();
        let data = fs::read(&input).unwrap();
        let split = data.iter().position(|&b| b == 0xff).unwrap_or(data.len());
        fs::write(
            memory.join("history.jsonl"),
            "{\"cursor\": 3, \"timestamp\": \"2026-01-01 00:00\", \"content\": \"a\"}\n\
             {\"cursor\": 7, \"timestamp\": \"2026-01-01 00:00\", \"content\": \"b\"}\n",
        )
        .unwrap();
        fs::write(memory.join(".cursor"), &data[..split]).unwrap();
        fs::write(
            memory.join(".dream_cursor"),
            data.get(split + 1..).unwrap_or_default(),
        )
        .unwrap();
        let Ok(journal) = FileJournal::open(ws.path()) else {
            continue;
        };
        let latest = journal.latest_cursor().await.unwrap();
        assert!(latest >= 7, "{}", input.display());
        let dream = journal.dream_cursor().await.unwrap();
        assert!(
            dream <= latest,
            "{}: Dream at {dream}, latest {latest}",
            input.display()
        );
        match journal.append_one(NewEntry::text("c")).await {
            Ok(next) => assert!(next > latest, "{}", input.display()),
            // Only the end of the cursor space refuses an append.
            Err(MemoryError::InvalidFile { .. }) => {
                assert_eq!(latest, u64::MAX, "{}", input.display());
            }
            Err(other) => panic!("{}: {other}", input.display()),
        }
    }
}

/// Found by the `cursor_files` fuzz target: a Dream cursor past everything in the history
/// (a history restored from an older copy) made the next entries take numbers Dream had
/// already passed, so it would never have read them. New entries now start after it.
/// A fuzz finding (the long campaign, `cursor_files`, 77,230th execution): a `.cursor`
/// holding u64::MAX made the next cursor wrap to 0, a cursor handed out again (and a
/// debug build panic on the overflow). Now the append is refused with a clear error,
/// nothing is written, and the journal still reads; the input is in the fuzz corpus.
#[tokio::test]
async fn a_cursor_file_at_the_end_of_the_cursor_space_refuses_appends_instead_of_wrapping() {
    let ws = TempDir::new("cursor-at-max");
    let memory = ws.path().join("memory");
    fs::create_dir_all(&memory).unwrap();
    fs::write(
        memory.join("history.jsonl"),
        "{\"cursor\": 7, \"timestamp\": \"2026-01-01 00:00\", \"content\": \"b\"}\n",
    )
    .unwrap();
    fs::write(memory.join(".cursor"), (u64::MAX - 1).to_string()).unwrap();
    let journal = FileJournal::open(ws.path()).unwrap();
    // The last cursor there is can still be given out, once.
    assert_eq!(
        journal.append_one(NewEntry::text("last")).await.unwrap(),
        u64::MAX
    );
    let before = fs::read(memory.join("history.jsonl")).unwrap();
    match journal.append_one(NewEntry::text("one too many")).await {
        Err(MemoryError::InvalidFile { reason, .. }) => {
            assert!(reason.contains("used up"), "{reason}");
        }
        other => panic!("expected the append to be refused, got {other:?}"),
    }
    assert_eq!(fs::read(memory.join("history.jsonl")).unwrap(), before);
    let cursors: Vec<u64> = journal
        .read_since(0, None)
        .await
        .unwrap()
        .iter()
        .map(|e| e.cursor)
        .collect();
    assert_eq!(cursors, [7, u64::MAX]);
    // A batch that would cross the end is refused whole, from a fresh open too.
    fs::write(memory.join(".cursor"), (u64::MAX - 1).to_string()).unwrap();
    let journal = FileJournal::open(ws.path()).unwrap();
    assert!(
        journal
            .append(&[NewEntry::text("a"), NewEntry::text("b")])
            .await
            .is_err()
    );
}

#[tokio::test]
async fn entries_after_a_history_cut_back_below_dreams_cursor_are_read_by_dream() {
    let ws = TempDir::new("dream-past-history");
    let memory = ws.path().join("memory");
    fs::create_dir_all(&memory).unwrap();
    fs::write(
        memory.join("history.jsonl"),
        "{\"cursor\": 7, \"timestamp\": \"2026-01-01 00:00\", \"content\": \"b\"}\n",
    )
    .unwrap();
    fs::write(memory.join(".cursor"), "x").unwrap();
    fs::write(memory.join(".dream_cursor"), "41").unwrap();
    let journal = FileJournal::open(ws.path()).unwrap();
    assert_eq!(journal.latest_cursor().await.unwrap(), 41);
    let next = journal.append_one(NewEntry::text("new")).await.unwrap();
    assert_eq!(next, 42);
    let unread = journal
        .read_since(journal.dream_cursor().await.unwrap(), None)
        .await
        .unwrap();
    assert_eq!(unread.iter().map(|e| e.cursor).collect::<Vec<_>>(), [42]);
}

/// The archive digest is a format (journal entries carry it, and recovery matches them by
/// it): it is the SHA-256 of each message's compact JSON without its token count, whatever
/// the code that computes it.
#[test]
fn the_archive_digest_is_the_compact_json_without_token_counts() {
    use nanobot_session_store::{StoredMessage, TOKENS_FIELD};
    use sha2::{Digest as _, Sha256};
    let messages = vec![
        StoredMessage::user("plain"),
        StoredMessage::from_json_text(
            r#"{"role": "assistant", "content": "é \"q\" \n 表", "_tokens": {"cl100k_base": 9}, "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}]}"#,
        )
        .unwrap(),
        StoredMessage::tool_result("c1", "f", "result").with(TOKENS_FIELD, serde_json::json!({"x": 1})),
    ];
    let mut hasher = Sha256::new();
    for message in &messages {
        let mut fields = message.fields().clone();
        fields.shift_remove(TOKENS_FIELD);
        hasher.update(serde_json::Value::Object(fields).to_string().as_bytes());
        hasher.update(b"\n");
    }
    let expected: String = hasher.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(nanobot_memory_store::archive_digest(&messages), expected);
}
