//! The inspector's pages, rendered from plain data (no IO here), so each page has a snapshot
//! test on a fixed workspace. Every runtime string goes through [`Markup::text`] or an
//! attribute of [`el`].

use nanobot_memory_index::Hit;
use nanobot_memory_scope::ScopeKey;
use nanobot_session_store::{SessionInfo, StoredMessage};

use super::auth::Viewer;
use super::html::{Markup, el, link, query_value, tag_text, void};

/// What every page shows around its body.
pub(crate) struct Frame<'a> {
    pub(crate) title: &'a str,
    pub(crate) viewer: &'a Viewer,
    pub(crate) scope: Option<&'a ScopeKey>,
    pub(crate) csrf: &'a str,
}

/// The whole page.
pub(crate) fn page(frame: &Frame<'_>, body: Markup) -> String {
    let head = el(
        "head",
        &[],
        Markup::join([
            void("meta", &[("charset", "utf-8")]),
            void(
                "meta",
                &[("name", "viewport"), ("content", "width=device-width")],
            ),
            tag_text("title", &format!("{} · nanobot memory", frame.title)),
            void("link", &[("rel", "stylesheet"), ("href", "/ui/style.css")]),
            void("link", &[("rel", "icon"), ("href", "/ui/icon.svg")]),
        ]),
    );
    let mut nav = vec![link("/ui", "Scopes")];
    if let Some(scope) = frame.scope {
        for (path, name) in [
            ("sessions", "Sessions"),
            ("memory", "Memory"),
            ("versions", "Versions"),
            ("search", "Search"),
            ("review", "Review"),
        ] {
            nav.push(link(&scope_href(path, scope, &[]), name));
        }
    }
    let who = Markup::join([
        Markup::text(&format!("{} ", frame.viewer.name())),
        post_form(
            "/ui/logout",
            frame.csrf,
            &[],
            el("button", &[("type", "submit")], Markup::text("Sign out")),
        ),
    ]);
    let header = el(
        "header",
        &[],
        Markup::join([
            el("nav", &[], Markup::join(nav)),
            el("div", &[("class", "who")], who),
        ]),
    );
    let scope_line = frame.scope.map_or(Markup::empty(), |scope| {
        el(
            "p",
            &[("class", "scope")],
            Markup::text(&format!("Scope {scope}")),
        )
    });
    let main = el(
        "main",
        &[],
        Markup::join([tag_text("h1", frame.title), scope_line, body]),
    );
    let html = el(
        "html",
        &[("lang", "en")],
        Markup::join([head, el("body", &[], header.then(main))]),
    );
    format!("<!doctype html>\n{}\n", html.into_string())
}

/// `/ui/<path>?scope=<scope>&<extra>`.
pub(crate) fn scope_href(path: &str, scope: &ScopeKey, extra: &[(&str, &str)]) -> String {
    let mut href = format!("/ui/{path}?scope={}", query_value(&scope.to_string()));
    for (name, value) in extra {
        href.push_str(&format!("&{name}={}", query_value(value)));
    }
    href
}

/// A POST form to `action` with the CSRF token and hidden `fields`.
pub(crate) fn post_form(
    action: &str,
    csrf: &str,
    fields: &[(&'static str, &str)],
    controls: Markup,
) -> Markup {
    let mut inner = vec![hidden("csrf", csrf)];
    inner.extend(fields.iter().map(|(name, value)| hidden(name, value)));
    inner.push(controls);
    el(
        "form",
        &[("method", "post"), ("action", action)],
        Markup::join(inner),
    )
}

fn hidden(name: &'static str, value: &str) -> Markup {
    void(
        "input",
        &[("type", "hidden"), ("name", name), ("value", value)],
    )
}

/// The sign-in form.
pub(crate) fn login(token: &str, failed: bool) -> String {
    let note = if failed {
        el(
            "p",
            &[("class", "error")],
            Markup::text(
                "That key is not one of this server's, or its users are named by a front end.",
            ),
        )
    } else {
        Markup::empty()
    };
    let form = el(
        "form",
        &[("method", "post"), ("action", "/ui/login")],
        Markup::join([
            hidden("csrf", token),
            el("label", &[("for", "key")], Markup::text("API key")),
            void(
                "input",
                &[
                    ("id", "key"),
                    ("name", "key"),
                    ("type", "password"),
                    ("autocomplete", "off"),
                ],
            ),
            el("button", &[("type", "submit")], Markup::text("Sign in")),
        ]),
    );
    let body = Markup::join([tag_text("h1", "nanobot memory"), note, form]);
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Sign in · nanobot memory</title><link rel=\"stylesheet\" href=\"/ui/style.css\"><link rel=\"icon\" href=\"/ui/icon.svg\"></head><body><main>{}</main></body></html>\n",
        body.into_string()
    )
}

/// The scopes an operator may open, each with its pending proposals.
pub(crate) fn scopes(rows: &[(ScopeKey, usize)]) -> Markup {
    let items = rows.iter().map(|(scope, pending)| {
        let note = if *pending > 0 {
            format!(" ({pending} waiting for review)")
        } else {
            String::new()
        };
        el(
            "li",
            &[],
            link(&scope_href("sessions", scope, &[]), &scope.to_string()).then(Markup::text(&note)),
        )
    });
    el("ul", &[("class", "scopes")], Markup::join(items))
}

/// A scope's sessions.
pub(crate) fn sessions(scope: &ScopeKey, rows: &[SessionInfo]) -> Markup {
    if rows.is_empty() {
        return tag_text("p", "No sessions.");
    }
    let head = el(
        "tr",
        &[],
        Markup::join(
            ["Session", "Title", "Messages", "Updated", "First words"].map(|h| tag_text("th", h)),
        ),
    );
    let body = rows.iter().map(|row| {
        let key = row.key.as_str();
        el(
            "tr",
            &[],
            Markup::join([
                el(
                    "td",
                    &[],
                    link(&scope_href("session", scope, &[("key", key)]), key),
                ),
                tag_text("td", row.title.as_deref().unwrap_or("")),
                tag_text("td", &row.message_count.to_string()),
                tag_text("td", &row.updated_at.format("%Y-%m-%d %H:%M").to_string()),
                tag_text("td", &row.preview),
            ]),
        )
    });
    el("table", &[], head.then(Markup::join(body)))
}

/// One page of a session's messages; tool calls and results folded.
pub(crate) fn session(
    scope: &ScopeKey,
    key: &str,
    messages: &[(usize, &StoredMessage)],
    page: usize,
    pages: usize,
    archived: usize,
) -> Markup {
    let items = messages
        .iter()
        .map(|(n, message)| message_item(*n, message, archived));
    let mut pager = Vec::new();
    if page > 1 {
        let previous = (page - 1).to_string();
        pager.push(link(
            &scope_href("session", scope, &[("key", key), ("page", &previous)]),
            "← Earlier",
        ));
    }
    pager.push(Markup::text(&format!(" Page {page} of {pages} ")));
    if page < pages {
        let next = (page + 1).to_string();
        pager.push(link(
            &scope_href("session", scope, &[("key", key), ("page", &next)]),
            "Later →",
        ));
    }
    Markup::join([
        el("p", &[("class", "pager")], Markup::join(pager)),
        el("ol", &[("class", "messages")], Markup::join(items)),
    ])
}

fn message_item(n: usize, message: &StoredMessage, archived: usize) -> Markup {
    let role = message.role().unwrap_or("?");
    let text = content_text(message);
    let when = message
        .get("timestamp")
        .and_then(|v| v.as_str())
        .unwrap_or("");
    let mut class = format!("message {role}");
    if n < archived {
        class.push_str(" archived");
    }
    let label = format!("#{} {role} {when}", n + 1);
    let mut body = vec![el("div", &[("class", "meta")], Markup::text(&label))];
    let calls = message
        .get("tool_calls")
        .and_then(|v| v.as_array())
        .map(|calls| calls.len())
        .unwrap_or(0);
    if role == "tool" || calls > 0 {
        let summary = if role == "tool" {
            let name = message
                .get("name")
                .and_then(|v| v.as_str())
                .unwrap_or("tool");
            format!("Result of {name}")
        } else {
            format!("{calls} tool call(s)")
        };
        let detail = if role == "tool" {
            text.clone()
        } else {
            serde_json::to_string_pretty(
                message
                    .get("tool_calls")
                    .unwrap_or(&serde_json::Value::Null),
            )
            .unwrap_or_default()
        };
        if role != "tool" && !text.is_empty() {
            body.push(tag_text("pre", &text));
        }
        body.push(el(
            "details",
            &[],
            tag_text("summary", &summary).then(tag_text("pre", &detail)),
        ));
    } else {
        body.push(tag_text("pre", &text));
    }
    el("li", &[("class", &class)], Markup::join(body))
}

/// A message's text: a string, or the text parts of a list.
fn content_text(message: &StoredMessage) -> String {
    match message.content() {
        Some(serde_json::Value::String(text)) => text.clone(),
        Some(serde_json::Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(|t| t.as_str()))
            .collect::<Vec<_>>()
            .join("\n"),
        Some(serde_json::Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// The search form and its hits.
pub(crate) fn search(
    scope: &ScopeKey,
    query: &str,
    by_meaning: bool,
    hits: &[Hit],
    note: Option<&str>,
) -> Markup {
    let form = search_form(scope, query, by_meaning);
    let note = note.map_or(Markup::empty(), |n| {
        el("p", &[("class", "note")], Markup::text(n))
    });
    if query.trim().is_empty() {
        return form.then(note);
    }
    Markup::join([form, note, hit_list(hits)])
}

fn search_form(scope: &ScopeKey, query: &str, by_meaning: bool) -> Markup {
    let scope_text = scope.to_string();
    let mode = |value: &'static str, label: &'static str, on: bool| {
        let mut attrs = vec![("type", "radio"), ("name", "mode"), ("value", value)];
        if on {
            attrs.push(("checked", "checked"));
        }
        el(
            "label",
            &[],
            void("input", &attrs).then(Markup::text(label)),
        )
    };
    el(
        "form",
        &[
            ("method", "get"),
            ("action", "/ui/search"),
            ("class", "search"),
        ],
        Markup::join([
            void(
                "input",
                &[
                    ("type", "hidden"),
                    ("name", "scope"),
                    ("value", &scope_text),
                ],
            ),
            void(
                "input",
                &[
                    ("type", "search"),
                    ("name", "q"),
                    ("value", query),
                    ("aria-label", "Search memory"),
                ],
            ),
            mode("words", " by words", !by_meaning),
            mode("meaning", " by meaning", by_meaning),
            el("button", &[("type", "submit")], Markup::text("Search")),
        ]),
    )
}

fn hit_list(hits: &[Hit]) -> Markup {
    if hits.is_empty() {
        return tag_text("p", "Nothing in memory matches.");
    }
    el(
        "ol",
        &[("class", "hits")],
        Markup::join(hits.iter().map(|hit| {
            let at = hit
                .at
                .map_or("-".to_owned(), |at| at.format("%Y-%m-%d %H:%M").to_string());
            let meta = format!("{} · {at} · score {:.2}", hit.source, hit.score);
            el(
                "li",
                &[],
                el("div", &[("class", "meta")], Markup::text(&meta))
                    .then(tag_text("p", &hit.snippet)),
            )
        })),
    )
}

/// A short message page (an action's outcome), with a link onwards.
pub(crate) fn message(text: &str, onward: &str, onward_text: &str) -> Markup {
    tag_text("p", text).then(el("p", &[], link(onward, onward_text)))
}
