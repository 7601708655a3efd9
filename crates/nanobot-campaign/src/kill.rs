//! Family 1, the kill loop: a child process appends to a session and to the journal, saying
//! on stdout what each write acknowledged; the parent SIGKILLs it at a seeded moment, reopens
//! the stores and checks that everything acknowledged is there, whole and in order.
//!
//! A SIGKILL leaves the page cache, so at every durability level an acknowledged write must
//! survive it (power loss, where the levels differ, is the crash-filesystem family's). What
//! may be cut is the one write under way: a torn tail, reported and kept aside.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::NaiveDateTime;
use nanobot_llm_port::SystemClock;
use nanobot_memory_store::{
    FileJournal, HistoryJournal, HistoryJournalExt, JournalDurability, JournalRepair, NewEntry,
};
use nanobot_session_store::{
    Durability, FileSessionStore, FileStoreOptions, Repair, Session, SessionKey, SessionStore,
    SessionStoreExt, StoredMessage,
};

use crate::Plan;
use crate::report::{Family, percentiles_ms};
use crate::rng::Rng;

const KEY: &str = "cli:kill";
const LEVELS: [&str; 3] = ["none", "turn-end", "always"];
/// Retention keeps the session near this many messages, so a long run stays fast.
const KEEP: usize = 300;

pub(crate) fn now() -> NaiveDateTime {
    chrono::DateTime::from_timestamp(1_780_000_000, 0)
        .map(|t| t.naive_utc())
        .unwrap_or_default()
}

fn options(durability: &str) -> Result<(FileStoreOptions, JournalDurability), String> {
    let (session, journal) = match durability {
        "none" => (Durability::None, JournalDurability::None),
        "turn-end" => (Durability::TurnEnd, JournalDurability::None),
        "always" => (Durability::Always, JournalDurability::Always),
        other => return Err(format!("unknown durability {other:?}")),
    };
    Ok((FileStoreOptions::default().durability(session), journal))
}

fn key() -> Result<SessionKey, String> {
    SessionKey::new(KEY).map_err(|e| e.to_string())
}

/// The id a campaign message carries (`m<id> ...`).
fn message_id(message: &StoredMessage) -> Option<u64> {
    let text = message.content()?.as_str()?;
    text.strip_prefix('m')?.split(' ').next()?.parse().ok()
}

/// The child: writes until killed, printing `ack ...` after each write returns and
/// `pending ...` before a write whose effect the parent must allow for if it is cut short.
pub(crate) fn writer(dir: PathBuf, durability: &str, seed: u64) -> Result<(), String> {
    let (session_options, journal_durability) = options(durability)?;
    crate::current_thread()?.block_on(async move {
        let store = FileSessionStore::open(dir.join("sessions"), session_options)
            .map_err(|e| e.to_string())?;
        let journal = FileJournal::open_with(&dir, Arc::new(SystemClock), journal_durability)
            .map_err(|e| e.to_string())?;
        let key = key()?;
        let (mut session, mut revision) = match store.load(&key).await.map_err(|e| e.to_string())? {
            Some(loaded) => (loaded.session, Some(loaded.revision)),
            None => (Session::new(key.clone(), now()), None),
        };
        let mut next = session
            .messages()
            .last()
            .and_then(message_id)
            .map_or(0, |id| id + 1);
        let mut rng = Rng::new(seed);
        let mut out = std::io::stdout().lock();
        let mut say = |line: String| -> Result<(), String> {
            writeln!(out, "{line}")
                .and_then(|()| out.flush())
                .map_err(|e| e.to_string())
        };
        say(format!("ready {}", session.messages().len()))?;
        for step in 0u64.. {
            match rng.below(100) {
                0..=59 => {
                    for _ in 0..=rng.below(3) {
                        let pad = "x".repeat(rng.size(200_000));
                        let text = format!("m{next} {pad}");
                        let message = if next % 2 == 0 {
                            StoredMessage::user(text)
                        } else {
                            StoredMessage::assistant(text)
                        };
                        session.add_message(message, now());
                        next += 1;
                    }
                    revision = store
                        .save_changes(&mut session, revision)
                        .await
                        .map_err(|e| e.to_string())?;
                    say(format!("ack m {}", next - 1))?;
                }
                60..=69 => {
                    say(format!("pending meta {step}"))?;
                    session.metadata_mut().insert("step".into(), step.into());
                    revision = store
                        .save_changes(&mut session, revision)
                        .await
                        .map_err(|e| e.to_string())?;
                    say(format!("ack meta {step}"))?;
                }
                70..=74 => {
                    let len = session.messages().len() as u64;
                    let pointer = session.last_consolidated() as u64;
                    let to = pointer + rng.below(len - pointer + 1);
                    session
                        .set_last_consolidated(to as usize)
                        .map_err(|e| e.to_string())?;
                    revision = store
                        .save_changes(&mut session, revision)
                        .await
                        .map_err(|e| e.to_string())?;
                    say(format!("ack ptr {to}"))?;
                }
                75..=89 => {
                    let tag = format!("j{seed}-{step}");
                    let content = format!("{tag} {}", "y".repeat(rng.size(4_000)));
                    let cursor = journal
                        .append_one(NewEntry::text(&content))
                        .await
                        .map_err(|e| e.to_string())?;
                    say(format!("ack j {cursor} {tag}"))?;
                }
                90..=94 => {
                    if let Some(current) = revision {
                        revision = Some(
                            store
                                .flush(&key, current)
                                .await
                                .map_err(|e| e.to_string())?,
                        );
                        say("ack flush".into())?;
                    }
                }
                _ => {
                    if session.messages().len() > KEEP {
                        session.retain_recent(KEEP / 2, false, now());
                        let first = session
                            .messages()
                            .first()
                            .and_then(message_id)
                            .unwrap_or(next);
                        say(format!("pending retain {first}"))?;
                        revision = store
                            .save_changes(&mut session, revision)
                            .await
                            .map_err(|e| e.to_string())?;
                        say(format!("ack retain {first}"))?;
                    }
                }
            }
        }
        Ok(())
    })
}

/// What the parent learned from one child's stdout.
#[derive(Debug, Default, Clone)]
struct Acks {
    last_message: Option<u64>,
    floor: u64,
    pending_floor: Option<u64>,
    meta: Option<u64>,
    pending_meta: Option<u64>,
    journal: Vec<(u64, String)>,
    writes: u64,
}

impl Acks {
    fn read(&mut self, line: &str) {
        let words: Vec<&str> = line.split(' ').collect();
        let number = |i: usize| words.get(i).and_then(|w| w.parse::<u64>().ok());
        match (words.first().copied(), words.get(1).copied()) {
            (Some("ack"), Some("m")) => {
                self.last_message = number(2);
                self.writes += 1;
            }
            (Some("pending"), Some("meta")) => self.pending_meta = number(2),
            (Some("ack"), Some("meta")) => {
                self.meta = number(2);
                self.pending_meta = None;
                self.writes += 1;
            }
            (Some("pending"), Some("retain")) => self.pending_floor = number(2),
            (Some("ack"), Some("retain")) => {
                if let Some(floor) = number(2) {
                    self.floor = floor;
                }
                self.pending_floor = None;
                self.writes += 1;
            }
            (Some("ack"), Some("j")) => {
                if let (Some(cursor), Some(tag)) = (number(2), words.get(3)) {
                    self.journal.push((cursor, (*tag).to_owned()));
                    self.writes += 1;
                }
            }
            (Some("ack"), _) => self.writes += 1,
            _ => {}
        }
    }
}

#[derive(Debug, Default)]
struct Totals {
    kills: u64,
    acknowledged: u64,
    lost: u64,
    torn_tails: u64,
    quarantined: u64,
    failed_opens: u64,
    pointer_past_end: u64,
    order_violations: u64,
    cursor_violations: u64,
    reopen_ms: Vec<f64>,
}

pub(crate) fn run(plan: &Plan) -> Family {
    let mut family = Family::default();
    let mut totals = Totals::default();
    let mut per_level: Vec<(&str, u64, u64)> = Vec::new();
    let started = Instant::now();
    let mut rng = Rng::new(plan.seed ^ 0x4b11);
    let mut round = 0usize;
    // The journal across rounds, carried so a later round checks earlier acknowledgements.
    let mut carried: Vec<Acks> = vec![Acks::default(); LEVELS.len()];
    while round < plan.kills || started.elapsed() < plan.kill_time {
        let level_index = round % LEVELS.len();
        let level = LEVELS[level_index];
        // A fresh directory every 100 rounds of a level keeps reopen times flat.
        let generation = round / (LEVELS.len() * 100);
        let dir = plan.scratch.join(format!("kill-{level}-{generation}"));
        if round % (LEVELS.len() * 100) < LEVELS.len() {
            let _ = std::fs::remove_dir_all(&dir);
            carried[level_index] = Acks::default();
        }
        let seed = rng.next_u64();
        let delay = Duration::from_millis(2 + rng.below(60));
        match one_kill(
            &dir,
            level,
            seed,
            delay,
            &mut carried[level_index],
            &mut totals,
        ) {
            Ok(acked) => match per_level.iter_mut().find(|(name, _, _)| *name == level) {
                Some(entry) => {
                    entry.1 += 1;
                    entry.2 += acked;
                }
                None => per_level.push((level, 1, acked)),
            },
            Err(problem) => {
                totals.failed_opens += 1;
                family.fail(format!(
                    "{level}, seed {seed}, kill after {delay:?}: {problem} ({})",
                    dir.display()
                ));
            }
        }
        round += 1;
    }
    family.set("kills", totals.kills);
    family.set("acknowledged_writes", totals.acknowledged);
    family.set("torn_tails_repaired", totals.torn_tails);
    family.set("reopen_ms", percentiles_ms(&mut totals.reopen_ms));
    family.set(
        "by_level",
        per_level
            .iter()
            .map(|(level, kills, acked)| {
                (
                    (*level).to_owned(),
                    serde_json::json!({"kills": kills, "acknowledged_writes": acked}),
                )
            })
            .collect::<serde_json::Map<_, _>>(),
    );
    family.zero("acknowledged_lost", totals.lost);
    family.zero("failed_opens", totals.failed_opens);
    family.zero("quarantined_lines", totals.quarantined);
    family.zero("pointer_past_end", totals.pointer_past_end);
    family.zero("order_violations", totals.order_violations);
    family.zero("cursor_violations", totals.cursor_violations);
    family
}

/// One round: start a writer, kill it after `delay`, reopen and check. Returns the writes
/// it acknowledged; counts problems into `totals`.
fn one_kill(
    dir: &Path,
    level: &str,
    seed: u64,
    delay: Duration,
    acks: &mut Acks,
    totals: &mut Totals,
) -> Result<u64, String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .args(["child", "kill-writer"])
        .arg(dir)
        .args([level, &seed.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("could not start the writer: {e}"))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let (lines_tx, lines_rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    // Wait for `ready`, then let it write for `delay`.
    let ready_by = Instant::now() + Duration::from_secs(30);
    let before = acks.writes;
    loop {
        match lines_rx.recv_timeout(Duration::from_millis(50)) {
            Ok(line) if line.starts_with("ready") => break,
            Ok(line) => acks.read(&line),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) if Instant::now() < ready_by => {}
            Err(_) => {
                let _ = child.kill();
                let output = child.wait_with_output().map_err(|e| e.to_string())?;
                return Err(format!(
                    "the writer did not start: {}",
                    String::from_utf8_lossy(&output.stderr).trim()
                ));
            }
        }
    }
    let kill_at = Instant::now() + delay;
    while let Some(left) = kill_at.checked_duration_since(Instant::now()) {
        match lines_rx.recv_timeout(left) {
            Ok(line) => acks.read(&line),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => break,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let _ = child.kill();
    let status = child.wait().map_err(|e| e.to_string())?;
    let _ = reader.join();
    // Everything the child said before it died counts: it was said after the store returned.
    while let Ok(line) = lines_rx.try_recv() {
        acks.read(&line);
    }
    if std::os::unix::process::ExitStatusExt::signal(&status) != Some(9) {
        // It stopped before the kill: a write failed, which is a finding, not a kill.
        let mut stderr = String::new();
        if let Some(mut err) = child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut err, &mut stderr);
        }
        return Err(format!(
            "the writer stopped on its own ({status}): {}",
            stderr.trim()
        ));
    }
    totals.kills += 1;
    let acked = acks.writes - before;
    totals.acknowledged += acked;
    check(dir, level, acks, totals)?;
    Ok(acked)
}

/// Reopens both stores as a new process would and checks every acknowledgement.
fn check(dir: &Path, level: &str, acks: &mut Acks, totals: &mut Totals) -> Result<(), String> {
    let (session_options, journal_durability) = options(level)?;
    let started = Instant::now();
    let (loaded, journal) = crate::current_thread()?.block_on(async {
        let store = FileSessionStore::open(dir.join("sessions"), session_options)
            .map_err(|e| format!("the session store did not open: {e}"))?;
        let loaded = store
            .load(&key()?)
            .await
            .map_err(|e| format!("the session did not load: {e}"))?;
        let journal = FileJournal::open_with(dir, Arc::new(SystemClock), journal_durability)
            .map_err(|e| format!("the journal did not open: {e}"))?;
        let entries = journal
            .read_since(0, None)
            .await
            .map_err(|e| format!("the journal did not read: {e}"))?;
        Ok::<_, String>((loaded, (entries, journal.repairs())))
    })?;
    totals
        .reopen_ms
        .push(started.elapsed().as_secs_f64() * 1000.0);

    // The session.
    let (messages, pointer) = match &loaded {
        Some(loaded) => {
            for repair in &loaded.repairs {
                match repair {
                    Repair::TornTail { .. } => totals.torn_tails += 1,
                    _ => totals.quarantined += 1,
                }
            }
            (
                loaded.session.messages().to_vec(),
                loaded.session.last_consolidated(),
            )
        }
        None => (Vec::new(), 0),
    };
    if pointer > messages.len() {
        totals.pointer_past_end += 1;
    }
    let ids: Vec<Option<u64>> = messages.iter().map(message_id).collect();
    if ids.iter().any(Option::is_none) || ids.windows(2).any(|w| w[1] != w[0].map(|id| id + 1)) {
        totals.order_violations += 1;
    }
    if let Some(last) = acks.last_message {
        let first = ids.first().copied().flatten();
        let end = ids.last().copied().flatten();
        let allowed_start = |start: u64| start <= acks.floor || Some(start) == acks.pending_floor;
        match (first, end) {
            (Some(first), Some(end)) => {
                if end < last {
                    totals.lost += last - end;
                }
                if !allowed_start(first) {
                    totals.lost += first - acks.floor;
                }
                if first > acks.floor {
                    // A retention that was under way landed: it is the floor now.
                    acks.floor = first;
                }
            }
            _ => totals.lost += last + 1 - acks.floor,
        }
    }
    acks.pending_floor = None;
    if let (Some(meta), Some(loaded)) = (acks.meta, &loaded) {
        let found = loaded
            .session
            .meta()
            .metadata
            .get("step")
            .and_then(|v| v.as_u64());
        // The acknowledged value, or the one whose write was under way when it died.
        let allowed =
            found == Some(meta) || (acks.pending_meta.is_some() && found == acks.pending_meta);
        if !allowed {
            totals.lost += 1;
        }
    }
    if let Some(loaded) = &loaded {
        acks.meta = loaded
            .session
            .meta()
            .metadata
            .get("step")
            .and_then(|v| v.as_u64());
    }
    acks.pending_meta = None;

    // The journal.
    let (entries, repairs) = journal;
    for repair in repairs {
        match repair {
            JournalRepair::TornTail { .. } => totals.torn_tails += 1,
            _ => totals.quarantined += 1,
        }
    }
    if entries.windows(2).any(|w| w[1].cursor <= w[0].cursor) {
        totals.cursor_violations += 1;
    }
    for (cursor, tag) in &acks.journal {
        let found = entries
            .binary_search_by_key(cursor, |e| e.cursor)
            .ok()
            .map(|i| &entries[i]);
        if found.is_none_or(|e| e.content.split(' ').next() != Some(tag.as_str())) {
            totals.lost += 1;
        }
    }
    Ok(())
}
