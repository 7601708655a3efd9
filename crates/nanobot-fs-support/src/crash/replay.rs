//! A recorded trace replayed to a point, and what a power loss there leaves.

use super::*;

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
        let mut replay = self.replay(point);
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
        replay.keep_entries(&mut rng, keep_percent, &mut state);
        replay.keep_writes(&mut rng, keep_percent, &mut state);
        replay.surviving_files(&mut state);
        state
    }

    /// The first `point` operations: file data synced or pending, directory entries
    /// synced (in `durable`) or pending.
    fn replay(&self, point: usize) -> Replay {
        let durable = Tree {
            files: self.files.clone(),
            dirs: self.dirs.clone(),
        };
        let mut replay = Replay {
            contents: self.contents.clone(),
            pending: BTreeMap::new(),
            current: durable.clone(),
            durable,
            entries: Vec::new(),
        };
        for event in self.events.iter().take(point) {
            if let Some(entry) = replay.event(event) {
                replay.current.apply(&entry);
                replay.entries.push(entry);
            }
        }
        replay
    }
}

/// A change to a directory's entries, waiting for the directory's fsync.
#[derive(Debug, Clone)]
pub(super) enum Entry {
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
pub(super) struct Tree {
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
pub(super) enum DataOp {
    Write { offset: u64, bytes: Vec<u8> },
    SetLen(u64),
}

pub(super) fn apply_data(content: &mut Vec<u8>, op: &DataOp) {
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
pub(super) struct Rng(u64);

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

/// A trace replayed up to a point.
pub(super) struct Replay {
    contents: HashMap<NodeId, Vec<u8>>,
    pending: BTreeMap<NodeId, Vec<DataOp>>,
    durable: Tree,
    current: Tree,
    entries: Vec<Entry>,
}

impl Replay {
    /// Applies one event; the directory entry it adds, if any.
    fn event(&mut self, event: &Event) -> Option<Entry> {
        match event {
            Event::Create { path, node } => {
                self.contents.insert(*node, Vec::new());
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
                self.pending.entry(*node).or_default().push(DataOp::Write {
                    offset: *offset,
                    bytes: bytes.clone(),
                });
                None
            }
            Event::SetLen { node, len } => {
                let ops = self.pending.entry(*node).or_default();
                ops.push(DataOp::SetLen(*len));
                None
            }
            Event::SyncFile { node } => {
                if let Some(ops) = self.pending.remove(node) {
                    let content = self.contents.entry(*node).or_default();
                    for op in &ops {
                        apply_data(content, op);
                    }
                }
                None
            }
            Event::SyncDir { dir } => {
                let durable = &mut self.durable;
                self.entries.retain(|entry| {
                    if entry.dirs().contains(dir) {
                        durable.apply(entry);
                        false
                    } else {
                        true
                    }
                });
                None
            }
            Event::Rename { from, to } => self.current.files.get(from).map(|node| Entry::Move {
                from: from.clone(),
                to: to.clone(),
                node: *node,
            }),
            Event::Link { from, to } => self.current.files.get(from).map(|node| Entry::Put {
                path: to.clone(),
                node: *node,
            }),
            Event::Remove { path } => Some(Entry::Remove { path: path.clone() }),
            Event::Mkdir { path } => Some(Entry::Mkdir { path: path.clone() }),
            Event::RemoveTree { path } => Some(Entry::RemoveTree { path: path.clone() }),
        }
    }

    /// Pending directory entries survive in order, each with `keep_percent` chance, until
    /// one of a directory is lost (the later ones of that directory are lost too).
    fn keep_entries(&mut self, rng: &mut Rng, keep_percent: u64, state: &mut CrashState) {
        let mut cut: BTreeSet<PathBuf> = BTreeSet::new();
        for entry in &self.entries {
            let dirs = entry.dirs();
            if !dirs.iter().any(|d| cut.contains(d)) && rng.chance(keep_percent) {
                self.durable.apply(entry);
            } else {
                state.dropped_entries += 1;
                cut.extend(dirs);
            }
        }
    }

    /// Pending writes of each file survive as a prefix; the first lost one may be torn at
    /// a sector boundary.
    fn keep_writes(&mut self, rng: &mut Rng, keep_percent: u64, state: &mut CrashState) {
        for (node, ops) in &self.pending {
            let content = self.contents.entry(*node).or_default();
            let mut kept = 0;
            while kept < ops.len() && rng.chance(keep_percent) {
                apply_data(content, &ops[kept]);
                kept += 1;
            }
            state.dropped_writes += ops.len() - kept;
            if let Some(DataOp::Write { offset, bytes }) = ops.get(kept)
                && keep_percent > 0
                && rng.chance(50)
                && tear(content, *offset, bytes, rng)
            {
                state.torn_writes += 1;
            }
        }
    }

    /// The files reachable from the surviving directories, with their contents.
    fn surviving_files(&self, state: &mut CrashState) {
        state.dirs = self.durable.dirs.clone();
        for (path, node) in &self.durable.files {
            let reachable = path
                .parent()
                .is_none_or(|p| p.as_os_str().is_empty() || self.durable.dirs.contains(p));
            if reachable {
                let content = self.contents.get(node).cloned().unwrap_or_default();
                state.files.insert(path.clone(), content);
            }
        }
    }
}

/// A write that reached the disk up to a sector boundary inside it (whether it did);
/// when it grew the file, the new length may have reached the disk without the data.
pub(super) fn tear(content: &mut Vec<u8>, offset: u64, bytes: &[u8], rng: &mut Rng) -> bool {
    let end = offset + bytes.len() as u64;
    let first = (offset / SECTOR + 1) * SECTOR;
    if first >= end {
        return false;
    }
    let boundaries = (end - 1 - first) / SECTOR + 1;
    let at = first + rng.below(boundaries) * SECTOR;
    let part = &bytes[..usize::try_from(at - offset).unwrap_or(0)];
    let grew = end > content.len() as u64;
    apply_data(
        content,
        &DataOp::Write {
            offset,
            bytes: part.to_vec(),
        },
    );
    if grew && rng.chance(33) {
        // The length reached the disk, the rest of the data did not.
        content.resize(usize::try_from(end).unwrap_or(0), 0);
    }
    true
}
