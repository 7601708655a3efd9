#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod chunk;
#[cfg(feature = "conformance")]
pub mod conformance;
mod lazy;
mod lexical;
mod memory;
mod normalize;
mod port;
mod snippet;
mod vector_cache;
mod vectors;

pub use chunk::{
    Chunk, Chunking, SourceKind, group_of, history_source, journal_chunk, memory_chunks,
    parse_timestamp, session_chunk, session_prefix, session_source,
};
pub use lazy::{IndexOpener, LazyIndex};
pub use lexical::{CANDIDATES, FORM_WEIGHT, LexicalPlan, LexicalQuery, VocabularyLookup};
pub use memory::InMemoryIndex;
pub use normalize::{
    MAX_TOKEN_CHARS, QueryTerm, for_each_token, is_cjk, normalize, query_terms, tokens,
};
pub use port::{
    COMMON_QUERY_WINDOW, COMMON_TERM_SHARE, DEFAULT_LIMIT, GroupUpdate, Hit, IndexError,
    IndexStats, MAX_LIMIT, MAX_SNIPPET_CHARS, MemoryIndex, SearchRequest, check_updates,
    terms_to_search,
};
pub use snippet::snippet;
pub use vector_cache::{CacheRefresh, Nearest, VectorCache, VectorRow, VectorStamp};
pub use vectors::{
    ChunkVector, HashingEmbedder, RRF_K, SearchIndex, VectorIndex, best_hits, check_vectors,
    cosine, decode_vector, encode_vector, other_model, reciprocal_rank_fusion,
};
