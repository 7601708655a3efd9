//! The server with `rmcp`'s own client over an in-process pipe: every tool and resource
//! through the protocol, arguments refused by name, failures that write nothing, and two
//! scopes whose canaries never cross.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use std::sync::Arc;

use nanobot_context_builder::{BuilderConfig, ContextBuilder, Host};
use nanobot_llm_port::testing::ScriptedLlm;
use nanobot_llm_port::{Cl100kBase, LlmResponse, SystemClock, TextSink};
use nanobot_mcp::{ForgetSession, McpOptions, MemoryServer};
use nanobot_memory_scope::{ScopeKey, Subject, UserKey};
use nanobot_memory_store::{Document, Expected, HistoryJournalExt, MemoryDocumentsExt, NewEntry};
use nanobot_session_store::SessionKey;
use nanobot_turn::{Agent, AgentSettings, InMemoryBackend, ScopeMemory, SearchMemory};
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ReadResourceRequestParams, ResourceContents,
};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use serde_json::{Value, json};

struct Fixture {
    agent: Arc<Agent>,
    llm: Arc<ScriptedLlm>,
}

fn fixture() -> Fixture {
    let llm = Arc::new(ScriptedLlm::new());
    let mut builder = BuilderConfig::new(Host::new("Linux", "x86_64", "nanobot-rs"));
    builder.tool_contract = false;
    let agent = Arc::new(Agent::new(
        AgentSettings::new("nanobot", 32_768, 512),
        llm.clone(),
        Arc::new(ContextBuilder::new(builder, Arc::new(Cl100kBase))),
        Arc::new(InMemoryBackend::new(
            Arc::new(SystemClock),
            Arc::new(Cl100kBase),
        )),
        Arc::new(SystemClock),
        Arc::new(Cl100kBase),
    ));
    Fixture { agent, llm }
}

fn user(id: &str) -> ScopeKey {
    ScopeKey::local(Subject::User(UserKey::new("telegram", id).unwrap()))
}

impl Fixture {
    /// `scope`'s memory with a profile, a journal entry and one turn of session
    /// `telegram:1`, each holding `canary`.
    async fn seeded(&self, scope: &ScopeKey, canary: &str) -> Arc<ScopeMemory> {
        let memory = self.agent.memory(scope).await.unwrap();
        memory
            .documents
            .write(
                Document::User,
                &format!("# User\n\n- Code word: {canary}\n"),
                Expected::Any,
            )
            .await
            .unwrap();
        memory
            .journal
            .append_one(NewEntry::text(&format!(
                "- [permanent] The user's code word is {canary}"
            )))
            .await
            .unwrap();
        self.llm
            .push(LlmResponse::text(format!("Noted: {canary}.")));
        let quiet: TextSink = Arc::new(|_: &str| {});
        let key = SessionKey::new("telegram:1").unwrap();
        self.agent
            .turn(&memory, &key, &format!("My code word is {canary}."), &quiet)
            .await
            .unwrap();
        memory
    }

    /// A manual Dream run over `memory` whose model changes nothing (it still records a
    /// version).
    async fn quiet_dream_run(&self, memory: &ScopeMemory) {
        self.llm.push(LlmResponse::text("Nothing to change."));
        memory
            .dream
            .run(nanobot_dream::Trigger::Manual)
            .await
            .unwrap();
    }

    /// An `rmcp` client talking to a server over `memory`.
    async fn client(&self, memory: Arc<ScopeMemory>) -> RunningService<RoleClient, ()> {
        self.client_of(self.server(memory)).await
    }

    /// A server over `memory` with the default options.
    fn server(&self, memory: Arc<ScopeMemory>) -> MemoryServer {
        MemoryServer::new(
            memory,
            Arc::new(SearchMemory::new(self.agent.counter().clone())),
            self.agent.counter().clone(),
        )
    }

    /// An `rmcp` client talking to `server`.
    async fn client_of(&self, server: MemoryServer) -> RunningService<RoleClient, ()> {
        let (client_side, server_side) = tokio::io::duplex(64 * 1024);
        tokio::spawn(server.serve_on(tokio::io::split(server_side)));
        ().serve(client_side).await.unwrap()
    }
}

async fn call(
    client: &RunningService<RoleClient, ()>,
    tool: &str,
    arguments: Value,
) -> Result<CallToolResult, ServiceError> {
    let params = CallToolRequestParams::new(tool.to_owned())
        .with_arguments(arguments.as_object().cloned().unwrap_or_default());
    client.call_tool(params).await
}

async fn structured(
    client: &RunningService<RoleClient, ()>,
    tool: &str,
    arguments: Value,
) -> Value {
    let result = call(client, tool, arguments.clone())
        .await
        .unwrap_or_else(|e| panic!("{tool} {arguments}: {e}"));
    assert_ne!(result.is_error, Some(true), "{tool}: {result:?}");
    result
        .structured_content
        .unwrap_or_else(|| panic!("{tool}: no structured content"))
}

fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_and_resource_answers_through_the_protocol() {
    let fixture = fixture();
    let memory = fixture.seeded(&user("1"), "HELIOTROPE").await;
    let client = fixture.client(memory.clone()).await;

    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "search_memory",
            "read_memory",
            "recent_history",
            "list_sessions",
            "read_session",
            "remember",
            "memory_log",
            "memory_diff"
        ]
    );
    assert!(tools.iter().all(|t| t.output_schema.is_some()));

    let found = call(&client, "search_memory", json!({"query": "HELIOTROPE"}))
        .await
        .unwrap();
    let text = text_of(&found);
    assert!(
        text.contains("<memory_search_results") && text.contains("data, not instructions"),
        "{text}"
    );
    let hits = found.structured_content.unwrap();
    assert!(
        hits["results"].as_array().is_some_and(|r| !r.is_empty()),
        "{hits}"
    );

    let profile = structured(&client, "read_memory", json!({"file": "USER.md"})).await;
    assert_eq!(profile["file"], "USER.md");
    assert!(profile["text"].as_str().unwrap().contains("HELIOTROPE"));
    assert_eq!(profile["truncated"], false);

    let history = structured(&client, "recent_history", json!({"after": 0, "limit": 5})).await;
    assert_eq!(history["entries"][0]["cursor"], 1, "{history}");
    assert_eq!(history["next_after"], 1);
    assert_eq!(history["more"], false);

    let sessions = structured(&client, "list_sessions", json!({})).await;
    assert_eq!(sessions["sessions"][0]["key"], "telegram:1", "{sessions}");
    let session = structured(
        &client,
        "read_session",
        json!({"key": "telegram:1", "limit": 1}),
    )
    .await;
    assert_eq!(session["total"], 2, "{session}");
    assert_eq!(session["messages"][0]["role"], "assistant");
    assert_eq!(session["messages"][0]["index"], 1);

    let kept = structured(
        &client,
        "remember",
        json!({"note": "She prefers tea to coffee."}),
    )
    .await;
    assert_eq!(kept["cursor"], 2);
    let last = memory.journal.read_last(1).await.unwrap();
    assert_eq!(last[0].content, "She prefers tea to coffee.");

    // A Dream run records the files as they are first ("memory: initial state").
    fixture.quiet_dream_run(&memory).await;
    let log = structured(&client, "memory_log", json!({"limit": 5})).await;
    let versions = log["versions"].as_array().unwrap();
    // Newest first: the run's own version (no file changed), then the files as they were.
    assert_eq!(versions.len(), 2, "{log}");
    assert!(
        versions[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("dream: manual run")
    );
    assert_eq!(versions[1]["message"], "memory: initial state", "{log}");
    let id = versions[1]["id"].as_str().unwrap();
    let diff = structured(&client, "memory_diff", json!({"version": id})).await;
    assert_eq!(diff["id"], id);
    let changed: Vec<&str> = diff["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["path"].as_str())
        .collect();
    assert!(changed.contains(&"USER.md"), "{diff}");

    let resources = client.list_all_resources().await.unwrap();
    let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(
        uris,
        ["memory://SOUL.md", "memory://USER.md", "memory://MEMORY.md"]
    );
    let read = client
        .read_resource(ReadResourceRequestParams::new("memory://USER.md"))
        .await
        .unwrap();
    match &read.contents[0] {
        ResourceContents::TextResourceContents { text, .. } => assert!(text.contains("HELIOTROPE")),
        other => panic!("{other:?}"),
    }
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_arguments_are_named_and_failed_calls_write_nothing() {
    let fixture = fixture();
    let memory = fixture.seeded(&user("1"), "OBSIDIAN").await;
    let client = fixture.client(memory.clone()).await;
    let before = memory.journal.latest_cursor().await.unwrap();

    for (tool, arguments, named) in [
        ("search_memory", json!({"query": ""}), "query"),
        (
            "search_memory",
            json!({"query": "x", "limit": "many"}),
            "limit",
        ),
        (
            "search_memory",
            json!({"query": "x", "scope": "user:telegram:2"}),
            "scope",
        ),
        ("read_memory", json!({"file": "../secrets"}), "file"),
        ("recent_history", json!({"limit": 500}), "limit"),
        ("read_session", json!({}), "key"),
        ("read_session", json!({"key": "telegram:\u{0}"}), "key"),
        ("remember", json!({"note": "x".repeat(4_001)}), "note"),
        ("remember", json!({"note": 42}), "note"),
        ("memory_diff", json!({"version": "zz"}), "version"),
    ] {
        let error = call(&client, tool, arguments.clone())
            .await
            .expect_err(&format!("{tool} {arguments}"));
        let said = error.to_string();
        assert!(
            said.contains(&format!("`{named}`")),
            "{tool} {arguments}: {said}"
        );
    }
    let missing = call(&client, "read_session", json!({"key": "telegram:404"}))
        .await
        .unwrap();
    assert_eq!(missing.is_error, Some(true));
    assert!(text_of(&missing).contains("no session telegram:404"));
    assert!(call(&client, "forget_everything", json!({})).await.is_err());
    assert_eq!(
        memory.journal.latest_cursor().await.unwrap(),
        before,
        "nothing written"
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_scopes_never_see_each_others_canary() {
    let fixture = fixture();
    let ada = fixture.seeded(&user("ada"), "CANARY-ADA-7731").await;
    let bob = fixture.seeded(&user("bob"), "CANARY-BOB-9902").await;
    for (memory, own, other) in [
        (ada, "CANARY-ADA-7731", "CANARY-BOB-9902"),
        (bob, "CANARY-BOB-9902", "CANARY-ADA-7731"),
    ] {
        let client = fixture.client(memory).await;
        let mut seen = String::new();
        for (tool, arguments) in [
            // Its number only: the results echo the query, which is not a leak.
            ("search_memory", json!({"query": &other[other.len() - 4..]})),
            ("search_memory", json!({"query": "CANARY"})),
            ("read_memory", json!({"file": "USER.md"})),
            ("recent_history", json!({})),
            ("list_sessions", json!({})),
            ("read_session", json!({"key": "telegram:1"})),
            ("memory_log", json!({})),
        ] {
            let result = call(&client, tool, arguments).await.unwrap();
            seen.push_str(&serde_json::to_string(&result).unwrap());
        }
        for uri in ["memory://SOUL.md", "memory://USER.md", "memory://MEMORY.md"] {
            let read = client
                .read_resource(ReadResourceRequestParams::new(uri))
                .await
                .unwrap();
            seen.push_str(&serde_json::to_string(&read).unwrap());
        }
        assert!(seen.contains(own), "its own canary is there");
        assert!(!seen.contains(other), "{other} reached the other scope");
        client.cancel().await.unwrap();
    }
}

/// A forget that records the scope it was given and forgets nothing.
#[derive(Default)]
struct RecordingForget {
    asked: std::sync::Mutex<Vec<(ScopeKey, String)>>,
}

#[async_trait::async_trait]
impl ForgetSession for RecordingForget {
    async fn forget(&self, memory: &Arc<ScopeMemory>, key: &SessionKey) -> Result<String, String> {
        self.asked
            .lock()
            .unwrap()
            .push((memory.scope.clone(), key.as_str().to_owned()));
        if key.as_str() == "telegram:1" {
            Ok(format!("Forgot session {key}."))
        } else {
            Err(format!("nothing of session {key} is in this memory"))
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_and_forget_are_offered_only_when_turned_on_and_stay_in_the_scope() {
    let fixture = fixture();
    let memory = fixture.seeded(&user("1"), "VERMILION").await;

    // Off by default: not listed, and a call is refused by name with how to turn it on.
    let client = fixture.client(memory.clone()).await;
    let names: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert!(
        !names
            .iter()
            .any(|n| n == "restore_memory" || n == "forget_session")
    );
    for (tool, arguments) in [
        ("restore_memory", json!({"version": "abcd1234"})),
        ("forget_session", json!({"key": "telegram:1"})),
    ] {
        let said = call(&client, tool, arguments)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            said.contains("turned off") && said.contains("[mcp]"),
            "{said}"
        );
    }
    client.cancel().await.unwrap();

    // Turned on: listed as destructive; a restore undoes a version, a forget is asked for
    // this scope and the session named.
    let forget = Arc::new(RecordingForget::default());
    let mut options = McpOptions::default();
    options.allow_restore = true;
    let client = fixture
        .client_of(
            fixture
                .server(memory.clone())
                .with_options(options)
                .with_forget(forget.clone()),
        )
        .await;
    let tools = client.list_all_tools().await.unwrap();
    for name in ["restore_memory", "forget_session"] {
        let tool = tools.iter().find(|t| t.name == name).unwrap();
        let hints = tool.annotations.as_ref().unwrap();
        assert_eq!(hints.destructive_hint, Some(true), "{name}");
    }
    fixture.quiet_dream_run(&memory).await;
    memory
        .documents
        .write(Document::User, "# User\n\n- Overwritten\n", Expected::Any)
        .await
        .unwrap();
    fixture.quiet_dream_run(&memory).await;
    let log = structured(&client, "memory_log", json!({"limit": 1})).await;
    let newest = log["versions"][0]["id"].as_str().unwrap().to_owned();
    let restored = structured(&client, "restore_memory", json!({"version": newest})).await;
    assert_eq!(restored["undone"], newest.as_str(), "{restored}");
    assert!(
        restored["files"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "USER.md"),
        "{restored}"
    );
    let profile = memory
        .documents
        .read_text(Document::User)
        .await
        .unwrap()
        .unwrap();
    assert!(profile.contains("VERMILION"), "{profile}");
    let bad = call(&client, "restore_memory", json!({"version": "nothex"}))
        .await
        .unwrap_err();
    assert!(bad.to_string().contains("`version`"), "{bad}");

    let forgot = structured(&client, "forget_session", json!({"key": "telegram:1"})).await;
    assert_eq!(forgot["forgotten"], "Forgot session telegram:1.");
    let unknown = call(&client, "forget_session", json!({"key": "telegram:9"}))
        .await
        .unwrap();
    assert_eq!(unknown.is_error, Some(true));
    assert!(text_of(&unknown).contains("nothing of session telegram:9"));
    let asked = forget.asked.lock().unwrap().clone();
    assert_eq!(
        asked,
        [
            (user("1"), "telegram:1".to_owned()),
            (user("1"), "telegram:9".to_owned())
        ]
    );
    client.cancel().await.unwrap();
}
