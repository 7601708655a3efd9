use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use chrono::Utc;
use nanobot_memory_scope::{
    ChatKey, FileLinks, LinkAction, LinkRecord, LinkTable, SCOPE_RECORD, ScopeDirs, ScopeKey,
    Subject, UserKey,
};

fn temp(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memory-scope-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Ids a platform, a bridge or an attacker can send.
fn hostile_ids() -> Vec<String> {
    let mut ids: Vec<String> = [
        "..",
        ".",
        "/",
        "../../etc/passwd",
        "a/b",
        "\\..\\windows",
        "a\0b",
        "\0",
        "\u{202e}gnp.exe",
        "\u{200f}123",
        "Alice",
        "alice",
        "ALICE",
        "%2e%2e%2f",
        "%2E%2E%2F",
        "discord:9",
        "telegram:1",
        " 1",
        "1 ",
        "~h00",
        "scope.json",
        "links.jsonl",
        "\n",
        "💥",
        "CON",
        "-rf",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    ids.push("x".repeat(10 * 1024));
    ids.push(format!("{}y", "x".repeat(10 * 1024 - 1)));
    ids
}

fn contained(root: &Path, scopes: &Path) -> bool {
    let name = root.file_name().unwrap().to_str().unwrap();
    root.parent() == Some(scopes)
        && !name.is_empty()
        && name.len() <= 160
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'~')
}

#[test]
fn hostile_ids_get_distinct_contained_directories() {
    let workspace = temp("hostile");
    let dirs = ScopeDirs::new(&workspace);
    let mut subjects = Vec::new();
    for id in hostile_ids() {
        subjects.push(Subject::User(UserKey::new("telegram", &id).unwrap()));
        subjects.push(Subject::Chat(ChatKey::new("telegram", &id).unwrap()));
    }
    subjects.push(Subject::User(UserKey::new("discord", "9").unwrap()));
    assert!(subjects.len() >= 40);
    let mut names = BTreeSet::new();
    for subject in &subjects {
        let root = dirs.open(&ScopeKey::local(subject.clone())).unwrap();
        assert!(
            contained(&root, &dirs.scopes_dir()),
            "{subject:?} → {}",
            root.display()
        );
        assert!(root.join(SCOPE_RECORD).is_file());
        assert!(
            names.insert(root.file_name().unwrap().to_owned()),
            "a collision for {subject:?}"
        );
    }
    // Every directory lists back as its own subject, and nothing else was made.
    let listed: Vec<Subject> = dirs
        .list()
        .unwrap()
        .into_iter()
        .map(|d| d.subject)
        .collect();
    let mut expected = subjects.clone();
    expected.sort();
    assert_eq!(listed, expected);
    let outside: Vec<_> = std::fs::read_dir(&workspace)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(outside, vec![std::ffi::OsString::from("scopes")]);
    std::fs::remove_dir_all(&workspace).unwrap();
}

#[test]
fn the_agent_scope_is_the_workspace_and_cannot_be_deleted() {
    let workspace = temp("agent");
    let dirs = ScopeDirs::new(&workspace);
    assert_eq!(
        dirs.open(&ScopeKey::local(Subject::Agent)).unwrap(),
        workspace
    );
    assert!(dirs.delete(&Subject::Agent).is_err());
    assert!(
        !workspace.join("scopes").exists(),
        "the default layout gains nothing"
    );
    std::fs::remove_dir_all(&workspace).unwrap();
}

#[test]
fn deleting_a_scope_removes_its_directory_whole() {
    let workspace = temp("delete");
    let dirs = ScopeDirs::new(&workspace);
    let ada = Subject::User(UserKey::parse("telegram:1").unwrap());
    let bob = Subject::User(UserKey::parse("telegram:2").unwrap());
    let ada_root = dirs.open(&ScopeKey::local(ada.clone())).unwrap();
    let bob_root = dirs.open(&ScopeKey::local(bob.clone())).unwrap();
    std::fs::create_dir_all(ada_root.join("memory")).unwrap();
    std::fs::write(ada_root.join("memory/MEMORY.md"), "canary").unwrap();
    assert!(dirs.delete(&ada).unwrap());
    assert!(!dirs.delete(&ada).unwrap(), "already gone");
    assert!(!ada_root.exists());
    assert!(bob_root.exists());
    let left: Vec<_> = std::fs::read_dir(dirs.scopes_dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(left, vec![bob_root]);
    std::fs::remove_dir_all(&workspace).unwrap();
}

#[test]
fn a_directory_without_a_record_or_a_name_is_reported() {
    let workspace = temp("stray");
    std::fs::create_dir_all(workspace.join("scopes/not-a-scope")).unwrap();
    let error = ScopeDirs::new(&workspace).list().unwrap_err();
    assert!(error.to_string().contains("not-a-scope"), "{error}");
    std::fs::remove_dir_all(&workspace).unwrap();
}

fn record(identity: &str, target: &str, action: LinkAction) -> LinkRecord {
    LinkRecord {
        action,
        identity: UserKey::parse(identity).unwrap(),
        target: UserKey::parse(target).unwrap(),
        by: "root".into(),
        at: Utc::now(),
    }
}

#[tokio::test]
async fn file_links_survive_a_torn_line_and_refuse_a_corrupt_one() {
    let workspace = temp("links");
    let links = FileLinks::new(&workspace);
    links
        .append(record("discord:9", "telegram:1", LinkAction::Link))
        .await
        .unwrap();
    // A crash in the middle of the next append.
    let mut bytes = std::fs::read(links.path()).unwrap();
    bytes.extend_from_slice(b"{\"action\":\"li");
    std::fs::write(links.path(), &bytes).unwrap();
    assert_eq!(
        links.records().await.unwrap().len(),
        1,
        "the torn line is not a record"
    );
    links
        .append(record("slack:3", "telegram:1", LinkAction::Link))
        .await
        .unwrap();
    assert_eq!(links.records().await.unwrap().len(), 2);
    let sidecar = std::fs::read_to_string(links.path().with_extension("jsonl.damaged")).unwrap();
    assert!(
        sidecar.contains("{\"action\":\"li"),
        "the torn bytes are kept: {sidecar}"
    );
    // A damaged complete line is an error: skipping an unlink would keep two people joined.
    let mut text = std::fs::read_to_string(links.path()).unwrap();
    text.insert_str(0, "not json\n");
    std::fs::write(links.path(), text).unwrap();
    let error = links.records().await.unwrap_err();
    assert!(error.to_string().contains("line 1"), "{error}");
    std::fs::remove_dir_all(&workspace).unwrap();
}

#[tokio::test]
async fn concurrent_link_changes_are_all_kept() {
    let workspace = temp("links-concurrent");
    let mut tasks = Vec::new();
    for n in 0..16 {
        let workspace = workspace.clone();
        tasks.push(std::thread::spawn(move || {
            let links = FileLinks::new(&workspace);
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            runtime
                .block_on(links.append(record(
                    &format!("discord:{n}"),
                    "telegram:1",
                    LinkAction::Link,
                )))
                .unwrap();
        }));
    }
    for task in tasks {
        task.join().unwrap();
    }
    let links = FileLinks::new(&workspace);
    assert_eq!(links.records().await.unwrap().len(), 16);
    assert_eq!(
        links
            .forget(&UserKey::parse("discord:3").unwrap())
            .await
            .unwrap(),
        1
    );
    assert_eq!(links.records().await.unwrap().len(), 15);
    std::fs::remove_dir_all(&workspace).unwrap();
}

/// The link table under the crash-filesystem double and the fault plan of `fs_support`:
/// every acknowledged link survives a power loss at any point, and every failed operation
/// of an append is an error that loses no acknowledged link.
#[tokio::test]
async fn acknowledged_links_survive_power_loss_and_failing_operations() {
    use nanobot_fs_support::crash::Recorder;
    use nanobot_fs_support::observe::{self, Fault, FaultPlan};
    use std::sync::Arc;

    async fn five_links(workspace: &std::path::Path, ack: &dyn Fn(u64)) -> Result<(), String> {
        let links = FileLinks::new(workspace);
        for n in 0..5u64 {
            links
                .append(record(
                    &format!("discord:{n}"),
                    "telegram:1",
                    LinkAction::Link,
                ))
                .await
                .map_err(|e| e.to_string())?;
            ack(n + 1);
        }
        Ok(())
    }

    let root = std::fs::canonicalize(temp("links-power")).unwrap();
    let recorder = Arc::new(Recorder::start(&root).unwrap());
    {
        let _watching = observe::watch(&root, recorder.clone());
        five_links(&root, &|n| recorder.mark(n)).await.unwrap();
    }
    let trace = recorder.trace();
    assert_eq!(trace.untracked(), 0);
    for point in 0..=trace.operations() {
        for seed in 0..8 {
            let after = root.with_extension(format!("after-{point}-{seed}"));
            trace.crash_state(point, seed).materialize(&after).unwrap();
            let acknowledged = trace.marks_before(point).last().copied().unwrap_or(0);
            let found = FileLinks::new(&after).records().await.unwrap().len() as u64;
            assert!(
                found >= acknowledged,
                "point {point} seed {seed}: {found} of {acknowledged}"
            );
            std::fs::remove_dir_all(&after).unwrap();
        }
    }
    let counter = Arc::new(FaultPlan::counting());
    let counting = std::fs::canonicalize(temp("links-count")).unwrap();
    {
        let _watching = observe::watch(&counting, counter.clone());
        five_links(&counting, &|_| {}).await.unwrap();
    }
    for n in 0..counter.seen() {
        for fault in Fault::ALL {
            let dir = std::fs::canonicalize(temp("links-fault")).unwrap();
            let plan = Arc::new(FaultPlan::failing(n, fault));
            let acknowledged = std::sync::atomic::AtomicU64::new(0);
            {
                let _watching = observe::watch(&dir, plan.clone());
                let _ = five_links(&dir, &|n| {
                    acknowledged.store(n, std::sync::atomic::Ordering::SeqCst)
                })
                .await;
            }
            assert!(plan.fired().is_some());
            let found = FileLinks::new(&dir).records().await.unwrap().len() as u64;
            assert!(found >= acknowledged.into_inner(), "{:?}", plan.fired());
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
    std::fs::remove_dir_all(&root).unwrap();
    std::fs::remove_dir_all(&counting).unwrap();
}
