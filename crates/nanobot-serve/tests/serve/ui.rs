//! The memory inspector on a fixed workspace (the in-memory backend, a frozen clock): each
//! page's snapshot, the review queue (approve records a version, reject records why),
//! hostile memory text rendered as text, forms without their token refused, and a user key
//! kept to its own scope.

use std::sync::Arc;

use async_trait::async_trait;
use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use nanobot_context_builder::{BuilderConfig, ContextBuilder, Host};
use nanobot_llm_port::testing::ScriptedLlm;
use nanobot_llm_port::{BoxFuture, Cl100kBase, Clock};
use nanobot_memory_scope::{ScopeKey, Subject, UserKey};
use nanobot_memory_store::{AuxFile, Document, Expected, MemoryDocumentsExt};
use nanobot_serve::{ApiKeyEntry, ScopeDirectory, ServeSettings, Server, UserBinding};
use nanobot_session_store::{SessionKey, StoredMessage};
use nanobot_turn::{Agent, AgentSettings, InMemoryBackend};
use serde_json::json;
use tower::ServiceExt;

/// A clock frozen at one instant, so every page renders the same.
struct Frozen;

impl Clock for Frozen {
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        chrono::DateTime::parse_from_rfc3339("2026-03-04T05:06:07Z")
            .unwrap()
            .to_utc()
    }

    fn sleep(&self, _: std::time::Duration) -> BoxFuture<'static, ()> {
        Box::pin(std::future::ready(()))
    }
}

struct Listed(Vec<ScopeKey>);

#[async_trait]
impl ScopeDirectory for Listed {
    async fn scopes(&self) -> Result<Vec<ScopeKey>, String> {
        Ok(self.0.clone())
    }
}

fn key(name: &str, secret: &str, operator: bool) -> ApiKeyEntry {
    ApiKeyEntry {
        name: name.into(),
        secret: secret.into(),
        tenant: "default".into(),
        binding: UserBinding::PerKey,
        operator,
    }
}

fn user_scope(name: &str) -> ScopeKey {
    ScopeKey::local(Subject::User(UserKey::new("api", name).unwrap()))
}

/// Hostile text a memory line may hold.
const HOSTILE: &str = "- Likes <script>alert(1)</script> and <img src=x onerror=alert(2)>";

async fn workspace() -> (Arc<Agent>, Router) {
    let clock: Arc<dyn Clock> = Arc::new(Frozen);
    let mut builder = BuilderConfig::new(Host::new("Linux", "x86_64", "nanobot-rs"));
    builder.tool_contract = false;
    let agent = Arc::new(Agent::new(
        AgentSettings::new("nanobot", 32_768, 512),
        Arc::new(ScriptedLlm::new()),
        Arc::new(ContextBuilder::new(builder, Arc::new(Cl100kBase))),
        Arc::new(InMemoryBackend::new(clock.clone(), Arc::new(Cl100kBase))),
        clock,
        Arc::new(Cl100kBase),
    ));
    let agent_scope = ScopeKey::local(Subject::Agent);
    let memory = agent.memory(&agent_scope).await.unwrap();
    let session = memory
        .sessions
        .get_or_create(&SessionKey::new("telegram:42").unwrap())
        .await
        .unwrap();
    session.add_message(StoredMessage::user("Where does Ada live? <b>bold?</b>"));
    session.add_message(
        StoredMessage::assistant(serde_json::Value::Null).with(
            "tool_calls",
            json!([{"id": "c1", "type": "function", "function": {"name": "search_memory", "arguments": "{\"query\": \"Ada\"}"}}]),
        ),
    );
    session.add_message(StoredMessage::tool_result(
        "c1",
        "search_memory",
        "Ada lives in Berlin.",
    ));
    session.add_message(StoredMessage::assistant("Ada lives in Berlin."));
    memory.sessions.save(&session).await.unwrap();
    memory
        .documents
        .write(
            Document::Memory,
            &format!("# Memory\n\n- Ada lives in Berlin.\n{HOSTILE}\n"),
            Expected::Any,
        )
        .await
        .unwrap();
    let proposals = json!([
        {"at": "2026-03-04T05:06:07Z", "path": "SOUL.md", "before": null,
         "after": "# Soul\n\nI answer briefly.\n", "entries": [1, 2],
         "reason": "SOUL.md: +3 lines (the user asked for short answers)", "shared": true},
        {"at": "2026-03-04T05:06:07Z", "path": "SOUL.md", "before": null,
         "after": "# Soul\n\nI shout <em>everything</em>.\n", "entries": [3, 3],
         "reason": "SOUL.md: +3 lines", "shared": true}
    ]);
    memory
        .documents
        .write_aux(AuxFile::DreamProposals, &proposals.to_string())
        .await
        .unwrap();
    let mut settings = ServeSettings::new("nanobot");
    settings.keys = vec![
        key("ops", "sk-ops", true),
        key("alice", "sk-alice", false),
        key("bob", "sk-bob", false),
    ];
    let directory = Listed(vec![agent_scope, user_scope("alice"), user_scope("bob")]);
    let router = Server::new(agent.clone(), settings)
        .with_inspector(Arc::new(directory))
        .router();
    (agent, router)
}

struct Page {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: String,
}

/// A browser: its cookies, and the CSRF token of the last page it saw.
struct Browser {
    router: Router,
    cookies: Vec<(String, String)>,
}

impl Browser {
    async fn send(&mut self, method: &str, uri: &str, form: Option<&[(&str, &str)]>) -> Page {
        let mut request = Request::builder().method(method).uri(uri);
        let cookie: Vec<String> = self
            .cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        if !cookie.is_empty() {
            request = request.header("cookie", cookie.join("; "));
        }
        let body = match form {
            Some(fields) => {
                request = request.header("content-type", "application/x-www-form-urlencoded");
                let encoded: Vec<String> = fields
                    .iter()
                    .map(|(k, v)| format!("{k}={}", url(v)))
                    .collect();
                Body::from(encoded.join("&"))
            }
            None => Body::empty(),
        };
        let response = self
            .router
            .clone()
            .oneshot(request.body(body).unwrap())
            .await
            .unwrap();
        for set in response.headers().get_all("set-cookie") {
            let text = set.to_str().unwrap();
            let (pair, _) = text.split_once(';').unwrap_or((text, ""));
            let (name, value) = pair.split_once('=').unwrap();
            self.cookies.retain(|(k, _)| k != name);
            if !value.is_empty() {
                self.cookies.push((name.to_owned(), value.to_owned()));
            }
        }
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        Page {
            status,
            headers,
            body: String::from_utf8(bytes.to_vec()).unwrap(),
        }
    }

    async fn get(&mut self, uri: &str) -> Page {
        self.send("GET", uri, None).await
    }

    async fn post(&mut self, uri: &str, form: &[(&str, &str)]) -> Page {
        self.send("POST", uri, Some(form)).await
    }

    async fn sign_in(router: &Router, secret: &str) -> Browser {
        let mut browser = Browser {
            router: router.clone(),
            cookies: Vec::new(),
        };
        let form = browser.get("/ui/login").await;
        let token = csrf(&form.body);
        let signed = browser
            .post("/ui/login", &[("key", secret), ("csrf", &token)])
            .await;
        assert_eq!(signed.status, StatusCode::SEE_OTHER, "{}", signed.body);
        browser
    }
}

fn url(value: &str) -> String {
    value
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The CSRF token a page's forms carry.
fn csrf(page: &str) -> String {
    let at = page
        .find("name=\"csrf\" value=\"")
        .expect("a form with a token")
        + 19;
    page[at..at + page[at..].find('"').unwrap()].to_owned()
}

/// The page with its session-specific token replaced, for a snapshot.
fn snapshot(page: &Page) -> String {
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let token = csrf(&page.body);
    // One element per line, so a change shows as a readable diff.
    page.body.replace(&token, "[csrf]").replace("><", ">\n<")
}

#[tokio::test]
async fn every_page_renders_and_the_review_queue_decides() {
    let (agent, router) = workspace().await;
    let mut ops = Browser::sign_in(&router, "sk-ops").await;
    let home = ops.get("/ui").await;
    insta::assert_snapshot!("ui_scopes", snapshot(&home));
    let csp = home.headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("default-src 'none'") && !csp.contains("script-src"),
        "{csp}"
    );
    for (name, uri) in [
        ("ui_sessions", "/ui/sessions?scope=agent"),
        ("ui_session", "/ui/session?scope=agent&key=telegram%3A42"),
        ("ui_memory", "/ui/memory?scope=agent"),
        ("ui_search", "/ui/search?scope=agent&q=Berlin&mode=words"),
        ("ui_review", "/ui/review?scope=agent"),
    ] {
        let page = ops.get(uri).await;
        insta::assert_snapshot!(name, snapshot(&page));
    }

    let review = ops.get("/ui/review?scope=agent").await;
    let token = csrf(&review.body);
    let memory = agent
        .memory(&ScopeKey::local(Subject::Agent))
        .await
        .unwrap();
    let proposals = memory.dream.proposals().await.unwrap();
    let (first, second) = (proposals[0].id(), proposals[1].id());
    let approved = ops
        .post(
            "/ui/review/decide",
            &[
                ("csrf", &token),
                ("scope", "agent"),
                ("id", &first),
                ("decision", "approve"),
            ],
        )
        .await;
    assert_eq!(approved.status, StatusCode::SEE_OTHER, "{}", approved.body);
    let rejected = ops
        .post(
            "/ui/review/decide",
            &[
                ("csrf", &token),
                ("scope", "agent"),
                ("id", &second),
                ("decision", "reject"),
                ("reason", "too loud"),
            ],
        )
        .await;
    assert_eq!(rejected.status, StatusCode::SEE_OTHER, "{}", rejected.body);
    let soul = memory.documents.read_text(Document::Soul).await.unwrap();
    assert_eq!(soul.as_deref(), Some("# Soul\n\nI answer briefly.\n"));
    let log = memory.dream.log(10).await.unwrap();
    assert!(
        log[0].message.starts_with("dream: approved proposal"),
        "{log:?}"
    );
    let review = memory.dream.review().await.unwrap();
    assert_eq!(review.decisions.len(), 2);
    assert_eq!(review.decisions[1].reason, "too loud");
    assert!(memory.dream.proposals().await.unwrap().is_empty());
    insta::assert_snapshot!(
        "ui_review_decided",
        snapshot(&ops.get("/ui/review?scope=agent").await)
    );

    let versions = ops.get("/ui/versions?scope=agent").await;
    assert!(
        versions.body.contains("dream: approved proposal"),
        "{}",
        versions.body
    );
    insta::assert_snapshot!(
        "ui_versions",
        snapshot(&versions).replace(&log[0].id, "[id]")
    );
    let id = &log[0].id;
    let version = ops.get(&format!("/ui/version?scope=agent&id={id}")).await;
    assert!(
        version.body.contains("I answer briefly."),
        "{}",
        version.body
    );
    insta::assert_snapshot!("ui_version", snapshot(&version).replace(id, "[id]"));
    let confirm = ops.get(&format!("/ui/restore?scope=agent&id={id}")).await;
    insta::assert_snapshot!("ui_restore", snapshot(&confirm).replace(id, "[id]"));
    let token = csrf(&confirm.body);
    let restored = ops
        .post(
            "/ui/restore",
            &[("csrf", &token), ("scope", "agent"), ("id", id)],
        )
        .await;
    assert!(
        restored.body.contains("Restored to before"),
        "{}",
        restored.body
    );
    let soul = memory.documents.read_text(Document::Soul).await.unwrap();
    assert_ne!(soul.as_deref(), Some("# Soul\n\nI answer briefly.\n"));
}

#[tokio::test]
async fn memory_text_is_text_and_forms_need_their_token() {
    let (_agent, router) = workspace().await;
    let mut ops = Browser::sign_in(&router, "sk-ops").await;
    let memory = ops.get("/ui/memory?scope=agent").await;
    assert!(
        !memory.body.contains("<script>") && !memory.body.contains("<img"),
        "{}",
        memory.body
    );
    assert!(
        memory
            .body
            .contains("&lt;script&gt;alert(1)&lt;/script&gt;")
    );
    assert!(memory.body.contains("&lt;img src=x onerror=alert(2)&gt;"));
    let session = ops.get("/ui/session?scope=agent&key=telegram%3A42").await;
    assert!(!session.body.contains("<b>bold"), "{}", session.body);

    let review = ops.get("/ui/review?scope=agent").await;
    let id_at = review.body.find("name=\"id\" value=\"").unwrap() + 17;
    let id = &review.body[id_at..id_at + 16];
    for token in ["", "0000"] {
        let refused = ops
            .post(
                "/ui/review/decide",
                &[
                    ("csrf", token),
                    ("scope", "agent"),
                    ("id", id),
                    ("decision", "approve"),
                ],
            )
            .await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN);
    }
    let mut stranger = Browser {
        router: router.clone(),
        cookies: Vec::new(),
    };
    let token = csrf(&review.body);
    let refused = stranger
        .post(
            "/ui/review/decide",
            &[
                ("csrf", &token),
                ("scope", "agent"),
                ("id", id),
                ("decision", "approve"),
            ],
        )
        .await;
    assert_ne!(
        refused.status,
        StatusCode::SEE_OTHER,
        "no session, no decision"
    );
    let wrong_key = stranger
        .post("/ui/login", &[("key", "sk-ops"), ("csrf", "forged")])
        .await;
    assert_eq!(
        wrong_key.status,
        StatusCode::FORBIDDEN,
        "sign-in needs the form's token"
    );
}

#[tokio::test]
async fn a_user_key_sees_its_own_scope_only() {
    let (agent, router) = workspace().await;
    let alice = user_scope("alice");
    let memory = agent.memory(&alice).await.unwrap();
    let session = memory
        .sessions
        .get_or_create(&SessionKey::new("api:s1").unwrap())
        .await
        .unwrap();
    session.add_message(StoredMessage::user("alice's own words"));
    memory.sessions.save(&session).await.unwrap();
    let mut browser = Browser::sign_in(&router, "sk-alice").await;
    let home = browser.get("/ui").await;
    assert_eq!(home.status, StatusCode::SEE_OTHER);
    let own = browser
        .get("/ui/session?scope=user%3Aapi%3Aalice&key=api%3As1")
        .await;
    assert!(own.body.contains("alice&#39;s own words"), "{}", own.body);
    for uri in [
        "/ui/sessions?scope=agent",
        "/ui/session?scope=agent&key=telegram%3A42",
        "/ui/memory?scope=user%3Aapi%3Abob",
        "/ui/review?scope=agent",
        "/ui/sessions?scope=nonsense",
    ] {
        assert_eq!(
            browser.get(uri).await.status,
            StatusCode::NOT_FOUND,
            "{uri}"
        );
    }
    let mut anonymous = Browser {
        router: router.clone(),
        cookies: Vec::new(),
    };
    let page = anonymous.get("/ui/sessions?scope=agent").await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    assert_eq!(page.headers["location"], "/ui/login");
}
