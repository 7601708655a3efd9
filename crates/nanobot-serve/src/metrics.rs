//! `GET /metrics`: the process's numbers in Prometheus' text format, for the operator's
//! monitoring, never for the chat keys: its own key, or loopback callers only. The
//! exporter is the app's; this route only renders what it is given.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use metrics::Unit;

use crate::Server;
use crate::identity::constant_time_eq;

/// Renders the metrics text (the app's Prometheus handle).
pub type RenderMetrics = Arc<dyn Fn() -> String + Send + Sync>;

/// Who may read `GET /metrics`.
#[derive(Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum MetricsAccess {
    /// No route.
    Off,
    /// Callers on a loopback address (a scraper on the same host), without a key.
    #[default]
    Loopback,
    /// Callers presenting this key (`Authorization: Bearer <key>`), from anywhere.
    Key(String),
}

impl std::fmt::Debug for MetricsAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MetricsAccess::Off => "Off",
            MetricsAccess::Loopback => "Loopback",
            MetricsAccess::Key(_) => "Key(..)",
        })
    }
}

/// The text exposition, to callers the settings allow (403 for a remote caller without the
/// metrics key, 401 for a wrong key).
pub(crate) async fn scrape(State(server): State<Arc<Server>>, request: Request) -> Response {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .copied();
    let headers = request.headers();
    let Some(render) = &server.metrics else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let allowed = match &server.settings.metrics {
        MetricsAccess::Off => return StatusCode::NOT_FOUND.into_response(),
        MetricsAccess::Loopback => peer.is_some_and(|ConnectInfo(a)| a.ip().is_loopback()),
        MetricsAccess::Key(key) => {
            let given = headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "));
            if !given.is_some_and(|given| constant_time_eq(given.trim().as_bytes(), key.as_bytes()))
            {
                return (
                    StatusCode::UNAUTHORIZED,
                    "the metrics key is wrong or missing\n",
                )
                    .into_response();
            }
            true
        }
    };
    if !allowed {
        return (
            StatusCode::FORBIDDEN,
            "/metrics answers loopback callers only (set serve.metrics_key_env for remote scrapers)\n",
        )
            .into_response();
    }
    let mut response = render().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

/// Describes every metric the libraries record (name, unit, help) and starts its first
/// series at zero, so a scraper sees each one before it first happens. Call it once, after
/// installing a recorder.
pub fn describe_metrics() {
    use nanobot_llm_port::{MODEL_CALL_SECONDS, MODEL_CALLS, MODEL_TOKENS};
    counter(
        nanobot_turn::TURNS,
        "Turns, by outcome (ok, error).",
        &[("outcome", "ok")],
    );
    histogram(
        nanobot_turn::TURN_SECONDS,
        "Each turn's latency, model included, by outcome.",
        &[("outcome", "ok")],
    );
    counter(
        MODEL_CALLS,
        "Model calls, by purpose (turn, archive, dream) and outcome (ok, error).",
        &[("purpose", "turn"), ("outcome", "ok")],
    );
    histogram(
        MODEL_CALL_SECONDS,
        "Each model call's latency, by purpose.",
        &[("purpose", "turn")],
    );
    counter(
        MODEL_TOKENS,
        "Tokens the provider reported, by purpose and kind (prompt, completion).",
        &[("purpose", "turn"), ("kind", "prompt")],
    );
    counter(
        nanobot_memory_core::ARCHIVES,
        "Archives, by outcome (summary, raw, nothing, recovered, superseded) and, for raw ones, reason.",
        &[("outcome", "summary"), ("reason", "")],
    );
    counter(
        nanobot_memory_core::IDLE_COMPACTIONS,
        "Idle compactions, by outcome (archived, nothing, failed).",
        &[("outcome", "archived")],
    );
    counter(
        nanobot_dream::DREAM_RUNS,
        "Dream runs, by outcome (completed, nothing_to_do, stopped, failed).",
        &[("outcome", "completed")],
    );
    counter(
        nanobot_dream::DREAM_EDITS,
        "Dream's edits, by result (applied, refused, superseded, proposed).",
        &[("result", "applied")],
    );
    histogram(
        nanobot_memory_search::SEARCH_SECONDS,
        "Each memory-search lane's latency, by lane (words, meaning).",
        &[("lane", "words")],
    );
    histogram(
        nanobot_session_store::TURN_LOCK_WAIT_SECONDS,
        "How long turns waited for their session's turn lock.",
        &[],
    );
    counter(
        nanobot_session_store::BUSY,
        "Busy answers, by reason (session: a turn lock not free in time; turns: the server's limit).",
        &[("reason", "session")],
    );
    metrics::describe_gauge!(
        nanobot_turn::OPEN_SCOPES,
        Unit::Count,
        "Scopes whose memory is open in this process."
    );
    metrics::gauge!(nanobot_turn::OPEN_SCOPES).set(0.0);
    counter(
        crate::DREAM_REVIEWS,
        "Proposals decided in the inspector, by decision (approved, rejected).",
        &[("decision", "approved")],
    );
    counter(
        nanobot_turn::STORAGE_ERRORS,
        "Storage failures turns met, by kind (io, conflict, busy, damaged, backend).",
        &[("kind", "io")],
    );
}

fn counter(name: &'static str, help: &'static str, labels: &[(&'static str, &'static str)]) {
    metrics::describe_counter!(name, Unit::Count, help);
    metrics::counter!(name, to_labels(labels)).increment(0);
}

fn histogram(name: &'static str, help: &'static str, labels: &[(&'static str, &'static str)]) {
    metrics::describe_histogram!(name, Unit::Seconds, help);
    // A histogram appears once registered, with empty buckets.
    let _ = metrics::histogram!(name, to_labels(labels));
}

fn to_labels(labels: &[(&'static str, &'static str)]) -> Vec<metrics::Label> {
    labels
        .iter()
        .map(|(k, v)| metrics::Label::new(*k, *v))
        .collect()
}
