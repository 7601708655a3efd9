//! `nanobot memory search` and `nanobot memory reindex` over the labelled search corpus
//! (`crates/nanobot-memory-index/fixtures/search`, a nanobot-ai workspace and 50 sessions): the hits the labels
//! name, the same hits after the side index is deleted or damaged, bad arguments named.

use std::path::{Path, PathBuf};

use nanobot_bench_workload::testing::TempDir;
use serde_json::Value;

use crate::{nanobot, text};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../nanobot-memory-index/fixtures/search")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The corpus as a workspace: its files, and its sessions where this layout keeps them.
pub(crate) fn workspace(label: &str) -> TempDir {
    let ws = TempDir::new(label);
    copy_dir(&fixture().join("workspace"), ws.path());
    let sessions = ws.path().join("sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    for entry in std::fs::read_dir(fixture().join("sessions")).unwrap() {
        let path = entry.unwrap().path();
        let body = std::fs::read_to_string(&path).unwrap();
        let first: Value = serde_json::from_str(body.lines().next().unwrap()).unwrap();
        let key = nanobot_session_store::SessionKey::new(first["key"].as_str().unwrap()).unwrap();
        std::fs::write(sessions.join(format!("{}.jsonl", key.storage_stem())), body).unwrap();
    }
    ws
}

/// One labelled query of each kind of source and language.
pub(crate) const QUERIES: [(&str, &str); 5] = [
    ("INC-20931", "history#213"),
    ("A7-99213-K", "session:telegram:1022#12"),
    ("QX7R2P", "MEMORY.md#Travel"),
    ("INV-2026-0931", "USER.md#Finances"),
    ("喝茶", "history#215"),
];

fn sources_of(ws: &Path, query: &str) -> Vec<String> {
    let out = nanobot(ws, &["memory", "search", query, "--json"], &[]);
    assert!(out.status.success(), "{query}: {}", text(&out, ws));
    let hits: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    hits.iter()
        .map(|h| h["source"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn memory_search_finds_the_labelled_sources_and_survives_a_lost_or_damaged_index() {
    let ws = workspace("cli-search");
    let mut first = Vec::new();
    for (query, relevant) in QUERIES {
        let sources = sources_of(ws.path(), query);
        assert!(
            sources.iter().any(|s| s == relevant),
            "{query}: {relevant} not in {sources:?}"
        );
        first.push(sources);
    }
    let index = ws.path().join(".nanobot-rs/index.sqlite");
    assert!(index.is_file(), "the side index is in the scope directory");
    let shown = nanobot(ws.path(), &["memory", "search", "INC-20931"], &[]);
    assert!(shown.status.success());
    insta::assert_snapshot!("memory_search", text(&shown, ws.path()));

    // Deleted: built again, the same top 5 for every query.
    std::fs::remove_file(&index).unwrap();
    let again: Vec<Vec<String>> = QUERIES
        .iter()
        .map(|(q, _)| sources_of(ws.path(), q))
        .collect();
    assert_eq!(again, first);

    // Damaged: detected, rebuilt and reported, never fatal.
    std::fs::write(&index, b"this is not an SQLite database, whatever it was").unwrap();
    let damaged = nanobot(ws.path(), &["memory", "search", "INC-20931", "--json"], &[]);
    assert!(damaged.status.success(), "{}", text(&damaged, ws.path()));
    assert!(
        String::from_utf8_lossy(&damaged.stderr).contains("search index was rebuilt"),
        "{}",
        text(&damaged, ws.path())
    );
    let hits: Vec<Value> = serde_json::from_slice(&damaged.stdout).unwrap();
    assert_eq!(hits[0]["source"], "history#213");

    let reindex = nanobot(ws.path(), &["memory", "reindex"], &[]);
    assert!(reindex.status.success(), "{}", text(&reindex, ws.path()));
    let said = text(&reindex, ws.path());
    assert!(
        said.contains("300 history entries, 3 memory files") && said.contains("of 50 sessions"),
        "{said}"
    );
    assert_eq!(sources_of(ws.path(), "INC-20931"), first[0]);
}

#[test]
fn memory_search_names_what_is_wrong_with_its_arguments() {
    let ws = workspace("cli-search-args");
    for (args, expected) in [
        (
            &["memory", "search", "x", "--limit", "0"][..],
            "--limit must be 1 to 10, not 0",
        ),
        (&["memory", "search", "x", "--source", "diary"][..], "diary"),
        (
            &["memory", "search", "x", "--since", "2026-13-01"][..],
            "2026-13-01",
        ),
        (&["memory", "search", "   "][..], "query"),
    ] {
        let out = nanobot(ws.path(), args, &[]);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(
            text(&out, ws.path()).contains(expected),
            "{args:?}: {}",
            text(&out, ws.path())
        );
    }
    // Sources and dates narrow the search.
    let out = nanobot(
        ws.path(),
        &[
            "memory",
            "search",
            "INC-20931",
            "--source",
            "sessions",
            "--json",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out, ws.path()));
    let hits: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(hits.iter().all(|h| h["kind"] == "sessions"), "{hits:?}");
}

/// The entries of the search-by-meaning check, as nanobot-ai writes its journal.
pub(crate) fn meaning_workspace(label: &str) -> TempDir {
    let ws = TempDir::new(label);
    std::fs::create_dir_all(ws.path().join("memory")).unwrap();
    let entries = [
        "The user adopted a kitten called Miso in April.",
        "The user booked the train to Lyon for the conference in June.",
        "The user paid the plumber's invoice INV-88 on Friday.",
        "The user is learning to play the cello on weekends.",
        "The user's laptop battery is failing and needs a replacement.",
    ];
    let journal: String = entries
        .iter()
        .enumerate()
        .map(|(n, content)| {
            let at = format!("2026-0{}-02 10:00", n + 1);
            format!(
                "{}\n",
                serde_json::json!({"cursor": n + 1, "timestamp": at, "content": content})
            )
        })
        .collect();
    std::fs::write(ws.path().join("memory/history.jsonl"), journal).unwrap();
    ws
}

/// The real embedding model's URL, or `None` after saying the test skips.
pub(crate) fn embeddings_url(test: &str) -> Option<String> {
    nanobot_bench_workload::testing::required_env(
        "NANOBOT_TEST_EMBEDDINGS_URL",
        test,
        "`cargo xtask ci` starts one, or `cargo xtask llm start --model minilm --port 8090`",
    )
}

/// Search by meaning through the app on the storage `storage` names, in a workspace made by
/// [`meaning_workspace`] (and imported, for a database): a query that shares no word with
/// the entry it means finds nothing by words and finds it first with the configured
/// embedder; another model's name pauses the lane and the search says so while words still
/// answer; `memory reindex` embeds everything with the configured model, after which the
/// lane answers again.
pub(crate) fn search_by_meaning_checks(ws: &Path, url: &str, storage: &[(&'static str, String)]) {
    let envs = |model: Option<&str>| {
        let mut envs = storage.to_vec();
        if let Some(model) = model {
            envs.push(("NANOBOT_EMBEDDINGS_URL", url.to_owned()));
            envs.push(("NANOBOT_EMBEDDINGS_MODEL", model.to_owned()));
            envs.push(("NANOBOT_EMBEDDINGS_DIMENSIONS", "384".to_owned()));
        }
        envs
    };
    let run = |model: Option<&str>, args: &[&str]| {
        let envs = envs(model);
        let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let out = nanobot(ws, args, &envs);
        let said = text(&out, ws);
        assert!(out.status.success(), "{args:?}: {said}");
        said
    };
    let search = |model: Option<&str>, query: &str| run(model, &["memory", "search", query]);

    let words = search(None, "feline companion");
    assert!(words.contains("Nothing in memory matches"), "{words}");
    let meaning = search(Some("all-MiniLM-L6-v2"), "feline companion");
    assert!(
        meaning.starts_with("[1] history#1 ") && meaning.contains("kitten called Miso"),
        "{meaning}"
    );
    assert!(!meaning.contains("paused"), "{meaning}");

    let paused = search(Some("another-model"), "feline companion");
    assert!(
        paused.contains("vector search is paused: the index holds vectors of all-MiniLM-L6-v2 (384 dimensions), the embedder is another-model (384 dimensions)"),
        "{paused}"
    );
    let train = search(Some("another-model"), "Lyon");
    assert!(train.starts_with("[1] history#2 "), "{train}");

    let said = run(Some("another-model"), &["memory", "reindex"]);
    assert!(
        said.contains("Embedded 5 chunks with another-model"),
        "{said}"
    );
    let resumed = search(Some("another-model"), "feline companion");
    assert!(
        resumed.starts_with("[1] history#1 ") && !resumed.contains("paused"),
        "{resumed}"
    );
}

/// [`search_by_meaning_checks`] on files, with the real embedding model `cargo xtask ci` serves.
#[test]
fn memory_search_finds_by_meaning_with_a_configured_embedding_model() {
    let Some(url) =
        embeddings_url("memory_search_finds_by_meaning_with_a_configured_embedding_model")
    else {
        return;
    };
    let ws = meaning_workspace("cli-search-meaning");
    search_by_meaning_checks(ws.path(), &url, &[]);
}

/// Issue 31: `search.embeddings_model_dir` runs all-MiniLM-L6-v2 in process (no server):
/// a query sharing no word with its entry finds it first. A damaged model folder is no
/// error: the search answers by words, and the warning names the file.
#[test]
fn memory_search_finds_by_meaning_with_the_model_in_process() {
    let test = "memory_search_finds_by_meaning_with_the_model_in_process";
    let Some(dir) = nanobot_bench_workload::testing::required_env(
        "NANOBOT_TEST_EMBED_MODEL_DIR",
        test,
        "`cargo xtask ci` installs all-MiniLM-L6-v2 and names its folder",
    ) else {
        return;
    };
    let ws = meaning_workspace("cli-search-in-process");
    let search = |model_dir: &str, query: &str| {
        let envs = [
            ("NANOBOT_EMBEDDINGS_MODEL_DIR", model_dir),
            ("NANOBOT_EMBEDDINGS_MODEL", "all-MiniLM-L6-v2"),
        ];
        let out = nanobot(ws.path(), &["memory", "search", query], &envs);
        let said = text(&out, ws.path());
        assert!(out.status.success(), "{query}: {said}");
        said
    };
    let meaning = search(&dir, "feline companion");
    assert!(
        meaning.starts_with("[1] history#1 ") && meaning.contains("kitten called Miso"),
        "{meaning}"
    );

    let damaged = TempDir::new("damaged-model");
    for file in ["config.json", "vocab.txt"] {
        std::fs::copy(Path::new(&dir).join(file), damaged.path().join(file)).unwrap();
    }
    std::fs::write(
        damaged.path().join("model.safetensors"),
        b"\x10\0\0\0\0\0\0\0{not json",
    )
    .unwrap();
    let words = search(&damaged.path().display().to_string(), "Lyon");
    assert!(words.contains("history#2"), "{words}");
    assert!(words.contains("model.safetensors"), "{words}");
    assert!(words.contains("word matches only"), "{words}");
}
