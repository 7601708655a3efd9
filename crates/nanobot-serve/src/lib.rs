#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod chat;
mod config;
mod cors;
mod error;
mod identity;
mod mcp;
mod metrics;
mod prometheus;
mod search;
mod sessions;
mod ui;

pub use config::{KeyConfig, ServeConfig};
pub use cors::CorsOrigins;
pub use error::ServeError;
pub use identity::{
    API_PLATFORM, ApiKeyEntry, Caller, MAX_REQUEST_ID_CHARS, UserBinding, authenticate, checked_id,
    session_key,
};
pub use metrics::{MetricsAccess, RenderMetrics, describe_metrics};
pub use prometheus::{PrometheusRecorder, SECONDS_BUCKETS};
pub use ui::{DREAM_REVIEWS, ScopeDirectory};

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use nanobot_turn::Agent;
use serde_json::json;
use tokio::sync::Semaphore;

/// How the server behaves; the app fills it from the configuration file.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServeSettings {
    /// The model name `/v1/models` lists and requests may name (the agent's).
    pub model_name: String,
    /// The API keys; empty: no key is asked (the app allows that on loopback only).
    pub keys: Vec<ApiKeyEntry>,
    /// Turns running at once, over every session; more get 429.
    pub max_concurrent_turns: usize,
    /// The largest request body, in bytes.
    pub body_limit: usize,
    /// How long a non-streamed request waits for its turn's answer (504 after; the turn
    /// still finishes and is stored).
    pub request_timeout: Duration,
    /// How often a streamed answer sends a keep-alive comment while it waits.
    pub keep_alive: Duration,
    /// Which browser origins may call the API (off by default).
    pub cors: CorsOrigins,
    /// Who may read `GET /metrics` (loopback callers by default).
    pub metrics: MetricsAccess,
}

impl ServeSettings {
    /// Settings for `model_name`: no keys, 16 turns at once, a 20 MB body limit (nanobot's),
    /// a 120 s request timeout, keep-alive every 15 s, CORS off.
    pub fn new(model_name: impl Into<String>) -> ServeSettings {
        ServeSettings {
            model_name: model_name.into(),
            keys: Vec::new(),
            max_concurrent_turns: 16,
            body_limit: 20 * 1024 * 1024,
            request_timeout: Duration::from_secs(120),
            keep_alive: Duration::from_secs(15),
            cors: CorsOrigins::Off,
            metrics: MetricsAccess::Loopback,
        }
    }
}

/// Whether the server's storage can serve turns (`GET /health/ready`): a check the app
/// supplies (the database reachable, its migrations current).
pub type Readiness = Arc<
    dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send>>
        + Send
        + Sync,
>;

/// The server: an agent, its settings and the limits shared by every request.
pub struct Server {
    pub(crate) agent: Arc<Agent>,
    pub(crate) settings: ServeSettings,
    pub(crate) turns: Arc<Semaphore>,
    /// The `search_memory` tool the agent offers (its embedder serves the search route).
    pub(crate) search: Option<Arc<nanobot_turn::SearchMemory>>,
    readiness: Option<Readiness>,
    mcp: Option<nanobot_mcp::McpHttpService>,
    /// What `GET /metrics` renders (the app's exporter); `None`: no route.
    pub(crate) metrics: Option<RenderMetrics>,
    /// The scopes the inspector lists (`None`: no inspector).
    pub(crate) scope_directory: Option<Arc<dyn ScopeDirectory>>,
    /// The inspector's signed-in browsers.
    pub(crate) ui_sessions: Option<ui::Sessions>,
}

impl Server {
    /// A server of `agent` with `settings`.
    pub fn new(agent: Arc<Agent>, settings: ServeSettings) -> Server {
        Server {
            agent,
            turns: Arc::new(Semaphore::new(settings.max_concurrent_turns.max(1))),
            settings,
            search: None,
            readiness: None,
            mcp: None,
            metrics: None,
            scope_directory: None,
            ui_sessions: None,
        }
    }

    /// `/mcp` serves `service` (the memory MCP server, [`nanobot_mcp::HttpMemoryServer`]),
    /// each request's memory the one its key gives.
    pub fn with_mcp(mut self, service: nanobot_mcp::McpHttpService) -> Server {
        self.mcp = Some(service);
        self
    }

    /// `POST /v1/memory/search` searches as `search` does (by meaning too, when it has an
    /// embedder); without it, by words only.
    pub fn with_search(mut self, search: Arc<nanobot_turn::SearchMemory>) -> Server {
        self.search = Some(search);
        self
    }

    /// `GET /metrics` answers what `render` gives (the app's Prometheus exporter), to the
    /// callers [`ServeSettings::metrics`] allows.
    pub fn with_metrics(mut self, render: RenderMetrics) -> Server {
        self.metrics = Some(render);
        self
    }

    /// The memory inspector at `/ui` (pages, the review queue), listing the scopes
    /// `directory` knows to operator keys.
    pub fn with_inspector(mut self, directory: Arc<dyn ScopeDirectory>) -> Server {
        self.scope_directory = Some(directory);
        self.ui_sessions = Some(ui::Sessions::default());
        self
    }

    /// `GET /health/ready` also runs `check` (storage reachable, migrations current).
    pub fn with_readiness(mut self, check: Readiness) -> Server {
        self.readiness = Some(check);
        self
    }

    /// The routes, ready for `axum::serve`.
    pub fn router(mut self) -> Router {
        let limit = self.settings.body_limit;
        let cors = Arc::new(cors::Cors {
            origins: self.settings.cors.clone(),
            allow_headers: allowed_headers(&self.settings.keys),
        });
        let mcp = self.mcp.take();
        let server = Arc::new(self);
        let mut routes = Router::new()
            .route("/health", get(health))
            .route("/health/ready", get(ready))
            .route("/v1/models", get(models))
            .route("/v1/chat/completions", post(chat::completions))
            .route("/v1/sessions", get(sessions::list))
            .route("/v1/sessions/{id}/messages", get(sessions::messages))
            .route("/v1/sessions/{id}/clear", post(sessions::clear))
            .route("/v1/sessions/{id}", axum::routing::delete(sessions::delete))
            .route("/v1/memory/search", post(search::search));
        if server.scope_directory.is_some() {
            routes = routes.merge(ui::routes());
        }
        if server.metrics.is_some() && server.settings.metrics != MetricsAccess::Off {
            routes = routes.route("/metrics", get(metrics::scrape));
        }
        if let Some(service) = mcp {
            routes = routes.merge(Router::new().route_service("/mcp", service).route_layer(
                axum::middleware::from_fn_with_state(server.clone(), mcp::scope),
            ));
        }
        routes
            .layer(DefaultBodyLimit::max(limit))
            .layer(axum::middleware::from_fn_with_state(cors, cors::layer))
            .layer(axum::middleware::from_fn(request_id))
            .with_state(server)
    }

    /// The caller of a request, or 401.
    pub(crate) fn caller(&self, headers: &HeaderMap) -> Result<Caller, ServeError> {
        if self.settings.keys.is_empty() {
            return Ok(Caller::local());
        }
        let key = authenticate(&self.settings.keys, headers).ok_or(ServeError::Unauthorized)?;
        Ok(Caller {
            key: key.name.clone(),
            tenant: key.tenant.clone(),
            binding: key.binding.clone(),
        })
    }

    /// The caller's scope memory: the user the key's binding gives (or a trusted front
    /// end's header), in the key's tenant; 401 without a valid key.
    pub(crate) async fn caller_memory(
        &self,
        headers: &HeaderMap,
    ) -> Result<Arc<nanobot_turn::ScopeMemory>, ServeError> {
        let caller = self.caller(headers)?;
        let user = caller.user(headers, None)?;
        self.agent
            .memory(&caller.scope(&user)?)
            .await
            .map_err(|e| ServeError::from_turn(&e))
    }
}

/// The request headers a browser page may send: ours and the trusted front ends'.
fn allowed_headers(keys: &[ApiKeyEntry]) -> HeaderValue {
    let mut names = vec![
        "authorization",
        "content-type",
        "x-session-id",
        "idempotency-key",
        "x-request-id",
    ];
    for key in keys {
        if let UserBinding::TrustedFrontend {
            user_header,
            chat_header,
        } = &key.binding
        {
            names.extend(user_header.iter().chain(chat_header).map(String::as_str));
        }
    }
    names.sort_unstable();
    names.dedup();
    HeaderValue::from_str(&names.join(", ")).unwrap_or(HeaderValue::from_static("*"))
}

/// Every response carries `x-request-id`: the client's, when it sent a sane one (1 to 128
/// visible ASCII characters), else one of ours.
async fn request_id(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let given = request
        .headers()
        .get("x-request-id")
        .filter(|v| {
            let bytes = v.as_bytes();
            (1..=128).contains(&bytes.len()) && bytes.iter().all(|b| b.is_ascii_graphic())
        })
        .cloned();
    let id = given.unwrap_or_else(|| {
        HeaderValue::from_str(&chat::new_request_id()).unwrap_or(HeaderValue::from_static("-"))
    });
    let span = tracing::info_span!("request", id = ?id, method = %request.method(), path = %request.uri().path());
    let mut response = {
        use tracing::Instrument;
        next.run(request).instrument(span).await
    };
    response.headers_mut().insert("x-request-id", id);
    response
}

/// A stand-in for a user or session id in logs: the first 12 hex digits of its SHA-256
/// (ids name people; logs at info level never carry them).
pub fn log_id(id: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(id.as_bytes())[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What a server logs of an idle compaction: every archive and every failure, its scope
/// and session as [`log_id`]s (they name people).
pub fn log_compaction(
    scope: &nanobot_memory_scope::ScopeKey,
    done: &nanobot_memory_core::Compacted,
) {
    let scope = log_id(&scope.subject.to_string());
    let session = done.key.log_id();
    match &done.result {
        Ok(Some(record)) => {
            let messages = record.end - record.start;
            tracing::info!(%scope, %session, messages, "idle session archived")
        }
        Ok(None) => {}
        Err(error) => tracing::warn!(%scope, %session, %error, "idle compaction failed"),
    }
}

/// Liveness: never authenticated.
async fn health() -> Response {
    (StatusCode::OK, axum::Json(json!({"status": "ok"}))).into_response()
}

/// Readiness: the app's check, when it gave one.
async fn ready(State(server): State<Arc<Server>>) -> Response {
    let outcome = match &server.readiness {
        Some(check) => check().await,
        None => Ok(()),
    };
    match outcome {
        Ok(()) => (StatusCode::OK, axum::Json(json!({"status": "ready"}))).into_response(),
        Err(reason) => {
            let mut response = (
                StatusCode::SERVICE_UNAVAILABLE,
                axum::Json(json!({"status": "not ready", "reason": reason})),
            )
                .into_response();
            response
                .headers_mut()
                .insert("retry-after", HeaderValue::from_static("5"));
            response
        }
    }
}

/// The one model served: the agent.
async fn models(State(server): State<Arc<Server>>, headers: HeaderMap) -> Response {
    if let Err(error) = server.caller(&headers) {
        return error.into_response();
    }
    axum::Json(json!({
        "object": "list",
        "data": [{
            "id": server.settings.model_name,
            "object": "model",
            "created": 0,
            "owned_by": "nanobot-rs",
        }],
    }))
    .into_response()
}
