//! A call's arguments read by name: each reader says which argument was wrong and why, so
//! the host's model can correct the call.

use rmcp::model::JsonObject;
use serde_json::Value;

/// An argument that is missing, of the wrong type or out of range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadArgument {
    /// Its name.
    pub(crate) name: String,
    /// What is wrong with it.
    pub(crate) reason: String,
}

impl BadArgument {
    pub(crate) fn new(name: &str, reason: impl Into<String>) -> Self {
        BadArgument {
            name: name.to_owned(),
            reason: reason.into(),
        }
    }
}

/// The arguments of one call.
pub(crate) struct Args<'a> {
    map: Option<&'a JsonObject>,
}

impl<'a> Args<'a> {
    /// The arguments, refusing any name not in `known` (a misspelt argument would
    /// otherwise be ignored in silence).
    pub(crate) fn new(map: Option<&'a JsonObject>, known: &[&str]) -> Result<Self, BadArgument> {
        if let Some(unknown) = map
            .into_iter()
            .flatten()
            .map(|(k, _)| k)
            .find(|k| !known.contains(&k.as_str()))
        {
            return Err(BadArgument::new(
                unknown,
                format!("no such argument; this tool takes {}", list(known)),
            ));
        }
        Ok(Args { map })
    }

    fn get(&self, name: &str) -> Option<&'a Value> {
        self.map.and_then(|m| m.get(name)).filter(|v| !v.is_null())
    }

    /// A string argument that must be there and not blank.
    pub(crate) fn text(&self, name: &str) -> Result<&'a str, BadArgument> {
        match self.get(name) {
            None => Err(BadArgument::new(name, "is required")),
            Some(Value::String(text)) if !text.trim().is_empty() => Ok(text),
            Some(Value::String(_)) => Err(BadArgument::new(name, "is empty")),
            Some(other) => Err(BadArgument::new(
                name,
                format!("must be a string, not {}", kind(other)),
            )),
        }
    }

    /// A whole number within `min..=max`, `default` when left out.
    pub(crate) fn count(
        &self,
        name: &str,
        min: u64,
        max: u64,
        default: u64,
    ) -> Result<u64, BadArgument> {
        let Some(value) = self.get(name) else {
            return Ok(default);
        };
        let number = value
            .as_u64()
            .or_else(|| {
                value
                    .as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                    .map(|f| f as u64)
            })
            .ok_or_else(|| {
                BadArgument::new(name, format!("must be a whole number, not {value}"))
            })?;
        if (min..=max).contains(&number) {
            Ok(number)
        } else {
            Err(BadArgument::new(
                name,
                format!("must be from {min} to {max}, not {number}"),
            ))
        }
    }
}

/// The names as a reader lists them: `a`, `b` or `c`.
pub(crate) fn list(names: &[&str]) -> String {
    match names {
        [] => "no arguments".to_owned(),
        [one] => format!("`{one}`"),
        [rest @ .., last] => format!(
            "{} or `{last}`",
            rest.iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(value: Value) -> JsonObject {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn each_bad_argument_is_named_with_the_reason() {
        let given = map(json!({"limit": 0, "key": 3, "note": "  "}));
        let args =
            Args::new(Some(&given), &["limit", "key", "note"]).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(args.count("limit", 1, 50, 20).unwrap_err().name, "limit");
        assert!(args.text("key").unwrap_err().reason.contains("a number"));
        assert_eq!(args.text("note").unwrap_err().reason, "is empty");
        assert_eq!(args.count("after", 0, 9, 7), Ok(7));
        let unknown = map(json!({"scope": "user:bob"}));
        let refused = Args::new(Some(&unknown), &["query"]).err().map(|e| e.name);
        assert_eq!(refused.as_deref(), Some("scope"));
    }
}
