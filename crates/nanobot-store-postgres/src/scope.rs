//! One scope's handle on the store, and scope keys as the database keeps them.

use super::*;

/// The unique text of a scope key.
pub(super) fn canonical(scope: &ScopeKey) -> String {
    format!(
        "{}/{}/{}",
        scope.tenant,
        scope.agent,
        scope.subject.canonical()
    )
}

pub(super) fn scope_key(tenant: String, agent: String, subject: String) -> Option<ScopeKey> {
    let subject = Subject::parse(&subject).ok()?;
    ScopeKey::new(&tenant, &agent, subject).ok()
}

/// The stores of one scope in PostgreSQL: it implements every storage port (sessions,
/// journal, documents, versions, lease, the archive and memory commits), and every
/// statement names its scope, so nothing read or written through it can belong to another.
#[derive(Clone)]
pub struct PgScope {
    pub(crate) inner: Arc<Inner>,
    pub(crate) scope_id: i64,
    pub(crate) key: ScopeKey,
    pub(crate) clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for PgScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgScope")
            .field("scope", &self.key)
            .field("schema", &self.inner.schema.name())
            .finish_non_exhaustive()
    }
}

impl PgScope {
    /// The scope's key.
    pub fn key(&self) -> &ScopeKey {
        &self.key
    }

    /// The store this scope belongs to.
    pub fn store(&self) -> PgStore {
        PgStore {
            inner: self.inner.clone(),
        }
    }

    /// Another handle on the same scope through `store` (another pool: as another
    /// instance would open it).
    pub async fn reopen_through(&self, store: &PgStore) -> Result<PgScope, StoreError> {
        store.scope_with_clock(&self.key, self.clock.clone()).await
    }
}
