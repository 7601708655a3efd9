//! `[memory]` and `[search]`: how memory is kept, split and searched.

use std::time::Duration;

use nanobot_llm_port::InvalidOption;
use nanobot_memory_scope::{IsolationMode, UserKey};

use super::http_url;

/// The longest vector an embedding model may be configured with (the largest models
/// today give 4,096 numbers).
pub const MAX_EMBEDDING_DIMENSIONS: usize = 16_384;

/// What a user sets about archiving and isolation.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(default, deny_unknown_fields)
)]
#[non_exhaustive]
pub struct MemorySettings {
    /// Consolidation archives down to this share of the budget (0.1 to 0.95; default 0.5).
    pub consolidation_ratio: f64,
    /// Minutes of silence before a session is compacted (0: never; default 15).
    pub idle_ttl_minutes: u64,
    /// Archives are asked with a JSON schema first (small models), not free text.
    pub archive_with_schema: bool,
    /// Whose memory a turn uses (default: one for the agent).
    pub isolation: IsolationMode,
    /// The bot's own identities (`platform:id`): a message from one gets no memory.
    pub bot_ids: Vec<String>,
}

impl Default for MemorySettings {
    fn default() -> Self {
        MemorySettings {
            consolidation_ratio: 0.5,
            idle_ttl_minutes: 15,
            archive_with_schema: false,
            isolation: IsolationMode::Workspace,
            bot_ids: Vec::new(),
        }
    }
}

impl MemorySettings {
    /// The same settings with `isolation`.
    pub fn isolation(mut self, isolation: IsolationMode) -> Self {
        self.isolation = isolation;
        self
    }

    /// The same settings with archives asked with a JSON schema first (or not).
    pub fn archive_with_schema(mut self, yes: bool) -> Self {
        self.archive_with_schema = yes;
        self
    }

    /// Refuses a ratio outside 0.1 to 0.95 and an identity that is not `platform:id`.
    pub fn check(&self) -> Result<(), InvalidOption> {
        let ratio = self.consolidation_ratio;
        if !(0.1..=0.95).contains(&ratio) {
            return Err(InvalidOption::new(
                "consolidation_ratio",
                format!("{ratio} is outside 0.1 to 0.95"),
            ));
        }
        self.bot_keys().map(|_| ())
    }

    /// The bot's identities, parsed.
    pub fn bot_keys(&self) -> Result<Vec<UserKey>, InvalidOption> {
        self.bot_ids
            .iter()
            .map(|id| UserKey::parse(id).map_err(|e| InvalidOption::new("bot_ids", e.to_string())))
            .collect()
    }

    /// How long a session may stay silent before it is compacted (`None`: never).
    pub fn idle_ttl(&self) -> Option<Duration> {
        (self.idle_ttl_minutes > 0)
            .then(|| Duration::from_secs(self.idle_ttl_minutes.saturating_mul(60)))
    }
}

/// What a user sets about memory search: the embedding model behind its vector lane.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(default, deny_unknown_fields)
)]
#[non_exhaustive]
pub struct SearchSettings {
    /// The OpenAI-compatible API root of the embedding model (`None`: words only).
    pub embeddings_url: Option<String>,
    /// The folder of an embedding model run in this process instead of a server
    /// (`config.json`, `vocab.txt`, `model.safetensors`; all-MiniLM-L6-v2 and other BERT
    /// sentence-embedding models).
    pub embeddings_model_dir: Option<String>,
    /// The embedding model's name.
    pub embeddings_model: Option<String>,
    /// The length of its vectors.
    pub embeddings_dimensions: Option<usize>,
    /// The variable its key is read from (`None`: no key is sent).
    pub embeddings_api_key_env: Option<String>,
    /// Chunks a search embeds before it searches (default 64).
    pub embed_per_search: usize,
}

impl Default for SearchSettings {
    fn default() -> Self {
        SearchSettings {
            embeddings_url: None,
            embeddings_model_dir: None,
            embeddings_model: None,
            embeddings_dimensions: None,
            embeddings_api_key_env: None,
            embed_per_search: nanobot_turn::DEFAULT_EMBED_PER_SEARCH,
        }
    }
}

impl SearchSettings {
    /// The same settings with an embedding model: `model` at `url`, vectors of `dimensions`.
    pub fn embeddings(mut self, url: &str, model: &str, dimensions: usize) -> Self {
        self.embeddings_url = Some(url.to_owned());
        self.embeddings_model = Some(model.to_owned());
        self.embeddings_dimensions = Some(dimensions);
        self
    }

    /// Normalises (trimmed, no trailing `/`, empty is none) and refuses an embedding model
    /// named by halves: URL, model and dimensions come together or not at all.
    pub fn check(&mut self) -> Result<(), InvalidOption> {
        let trimmed = |v: Option<String>| v.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        self.embeddings_url =
            trimmed(self.embeddings_url.take()).map(|u| u.trim_end_matches('/').to_owned());
        self.embeddings_model = trimmed(self.embeddings_model.take());
        self.embeddings_model_dir = trimmed(self.embeddings_model_dir.take());
        self.embeddings_api_key_env = trimmed(self.embeddings_api_key_env.take());
        if let Some(dimensions) = self.embeddings_dimensions {
            InvalidOption::at_least("embeddings_dimensions", dimensions, 1)?;
            if dimensions > MAX_EMBEDDING_DIMENSIONS {
                return Err(InvalidOption::new(
                    "embeddings_dimensions",
                    format!("{dimensions} is above the maximum {MAX_EMBEDDING_DIMENSIONS}"),
                ));
            }
        }
        if self.embeddings_model_dir.is_some() {
            return self.check_local_model();
        }
        match (
            &self.embeddings_url,
            &self.embeddings_model,
            self.embeddings_dimensions,
        ) {
            (None, None, None) => Ok(()),
            (None, _, _) => Err(InvalidOption::new(
                "embeddings_url",
                "an embedding model is named but not where it is served: set the URL of its OpenAI-compatible API too (NANOBOT_EMBEDDINGS_URL), e.g. http://127.0.0.1:8090/v1",
            )),
            (Some(url), _, _) => {
                http_url("embeddings_url", url)?;
                self.check_model_named()
            }
        }
    }

    /// A model run in this process: named (its vectors are recorded under the name), and
    /// not also served (one embedder).
    fn check_local_model(&self) -> Result<(), InvalidOption> {
        if self.embeddings_url.is_some() {
            return Err(InvalidOption::new(
                "embeddings_model_dir",
                "both a model folder and an embeddings URL are set: keep one (the folder runs the model in this process, the URL asks a server)",
            ));
        }
        if self.embeddings_model.is_none() {
            return Err(InvalidOption::new(
                "embeddings_model",
                "an embeddings model folder is set: name the model too (NANOBOT_EMBEDDINGS_MODEL), e.g. all-MiniLM-L6-v2, the name its vectors are kept under",
            ));
        }
        Ok(())
    }

    fn check_model_named(&self) -> Result<(), InvalidOption> {
        if self.embeddings_model.is_none() {
            return Err(InvalidOption::new(
                "embeddings_model",
                "an embeddings URL is set: name the model too (NANOBOT_EMBEDDINGS_MODEL), e.g. all-MiniLM-L6-v2",
            ));
        }
        if self.embeddings_dimensions.is_none() {
            return Err(InvalidOption::new(
                "embeddings_dimensions",
                "an embeddings URL is set: give the model's vector length too (NANOBOT_EMBEDDINGS_DIMENSIONS), e.g. 384 for all-MiniLM-L6-v2",
            ));
        }
        Ok(())
    }

    /// The `[search]` table as `config show` prints it; `key` says whether the embeddings
    /// key is set (never the key itself).
    pub fn describe(&self, key: &str) -> String {
        let mut out = String::from("[search]\n");
        let embedder = match (&self.embeddings_model_dir, &self.embeddings_url) {
            (Some(dir), _) => format!("embeddings_model_dir = {dir:?}\n"),
            (None, Some(url)) => format!(
                "embeddings_url = {url:?}\nembeddings_api_key_env = {:?}  # key {key}\n",
                self.embeddings_api_key_env.as_deref().unwrap_or("")
            ),
            (None, None) => String::from("# embeddings_url: none (words only)\n"),
        };
        out.push_str(&embedder);
        if let Some(model) = &self.embeddings_model {
            out.push_str(&format!("embeddings_model = {model:?}\n"));
        }
        if let Some(dimensions) = self.embeddings_dimensions {
            out.push_str(&format!("embeddings_dimensions = {dimensions}\n"));
        }
        out.push_str(&format!("embed_per_search = {}\n\n", self.embed_per_search));
        out
    }

    /// The embedding model's options, with `api_key`, when one is configured.
    #[cfg(feature = "embeddings")]
    pub fn embedding_options(
        &self,
        api_key: Option<nanobot_llm_http::ApiKey>,
        request_timeout: Duration,
    ) -> Option<crate::EmbeddingOptions> {
        if let (Some(dir), Some(model)) = (&self.embeddings_model_dir, &self.embeddings_model) {
            let dimensions = self.embeddings_dimensions.unwrap_or(0);
            return Some(crate::EmbeddingOptions::local(dir, model, dimensions));
        }
        let (Some(url), Some(model), Some(dimensions)) = (
            &self.embeddings_url,
            &self.embeddings_model,
            self.embeddings_dimensions,
        ) else {
            return None;
        };
        Some(
            crate::EmbeddingOptions::new(url, model, dimensions)
                .api_key(api_key)
                .request_timeout(request_timeout),
        )
    }
}
