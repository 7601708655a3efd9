//! The memory inspector at `/ui`: server-rendered pages (no script at all), read-only but
//! for the review queue and restores. Memory text is untrusted: every page is escaped by
//! construction ([`html`]) and served under a strict Content-Security-Policy; every POST
//! carries its session's CSRF token; a user key sees its own scope only, and another
//! scope's ids answer 404 as if they did not exist.

mod actions;
mod auth;
mod history;
mod html;
mod pages;
mod views;

use std::sync::Arc;

use async_trait::async_trait;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use nanobot_memory_scope::{ScopeKey, Subject};

use crate::Server;
pub use actions::DREAM_REVIEWS;
pub(crate) use auth::Sessions;
use auth::{UiSession, Viewer};

/// Where the inspector finds the scopes an operator may open (the app's storage knows them).
#[async_trait]
pub trait ScopeDirectory: Send + Sync {
    /// Every scope with memory.
    async fn scopes(&self) -> Result<Vec<ScopeKey>, String>;
}

/// The style sheet (the only resource the pages load).
const STYLE: &str = include_str!("style.css");

/// No script, no frames, no third party: the pages are text and forms.
const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The inspector's routes (added when the app gave a scope directory).
pub(crate) fn routes() -> Router<Arc<Server>> {
    Router::new()
        .route("/ui", get(views::home))
        .route("/ui/style.css", get(style))
        .route("/ui/icon.svg", get(icon))
        .route("/ui/login", get(actions::login_form).post(actions::login))
        .route("/ui/logout", post(actions::logout))
        .route("/ui/sessions", get(views::sessions))
        .route("/ui/session", get(views::session))
        .route("/ui/memory", get(views::memory))
        .route("/ui/versions", get(views::versions))
        .route("/ui/version", get(views::version))
        .route(
            "/ui/restore",
            get(views::restore_confirm).post(actions::restore),
        )
        .route("/ui/search", get(views::search))
        .route("/ui/review", get(views::review))
        .route("/ui/review/decide", post(actions::decide))
        .route("/ui/review/setting", post(actions::setting))
        .layer(axum::middleware::from_fn(secure_headers))
}

/// The tab icon (an SVG of ours, so the browser asks for no `/favicon.ico`).
const ICON: &str = "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 16 16\"><circle cx=\"8\" cy=\"8\" r=\"7\" fill=\"#2563eb\"/><circle cx=\"8\" cy=\"8\" r=\"3\" fill=\"#fff\"/></svg>";

async fn icon() -> Response {
    let mut response = ICON.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("image/svg+xml"),
    );
    response
}

async fn style() -> Response {
    let mut response = STYLE.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/css; charset=utf-8"),
    );
    response
}

/// The headers every inspector response carries.
async fn secure_headers(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert("content-security-policy", HeaderValue::from_static(CSP));
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    headers.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    headers.insert("x-frame-options", HeaderValue::from_static("DENY"));
    headers.insert("cache-control", HeaderValue::from_static("no-store"));
    response
}

/// Why a request gets no page.
pub(crate) enum Refusal {
    /// Not signed in: to the sign-in form.
    SignIn,
    /// A scope (or a thing in it) this viewer may not see, or that does not exist.
    NotFound,
    /// A form without its session's token.
    Forbidden,
    /// A request the page cannot answer (a missing parameter).
    BadRequest(String),
    /// The storage failed.
    Failed(String),
    /// A session established without a cookie yet (a keyless server): set it, then go on.
    SetSession(String, String),
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Refusal::SignIn => Redirect::to("/ui/login").into_response(),
            Refusal::NotFound => (StatusCode::NOT_FOUND, html_page("Not found", "There is nothing here for you.")).into_response(),
            Refusal::Forbidden => (StatusCode::FORBIDDEN, html_page("Refused", "This form is out of date or was not sent by the inspector; reload the page and try again.")).into_response(),
            Refusal::BadRequest(why) => (StatusCode::BAD_REQUEST, html_page("Bad request", &why)).into_response(),
            Refusal::Failed(why) => (StatusCode::INTERNAL_SERVER_ERROR, html_page("Failed", &why)).into_response(),
            Refusal::SetSession(cookie, location) => {
                let mut response = Redirect::to(&location).into_response();
                if let Ok(value) = HeaderValue::from_str(&cookie) {
                    response.headers_mut().insert(header::SET_COOKIE, value);
                }
                response
            }
        }
    }
}

fn html_page(title: &str, text: &str) -> axum::response::Html<String> {
    let body = html::Markup::join([html::tag_text("h1", title), html::tag_text("p", text)]);
    axum::response::Html(format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><link rel=\"stylesheet\" href=\"/ui/style.css\"><link rel=\"icon\" href=\"/ui/icon.svg\"></head><body><main>{}<p><a href=\"/ui\">Back</a></p></main></body></html>\n",
        html::escape(title),
        body.into_string()
    ))
}

/// The signed-in session of a request. A server without keys signs the local operator in
/// on the first page (a cookie and back to the same page).
pub(crate) fn session_of(
    server: &Server,
    headers: &HeaderMap,
    here: &str,
) -> Result<UiSession, Refusal> {
    let Some(sessions) = &server.ui_sessions else {
        return Err(Refusal::NotFound);
    };
    if let Some(session) = sessions.find(headers) {
        return Ok(session);
    }
    if server.settings.keys.is_empty() {
        let viewer = Viewer::Operator {
            name: "local".to_owned(),
        };
        let (id, _) = sessions
            .open(viewer)
            .ok_or_else(|| Refusal::Failed("no randomness for a session".into()))?;
        return Err(Refusal::SetSession(
            auth::set_cookie(auth::COOKIE, &id, None),
            here.to_owned(),
        ));
    }
    Err(Refusal::SignIn)
}

/// The scope a request names, if the viewer may see it and it exists; 404 otherwise (the
/// same answer for "not yours" and "not there").
pub(crate) async fn scope_of(
    server: &Server,
    viewer: &Viewer,
    text: Option<&str>,
) -> Result<ScopeKey, Refusal> {
    let scope = text.and_then(parse_scope).ok_or(Refusal::NotFound)?;
    if !viewer.may_see(&scope) {
        return Err(Refusal::NotFound);
    }
    if let Viewer::Operator { .. } = viewer {
        // An operator names scopes that exist; opening any other would create it.
        let known = known_scopes(server).await?;
        if !known.contains(&scope) {
            return Err(Refusal::NotFound);
        }
    }
    Ok(scope)
}

/// Every scope an operator may open, the agent's first.
pub(crate) async fn known_scopes(server: &Server) -> Result<Vec<ScopeKey>, Refusal> {
    let Some(directory) = &server.scope_directory else {
        return Err(Refusal::NotFound);
    };
    let mut scopes = directory.scopes().await.map_err(Refusal::Failed)?;
    let agent = ScopeKey::local(Subject::Agent);
    if !scopes.contains(&agent) {
        scopes.insert(0, agent);
    }
    Ok(scopes)
}

/// A scope as the pages write it: `agent`, `user:telegram:42`, or `tenant/agent/subject`.
pub(crate) fn parse_scope(text: &str) -> Option<ScopeKey> {
    let parts: Vec<&str> = text.splitn(3, '/').collect();
    match parts.as_slice() {
        [tenant, agent, subject] if !subject.contains('/') || subject.starts_with("user:") => {
            ScopeKey::new(tenant, agent, Subject::parse(subject).ok()?).ok()
        }
        [subject] => Some(ScopeKey::local(Subject::parse(subject).ok()?)),
        _ => None,
    }
}

/// A page's HTML response.
pub(crate) fn respond(html: String) -> Response {
    axum::response::Html(html).into_response()
}

/// The state extractor's alias, for the handlers.
pub(crate) type Shared = State<Arc<Server>>;
