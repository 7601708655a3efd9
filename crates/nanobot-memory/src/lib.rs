#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod background;
mod bot;
mod builder;
pub mod commands;
pub mod demo;
#[cfg(feature = "embeddings")]
mod embeddings;
mod error;
#[cfg(feature = "files")]
mod files;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod models;
mod offload;
pub mod operator;
#[cfg(feature = "postgres")]
mod postgres;
mod scopes;
pub mod settings;
mod speaker;
#[cfg(all(feature = "files", feature = "postgres"))]
pub mod transfer;

pub use bot::{Bot, Recall, Storage};
pub use builder::BotBuilder;
pub use commands::ScopeCommands;
#[cfg(feature = "embeddings")]
pub use embeddings::{EmbeddingOptions, embedder};
pub use error::AssemblyError;
#[cfg(feature = "files")]
pub use files::{FileBackend, FileOptions, Layout, ScopeFiles};
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub use models::{ModelOptions, Provider, model_client};
pub use offload::OffWorker;
pub use operator::{Erased, ScopeProposal};
#[cfg(feature = "postgres")]
pub use postgres::{PgBackend, connect};
pub use scopes::ScopeSummary;
pub use speaker::Speaker;

/// A scope's documents and what its prompts read of them (the agent's shared files too).
#[cfg(any(feature = "files", feature = "postgres"))]
type DocumentsAndPrompts = (
    std::sync::Arc<dyn nanobot_memory_store::MemoryDocuments>,
    std::sync::Arc<dyn nanobot_prompt_inputs::PromptFiles>,
);

// The types a bot builder names most, at the root.
pub use nanobot_memory_scope::IsolationMode;
pub use nanobot_session_store::Durability;
pub use nanobot_turn::{AgentSettings, MemoryBackend, ScopeStores, TurnReport};

// The member crates, each under the name of its job, for everything else.
pub use nanobot_context_builder as context;
pub use nanobot_dream as dream;
#[cfg(feature = "anthropic")]
pub use nanobot_llm_anthropic as anthropic;
#[cfg(feature = "openai")]
pub use nanobot_llm_openai as openai;
pub use nanobot_llm_port as llm;
pub use nanobot_memory_core as consolidation;
pub use nanobot_memory_index as index;
pub use nanobot_memory_scope as scope;
pub use nanobot_memory_search as search;
pub use nanobot_memory_store as store;
pub use nanobot_prompt_inputs as prompt_inputs;
pub use nanobot_session_store as sessions;
#[cfg(feature = "postgres")]
pub use nanobot_store_postgres as postgres_store;
pub use nanobot_turn as turn;
