//! The PostgreSQL store the configuration names (`storage.backend = "postgres"`), for the
//! commands that copy into and out of it; the backend over it is the assembly's
//! (`nanobot_memory::PgBackend`).

use nanobot_store_postgres::{PgStore, StoreError};

use crate::config::Config;
use crate::error::AppError;

/// The PostgreSQL store the configuration names, migrated.
pub async fn connect(config: &Config) -> Result<PgStore, AppError> {
    let url = (config.storage.database_url()).map_err(|e| config.invalid(e.within("storage")))?;
    let storage = &config.storage;
    nanobot_memory::connect(url, &storage.schema, storage.durability)
        .await
        .map_err(|e| match e {
            nanobot_memory::AssemblyError::Postgres(e) => store_error(config, e),
            other => other.into(),
        })
}

/// A store error as the app reports it, the URL's password never shown.
pub fn store_error(config: &Config, error: StoreError) -> AppError {
    AppError::Storage(format!(
        "PostgreSQL at {} (schema {}): {error}",
        config
            .storage
            .database_url
            .as_deref()
            .map_or_else(String::new, crate::config::redact_url),
        config.storage.schema
    ))
}
