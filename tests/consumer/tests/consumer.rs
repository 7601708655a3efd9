//! A bot builder's tests, on the registry packages only: the stores of their own pass the
//! testkit's suites, a bot on them answers through them, and a files bot's prompt is
//! snapshotted.

use std::path::PathBuf;
use std::sync::Arc;

use chrono::{TimeZone, Utc};
use nanobot_memory::context::{BuilderConfig, Host};
use nanobot_memory::llm::TokioClock;
use nanobot_memory::scope::UserKey;
use nanobot_memory::store::{Document, Expected};
use nanobot_memory::{AgentSettings, IsolationMode};

use nanobot_consumer::{AuditedSessions, OwnBackend, ToyJournal};
use nanobot_llm_http::testing::FakeServer;
use nanobot_memory::llm::{Cl100kBase, SystemClock};
use nanobot_memory::scope::{ScopeKey, Subject};
use nanobot_memory::{Bot, Speaker};

nanobot_testkit::sessions::session_store_conformance!(
    audited,
    || async { AuditedSessions::default() },
    skips = [shared_turn_locks, shared_stale_writers]
);

nanobot_testkit::memory::journal_conformance!(
    toy_journal,
    || async { ToyJournal::default() },
    skips = [shared_cursors]
);

/// The whole backend: two users and a group never see each other's memory.
#[tokio::test]
async fn the_own_backend_keeps_scopes_apart() {
    let backend = OwnBackend::new(Arc::new(SystemClock), Arc::new(Cl100kBase));
    nanobot_testkit::isolation::isolation_suite(Arc::new(backend)).await;
}

/// The search suite runs from the package, over the corpus the package embeds (here on the
/// in-memory index the assembly crate re-exports; a backend of one's own goes the same way).
#[tokio::test]
async fn the_search_suite_runs_from_the_package() {
    use nanobot_memory::index::{InMemoryIndex, MemoryIndex};
    let report = nanobot_testkit::index::run(|_scope| async {
        Arc::new(InMemoryIndex::new()) as Arc<dyn MemoryIndex>
    })
    .await
    .unwrap();
    assert!(report.chunks > 300, "{} chunks", report.chunks);
}

/// A fresh directory under the system's temporary one.
fn workspace(name: &str) -> PathBuf {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir().join(format!(
        "nanobot-consumer-{name}-{}-{stamp}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A files bot (nanobot-ai's workspace layout, one memory per user) and the prompt it sends
/// for a user with a known memory, byte for byte: the CI test a bot builder keeps.
#[tokio::test]
async fn the_files_bots_prompt_is_what_review_approved() {
    let dir = workspace("prompt");
    let mut context = BuilderConfig::new(Host::new("Linux", "x86_64", "CI"));
    context.tool_contract = false;
    let start = Utc.with_ymd_and_hms(2026, 3, 2, 9, 30, 0).unwrap();
    let bot = Bot::builder()
        .files(&dir)
        // Never called: building a prompt asks no model.
        .openai("http://127.0.0.1:9/v1", "support-model")
        .isolation(IsolationMode::User)
        .settings(AgentSettings::new("support-model", 8_192, 512))
        .context(context)
        .clock(Arc::new(TokioClock::starting_at(start)))
        .build()
        .await
        .unwrap();
    let ada = ScopeKey::local(Subject::User(UserKey::new("cli", "ada").unwrap()));
    let memory = bot.memory(&ada).await.unwrap();
    memory
        .documents
        .write(
            Document::User,
            "# User\n\n- Name: Ada\n- Prefers short answers.\n",
            Expected::Absent,
        )
        .await
        .unwrap();
    let prompt = bot
        .prompt(
            &Speaker::user("ada"),
            "cli:chat",
            "What do you know about me?",
        )
        .await
        .unwrap();
    let system = prompt
        .system_prompt()
        .replace(&dir.display().to_string(), "[WORKSPACE]");
    insta::assert_snapshot!("files_bot_system_prompt", system);
    // The memory is nanobot-ai's file, where nanobot-ai would look for it.
    let user_md = find(&dir, "USER.md").unwrap();
    assert!(user_md.contains("Prefers short answers."));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The text of the first file named `name` under `dir` that mentions Ada.
fn find(dir: &std::path::Path, name: &str) -> std::io::Result<String> {
    for entry in std::fs::read_dir(dir)?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if let Ok(text) = find(&path, name) {
                return Ok(text);
            }
        } else if path.file_name().is_some_and(|n| n == name) {
            let text = std::fs::read_to_string(&path)?;
            if text.contains("Ada") {
                return Ok(text);
            }
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::NotFound,
        name.to_owned(),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bot_keeps_its_sessions_in_the_store_its_builder_wrote() {
    let model = FakeServer::chat_model(Arc::new(|text: &str| format!("echo {text}"))).await;
    let backend = Arc::new(OwnBackend::new(Arc::new(SystemClock), Arc::new(Cl100kBase)));
    let bot = Bot::builder()
        .backend(backend.clone())
        .openai(&format!("{}/v1", model.url()), "local")
        .build()
        .await
        .unwrap();
    let me = Speaker::anonymous();
    let first = bot.turn(&me, "cli:chat", "hello").await.unwrap();
    assert_eq!(first.answer, "echo hello");
    bot.turn(&me, "cli:chat", "again").await.unwrap();
    bot.finish().await.unwrap();

    let sessions = backend
        .sessions(&ScopeKey::local(Subject::Agent))
        .expect("the agent scope was opened");
    let audit = sessions.audit();
    let appended: usize = audit
        .iter()
        .filter_map(|line| line.strip_prefix("append cli:chat "))
        .map(|n| n.parse::<usize>().unwrap())
        .sum();
    assert_eq!(
        appended, 4,
        "two turns, a user message and an answer each: {audit:?}"
    );
    // The second turn's request replayed the first from this store.
    let second = model.requests()[1].json().to_string();
    assert!(second.contains("echo hello"), "{second}");
}
