//! The inspector's pages (GET): each one checks who is looking and at which scope, reads
//! what it shows, and hands plain data to [`super::pages`].

use std::sync::Arc;

use axum::extract::{FromRequestParts, Query};
use axum::http::HeaderMap;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Redirect, Response};
use nanobot_memory_index::SearchRequest;
use nanobot_memory_scope::ScopeKey;
use nanobot_session_store::SessionKey;
use nanobot_turn::ScopeMemory;

use super::auth::{UiSession, Viewer};
use super::history;
use super::html::Markup;
use super::pages::{self, Frame, scope_href};
use super::{Refusal, Shared, known_scopes, respond, scope_of, session_of};
use crate::Server;

/// Messages on one page of a session.
const PAGE_SIZE: usize = 50;
/// Versions listed.
const VERSIONS: usize = 100;
/// Scopes whose waiting proposals the home page counts (each count opens the scope).
const COUNTED_SCOPES: usize = 200;

/// The query parameters the pages take.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct Params {
    scope: Option<String>,
    key: Option<String>,
    page: Option<usize>,
    id: Option<String>,
    q: Option<String>,
    mode: Option<String>,
}

/// The page, or the refusal's answer.
async fn answer(page: impl Future<Output = Result<Response, Refusal>>) -> Response {
    page.await.unwrap_or_else(IntoResponse::into_response)
}

/// What every scoped page starts from: who is looking, at which scope (checked), the
/// scope's memory and the query. A refusal (sign in, 404) answers instead of the page.
pub(crate) struct Scoped {
    server: Arc<Server>,
    session: UiSession,
    scope: ScopeKey,
    memory: Arc<ScopeMemory>,
    params: Params,
}

impl FromRequestParts<Arc<Server>> for Scoped {
    type Rejection = Refusal;

    async fn from_request_parts(parts: &mut Parts, server: &Arc<Server>) -> Result<Self, Refusal> {
        let Query(params) = Query::<Params>::from_request_parts(parts, server)
            .await
            .map_err(|e| Refusal::BadRequest(e.body_text()))?;
        let here = parts.uri.path_and_query().map_or("/ui", |p| p.as_str());
        let session = session_of(server, &parts.headers, here)?;
        let scope = scope_of(server, &session.viewer, params.scope.as_deref()).await?;
        let memory = server.agent.memory(&scope).await.map_err(failed)?;
        Ok(Scoped {
            server: server.clone(),
            session,
            scope,
            memory,
            params,
        })
    }
}

impl Scoped {
    /// The page titled `title` around `body`.
    fn page(&self, title: &str, body: Markup) -> Response {
        framed(&self.session, &self.scope, title, body)
    }
}

/// A scoped page titled `title` around `body`.
pub(crate) fn framed(session: &UiSession, scope: &ScopeKey, title: &str, body: Markup) -> Response {
    respond(pages::page(
        &Frame {
            title,
            viewer: &session.viewer,
            scope: Some(scope),
            csrf: &session.csrf,
        },
        body,
    ))
}

fn failed(error: impl std::fmt::Display) -> Refusal {
    Refusal::Failed(error.to_string())
}

/// `/ui`: an operator's scopes, or a user's own scope.
pub(crate) async fn home(server: Shared, headers: HeaderMap) -> Response {
    answer(async {
        let session = session_of(&server, &headers, "/ui")?;
        if let Viewer::User { scope, .. } = &session.viewer {
            return Ok(Redirect::to(&scope_href("sessions", scope, &[])).into_response());
        }
        let scopes = known_scopes(&server).await?;
        let mut rows = Vec::with_capacity(scopes.len());
        for (n, scope) in scopes.into_iter().enumerate() {
            let pending = if n < COUNTED_SCOPES {
                let memory = server.agent.memory(&scope).await.map_err(failed)?;
                memory.dream.proposals().await.map_err(failed)?.len()
            } else {
                0
            };
            rows.push((scope, pending));
        }
        Ok(respond(pages::page(
            &Frame {
                title: "Scopes",
                viewer: &session.viewer,
                scope: None,
                csrf: &session.csrf,
            },
            pages::scopes(&rows),
        )))
    })
    .await
}

/// `/ui/sessions?scope=`.
pub(crate) async fn sessions(page: Scoped) -> Response {
    answer(async {
        let rows = page.memory.sessions.list().await.map_err(failed)?;
        Ok(page.page("Sessions", pages::sessions(&page.scope, &rows)))
    })
    .await
}

/// `/ui/session?scope=&key=&page=`: one page of messages, the newest page by default.
pub(crate) async fn session(page: Scoped) -> Response {
    answer(async {
        let key = page
            .params
            .key
            .as_deref()
            .and_then(|k| SessionKey::new(k).ok())
            .ok_or(Refusal::NotFound)?;
        let store = page.memory.sessions.store();
        let loaded = store.load(&key).await.map_err(failed)?;
        let loaded = loaded.ok_or(Refusal::NotFound)?;
        let all = loaded.session.messages();
        let count = all.len().div_ceil(PAGE_SIZE).max(1);
        let number = page.params.page.unwrap_or(count).clamp(1, count);
        let shown: Vec<(usize, &nanobot_session_store::StoredMessage)> = all
            .iter()
            .enumerate()
            .skip((number - 1) * PAGE_SIZE)
            .take(PAGE_SIZE)
            .collect();
        let archived = loaded.session.last_consolidated();
        let body = pages::session(&page.scope, key.as_str(), &shown, number, count, archived);
        Ok(page.page(&format!("Session {key}"), body))
    })
    .await
}

/// `/ui/memory?scope=`: the memory files, line by line with their provenance.
pub(crate) async fn memory(page: Scoped) -> Response {
    answer(async {
        let blamed = page.memory.dream.blame_all().await.map_err(failed)?;
        let files: Vec<(String, Vec<nanobot_dream::BlameLine>)> = blamed.into_iter().collect();
        Ok(page.page("Memory", history::memory(&files)))
    })
    .await
}

/// `/ui/versions?scope=`.
pub(crate) async fn versions(page: Scoped) -> Response {
    answer(async {
        let log = page.memory.dream.log(VERSIONS).await.map_err(failed)?;
        Ok(page.page("Versions", history::versions(&page.scope, &log)))
    })
    .await
}

/// The version the page's `id` names (404 when there is none).
async fn named_version(
    page: &Scoped,
) -> Result<
    (
        nanobot_memory_store::Version,
        Vec<nanobot_dream::diff::FileDiff>,
    ),
    Refusal,
> {
    let id = page.params.id.as_deref().ok_or(Refusal::NotFound)?;
    page.memory
        .dream
        .show(id)
        .await
        .map_err(|_| Refusal::NotFound)
}

/// `/ui/version?scope=&id=`: one version's diffs.
pub(crate) async fn version(page: Scoped) -> Response {
    answer(async {
        let (version, diffs) = named_version(&page).await?;
        let title = format!("Version {}", version.short_id());
        Ok(page.page(&title, history::version(&page.scope, &version, &diffs)))
    })
    .await
}

/// `/ui/restore?scope=&id=` (GET): the confirmation.
pub(crate) async fn restore_confirm(page: Scoped) -> Response {
    answer(async {
        let (version, _) = named_version(&page).await?;
        let body = history::restore_confirm(&page.scope, &version, &page.session.csrf);
        Ok(page.page("Restore", body))
    })
    .await
}

/// `/ui/search?scope=&q=&mode=words|meaning`.
pub(crate) async fn search(page: Scoped) -> Response {
    answer(async {
        let query = page.params.q.clone().unwrap_or_default();
        let by_meaning = page.params.mode.as_deref() == Some("meaning");
        let (hits, note) = if query.trim().is_empty() {
            (Vec::new(), None)
        } else {
            search_hits(&page.server, &page.memory, query.trim(), by_meaning).await?
        };
        let body = pages::search(&page.scope, &query, by_meaning, &hits, note.as_deref());
        Ok(page.page("Search", body))
    })
    .await
}

/// The hits of one lane, after bringing the index up to date.
async fn search_hits(
    server: &Server,
    memory: &ScopeMemory,
    query: &str,
    by_meaning: bool,
) -> Result<(Vec<nanobot_memory_index::Hit>, Option<String>), Refusal> {
    let Some(index) = memory.index.clone() else {
        return Ok((
            Vec::new(),
            Some("This storage keeps no search index.".into()),
        ));
    };
    let counter = server.agent.counter().clone();
    memory
        .indexer(index.clone(), counter.clone())
        .sync()
        .await
        .map_err(failed)?;
    let request = SearchRequest::new(query);
    if !by_meaning {
        return Ok((index.search(&request).await.map_err(failed)?, None));
    }
    let search = server
        .search
        .clone()
        .unwrap_or_else(|| Arc::new(nanobot_turn::SearchMemory::new(counter)));
    let Some(lane) = search.vector_lane(memory) else {
        return Ok((
            Vec::new(),
            Some("Search by meaning needs an embedding model; this server has none.".into()),
        ));
    };
    let _ = lane.embed_missing(search.embed_per_search()).await;
    match lane.search(&request).await {
        Ok(Some(hits)) => Ok((hits, None)),
        Ok(None) => Ok((
            Vec::new(),
            Some("The vector lane is paused or empty.".into()),
        )),
        Err(error) => Ok((
            Vec::new(),
            Some(format!("Search by meaning failed: {error}")),
        )),
    }
}

/// `/ui/review?scope=`: the proposals waiting, the scope's setting, the decisions.
pub(crate) async fn review(page: Scoped) -> Response {
    answer(async {
        let proposals = page.memory.dream.proposals().await.map_err(failed)?;
        let review = page.memory.dream.review().await.map_err(failed)?;
        let body = history::review(
            &page.scope,
            &proposals,
            review.every_edit,
            &review.decisions,
            &page.session.csrf,
        );
        Ok(page.page("Review", body))
    })
    .await
}
