//! When an acknowledged message append reaches stable storage: one setting that every
//! session backend reads the same way (files fsync, PostgreSQL waits for its log).

/// When session writes reach stable storage. Whatever the choice, a process crash loses
/// nothing acknowledged; the levels differ in what a power loss or a server crash can take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(rename_all = "kebab-case")
)]
#[non_exhaustive]
pub enum Durability {
    /// Appends never wait for the disk: the OS (or the database server) writes back when it
    /// likes. A power loss can lose recent turns.
    None,
    /// Appends do not wait; the end of a turn ([`crate::SessionStore::flush`], which the
    /// manager calls) does, and makes every earlier append durable with it. A power loss can
    /// lose the turn under way.
    #[default]
    TurnEnd,
    /// Every write waits for the disk (the messages of one save share one wait).
    Always,
}
