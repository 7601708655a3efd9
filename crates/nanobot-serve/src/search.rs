//! `POST /v1/memory/search`: the caller's memory searched as the `search_memory` tool
//! searches it (journal, memory files, past sessions; by meaning too when the app gave an
//! embedder), answered as JSON hits for applications.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::Server;
use crate::error::ServeError;

pub(crate) async fn search(
    State(server): State<Arc<Server>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    run(&server, &headers, &body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn run(server: &Server, headers: &HeaderMap, body: &[u8]) -> Result<Response, ServeError> {
    let caller = server.caller(headers)?;
    let text = std::str::from_utf8(body)
        .map_err(|_| ServeError::bad_request("query", "the body is not UTF-8 JSON"))?;
    let request = nanobot_memory_search::parse_arguments(text)
        .map_err(|reason| ServeError::bad_request("query", reason))?;
    let body_user = serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| v.get("user").and_then(Value::as_str).map(str::to_owned));
    let user = caller.user(headers, body_user.as_deref())?;
    let memory = server
        .agent
        .memory(&caller.scope(&user)?)
        .await
        .map_err(|e| ServeError::from_turn(&e))?;
    let Some(index) = memory.index.clone() else {
        return Err(ServeError::NotFound(
            "this storage keeps no search index, so memory search is not available".into(),
        ));
    };
    let search = server.search.clone().unwrap_or_else(|| {
        Arc::new(nanobot_turn::SearchMemory::new(
            server.agent.counter().clone(),
        ))
    });
    let found = search.search(&memory, index, &request).await.map_err(|e| {
        if e.is_retryable() {
            ServeError::Upstream {
                message: format!("memory search is unavailable right now: {e}"),
                retryable: true,
            }
        } else {
            ServeError::Internal(format!("memory search failed: {e}"))
        }
    })?;
    let (hits, note) = (found.hits, found.note);
    Ok(axum::Json(json!({
        "object": "list",
        "query": request.query,
        "data": hits,
        "note": note,
    }))
    .into_response())
}
