//! `/mcp` over real HTTP on loopback with `rmcp`'s own client: each key reaches its own
//! user's memory only, through every tool and resource, whatever session ids and MCP
//! sessions it presents; no key, a wrong key or a foreign `Host` is refused.

use nanobot_mcp::{HttpMemoryServer, LOOPBACK_HOSTS};
use nanobot_memory_scope::DEFAULT_NAME;
use nanobot_memory_store::{Document, Expected, HistoryJournalExt, NewEntry};
use nanobot_turn::SearchMemory;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ReadResourceRequestParams};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

use super::*;

/// The server on a loopback port, `/mcp` included.
struct Live {
    agent: Arc<Agent>,
    llm: Arc<ScriptedLlm>,
    router: Router,
    url: String,
}

async fn live() -> Live {
    // reqwest is built with `rustls-no-provider` in this workspace: a client needs one
    // installed even for plain HTTP (a second install is refused, and that is fine).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let llm = Arc::new(ScriptedLlm::new());
    let agent = agent(llm.clone(), AgentSettings::new("nanobot", 32_768, 512));
    let mut settings = ServeSettings::new("nanobot");
    settings.keys = keys();
    let search = Arc::new(SearchMemory::new(agent.counter().clone()));
    let mcp = HttpMemoryServer::new(search.clone(), agent.counter().clone())
        .service(LOOPBACK_HOSTS.map(String::from).to_vec());
    let router = Server::new(agent.clone(), settings)
        .with_search(search)
        .with_mcp(mcp)
        .router();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let serving = router.clone();
    tokio::spawn(async move { axum::serve(listener, serving).await.unwrap() });
    Live {
        agent,
        llm,
        router,
        url: format!("http://{address}/mcp"),
    }
}

/// The scope a per-key key's callers use: its name as the user, in tenant `acme`.
fn scope_of(key_name: &str) -> ScopeKey {
    let user = UserKey::new("api", key_name).unwrap();
    ScopeKey::new("acme", DEFAULT_NAME, Subject::User(user)).unwrap()
}

impl Live {
    /// `key_name`'s memory with a profile, a journal entry and one turn of session
    /// `api:1` (the same id for every key), each holding `canary`.
    async fn seed(&self, key_name: &str, canary: &str) {
        let memory = self.agent.memory(&scope_of(key_name)).await.unwrap();
        let profile = format!("# User\n\n- Code word: {canary}\n");
        memory
            .documents
            .write(Document::User, &profile, Expected::Any)
            .await
            .unwrap();
        let entry = format!("- [permanent] The user's code word is {canary}");
        memory
            .journal
            .append_one(NewEntry::text(&entry))
            .await
            .unwrap();
        self.llm
            .push(LlmResponse::text(format!("Noted: {canary}.")));
        let quiet: TextSink = Arc::new(|_: &str| {});
        let key = SessionKey::new("api:1").unwrap();
        let said = format!("My code word is {canary}.");
        self.agent.turn(&memory, &key, &said, &quiet).await.unwrap();
    }

    /// `rmcp`'s streamable HTTP client presenting `secret`.
    async fn client(&self, secret: &str) -> RunningService<RoleClient, ()> {
        let config =
            StreamableHttpClientTransportConfig::with_uri(self.url.as_str()).auth_header(secret);
        ().serve(StreamableHttpClientTransport::from_config(config))
            .await
            .unwrap()
    }
}

async fn tool(client: &RunningService<RoleClient, ()>, name: &str, arguments: Value) -> String {
    let params = CallToolRequestParams::new(name.to_owned())
        .with_arguments(arguments.as_object().cloned().unwrap_or_default());
    let result = client.call_tool(params).await.unwrap();
    assert_ne!(result.is_error, Some(true), "{name}: {result:?}");
    serde_json::to_string(&result).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_key_reaches_its_own_memory_only_through_every_tool_and_resource() {
    let live = live().await;
    live.seed("alice-app", "CANARY-ALICE-4417").await;
    live.seed("bob-app", "CANARY-BOB-0952").await;
    for (secret, own, other) in [
        ("sk-alice", "CANARY-ALICE-4417", "CANARY-BOB-0952"),
        ("sk-bob", "CANARY-BOB-0952", "CANARY-ALICE-4417"),
    ] {
        let client = live.client(secret).await;
        let tools = client.list_all_tools().await.unwrap();
        assert_eq!(tools.len(), 8, "restore and forget stay off");
        let mut seen = String::new();
        for (name, arguments) in [
            // Its number only: the results echo the query, which is not a leak.
            ("search_memory", json!({"query": &other[other.len() - 4..]})),
            ("search_memory", json!({"query": "CANARY code word"})),
            ("read_memory", json!({"file": "USER.md"})),
            ("recent_history", json!({})),
            ("list_sessions", json!({})),
            ("read_session", json!({"key": "api:1"})),
            ("memory_log", json!({})),
        ] {
            seen.push_str(&tool(&client, name, arguments).await);
        }
        for uri in ["memory://SOUL.md", "memory://USER.md", "memory://MEMORY.md"] {
            let read = client
                .read_resource(ReadResourceRequestParams::new(uri))
                .await
                .unwrap();
            seen.push_str(&serde_json::to_string(&read).unwrap());
        }
        assert!(seen.contains(own), "{secret}: its own canary is there");
        assert!(!seen.contains(other), "{other} reached {secret}");
        let note = format!("remembered through {secret}");
        tool(&client, "remember", json!({"note": note})).await;
        client.cancel().await.unwrap();
    }
    // Each note is in its own key's journal.
    for (key_name, secret, other) in [
        ("alice-app", "sk-alice", "sk-bob"),
        ("bob-app", "sk-bob", "sk-alice"),
    ] {
        let memory = live.agent.memory(&scope_of(key_name)).await.unwrap();
        let entries = memory.journal.read_last(10).await.unwrap();
        let journal: Vec<&str> = entries.iter().map(|e| e.content.as_str()).collect();
        assert!(journal.contains(&format!("remembered through {secret}").as_str()));
        assert!(!journal.iter().any(|e| e.contains(other)), "{journal:?}");
    }
}

/// A JSON-RPC request to `/mcp` as an MCP client sends it.
async fn rpc(router: &Router, headers: &[(&str, &str)], body: Value) -> Answer {
    let mut all = vec![
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2025-06-18"),
    ];
    all.extend_from_slice(headers);
    call(router, "POST", "/mcp", &all, Some(body)).await
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_not_the_mcp_session_chooses_the_memory_and_strangers_are_refused() {
    let live = live().await;
    live.seed("alice-app", "CANARY-ALICE-4417").await;
    live.seed("bob-app", "CANARY-BOB-0952").await;
    let router = &live.router;
    let host = ("host", "127.0.0.1");

    // No key, a wrong key: 401 before the MCP service; a foreign Host: refused.
    let none = rpc(router, &[host], initialize()).await;
    assert_eq!(none.status, StatusCode::UNAUTHORIZED);
    let wrong = rpc(
        router,
        &[host, ("authorization", "Bearer sk-nobody")],
        initialize(),
    )
    .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    let rebound = rpc(
        router,
        &[
            ("host", "evil.example"),
            ("authorization", "Bearer sk-alice"),
        ],
        initialize(),
    )
    .await;
    assert!(rebound.status.is_client_error(), "{}", rebound.status);

    // Alice opens an MCP session; Bob presents its id: he still reads his own memory.
    let alice = ("authorization", "Bearer sk-alice");
    let opened = rpc(router, &[host, alice], initialize()).await;
    assert_eq!(opened.status, StatusCode::OK);
    let session = opened.headers["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let in_session = ("mcp-session-id", session.as_str());
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let acked = rpc(router, &[host, alice, in_session], initialized).await;
    assert!(acked.status.is_success(), "{}", acked.status);
    let read = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "read_memory", "arguments": {"file": "USER.md"}}});
    let bob = ("authorization", "Bearer sk-bob");
    let as_bob = rpc(router, &[host, bob, in_session], read.clone()).await;
    let text = String::from_utf8_lossy(&as_bob.body).into_owned();
    assert!(
        text.contains("CANARY-BOB-0952"),
        "{}: {text}",
        as_bob.status
    );
    assert!(!text.contains("CANARY-ALICE-4417"), "{text}");
    let as_alice = rpc(router, &[host, alice, in_session], read).await;
    let text = String::from_utf8_lossy(&as_alice.body).into_owned();
    assert!(text.contains("CANARY-ALICE-4417"), "{text}");

    // Ending the session answers 204, which every client reads as done.
    let ended = call(router, "DELETE", "/mcp", &[host, alice, in_session], None).await;
    assert_eq!(ended.status, StatusCode::NO_CONTENT);
}
