//! `[llm]`: the model a bot talks to. Its defaults depend on the provider
//! ([`LlmSettings::for_provider`]): a small local model gets a small window and no native
//! tools; a hosted one a large window.

use std::time::Duration;

use nanobot_llm_port::InvalidOption;

use super::http_url;

/// Which model service the settings name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(rename_all = "lowercase")
)]
#[non_exhaustive]
pub enum LlmProvider {
    /// Any OpenAI-compatible server (OpenAI, vLLM, llama.cpp, Ollama, OpenRouter, ...).
    #[cfg_attr(
        feature = "serde",
        serde(rename = "openai", alias = "openai-compatible")
    )]
    OpenAi,
    /// Anthropic's Messages API.
    Anthropic,
    /// The project's own small local model (`cargo xtask llm start`), OpenAI-compatible on
    /// 127.0.0.1:8088 (the default).
    #[default]
    Local,
}

impl LlmProvider {
    /// The name used in files.
    pub fn name(self) -> &'static str {
        match self {
            LlmProvider::OpenAi => "openai",
            LlmProvider::Anthropic => "anthropic",
            LlmProvider::Local => "local",
        }
    }
}

/// What a user sets about the model.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(default, deny_unknown_fields)
)]
#[non_exhaustive]
pub struct LlmSettings {
    /// The service.
    pub provider: LlmProvider,
    /// The model name sent with each request.
    pub model: String,
    /// The API root.
    pub base_url: String,
    /// The variable the API key is read from.
    pub api_key_env: String,
    /// Stream answers.
    pub stream: bool,
    /// The model's context window, in tokens.
    pub context_window: usize,
    /// Output tokens reserved per answer.
    pub max_output_tokens: usize,
    /// Seconds one model call may take.
    pub request_timeout_secs: u64,
    /// Sampling temperature (`None`: the server's default).
    pub temperature: Option<f32>,
    /// OpenAI's `frequency_penalty` on answers (`None`: the server's default).
    pub frequency_penalty: Option<f32>,
    /// OpenAI's `presence_penalty` on answers (`None`: the server's default).
    pub presence_penalty: Option<f32>,
    /// How many of the latest tokens the penalties look at, llama.cpp's `repeat_last_n`
    /// (`None`: its default, 64, about the question alone; 0: penalties off).
    pub repeat_last_n: Option<u32>,
    /// Whether the model makes native tool calls (else tools are described in the prompt).
    pub native_tools: bool,
}

impl Default for LlmSettings {
    fn default() -> Self {
        LlmSettings::for_provider(LlmProvider::Local)
    }
}

impl LlmSettings {
    /// The defaults of `provider`.
    pub fn for_provider(provider: LlmProvider) -> Self {
        let (model, base_url, api_key_env, context_window, max_output_tokens) = match provider {
            LlmProvider::Local => (
                "local",
                "http://127.0.0.1:8088/v1",
                "NANOBOT_API_KEY",
                4_096,
                512,
            ),
            LlmProvider::OpenAi => (
                "gpt-4o-mini",
                "https://api.openai.com/v1",
                "OPENAI_API_KEY",
                128_000,
                4_096,
            ),
            LlmProvider::Anthropic => (
                "claude-sonnet-4-5",
                "https://api.anthropic.com",
                "ANTHROPIC_API_KEY",
                200_000,
                4_096,
            ),
        };
        LlmSettings {
            provider,
            model: model.to_owned(),
            base_url: base_url.to_owned(),
            api_key_env: api_key_env.to_owned(),
            stream: true,
            context_window,
            max_output_tokens,
            request_timeout_secs: 300,
            temperature: None,
            frequency_penalty: None,
            presence_penalty: None,
            repeat_last_n: None,
            native_tools: provider != LlmProvider::Local,
        }
    }

    /// The same settings with another model at another address.
    pub fn model(mut self, base_url: impl Into<String>, model: impl Into<String>) -> Self {
        self.base_url = base_url.into();
        self.model = model.into();
        self
    }

    /// The same settings with the model's window and answer size.
    pub fn window(mut self, context_window: usize, max_output_tokens: usize) -> Self {
        self.context_window = context_window;
        self.max_output_tokens = max_output_tokens;
        self
    }

    /// Refuses values no model call could use.
    pub fn check(&self) -> Result<(), InvalidOption> {
        http_url("base_url", &self.base_url)?;
        InvalidOption::at_least("context_window", self.context_window, 512)?;
        InvalidOption::at_least("max_output_tokens", self.max_output_tokens, 16)?;
        if self.max_output_tokens + 1_024 >= self.context_window {
            return Err(InvalidOption::new(
                "max_output_tokens",
                format!(
                    "{} leaves no room for the prompt in a {}-token window (1,024 are kept as a margin)",
                    self.max_output_tokens, self.context_window
                ),
            ));
        }
        InvalidOption::at_least("request_timeout_secs", self.request_timeout_secs, 1)?;
        if let Some(t) = self.temperature
            && !(0.0..=2.0).contains(&t)
        {
            return Err(InvalidOption::new(
                "temperature",
                format!("{t} is outside 0 to 2"),
            ));
        }
        self.check_repetition()
    }

    /// Refuses penalties out of their range, or sent to a provider that has none.
    fn check_repetition(&self) -> Result<(), InvalidOption> {
        if self.provider == LlmProvider::Anthropic && self.repeat_last_n.is_some() {
            return Err(InvalidOption::new(
                "repeat_last_n",
                "Anthropic's API has no such parameter; leave it unset",
            ));
        }
        let penalties = [
            ("frequency_penalty", self.frequency_penalty),
            ("presence_penalty", self.presence_penalty),
        ];
        for (key, value) in penalties {
            let Some(value) = value else { continue };
            if self.provider == LlmProvider::Anthropic {
                return Err(InvalidOption::new(
                    key,
                    "Anthropic's API has no such parameter; leave it unset",
                ));
            }
            if !(-2.0..=2.0).contains(&value) {
                return Err(InvalidOption::new(
                    key,
                    format!("{value} is outside -2 to 2"),
                ));
            }
        }
        Ok(())
    }

    /// The penalties answers are sent with.
    pub fn repetition(&self) -> nanobot_llm_port::RepetitionControls {
        let mut controls = nanobot_llm_port::RepetitionControls::none();
        controls.frequency_penalty = self.frequency_penalty;
        controls.presence_penalty = self.presence_penalty;
        controls.repeat_last_n = self.repeat_last_n;
        controls
    }

    /// How long one call may take.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_secs(self.request_timeout_secs)
    }

    /// The model stack's options, with `api_key`.
    #[cfg(any(feature = "openai", feature = "anthropic"))]
    pub fn model_options(
        &self,
        api_key: Option<nanobot_llm_http::ApiKey>,
    ) -> Result<crate::ModelOptions, crate::AssemblyError> {
        let options = match self.provider {
            #[cfg(feature = "openai")]
            LlmProvider::OpenAi | LlmProvider::Local => {
                crate::ModelOptions::openai(&self.base_url, &self.model)
                    .native_tools(self.native_tools)
            }
            #[cfg(feature = "anthropic")]
            LlmProvider::Anthropic => {
                crate::ModelOptions::anthropic(&self.model).base_url(self.base_url.clone())
            }
            #[allow(unreachable_patterns)]
            other => {
                return Err(crate::AssemblyError::Incomplete {
                    what: format!(
                        "llm.provider {} needs the crate feature that speaks its API",
                        other.name()
                    ),
                });
            }
        };
        Ok(options
            .api_key(api_key)
            .stream(self.stream)
            .window(self.context_window, self.max_output_tokens)
            .request_timeout(self.request_timeout()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn penalties_are_checked_and_reach_the_answers_settings() {
        let mut local = LlmSettings::for_provider(LlmProvider::Local);
        local.frequency_penalty = Some(0.3);
        local.repeat_last_n = Some(2_560);
        assert_eq!(local.check(), Ok(()));
        let controls = local.repetition();
        assert_eq!(controls.frequency_penalty, Some(0.3));
        assert_eq!(controls.repeat_last_n, Some(2_560));
        assert_eq!(controls.presence_penalty, None);

        local.presence_penalty = Some(2.5);
        let wrong = local.check().err().map(|e| e.to_string());
        assert_eq!(
            wrong.as_deref(),
            Some("presence_penalty: 2.5 is outside -2 to 2")
        );

        let mut anthropic = LlmSettings::for_provider(LlmProvider::Anthropic);
        anthropic.frequency_penalty = Some(0.3);
        let refused = anthropic.check().err().map(|e| e.key);
        assert_eq!(refused.as_deref(), Some("frequency_penalty"));
    }
}
