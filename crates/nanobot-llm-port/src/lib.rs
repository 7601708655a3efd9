#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod client;
mod decorate;
mod embed;
mod error;
mod message;
mod metered;
mod options;
mod request;
#[cfg(feature = "test-util")]
pub mod testing;
pub mod text;
mod time;
pub mod tokens;

pub use client::{Capabilities, LlmClient, TextSink};
pub use decorate::{LlmClientExt, Retry, RetryPolicy, Timeout};
pub use embed::{Embedder, EmbeddingModel};
pub use error::LlmError;
pub use message::{
    AssistantMessage, Content, ContentPart, Extra, FunctionCall, ImageUrl, Message, Role,
    SystemMessage, ToolCall, ToolMessage, UserMessage,
};
pub use metered::{MODEL_CALL_SECONDS, MODEL_CALLS, MODEL_TOKENS, Metered};
pub use options::InvalidOption;
pub use request::{
    FinishReason, FunctionDefinition, JsonSchemaFormat, LlmRequest, LlmResponse,
    RepetitionControls, ResponseFormat, ToolChoice, ToolDefinition, Usage,
};
#[cfg(feature = "tokio")]
pub use time::TokioClock;
pub use time::{BoxFuture, Clock, SystemClock};
#[cfg(feature = "cl100k")]
pub use tokens::Cl100kBase;
pub use tokens::{CountingEstimator, PromptEstimator, TokenCounter, Utf8Bytes};
