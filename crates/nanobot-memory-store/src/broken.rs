//! Contract rules a test can switch off in the in-memory backends (feature `conformance`),
//! so the conformance suite shows that it notices when a backend breaks them.

/// A contract rule of the memory ports.
#[cfg_attr(not(feature = "conformance"), allow(unreachable_pub))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rule {
    /// Journal visibility: cursors are assigned in commit order, so a reader polling
    /// `cursor > x` never skips an entry. Broken: a cursor is taken, then the entry is
    /// stored later, after others.
    JournalCommitOrder,
    /// Documents compare-and-set: a stale write is a conflict. Broken: every write wins.
    DocumentCompareAndSet,
    /// Documents stamp: every change to a document or skill changes it. Broken: it never
    /// changes.
    DocumentsStamp,
    /// Lease fencing: a commit under a lease checks its fence. Broken: never checked.
    LeaseFence,
    /// Archive commit, once per slice: a commit repeated after a conflict or a crash reuses
    /// the entries already journaled. Broken: they are appended again.
    ArchiveOnce,
    /// Archive commit order: the journal entry first, then the pointer. Broken: the pointer
    /// moves first, so a journal failure after it leaves archived messages in no entry.
    PointerBeforeJournal,
}

/// Which rule, if any, a store has switched off.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Switch(Option<Rule>);

impl Switch {
    #[cfg_attr(not(feature = "conformance"), allow(dead_code))]
    pub(crate) fn on(rule: Rule) -> Switch {
        Switch(Some(rule))
    }

    /// Whether `rule` is switched off.
    pub(crate) fn is(self, rule: Rule) -> bool {
        self.0 == Some(rule)
    }
}
