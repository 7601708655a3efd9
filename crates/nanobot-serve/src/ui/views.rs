//! The inspector's pages (GET): each one checks who is looking and at which scope, reads
//! what it shows, and hands plain data to [`super::pages`].

use std::sync::Arc;

use axum::extract::Query;
use axum::http::{HeaderMap, Uri};
use axum::response::{IntoResponse, Redirect, Response};
use nanobot_memory_index::SearchRequest;
use nanobot_memory_scope::ScopeKey;
use nanobot_session_store::SessionKey;
use nanobot_turn::ScopeMemory;

use super::auth::{UiSession, Viewer};
use super::history;
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

/// The session and the scope a scoped page is about, and the scope's memory.
async fn scoped(
    server: &Server,
    headers: &HeaderMap,
    uri: &Uri,
    params: &Params,
) -> Result<(UiSession, ScopeKey, Arc<ScopeMemory>), Refusal> {
    let here = uri.path_and_query().map_or("/ui", |p| p.as_str());
    let session = session_of(server, headers, here)?;
    let scope = scope_of(server, &session.viewer, params.scope.as_deref()).await?;
    let memory = server
        .agent
        .memory(&scope)
        .await
        .map_err(|e| Refusal::Failed(e.to_string()))?;
    Ok((session, scope, memory))
}

/// A scoped page titled `title` around `body`.
fn framed(
    session: &UiSession,
    scope: &ScopeKey,
    title: &str,
    body: super::html::Markup,
) -> Response {
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
pub(crate) async fn sessions(
    server: Shared,
    headers: HeaderMap,
    uri: Uri,
    Query(p): Query<Params>,
) -> Response {
    answer(async {
        let (session, scope, memory) = scoped(&server, &headers, &uri, &p).await?;
        let rows = memory.sessions.list().await.map_err(failed)?;
        Ok(framed(
            &session,
            &scope,
            "Sessions",
            pages::sessions(&scope, &rows),
        ))
    })
    .await
}

/// `/ui/session?scope=&key=&page=`: one page of messages, the newest page by default.
pub(crate) async fn session(
    server: Shared,
    headers: HeaderMap,
    uri: Uri,
    Query(p): Query<Params>,
) -> Response {
    answer(async {
        let (session, scope, memory) = scoped(&server, &headers, &uri, &p).await?;
        let key = p
            .key
            .as_deref()
            .and_then(|k| SessionKey::new(k).ok())
            .ok_or(Refusal::NotFound)?;
        let loaded = memory
            .sessions
            .store()
            .load(&key)
            .await
            .map_err(failed)?
            .ok_or(Refusal::NotFound)?;
        let all = loaded.session.messages();
        let pages_count = all.len().div_ceil(PAGE_SIZE).max(1);
        let page = p.page.unwrap_or(pages_count).clamp(1, pages_count);
        let start = (page - 1) * PAGE_SIZE;
        let shown: Vec<(usize, &nanobot_session_store::StoredMessage)> =
            all.iter().enumerate().skip(start).take(PAGE_SIZE).collect();
        let body = pages::session(
            &scope,
            key.as_str(),
            &shown,
            page,
            pages_count,
            loaded.session.last_consolidated(),
        );
        Ok(framed(&session, &scope, &format!("Session {key}"), body))
    })
    .await
}

/// `/ui/memory?scope=`: the memory files, line by line with their provenance.
pub(crate) async fn memory(
    server: Shared,
    headers: HeaderMap,
    uri: Uri,
    Query(p): Query<Params>,
) -> Response {
    answer(async {
        let (session, scope, memory) = scoped(&server, &headers, &uri, &p).await?;
        let files: Vec<(String, Vec<nanobot_dream::BlameLine>)> = memory
            .dream
            .blame_all()
            .await
            .map_err(failed)?
            .into_iter()
            .collect();
        Ok(framed(&session, &scope, "Memory", history::memory(&files)))
    })
    .await
}

/// `/ui/versions?scope=`.
pub(crate) async fn versions(
    server: Shared,
    headers: HeaderMap,
    uri: Uri,
    Query(p): Query<Params>,
) -> Response {
    answer(async {
        let (session, scope, memory) = scoped(&server, &headers, &uri, &p).await?;
        let log = memory.dream.log(VERSIONS).await.map_err(failed)?;
        Ok(framed(
            &session,
            &scope,
            "Versions",
            history::versions(&scope, &log),
        ))
    })
    .await
}

/// `/ui/version?scope=&id=`: one version's diffs.
pub(crate) async fn version(
    server: Shared,
    headers: HeaderMap,
    uri: Uri,
    Query(p): Query<Params>,
) -> Response {
    answer(async {
        let (session, scope, memory) = scoped(&server, &headers, &uri, &p).await?;
        let id = p.id.as_deref().ok_or(Refusal::NotFound)?;
        let (version, diffs) = memory.dream.show(id).await.map_err(|_| Refusal::NotFound)?;
        let title = format!("Version {}", version.short_id());
        Ok(framed(
            &session,
            &scope,
            &title,
            history::version(&scope, &version, &diffs),
        ))
    })
    .await
}

/// `/ui/restore?scope=&id=` (GET): the confirmation.
pub(crate) async fn restore_confirm(
    server: Shared,
    headers: HeaderMap,
    uri: Uri,
    Query(p): Query<Params>,
) -> Response {
    answer(async {
        let (session, scope, memory) = scoped(&server, &headers, &uri, &p).await?;
        let id = p.id.as_deref().ok_or(Refusal::NotFound)?;
        let (version, _) = memory.dream.show(id).await.map_err(|_| Refusal::NotFound)?;
        let body = history::restore_confirm(&scope, &version, &session.csrf);
        Ok(framed(&session, &scope, "Restore", body))
    })
    .await
}

/// `/ui/search?scope=&q=&mode=words|meaning`.
pub(crate) async fn search(
    server: Shared,
    headers: HeaderMap,
    uri: Uri,
    Query(p): Query<Params>,
) -> Response {
    answer(async {
        let (session, scope, memory) = scoped(&server, &headers, &uri, &p).await?;
        let query = p.q.clone().unwrap_or_default();
        let by_meaning = p.mode.as_deref() == Some("meaning");
        let (hits, note) = if query.trim().is_empty() {
            (Vec::new(), None)
        } else {
            search_hits(&server, &memory, query.trim(), by_meaning).await?
        };
        let body = pages::search(&scope, &query, by_meaning, &hits, note.as_deref());
        Ok(framed(&session, &scope, "Search", body))
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
pub(crate) async fn review(
    server: Shared,
    headers: HeaderMap,
    uri: Uri,
    Query(p): Query<Params>,
) -> Response {
    answer(async {
        let (session, scope, memory) = scoped(&server, &headers, &uri, &p).await?;
        let proposals = memory.dream.proposals().await.map_err(failed)?;
        let review = memory.dream.review().await.map_err(failed)?;
        let body = history::review(
            &scope,
            &proposals,
            review.every_edit,
            &review.decisions,
            &session.csrf,
        );
        Ok(framed(&session, &scope, "Review", body))
    })
    .await
}
