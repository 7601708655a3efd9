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

mod replay;

#[cfg(test)]
mod tests;
