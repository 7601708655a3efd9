//! `nanobot config show`: the effective configuration as TOML, every secret redacted.

use std::fmt::Write;

use super::{Config, redact_url};

/// What a secret's comment says: whether it is set, never what it is.
fn set_or_not(set: bool) -> &'static str {
    if set { "set (***)" } else { "not set" }
}

impl Config {
    /// The effective configuration as TOML, the keys redacted.
    pub fn show(&self) -> String {
        let mut out = String::new();
        let from = self
            .source
            .as_ref()
            .map_or("defaults and the environment".to_owned(), |p| {
                p.display().to_string()
            });
        let _ = writeln!(
            out,
            "# from {from}\nworkspace = {:?}\n",
            self.workspace.display().to_string()
        );
        self.show_storage(&mut out);
        self.show_llm(&mut out);
        self.show_memory(&mut out);
        self.show_search(&mut out);
        self.show_mcp(&mut out);
        self.show_serve(&mut out);
        out
    }

    fn show_storage(&self, out: &mut String) {
        let s = &self.storage;
        let url = s
            .database_url
            .as_deref()
            .map_or_else(String::new, redact_url);
        let durability = match s.durability {
            nanobot_memory::Durability::None => "none",
            nanobot_memory::Durability::Always => "always",
            _ => "turn-end",
        };
        let layout = match s.layout {
            nanobot_memory::Layout::Workspace => "workspace",
            nanobot_memory::Layout::Nanobot => "nanobot",
            _ => "auto",
        };
        let _ = writeln!(
            out,
            "[storage]\nbackend = {:?}\ndatabase_url = {url:?}\nschema = {:?}\ndurability = {durability:?}\nlayout = {layout:?}\nsessions_root = {:?}\nturn_wait_secs = {}\n",
            s.backend.name(),
            s.schema,
            s.sessions_root.display().to_string(),
            s.turn_wait_secs,
        );
    }

    fn show_llm(&self, out: &mut String) {
        let l = &self.llm;
        let _ = writeln!(
            out,
            "[llm]\nprovider = {:?}\nmodel = {:?}\nbase_url = {:?}\napi_key_env = {:?}  # key {}\nstream = {}\ncontext_window = {}\nmax_output_tokens = {}\nrequest_timeout_secs = {}\ntemperature = {}\nfrequency_penalty = {}\npresence_penalty = {}\nrepeat_last_n = {}\nnative_tools = {}\n",
            l.provider.name(),
            l.model,
            l.base_url,
            l.api_key_env,
            set_or_not(self.api_key.is_some()),
            l.stream,
            l.context_window,
            l.max_output_tokens,
            l.request_timeout_secs,
            server_default(l.temperature),
            server_default(l.frequency_penalty),
            server_default(l.presence_penalty),
            l.repeat_last_n
                .map_or("\"the server's\"".to_owned(), |n| n.to_string()),
            l.native_tools,
        );
    }

    fn show_memory(&self, out: &mut String) {
        let m = &self.memory;
        let d = &self.dream;
        let _ = writeln!(
            out,
            "[memory]\nconsolidation_ratio = {}\nidle_ttl_minutes = {}\narchive_with_schema = {}\nisolation = {:?}\nbot_ids = {:?}\n\n[dream]\nenabled = {}\ninterval_hours = {}\ncron = {:?}\nmax_steps = {}\nmax_tokens = {}\nbatch_entries = {}\nmode = {:?}\n",
            m.consolidation_ratio,
            m.idle_ttl_minutes,
            m.archive_with_schema,
            m.isolation.name(),
            m.bot_ids,
            d.enabled,
            d.interval_hours,
            d.cron.as_deref().unwrap_or(""),
            d.max_steps,
            d.max_tokens,
            d.batch_entries,
            d.mode.name(),
        );
    }

    fn show_search(&self, out: &mut String) {
        let key = set_or_not(self.embeddings_api_key.is_some());
        out.push_str(&self.search.describe(key));
    }

    fn show_mcp(&self, out: &mut String) {
        let m = &self.mcp;
        let _ = writeln!(
            out,
            "[mcp]\nhttp = {}\nallowed_hosts = {:?}\nallow_restore = {}\nallow_forget = {}\n",
            m.http, m.allowed_hosts, m.allow_restore, m.allow_forget,
        );
    }

    fn show_serve(&self, out: &mut String) {
        let s = &self.serve;
        let _ = writeln!(
            out,
            "[serve]\nlisten = {:?}\nmax_concurrent_turns = {}\nrequest_timeout_secs = {}\nbody_limit_bytes = {}\ncors_origins = {:?}\nmetrics = {}\nmetrics_key_env = {}\ninspector = {}",
            s.listen,
            s.max_concurrent_turns,
            s.request_timeout_secs,
            s.body_limit_bytes,
            s.cors_origins,
            s.metrics,
            s.metrics_key_env
                .as_deref()
                .map_or("none (loopback only)".to_owned(), |v| format!("{v:?}")),
            s.inspector,
        );
        for (key, secret) in s.keys.iter().zip(&self.serve_secrets) {
            let _ = write!(
                out,
                "\n[[serve.keys]]\nname = {:?}\nsecret_env = {:?}  # secret {}\ntenant = {:?}\nbinding = {:?}\n",
                key.name,
                key.secret_env,
                if secret.is_some() {
                    "set (***)"
                } else {
                    "not set"
                },
                key.tenant.as_deref().unwrap_or("default"),
                key.binding.as_deref().unwrap_or("per-key"),
            );
            for (name, value) in [
                ("user", &key.user),
                ("user_header", &key.user_header),
                ("chat_header", &key.chat_header),
            ] {
                if let Some(value) = value {
                    let _ = writeln!(out, "{name} = {value:?}");
                }
            }
            if key.operator {
                let _ = writeln!(out, "operator = true");
            }
        }
    }
}

/// A sampling value, or the server's default when unset.
fn server_default(value: Option<f32>) -> String {
    value.map_or("\"the server's\"".to_owned(), |v| v.to_string())
}
