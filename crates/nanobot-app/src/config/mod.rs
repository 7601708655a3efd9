//! The configuration: a TOML file, then environment overrides, then checks. The sections
//! are the crates' own types (`[storage]`, `[llm]`, `[memory]`, `[search]` from
//! `nanobot-memory`, `[dream]` from `nanobot-dream`, `[mcp]` from `nanobot-mcp`, `[serve]` from `nanobot-serve`); this
//! module reads the file and the variables (`keys::KEYS`) into them and names the file in
//! every error.

mod keys;
mod show;

use std::path::{Path, PathBuf};

use nanobot_dream::DreamSettings;
use nanobot_llm_http::ApiKey;
use nanobot_llm_port::InvalidOption;
use nanobot_mcp::McpConfig;
use nanobot_memory::settings::{
    LlmProvider, LlmSettings, MemorySettings, SearchSettings, StorageSettings,
};
use nanobot_serve::ServeConfig;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

pub use nanobot_memory::settings::redact_url;

use crate::error::AppError;

/// The effective configuration.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// The file it was read from, if any.
    pub source: Option<PathBuf>,
    /// The agent workspace (nanobot-ai's layout).
    pub workspace: PathBuf,
    /// `[storage]`: files or PostgreSQL (its `sessions_root` with `~` expanded).
    pub storage: StorageSettings,
    /// `[llm]`: the model.
    pub llm: LlmSettings,
    /// The model's API key, from `NANOBOT_API_KEY` or the variable `llm.api_key_env` names
    /// (never printed).
    pub api_key: Option<ApiKey>,
    /// `[memory]`: archiving and isolation.
    pub memory: MemorySettings,
    /// `[dream]`: Dream's schedule and budgets.
    pub dream: DreamSettings,
    /// `[search]`: the embedding model of memory search, if any.
    pub search: SearchSettings,
    /// The embedding model's key (never printed).
    pub embeddings_api_key: Option<ApiKey>,
    /// `[mcp]`: the MCP server (`nanobot mcp`, `/mcp` on `nanobot serve`).
    pub mcp: McpConfig,
    /// `[serve]`: `nanobot serve`.
    pub serve: ServeConfig,
    /// Each `[[serve.keys]]` key's secret, when its variable is set (never printed).
    pub serve_secrets: Vec<Option<ApiKey>>,
    /// The key `/metrics` asks for, when `serve.metrics_key_env` names a set variable.
    pub metrics_key: Option<ApiKey>,
}

impl Config {
    /// Reads `path` (when given; a missing file given explicitly is an error), then the
    /// environment through `env`, then checks every value.
    pub fn load(
        path: Option<&Path>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, AppError> {
        let source = path.map(Path::to_owned);
        let bad = |(key, reason): keys::Fault| AppError::Config {
            key,
            file: source.clone(),
            reason,
        };
        let mut table = match path {
            Some(path) => read_table(path)?,
            None => Map::new(),
        };
        keys::overlay_env(&mut table, env).map_err(bad)?;
        keys::check_table(&mut table).map_err(bad)?;
        let sections = Sections(&table, source.as_deref());
        let provider: LlmProvider = sections.field("llm", "provider")?.unwrap_or_default();
        let llm: LlmSettings = sections.read("llm", LlmSettings::for_provider(provider))?;
        let memory = MemorySettings::default().archive_with_schema(provider == LlmProvider::Local);
        let mut config = Config {
            workspace: expand_home(
                &sections
                    .field::<String>("", "workspace")?
                    .unwrap_or_else(|| "~/.nanobot/workspace".into()),
                env,
            ),
            storage: sections.read("storage", StorageSettings::default())?,
            api_key: env("NANOBOT_API_KEY")
                .or_else(|| env(&llm.api_key_env))
                .and_then(ApiKey::new),
            llm,
            memory: sections.read("memory", memory)?,
            dream: sections.read("dream", DreamSettings::default())?,
            search: sections.read("search", SearchSettings::default())?,
            embeddings_api_key: None,
            mcp: sections.read("mcp", McpConfig::default())?,
            serve: sections.read("serve", ServeConfig::default())?,
            serve_secrets: Vec::new(),
            metrics_key: None,
            source: source.clone(),
        };
        config.check().map_err(|e| bad((e.key, e.reason)))?;
        config.read_secrets(env);
        config.storage.sessions_root =
            expand_home(&config.storage.sessions_root.to_string_lossy(), env);
        Ok(config)
    }

    /// Every section's own check, the key named with its section.
    fn check(&mut self) -> Result<(), InvalidOption> {
        self.storage.check().map_err(|e| e.within("storage"))?;
        self.llm.check().map_err(|e| e.within("llm"))?;
        self.memory.check().map_err(|e| e.within("memory"))?;
        self.dream.check().map_err(|e| e.within("dream"))?;
        self.search.check().map_err(|e| e.within("search"))?;
        self.serve.check().map_err(|e| e.within("serve"))
    }

    /// The keys the sections name: the embedding model's and the server's.
    fn read_secrets(&mut self, env: &dyn Fn(&str) -> Option<String>) {
        self.embeddings_api_key = self
            .search
            .embeddings_api_key_env
            .as_deref()
            .and_then(env)
            .and_then(ApiKey::new);
        self.serve_secrets = self
            .serve
            .keys
            .iter()
            .map(|key| env(&key.secret_env).and_then(ApiKey::new))
            .collect();
        self.metrics_key = self
            .serve
            .metrics_key_env
            .as_deref()
            .and_then(env)
            .and_then(ApiKey::new);
    }

    /// The secret in the variable `var`, when a `[[serve.keys]]` key names it.
    pub fn serve_secret(&self, var: &str) -> Option<String> {
        if self.serve.metrics_key_env.as_deref() == Some(var) {
            return self.metrics_key.as_ref().map(|s| s.expose().to_owned());
        }
        self.serve
            .keys
            .iter()
            .zip(&self.serve_secrets)
            .find(|(key, _)| key.secret_env == var)
            .and_then(|(_, secret)| secret.as_ref().map(|s| s.expose().to_owned()))
    }

    /// `error` as the app reports it, with this configuration's file.
    pub fn invalid(&self, error: InvalidOption) -> AppError {
        AppError::Config {
            key: error.key,
            file: self.source.clone(),
            reason: error.reason,
        }
    }

    /// The embedding model's options, when one is configured.
    pub fn embedding_options(&self) -> Option<nanobot_memory::EmbeddingOptions> {
        self.search
            .embedding_options(self.embeddings_api_key.clone(), self.llm.request_timeout())
    }
}

/// The file's tables, as JSON values.
fn read_table(path: &Path) -> Result<Map<String, Value>, AppError> {
    let fault = |key: &str, reason: String| AppError::Config {
        key: key.to_owned(),
        file: Some(path.to_owned()),
        reason,
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| fault("(file)", format!("cannot be read: {e}")))?;
    basic_toml::from_str(&text).map_err(|e| fault("(syntax)", e.to_string()))
}

/// The checked table, read section by section into the crates' types.
struct Sections<'a>(&'a Map<String, Value>, Option<&'a Path>);

impl Sections<'_> {
    /// Section `name` over `defaults` (a key absent from the file keeps its default).
    fn read<T: DeserializeOwned + serde::Serialize>(
        &self,
        name: &str,
        defaults: T,
    ) -> Result<T, AppError> {
        let mut merged = serde_json::to_value(defaults).map_err(|e| self.unreadable(name, &e))?;
        if let (Value::Object(into), Some(Value::Object(given))) = (&mut merged, self.0.get(name)) {
            into.extend(given.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        serde_json::from_value(merged).map_err(|e| self.unreadable(name, &e))
    }

    /// One key of section `name` (`""`: the top level), when it is set.
    fn field<T: DeserializeOwned>(&self, name: &str, key: &str) -> Result<Option<T>, AppError> {
        let section = if name.is_empty() {
            Some(self.0)
        } else {
            self.0.get(name).and_then(Value::as_object)
        };
        section
            .and_then(|s| s.get(key))
            .map(|v| serde_json::from_value(v.clone()))
            .transpose()
            .map_err(|e| self.unreadable(&format!("{name}.{key}"), &e))
    }

    fn unreadable(&self, key: &str, error: &serde_json::Error) -> AppError {
        AppError::Config {
            key: key.to_owned(),
            file: self.1.map(Path::to_owned),
            reason: error.to_string(),
        }
    }
}

fn expand_home(path: &str, env: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    match path.strip_prefix("~/") {
        Some(rest) => PathBuf::from(env("HOME").unwrap_or_default()).join(rest),
        None => PathBuf::from(path),
    }
}
