//! Logs on stderr through `tracing-subscriber`: `RUST_LOG` when set (for example
//! `RUST_LOG=memory_core=debug`), else warnings and errors, `-v` for info, `-vv` for debug,
//! `-vvv` for trace, `-q` for errors only. Standard output stays the program's answers.
//!
//! At info level a session appears by [`nanobot_session_store::SessionKey::log_id`], a short hash,
//! never by its key (which names a person's chat); the raw key is logged at debug level.

use tracing_subscriber::EnvFilter;

/// Installs the subscriber for the process; a second call does nothing.
pub fn init(verbose: u8, quiet: bool) {
    let default = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "info",
        (false, 2) => "debug",
        (false, _) => "trace",
    };
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => {
            EnvFilter::try_new(spec).unwrap_or_else(|_| EnvFilter::new(default))
        }
        _ => EnvFilter::new(default),
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(true)
        .try_init();
}
