//! The fixed file workload that the power-loss and I/O-error families share: one session
//! (appends, metadata, pointer moves, flushes, a retention rewrite), the journal (appends,
//! Dream's cursor, a compaction) and `MEMORY.md` (whole replacements, as a Dream apply
//! writes it), all in one directory, with a log of what each call acknowledged, and the
//! check of a directory against that log.
//!
//! Every message, entry and document version carries its number and derives the rest of
//! its text from it, so the check can tell a missing write from a damaged one.

use std::path::Path;
use std::sync::Arc;

use nanobot_memory_store::{
    Document, Expected, FileDocuments, FileJournal, HistoryJournal, HistoryJournalExt,
    JournalDurability, JournalRepair, MemoryDocuments, NewEntry,
};
use nanobot_session_store::{
    BrokenRule, Durability, FileSessionStore, FileStoreOptions, Repair, Revision, Session,
    SessionKey, SessionStore, SessionStoreExt, StoredMessage,
};

use crate::kill::now;
use crate::rng::Rng;

const KEY: &str = "cli:power";

/// What one call acknowledged (its index in the log is the mark the recorder keeps).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ack {
    /// Messages up to and including this id are saved.
    Messages(u64),
    /// The metadata value `step` is saved.
    Meta(u64),
    /// A flush returned: what was saved before it is durable from `turn-end` up.
    Flush,
    /// A compaction of the journal is about to start.
    CompactStart,
    /// The journal entry with this cursor is appended.
    Entry(u64),
    /// Dream's cursor is at this value.
    Dream(u64),
    /// `MEMORY.md` holds this version.
    Document(u64),
}

/// The durability levels, as the stores name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    None,
    TurnEnd,
    Always,
}

impl Level {
    pub(crate) const ALL: [Level; 3] = [Level::None, Level::TurnEnd, Level::Always];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Level::None => "none",
            Level::TurnEnd => "turn-end",
            Level::Always => "always",
        }
    }

    fn session(self) -> Durability {
        match self {
            Level::None => Durability::None,
            Level::TurnEnd => Durability::TurnEnd,
            Level::Always => Durability::Always,
        }
    }

    fn journal(self) -> JournalDurability {
        match self {
            Level::Always => JournalDurability::Always,
            Level::None | Level::TurnEnd => JournalDurability::None,
        }
    }
}

pub(crate) fn message_text(id: u64) -> String {
    // Sizes from a few bytes to a few sectors, so torn writes land inside messages.
    let pad = (id * 733) % 2_600;
    format!("m{id} {}", "abcdefghij".repeat(pad as usize / 10 + 1))
}

fn message_id(message: &StoredMessage) -> Option<u64> {
    let text = message.content()?.as_str()?;
    text.strip_prefix('m')?.split(' ').next()?.parse().ok()
}

fn entry_text(n: u64) -> String {
    format!(
        "e{n} {}",
        "0123456789".repeat(((n * 389) % 900) as usize / 10 + 1)
    )
}

fn entry_number(content: &str) -> Option<u64> {
    content.strip_prefix('e')?.split(' ').next()?.parse().ok()
}

fn document_text(version: u64) -> String {
    format!(
        "# Memory v{version}\n\n{}\n",
        "- a fact worth keeping\n".repeat((version as usize * 37) % 120 + 1)
    )
}

fn document_version(text: &str) -> Option<u64> {
    let first = text.lines().next()?;
    let version = first.strip_prefix("# Memory v")?.parse().ok()?;
    (text == document_text(version)).then_some(version)
}

/// An empty directory at `path` (what was there is removed), as its canonical path: the
/// stores see canonical paths, and so must the observers watching them.
pub(crate) fn fresh_dir(path: &Path) -> Result<std::path::PathBuf, String> {
    let _ = std::fs::remove_dir_all(path);
    std::fs::create_dir_all(path).map_err(|e| format!("{}: {e}", path.display()))?;
    std::fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn key() -> Result<SessionKey, String> {
    SessionKey::new(KEY).map_err(|e| e.to_string())
}

/// The three stores of one directory.
pub(crate) struct Stores {
    pub(crate) sessions: FileSessionStore,
    pub(crate) journal: FileJournal,
    pub(crate) documents: FileDocuments,
}

pub(crate) fn open(dir: &Path, level: Level, broken: Option<BrokenRule>) -> Result<Stores, String> {
    let options = FileStoreOptions::default().durability(level.session());
    let sessions = match broken {
        Some(rule) => FileSessionStore::broken(dir.join("sessions"), options, rule),
        None => FileSessionStore::open(dir.join("sessions"), options),
    }
    .map_err(|e| format!("the session store did not open: {e}"))?;
    let workspace = dir.join("ws");
    let journal = FileJournal::open_with(
        &workspace,
        Arc::new(nanobot_llm_port::SystemClock),
        level.journal(),
    )
    .map_err(|e| format!("the journal did not open: {e}"))?;
    let documents =
        FileDocuments::open(&workspace).map_err(|e| format!("the documents did not open: {e}"))?;
    Ok(Stores {
        sessions,
        journal,
        documents,
    })
}

/// How a run went: the log of acknowledgements and the calls that failed.
#[derive(Debug, Default)]
pub(crate) struct Run {
    pub(crate) acks: Vec<Ack>,
    pub(crate) errors: Vec<String>,
    pub(crate) steps: u64,
}

/// Runs the workload of `seed` for `steps` steps, calling `mark(i)` after the i-th
/// acknowledgement. A failed call (an injected I/O error) is logged and the workload goes
/// on as a program would: it reloads what it holds from the stores and carries on.
pub(crate) async fn run(stores: &Stores, seed: u64, steps: u64, mark: &dyn Fn(usize)) -> Run {
    let mut run = Run::default();
    let mut rng = Rng::new(seed);
    let Ok(key) = key() else {
        run.errors.push("bad key".into());
        return run;
    };
    let mut session = Session::new(key.clone(), now());
    let mut revision: Option<Revision> = None;
    let mut next_message = 0u64;
    let mut next_entry = 0u64;
    let mut document = 0u64;
    let ack = |run: &mut Run, what: Ack| {
        run.acks.push(what);
        mark(run.acks.len() - 1);
    };
    for step in 0..steps {
        run.steps += 1;
        let outcome: Result<(), String> = async {
            match rng.below(100) {
                0..=39 => {
                    for _ in 0..=rng.below(2) {
                        let text = message_text(next_message);
                        let message = if next_message.is_multiple_of(2) {
                            StoredMessage::user(text)
                        } else {
                            StoredMessage::assistant(text)
                        };
                        session.add_message(message, now());
                        next_message += 1;
                    }
                    revision =
                        store_err(stores.sessions.save_changes(&mut session, revision).await)?;
                    ack(&mut run, Ack::Messages(next_message - 1));
                }
                40..=49 => {
                    session.metadata_mut().insert("step".into(), step.into());
                    if rng.below(3) == 0 {
                        // A value long enough to outgrow line 1's padding.
                        session
                            .metadata_mut()
                            .insert("note".into(), "n".repeat(rng.below(700) as usize).into());
                    }
                    revision =
                        store_err(stores.sessions.save_changes(&mut session, revision).await)?;
                    ack(&mut run, Ack::Meta(step));
                }
                50..=54 => {
                    let len = session.messages().len() as u64;
                    let pointer = session.last_consolidated() as u64;
                    let to = pointer + rng.below(len - pointer + 1);
                    session
                        .set_last_consolidated(to as usize)
                        .map_err(|e| e.to_string())?;
                    revision =
                        store_err(stores.sessions.save_changes(&mut session, revision).await)?;
                }
                55..=64 => {
                    if let Some(current) = revision {
                        revision = Some(
                            stores
                                .sessions
                                .flush(&key, current)
                                .await
                                .map_err(|e| e.to_string())?,
                        );
                        ack(&mut run, Ack::Flush);
                    }
                }
                65..=67 => {
                    if session.messages().len() > 12 {
                        session.retain_recent(6, false, now());
                        revision =
                            store_err(stores.sessions.save_changes(&mut session, revision).await)?;
                    }
                }
                68..=82 => {
                    let cursor = stores
                        .journal
                        .append_one(NewEntry::text(&entry_text(next_entry)))
                        .await
                        .map_err(|e| e.to_string())?;
                    next_entry += 1;
                    ack(&mut run, Ack::Entry(cursor));
                }
                83..=87 => {
                    let latest = stores
                        .journal
                        .latest_cursor()
                        .await
                        .map_err(|e| e.to_string())?;
                    let dream = stores
                        .journal
                        .dream_cursor()
                        .await
                        .map_err(|e| e.to_string())?;
                    let to = dream + rng.below(latest.saturating_sub(dream) + 1);
                    stores
                        .journal
                        .set_dream_cursor(to)
                        .await
                        .map_err(|e| e.to_string())?;
                    ack(&mut run, Ack::Dream(to));
                }
                88..=90 => {
                    ack(&mut run, Ack::CompactStart);
                    stores
                        .journal
                        .compact(3 + rng.below(5) as usize)
                        .await
                        .map_err(|e| e.to_string())?;
                }
                _ => {
                    let current = stores
                        .documents
                        .read(Document::Memory)
                        .await
                        .map_err(|e| e.to_string())?;
                    let expected = Expected::from_read(current.as_ref());
                    document += 1;
                    stores
                        .documents
                        .write(Document::Memory, &document_text(document), expected)
                        .await
                        .map_err(|e| e.to_string())?;
                    ack(&mut run, Ack::Document(document));
                }
            }
            Ok(())
        }
        .await;
        if let Err(error) = outcome {
            run.errors.push(format!("step {step}: {error}"));
            // Start again from what the stores hold, as a program that retries would.
            match stores.sessions.load(&key).await {
                Ok(Some(loaded)) => {
                    session = loaded.session;
                    revision = Some(loaded.revision);
                }
                Ok(None) => {
                    session = Session::new(key.clone(), now());
                    revision = None;
                }
                Err(e) => run.errors.push(format!("step {step}: reload: {e}")),
            }
            // Ids the stores do not hold are used again; those they hold are not.
            next_message = session
                .messages()
                .last()
                .and_then(message_id)
                .map_or(0, |id| id + 1);
            if let Ok(Some(doc)) = stores.documents.read(Document::Memory).await {
                document = document.max(document_version(&doc.text).unwrap_or(0));
            }
        }
    }
    run
}

fn store_err<T>(result: Result<T, nanobot_session_store::SessionError>) -> Result<T, String> {
    result.map_err(|e| e.to_string())
}

/// What the check found.
#[derive(Debug, Default)]
pub(crate) struct Findings {
    /// Broken promises: acknowledged data missing, damaged data, a store that did not open.
    pub(crate) violations: Vec<String>,
    pub(crate) torn_tails: u64,
    /// Line 1 torn mid-rewrite and rebuilt from the record after it (nothing lost).
    pub(crate) torn_line1s: u64,
}

/// Opens the stores of `dir` at `level` as a new process would and checks them against the
/// acknowledgements `acks` (those made before the crash, in order): what `promise`
/// promises is there (`level` after a power loss; `always` when the process only met
/// errors), and everything there is whole, in order and was written.
pub(crate) async fn check(
    dir: &Path,
    level: Level,
    promise: Level,
    acks: &[Ack],
    written: &[Ack],
) -> Findings {
    let mut found = Findings::default();
    let mut violation = |what: String| found.violations.push(what);
    let stores = match open(dir, level, None) {
        Ok(stores) => stores,
        Err(e) => {
            violation(e);
            return found;
        }
    };
    let Ok(key) = key() else {
        violation("bad key".into());
        return found;
    };

    // What must be there.
    let durable_from_flush = promise != Level::None;
    let mut must_messages: Option<u64> = None;
    let mut must_meta: Option<u64> = None;
    let mut unflushed_messages: Option<u64> = None;
    let mut unflushed_meta: Option<u64> = None;
    let mut must_entries: Vec<u64> = Vec::new();
    let mut compactions_started = false;
    let mut must_dream = 0;
    let mut must_document = 0;
    for a in acks {
        match a {
            Ack::Messages(id) if promise == Level::Always => must_messages = Some(*id),
            Ack::Messages(id) => unflushed_messages = Some(*id),
            Ack::Meta(step) if promise == Level::Always => must_meta = Some(*step),
            Ack::Meta(step) => unflushed_meta = Some(*step),
            Ack::Flush if durable_from_flush => {
                must_messages = must_messages.max(unflushed_messages);
                must_meta = must_meta.max(unflushed_meta);
            }
            Ack::Flush => {}
            Ack::Entry(cursor) if promise == Level::Always => must_entries.push(*cursor),
            Ack::Entry(_) => {}
            Ack::CompactStart => compactions_started = true,
            Ack::Dream(to) => must_dream = *to,
            Ack::Document(v) => must_document = *v,
        }
    }
    let written_messages = written
        .iter()
        .filter_map(|a| match a {
            Ack::Messages(id) => Some(*id),
            _ => None,
        })
        .max();

    // The session.
    match stores.sessions.load(&key).await {
        Err(e) => violation(format!("the session did not load: {e}")),
        Ok(None) => {
            if let Some(id) = must_messages {
                violation(format!(
                    "the session is gone; message m{id} was acknowledged"
                ));
            }
        }
        Ok(Some(loaded)) => {
            for repair in &loaded.repairs {
                match repair {
                    Repair::TornTail { .. } => found.torn_tails += 1,
                    Repair::TornLine1 { .. } => found.torn_line1s += 1,
                    other => violation(format!("the session was damaged: {other:?}")),
                }
            }
            let ids: Vec<Option<u64>> = loaded.session.messages().iter().map(message_id).collect();
            for (i, message) in loaded.session.messages().iter().enumerate() {
                match ids[i] {
                    Some(id)
                        if message.content().and_then(|c| c.as_str())
                            == Some(&message_text(id)) =>
                    {
                        if i > 0 && ids[i - 1].is_some_and(|prev| prev + 1 != id) {
                            violation(format!(
                                "message m{id} follows {:?}: a gap or a repeat",
                                ids[i - 1]
                            ));
                        }
                        // A message the workload never got an answer for may be there (its
                        // write went through before the failure); one it never wrote may not.
                        if written_messages.is_none_or(|w| id > w + 2) {
                            violation(format!("message m{id} was never written"));
                        }
                    }
                    _ => violation(format!(
                        "message {i} is not one that was written: {:?}",
                        message.content()
                    )),
                }
            }
            let last = ids.last().copied().flatten();
            if let Some(required) = must_messages
                && last.is_none_or(|last| last < required)
            {
                violation(format!(
                    "acknowledged message m{required} lost (the session ends at {last:?})"
                ));
            }
            let pointer = loaded.session.last_consolidated();
            if pointer > loaded.session.messages().len() {
                violation(format!(
                    "the pointer {pointer} is past the {} messages",
                    loaded.session.messages().len()
                ));
            }
            let meta = loaded
                .session
                .meta()
                .metadata
                .get("step")
                .and_then(|v| v.as_u64());
            if let Some(required) = must_meta
                && meta.is_none_or(|m| m < required)
            {
                violation(format!(
                    "acknowledged metadata step {required} lost (found {meta:?})"
                ));
            }
        }
    }

    // The journal.
    for repair in stores.journal.repairs() {
        match repair {
            JournalRepair::TornTail { .. } => found.torn_tails += 1,
            other => violation(format!("the journal was damaged: {other:?}")),
        }
    }
    match stores.journal.read_since(0, None).await {
        Err(e) => violation(format!("the journal did not read: {e}")),
        Ok(entries) => {
            let mut previous = 0;
            for entry in &entries {
                if entry.cursor <= previous {
                    violation(format!("cursor {} after {previous}", entry.cursor));
                }
                previous = entry.cursor;
                let whole =
                    entry_number(&entry.content).is_some_and(|n| entry.content == entry_text(n));
                if !whole {
                    violation(format!("entry {} is damaged", entry.cursor));
                }
            }
            let present: std::collections::BTreeSet<u64> =
                entries.iter().map(|e| e.cursor).collect();
            let oldest = entries.first().map_or(u64::MAX, |e| e.cursor);
            for cursor in &must_entries {
                // A compaction may have dropped entries Dream had read (the oldest ones).
                let dropped = compactions_started && *cursor < oldest;
                if !present.contains(cursor) && !dropped {
                    violation(format!("acknowledged entry {cursor} lost"));
                }
            }
        }
    }
    match stores.journal.dream_cursor().await {
        Err(e) => violation(format!("Dream's cursor did not read: {e}")),
        Ok(dream) if dream < must_dream => violation(format!(
            "Dream's cursor went back from {must_dream} to {dream}"
        )),
        Ok(dream) => {
            // The next entry must take a number Dream has not passed, or Dream never reads it.
            match stores
                .journal
                .append_one(NewEntry::text("after the crash"))
                .await
            {
                Ok(cursor) if cursor <= dream => violation(format!(
                    "a new entry took cursor {cursor}, which Dream's cursor {dream} has passed"
                )),
                Ok(_) => {}
                Err(e) => violation(format!(
                    "the journal refused an append after the crash: {e}"
                )),
            }
        }
    }

    // MEMORY.md: one whole version, not older than the last acknowledged one.
    match stores.documents.read(Document::Memory).await {
        Err(e) => violation(format!("MEMORY.md did not read: {e}")),
        Ok(None) => {
            if must_document > 0 {
                violation(format!(
                    "MEMORY.md is gone; version {must_document} was acknowledged"
                ));
            }
        }
        Ok(Some(doc)) => match document_version(&doc.text) {
            None => violation(format!(
                "MEMORY.md is not a version that was written ({} bytes)",
                doc.text.len()
            )),
            Some(v) if v < must_document => violation(format!(
                "MEMORY.md went back from version {must_document} to {v}"
            )),
            Some(_) => {}
        },
    }
    found
}
