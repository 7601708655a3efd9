//! The configuration on any bytes: a file (the bytes before the first NUL) and environment
//! variables (`NAME=value` lines after it). It loads or says which key is wrong; a loaded
//! configuration shows itself without a panic and without the API key.
#![no_main]

use std::collections::HashMap;
use std::sync::OnceLock;

use nanobot_app::Config;

#[path = "common.rs"]
mod common;

fn dir() -> &'static std::path::Path {
    static DIR: OnceLock<std::path::PathBuf> = OnceLock::new();
    common::scratch("config", &DIR)
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let split = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    let (file, env) = (&data[..split], data.get(split + 1..).unwrap_or_default());
    let env: HashMap<String, String> = String::from_utf8_lossy(env)
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(name, value)| (format!("NANOBOT_{name}"), value.to_owned()))
        .collect();
    let path = dir().join("config.toml");
    std::fs::write(&path, file).unwrap();
    if let Ok(config) = Config::load(Some(&path), &|name| env.get(name).cloned()) {
        // The key never shows: what `show()` prints is the same whatever the key's value.
        // (A key that happens to be a substring of other shown text, say `end = "files"`,
        // is not a leak; this check does not mistake it for one.)
        let shown = config.show();
        if config.api_key.is_some() {
            let mut other = config.clone();
            other.api_key = nanobot_llm_http::ApiKey::new("another-key-of-another-length");
            assert_eq!(shown, other.show(), "show() depends on the API key's value");
        }
        if config.embeddings_api_key.is_some() {
            let mut other = config.clone();
            other.embeddings_api_key =
                nanobot_llm_http::ApiKey::new("another-key-of-another-length");
            assert_eq!(shown, other.show(), "show() depends on the embeddings key's value");
        }
        if config.serve_secrets.iter().any(Option::is_some) {
            let mut other = config.clone();
            for secret in other.serve_secrets.iter_mut().filter(|s| s.is_some()) {
                *secret = nanobot_llm_http::ApiKey::new("another-secret-of-another-length");
            }
            assert_eq!(shown, other.show(), "show() depends on a serve key's secret");
        }
    }
});
