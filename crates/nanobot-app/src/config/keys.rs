//! Every key a configuration file may hold, its environment variable and its kind: what
//! the file is checked against (an unknown key is named with the nearest known one) and how
//! a variable's text becomes a value. The sections' types, defaults and checks belong to
//! the crates; this table is only the file's and the environment's shape.

use serde_json::{Map, Value};

/// What a key's value is.
#[derive(Debug, Clone, Copy)]
pub(super) enum Kind {
    /// Any text.
    Text,
    /// A whole number, not negative.
    Whole,
    /// A number.
    Number,
    /// `true` or `false` (the environment also takes 1/0, yes/no, on/off).
    Flag,
    /// A list of texts (the environment: comma-separated).
    List,
    /// One of these names (case and surrounding spaces do not matter).
    Choice(&'static [&'static str]),
}

/// One key: where it is, its variable (empty: none), its default as documented, its kind.
pub(super) type Key = (&'static str, &'static str, &'static str, Kind);

const DURABILITY: Kind = Kind::Choice(&["none", "turn-end", "always"]);

/// Every key a file may hold, with its variable, its default as the README gives it, and its
/// kind (one line each: a table read across).
#[rustfmt::skip]
pub(super) const KEYS: [Key; 51] = [
    ("workspace", "NANOBOT_WORKSPACE", "~/.nanobot/workspace", Kind::Text),
    ("storage.backend", "NANOBOT_STORAGE", "files", Kind::Choice(&["files", "postgres"])),
    ("storage.database_url", "NANOBOT_DATABASE_URL", "(none; required for postgres)", Kind::Text),
    ("storage.schema", "NANOBOT_DATABASE_SCHEMA", "nanobot", Kind::Text),
    ("storage.durability", "NANOBOT_DURABILITY", "turn-end", DURABILITY),
    ("storage.layout", "NANOBOT_SESSIONS_LAYOUT", "auto", Kind::Choice(&["auto", "workspace", "nanobot"])),
    ("storage.sessions_root", "NANOBOT_SESSIONS_ROOT", "~/.nanobot/sessions", Kind::Text),
    ("storage.turn_wait_secs", "NANOBOT_TURN_WAIT_SECS", "60", Kind::Whole),
    ("llm.provider", "NANOBOT_PROVIDER", "local", Kind::Choice(&["openai", "openai-compatible", "anthropic", "local"])),
    ("llm.model", "NANOBOT_MODEL", "local (openai: gpt-4o-mini, anthropic: claude-sonnet-4-5)", Kind::Text),
    ("llm.base_url", "NANOBOT_BASE_URL", "the provider's (local: http://127.0.0.1:8088/v1)", Kind::Text),
    ("llm.api_key_env", "NANOBOT_API_KEY_ENV", "OPENAI_API_KEY / ANTHROPIC_API_KEY", Kind::Text),
    ("llm.stream", "NANOBOT_STREAM", "true", Kind::Flag),
    ("llm.context_window", "NANOBOT_CONTEXT_WINDOW", "4096 (local), 128000, 200000", Kind::Whole),
    ("llm.max_output_tokens", "NANOBOT_MAX_OUTPUT_TOKENS", "512 (local), 4096", Kind::Whole),
    ("llm.request_timeout_secs", "NANOBOT_REQUEST_TIMEOUT_SECS", "300", Kind::Whole),
    ("llm.temperature", "NANOBOT_TEMPERATURE", "the server's", Kind::Number),
    ("llm.frequency_penalty", "NANOBOT_FREQUENCY_PENALTY", "the server's", Kind::Number),
    ("llm.presence_penalty", "NANOBOT_PRESENCE_PENALTY", "the server's", Kind::Number),
    ("llm.repeat_last_n", "NANOBOT_REPEAT_LAST_N", "the server's (llama.cpp: 64)", Kind::Whole),
    ("llm.native_tools", "NANOBOT_NATIVE_TOOLS", "false (local), true", Kind::Flag),
    ("memory.consolidation_ratio", "NANOBOT_CONSOLIDATION_RATIO", "0.5", Kind::Number),
    ("memory.idle_ttl_minutes", "NANOBOT_IDLE_TTL_MINUTES", "15", Kind::Whole),
    ("memory.archive_with_schema", "NANOBOT_ARCHIVE_WITH_SCHEMA", "true (local), false", Kind::Flag),
    ("memory.isolation", "NANOBOT_ISOLATION", "workspace", Kind::Choice(&["workspace", "user", "chat"])),
    ("memory.bot_ids", "NANOBOT_BOT_IDS", "none", Kind::List),
    ("dream.enabled", "NANOBOT_DREAM_ENABLED", "true", Kind::Flag),
    ("dream.interval_hours", "NANOBOT_DREAM_INTERVAL_HOURS", "2", Kind::Whole),
    ("dream.cron", "NANOBOT_DREAM_CRON", "none", Kind::Text),
    ("dream.max_steps", "NANOBOT_DREAM_MAX_STEPS", "30", Kind::Whole),
    ("dream.max_tokens", "NANOBOT_DREAM_MAX_TOKENS", "400000", Kind::Whole),
    ("dream.batch_entries", "NANOBOT_DREAM_BATCH_ENTRIES", "20", Kind::Whole),
    ("dream.mode", "NANOBOT_DREAM_MODE", "auto", Kind::Choice(&["auto", "tools", "plan"])),
    ("search.embeddings_url", "NANOBOT_EMBEDDINGS_URL", "none (words only)", Kind::Text),
    ("search.embeddings_model_dir", "NANOBOT_EMBEDDINGS_MODEL_DIR", "none (a server, or words only)", Kind::Text),
    ("search.embeddings_model", "NANOBOT_EMBEDDINGS_MODEL", "none; required with a URL or folder", Kind::Text),
    ("search.embeddings_dimensions", "NANOBOT_EMBEDDINGS_DIMENSIONS", "none; required with a URL", Kind::Whole),
    ("search.embeddings_api_key_env", "NANOBOT_EMBEDDINGS_API_KEY_ENV", "none (no key sent)", Kind::Text),
    ("search.embed_per_search", "NANOBOT_EMBED_PER_SEARCH", "64", Kind::Whole),
    ("mcp.http", "NANOBOT_MCP_HTTP", "true", Kind::Flag),
    ("mcp.allowed_hosts", "NANOBOT_MCP_ALLOWED_HOSTS", "none (loopback only)", Kind::List),
    ("mcp.allow_restore", "NANOBOT_MCP_ALLOW_RESTORE", "false", Kind::Flag),
    ("mcp.allow_forget", "NANOBOT_MCP_ALLOW_FORGET", "false", Kind::Flag),
    ("serve.listen", "NANOBOT_SERVE_LISTEN", "127.0.0.1:8080", Kind::Text),
    ("serve.max_concurrent_turns", "NANOBOT_SERVE_MAX_TURNS", "16", Kind::Whole),
    ("serve.request_timeout_secs", "NANOBOT_SERVE_REQUEST_TIMEOUT_SECS", "120", Kind::Whole),
    ("serve.body_limit_bytes", "NANOBOT_SERVE_BODY_LIMIT_BYTES", "20971520", Kind::Whole),
    ("serve.cors_origins", "NANOBOT_SERVE_CORS_ORIGINS", "none (CORS off)", Kind::List),
    ("serve.metrics", "NANOBOT_SERVE_METRICS", "true", Kind::Flag),
    ("serve.inspector", "NANOBOT_SERVE_INSPECTOR", "true", Kind::Flag),
    ("serve.metrics_key_env", "NANOBOT_SERVE_METRICS_KEY_ENV", "none (loopback only)", Kind::Text),
];

/// The keys of each `[[serve.keys]]` table (no variables: secrets come from the variable
/// each key names).
pub(super) const SERVE_KEY_FIELDS: [(&str, Kind); 8] = [
    ("name", Kind::Text),
    ("secret_env", Kind::Text),
    ("tenant", Kind::Text),
    ("binding", Kind::Choice(&["per-key", "fixed", "trusted"])),
    ("user", Kind::Text),
    ("user_header", Kind::Text),
    ("chat_header", Kind::Text),
    ("operator", Kind::Flag),
];

/// What is wrong with a key: the key and why.
pub(super) type Fault = (String, String);

/// Sets every key whose variable `env` has, over the file's value.
pub(super) fn overlay_env(
    table: &mut Map<String, Value>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), Fault> {
    for (key, var, _, kind) in KEYS {
        let Some(text) = env(var) else { continue };
        let value = from_env(kind, &text)
            .map_err(|why| (key.to_owned(), format!("{text:?} (from {var}) {why}")))?;
        let (section, field) = key.split_once('.').unwrap_or(("", key));
        let target = if section.is_empty() {
            &mut *table
        } else {
            match table
                .entry(section)
                .or_insert_with(|| Value::Object(Map::new()))
            {
                Value::Object(map) => map,
                _ => return Err((section.to_owned(), "must be a table".to_owned())),
            }
        };
        target.insert(field.to_owned(), value);
    }
    Ok(())
}

fn from_env(kind: Kind, text: &str) -> Result<Value, &'static str> {
    let trimmed = text.trim();
    Ok(match kind {
        Kind::Text | Kind::Choice(_) => Value::String(text.to_owned()),
        Kind::Whole => Value::from(
            trimmed
                .parse::<i64>()
                .map_err(|_| "is not a whole number")?,
        ),
        Kind::Number => Value::from(trimmed.parse::<f64>().map_err(|_| "is not a number")?),
        Kind::Flag => match trimmed.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Value::Bool(true),
            "0" | "false" | "no" | "off" => Value::Bool(false),
            _ => return Err("is not true or false"),
        },
        Kind::List => Value::Array(
            text.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| Value::String(s.to_owned()))
                .collect(),
        ),
    })
}

/// Checks every key of `table` is known and of its kind; choices are normalised.
pub(super) fn check_table(table: &mut Map<String, Value>) -> Result<(), Fault> {
    for (name, value) in table.iter_mut() {
        match value {
            Value::Object(section) if KEYS.iter().any(|k| k.0.starts_with(&format!("{name}."))) => {
                for (field, value) in section.iter_mut() {
                    let key = format!("{name}.{field}");
                    if key == "serve.keys" {
                        check_serve_keys(value)?;
                    } else {
                        check_value(&key, kind_of(&key)?, value)?;
                    }
                }
            }
            _ => check_value(name, kind_of(name)?, value)?,
        }
    }
    Ok(())
}

fn check_serve_keys(value: &mut Value) -> Result<(), Fault> {
    let Value::Array(keys) = value else {
        return Err((
            "serve.keys".into(),
            "must be a list of [[serve.keys]] tables".into(),
        ));
    };
    for (n, key) in keys.iter_mut().enumerate() {
        let Value::Object(fields) = key else {
            return Err((format!("serve.keys[{n}]"), "must be a table".into()));
        };
        for (field, value) in fields.iter_mut() {
            let key = format!("serve.keys[{n}].{field}");
            let kind = SERVE_KEY_FIELDS
                .iter()
                .find(|f| f.0 == field)
                .map(|f| f.1)
                .ok_or_else(|| {
                    let names = SERVE_KEY_FIELDS.map(|f| f.0);
                    (key.clone(), unknown(field, names.iter().copied()))
                })?;
            check_value(&key, kind, value)?;
        }
    }
    Ok(())
}

fn kind_of(key: &str) -> Result<Kind, Fault> {
    if let Some(found) = KEYS.iter().find(|k| k.0 == key) {
        return Ok(found.3);
    }
    let mut names: Vec<&str> = KEYS.iter().map(|k| k.0).collect();
    names.push("serve.keys");
    Err((key.to_owned(), unknown(key, names.into_iter())))
}

/// "is not a known key", with the nearest known one when it is near enough to be a typo.
fn unknown<'a>(key: &str, known: impl Iterator<Item = &'a str>) -> String {
    let nearest = known.map(|k| (edit_distance(key, k), k)).min();
    match nearest {
        Some((distance, name))
            if distance <= key.len().max(4) / 2
                || name.starts_with(key)
                || key.starts_with(name) =>
        {
            format!("is not a known key; did you mean {name}?")
        }
        Some((_, name)) => {
            format!("is not a known key (the nearest is {name}; every key is in the README)")
        }
        None => "is not a known key".to_owned(),
    }
}

fn check_value(key: &str, kind: Kind, value: &mut Value) -> Result<(), Fault> {
    let fault = |why: String| Err((key.to_owned(), why));
    match (kind, &*value) {
        (Kind::Text, Value::String(_)) | (Kind::Flag, Value::Bool(_)) => Ok(()),
        (Kind::Number, Value::Number(_)) => Ok(()),
        (Kind::Whole, Value::Number(n)) if n.is_u64() => Ok(()),
        (Kind::Whole, Value::Number(n)) if n.is_i64() => {
            fault(format!("{n} is below the minimum 0"))
        }
        (Kind::List, Value::Array(items)) if items.iter().all(Value::is_string) => Ok(()),
        (Kind::Choice(names), Value::String(text)) => {
            let normal = text.trim().to_ascii_lowercase();
            if names.contains(&normal.as_str()) {
                *value = Value::String(normal);
                Ok(())
            } else {
                fault(format!("{text:?} is not one of {}", names.join(", ")))
            }
        }
        (kind, other) => fault(format!("{other} is not {}", kind.describe())),
    }
}

impl Kind {
    fn describe(self) -> &'static str {
        match self {
            Kind::Text | Kind::Choice(_) => "text",
            Kind::Whole => "a whole number",
            Kind::Number => "a number",
            Kind::Flag => "true or false",
            Kind::List => "a list of texts",
        }
    }
}

/// Levenshtein distance, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::KEYS;

    /// The README's table names every key with its variable, so a user can find each.
    #[test]
    fn the_readme_names_every_key_and_its_variable() {
        let readme = include_str!("../../README.md");
        for (key, var, _, _) in KEYS {
            let row = format!("| `{key}` | `{var}` |");
            assert!(readme.contains(&row), "the README has no row {row}");
        }
    }

    #[test]
    fn a_misspelt_key_names_the_nearest_and_a_stranger_only_the_closest() {
        let near = super::unknown("llm.modle", KEYS.iter().map(|k| k.0));
        assert!(near.ends_with("did you mean llm.model?"), "{near}");
        let far = super::unknown("colour", KEYS.iter().map(|k| k.0));
        assert!(far.contains("the nearest is"), "{far}");
    }
}
