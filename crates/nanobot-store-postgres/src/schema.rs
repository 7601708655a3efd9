//! The Postgres schema every table of a deployment lives in: a validated identifier, quoted
//! into every statement, and the namespace of the advisory-lock keys (advisory locks are per
//! database, shared by every schema in it).

use sha2::{Digest, Sha256};

use crate::error::StoreError;

/// A validated schema name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema {
    name: String,
    quoted: String,
}

impl Schema {
    /// `name` if it is 1 to 48 ASCII letters, digits or `_`, not starting with a digit.
    pub fn new(name: &str) -> Result<Schema, StoreError> {
        let ok = !name.is_empty()
            && name.len() <= 48
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !name.as_bytes()[0].is_ascii_digit();
        if !ok {
            return Err(StoreError::InvalidSchema {
                name: name.chars().take(80).collect(),
            });
        }
        Ok(Schema {
            name: name.to_owned(),
            quoted: format!("\"{name}\""),
        })
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name as SQL writes it.
    pub fn quoted(&self) -> &str {
        &self.quoted
    }

    /// The advisory-lock key of `job` in this schema.
    pub fn lock_key(&self, job: &str) -> i64 {
        let digest = Sha256::digest(format!("nanobot-rs:{}:{job}", self.name).as_bytes());
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&digest[..8]);
        i64::from_be_bytes(bytes)
    }
}
