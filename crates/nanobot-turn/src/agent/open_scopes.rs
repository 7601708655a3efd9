//! The scopes an agent keeps open, least recently used closed first.

use super::*;

/// The scopes open in this process, each with when it was last used.
#[derive(Default)]
pub(super) struct OpenScopes {
    pub(super) entries: HashMap<ScopeKey, (Arc<ScopeMemory>, u64)>,
    pub(super) uses: u64,
}

impl OpenScopes {
    pub(super) fn get(&mut self, scope: &ScopeKey) -> Option<Arc<ScopeMemory>> {
        self.uses += 1;
        let (memory, used) = self.entries.get_mut(scope)?;
        *used = self.uses;
        Some(memory.clone())
    }

    pub(super) fn insert(&mut self, scope: ScopeKey, memory: Arc<ScopeMemory>) {
        self.uses += 1;
        self.entries.insert(scope, (memory, self.uses));
    }

    pub(super) fn all(&self) -> Vec<Arc<ScopeMemory>> {
        self.entries.values().map(|(m, _)| m.clone()).collect()
    }

    /// Closes least recently used scopes until at most `max` are open, skipping any that
    /// something holds (a turn, a request) or whose sessions wait for idle compaction.
    pub(super) fn close_past(&mut self, max: usize) -> Vec<Arc<ScopeMemory>> {
        let mut closed = Vec::new();
        while self.entries.len() > max.max(1) {
            let Some(oldest) = self
                .entries
                .iter()
                .filter(|(_, (memory, _))| {
                    Arc::strong_count(memory) == 1
                        && memory.autocompact.as_ref().is_none_or(|a| a.tracked() == 0)
                })
                .min_by_key(|(_, (_, used))| *used)
                .map(|(scope, _)| scope.clone())
            else {
                break;
            };
            if let Some((memory, _)) = self.entries.remove(&oldest) {
                closed.push(memory);
            }
        }
        closed
    }
}
