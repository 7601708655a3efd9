#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod client;
mod embeddings;
mod wire;

pub use client::{OpenAiClient, OpenAiConfig};
pub use embeddings::{EMBEDDING_BATCH, OpenAiEmbedder};

/// The readers of a server's bytes, callable without a server: the fuzz targets (`fuzz/`)
/// drive them. Not a stable API.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    use nanobot_llm_port::{LlmError, LlmResponse};

    /// Reads a whole (not streamed) answer body.
    pub fn parse_answer(body: &[u8]) -> Result<LlmResponse, LlmError> {
        crate::wire::parse_response(body)
    }

    /// Assembles a streamed answer from its events' `data`, in order, as the client does.
    pub fn assemble_stream<'a>(
        events: impl IntoIterator<Item = &'a str>,
    ) -> Result<LlmResponse, LlmError> {
        let mut answer = crate::wire::StreamAssembler::default();
        for data in events {
            if answer.push(data, None)? {
                break;
            }
        }
        answer.finish()
    }
}
