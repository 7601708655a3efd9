//! The inspector's forms (POST): signing in and out, restoring a version, deciding about a
//! proposal, and the scope's review setting. Each one checks the session's CSRF token
//! before anything else.

use std::collections::HashMap;

use axum::Form;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use nanobot_dream::DreamError;
use nanobot_memory_scope::ScopeKey;
use nanobot_memory_store::MemoryError;
use nanobot_turn::ScopeMemory;
use std::sync::Arc;

use super::auth::{self, LOGIN_COOKIE, UiSession, Viewer};
use super::pages::{self, scope_href};
use super::{Refusal, Shared, scope_of, session_of};
use crate::Server;

/// Metric: proposals decided in the inspector, by `decision` (`approved`, `rejected`).
pub const DREAM_REVIEWS: &str = "nanobot_dream_reviews_total";

type Fields = Form<HashMap<String, String>>;

fn field<'a>(fields: &'a HashMap<String, String>, name: &str) -> &'a str {
    fields.get(name).map_or("", String::as_str)
}

/// The session of a form, its token checked.
fn checked(
    server: &Server,
    headers: &HeaderMap,
    fields: &HashMap<String, String>,
) -> Result<UiSession, Refusal> {
    // A form without a session is refused outright (never a sign-in redirect: the form
    // was not made by a signed-in page).
    let session = session_of(server, headers, "/ui").map_err(|refusal| match refusal {
        Refusal::SetSession(..) | Refusal::SignIn => Refusal::Forbidden,
        other => other,
    })?;
    if !auth::csrf_ok(&session, field(fields, "csrf")) {
        return Err(Refusal::Forbidden);
    }
    Ok(session)
}

fn with_cookie(mut response: Response, cookie: &str) -> Response {
    if let Ok(value) = HeaderValue::from_str(cookie) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}

/// `GET /ui/login`: the form, with a fresh token in a cookie.
pub(crate) async fn login_form(server: Shared, headers: HeaderMap) -> Response {
    if server.settings.keys.is_empty() || session_of(&server, &headers, "/ui").is_ok() {
        return Redirect::to("/ui").into_response();
    }
    login_page(StatusCode::OK, false)
}

fn login_page(status: StatusCode, failed: bool) -> Response {
    let Some(token) = auth::random_token() else {
        return Refusal::Failed("no randomness for a sign-in token".into()).into_response();
    };
    let response = (status, axum::response::Html(pages::login(&token, failed))).into_response();
    with_cookie(response, &auth::set_cookie(LOGIN_COOKIE, &token, Some(600)))
}

/// `POST /ui/login`: a key's secret signs the browser in.
pub(crate) async fn login(server: Shared, headers: HeaderMap, Form(fields): Fields) -> Response {
    let token = auth::cookie(&headers, LOGIN_COOKIE).unwrap_or_default();
    let given = field(&fields, "csrf");
    if token.is_empty() || !crate::identity::constant_time_eq(token.as_bytes(), given.as_bytes()) {
        return Refusal::Forbidden.into_response();
    }
    let (Some(viewer), Some(sessions)) = (
        auth::viewer_of(&server.settings.keys, field(&fields, "key")),
        &server.ui_sessions,
    ) else {
        return login_page(StatusCode::UNAUTHORIZED, true);
    };
    let Some((id, _)) = sessions.open(viewer) else {
        return Refusal::Failed("no randomness for a session".into()).into_response();
    };
    let response = Redirect::to("/ui").into_response();
    let response = with_cookie(response, &auth::set_cookie(auth::COOKIE, &id, None));
    with_cookie(response, &auth::set_cookie(LOGIN_COOKIE, "", Some(0)))
}

/// `POST /ui/logout`.
pub(crate) async fn logout(server: Shared, headers: HeaderMap, Form(fields): Fields) -> Response {
    if let Err(refusal) = checked(&server, &headers, &fields) {
        return refusal.into_response();
    }
    if let Some(sessions) = &server.ui_sessions {
        sessions.close(&headers);
    }
    let target = if server.settings.keys.is_empty() {
        "/ui"
    } else {
        "/ui/login"
    };
    with_cookie(
        Redirect::to(target).into_response(),
        &auth::set_cookie(auth::COOKIE, "", Some(0)),
    )
}

/// `POST /ui/restore`: the state before a Dream version, recorded as a new version.
pub(crate) async fn restore(server: Shared, headers: HeaderMap, Form(fields): Fields) -> Response {
    run(async {
        let (session, scope, memory) = form_scope(&server, &headers, &fields).await?;
        let text = match memory.dream.restore(field(&fields, "id")).await {
            Ok(report) => format!(
                "Restored to before {}: {} file(s) changed{}.",
                report.undone.short_id(),
                report.changes.len(),
                report.version.as_ref().map_or(String::new(), |v| format!(
                    ", recorded as version {}",
                    v.short_id()
                ))
            ),
            Err(error) => format!("Not restored: {error}"),
        };
        let body = pages::message(&text, &scope_href("versions", &scope, &[]), "Versions");
        Ok(message_page(&session, &scope, "Restore", body))
    })
    .await
}

/// `POST /ui/review/decide`: approve (applied and recorded as a version) or reject (with
/// the operator's reason). A change to the agent's shared files needs an operator.
pub(crate) async fn decide(server: Shared, headers: HeaderMap, Form(fields): Fields) -> Response {
    run(async {
        let (session, scope, memory) = form_scope(&server, &headers, &fields).await?;
        let id = field(&fields, "id");
        let proposals = memory
            .dream
            .proposals()
            .await
            .map_err(|e| Refusal::Failed(e.to_string()))?;
        let proposal = proposals
            .into_iter()
            .find(|p| p.id() == id)
            .ok_or(Refusal::NotFound)?;
        if proposal.shared && !matches!(session.viewer, Viewer::Operator { .. }) {
            return Err(Refusal::NotFound);
        }
        let back = scope_href("review", &scope, &[]);
        let approve = field(&fields, "decision") == "approve";
        let version = if approve {
            // A user's or a chat's change to the shared files is the agent scope's to apply.
            let applier = if proposal.shared && !scope.subject.is_agent() {
                server
                    .agent
                    .memory(&scope.agent_scope())
                    .await
                    .map_err(|e| Refusal::Failed(e.to_string()))?
            } else {
                memory.clone()
            };
            match applier
                .dream
                .apply_proposal(&proposal, session.viewer.name())
                .await
            {
                Ok(version) => version,
                Err(DreamError::Memory(MemoryError::Conflict { what })) => {
                    let body = pages::message(
                        &format!("Not applied: {what}"),
                        &back,
                        "Back to the review",
                    );
                    return Ok(message_page(&session, &scope, "Review", body));
                }
                Err(error) => return Err(Refusal::Failed(error.to_string())),
            }
        } else {
            None
        };
        let reason = field(&fields, "reason");
        memory
            .dream
            .settle_proposal(id, approve, reason, version.as_ref())
            .await
            .map_err(|e| Refusal::Failed(e.to_string()))?;
        let decision = if approve { "approved" } else { "rejected" };
        metrics::counter!(DREAM_REVIEWS, "decision" => decision).increment(1);
        Ok(Redirect::to(&back).into_response())
    })
    .await
}

/// `POST /ui/review/setting`: whether every Dream edit of the scope waits for review.
pub(crate) async fn setting(server: Shared, headers: HeaderMap, Form(fields): Fields) -> Response {
    run(async {
        let (_, scope, memory) = form_scope(&server, &headers, &fields).await?;
        let on = match field(&fields, "every_edit") {
            "on" => true,
            "off" => false,
            other => {
                return Err(Refusal::BadRequest(format!(
                    "every_edit is on or off, not {other:?}"
                )));
            }
        };
        memory
            .dream
            .set_review_every_edit(on)
            .await
            .map_err(|e| Refusal::Failed(e.to_string()))?;
        Ok(Redirect::to(&scope_href("review", &scope, &[])).into_response())
    })
    .await
}

/// A form's checked session, the scope it names (if the viewer may see it) and its memory.
async fn form_scope(
    server: &Server,
    headers: &HeaderMap,
    fields: &HashMap<String, String>,
) -> Result<(UiSession, ScopeKey, Arc<ScopeMemory>), Refusal> {
    let session = checked(server, headers, fields)?;
    let scope = scope_of(server, &session.viewer, Some(field(fields, "scope"))).await?;
    let memory = server
        .agent
        .memory(&scope)
        .await
        .map_err(|e| Refusal::Failed(e.to_string()))?;
    Ok((session, scope, memory))
}

async fn run(action: impl Future<Output = Result<Response, Refusal>>) -> Response {
    action.await.unwrap_or_else(IntoResponse::into_response)
}

fn message_page(
    session: &UiSession,
    scope: &nanobot_memory_scope::ScopeKey,
    title: &str,
    body: super::html::Markup,
) -> Response {
    super::views::framed(session, scope, title, body)
}
