//! A crash-filesystem double (feature `test-util`): what a power loss could leave of a
//! directory, at any moment of a workload.
//!
//! A [`Recorder`] snapshots a directory, then (installed with [`crate::observe::watch`])
//! records every file operation of [`crate::io`] below it as it happens on the real disk,
//! with marks the workload sets when a store acknowledged something. [`Trace::crash_state`]
//! replays the first `point` operations into a model of the file system that keeps apart
//! what reached stable storage and what did not, and picks, from a seed, what of the rest a
//! power loss keeps:
//!
//! - a file's bytes are durable after its fsync; of the writes after that, a prefix survives,
//!   the next one may be torn at a 512-byte sector boundary, and the length may have grown
//!   while the data did not (zeros), as on file systems that allocate late;
//! - a directory's entries (new files, renames, links, removals, new directories) are
//!   durable after the directory's fsync; of those after it, a prefix survives, directory
//!   by directory, independently of the file data (a rename may survive while the renamed
//!   file's data does not, and the other way round);
//! - different files and directories lose their unsynced changes independently, so a later
//!   write to one file can survive an earlier write to another (reordering).
//!
//! [`CrashState::materialize`] writes the result into a fresh directory, where the stores
//! are opened as after a reboot. This is the model of ALICE and of SQLite's crash tests,
//! not of one file system: it allows every outcome POSIX allows and a little more (an
//! fsynced new file whose directory was not synced is lost, as POSIX permits and ext4 in
//! practice does not).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use crate::io::Op;
use crate::observe::Observer;

/// The sector a disk writes whole: a torn write keeps whole sectors only.
const SECTOR: u64 = 512;

type NodeId = u32;

/// One recorded operation, paths relative to the recorder's root.
#[derive(Debug, Clone)]
enum Event {
    Create {
        path: PathBuf,
        node: NodeId,
    },
    Write {
        node: NodeId,
        offset: u64,
        bytes: Vec<u8>,
    },
    SetLen {
        node: NodeId,
        len: u64,
    },
    SyncFile {
        node: NodeId,
    },
    SyncDir {
        dir: PathBuf,
    },
    Rename {
        from: PathBuf,
        to: PathBuf,
    },
    Link {
        from: PathBuf,
        to: PathBuf,
    },
    Remove {
        path: PathBuf,
    },
    Mkdir {
        path: PathBuf,
    },
    RemoveTree {
        path: PathBuf,
    },
}

#[derive(Debug, Default)]
struct Recording {
    files: BTreeMap<PathBuf, NodeId>,
    dirs: BTreeSet<PathBuf>,
    contents: HashMap<NodeId, Vec<u8>>,
    node_of_inode: HashMap<u64, NodeId>,
    next_node: NodeId,
    opening: Option<(PathBuf, bool)>,
    creating_dirs: Vec<PathBuf>,
    events: Vec<Event>,
    marks: Vec<(usize, u64)>,
    untracked: u64,
}

/// Records the file operations below a directory; see the module documentation.
#[derive(Debug)]
pub struct Recorder {
    root: PathBuf,
    recording: Mutex<Recording>,
}

#[cfg(unix)]
fn inode(meta: &fs::Metadata) -> u64 {
    std::os::unix::fs::MetadataExt::ino(meta)
}

#[cfg(not(unix))]
fn inode(_meta: &fs::Metadata) -> u64 {
    0
}

impl Recorder {
    /// Snapshots everything below `root` (taken as durable) and starts an empty record.
    /// Install it with [`crate::observe::watch`] on the same `root`.
    pub fn start(root: &Path) -> io::Result<Recorder> {
        let mut recording = Recording::default();
        let mut stack = vec![PathBuf::new()];
        while let Some(rel) = stack.pop() {
            for entry in fs::read_dir(root.join(&rel))? {
                let entry = entry?;
                let kind = entry.file_type()?;
                let rel = rel.join(entry.file_name());
                if kind.is_dir() {
                    recording.dirs.insert(rel.clone());
                    stack.push(rel);
                } else if kind.is_file() {
                    let meta = entry.metadata()?;
                    let node = recording.new_node(inode(&meta));
                    recording.contents.insert(node, fs::read(entry.path())?);
                    recording.files.insert(rel, node);
                }
            }
        }
        Ok(Recorder {
            root: root.to_path_buf(),
            recording: Mutex::new(recording),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recording> {
        self.recording
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks the present moment with `tag` (a workload's acknowledgement): a crash at any
    /// later point happened after it.
    pub fn mark(&self, tag: u64) {
        let mut recording = self.lock();
        let at = recording.events.len();
        recording.marks.push((at, tag));
    }

    /// How many operations it has recorded.
    pub fn operations(&self) -> usize {
        self.lock().events.len()
    }

    /// The record so far.
    pub fn trace(&self) -> Trace {
        let recording = self.lock();
        Trace {
            files: recording.files.clone(),
            dirs: recording.dirs.clone(),
            contents: recording.contents.clone(),
            events: recording.events.clone(),
            marks: recording.marks.clone(),
            untracked: recording.untracked,
        }
    }

    fn relative(&self, path: &Path) -> Option<PathBuf> {
        path.strip_prefix(&self.root).ok().map(Path::to_path_buf)
    }
}

impl Recording {
    fn new_node(&mut self, inode: u64) -> NodeId {
        let node = self.next_node;
        self.next_node += 1;
        self.node_of_inode.insert(inode, node);
        node
    }

    /// The node of an open file; a file this record has not seen (written by something
    /// that bypasses [`crate::io`]) is taken as durable with what it holds now.
    fn node_of(&mut self, file: &File) -> Option<NodeId> {
        let meta = file.metadata().ok()?;
        if let Some(node) = self.node_of_inode.get(&inode(&meta)) {
            return Some(*node);
        }
        self.untracked += 1;
        let node = self.new_node(inode(&meta));
        let mut bytes = vec![0; usize::try_from(meta.len()).unwrap_or(0)];
        let read = crate::io::read_at_unwatched(file, 0, &mut bytes).unwrap_or(0);
        bytes.truncate(read);
        self.contents.insert(node, bytes);
        Some(node)
    }
}

impl Observer for Recorder {
    fn before(&self, op: &Op<'_>) -> io::Result<Option<usize>> {
        let mut recording = self.lock();
        match *op {
            Op::Open { path, .. } => {
                recording.opening = Some((path.to_path_buf(), fs::symlink_metadata(path).is_ok()));
            }
            Op::Write { file, .. } | Op::SetLen { file, .. } | Op::Sync { file, .. } => {
                recording.node_of(file);
            }
            Op::CreateDir { path } => {
                let mut missing = Vec::new();
                let mut at = Some(path);
                while let Some(dir) = at {
                    if dir.is_dir() || !dir.starts_with(&self.root) || dir == self.root {
                        break;
                    }
                    missing.push(dir.to_path_buf());
                    at = dir.parent();
                }
                missing.reverse();
                recording.creating_dirs = missing;
            }
            _ => {}
        }
        Ok(None)
    }

    fn after(&self, op: &Op<'_>) {
        let mut recording = self.lock();
        let event = match *op {
            Op::Open {
                path,
                create,
                truncate,
            } => {
                let existed = match recording.opening.take() {
                    Some((opened, existed)) if opened == path => existed,
                    _ => true,
                };
                let Some(rel) = self.relative(path) else {
                    return;
                };
                let Ok(meta) = fs::metadata(path) else {
                    return;
                };
                if create && !existed {
                    let node = recording.new_node(inode(&meta));
                    recording.contents.insert(node, Vec::new());
                    Some(Event::Create { path: rel, node })
                } else if truncate {
                    let node = recording.node_of_inode.get(&inode(&meta)).copied();
                    node.map(|node| Event::SetLen { node, len: 0 })
                } else {
                    None
                }
            }
            Op::Write {
                file,
                offset,
                bytes,
                ..
            } => recording.node_of(file).map(|node| Event::Write {
                node,
                offset,
                bytes: bytes.to_vec(),
            }),
            Op::SetLen { file, len, .. } => recording
                .node_of(file)
                .map(|node| Event::SetLen { node, len }),
            Op::Sync { file, .. } => recording.node_of(file).map(|node| Event::SyncFile { node }),
            Op::SyncDir { path } => self.relative(path).map(|dir| Event::SyncDir { dir }),
            Op::Rename { from, to } => match (self.relative(from), self.relative(to)) {
                (Some(from), Some(to)) => Some(Event::Rename { from, to }),
                _ => {
                    recording.untracked += 1;
                    None
                }
            },
            Op::Link { from, to } => match (self.relative(from), self.relative(to)) {
                (Some(from), Some(to)) => Some(Event::Link { from, to }),
                _ => {
                    recording.untracked += 1;
                    None
                }
            },
            Op::Remove { path } => self.relative(path).map(|path| Event::Remove { path }),
            Op::RemoveDir { path } => self.relative(path).map(|path| Event::RemoveTree { path }),
            Op::CreateDir { .. } => {
                let made = std::mem::take(&mut recording.creating_dirs);
                for dir in made {
                    if let Some(path) = self.relative(&dir) {
                        recording.events.push(Event::Mkdir { path });
                    }
                }
                None
            }
            Op::Read { .. } => None,
        };
        if let Some(event) = event {
            recording.events.push(event);
        }
    }
}

/// A recorded workload: the directory as it was, every operation since, and the marks.
#[derive(Debug, Clone)]
pub struct Trace {
    files: BTreeMap<PathBuf, NodeId>,
    dirs: BTreeSet<PathBuf>,
    contents: HashMap<NodeId, Vec<u8>>,
    events: Vec<Event>,
    marks: Vec<(usize, u64)>,
    untracked: u64,
}

/// What a power loss at one point left: the files and directories, and what it dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrashState {
    dirs: BTreeSet<PathBuf>,
    files: BTreeMap<PathBuf, Vec<u8>>,
    /// Unsynced file writes (or length changes) that did not survive.
    pub dropped_writes: usize,
    /// Writes that survived in part.
    pub torn_writes: usize,
    /// Unsynced directory changes that did not survive.
    pub dropped_entries: usize,
}

/// A change to a directory's entries, waiting for the directory's fsync.
#[derive(Debug, Clone)]
enum Entry {
    Put {
        path: PathBuf,
        node: NodeId,
    },
    Move {
        from: PathBuf,
        to: PathBuf,
        node: NodeId,
    },
    Remove {
        path: PathBuf,
    },
    Mkdir {
        path: PathBuf,
    },
    RemoveTree {
        path: PathBuf,
    },
}

impl Entry {
    fn dirs(&self) -> Vec<PathBuf> {
        let parent = |p: &Path| p.parent().map(Path::to_path_buf).unwrap_or_default();
        match self {
            Entry::Move { from, to, .. } => vec![parent(from), parent(to)],
            Entry::Put { path, .. }
            | Entry::Remove { path }
            | Entry::Mkdir { path }
            | Entry::RemoveTree { path } => vec![parent(path)],
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Tree {
    files: BTreeMap<PathBuf, NodeId>,
    dirs: BTreeSet<PathBuf>,
}

impl Tree {
    fn apply(&mut self, entry: &Entry) {
        match entry {
            Entry::Put { path, node } => {
                self.files.insert(path.clone(), *node);
            }
            Entry::Move { from, to, node } => {
                if self.files.get(from) == Some(node) {
                    self.files.remove(from);
                }
                self.files.insert(to.clone(), *node);
            }
            Entry::Remove { path } => {
                self.files.remove(path);
            }
            Entry::Mkdir { path } => {
                self.dirs.insert(path.clone());
            }
            Entry::RemoveTree { path } => {
                self.files.retain(|p, _| !p.starts_with(path));
                self.dirs.retain(|p| !p.starts_with(path));
            }
        }
    }
}

#[derive(Debug, Clone)]
enum DataOp {
    Write { offset: u64, bytes: Vec<u8> },
    SetLen(u64),
}

fn apply_data(content: &mut Vec<u8>, op: &DataOp) {
    match op {
        DataOp::Write { offset, bytes } => {
            let start = usize::try_from(*offset).unwrap_or(usize::MAX);
            let end = start.saturating_add(bytes.len());
            if content.len() < end {
                content.resize(end, 0);
            }
            content[start..end].copy_from_slice(bytes);
        }
        DataOp::SetLen(len) => content.resize(usize::try_from(*len).unwrap_or(0), 0),
    }
}

/// SplitMix64: a small seeded generator, so a crash state is a function of its seed.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

impl Trace {
    /// How many operations were recorded: the crash points are `0..=operations()` (a crash
    /// at point `p` comes after the first `p` operations).
    pub fn operations(&self) -> usize {
        self.events.len()
    }

    /// The marks set before a crash at `point`, in order.
    pub fn marks_before(&self, point: usize) -> Vec<u64> {
        self.marks
            .iter()
            .filter(|(at, _)| *at <= point)
            .map(|(_, tag)| *tag)
            .collect()
    }

    /// Operations on files the record met only when they were written (something wrote
    /// them without [`crate::io`]): a workload should have none.
    pub fn untracked(&self) -> u64 {
        self.untracked
    }

    /// How many of the recorded operations were fsyncs (of files or directories).
    pub fn syncs(&self) -> usize {
        self.events
            .iter()
            .filter(|e| matches!(e, Event::SyncFile { .. } | Event::SyncDir { .. }))
            .count()
    }

    /// What a power loss after the first `point` operations leaves, drawn from `seed`.
    /// About a quarter of the seeds lose everything unsynced, a seventh keep everything
    /// (as a process crash would), and the rest keep a random part.
    pub fn crash_state(&self, point: usize, seed: u64) -> CrashState {
        let mut rng = Rng(seed ^ 0x5DEE_CE66_D1CE_5EED ^ (point as u64).rotate_left(32));
        let mut contents = self.contents.clone();
        let mut pending: BTreeMap<NodeId, Vec<DataOp>> = BTreeMap::new();
        let mut durable = Tree {
            files: self.files.clone(),
            dirs: self.dirs.clone(),
        };
        let mut current = durable.clone();
        let mut entries: Vec<Entry> = Vec::new();
        for event in self.events.iter().take(point) {
            let entry = match event {
                Event::Create { path, node } => {
                    contents.insert(*node, Vec::new());
                    Some(Entry::Put {
                        path: path.clone(),
                        node: *node,
                    })
                }
                Event::Write {
                    node,
                    offset,
                    bytes,
                } => {
                    pending.entry(*node).or_default().push(DataOp::Write {
                        offset: *offset,
                        bytes: bytes.clone(),
                    });
                    None
                }
                Event::SetLen { node, len } => {
                    pending.entry(*node).or_default().push(DataOp::SetLen(*len));
                    None
                }
                Event::SyncFile { node } => {
                    if let Some(ops) = pending.remove(node) {
                        let content = contents.entry(*node).or_default();
                        for op in &ops {
                            apply_data(content, op);
                        }
                    }
                    None
                }
                Event::SyncDir { dir } => {
                    entries.retain(|entry| {
                        if entry.dirs().contains(dir) {
                            durable.apply(entry);
                            false
                        } else {
                            true
                        }
                    });
                    None
                }
                Event::Rename { from, to } => current.files.get(from).map(|node| Entry::Move {
                    from: from.clone(),
                    to: to.clone(),
                    node: *node,
                }),
                Event::Link { from, to } => current.files.get(from).map(|node| Entry::Put {
                    path: to.clone(),
                    node: *node,
                }),
                Event::Remove { path } => Some(Entry::Remove { path: path.clone() }),
                Event::Mkdir { path } => Some(Entry::Mkdir { path: path.clone() }),
                Event::RemoveTree { path } => Some(Entry::RemoveTree { path: path.clone() }),
            };
            if let Some(entry) = entry {
                current.apply(&entry);
                entries.push(entry);
            }
        }

        // The power goes: what of the unsynced changes survives.
        let keep_percent = match rng.below(7) {
            0 | 1 => 0,
            2 => 100,
            _ => 20 + rng.below(70),
        };
        let mut state = CrashState {
            dirs: BTreeSet::new(),
            files: BTreeMap::new(),
            dropped_writes: 0,
            torn_writes: 0,
            dropped_entries: 0,
        };
        let mut cut: BTreeSet<PathBuf> = BTreeSet::new();
        for entry in &entries {
            let dirs = entry.dirs();
            if !dirs.iter().any(|d| cut.contains(d)) && rng.chance(keep_percent) {
                durable.apply(entry);
            } else {
                state.dropped_entries += 1;
                cut.extend(dirs);
            }
        }
        for (node, ops) in &pending {
            let content = contents.entry(*node).or_default();
            let mut kept = 0;
            while kept < ops.len() && rng.chance(keep_percent) {
                apply_data(content, &ops[kept]);
                kept += 1;
            }
            state.dropped_writes += ops.len() - kept;
            if let Some(DataOp::Write { offset, bytes }) = ops.get(kept)
                && keep_percent > 0
                && rng.chance(50)
            {
                let end = offset + bytes.len() as u64;
                let first = (offset / SECTOR + 1) * SECTOR;
                if first < end {
                    let boundaries = (end - 1 - first) / SECTOR + 1;
                    let at = first + rng.below(boundaries) * SECTOR;
                    let part = &bytes[..usize::try_from(at - offset).unwrap_or(0)];
                    let grew = end > content.len() as u64;
                    apply_data(
                        content,
                        &DataOp::Write {
                            offset: *offset,
                            bytes: part.to_vec(),
                        },
                    );
                    if grew && rng.chance(33) {
                        // The length reached the disk, the rest of the data did not.
                        content.resize(usize::try_from(end).unwrap_or(0), 0);
                    }
                    state.torn_writes += 1;
                }
            }
        }
        state.dirs = durable.dirs.clone();
        for (path, node) in &durable.files {
            let reachable = path
                .parent()
                .is_none_or(|p| p.as_os_str().is_empty() || durable.dirs.contains(p));
            if reachable {
                let content = contents.get(node).cloned().unwrap_or_default();
                state.files.insert(path.clone(), content);
            }
        }
        state
    }
}

impl CrashState {
    /// Writes the state into `dir` (which must be empty or missing), as the disk would
    /// show it after the reboot.
    pub fn materialize(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)?;
        for rel in &self.dirs {
            fs::create_dir_all(dir.join(rel))?;
        }
        for (rel, bytes) in &self.files {
            fs::write(dir.join(rel), bytes)?;
        }
        Ok(())
    }

    /// The bytes of the file `rel` in this state.
    pub fn file(&self, rel: &Path) -> Option<&[u8]> {
        self.files.get(rel).map(Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::io::{self as fsio, Open};
    use crate::observe::watch;
    use std::sync::Arc;

    fn dir(label: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("fs-crash-{label}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_synced_append_survives_every_crash_and_an_unsynced_one_only_sometimes() {
        let root = dir("append");
        let path = root.join("log");
        fs::write(&path, b"old\n").unwrap();
        let recorder = Arc::new(Recorder::start(&root).unwrap());
        let _watching = watch(&root, recorder.clone());
        let mut file = fsio::open(&path, Open::APPEND_OR_CREATE).unwrap();
        fsio::append(&mut file, &path, b"synced\n").unwrap();
        fsio::sync_data(&file, &path).unwrap();
        recorder.mark(1);
        fsio::append(&mut file, &path, b"unsynced\n").unwrap();
        let trace = recorder.trace();
        assert_eq!(trace.operations(), 3);
        assert_eq!(trace.marks_before(3), vec![1]);
        let mut outcomes = BTreeSet::new();
        for seed in 0..200 {
            let state = trace.crash_state(3, seed);
            let bytes = state.file(Path::new("log")).unwrap().to_vec();
            assert!(bytes.starts_with(b"old\nsynced\n"), "{bytes:?}");
            outcomes.insert(bytes);
        }
        assert!(outcomes.contains(b"old\nsynced\n".as_slice()));
        assert!(outcomes.contains(b"old\nsynced\nunsynced\n".as_slice()));
        // Before the fsync, the first append may be gone too.
        let lost = (0..200)
            .any(|seed| trace.crash_state(1, seed).file(Path::new("log")) == Some(b"old\n"));
        assert!(lost);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_new_file_needs_its_directory_synced_and_a_rename_is_all_or_nothing() {
        let root = dir("rename");
        let recorder = Arc::new(Recorder::start(&root).unwrap());
        let _watching = watch(&root, recorder.clone());
        let path = root.join("doc");
        crate::write_atomic(&path, b"first version", crate::Sync::No).unwrap();
        let unsynced_end = recorder.operations();
        crate::write_atomic(&path, b"second version", crate::Sync::Yes).unwrap();
        let trace = recorder.trace();
        for seed in 0..300 {
            let state = trace.crash_state(trace.operations(), seed);
            assert_eq!(state.file(Path::new("doc")), Some(&b"second version"[..]));
            let early = trace.crash_state(unsynced_end, seed);
            let doc = early.file(Path::new("doc"));
            // Unsynced: gone, empty (the rename came through, the data did not), or whole.
            assert!(
                matches!(doc, None | Some(b"") | Some(b"first version")),
                "{doc:?}"
            );
        }
        let state = trace.crash_state(trace.operations(), 7);
        let out = dir("rename-out");
        state.materialize(&out).unwrap();
        assert_eq!(fs::read(out.join("doc")).unwrap(), b"second version");
        fs::remove_dir_all(&root).unwrap();
        fs::remove_dir_all(&out).unwrap();
    }

    #[test]
    fn a_torn_write_keeps_whole_sectors() {
        let root = dir("torn");
        let path = root.join("big");
        let recorder = Arc::new(Recorder::start(&root).unwrap());
        let _watching = watch(&root, recorder.clone());
        let file = fsio::open(&path, Open::WRITE_OR_CREATE).unwrap();
        fsio::sync_dir(&root).unwrap();
        fsio::write_at(&file, &path, 0, &[7u8; 2000]).unwrap();
        let trace = recorder.trace();
        let mut lengths = BTreeSet::new();
        for seed in 0..300 {
            let state = trace.crash_state(trace.operations(), seed);
            let Some(bytes) = state.file(Path::new("big")) else {
                continue;
            };
            let sevens = bytes.iter().take_while(|b| **b == 7).count();
            assert!(sevens % 512 == 0 || sevens == 2000, "{sevens}");
            assert!(bytes[sevens..].iter().all(|b| *b == 0));
            lengths.insert(bytes.len());
        }
        assert!(lengths.len() > 2, "{lengths:?}");
        fs::remove_dir_all(&root).unwrap();
    }
}
