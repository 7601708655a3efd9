//! The file journal: nanobot-ai's format, cursor recovery from damaged or hand-edited files
//! (spec memory.md, cases 5.1), repairs, two processes, compaction on disk.

use std::fs;
use std::sync::Arc;

use memory_store::{FileJournal, HistoryJournal, HistoryJournalExt, JournalRepair, NewEntry};

use crate::support::TempDir;
use serde_json::{Value, json};

use bench_workload::testing::{peer_python, run_peer};

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
/// `NANOBOT_PEER_PYTHON` names the Python of a nanobot-ai 0.3.5 install (`.ci/run` sets it).
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
    use memory_store::{Document, FileDocuments, MemoryDocuments, MemoryDocumentsExt};
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
    docs.write_skill("my-skill", "---\nname: my-skill\n---\nDo it.\n")
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
    let names: Vec<String> = docs
        .list_skills()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["my-skill"]);
    // No temporary file is left behind.
    let leftovers: Vec<String> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // A document that is not UTF-8 is a clear error, not a silent loss.
    fs::write(dir.path().join("USER.md"), b"\xff\xfe name").unwrap();
    let error = docs.read(Document::User).await.unwrap_err();
    assert!(error.to_string().contains("not UTF-8"), "{error}");
}

#[test]
fn front_matter_of_nanobots_own_skills() {
    use memory_store::parse_front_matter;
    let github = "---\nname: github\ndescription: \"Interact with GitHub using the `gh` CLI.\"\nmetadata: {\"nanobot\":{\"emoji\":\"🐙\",\"requires\":{\"bins\":[\"gh\"]}}}\n---\n\n# GitHub Skill\n";
    let (fields, body) = parse_front_matter(github);
    assert_eq!(fields["name"], "github");
    assert_eq!(
        fields["description"],
        "Interact with GitHub using the `gh` CLI."
    );
    assert_eq!(fields["metadata"]["nanobot"]["requires"]["bins"][0], "gh");
    assert_eq!(body, "\n# GitHub Skill\n");
    let (fields, body) = parse_front_matter(
        "---\nname: x\nnested:\n  child: 1\nalways: true\ncount: 3\nquote: 'it''s'\n---\nbody",
    );
    assert_eq!(fields["always"], true);
    assert_eq!(fields["count"], 3);
    assert_eq!(fields["quote"], "it's");
    assert_eq!(fields["nested"], serde_json::json!({"child": 1}));
    assert_eq!(body, "body");
    // No closing line: not front matter.
    let (fields, body) = parse_front_matter("---\nname: x\n");
    assert!(fields.is_empty());
    assert_eq!(body, "---\nname: x\n");
}

/// Front matter written the ways skill authors write YAML, each with what PyYAML's
/// `safe_load` (which nanobot uses) makes of it.
const FRONT_MATTERS: &[(&str, &str)] = &[
    (
        "nested metadata",
        "name: deploy\ndescription: Ship it.\nmetadata:\n  nanobot:\n    always: true\n    requires:\n      bins:\n        - kubectl\n        - helm\n      env: [KUBECONFIG]\n",
    ),
    (
        "folded description",
        "name: long\ndescription: >\n  Summarise long documents\n  into short notes.\n\n  Second paragraph.\nhomepage: https://example.com/a#b\n",
    ),
    (
        "literal and chomping",
        "name: lit\nkeep: |+\n  one\n  two\n\nstrip: |-\n  three\nclip: |\n  four\n",
    ),
    (
        "scalars and comments",
        "name: scal # the name\ncount: 3\nratio: 0.5\nexp: 1e3\nsci: 1.5e+3\nnothing: ~\nempty:\nyes: true\nalways: yes\nflow: {always: on, bins: [gh, 'my tool']}\nquoted: \"a: b\"\nsingle: 'it''s'\n# a comment line\nurl: http://x.y:80/z\n",
    ),
    (
        "sequence of mappings",
        "name: seq\ninstall:\n  - id: brew\n    kind: brew\n    bins: [gh]\n  - id: apt\n    kind: apt\nbins:\n- gh\n- curl\nafter: 1\n",
    ),
    (
        "json metadata",
        "name: github\nmetadata: {\"nanobot\":{\"emoji\":\"🐙\",\"requires\":{\"bins\":[\"gh\"]}}}\n",
    ),
];

#[test]
fn front_matter_reads_nested_yaml() {
    use memory_store::parse_front_matter;
    let parse = |yaml: &str| parse_front_matter(&format!("---\n{yaml}---\nbody")).0;
    let nested = parse(FRONT_MATTERS[0].1);
    assert_eq!(nested["metadata"]["nanobot"]["always"], true);
    assert_eq!(
        nested["metadata"]["nanobot"]["requires"]["bins"],
        serde_json::json!(["kubectl", "helm"])
    );
    let folded = parse(FRONT_MATTERS[1].1);
    assert_eq!(
        folded["description"],
        "Summarise long documents into short notes.\nSecond paragraph.\n"
    );
    assert_eq!(folded["homepage"], "https://example.com/a#b");
    let literal = parse(FRONT_MATTERS[2].1);
    assert_eq!(literal["keep"], "one\ntwo\n\n");
    assert_eq!(literal["strip"], "three");
    // The last value of the front matter: nanobot reads it without a final line break.
    assert_eq!(literal["clip"], "four");
    let scalars = parse(FRONT_MATTERS[3].1);
    assert_eq!(scalars["name"], "scal");
    assert_eq!(scalars["nothing"], serde_json::Value::Null);
    assert_eq!(scalars["empty"], serde_json::Value::Null);
    assert_eq!(scalars["quoted"], "a: b");
    assert_eq!(
        scalars["True"], true,
        "YAML 1.1 reads the key `yes` as True"
    );
    assert_eq!(scalars["url"], "http://x.y:80/z");
    let sequence = parse(FRONT_MATTERS[4].1);
    assert_eq!(sequence["install"][0]["bins"][0], "gh");
    assert_eq!(sequence["install"][1]["kind"], "apt");
    assert_eq!(sequence["bins"], serde_json::json!(["gh", "curl"]));
    assert_eq!(sequence["after"], 1);
}

/// Every sample, and the front matter of every skill nanobot-ai ships, reads here as
/// nanobot-ai reads it (`parse_skill_metadata`, PyYAML underneath; `NANOBOT_PEER_PYTHON`).
#[test]
fn front_matter_matches_nanobot_ai() {
    let Some(python) = peer_python("front matter parity test") else {
        return;
    };
    let samples: Vec<String> = FRONT_MATTERS
        .iter()
        .map(|(_, yaml)| format!("---\n{yaml}---\nbody\n"))
        .collect();
    let script = r#"
import json, sys
from pathlib import Path
import nanobot
from nanobot.agent.skills import parse_skill_metadata
texts = json.load(sys.stdin)
texts += [p.read_text(encoding="utf-8") for p in sorted(Path(nanobot.__file__).parent.glob("skills/*/SKILL.md"))]
print(json.dumps([[t, parse_skill_metadata(t)] for t in texts]))
"#;
    let input = serde_json::to_vec(&samples).unwrap();
    let cases: Vec<(String, serde_json::Value)> =
        serde_json::from_value(run_peer(&python, script, &[], Some(&input))).unwrap();
    assert!(
        cases.len() > samples.len() + 5,
        "nanobot-ai's own skills are read too"
    );
    for (text, expected) in cases {
        let (fields, _) = memory_store::parse_front_matter(&text);
        assert_eq!(
            serde_json::Value::Object(fields),
            expected,
            "{}",
            &text[..text.len().min(200)]
        );
    }
}

/// Front matter is user data: any text parses without a panic.
#[test]
fn front_matter_survives_any_text() {
    const ALPHABET: &[char] = &[
        ' ', ' ', '-', ':', '\n', '\n', '|', '>', '"', '\'', '[', ']', '{', '}', ',', '#', 'a',
        'b', '1', '.', 'e', '+', '\\', '日', '\t', '\r', '~',
    ];
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..5_000 {
        let mut text = String::from("---\n");
        let len = (state % 60) as usize;
        for _ in 0..len {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            text.push(ALPHABET[(state >> 33) as usize % ALPHABET.len()]);
        }
        text.push_str("\n---\nbody");
        let (_, body) = memory_store::parse_front_matter(&text);
        assert!(text.ends_with(body));
    }
}

#[test]
fn unedited_templates_are_recognised() {
    use memory_store::Document;
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
    use memory_store::{Document, FileDocuments, MemoryDocumentsExt};
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

/// Issue 12.4: nesting without bound cannot overflow the stack: flow collections and
/// indented blocks deeper than the limit stay text, and the checked parse says why.
#[test]
fn front_matter_nesting_is_bounded() {
    use memory_store::{
        FrontMatterError, MAX_FRONT_MATTER_DEPTH, check_front_matter, parse_front_matter,
    };
    let deep_flow = format!("---\nname: x\nmetadata: {}\n---\nbody", "[".repeat(200_000));
    let (fields, body) = parse_front_matter(&deep_flow);
    assert_eq!(body, "body");
    assert!(fields["metadata"].is_string(), "kept as its text");
    assert_eq!(
        check_front_matter(&deep_flow).unwrap_err(),
        FrontMatterError::TooDeep {
            limit: MAX_FRONT_MATTER_DEPTH
        }
    );
    let closed = format!(
        "---\nmetadata: {}{}\n---\n",
        "[".repeat(100),
        "]".repeat(100)
    );
    assert!(check_front_matter(&closed).is_err());

    let mut deep_block = String::from("---\n");
    for i in 0..300 {
        deep_block.push_str(&" ".repeat(i));
        deep_block.push_str(&format!("k{i}:\n"));
    }
    deep_block.push_str("---\nbody");
    let (fields, body) = parse_front_matter(&deep_block);
    assert_eq!(body, "body");
    assert!(fields.contains_key("k0"));
    assert!(check_front_matter(&deep_block).is_err());

    // Ordinary nesting is untouched.
    let fine = "---\nmetadata: {\"nanobot\": {\"requires\": {\"bins\": [\"git\"]}}}\n---\n";
    let (fields, _) = check_front_matter(fine).unwrap();
    assert_eq!(fields["metadata"]["nanobot"]["requires"]["bins"][0], "git");
}

/// Issue 12.4: every input of the `front_matter` and `journal_file` fuzz corpora
/// (`fuzz/corpus/`) is read without a panic.
#[tokio::test]
async fn the_fuzz_corpora_replay() {
    use memory_store::{check_front_matter, parse_front_matter};
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    let inputs = |target: &str| {
        let mut paths: Vec<_> = fs::read_dir(root.join(target))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        paths.sort();
        assert!(paths.len() >= 2, "the {target} corpus is committed");
        paths
    };
    for input in inputs("front_matter") {
        let text = String::from_utf8_lossy(&fs::read(&input).unwrap()).into_owned();
        let (_, body) = parse_front_matter(&text);
        assert!(body.len() <= text.len());
        let _ = check_front_matter(&text);
    }
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
}
