//! Who is looking at the inspector: a browser signs in once with an API key (the same keys
//! as the chat API) and gets a session cookie (`HttpOnly`, `SameSite=Strict`); every form it
//! posts carries that session's CSRF token. Without keys (a loopback server) the one local
//! user is the operator, still with a session for the token.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use nanobot_memory_scope::ScopeKey;

use crate::identity::{UserBinding, constant_time_eq};
use crate::{ApiKeyEntry, Caller};

/// The cookie naming a browser's inspector session.
pub(crate) const COOKIE: &str = "nanobot_ui";
/// The cookie holding the sign-in form's token (double submit, before there is a session).
pub(crate) const LOGIN_COOKIE: &str = "nanobot_ui_login";
/// How long a session lasts without use.
const IDLE: Duration = Duration::from_secs(8 * 3600);
/// Sessions kept at most (the oldest go first).
const MAX_SESSIONS: usize = 10_000;

/// Who a session is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Viewer {
    /// May see and review every scope.
    Operator {
        /// The key's name.
        name: String,
    },
    /// Sees one scope: the key's own user's.
    User {
        /// The key's name.
        name: String,
        /// The user's scope.
        scope: ScopeKey,
    },
}

impl Viewer {
    /// Whether this viewer may see `scope`.
    pub(crate) fn may_see(&self, scope: &ScopeKey) -> bool {
        match self {
            Viewer::Operator { .. } => true,
            Viewer::User { scope: own, .. } => own == scope,
        }
    }

    /// The name shown in the page header and recorded with a decision.
    pub(crate) fn name(&self) -> &str {
        match self {
            Viewer::Operator { name } | Viewer::User { name, .. } => name,
        }
    }
}

/// A signed-in browser.
#[derive(Debug, Clone)]
pub(crate) struct UiSession {
    pub(crate) viewer: Viewer,
    pub(crate) csrf: String,
    last_used: Instant,
}

/// The inspector's sessions, in memory (a restart signs everyone out).
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    map: Mutex<HashMap<String, UiSession>>,
}

impl Sessions {
    /// A new session for `viewer`: its id (the cookie's value); `None` when the operating
    /// system gives no randomness (no session is better than a guessable one).
    pub(crate) fn open(&self, viewer: Viewer) -> Option<(String, UiSession)> {
        let id = random_token()?;
        let session = UiSession {
            viewer,
            csrf: random_token()?,
            last_used: Instant::now(),
        };
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, s| s.last_used.elapsed() < IDLE);
        if map.len() >= MAX_SESSIONS
            && let Some(oldest) = map
                .iter()
                .min_by_key(|(_, s)| s.last_used)
                .map(|(k, _)| k.clone())
        {
            map.remove(&oldest);
        }
        map.insert(id.clone(), session.clone());
        Some((id, session))
    }

    /// The session the request's cookie names, if it is current.
    pub(crate) fn find(&self, headers: &HeaderMap) -> Option<UiSession> {
        let id = cookie(headers, COOKIE)?;
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let session = map.get_mut(&id)?;
        if session.last_used.elapsed() >= IDLE {
            map.remove(&id);
            return None;
        }
        session.last_used = Instant::now();
        Some(session.clone())
    }

    /// Ends the session the request's cookie names.
    pub(crate) fn close(&self, headers: &HeaderMap) {
        if let Some(id) = cookie(headers, COOKIE) {
            self.map
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
        }
    }
}

/// The viewer a key's secret signs in as, or `None` for an unknown secret or a key whose
/// users are named by a front end (the inspector cannot know which one is looking).
pub(crate) fn viewer_of(keys: &[ApiKeyEntry], secret: &str) -> Option<Viewer> {
    let key = keys
        .iter()
        .find(|k| constant_time_eq(k.secret.as_bytes(), secret.trim().as_bytes()))?;
    if key.operator {
        return Some(Viewer::Operator {
            name: key.name.clone(),
        });
    }
    if matches!(key.binding, UserBinding::TrustedFrontend { .. }) {
        return None;
    }
    let caller = Caller {
        key: key.name.clone(),
        tenant: key.tenant.clone(),
        binding: key.binding.clone(),
    };
    let user = caller.user(&HeaderMap::new(), None).ok()?;
    let scope = caller.scope(&user).ok()?;
    Some(Viewer::User {
        name: key.name.clone(),
        scope,
    })
}

/// Whether `given` is the session's CSRF token.
pub(crate) fn csrf_ok(session: &UiSession, given: &str) -> bool {
    !given.is_empty() && constant_time_eq(session.csrf.as_bytes(), given.as_bytes())
}

/// The value of cookie `name`.
pub(crate) fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

/// A `Set-Cookie` value for the inspector's paths.
pub(crate) fn set_cookie(name: &str, value: &str, max_age: Option<u64>) -> String {
    let age = max_age.map_or(String::new(), |s| format!("; Max-Age={s}"));
    format!("{name}={value}; Path=/ui; HttpOnly; SameSite=Strict{age}")
}

/// 32 random bytes from the operating system, as hex.
pub(crate) fn random_token() -> Option<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
