//! The sandbox (spec dream.md cases 33-41): hostile paths the model may try, all refused
//! with an error it sees, nothing created; the allowed files work.

use crate::support::WriteAny as _;
use nanobot_dream::Overlay;
use nanobot_dream::sandbox::{Target, parse};
use nanobot_memory_store::MemoryDocumentsExt as _;
use nanobot_memory_store::{Document, FileDocuments};
use serde_json::json;

const HOSTILE: [&str; 32] = [
    "../SOUL.md",
    "memory/../SOUL.md",
    "memory/../../etc/passwd",
    "/etc/passwd",
    "/home/ada/.nanobot/workspace/SOUL.md",
    "~/.ssh/id_rsa",
    "C:\\Windows\\system.ini",
    "C:/Windows/system.ini",
    "memory\\MEMORY.md",
    "soul.md",
    "Soul.md",
    "SOUL.MD",
    "user.md",
    "memory/memory.md",
    "Memory/MEMORY.md",
    "SKILLS/x/SKILL.md",
    "skills/x/skill.md",
    "memory/history.jsonl",
    "memory/.dream_cursor",
    "memory/.cursor",
    "prompts/dream.md",
    "AGENTS.md",
    "HEARTBEAT.md",
    "memory/MEMORY.md/evil.txt",
    "USER.md/evil.txt",
    "skills/x/run.sh",
    "skills/../SOUL.md",
    "skills/x/../../SOUL.md",
    "skills/.hidden/SKILL.md",
    "SOUL.md\0.txt",
    "ＳＯＵＬ.md",
    "SOUL.md ",
];

#[test]
fn hostile_paths_are_refused_for_every_tool() {
    let mut overlay = Overlay::default();
    for path in HOSTILE {
        assert!(parse(path).is_err(), "{path:?} was accepted");
        for (tool, args) in [
            ("read_file", json!({"path": path})),
            ("write_file", json!({"path": path, "content": "pwned"})),
            (
                "edit_file",
                json!({"path": path, "old_text": "", "new_text": "pwned"}),
            ),
        ] {
            let outcome = overlay.call(tool, &args.to_string());
            assert!(outcome.is_error, "{tool} {path:?}");
            assert!(
                outcome.text.contains("outside allowed directory"),
                "{tool} {path:?}: {}",
                outcome.text
            );
        }
    }
    assert!(overlay.snapshot().is_empty(), "nothing was created");
    // Also refused: odd spellings of the allowed names, and non-object arguments.
    for path in [
        "",
        ".",
        "./",
        "SOUL.md/",
        "//SOUL.md",
        "skills//SKILL.md",
        "skills/a b/SKILL.md",
    ] {
        assert!(parse(path).is_err(), "{path:?}");
    }
    assert!(overlay.call("write_file", "[1, 2]").is_error);
    assert!(
        overlay
            .call("delete_file", "{}")
            .text
            .contains("there is no tool")
    );
}

// 34, 35: the allowed files are read, edited and written.
#[test]
fn the_four_places_work() {
    let mut overlay = Overlay::default();
    let ok = |o: nanobot_dream::ToolOutcome| {
        assert!(!o.is_error, "{}", o.text);
        o.text
    };
    assert!(
        ok(overlay.call(
            "write_file",
            &json!({"path": "memory/MEMORY.md", "content": "# Memory\n- X\n"}).to_string()
        ))
        .starts_with("Successfully wrote")
    );
    assert!(
        ok(overlay.call(
            "edit_file",
            &json!({"path": "memory/MEMORY.md", "old_text": "- X", "new_text": "- Y"}).to_string()
        ))
        .starts_with("Successfully edited")
    );
    ok(overlay.call("write_file", &json!({"path": "skills/demo/SKILL.md", "content": "---\nname: demo\ndescription: A demo\n---\n"}).to_string()));
    let listed = ok(overlay.call("list_files", "{}"));
    assert!(
        listed.contains("- memory/MEMORY.md (") && listed.contains("skills/demo/SKILL.md — A demo")
    );
    assert_eq!(
        overlay.get(&Target::Document(Document::Memory)),
        Some("# Memory\n- Y\n")
    );
    // 39: identical old and new text is an error and writes nothing.
    let same = overlay.call(
        "edit_file",
        &json!({"path": "memory/MEMORY.md", "old_text": "- Y", "new_text": "- Y"}).to_string(),
    );
    assert!(same.is_error && same.no_op_edit);
    // Ambiguous edits need replace_all.
    ok(overlay.call(
        "write_file",
        &json!({"path": "USER.md", "content": "a\na\n"}).to_string(),
    ));
    assert!(
        overlay
            .call(
                "edit_file",
                &json!({"path": "USER.md", "old_text": "a", "new_text": "b"}).to_string()
            )
            .text
            .contains("matches 2 places")
    );
    ok(overlay.call(
        "edit_file",
        &json!({"path": "USER.md", "old_text": "a", "new_text": "b", "replace_all": true})
            .to_string(),
    ));
    assert_eq!(
        overlay.get(&Target::Document(Document::User)),
        Some("b\nb\n")
    );
}

// The file cap keeps a runaway file out.
#[tokio::test]
async fn oversized_writes_are_refused() {
    let mut overlay = Overlay::load(&nanobot_memory_store::InMemoryDocuments::new(), 100)
        .await
        .unwrap();
    let outcome = overlay.call(
        "write_file",
        &json!({"path": "SOUL.md", "content": "x".repeat(101)}).to_string(),
    );
    assert!(
        outcome.is_error && outcome.text.contains("over the 100 allowed"),
        "{}",
        outcome.text
    );
    assert!(overlay.snapshot().is_empty());
}

// Symbolic links under the workspace are refused by the storage itself (defence in depth).
#[tokio::test]
async fn links_in_the_workspace_lead_nowhere() {
    let ws = nanobot_bench_workload::testing::TempDir::new("dream-links");
    let outside = nanobot_bench_workload::testing::TempDir::new("dream-outside");
    std::fs::write(outside.path().join("secret.txt"), "secret").unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), ws.path().join("USER.md"))
        .unwrap();
    let docs = FileDocuments::open(ws.path()).unwrap();
    assert!(docs.read_text(Document::User).await.is_err());
    assert!(Overlay::load(&docs, 1000).await.is_err());
    assert!(docs.write_doc_any(Document::User, "pwned").await.is_err());
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret.txt")).unwrap(),
        "secret"
    );
}

// A second read of an unchanged file gets a short note, not the text again.
#[test]
fn repeated_reads_of_an_unchanged_file_get_a_note() {
    let mut overlay = Overlay::default();
    overlay.call(
        "write_file",
        &json!({"path": "SOUL.md", "content": "# Soul\n"}).to_string(),
    );
    let read = || json!({"path": "SOUL.md"}).to_string();
    assert_eq!(
        overlay.call("read_file", &read()).text,
        "SOUL.md:\n# Soul\n"
    );
    assert!(
        overlay
            .call("read_file", &read())
            .text
            .starts_with("[File unchanged since last read: SOUL.md.")
    );
    overlay.call(
        "edit_file",
        &json!({"path": "SOUL.md", "old_text": "# Soul", "new_text": "# Soul!"}).to_string(),
    );
    assert_eq!(
        overlay.call("read_file", &read()).text,
        "SOUL.md:\n# Soul!\n"
    );
}
