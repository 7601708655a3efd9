//! A one-entry memo per slot: the last input and what was computed from it. Most of a
//! system prompt is the same from one turn to the next, so its token counts, truncations and
//! prefix hash are computed once and looked up by comparing bytes afterwards. Results never
//! depend on the memo, only their cost does.

use std::sync::{Mutex, MutexGuard};

#[derive(Debug)]
pub(crate) struct Memo<V> {
    slots: Mutex<Vec<Option<(String, V)>>>,
}

impl<V: Clone> Memo<V> {
    pub(crate) fn new(slots: usize) -> Self {
        Memo {
            slots: Mutex::new((0..slots).map(|_| None).collect()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Option<(String, V)>>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The value for `key` in `slot`, computed by `compute` unless the slot holds it.
    pub(crate) fn get(&self, slot: usize, key: &str, compute: impl FnOnce() -> V) -> V {
        if let Some(Some((known, value))) = self.lock().get(slot)
            && known == key
        {
            return value.clone();
        }
        let value = compute();
        if let Some(entry) = self.lock().get_mut(slot) {
            *entry = Some((key.to_owned(), value.clone()));
        }
        value
    }
}
