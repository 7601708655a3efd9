//! The one error every crate's options report: which key is wrong and why. A crate names
//! keys relative to its own section; whoever reads a file puts the section in front
//! ([`InvalidOption::within`]) and names the file.

use std::fmt;

/// An option with a value its crate cannot use.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InvalidOption {
    /// The key, relative to the options it belongs to (`context_window`, `keys[0].name`).
    pub key: String,
    /// What is wrong with its value, in words a user can act on.
    pub reason: String,
}

impl InvalidOption {
    /// `key` is wrong because of `reason`.
    pub fn new(key: impl Into<String>, reason: impl Into<String>) -> Self {
        InvalidOption {
            key: key.into(),
            reason: reason.into(),
        }
    }

    /// `Ok` when `value` is at least `min`, else the error that says so.
    pub fn at_least<T: PartialOrd + fmt::Display>(
        key: &str,
        value: T,
        min: T,
    ) -> Result<(), InvalidOption> {
        if value < min {
            Err(InvalidOption::new(
                key,
                format!("{value} is below the minimum {min}"),
            ))
        } else {
            Ok(())
        }
    }

    /// The same error with its key inside `section` (`llm` + `model` = `llm.model`).
    pub fn within(mut self, section: &str) -> Self {
        if !section.is_empty() {
            self.key = format!("{section}.{}", self.key);
        }
        self
    }
}

impl fmt::Display for InvalidOption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.reason)
    }
}

impl std::error::Error for InvalidOption {}
