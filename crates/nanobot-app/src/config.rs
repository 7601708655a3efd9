//! The configuration: a TOML file, then environment overrides, then checks. Every key, its
//! default and its variable are in the README; a bad value is named with its key and file.

use std::path::{Path, PathBuf};

use nanobot_llm_http::ApiKey;
use serde::Deserialize;

use crate::error::AppError;

/// Which model backend to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// Any OpenAI-compatible server (OpenAI, vLLM, llama.cpp, Ollama, OpenRouter, ...).
    OpenAi,
    /// Anthropic's Messages API.
    Anthropic,
    /// The project's own local model (`cargo xtask llm start`), OpenAI-compatible on
    /// 127.0.0.1.
    Local,
}

impl Provider {
    fn parse(text: &str) -> Option<Provider> {
        match text.trim().to_ascii_lowercase().as_str() {
            "openai" | "openai-compatible" => Some(Provider::OpenAi),
            "anthropic" => Some(Provider::Anthropic),
            "local" => Some(Provider::Local),
            _ => None,
        }
    }

    /// The name used in the file.
    pub fn name(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::Anthropic => "anthropic",
            Provider::Local => "local",
        }
    }
}

/// The longest vector an embedding model may be configured with (the largest models
/// today give 4,096 numbers).
pub const MAX_EMBEDDING_DIMENSIONS: i64 = 16_384;

/// The effective configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it was read from, if any.
    pub source: Option<PathBuf>,
    /// The agent workspace (nanobot-ai's layout).
    pub workspace: PathBuf,
    /// `files` (the workspace, nanobot-ai's layout) or `postgres` (shared by instances).
    pub storage: String,
    /// The PostgreSQL URL, for `postgres` (its password is never printed).
    pub database_url: Option<String>,
    /// The PostgreSQL schema every table lives in.
    pub database_schema: String,
    /// `none`, `turn-end` or `always`.
    pub durability: String,
    /// Where session files live: `workspace` (`<workspace>/sessions`), `nanobot`
    /// (nanobot-ai's `<sessions_root>/<workspace id>/`), or `auto`: nanobot-ai's when the
    /// workspace has its `.nanobot/workspace-id`.
    pub layout: String,
    /// nanobot-ai's sessions directory, for the `nanobot` layout.
    pub sessions_root: PathBuf,
    /// How long a turn waits for another turn of the same session (in this or another
    /// process) before it gives up with "session busy".
    pub turn_wait_secs: u64,
    /// The model backend.
    pub provider: Provider,
    /// The model name sent with each request.
    pub model: String,
    /// The API root.
    pub base_url: String,
    /// The API key (never printed).
    pub api_key: Option<ApiKey>,
    /// The variable the key was read from.
    pub api_key_env: String,
    /// Stream answers.
    pub stream: bool,
    /// The model's context window, in tokens.
    pub context_window: usize,
    /// Output tokens reserved per answer.
    pub max_output_tokens: usize,
    /// Seconds one model call may take.
    pub request_timeout_secs: u64,
    /// Whether the model makes native tool calls (Dream's `auto` mode plans without them).
    pub native_tools: bool,
    /// Sampling temperature of chat answers and archives (`None`: the server's default).
    pub temperature: Option<f32>,
    /// Archives are asked with a JSON schema first (small models), not free text.
    pub archive_with_schema: bool,
    /// Dream's mode: `auto`, `tools` or `plan`.
    pub dream_mode: nanobot_dream::DreamMode,
    /// Whose memory a turn uses: `workspace` (one for the agent), `user` or `chat`.
    pub isolation: nanobot_memory_scope::IsolationMode,
    /// The bot's own identities (`platform:id`): a message from one gets no memory.
    pub bot_ids: Vec<nanobot_memory_scope::UserKey>,
    /// Consolidation archives down to this share of the budget.
    pub consolidation_ratio: f64,
    /// Minutes of silence before a session is compacted (0: never).
    pub idle_ttl_minutes: u64,
    /// Dream on schedule.
    pub dream_enabled: bool,
    /// Hours between Dream runs.
    pub dream_interval_hours: u32,
    /// A cron expression that takes precedence over the interval.
    pub dream_cron: Option<String>,
    /// Dream's step budget.
    pub dream_max_steps: usize,
    /// Dream's token budget.
    pub dream_max_tokens: u64,
    /// Journal entries per Dream run.
    pub dream_batch_entries: usize,
    /// The embedding model behind memory search's vector lane (`None`: words only).
    pub embeddings: Option<EmbeddingsConfig>,
    /// Chunks `search_memory` embeds before it searches (the rest: later searches, or
    /// `nanobot memory reindex` at once).
    pub embed_per_search: usize,
    /// Where `nanobot serve` listens.
    pub serve_listen: String,
    /// `nanobot serve`'s API keys (`[[serve.keys]]`), secrets read from the environment.
    pub serve_keys: Vec<ServeKey>,
    /// Turns `nanobot serve` runs at once; more get 429.
    pub serve_max_turns: usize,
    /// How long a non-streamed request waits for its answer (504 after; the turn goes on).
    pub serve_request_timeout_secs: u64,
    /// The largest request body `nanobot serve` takes.
    pub serve_body_limit_bytes: usize,
    /// Browser origins that may call `nanobot serve` (empty: CORS off; `*`: any).
    pub serve_cors_origins: Vec<String>,
}

/// One API key of `nanobot serve` (`[[serve.keys]]`).
#[derive(Debug, Clone)]
pub struct ServeKey {
    /// Its name (logs, and the user of a `per-key` binding).
    pub name: String,
    /// The variable holding the secret.
    pub secret_env: String,
    /// The secret, when the variable is set (never printed).
    pub secret: Option<ApiKey>,
    /// The tenant whose memory its callers use.
    pub tenant: String,
    /// `per-key`, `fixed` or `trusted`.
    pub binding: String,
    /// The user of a `fixed` binding.
    pub user: Option<String>,
    /// The header a `trusted` front end names its users in.
    pub user_header: Option<String>,
    /// The header a `trusted` front end names its chats in (the session).
    pub chat_header: Option<String>,
}

/// An OpenAI-compatible `/v1/embeddings` endpoint for memory search's vector lane.
#[derive(Debug, Clone)]
pub struct EmbeddingsConfig {
    /// The API root (`…/v1`).
    pub base_url: String,
    /// The model's name, sent with each request and kept beside the vectors.
    pub model: String,
    /// The model's vector length: with the name, what tells two models' vectors apart.
    pub dimensions: usize,
    /// The API key (never printed).
    pub api_key: Option<ApiKey>,
    /// The variable the key is read from (`None`: no key is sent).
    pub api_key_env: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    workspace: Option<String>,
    storage: Option<StorageSection>,
    llm: Option<LlmSection>,
    memory: Option<MemorySection>,
    dream: Option<DreamSection>,
    search: Option<SearchSection>,
    serve: Option<ServeSection>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServeSection {
    listen: Option<String>,
    max_concurrent_turns: Option<i64>,
    request_timeout_secs: Option<i64>,
    body_limit_bytes: Option<i64>,
    cors_origins: Option<Vec<String>>,
    keys: Option<Vec<ServeKeySection>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServeKeySection {
    name: Option<String>,
    secret_env: Option<String>,
    tenant: Option<String>,
    binding: Option<String>,
    user: Option<String>,
    user_header: Option<String>,
    chat_header: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchSection {
    embeddings_url: Option<String>,
    embeddings_model: Option<String>,
    embeddings_dimensions: Option<i64>,
    embeddings_api_key_env: Option<String>,
    embed_per_search: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct StorageSection {
    backend: Option<String>,
    database_url: Option<String>,
    schema: Option<String>,
    durability: Option<String>,
    layout: Option<String>,
    sessions_root: Option<String>,
    turn_wait_secs: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LlmSection {
    provider: Option<String>,
    model: Option<String>,
    base_url: Option<String>,
    api_key_env: Option<String>,
    stream: Option<bool>,
    context_window: Option<i64>,
    max_output_tokens: Option<i64>,
    request_timeout_secs: Option<i64>,
    native_tools: Option<bool>,
    temperature: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MemorySection {
    consolidation_ratio: Option<f64>,
    idle_ttl_minutes: Option<i64>,
    archive_with_schema: Option<bool>,
    isolation: Option<String>,
    bot_ids: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DreamSection {
    enabled: Option<bool>,
    interval_hours: Option<i64>,
    cron: Option<String>,
    max_steps: Option<i64>,
    max_tokens: Option<i64>,
    batch_entries: Option<i64>,
    mode: Option<String>,
}

/// Every key with its environment variable, for the README and `config show`.
pub const KEYS: [(&str, &str, &str); 39] = [
    ("workspace", "NANOBOT_WORKSPACE", "~/.nanobot/workspace"),
    ("storage.backend", "NANOBOT_STORAGE", "files"),
    (
        "storage.database_url",
        "NANOBOT_DATABASE_URL",
        "(none; required for postgres)",
    ),
    ("storage.schema", "NANOBOT_DATABASE_SCHEMA", "nanobot"),
    ("storage.durability", "NANOBOT_DURABILITY", "turn-end"),
    ("storage.layout", "NANOBOT_SESSIONS_LAYOUT", "auto"),
    (
        "storage.sessions_root",
        "NANOBOT_SESSIONS_ROOT",
        "~/.nanobot/sessions",
    ),
    ("storage.turn_wait_secs", "NANOBOT_TURN_WAIT_SECS", "60"),
    ("llm.provider", "NANOBOT_PROVIDER", "local"),
    (
        "llm.model",
        "NANOBOT_MODEL",
        "local (openai: gpt-4o-mini, anthropic: claude-sonnet-4-5)",
    ),
    (
        "llm.base_url",
        "NANOBOT_BASE_URL",
        "the provider's (local: http://127.0.0.1:8088/v1)",
    ),
    (
        "llm.api_key_env",
        "NANOBOT_API_KEY_ENV",
        "OPENAI_API_KEY / ANTHROPIC_API_KEY",
    ),
    ("llm.stream", "NANOBOT_STREAM", "true"),
    (
        "llm.context_window",
        "NANOBOT_CONTEXT_WINDOW",
        "4096 (local), 128000, 200000",
    ),
    (
        "llm.max_output_tokens",
        "NANOBOT_MAX_OUTPUT_TOKENS",
        "512 (local), 4096",
    ),
    (
        "llm.request_timeout_secs",
        "NANOBOT_REQUEST_TIMEOUT_SECS",
        "300",
    ),
    ("llm.temperature", "NANOBOT_TEMPERATURE", "the server's"),
    (
        "llm.native_tools",
        "NANOBOT_NATIVE_TOOLS",
        "false (local), true",
    ),
    (
        "memory.consolidation_ratio",
        "NANOBOT_CONSOLIDATION_RATIO",
        "0.5",
    ),
    ("memory.idle_ttl_minutes", "NANOBOT_IDLE_TTL_MINUTES", "15"),
    (
        "memory.archive_with_schema",
        "NANOBOT_ARCHIVE_WITH_SCHEMA",
        "true (local), false",
    ),
    ("memory.isolation", "NANOBOT_ISOLATION", "workspace"),
    ("memory.bot_ids", "NANOBOT_BOT_IDS", "none"),
    ("dream.enabled", "NANOBOT_DREAM_ENABLED", "true"),
    ("dream.interval_hours", "NANOBOT_DREAM_INTERVAL_HOURS", "2"),
    ("dream.cron", "NANOBOT_DREAM_CRON", "none"),
    ("dream.max_steps", "NANOBOT_DREAM_MAX_STEPS", "30"),
    ("dream.max_tokens", "NANOBOT_DREAM_MAX_TOKENS", "400000"),
    ("dream.mode", "NANOBOT_DREAM_MODE", "auto"),
    (
        "search.embeddings_url",
        "NANOBOT_EMBEDDINGS_URL",
        "none (words only)",
    ),
    (
        "search.embeddings_model",
        "NANOBOT_EMBEDDINGS_MODEL",
        "none; required with a URL",
    ),
    (
        "search.embeddings_dimensions",
        "NANOBOT_EMBEDDINGS_DIMENSIONS",
        "none; required with a URL",
    ),
    (
        "search.embeddings_api_key_env",
        "NANOBOT_EMBEDDINGS_API_KEY_ENV",
        "none (no key sent)",
    ),
    ("search.embed_per_search", "NANOBOT_EMBED_PER_SEARCH", "64"),
    ("serve.listen", "NANOBOT_SERVE_LISTEN", "127.0.0.1:8080"),
    (
        "serve.max_concurrent_turns",
        "NANOBOT_SERVE_MAX_TURNS",
        "16",
    ),
    (
        "serve.request_timeout_secs",
        "NANOBOT_SERVE_REQUEST_TIMEOUT_SECS",
        "120",
    ),
    (
        "serve.body_limit_bytes",
        "NANOBOT_SERVE_BODY_LIMIT_BYTES",
        "20971520",
    ),
    (
        "serve.cors_origins",
        "NANOBOT_SERVE_CORS_ORIGINS",
        "none (CORS off)",
    ),
];

impl Config {
    /// Reads `path` (when given; a missing file given explicitly is an error), then the
    /// environment through `env`, then checks every value.
    pub fn load(
        path: Option<&Path>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, AppError> {
        let (file, source) = match path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| AppError::Config {
                    key: "(file)".into(),
                    file: Some(path.to_owned()),
                    reason: format!("cannot be read: {e}"),
                })?;
                let parsed: FileConfig =
                    basic_toml::from_str(&text).map_err(|e| AppError::Config {
                        key: "(syntax)".into(),
                        file: Some(path.to_owned()),
                        reason: e.to_string(),
                    })?;
                (parsed, Some(path.to_owned()))
            }
            None => (FileConfig::default(), None),
        };
        let bad = |key: &str, reason: String| AppError::Config {
            key: key.to_owned(),
            file: source.clone(),
            reason,
        };
        let llm = file.llm.unwrap_or_default();
        let storage = file.storage.unwrap_or_default();
        let memory = file.memory.unwrap_or_default();
        let dream = file.dream.unwrap_or_default();
        let search = file.search.unwrap_or_default();
        let serve = file.serve.unwrap_or_default();

        let text = |key: &str, var: &str, from_file: Option<String>| {
            env(var).or(from_file).map(|v| (key.to_owned(), v))
        };
        let int = |key: &str,
                   var: &str,
                   from_file: Option<i64>,
                   min: i64|
         -> Result<Option<i64>, AppError> {
            let value =
                match env(var) {
                    Some(v) => Some(v.trim().parse::<i64>().map_err(|_| {
                        bad(key, format!("{v:?} (from {var}) is not a whole number"))
                    })?),
                    None => from_file,
                };
            match value {
                Some(v) if v < min => Err(bad(key, format!("{v} is below the minimum {min}"))),
                other => Ok(other),
            }
        };
        let boolean =
            |key: &str, var: &str, from_file: Option<bool>| -> Result<Option<bool>, AppError> {
                match env(var) {
                    Some(v) => match v.trim().to_ascii_lowercase().as_str() {
                        "1" | "true" | "yes" | "on" => Ok(Some(true)),
                        "0" | "false" | "no" | "off" => Ok(Some(false)),
                        _ => Err(bad(key, format!("{v:?} (from {var}) is not true or false"))),
                    },
                    None => Ok(from_file),
                }
            };

        let provider_text = text("llm.provider", "NANOBOT_PROVIDER", llm.provider)
            .map(|(_, v)| v)
            .unwrap_or_else(|| "local".into());
        let provider = Provider::parse(&provider_text).ok_or_else(|| {
            bad(
                "llm.provider",
                format!("{provider_text:?} is not one of openai, anthropic, local"),
            )
        })?;
        let (default_model, default_url, default_key, default_window, default_output) =
            match provider {
                Provider::Local => (
                    "local",
                    "http://127.0.0.1:8088/v1",
                    "NANOBOT_API_KEY",
                    4_096,
                    512,
                ),
                Provider::OpenAi => (
                    "gpt-4o-mini",
                    "https://api.openai.com/v1",
                    "OPENAI_API_KEY",
                    128_000,
                    4_096,
                ),
                Provider::Anthropic => (
                    "claude-sonnet-4-5",
                    "https://api.anthropic.com",
                    "ANTHROPIC_API_KEY",
                    200_000,
                    4_096,
                ),
            };
        let workspace = text("workspace", "NANOBOT_WORKSPACE", file.workspace)
            .map(|(_, v)| expand_home(&v, env))
            .unwrap_or_else(|| expand_home("~/.nanobot/workspace", env));
        let storage_backend = text("storage.backend", "NANOBOT_STORAGE", storage.backend)
            .map(|(_, v)| v)
            .unwrap_or_else(|| "files".into());
        if !["files", "postgres"].contains(&storage_backend.as_str()) {
            return Err(bad(
                "storage.backend",
                format!("{storage_backend:?} is not one of files, postgres"),
            ));
        }
        let database_url = text(
            "storage.database_url",
            "NANOBOT_DATABASE_URL",
            storage.database_url,
        )
        .map(|(_, v)| v)
        .filter(|v| !v.trim().is_empty());
        if storage_backend == "postgres" && database_url.is_none() {
            return Err(bad(
                "storage.database_url",
                "storage.backend is postgres: set the database URL (NANOBOT_DATABASE_URL), e.g. postgres://user@127.0.0.1:5432/nanobot".into(),
            ));
        }
        if let Some(url) = &database_url
            && !(url.starts_with("postgres://") || url.starts_with("postgresql://"))
        {
            return Err(bad(
                "storage.database_url",
                format!("{} is not a postgres:// URL", redact_url(url)),
            ));
        }
        let database_schema = text("storage.schema", "NANOBOT_DATABASE_SCHEMA", storage.schema)
            .map(|(_, v)| v)
            .unwrap_or_else(|| "nanobot".into());
        if let Err(e) = nanobot_store_postgres::Schema::new(&database_schema) {
            return Err(bad("storage.schema", e.to_string()));
        }
        let durability = text(
            "storage.durability",
            "NANOBOT_DURABILITY",
            storage.durability,
        )
        .map(|(_, v)| v)
        .unwrap_or_else(|| "turn-end".into());
        if !["none", "turn-end", "always"].contains(&durability.as_str()) {
            return Err(bad(
                "storage.durability",
                format!("{durability:?} is not one of none, turn-end, always"),
            ));
        }
        let layout = text("storage.layout", "NANOBOT_SESSIONS_LAYOUT", storage.layout)
            .map(|(_, v)| v)
            .unwrap_or_else(|| "auto".into());
        if !["auto", "workspace", "nanobot"].contains(&layout.as_str()) {
            return Err(bad(
                "storage.layout",
                format!("{layout:?} is not one of auto, workspace, nanobot"),
            ));
        }
        let sessions_root = text(
            "storage.sessions_root",
            "NANOBOT_SESSIONS_ROOT",
            storage.sessions_root,
        )
        .map(|(_, v)| expand_home(&v, env))
        .unwrap_or_else(|| expand_home("~/.nanobot/sessions", env));
        let base_url = text("llm.base_url", "NANOBOT_BASE_URL", llm.base_url)
            .map(|(_, v)| v)
            .unwrap_or_else(|| default_url.into());
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(bad(
                "llm.base_url",
                format!("{base_url:?} must start with http:// or https://"),
            ));
        }
        let api_key_env = text("llm.api_key_env", "NANOBOT_API_KEY_ENV", llm.api_key_env)
            .map(|(_, v)| v)
            .unwrap_or_else(|| default_key.into());
        let api_key = env("NANOBOT_API_KEY")
            .or_else(|| env(&api_key_env))
            .and_then(ApiKey::new);
        let context_window = int(
            "llm.context_window",
            "NANOBOT_CONTEXT_WINDOW",
            llm.context_window,
            512,
        )?
        .unwrap_or(default_window) as usize;
        let max_output_tokens = int(
            "llm.max_output_tokens",
            "NANOBOT_MAX_OUTPUT_TOKENS",
            llm.max_output_tokens,
            16,
        )?
        .unwrap_or(default_output) as usize;
        if max_output_tokens + 1_024 >= context_window {
            return Err(bad(
                "llm.max_output_tokens",
                format!(
                    "{max_output_tokens} leaves no room for the prompt in a {context_window}-token window (1,024 are kept as a margin)"
                ),
            ));
        }
        let ratio = match env("NANOBOT_CONSOLIDATION_RATIO") {
            Some(v) => v.trim().parse::<f64>().map_err(|_| {
                bad(
                    "memory.consolidation_ratio",
                    format!("{v:?} is not a number"),
                )
            })?,
            None => memory.consolidation_ratio.unwrap_or(0.5),
        };
        if !(0.1..=0.95).contains(&ratio) {
            return Err(bad(
                "memory.consolidation_ratio",
                format!("{ratio} is outside 0.1 to 0.95"),
            ));
        }
        let local = provider == Provider::Local;
        let native_tools = boolean("llm.native_tools", "NANOBOT_NATIVE_TOOLS", llm.native_tools)?
            .unwrap_or(!local);
        let archive_with_schema = boolean(
            "memory.archive_with_schema",
            "NANOBOT_ARCHIVE_WITH_SCHEMA",
            memory.archive_with_schema,
        )?
        .unwrap_or(local);
        let dream_mode = match text("dream.mode", "NANOBOT_DREAM_MODE", dream.mode.clone()) {
            None => nanobot_dream::DreamMode::Auto,
            Some((key, value)) => nanobot_dream::DreamMode::parse(&value)
                .ok_or_else(|| bad(&key, format!("{value:?} is not one of auto, tools, plan")))?,
        };
        let isolation = match text(
            "memory.isolation",
            "NANOBOT_ISOLATION",
            memory.isolation.clone(),
        ) {
            None => nanobot_memory_scope::IsolationMode::Workspace,
            Some((key, value)) => {
                nanobot_memory_scope::IsolationMode::parse(&value).ok_or_else(|| {
                    bad(
                        &key,
                        format!("{value:?} is not one of workspace, user, chat"),
                    )
                })?
            }
        };
        let bot_ids_text: Option<Vec<String>> = match env("NANOBOT_BOT_IDS") {
            Some(v) => Some(
                v.split(',')
                    .map(|s| s.trim().to_owned())
                    .filter(|s| !s.is_empty())
                    .collect(),
            ),
            None => memory.bot_ids.clone(),
        };
        let mut bot_ids = Vec::new();
        for id in bot_ids_text.unwrap_or_default() {
            bot_ids.push(
                nanobot_memory_scope::UserKey::parse(&id)
                    .map_err(|e| bad("memory.bot_ids", e.to_string()))?,
            );
        }
        let temperature = match env("NANOBOT_TEMPERATURE") {
            Some(v) => Some(v.trim().parse::<f64>().map_err(|_| {
                bad(
                    "llm.temperature",
                    format!("{v:?} (from NANOBOT_TEMPERATURE) is not a number"),
                )
            })?),
            None => llm.temperature,
        };
        if let Some(t) = temperature
            && !(0.0..=2.0).contains(&t)
        {
            return Err(bad("llm.temperature", format!("{t} is outside 0 to 2")));
        }
        let embeddings_url = text(
            "search.embeddings_url",
            "NANOBOT_EMBEDDINGS_URL",
            search.embeddings_url,
        )
        .map(|(_, v)| v.trim().trim_end_matches('/').to_owned())
        .filter(|v| !v.is_empty());
        let embeddings_model = text(
            "search.embeddings_model",
            "NANOBOT_EMBEDDINGS_MODEL",
            search.embeddings_model,
        )
        .map(|(_, v)| v.trim().to_owned())
        .filter(|v| !v.is_empty());
        let embeddings_dimensions = int(
            "search.embeddings_dimensions",
            "NANOBOT_EMBEDDINGS_DIMENSIONS",
            search.embeddings_dimensions,
            1,
        )?;
        if let Some(dimensions) = embeddings_dimensions
            && dimensions > MAX_EMBEDDING_DIMENSIONS
        {
            return Err(bad(
                "search.embeddings_dimensions",
                format!("{dimensions} is above the maximum {MAX_EMBEDDING_DIMENSIONS}"),
            ));
        }
        let embeddings_api_key_env = text(
            "search.embeddings_api_key_env",
            "NANOBOT_EMBEDDINGS_API_KEY_ENV",
            search.embeddings_api_key_env,
        )
        .map(|(_, v)| v.trim().to_owned())
        .filter(|v| !v.is_empty());
        let embeddings = match (embeddings_url, embeddings_model, embeddings_dimensions) {
            (None, None, None) => None,
            (None, _, _) => {
                return Err(bad(
                    "search.embeddings_url",
                    "an embedding model is named but not where it is served: set the URL of its OpenAI-compatible API too (NANOBOT_EMBEDDINGS_URL), e.g. http://127.0.0.1:8090/v1".into(),
                ));
            }
            (Some(url), _, _) if !(url.starts_with("http://") || url.starts_with("https://")) => {
                return Err(bad(
                    "search.embeddings_url",
                    format!("{url:?} must start with http:// or https://"),
                ));
            }
            (Some(_), None, _) => {
                return Err(bad(
                    "search.embeddings_model",
                    "an embeddings URL is set: name the model too (NANOBOT_EMBEDDINGS_MODEL), e.g. all-MiniLM-L6-v2".into(),
                ));
            }
            (Some(_), Some(_), None) => {
                return Err(bad(
                    "search.embeddings_dimensions",
                    "an embeddings URL is set: give the model's vector length too (NANOBOT_EMBEDDINGS_DIMENSIONS), e.g. 384 for all-MiniLM-L6-v2".into(),
                ));
            }
            (Some(base_url), Some(model), Some(dimensions)) => Some(EmbeddingsConfig {
                base_url,
                model,
                dimensions: dimensions as usize,
                api_key: embeddings_api_key_env
                    .as_deref()
                    .and_then(env)
                    .and_then(ApiKey::new),
                api_key_env: embeddings_api_key_env,
            }),
        };
        let embed_per_search = int(
            "search.embed_per_search",
            "NANOBOT_EMBED_PER_SEARCH",
            search.embed_per_search,
            0,
        )?
        .unwrap_or(nanobot_turn::DEFAULT_EMBED_PER_SEARCH as i64)
            as usize;
        let serve_listen = text("serve.listen", "NANOBOT_SERVE_LISTEN", serve.listen)
            .map(|(_, v)| v.trim().to_owned())
            .unwrap_or_else(|| "127.0.0.1:8080".into());
        if serve_listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(bad(
                "serve.listen",
                format!("{serve_listen:?} is not an address and port, e.g. 127.0.0.1:8080"),
            ));
        }
        let serve_cors_origins: Vec<String> = match env("NANOBOT_SERVE_CORS_ORIGINS") {
            Some(v) => v
                .split(',')
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect(),
            None => serve.cors_origins.clone().unwrap_or_default(),
        };
        nanobot_serve::CorsOrigins::parse(&serve_cors_origins)
            .map_err(|reason| bad("serve.cors_origins", reason))?;
        let mut serve_keys: Vec<ServeKey> = Vec::new();
        for (n, key) in serve.keys.unwrap_or_default().into_iter().enumerate() {
            serve_keys.push(
                serve_key(n, key, env, &serve_keys)
                    .map_err(|(field, reason)| bad(&format!("serve.keys[{n}].{field}"), reason))?,
            );
        }
        let config = Config {
            serve_listen,
            serve_keys,
            serve_max_turns: int(
                "serve.max_concurrent_turns",
                "NANOBOT_SERVE_MAX_TURNS",
                serve.max_concurrent_turns,
                1,
            )?
            .unwrap_or(16) as usize,
            serve_request_timeout_secs: int(
                "serve.request_timeout_secs",
                "NANOBOT_SERVE_REQUEST_TIMEOUT_SECS",
                serve.request_timeout_secs,
                1,
            )?
            .unwrap_or(120) as u64,
            serve_body_limit_bytes: int(
                "serve.body_limit_bytes",
                "NANOBOT_SERVE_BODY_LIMIT_BYTES",
                serve.body_limit_bytes,
                1_024,
            )?
            .unwrap_or(20 * 1024 * 1024) as usize,
            serve_cors_origins,
            embeddings,
            embed_per_search,
            isolation,
            bot_ids,
            temperature: temperature.map(|t| t as f32),
            native_tools,
            archive_with_schema,
            dream_mode,
            workspace,
            storage: storage_backend,
            database_url,
            database_schema,
            durability,
            layout,
            sessions_root,
            turn_wait_secs: int(
                "storage.turn_wait_secs",
                "NANOBOT_TURN_WAIT_SECS",
                storage.turn_wait_secs,
                0,
            )?
            .unwrap_or(60)
            .unsigned_abs(),
            provider,
            model: text("llm.model", "NANOBOT_MODEL", llm.model)
                .map(|(_, v)| v)
                .unwrap_or_else(|| default_model.into()),
            base_url,
            api_key,
            api_key_env,
            stream: boolean("llm.stream", "NANOBOT_STREAM", llm.stream)?.unwrap_or(true),
            context_window,
            max_output_tokens,
            request_timeout_secs: int(
                "llm.request_timeout_secs",
                "NANOBOT_REQUEST_TIMEOUT_SECS",
                llm.request_timeout_secs,
                1,
            )?
            .unwrap_or(300) as u64,
            consolidation_ratio: ratio,
            idle_ttl_minutes: int(
                "memory.idle_ttl_minutes",
                "NANOBOT_IDLE_TTL_MINUTES",
                memory.idle_ttl_minutes,
                0,
            )?
            .unwrap_or(15) as u64,
            dream_enabled: boolean("dream.enabled", "NANOBOT_DREAM_ENABLED", dream.enabled)?
                .unwrap_or(true),
            dream_interval_hours: int(
                "dream.interval_hours",
                "NANOBOT_DREAM_INTERVAL_HOURS",
                dream.interval_hours,
                1,
            )?
            .unwrap_or(2) as u32,
            dream_cron: text("dream.cron", "NANOBOT_DREAM_CRON", dream.cron)
                .map(|(_, v)| v)
                .filter(|c| !c.trim().is_empty()),
            dream_max_steps: int(
                "dream.max_steps",
                "NANOBOT_DREAM_MAX_STEPS",
                dream.max_steps,
                1,
            )?
            .unwrap_or(30) as usize,
            dream_max_tokens: int(
                "dream.max_tokens",
                "NANOBOT_DREAM_MAX_TOKENS",
                dream.max_tokens,
                1_000,
            )?
            .unwrap_or(400_000) as u64,
            dream_batch_entries: int(
                "dream.batch_entries",
                "NANOBOT_DREAM_BATCH_ENTRIES",
                dream.batch_entries,
                1,
            )?
            .unwrap_or(20) as usize,
            source: source.clone(),
        };
        if let Some(cron) = &config.dream_cron {
            nanobot_dream::CronExpr::parse(
                cron,
                chrono::FixedOffset::east_opt(0).unwrap_or(chrono::Utc.fix()),
            )
            .map_err(|e| bad("dream.cron", e.to_string()))?;
        }
        Ok(config)
    }

    /// The effective configuration as TOML, the key redacted.
    pub fn show(&self) -> String {
        format!(
            "# from {}\nworkspace = {:?}\n\n[storage]\nbackend = {:?}\ndatabase_url = {:?}\nschema = {:?}\ndurability = {:?}\nlayout = {:?}\nsessions_root = {:?}\nturn_wait_secs = {}\n\n[llm]\nprovider = {:?}\nmodel = {:?}\nbase_url = {:?}\napi_key_env = {:?}  # key {}\nstream = {}\ncontext_window = {}\nmax_output_tokens = {}\nrequest_timeout_secs = {}\ntemperature = {}\nnative_tools = {}\n\n[memory]\nconsolidation_ratio = {}\nidle_ttl_minutes = {}\narchive_with_schema = {}\nisolation = {:?}\nbot_ids = {:?}\n\n[dream]\nenabled = {}\ninterval_hours = {}\ncron = {:?}\nmax_steps = {}\nmax_tokens = {}\nbatch_entries = {}\nmode = {:?}\n\n[search]\n{}embed_per_search = {}\n\n[serve]\nlisten = {:?}\nmax_concurrent_turns = {}\nrequest_timeout_secs = {}\nbody_limit_bytes = {}\ncors_origins = {:?}\n{}",
            self.source
                .as_ref()
                .map_or("defaults and the environment".to_owned(), |p| p
                    .display()
                    .to_string()),
            self.workspace.display().to_string(),
            self.storage,
            self.database_url
                .as_deref()
                .map_or_else(String::new, redact_url),
            self.database_schema,
            self.durability,
            self.layout,
            self.sessions_root.display().to_string(),
            self.turn_wait_secs,
            self.provider.name(),
            self.model,
            self.base_url,
            self.api_key_env,
            if self.api_key.is_some() {
                "set (***)"
            } else {
                "not set"
            },
            self.stream,
            self.context_window,
            self.max_output_tokens,
            self.request_timeout_secs,
            self.temperature
                .map_or("\"the server's\"".to_owned(), |t| t.to_string()),
            self.native_tools,
            self.consolidation_ratio,
            self.idle_ttl_minutes,
            self.archive_with_schema,
            self.isolation.name(),
            self.bot_ids.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
            self.dream_enabled,
            self.dream_interval_hours,
            self.dream_cron.as_deref().unwrap_or(""),
            self.dream_max_steps,
            self.dream_max_tokens,
            self.dream_batch_entries,
            self.dream_mode.name(),
            self.embeddings.as_ref().map_or_else(
                || "# embeddings_url: none (words only)\n".to_owned(),
                |e| format!(
                    "embeddings_url = {:?}\nembeddings_model = {:?}\nembeddings_dimensions = {}\nembeddings_api_key_env = {:?}  # key {}\n",
                    e.base_url,
                    e.model,
                    e.dimensions,
                    e.api_key_env.as_deref().unwrap_or(""),
                    if e.api_key.is_some() { "set (***)" } else { "not set" }
                )
            ),
            self.embed_per_search,
            self.serve_listen,
            self.serve_max_turns,
            self.serve_request_timeout_secs,
            self.serve_body_limit_bytes,
            self.serve_cors_origins,
            self.serve_keys
                .iter()
                .map(|k| format!(
                    "\n[[serve.keys]]\nname = {:?}\nsecret_env = {:?}  # secret {}\ntenant = {:?}\nbinding = {:?}\n{}{}{}",
                    k.name,
                    k.secret_env,
                    if k.secret.is_some() { "set (***)" } else { "not set" },
                    k.tenant,
                    k.binding,
                    k.user.as_ref().map_or(String::new(), |u| format!("user = {u:?}\n")),
                    k.user_header.as_ref().map_or(String::new(), |h| format!("user_header = {h:?}\n")),
                    k.chat_header.as_ref().map_or(String::new(), |h| format!("chat_header = {h:?}\n")),
                ))
                .collect::<String>(),
        )
    }
}

use chrono::Offset;

/// One `[[serve.keys]]` entry checked: the field at fault and why, else the key.
fn serve_key(
    n: usize,
    key: ServeKeySection,
    env: &dyn Fn(&str) -> Option<String>,
    earlier: &[ServeKey],
) -> Result<ServeKey, (&'static str, String)> {
    let name = key
        .name
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())
        .ok_or(("name", format!("key {n} needs a name")))?;
    if name.len() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err((
            "name",
            format!("{name:?} must be 1 to 64 of A-Z a-z 0-9 - _ ."),
        ));
    }
    if earlier.iter().any(|k| k.name == name) {
        return Err(("name", format!("{name:?} names two keys")));
    }
    let secret_env = key
        .secret_env
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .ok_or((
            "secret_env",
            format!(
                "key {name:?}: name the environment variable holding its secret (secrets are never written in the file)"
            ),
        ))?;
    let tenant = key
        .tenant
        .map(|t| t.trim().to_owned())
        .unwrap_or_else(|| nanobot_memory_scope::DEFAULT_NAME.to_owned());
    nanobot_memory_scope::ScopeKey::new(
        &tenant,
        nanobot_memory_scope::DEFAULT_NAME,
        nanobot_memory_scope::Subject::Agent,
    )
    .map_err(|e| ("tenant", e.to_string()))?;
    let binding = key
        .binding
        .map(|b| b.trim().to_ascii_lowercase())
        .unwrap_or_else(|| "per-key".to_owned());
    let header = |field: &'static str, value: Option<String>| match value {
        None => Ok(None),
        Some(h) if !h.is_empty() && h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') => {
            Ok(Some(h.to_ascii_lowercase()))
        }
        Some(h) => Err((field, format!("{h:?} is not a header name"))),
    };
    let user_header = header("user_header", key.user_header)?;
    let chat_header = header("chat_header", key.chat_header)?;
    let user = key
        .user
        .map(|u| u.trim().to_owned())
        .filter(|u| !u.is_empty());
    match binding.as_str() {
        "per-key" | "trusted" if user.is_some() => {
            return Err((
                "user",
                format!("a {binding} key names no user; the binding \"fixed\" does"),
            ));
        }
        "per-key" | "fixed" if user_header.is_some() || chat_header.is_some() => {
            return Err((
                "binding",
                "only a \"trusted\" front end may name users or chats in headers".into(),
            ));
        }
        "fixed" if user.is_none() => {
            return Err((
                "user",
                format!("key {name:?} is bound to a fixed user: name it"),
            ));
        }
        "per-key" | "fixed" | "trusted" => {}
        other => {
            return Err((
                "binding",
                format!("{other:?} is not one of per-key, fixed, trusted"),
            ));
        }
    }
    Ok(ServeKey {
        secret: env(&secret_env).and_then(ApiKey::new),
        name,
        secret_env,
        tenant,
        binding,
        user,
        user_header,
        chat_header,
    })
}

/// `url` with its password replaced by `***`, for anything printed.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((credentials, host)) => match credentials.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

fn expand_home(path: &str, env: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    match path.strip_prefix("~/") {
        Some(rest) => PathBuf::from(env("HOME").unwrap_or_default()).join(rest),
        None => PathBuf::from(path),
    }
}
