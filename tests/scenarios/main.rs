//! Whole-stack scenarios through `nanobot_app::Bot` with a fake model: a long conversation
//! that consolidates, an idle compaction whose summary reaches the next prompt, a Dream run
//! whose edits reach the next prompt, a restart in the middle, `/new`, `/dream-restore`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use nanobot_app::{Bot, Config, commands};
use nanobot_bench_workload::testing::TempDir;
use nanobot_llm_port::{
    Capabilities, LlmClient, LlmError, LlmRequest, LlmResponse, SystemClock, TextSink, ToolCall,
};
use nanobot_memory_store::{Document, HistoryJournal, MemoryDocumentsExt};
use nanobot_session_store::SessionKey;
use serde_json::json;

/// Answers like a model would: chat turns with a long-ish answer, archive requests with a
/// fact list, Dream runs with one write of USER.md and then a summary.
#[derive(Default)]
struct FakeModel {
    calls: Mutex<Vec<LlmRequest>>,
    dream_fact: Mutex<String>,
}

fn last_user_text(request: &LlmRequest) -> String {
    request
        .messages
        .iter()
        .rev()
        .find(|m| matches!(m, nanobot_llm_port::Message::User(_)))
        .and_then(|m| m.content())
        .map(nanobot_llm_port::Content::joined_text)
        .unwrap_or_default()
}

#[async_trait]
impl LlmClient for FakeModel {
    async fn complete(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        self.calls.lock().unwrap().push(request.clone());
        let user = last_user_text(request);
        if request
            .tools
            .iter()
            .any(|t| t.function.name == "write_file")
        {
            // Dream: write once, then finish.
            let already = request
                .messages
                .iter()
                .any(|m| matches!(m, nanobot_llm_port::Message::Tool(_)));
            if already {
                return Ok(LlmResponse::text(
                    "Saved the user's tea preference in USER.md.",
                ));
            }
            let fact = self.dream_fact.lock().unwrap().clone();
            return Ok(LlmResponse::tool_calls(vec![ToolCall::with_json(
                "w1",
                "write_file",
                &json!({"path": "USER.md", "content": format!("# User\n\n- {fact}\n")}),
            )]));
        }
        if user.contains("Write a memory overview") {
            return Ok(LlmResponse::text(
                "- [permanent] Ada drinks green tea\n- [durable] Ada plans a trip to Lisbon",
            ));
        }
        let words = "Here is a thoughtful and fairly long answer about travel plans. ".repeat(30);
        Ok(LlmResponse::text(format!("Answer to: {user}. {words}")))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(8_192)
    }
}

fn config(workspace: &std::path::Path, window: usize) -> Config {
    let vars = [
        ("NANOBOT_WORKSPACE", workspace.display().to_string()),
        ("NANOBOT_CONTEXT_WINDOW", window.to_string()),
        ("NANOBOT_MAX_OUTPUT_TOKENS", "256".into()),
        ("NANOBOT_IDLE_TTL_MINUTES", "15".into()),
        ("NANOBOT_STREAM", "false".into()),
    ];
    Config::load(None, &|name: &str| {
        vars.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.clone())
    })
    .unwrap()
}

async fn bot(workspace: &std::path::Path, window: usize, model: Arc<FakeModel>) -> Bot {
    Bot::open(config(workspace, window), model, Arc::new(SystemClock))
        .await
        .unwrap()
}

fn quiet() -> TextSink {
    Arc::new(|_: &str| {})
}

fn key(text: &str) -> SessionKey {
    SessionKey::new(text).unwrap()
}

#[tokio::test]
async fn a_long_conversation_consolidates_and_the_summary_reaches_the_prompt() {
    let ws = TempDir::new("scenario-long");
    let model = Arc::new(FakeModel::default());
    let bot = bot(ws.path(), 4_096, model.clone()).await;
    let k = key("cli:ada");
    for i in 0..10 {
        bot.turn(&k, &format!("message number {i} about my trip"), &quiet())
            .await
            .unwrap();
        bot.finish().await.unwrap();
    }
    let handle = bot.memory.sessions.get_or_create(&k).await.unwrap();
    let (count, archived) = handle.read(|s| (s.messages().len(), s.last_consolidated()));
    assert_eq!(count, 20);
    assert!(archived > 0, "the session was consolidated");
    let entries = bot.memory.journal.read_since(0, None).await.unwrap();
    assert!(
        entries
            .iter()
            .any(|e| e.content.contains("Ada drinks green tea"))
    );
    // Every archived message reached the journal, and the summary is in the next prompt.
    let prompt = bot.build_prompt(&k, "next").await.unwrap();
    let system = prompt.system_prompt();
    assert!(system.contains("[Archived Context Summary]"));
    assert!(system.contains("Ada drinks green tea"));
    assert!(
        prompt.report.total_tokens < 4_096 - 256 - 1_024,
        "{}",
        prompt.report.total_tokens
    );
}

#[tokio::test]
async fn an_idle_compaction_reaches_the_next_prompt() {
    let ws = TempDir::new("scenario-idle");
    let bot = bot(ws.path(), 16_000, Arc::new(FakeModel::default())).await;
    let k = key("telegram:42");
    bot.turn(&k, "I drink green tea every morning.", &quiet())
        .await
        .unwrap();
    bot.finish().await.unwrap();
    // What AutoCompact does when the session's idle time is up.
    let record = bot
        .memory
        .consolidator
        .compact_idle(&k)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((record.start, record.end), (0, 2));
    let prompt = bot.build_prompt(&k, "good morning").await.unwrap();
    assert!(
        prompt
            .system_prompt()
            .contains("Previous conversation summary (last active")
    );
    assert!(prompt.system_prompt().contains("Ada drinks green tea"));
}

#[tokio::test]
async fn dream_edits_reach_the_next_prompt_and_restore_undoes_them() {
    let ws = TempDir::new("scenario-dream");
    let model = Arc::new(FakeModel::default());
    *model.dream_fact.lock().unwrap() = "Drinks green tea".into();
    let bot = bot(ws.path(), 16_000, model.clone()).await;
    let k = key("cli:direct");
    bot.turn(&k, "I drink green tea.", &quiet()).await.unwrap();
    bot.finish().await.unwrap();
    bot.memory.consolidator.compact_idle(&k).await.unwrap();

    let reply = commands::slash(&bot, &k, "/dream").await.unwrap().unwrap();
    assert!(reply.starts_with("Dream completed"), "{reply}");
    assert_eq!(
        bot.memory
            .documents
            .read_text(Document::User)
            .await
            .unwrap()
            .unwrap(),
        "# User\n\n- Drinks green tea\n"
    );
    let prompt = bot.build_prompt(&k, "hi").await.unwrap();
    assert!(
        prompt
            .system_prompt()
            .contains("## USER.md\n\n# User\n\n- Drinks green tea")
    );
    assert_eq!(bot.memory.journal.dream_cursor().await.unwrap(), 1);

    let log = commands::slash(&bot, &k, "/dream-log")
        .await
        .unwrap()
        .unwrap();
    assert!(
        log.contains("dream: manual run, journal entries 1-1"),
        "{log}"
    );
    let version = bot.memory.dream.log(1).await.unwrap().remove(0);
    let restored = commands::slash(&bot, &k, &format!("/dream-restore {}", version.short_id()))
        .await
        .unwrap()
        .unwrap();
    assert!(
        restored.starts_with("Restored Dream memory to the state before"),
        "{restored}"
    );
    assert_eq!(
        bot.memory
            .documents
            .read_text(Document::User)
            .await
            .unwrap()
            .unwrap_or_default(),
        ""
    );
    let prompt = bot.build_prompt(&k, "hi").await.unwrap();
    assert!(!prompt.system_prompt().contains("Drinks green tea"));
    // The cursor went back with the files: the next Dream run reads that entry again.
    assert_eq!(bot.memory.journal.dream_cursor().await.unwrap(), 0);
}

#[tokio::test]
async fn a_restart_in_the_middle_loses_nothing() {
    let ws = TempDir::new("scenario-restart");
    let k = key("cli:restart");
    {
        let bot = bot(ws.path(), 16_000, Arc::new(FakeModel::default())).await;
        bot.turn(&k, "first", &quiet()).await.unwrap();
        bot.turn(&k, "second", &quiet()).await.unwrap();
        // No finish(): the process goes away after its turns.
    }
    let bot = bot(ws.path(), 16_000, Arc::new(FakeModel::default())).await;
    let handle = bot.memory.sessions.get_or_create(&k).await.unwrap();
    let texts: Vec<String> = handle.read(|s| {
        s.messages()
            .iter()
            .map(|m| {
                m.content()
                    .and_then(|c| c.as_str())
                    .unwrap_or("")
                    .to_owned()
            })
            .collect()
    });
    assert_eq!(texts.len(), 4);
    assert_eq!((texts[0].as_str(), texts[2].as_str()), ("first", "second"));
    bot.turn(&k, "third", &quiet()).await.unwrap();
    bot.finish().await.unwrap();
    assert_eq!(
        bot.memory
            .sessions
            .get_or_create(&k)
            .await
            .unwrap()
            .message_count(),
        6
    );
}

#[tokio::test]
async fn new_archives_the_conversation_and_starts_over() {
    let ws = TempDir::new("scenario-new");
    let bot = bot(ws.path(), 16_000, Arc::new(FakeModel::default())).await;
    let k = key("cli:new");
    bot.turn(&k, "remember the tea", &quiet()).await.unwrap();
    bot.finish().await.unwrap();
    let reply = commands::slash(&bot, &k, "/new").await.unwrap().unwrap();
    assert_eq!(
        reply,
        "New session started; the 2 earlier messages were archived to memory."
    );
    assert_eq!(
        bot.memory
            .sessions
            .get_or_create(&k)
            .await
            .unwrap()
            .message_count(),
        0
    );
    assert_eq!(bot.memory.journal.latest_cursor().await.unwrap(), 1);
    let status = commands::slash(&bot, &k, "/status").await.unwrap().unwrap();
    assert!(
        status.starts_with("Session: cli:new\nMessages: 0 (0 archived, 0 live)"),
        "{status}"
    );
    assert!(status.contains("Journal: 1 entries not yet read by Dream"));
}

/// Issue 12.5: with a backlog longer than the prompt is offered (over 200 entries after
/// Dream's cursor), Recent History shows the newest entries, not the oldest.
#[tokio::test]
async fn recent_history_shows_the_newest_entries_of_a_long_backlog() {
    let ws = TempDir::new("scenario-backlog");
    let model = Arc::new(FakeModel::default());
    let bot = bot(ws.path(), 16_384, model).await;
    let texts: Vec<String> = (1..=300).map(|i| format!("backlog entry {i:03}")).collect();
    let entries: Vec<nanobot_memory_store::NewEntry<'_>> = texts
        .iter()
        .map(|t| nanobot_memory_store::NewEntry {
            session_key: Some("cli:ada"),
            ..nanobot_memory_store::NewEntry::text(t)
        })
        .collect();
    bot.memory.journal.append(&entries).await.unwrap();
    let built = bot.build_prompt(&key("cli:ada"), "hello").await.unwrap();
    let system = built.messages[0]
        .content()
        .map(nanobot_llm_port::Content::joined_text)
        .unwrap_or_default();
    assert!(
        system.contains("backlog entry 300"),
        "the newest entry is shown:\n{system}"
    );
    assert!(
        !system.contains("backlog entry 001"),
        "the oldest entries give way to the newest"
    );
}

/// A model whose answers report an enormous prompt, so the background consolidation after
/// each turn runs (the turn itself does not need one).
struct ReportsHugePrompts;

#[async_trait]
impl LlmClient for ReportsHugePrompts {
    async fn complete(&self, _request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        let mut response = LlmResponse::text("noted");
        response.usage = Some(nanobot_llm_port::Usage {
            prompt_tokens: 1_000_000,
            completion_tokens: 1,
            cached_tokens: 0,
            cache_write_tokens: 0,
        });
        Ok(response)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(8_192)
    }
}

async fn huge_prompt_bot(workspace: &std::path::Path) -> Bot {
    Bot::open(
        config(workspace, 4_096),
        Arc::new(ReportsHugePrompts),
        Arc::new(SystemClock),
    )
    .await
    .unwrap()
}

/// Issue 12.7: a background consolidation that fails is not dropped: it is recorded in the
/// session, and `/status` and `nanobot sessions show` report it.
#[tokio::test]
async fn a_failed_background_consolidation_is_reported() {
    let ws = TempDir::new("scenario-background-failure");
    let bot = huge_prompt_bot(ws.path()).await;
    let k = key("cli:ada");
    for i in 0..3 {
        bot.turn(&k, &format!("first message {i}"), &quiet())
            .await
            .unwrap();
        bot.finish().await.unwrap();
    }
    drop(bot);
    let bot = huge_prompt_bot(ws.path()).await;
    // The journal can no longer be written (its counter file is in the way): the next
    // archive fails.
    let cursor = ws.path().join("memory/.cursor");
    let _ = std::fs::remove_file(&cursor);
    std::fs::create_dir_all(cursor.join("in-the-way")).unwrap();
    for text in ["one more", "and another"] {
        bot.turn(&k, text, &quiet()).await.unwrap();
        bot.finish().await.unwrap();
    }

    let status = commands::status(&bot, &k).await.unwrap();
    assert!(
        status.contains("Last background failure: ") && status.contains("consolidation: "),
        "{status}"
    );
    let shown = bot.commands().session_show(&k).await.unwrap();
    assert!(shown.contains("Last background failure: "), "{shown}");
}
