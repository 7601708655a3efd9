#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod bot;
mod builder;
mod error;
#[cfg(feature = "files")]
mod files;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod models;
mod offload;
#[cfg(feature = "postgres")]
mod postgres;
mod speaker;
#[cfg(all(feature = "files", feature = "postgres"))]
pub mod transfer;

pub use bot::{Bot, Recall, Storage};
pub use builder::BotBuilder;
pub use error::AssemblyError;
#[cfg(feature = "files")]
pub use files::{FileBackend, FileOptions, Layout, ScopeFiles};
#[cfg(feature = "openai")]
pub use models::{EmbeddingOptions, embedder};
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub use models::{ModelOptions, Provider, model_client};
pub use offload::OffWorker;
#[cfg(feature = "postgres")]
pub use postgres::{PgBackend, connect};
pub use speaker::Speaker;

/// A scope's documents and what its prompts read of them (the agent's shared files too).
#[cfg(any(feature = "files", feature = "postgres"))]
type DocumentsAndPrompts = (
    std::sync::Arc<dyn memory_store::MemoryDocuments>,
    std::sync::Arc<dyn prompt_inputs::PromptFiles>,
);

// The types a bot builder names most, at the root.
pub use memory_scope::IsolationMode;
pub use nanobot_turn::{AgentSettings, MemoryBackend, ScopeStores, TurnReport};
pub use session_store::Durability;

// The member crates, each under the name of its job, for everything else.
pub use context_builder as context;
pub use dream;
#[cfg(feature = "anthropic")]
pub use llm_anthropic as anthropic;
#[cfg(feature = "openai")]
pub use llm_openai as openai;
pub use llm_port as llm;
pub use memory_core as consolidation;
pub use memory_index as index;
pub use memory_scope as scope;
pub use memory_search as search;
pub use memory_store as store;
pub use nanobot_turn as turn;
pub use prompt_inputs;
pub use session_store as sessions;
#[cfg(feature = "postgres")]
pub use store_postgres as postgres_store;
