//! `/mcp`: the memory MCP server over streamable HTTP. Each request's memory is the one its
//! key gives, exactly as for the chat API (the key's tenant, then the user its binding
//! names), chosen here before the MCP service sees the request: no MCP session and no tool
//! argument can name another scope.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use nanobot_mcp::RequestScope;

use crate::Server;

/// Puts the caller's memory in the request for the MCP service, or answers 401 (no key or
/// a wrong one) or the error that kept the memory from opening.
pub(crate) async fn scope(
    State(server): State<Arc<Server>>,
    mut request: Request,
    next: Next,
) -> Response {
    let ending = request.method() == Method::DELETE;
    match server.caller_memory(request.headers()).await {
        Ok(memory) => {
            request.extensions_mut().insert(RequestScope(memory));
            let mut response = next.run(request).await;
            // rmcp ends a session with 202 and no body; the official Python SDK takes only
            // 200 or 204 as done and warns "Session termination failed: 202" on every
            // disconnect. The session did end: say so the way both read.
            if ending && response.status() == StatusCode::ACCEPTED {
                *response.status_mut() = StatusCode::NO_CONTENT;
            }
            response
        }
        Err(error) => error.into_response(),
    }
}
