//! A check of curated memory as it is now: a fact said twice (one line holding every word
//! of another, the repeat guard's rule, across `SOUL.md`, `USER.md` and `memory/MEMORY.md`),
//! and lines Dream wrote without a known source. The demo runs it; an operator can too.

use super::*;
use crate::lines::{is_fact, repeats};

/// What [`Dream::audit`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryAudit {
    /// Fact lines Dream wrote, in the three documents.
    pub curated_lines: usize,
    /// Pairs of lines, one of them Dream's, where one says nothing the other does not:
    /// (file, line) each.
    pub repeated: Vec<((String, String), (String, String))>,
    /// Lines Dream wrote whose journal entries are not known: (file, line).
    pub unsourced: Vec<(String, String)>,
}

impl MemoryAudit {
    /// Whether memory holds no fact twice and every curated line has its sources.
    pub fn is_clean(&self) -> bool {
        self.repeated.is_empty() && self.unsourced.is_empty()
    }
}

impl Dream {
    /// Audits the documents as they are now (one replay of the versions).
    pub async fn audit(&self) -> Result<MemoryAudit, DreamError> {
        let blamed = self.blame_all().await?;
        let mut audit = MemoryAudit::default();
        // (file, line, written by Dream)
        let mut facts: Vec<(String, String, bool)> = Vec::new();
        for document in nanobot_memory_store::Document::ALL {
            let path = document.path();
            for line in blamed.get(path).into_iter().flatten() {
                if !is_fact(&line.text) {
                    continue;
                }
                let curated = line.origin.as_ref().filter(|o| o.by_dream);
                if let Some(origin) = curated {
                    audit.curated_lines += 1;
                    if origin.sources.is_empty() {
                        audit.unsourced.push((path.to_owned(), line.text.clone()));
                    }
                }
                facts.push((path.to_owned(), line.text.clone(), curated.is_some()));
            }
        }
        // Hand-written lines repeating each other are their writer's business; a pair counts
        // when Dream wrote one of them.
        for (i, (path, text, curated)) in facts.iter().enumerate() {
            for (other_path, other, other_curated) in &facts[i + 1..] {
                if (*curated || *other_curated) && (repeats(other, text) || repeats(text, other)) {
                    audit.repeated.push((
                        (path.clone(), text.clone()),
                        (other_path.clone(), other.clone()),
                    ));
                }
            }
        }
        Ok(audit)
    }
}
