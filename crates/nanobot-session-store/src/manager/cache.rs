//! The handles a manager keeps, least recently used dropped first (never one in use).

use super::*;

#[derive(Default)]
pub(super) struct Cache {
    pub(super) strong: HashMap<SessionKey, (Arc<SessionHandle>, u64)>,
    pub(super) weak: HashMap<SessionKey, Weak<SessionHandle>>,
    pub(super) tick: u64,
}

impl Cache {
    pub(super) fn get(&mut self, key: &SessionKey, capacity: usize) -> Option<Arc<SessionHandle>> {
        self.tick += 1;
        let tick = self.tick;
        if let Some((handle, used)) = self.strong.get_mut(key) {
            *used = tick;
            return Some(Arc::clone(handle));
        }
        let handle = self.weak.remove(key)?.upgrade()?;
        self.remember(Arc::clone(&handle), capacity);
        Some(handle)
    }

    pub(super) fn remember(&mut self, handle: Arc<SessionHandle>, capacity: usize) {
        self.tick += 1;
        self.weak.remove(handle.key());
        self.strong
            .insert(handle.key().clone(), (handle, self.tick));
        while self.strong.len() > capacity.max(1) {
            let Some(oldest) = self
                .strong
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some((handle, _)) = self.strong.remove(&oldest) {
                self.weak.insert(oldest, Arc::downgrade(&handle));
            }
        }
        self.weak.retain(|_, weak| weak.strong_count() > 0);
    }

    pub(super) fn remove(&mut self, key: &SessionKey) {
        self.strong.remove(key);
        self.weak.remove(key);
    }

    pub(super) fn live(&self) -> Vec<Arc<SessionHandle>> {
        let mut handles: Vec<Arc<SessionHandle>> =
            self.strong.values().map(|(h, _)| Arc::clone(h)).collect();
        handles.extend(self.weak.values().filter_map(Weak::upgrade));
        handles.sort_by(|a, b| a.key.cmp(&b.key));
        handles
    }
}
