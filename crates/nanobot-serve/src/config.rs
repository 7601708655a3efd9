//! The server's section of a configuration file (`[serve]`, `[[serve.keys]]`): where it
//! listens, its limits and its API keys. Secrets are never in the file: each key names the
//! variable that holds its secret, and [`ServeConfig::settings`] reads them.

use std::net::SocketAddr;
use std::time::Duration;

use nanobot_llm_port::InvalidOption;
use nanobot_memory_scope::{DEFAULT_NAME, ScopeKey, Subject};

use crate::{ApiKeyEntry, CorsOrigins, MetricsAccess, ServeSettings, UserBinding};

/// What a user sets about the server; every field has a default.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(default, deny_unknown_fields)
)]
#[non_exhaustive]
pub struct ServeConfig {
    /// The address and port (default `127.0.0.1:8080`).
    pub listen: String,
    /// Turns at once; more get 429 (default 16).
    pub max_concurrent_turns: usize,
    /// How long a non-streamed request waits for its answer, in seconds (default 120).
    pub request_timeout_secs: u64,
    /// The largest request body (default 20 MiB, nanobot's).
    pub body_limit_bytes: usize,
    /// Browser origins that may call the API (empty: CORS off; `*`: any).
    pub cors_origins: Vec<String>,
    /// The API keys (none: no key is asked, which only a loopback address allows).
    pub keys: Vec<KeyConfig>,
    /// `GET /metrics` in Prometheus' format (default on).
    pub metrics: bool,
    /// The memory inspector at `/ui` (default on; sign-in with an API key).
    pub inspector: bool,
    /// The variable holding the key `/metrics` asks for (`Authorization: Bearer ...`);
    /// unset: `/metrics` answers loopback callers only. The chat keys never open it.
    pub metrics_key_env: Option<String>,
}

/// One API key: its name, the variable holding its secret, its tenant and its binding.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(default, deny_unknown_fields)
)]
#[non_exhaustive]
pub struct KeyConfig {
    /// Its name (logs, and the user of a `per-key` binding).
    pub name: String,
    /// The environment variable holding the secret.
    pub secret_env: String,
    /// The tenant whose memory its callers use (default `default`).
    pub tenant: Option<String>,
    /// `per-key` (default), `fixed` or `trusted`.
    pub binding: Option<String>,
    /// The user of a `fixed` binding.
    pub user: Option<String>,
    /// The header a `trusted` front end names its users in.
    pub user_header: Option<String>,
    /// The header a `trusted` front end names its chats (the session) in.
    pub chat_header: Option<String>,
    /// Whether the memory inspector shows this key every scope (an operator's key).
    pub operator: bool,
}

impl Default for ServeConfig {
    fn default() -> Self {
        let settings = ServeSettings::new("");
        ServeConfig {
            listen: "127.0.0.1:8080".to_owned(),
            max_concurrent_turns: settings.max_concurrent_turns,
            request_timeout_secs: settings.request_timeout.as_secs(),
            body_limit_bytes: settings.body_limit,
            cors_origins: Vec::new(),
            keys: Vec::new(),
            metrics: true,
            inspector: true,
            metrics_key_env: None,
        }
    }
}

impl ServeConfig {
    /// The same configuration listening on `listen`.
    pub fn listen(mut self, listen: impl Into<String>) -> Self {
        self.listen = listen.into();
        self
    }

    /// The same configuration with another key.
    pub fn key(mut self, key: KeyConfig) -> Self {
        self.keys.push(key);
        self
    }

    /// Normalises (trimmed names, lower-case headers and bindings) and refuses what the
    /// server could not run with; the key at fault is named (`keys[1].user`).
    pub fn check(&mut self) -> Result<(), InvalidOption> {
        self.listen = self.listen.trim().to_owned();
        if self.listen.parse::<SocketAddr>().is_err() {
            return Err(InvalidOption::new(
                "listen",
                format!(
                    "{:?} is not an address and port, e.g. 127.0.0.1:8080",
                    self.listen
                ),
            ));
        }
        InvalidOption::at_least("max_concurrent_turns", self.max_concurrent_turns, 1)?;
        InvalidOption::at_least("request_timeout_secs", self.request_timeout_secs, 1)?;
        InvalidOption::at_least("body_limit_bytes", self.body_limit_bytes, 1_024)?;
        CorsOrigins::parse(&self.cors_origins)
            .map_err(|reason| InvalidOption::new("cors_origins", reason))?;
        for n in 0..self.keys.len() {
            let (earlier, rest) = self.keys.split_at_mut(n);
            rest[0]
                .check(n, earlier)
                .map_err(|e| e.within(&format!("keys[{n}]")))?;
        }
        Ok(())
    }

    /// The server's settings for `model_name`, each key's secret read through `secret`
    /// (the environment); a key whose variable is unset is refused by name.
    pub fn settings(
        &self,
        model_name: &str,
        secret: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ServeSettings, InvalidOption> {
        let mut settings = ServeSettings::new(model_name);
        for (n, key) in self.keys.iter().enumerate() {
            let entry = key
                .entry(secret)
                .map_err(|e| e.within(&format!("keys[{n}]")))?;
            settings.keys.push(entry);
        }
        settings.max_concurrent_turns = self.max_concurrent_turns;
        settings.request_timeout = Duration::from_secs(self.request_timeout_secs);
        settings.body_limit = self.body_limit_bytes;
        settings.cors = CorsOrigins::parse(&self.cors_origins)
            .map_err(|reason| InvalidOption::new("cors_origins", reason))?;
        settings.metrics = match (self.metrics, &self.metrics_key_env) {
            (false, _) => MetricsAccess::Off,
            (true, None) => MetricsAccess::Loopback,
            (true, Some(var)) => match secret(var).filter(|s| !s.trim().is_empty()) {
                Some(key) => MetricsAccess::Key(key),
                None => {
                    return Err(InvalidOption::new(
                        "metrics_key_env",
                        format!("the variable {var} that should hold the metrics key is not set"),
                    ));
                }
            },
        };
        Ok(settings)
    }
}

impl KeyConfig {
    /// A key named `name` whose secret is in the variable `secret_env`, bound per key.
    pub fn new(name: impl Into<String>, secret_env: impl Into<String>) -> Self {
        KeyConfig {
            name: name.into(),
            secret_env: secret_env.into(),
            ..KeyConfig::default()
        }
    }

    /// The same key for `tenant`.
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// The same key with its callers bound to `user`.
    pub fn fixed_user(mut self, user: impl Into<String>) -> Self {
        self.binding = Some("fixed".to_owned());
        self.user = Some(user.into());
        self
    }

    /// The same key for a front end that names its users and chats in these headers.
    pub fn trusted(mut self, user_header: Option<String>, chat_header: Option<String>) -> Self {
        self.binding = Some("trusted".to_owned());
        self.user_header = user_header;
        self.chat_header = chat_header;
        self
    }

    fn check(&mut self, n: usize, earlier: &[KeyConfig]) -> Result<(), InvalidOption> {
        self.name = self.name.trim().to_owned();
        self.check_name(n, earlier)?;
        self.secret_env = self.secret_env.trim().to_owned();
        if self.secret_env.is_empty() {
            return Err(InvalidOption::new(
                "secret_env",
                format!(
                    "key {:?}: name the environment variable holding its secret (secrets are never written in the file)",
                    self.name
                ),
            ));
        }
        let tenant = self
            .tenant
            .take()
            .map_or_else(|| DEFAULT_NAME.to_owned(), |t| t.trim().to_owned());
        ScopeKey::new(&tenant, DEFAULT_NAME, Subject::Agent)
            .map_err(|e| InvalidOption::new("tenant", e.to_string()))?;
        self.tenant = Some(tenant);
        self.user_header = header("user_header", self.user_header.take())?;
        self.chat_header = header("chat_header", self.chat_header.take())?;
        self.user = self
            .user
            .take()
            .map(|u| u.trim().to_owned())
            .filter(|u| !u.is_empty());
        self.check_binding()
    }

    fn check_name(&self, n: usize, earlier: &[KeyConfig]) -> Result<(), InvalidOption> {
        let name = &self.name;
        if name.is_empty() {
            return Err(InvalidOption::new("name", format!("key {n} needs a name")));
        }
        if name.len() > 64
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(InvalidOption::new(
                "name",
                format!("{name:?} must be 1 to 64 of A-Z a-z 0-9 - _ ."),
            ));
        }
        if earlier.iter().any(|k| &k.name == name) {
            return Err(InvalidOption::new(
                "name",
                format!("{name:?} names two keys"),
            ));
        }
        Ok(())
    }

    fn check_binding(&mut self) -> Result<(), InvalidOption> {
        let binding = self
            .binding
            .take()
            .map_or_else(|| "per-key".to_owned(), |b| b.trim().to_ascii_lowercase());
        let result = self.binding_fits(&binding);
        self.binding = Some(binding);
        result
    }

    fn binding_fits(&self, binding: &str) -> Result<(), InvalidOption> {
        let headers = self.user_header.is_some() || self.chat_header.is_some();
        match binding {
            "per-key" | "trusted" if self.user.is_some() => Err(InvalidOption::new(
                "user",
                format!("a {binding} key names no user; the binding \"fixed\" does"),
            )),
            "per-key" | "fixed" if headers => Err(InvalidOption::new(
                "binding",
                "only a \"trusted\" front end may name users or chats in headers",
            )),
            "fixed" if self.user.is_none() => Err(InvalidOption::new(
                "user",
                format!("key {:?} is bound to a fixed user: name it", self.name),
            )),
            "per-key" | "fixed" | "trusted" => Ok(()),
            other => Err(InvalidOption::new(
                "binding",
                format!("{other:?} is not one of per-key, fixed, trusted"),
            )),
        }
    }

    /// The key with its secret, for the server.
    fn entry(&self, secret: &dyn Fn(&str) -> Option<String>) -> Result<ApiKeyEntry, InvalidOption> {
        let value = secret(&self.secret_env)
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| {
                InvalidOption::new(
                    "secret_env",
                    format!(
                        "the variable {} holding key {:?}'s secret is not set",
                        self.secret_env, self.name
                    ),
                )
            })?;
        let binding = match self.binding.as_deref().unwrap_or("per-key") {
            "fixed" => UserBinding::Fixed(self.user.clone().unwrap_or_default()),
            "trusted" => UserBinding::TrustedFrontend {
                user_header: self.user_header.clone(),
                chat_header: self.chat_header.clone(),
            },
            _ => UserBinding::PerKey,
        };
        Ok(ApiKeyEntry {
            name: self.name.clone(),
            secret: value,
            tenant: self
                .tenant
                .clone()
                .unwrap_or_else(|| DEFAULT_NAME.to_owned()),
            binding,
            operator: self.operator,
        })
    }
}

/// A header name, lower-cased, or the error naming `field`.
fn header(field: &str, value: Option<String>) -> Result<Option<String>, InvalidOption> {
    match value {
        None => Ok(None),
        Some(h) if !h.is_empty() && h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') => {
            Ok(Some(h.to_ascii_lowercase()))
        }
        Some(h) => Err(InvalidOption::new(
            field,
            format!("{h:?} is not a header name"),
        )),
    }
}
