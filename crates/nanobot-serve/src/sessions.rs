//! The session routes, on the caller's own scope only: list, read, clear (`/new`),
//! delete. A caller names sessions by their id; the stored key is `api:<id>` in the
//! caller's scope, so no route reaches another user's or tenant's sessions.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use nanobot_turn::ScopeMemory;
use serde_json::{Map, Value, json};

use crate::Server;
use crate::error::ServeError;
use crate::identity::{API_PLATFORM, checked_id, session_key};

/// The caller's memory and the stored key of their session `id` (checked).
async fn caller_session(
    server: &Server,
    headers: &HeaderMap,
    id: &str,
) -> Result<(Arc<ScopeMemory>, nanobot_session_store::SessionKey, String), ServeError> {
    let id = checked_id("session", id)?;
    let memory = server.caller_memory(headers).await?;
    let key = session_key(&id)?;
    Ok((memory, key, id))
}

fn respond(outcome: Result<Response, ServeError>) -> Response {
    outcome.unwrap_or_else(IntoResponse::into_response)
}

/// `GET /v1/sessions`: the caller's API sessions, most recently updated first.
pub(crate) async fn list(State(server): State<Arc<Server>>, headers: HeaderMap) -> Response {
    respond(
        async {
            let memory = server.caller_memory(&headers).await?;
            let sessions = memory
                .sessions
                .list()
                .await
                .map_err(|e| ServeError::Internal(e.to_string()))?;
            let prefix = format!("{API_PLATFORM}:");
            let data: Vec<Value> = sessions
                .into_iter()
                .filter_map(|info| {
                    let id = info.key.as_str().strip_prefix(&prefix)?.to_owned();
                    Some(json!({
                        "id": id,
                        "object": "session",
                        "created_at": info.created_at.format("%Y-%m-%dT%H:%M:%S").to_string(),
                        "updated_at": info.updated_at.format("%Y-%m-%dT%H:%M:%S").to_string(),
                        "message_count": info.message_count,
                        "title": info.title,
                        "preview": info.preview,
                    }))
                })
                .collect();
            Ok(axum::Json(json!({"object": "list", "data": data})).into_response())
        }
        .await,
    )
}

/// `GET /v1/sessions/{id}/messages`: every message of one session, as stored (fields
/// of ours, named with a leading `_`, left out); 404 when there is no such session.
pub(crate) async fn messages(
    State(server): State<Arc<Server>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    respond(
        async {
            let (memory, key, id) = caller_session(&server, &headers, &id).await?;
            let internal =
                |e: nanobot_session_store::SessionError| ServeError::Internal(e.to_string());
            // Read from the store, not this process's cache: another instance may have
            // taken the latest turns (and reading never creates a session).
            let Some(loaded) = memory.sessions.store().load(&key).await.map_err(internal)? else {
                return Err(ServeError::NotFound(format!("no session {id:?}")));
            };
            let data: Vec<Value> = loaded
                .session
                .messages()
                .iter()
                .map(|message| {
                    let fields: Map<String, Value> = message
                        .fields()
                        .iter()
                        .filter(|(name, _)| !name.starts_with('_'))
                        .map(|(name, value)| (name.clone(), value.clone()))
                        .collect();
                    Value::Object(fields)
                })
                .collect();
            Ok(
                axum::Json(json!({"object": "list", "session_id": id, "data": data}))
                    .into_response(),
            )
        }
        .await,
    )
}

/// `POST /v1/sessions/{id}/clear`: nanobot's `/new`: the live messages are archived into
/// the caller's memory, then the session starts over.
pub(crate) async fn clear(
    State(server): State<Arc<Server>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    respond(
        async {
            let (memory, key, id) = caller_session(&server, &headers, &id).await?;
            // As a turn would: wait for a turn of the session running here or in another
            // instance (409 past the wait), and start from what is stored.
            let lock = memory
                .sessions
                .lock_turn(&key, server.agent.settings().turn_wait)
                .await
                .map_err(|e| match e {
                    nanobot_session_store::SessionError::Busy { .. } => ServeError::SessionBusy,
                    other => ServeError::Internal(other.to_string()),
                })?;
            let said = server.agent.new_session(&memory, &key).await;
            lock.release().await;
            let said = said.map_err(|e| ServeError::from_turn(&e))?;
            Ok(
                axum::Json(json!({"session_id": id, "cleared": true, "message": said}))
                    .into_response(),
            )
        }
        .await,
    )
}

/// `DELETE /v1/sessions/{id}`: the session is gone (its archived summaries stay in the
/// caller's memory); 404 when there was none.
pub(crate) async fn delete(
    State(server): State<Arc<Server>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    respond(
        async {
            let (memory, key, id) = caller_session(&server, &headers, &id).await?;
            let existed = memory
                .sessions
                .delete(&key)
                .await
                .map_err(|e| ServeError::Internal(e.to_string()))?;
            if existed {
                Ok(StatusCode::NO_CONTENT.into_response())
            } else {
                Err(ServeError::NotFound(format!("no session {id:?}")))
            }
        }
        .await,
    )
}
