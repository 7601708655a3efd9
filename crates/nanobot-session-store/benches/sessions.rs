//! Workloads W1-W4 of `../shared/bench/workload.md`, replayed on our session store with the
//! peer script's flags and JSON shape, so `cargo xtask bench` can put the two side by side.
//!
//! ```text
//! cargo bench -p nanobot-session-store --bench sessions -- [--only append_save,cold_load,get_history,list_sessions]
//!     [--reps 5] [--append-sizes 1000,10000] [--append-window 50] [--append-fsync-sizes 1000]
//!     [--load-n 10000] [--history-budgets 8000,190784] [--list-count 1000] [--list-per 20]
//!     [--tmp-root DIR] [--quick]
//! ```
//!
//! Each workload runs in a fresh worker process (this binary again, with `--worker`), so its
//! peak RSS (`VmHWM`) belongs to it alone, as in the peer's script.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    missing_docs
)]

#[path = "sessions/scale.rs"]
mod scale;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use nanobot_bench_workload::{SEED, message_stream};
use nanobot_llm_port::{Cl100kBase, SystemClock};
use nanobot_session_store::{
    Durability, FileSessionStore, FileStoreOptions, HistoryOptions, SessionKey, SessionManager,
    SessionStore, StoredMessage, get_history,
};
use serde_json::{Map, Value, json};

#[derive(Debug, Clone)]
struct Params {
    only: Vec<String>,
    reps: usize,
    append_sizes: Vec<usize>,
    append_window: usize,
    append_fsync_sizes: Vec<usize>,
    load_n: usize,
    history_budgets: Vec<usize>,
    list_count: usize,
    list_per: usize,
    scale_sessions: usize,
    scale_messages: usize,
    tmp_root: PathBuf,
}

impl Params {
    fn parse(args: &[String]) -> (Params, Option<(String, Value)>) {
        let mut p = Params {
            only: Vec::new(),
            reps: 5,
            append_sizes: vec![1000, 10_000],
            append_window: 50,
            append_fsync_sizes: vec![1000],
            load_n: 10_000,
            history_budgets: vec![8000, 190_784],
            list_count: 1000,
            list_per: 20,
            scale_sessions: 100_000,
            scale_messages: 1_000_000,
            tmp_root: std::env::temp_dir(),
        };
        let mut worker = None;
        let list = |v: &str| {
            v.split(',')
                .filter(|s| !s.is_empty())
                .map(|s| s.parse().expect("a number"))
                .collect()
        };
        let mut i = 0;
        while i < args.len() {
            let value = args.get(i + 1).cloned().unwrap_or_default();
            match args[i].as_str() {
                "--only" => p.only = value.split(',').map(str::to_owned).collect(),
                "--reps" => p.reps = value.parse().expect("--reps N"),
                "--append-sizes" => p.append_sizes = list(&value),
                "--append-window" => p.append_window = value.parse().expect("--append-window N"),
                "--append-fsync-sizes" => p.append_fsync_sizes = list(&value),
                "--load-n" => p.load_n = value.parse().expect("--load-n N"),
                "--history-budgets" => p.history_budgets = list(&value),
                "--list-count" => p.list_count = value.parse().expect("--list-count N"),
                "--list-per" => p.list_per = value.parse().expect("--list-per N"),
                "--scale-sessions" => p.scale_sessions = value.parse().expect("--scale-sessions N"),
                "--scale-messages" => p.scale_messages = value.parse().expect("--scale-messages N"),
                "--tmp-root" => p.tmp_root = PathBuf::from(value),
                "--worker" => {
                    let params = args.get(i + 2).cloned().unwrap_or_default();
                    worker = Some((value, serde_json::from_str(&params).expect("worker params")));
                    i += 1;
                }
                "--quick" => {
                    p.reps = 3;
                    p.append_sizes = vec![200, 1000];
                    p.append_fsync_sizes = vec![100];
                    p.load_n = 1000;
                    p.list_count = 100;
                    p.scale_sessions = 1000;
                    p.scale_messages = 20_000;
                    i += 1;
                    continue;
                }
                // cargo bench passes --bench; ignore flags we do not know.
                _ => {
                    i += 1;
                    continue;
                }
            }
            i += 2;
        }
        (p, worker)
    }

    /// The scale workloads run only when named (they take minutes and gigabytes).
    fn wants(&self, name: &str) -> bool {
        if name.starts_with("scale_") {
            return self.only.iter().any(|o| o == name);
        }
        self.only.is_empty() || self.only.iter().any(|o| o == name)
    }
}

fn summarize(mut samples: Vec<f64>) -> Value {
    samples.sort_by(f64::total_cmp);
    let median = samples[samples.len() / 2];
    json!({"median": median, "min": samples[0], "max": samples[samples.len() - 1], "samples": samples})
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len().max(1) as f64
}

fn percentile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)]
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn specs(seed: u64, n: usize) -> Vec<StoredMessage> {
    message_stream(seed, n)
        .into_iter()
        .map(|m| StoredMessage::from_map(m.as_object().cloned().unwrap()))
        .collect()
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(root: &Path, label: &str) -> TempDir {
        let path = root.join(format!(
            "nbrs-{label}-{}-{}",
            std::process::id(),
            Instant::now().elapsed().as_nanos()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn manager(dir: &Path, durability: Durability) -> SessionManager {
    let options = {
        let mut value = FileStoreOptions::default();
        value.durability = durability;
        value.clock = Arc::new(SystemClock);
        value
    };
    let store = FileSessionStore::open(dir, options).unwrap();
    SessionManager::new(Arc::new(store), Arc::new(SystemClock), Arc::new(Cl100kBase))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// W1: add one message and save, N times, on a fresh session.
fn append_save(p: &Params, n: usize, fsync: bool) -> Value {
    let rt = runtime();
    let specs = specs(SEED, n);
    let mut totals = Vec::new();
    let (mut means, mut p50s, mut p99s, mut last100, mut first100, mut at_n) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let mut file_bytes = 0;
    let reps = if fsync { p.reps.min(3) } else { p.reps };
    for _ in 0..reps {
        let dir = TempDir::new(&p.tmp_root, "append");
        let manager = manager(
            &dir.0,
            if fsync {
                Durability::Always
            } else {
                Durability::None
            },
        );
        let key = SessionKey::new("bench:append").unwrap();
        let mut per_save = Vec::with_capacity(n);
        let started = Instant::now();
        rt.block_on(async {
            let handle = manager.get_or_create(&key).await.unwrap();
            for spec in &specs {
                let t = Instant::now();
                handle.add_message(spec.clone());
                manager.save(&handle).await.unwrap();
                per_save.push(t.elapsed().as_secs_f64());
            }
        });
        totals.push(started.elapsed().as_secs_f64());
        means.push(mean(&per_save));
        p50s.push(percentile(&per_save, 0.5));
        p99s.push(percentile(&per_save, 0.99));
        last100.push(mean(&per_save[n.saturating_sub(100)..]));
        first100.push(mean(&per_save[..n.min(100)]));
        at_n.push(mean(&per_save[n.saturating_sub(p.append_window)..]));
        file_bytes = std::fs::metadata(manager_path(&dir.0, &key))
            .map(|m| m.len())
            .unwrap_or(0);
    }
    json!({
        "n": n, "fsync": fsync, "mode": "full", "window": p.append_window,
        "total_s": summarize(totals),
        "per_save_mean_s": summarize(means),
        "per_save_p50_s": summarize(p50s),
        "per_save_p99_s": summarize(p99s),
        "per_save_first100_mean_s": summarize(first100),
        "per_save_last100_mean_s": summarize(last100),
        "per_save_at_n_s": summarize(at_n),
        "final_file_bytes": file_bytes,
    })
}

fn manager_path(dir: &Path, key: &SessionKey) -> PathBuf {
    dir.join(format!("{}.jsonl", key.storage_stem()))
}

/// The fields of a message as a typed struct: what "serde_json's typed parse" means for the
/// W2 floor (the physbench probe parses the same shape).
#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct TypedMessage {
    role: String,
    content: Option<Value>,
    timestamp: Option<String>,
    tool_calls: Option<Vec<Value>>,
    tool_call_id: Option<String>,
    name: Option<String>,
}

/// W2 setup: the 10,000-message session file, written once by the parent process so the
/// load worker's peak memory is the load's own.
fn write_load_session(p: &Params) -> TempDir {
    let rt = runtime();
    let dir = TempDir::new(&p.tmp_root, "load");
    let key = SessionKey::new("bench:load").unwrap();
    let manager = manager(&dir.0, Durability::None);
    rt.block_on(async {
        let handle = manager.get_or_create(&key).await.unwrap();
        for spec in specs(SEED, p.load_n) {
            handle.add_message(spec);
        }
        manager.end_turn(&handle).await.unwrap();
        // The same session, archived up to its end (as after an idle compaction).
        let archived = SessionKey::new("bench:archived").unwrap();
        let handle = manager.get_or_create(&archived).await.unwrap();
        for spec in specs(SEED, p.load_n) {
            handle.add_message(spec);
        }
        handle
            .update(|s| s.set_last_consolidated(p.load_n))
            .unwrap();
        manager.end_turn(&handle).await.unwrap();
    });
    dir
}

/// W2: a fresh manager loads a 10,000-message session.
fn cold_load(p: &Params, dir: &Path) -> Value {
    let rt = runtime();
    let key = SessionKey::new("bench:load").unwrap();
    let path = manager_path(dir, &key);
    let baseline = peak_rss_kib();
    let (mut ctor, mut load) = (Vec::new(), Vec::new());
    for _ in 0..p.reps {
        let t = Instant::now();
        let manager = manager(dir, Durability::None);
        ctor.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let count =
            rt.block_on(async { manager.get_or_create(&key).await.unwrap().message_count() });
        load.push(t.elapsed().as_secs_f64());
        assert_eq!(count, p.load_n);
    }
    let peak_after_load = peak_rss_kib();
    // Opening for replay a long session whose past is archived (the pointer at the end, as
    // after an idle compaction): only the metadata and the live tail are read.
    let archived = SessionKey::new("bench:archived").unwrap();
    let (mut replay_open, mut tail_len) = (Vec::new(), 0);
    for _ in 0..p.reps {
        let store = FileSessionStore::open(dir, FileStoreOptions::default()).unwrap();
        let t = Instant::now();
        let view = rt
            .block_on(store.open_for_replay(&archived))
            .unwrap()
            .unwrap();
        replay_open.push(t.elapsed().as_secs_f64());
        assert_eq!(view.message_count, p.load_n);
        tail_len = view.tail.len();
    }
    // The floor: serde_json's typed parse of every message line, same bytes.
    let bytes = std::fs::read(&path).unwrap();
    let mut typed = Vec::new();
    for _ in 0..p.reps {
        let t = Instant::now();
        let parsed: Vec<TypedMessage> = bytes
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty() && !l.starts_with(b"{\"_type\""))
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect();
        typed.push(t.elapsed().as_secs_f64());
        assert_eq!(parsed.len(), p.load_n);
    }
    json!({
        "n": p.load_n, "file_bytes": bytes.len(),
        "manager_ctor_s": summarize(ctor),
        "load_s": summarize(load),
        "replay_open_archived_s": summarize(replay_open),
        "replay_open_tail_messages": tail_len,
        "serde_json_typed_parse_s": summarize(typed),
        "baseline_rss_kib": baseline,
        "peak_rss_after_load_kib": peak_after_load,
    })
}

/// W3: get_history of a 10,000-message session, first call and cached calls.
fn get_history_workload(p: &Params) -> Value {
    let messages = specs(SEED, p.load_n);
    let mut out = Map::new();
    let mut cases = vec![("default".to_owned(), 0)];
    cases.extend(
        p.history_budgets
            .iter()
            .map(|b| (format!("max_tokens_{b}"), *b)),
    );
    for (label, budget) in cases {
        let options = HistoryOptions::with_token_budget(budget);
        // First call on messages that have never been counted.
        let mut first = Vec::new();
        for _ in 0..p.reps {
            let fresh: Vec<StoredMessage> = messages
                .iter()
                .map(|m| StoredMessage::from_map(m.fields().clone()))
                .collect();
            let t = Instant::now();
            let returned = get_history(&fresh, 0, &options, &Cl100kBase).len();
            first.push(t.elapsed().as_secs_f64());
            std::hint::black_box(returned);
        }
        let _ = get_history(&messages, 0, &options, &Cl100kBase);
        let mut samples = Vec::new();
        let mut returned = 0;
        for _ in 0..p.reps {
            let t = Instant::now();
            returned = get_history(&messages, 0, &options, &Cl100kBase).len();
            samples.push(t.elapsed().as_secs_f64());
        }
        out.insert(
            label,
            json!({"time_s": summarize(samples), "first_call_s": summarize(first), "returned_messages": returned}),
        );
    }
    out.insert("n".into(), json!(p.load_n));
    Value::Object(out)
}

/// W4: list 1,000 sessions of 20 messages on a fresh manager.
fn list_sessions(p: &Params) -> Value {
    let rt = runtime();
    let dir = TempDir::new(&p.tmp_root, "list");
    let corpus = specs(SEED + 4, p.list_count * p.list_per);
    {
        let manager = manager(&dir.0, Durability::None);
        rt.block_on(async {
            for i in 0..p.list_count {
                let key = SessionKey::new(format!("bench:list:{i:05}")).unwrap();
                let handle = manager.get_or_create(&key).await.unwrap();
                for spec in &corpus[i * p.list_per..(i + 1) * p.list_per] {
                    handle.add_message(spec.clone());
                }
                manager.end_turn(&handle).await.unwrap();
            }
        });
    }
    let mut samples = Vec::new();
    for _ in 0..p.reps {
        let manager = manager(&dir.0, Durability::None);
        let t = Instant::now();
        let rows = rt.block_on(manager.list()).unwrap();
        samples.push(t.elapsed().as_secs_f64());
        assert_eq!(rows.len(), p.list_count);
    }
    json!({"count": p.list_count, "messages_per_session": p.list_per, "time_s": summarize(samples)})
}

/// The physical floors on this machine, measured in the same job: one O_APPEND write of a
/// message-sized line, and one small write plus fdatasync.
fn floors(p: &Params) -> Value {
    use std::io::Write;
    let dir = TempDir::new(&p.tmp_root, "floors");
    let line = vec![b'x'; 499]
        .into_iter()
        .chain([b'\n'])
        .collect::<Vec<u8>>();
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.0.join("append.jsonl"))
        .unwrap();
    let mut appends = Vec::new();
    for _ in 0..p.reps {
        let t = Instant::now();
        for _ in 0..10_000 {
            file.write_all(&line).unwrap();
        }
        appends.push(t.elapsed().as_secs_f64() / 10_000.0);
    }
    let mut syncs = Vec::new();
    let mut synced = std::fs::File::create(dir.0.join("sync.bin")).unwrap();
    for _ in 0..p.reps {
        let t = Instant::now();
        for _ in 0..50 {
            synced.write_all(&[b'y'; 128]).unwrap();
            synced.sync_data().unwrap();
        }
        syncs.push(t.elapsed().as_secs_f64() / 50.0);
    }
    json!({"o_append_500B_s": summarize(appends), "write128_fdatasync_s": summarize(syncs)})
}

fn run_worker(name: &str, params: &Value, p: &Params) -> Value {
    let mut result = match name {
        "floors" => floors(p),
        "append_save" => append_save(
            p,
            params["n"].as_u64().unwrap() as usize,
            params["fsync"].as_bool().unwrap(),
        ),
        "cold_load" => cold_load(p, Path::new(params["dir"].as_str().unwrap())),
        "get_history" => get_history_workload(p),
        "list_sessions" => list_sessions(p),
        "scale_list" => scale::scale_list(p),
        "scale_replay" => scale::scale_replay(
            p,
            Path::new(params["dir"].as_str().unwrap()),
            params["write_s"].as_f64().unwrap(),
        ),
        other => panic!("unknown workload {other}"),
    };
    result["peak_rss_kib"] = json!(peak_rss_kib());
    result
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (p, worker) = Params::parse(&args);
    if let Some((name, params)) = worker {
        println!("{}", run_worker(&name, &params, &p));
        return;
    }
    let mut jobs: Vec<(String, String, Value)> = Vec::new();
    if p.wants("append_save") {
        for &n in &p.append_sizes {
            jobs.push((
                format!("append_save_n{n}"),
                "append_save".into(),
                json!({"n": n, "fsync": false}),
            ));
        }
        for &n in &p.append_fsync_sizes {
            jobs.push((
                format!("append_save_fsync_n{n}"),
                "append_save".into(),
                json!({"n": n, "fsync": true}),
            ));
        }
    }
    let load_dir = p.wants("cold_load").then(|| write_load_session(&p));
    let long_session = p
        .wants("scale_replay")
        .then(|| scale::write_long_session(&p));
    let names = [
        "floors",
        "cold_load",
        "get_history",
        "list_sessions",
        "scale_list",
        "scale_replay",
    ];
    for name in names {
        if p.wants(name) {
            let params = match (&load_dir, &long_session) {
                (Some(dir), _) if name == "cold_load" => json!({"dir": dir.0}),
                (_, Some((dir, write_s))) if name == "scale_replay" => {
                    json!({"dir": dir.0, "write_s": write_s})
                }
                _ => json!({}),
            };
            jobs.push((name.into(), name.into(), params));
        }
    }
    let exe = std::env::current_exe().expect("the bench binary's path");
    let mut workloads = BTreeMap::new();
    let started = Instant::now();
    for (label, name, params) in jobs {
        let t = Instant::now();
        let output = Command::new(&exe)
            .args(&args)
            .arg("--worker")
            .arg(&name)
            .arg(params.to_string())
            .output()
            .expect("worker");
        if !output.status.success() {
            eprintln!(
                "{label} failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            std::process::exit(1);
        }
        let result: Value = serde_json::from_slice(&output.stdout).expect("worker JSON");
        eprintln!("[bench] {label}: done in {:.1}s", t.elapsed().as_secs_f64());
        workloads.insert(label, result);
    }
    let report = json!({
        "peer": "nanobot-rs session-store",
        "seed": SEED,
        "reps": p.reps,
        "workloads": workloads,
        "total_wall_s": started.elapsed().as_secs_f64(),
    });
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
}
