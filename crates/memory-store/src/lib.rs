#![doc = include_str!("../README.md")]

#[cfg(feature = "conformance")]
pub mod conformance;
mod entry;
mod error;
#[cfg(feature = "fs")]
mod file;
mod journal;
mod memory;

pub use entry::{JournalEntry, MESSAGE_RANGE_FIELD, NewEntry, TIMESTAMP_FORMAT};
pub use error::MemoryError;
#[cfg(feature = "fs")]
pub use file::{FileJournal, JournalDurability, JournalRepair};
pub use journal::{Compaction, HistoryJournal, HistoryJournalExt};
pub use memory::MemoryJournal;
