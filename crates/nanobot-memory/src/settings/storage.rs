//! `[storage]`: where sessions and memory live.

use std::path::PathBuf;

use nanobot_llm_port::InvalidOption;
use nanobot_session_store::Durability;

use super::redact_url;

/// Which backend keeps sessions and memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(rename_all = "lowercase")
)]
#[non_exhaustive]
pub enum Backend {
    /// The workspace's files, nanobot-ai's layout (the default).
    #[default]
    Files,
    /// One PostgreSQL schema shared by every instance.
    Postgres,
}

impl Backend {
    /// The name used in files.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Files => "files",
            Backend::Postgres => "postgres",
        }
    }
}

/// Where sessions and memory live, and how durably they are written.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(default, deny_unknown_fields)
)]
#[non_exhaustive]
pub struct StorageSettings {
    /// Files (default) or PostgreSQL.
    pub backend: Backend,
    /// The PostgreSQL URL, for [`Backend::Postgres`] (never printed with its password).
    pub database_url: Option<String>,
    /// The PostgreSQL schema every table lives in (default `nanobot`).
    pub schema: String,
    /// When appended messages reach stable storage (default: at the end of each turn).
    pub durability: Durability,
    /// Where the file backend keeps the agent's sessions.
    #[cfg(feature = "files")]
    pub layout: crate::Layout,
    /// nanobot-ai's sessions directory, for the `nanobot` layout.
    pub sessions_root: PathBuf,
    /// How long a turn waits for another turn of its session before "session busy".
    pub turn_wait_secs: u64,
}

impl Default for StorageSettings {
    fn default() -> Self {
        StorageSettings {
            backend: Backend::Files,
            database_url: None,
            schema: "nanobot".to_owned(),
            durability: Durability::TurnEnd,
            #[cfg(feature = "files")]
            layout: crate::Layout::Auto,
            sessions_root: PathBuf::from("~/.nanobot/sessions"),
            turn_wait_secs: 60,
        }
    }
}

impl StorageSettings {
    /// Files in a workspace (the default).
    pub fn files() -> Self {
        StorageSettings::default()
    }

    /// PostgreSQL at `url`, in `schema`.
    pub fn postgres(url: impl Into<String>, schema: impl Into<String>) -> Self {
        StorageSettings {
            backend: Backend::Postgres,
            database_url: Some(url.into()),
            schema: schema.into(),
            ..StorageSettings::default()
        }
    }

    /// The same settings with `durability`.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// Refuses what no backend could open; an empty URL is none.
    pub fn check(&mut self) -> Result<(), InvalidOption> {
        self.database_url = self.database_url.take().filter(|u| !u.trim().is_empty());
        match (&self.database_url, self.backend) {
            (None, Backend::Postgres) => {
                self.database_url()?;
            }
            (Some(url), _)
                if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) =>
            {
                return Err(InvalidOption::new(
                    "database_url",
                    format!("{} is not a postgres:// URL", redact_url(url)),
                ));
            }
            _ => {}
        }
        #[cfg(feature = "postgres")]
        nanobot_store_postgres::Schema::new(&self.schema)
            .map_err(|e| InvalidOption::new("schema", e.to_string()))?;
        Ok(())
    }

    /// The PostgreSQL URL, which PostgreSQL storage needs.
    pub fn database_url(&self) -> Result<&str, InvalidOption> {
        self.database_url.as_deref().ok_or_else(|| {
            InvalidOption::new(
                "database_url",
                "storage.backend is postgres: set the database URL (NANOBOT_DATABASE_URL), e.g. postgres://user@127.0.0.1:5432/nanobot",
            )
        })
    }

    /// The file backend's options.
    #[cfg(feature = "files")]
    pub fn file_options(&self) -> crate::FileOptions {
        crate::FileOptions::default()
            .durability(self.durability)
            .layout(self.layout)
            .sessions_root(self.sessions_root.clone())
    }
}
