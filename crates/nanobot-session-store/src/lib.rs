#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "conformance")]
pub mod conformance;
mod durability;
mod error;
#[cfg(feature = "fs")]
mod file;
mod history;
mod info;
mod key;
mod manager;
mod memory;
mod message;
mod replay;
mod session;
mod store;

pub use durability::Durability;
pub use error::SessionError;
#[cfg(all(feature = "fs", feature = "conformance"))]
pub use file::BrokenRule;
#[cfg(feature = "fs")]
pub use file::{FileSessionStore, FileStoreOptions};
pub use history::{
    HistoryOptions, MIN_REPLAY_MESSAGES, Replayed, get_history, get_history_counted,
    message_tokens, public_copy, replay_token_budget,
};
pub use info::{PREVIEW_SCAN_RECORDS, PreviewScan, listing_preview, listing_title};
pub use key::{MAX_KEY_BYTES, SessionKey};
pub use manager::{
    BUSY, DEFAULT_CACHE_CAPACITY, DeleteObserver, MAX_WRITE_ATTEMPTS, SessionHandle,
    SessionManager, TURN_LOCK_WAIT_SECONDS,
};
pub use memory::{InMemorySessionStore, sort_listing};
pub use message::{RECALLED_FIELD, StoredMessage, TOKENS_FIELD};
pub use replay::{ReplayView, replay_floor};
pub use session::{
    LAST_SUMMARY_KEY, PendingWrite, Retention, Session, SessionMeta, local_naive, parse_isoformat,
    python_isoformat,
};
pub use store::{
    Append, Loaded, Repair, Revision, SessionCapabilities, SessionInfo, SessionStore,
    SessionStoreExt, TurnLock,
};

/// The cores this process may use, asked once: the answer reads cgroup files, a cost per
/// call that a turn or a load must not pay.
fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, usize::from))
}
