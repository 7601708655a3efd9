//! The sections of a configuration file a bot is assembled from (`[storage]`, `[llm]`,
//! `[memory]`, `[search]`): typed, with nanobot's defaults, setters, and a `check` that names
//! the key at fault. Reading a file and the environment is the application's job; with the
//! `serde` feature each section deserializes from its table (unknown keys refused).

mod assemble;
mod llm;
mod memory;
mod storage;

pub use llm::{LlmProvider, LlmSettings};
pub use memory::{MAX_EMBEDDING_DIMENSIONS, MemorySettings, SearchSettings};
pub use storage::{Backend, StorageSettings};

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

/// Refuses a URL that is not `http://` or `https://`.
fn http_url(key: &str, url: &str) -> Result<(), nanobot_llm_port::InvalidOption> {
    if url.starts_with("http://") || url.starts_with("https://") {
        Ok(())
    } else {
        Err(nanobot_llm_port::InvalidOption::new(
            key,
            format!("{url:?} must start with http:// or https://"),
        ))
    }
}
