//! Text as the index keeps it: lexemes prefixed by the scope, tsvector and tsquery text.

use super::*;

impl PgIndex {
    /// The lexeme of `token` in this scope.
    pub(super) fn lexeme(&self, token: &str) -> String {
        format!("{}:{token}", self.scope_id)
    }

    /// The token of one of this scope's lexemes.
    pub(super) fn token<'a>(&self, lexeme: &'a str) -> &'a str {
        lexeme.split_once(':').map_or(lexeme, |(_, token)| token)
    }

    /// The `tsvector` literal of `text` and its distinct tokens.
    pub(super) fn tsvector(&self, text: &str) -> (String, Vec<String>) {
        let mut positions: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (at, token) in nanobot_memory_index::tokens(text).into_iter().enumerate() {
            let list = positions.entry(token).or_default();
            let position = (at + 1).min(MAX_POSITION);
            if list.len() < MAX_POSITIONS_PER_TERM && list.last() != Some(&position) {
                list.push(position);
            }
        }
        let mut literal = String::new();
        let mut tokens = Vec::with_capacity(positions.len());
        for (token, at) in positions {
            if literal.len() > MAX_TSVECTOR_BYTES {
                break;
            }
            if !literal.is_empty() {
                literal.push(' ');
            }
            literal.push_str(&quoted(&self.lexeme(&token)));
            literal.push(':');
            let list: Vec<String> = at.iter().map(usize::to_string).collect();
            literal.push_str(&list.join(","));
            tokens.push(token);
        }
        (literal, tokens)
    }

    /// The `tsquery` literal of one query term.
    pub(super) fn tsquery(&self, term: &QueryTerm) -> String {
        let lexeme = quoted(&self.lexeme(&term.text));
        if term.prefix {
            format!("{lexeme}:*")
        } else {
            lexeme
        }
    }
}

/// `text` as a quoted lexeme of a `tsvector` or `tsquery` literal.
pub(super) fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "''"))
}

/// The columns of the chunks one `replace` inserts.
#[derive(Default)]
pub(super) struct NewChunks {
    pub(super) groups: Vec<String>,
    pub(super) parts: Vec<i32>,
    pub(super) sources: Vec<String>,
    pub(super) kinds: Vec<String>,
    pub(super) at: Vec<Option<NaiveDateTime>>,
    pub(super) bodies: Vec<String>,
    pub(super) terms: Vec<String>,
}

impl NewChunks {
    pub(super) fn push(&mut self, chunk: &Chunk, terms: String) {
        self.groups.push(chunk.group.clone());
        self.parts
            .push(i32::try_from(chunk.part).unwrap_or(i32::MAX));
        self.sources.push(chunk.source.clone());
        self.kinds.push(chunk.kind.name().to_owned());
        self.at.push(chunk.at);
        // PostgreSQL text cannot hold NUL.
        self.bodies.push(chunk.text.replace('\0', "\u{fffd}"));
        self.terms.push(terms);
    }

    pub(super) fn len(&self) -> usize {
        self.groups.len()
    }
}
