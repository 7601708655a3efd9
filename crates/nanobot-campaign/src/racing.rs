//! Family 4, many processes on one workspace: 2 to 4 writer processes run turns on one
//! session (a user and an assistant message written together, retried on `Conflict`) and
//! append one journal entry per turn, for a fixed time. Nothing acknowledged may be lost,
//! nothing doubled, no two turns interleaved, and the journal's cursors run 1..N.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nanobot_llm_port::SystemClock;
use nanobot_memory_store::{
    FileJournal, HistoryJournal, HistoryJournalExt, JournalDurability, NewEntry,
};
use nanobot_session_store::{
    FileSessionStore, FileStoreOptions, Session, SessionError, SessionKey, SessionStore,
    SessionStoreExt, StoredMessage,
};

use crate::Plan;
use crate::kill::now;
use crate::report::Family;

const KEY: &str = "cli:racing";

/// The child: turns until `time` is up, printing `ack <turn> <cursor> <conflicts>`.
pub(crate) fn writer(dir: PathBuf, id: u64, time: Duration) -> Result<(), String> {
    let runtime = crate::current_thread()?;
    runtime.block_on(async move {
        let store = FileSessionStore::open(dir.join("sessions"), FileStoreOptions::default())
            .map_err(|e| e.to_string())?;
        let journal = FileJournal::open_with(&dir, Arc::new(SystemClock), JournalDurability::None)
            .map_err(|e| e.to_string())?;
        let key = SessionKey::new(KEY).map_err(|e| e.to_string())?;
        let deadline = Instant::now() + time;
        let mut out = std::io::stdout().lock();
        let mut turn = 0u64;
        while Instant::now() < deadline {
            let mut conflicts = 0u64;
            loop {
                let (mut session, revision) =
                    match store.load(&key).await.map_err(|e| e.to_string())? {
                        Some(loaded) => (loaded.session, Some(loaded.revision)),
                        None => (Session::new(key.clone(), now()), None),
                    };
                session.add_message(StoredMessage::user(format!("w{id}-t{turn}-u")), now());
                session.add_message(StoredMessage::assistant(format!("w{id}-t{turn}-a")), now());
                match store.save_changes(&mut session, revision).await {
                    Ok(_) => break,
                    Err(SessionError::Conflict { .. }) => conflicts += 1,
                    Err(other) => return Err(other.to_string()),
                }
            }
            let cursor = journal
                .append_one(NewEntry::text(&format!("w{id}-t{turn}")))
                .await
                .map_err(|e| e.to_string())?;
            writeln!(out, "ack {turn} {cursor} {conflicts}")
                .and_then(|()| out.flush())
                .map_err(|e| e.to_string())?;
            turn += 1;
        }
        Ok(())
    })
}

pub(crate) fn run(plan: &Plan) -> Family {
    let mut family = Family::default();
    let (mut turns, mut conflicts) = (0u64, 0u64);
    let (mut lost, mut doubled, mut interleaved, mut gaps, mut crossed) = (0, 0, 0, 0, 0);
    let mut failed = 0u64;
    for run in 0..plan.race_runs {
        let writers = 2 + (run % 3) as u64;
        let dir = plan.scratch.join(format!("racing-{run}"));
        let _ = std::fs::remove_dir_all(&dir);
        match one_race(&dir, writers, plan.race_time) {
            Ok(result) => {
                turns += result.turns;
                conflicts += result.conflicts;
                lost += result.lost;
                doubled += result.doubled;
                interleaved += result.interleaved;
                gaps += result.gaps;
                crossed += result.crossed;
                if result.lost + result.doubled + result.interleaved + result.gaps + result.crossed
                    > 0
                {
                    family.fail(format!("{writers} writers: {result:?} ({})", dir.display()));
                }
            }
            Err(problem) => {
                failed += 1;
                family.fail(format!("{writers} writers: {problem} ({})", dir.display()));
            }
        }
    }
    family.set("runs", plan.race_runs as u64);
    family.set("seconds_per_run", plan.race_time.as_secs());
    family.set("acknowledged_turns", turns);
    family.set("conflicts_retried", conflicts);
    family.zero("lost", lost);
    family.zero("doubled", doubled);
    family.zero("interleaved", interleaved);
    family.zero("cursor_gaps_or_duplicates", gaps);
    family.zero("journal_mismatches", crossed);
    family.zero("failed_runs", failed);
    family
}

#[derive(Debug, Default)]
struct RaceResult {
    turns: u64,
    conflicts: u64,
    lost: u64,
    doubled: u64,
    interleaved: u64,
    gaps: u64,
    crossed: u64,
}

fn one_race(dir: &Path, writers: u64, time: Duration) -> Result<RaceResult, String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut children = Vec::new();
    for id in 0..writers {
        let child = Command::new(&exe)
            .args(["child", "race-writer"])
            .arg(dir)
            .args([id.to_string(), time.as_millis().to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("could not start a writer: {e}"))?;
        children.push((id, child));
    }
    let mut result = RaceResult::default();
    // (writer, turn) -> cursor, as acknowledged.
    let mut acked: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    for (id, child) in children {
        let output = child.wait_with_output().map_err(|e| e.to_string())?;
        if !output.status.success() {
            return Err(format!(
                "writer {id} failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        for line in BufReader::new(output.stdout.as_slice()).lines() {
            let line = line.map_err(|e| e.to_string())?;
            let words: Vec<u64> = line
                .strip_prefix("ack ")
                .unwrap_or_default()
                .split(' ')
                .filter_map(|w| w.parse().ok())
                .collect();
            if let [turn, cursor, conflicts] = words[..] {
                acked.insert((id, turn), cursor);
                result.conflicts += conflicts;
            }
        }
    }
    result.turns = acked.len() as u64;

    let runtime = crate::current_thread()?;
    let (messages, entries) = runtime.block_on(async {
        let store = FileSessionStore::open(dir.join("sessions"), FileStoreOptions::default())
            .map_err(|e| e.to_string())?;
        let key = SessionKey::new(KEY).map_err(|e| e.to_string())?;
        let messages: Vec<String> = match store.load(&key).await.map_err(|e| e.to_string())? {
            Some(loaded) => loaded
                .session
                .messages()
                .iter()
                .map(|m| {
                    m.content()
                        .and_then(|c| c.as_str())
                        .unwrap_or("")
                        .to_owned()
                })
                .collect(),
            None => Vec::new(),
        };
        let journal = FileJournal::open(dir).map_err(|e| e.to_string())?;
        let entries = journal
            .read_since(0, None)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>((messages, entries))
    })?;

    // Turns in the session: each user message followed by its own assistant message.
    let mut seen = BTreeSet::new();
    let mut pairs = messages.chunks(2);
    for pair in pairs.by_ref() {
        let [user, assistant] = pair else {
            result.interleaved += 1;
            continue;
        };
        let Some(turn) = user.strip_suffix("-u") else {
            result.interleaved += 1;
            continue;
        };
        if assistant.strip_suffix("-a") != Some(turn) {
            result.interleaved += 1;
        }
        if !seen.insert(turn.to_owned()) {
            result.doubled += 1;
        }
    }
    for (id, turn) in acked.keys() {
        if !seen.contains(&format!("w{id}-t{turn}")) {
            result.lost += 1;
        }
    }
    // The journal: cursors 1..N, each acknowledged cursor holding its own turn.
    for (index, entry) in entries.iter().enumerate() {
        if entry.cursor != index as u64 + 1 {
            result.gaps += 1;
        }
    }
    for ((id, turn), cursor) in &acked {
        let found = entries.get((*cursor as usize).wrapping_sub(1));
        if found.is_none_or(|e| e.cursor != *cursor || e.content != format!("w{id}-t{turn}")) {
            result.crossed += 1;
        }
    }
    Ok(result)
}
