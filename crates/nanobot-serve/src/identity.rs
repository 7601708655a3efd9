//! Who is calling: API keys mapped onto a tenant and a user, and the ids a request names
//! (user, session) checked before they reach a key.

use axum::http::HeaderMap;
use nanobot_memory_scope::{DEFAULT_NAME, ScopeKey, Subject, UserKey};
use nanobot_session_store::SessionKey;

use crate::error::ServeError;

/// The longest user or session id a request may name, in characters.
pub const MAX_REQUEST_ID_CHARS: usize = 256;

/// The platform of users named through the API (`api:<user>` inside the tenant's scopes).
pub const API_PLATFORM: &str = "api";

/// How a key's requests are bound to a user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserBinding {
    /// Every request is this user's.
    Fixed(String),
    /// The key itself is the user (its name).
    PerKey,
    /// A front end trusted to name its users: the OpenAI `user` field or `user_header`
    /// names the user (the key's name when neither does), and `chat_header` may name the
    /// session.
    TrustedFrontend {
        /// A header naming the user (Open WebUI: `X-OpenWebUI-User-Id`).
        user_header: Option<String>,
        /// A header naming the chat, used as the session (`X-OpenWebUI-Chat-Id`).
        chat_header: Option<String>,
    },
}

/// One API key: a secret (read from the environment by the app, never from a file), the
/// tenant whose memory its callers use, and how they are bound to a user.
#[derive(Clone)]
pub struct ApiKeyEntry {
    /// A name for logs and the per-key user (never the secret).
    pub name: String,
    /// The bearer secret.
    pub secret: String,
    /// The tenant (`default` for a single deployment).
    pub tenant: String,
    /// How its requests get a user.
    pub binding: UserBinding,
    /// Whether the memory inspector (`/ui`) shows it every scope, with the review queue of
    /// the shared files; other keys see their own scope only.
    pub operator: bool,
}

impl std::fmt::Debug for ApiKeyEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKeyEntry")
            .field("name", &self.name)
            .field("tenant", &self.tenant)
            .field("binding", &self.binding)
            .finish_non_exhaustive()
    }
}

/// The caller of one request, once authenticated.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The key's name (`local` without keys).
    pub key: String,
    /// The tenant.
    pub tenant: String,
    /// The user the key's binding gives, before the request names one.
    pub binding: UserBinding,
}

impl Caller {
    /// The caller of a server without keys (loopback only): the default tenant, one user.
    pub fn local() -> Caller {
        Caller {
            key: "local".to_owned(),
            tenant: DEFAULT_NAME.to_owned(),
            binding: UserBinding::Fixed("local".to_owned()),
        }
    }

    /// Whether the caller may name users and sessions through headers and `user`.
    pub fn is_trusted_frontend(&self) -> bool {
        matches!(self.binding, UserBinding::TrustedFrontend { .. })
    }

    /// The user of a request: the binding's, or for a trusted front end the one it names
    /// (checked). An untrusted key's `user` field is ignored.
    pub fn user(&self, headers: &HeaderMap, body_user: Option<&str>) -> Result<String, ServeError> {
        match &self.binding {
            UserBinding::Fixed(user) => Ok(user.clone()),
            UserBinding::PerKey => Ok(self.key.clone()),
            UserBinding::TrustedFrontend { user_header, .. } => {
                let named = user_header
                    .as_deref()
                    .and_then(|name| header_text(headers, name))
                    .or(body_user.map(str::to_owned));
                match named {
                    Some(user) => checked_id("user", &user),
                    None => Ok(self.key.clone()),
                }
            }
        }
    }

    /// The session a request names: `X-Session-Id`, else the body's `session_id`, else a
    /// trusted front end's chat header; `None` (a stateless request) when none does.
    pub fn session(
        &self,
        headers: &HeaderMap,
        body_session: Option<&str>,
    ) -> Result<Option<String>, ServeError> {
        let chat_header = match &self.binding {
            UserBinding::TrustedFrontend { chat_header, .. } => chat_header.as_deref(),
            _ => None,
        };
        let named = header_text(headers, "x-session-id")
            .or(body_session.map(str::to_owned))
            .or_else(|| chat_header.and_then(|name| header_text(headers, name)));
        named.map(|id| checked_id("session", &id)).transpose()
    }

    /// The scope of `user`: their own memory inside the caller's tenant.
    pub fn scope(&self, user: &str) -> Result<ScopeKey, ServeError> {
        let user = UserKey::new(API_PLATFORM, user)
            .map_err(|e| ServeError::bad_request("user", e.to_string()))?;
        ScopeKey::new(&self.tenant, DEFAULT_NAME, Subject::User(user))
            .map_err(|e| ServeError::bad_request("user", e.to_string()))
    }
}

/// The stored key of session `id`: `api:<id>`.
pub fn session_key(id: &str) -> Result<SessionKey, ServeError> {
    SessionKey::new(format!("{API_PLATFORM}:{id}"))
        .map_err(|e| ServeError::bad_request("session_id", e.to_string()))
}

/// The key whose secret a request presents (`Authorization: Bearer …`), compared in
/// constant time; `None` without a valid one.
pub fn authenticate<'k>(keys: &'k [ApiKeyEntry], headers: &HeaderMap) -> Option<&'k ApiKeyEntry> {
    let presented = header_text(headers, "authorization")?;
    let token = presented
        .strip_prefix("Bearer ")
        .or_else(|| presented.strip_prefix("bearer "))?
        .trim();
    // Every key is compared, so the time taken does not say which one nearly matched.
    let mut found = None;
    for key in keys {
        if constant_time_eq(key.secret.as_bytes(), token.as_bytes()) && found.is_none() {
            found = Some(key);
        }
    }
    found
}

pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut difference = a.len() ^ b.len();
    for (i, byte) in a.iter().enumerate() {
        difference |= usize::from(byte ^ b.get(i).copied().unwrap_or(!byte));
    }
    difference == 0
}

fn header_text(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}

/// A user or session id: 1 to 256 characters, none of them a control character.
pub fn checked_id(what: &str, id: &str) -> Result<String, ServeError> {
    let count = id.chars().count();
    if count == 0 || count > MAX_REQUEST_ID_CHARS {
        return Err(ServeError::bad_request(
            what,
            format!("a {what} id must have 1 to {MAX_REQUEST_ID_CHARS} characters, not {count}"),
        ));
    }
    if id.chars().any(char::is_control) {
        return Err(ServeError::bad_request(
            what,
            format!("a {what} id may not hold control characters"),
        ));
    }
    Ok(id.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_comparison_is_equality() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret-longer"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }
}
