#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "conformance")]
pub mod conformance;
mod error;
#[cfg(feature = "fs")]
mod fs;
mod key;
mod links;
mod resolve;

pub use error::ScopeError;
#[cfg(feature = "fs")]
pub use fs::{FileLinks, SCOPE_RECORD, SCOPES_DIR, ScopeDir, ScopeDirs, ScopeRecord};
pub use key::{
    ChatKey, DEFAULT_NAME, MAX_ID_BYTES, MAX_PLATFORM_BYTES, ScopeKey, Subject, UserKey,
};
pub use links::{
    InMemoryLinks, LinkAction, LinkRecord, LinkTable, canonical_user, check_record, links_in_force,
};
pub use resolve::{
    ChatType, IdentityResolver, Inbound, IsolationMode, ModeResolver, NoMemoryReason, Resolution,
};
