#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::fmt;
use std::fs;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(feature = "test-util")]
pub mod crash;
pub mod io;
#[cfg(feature = "test-util")]
pub mod observe;

use crate::io::Open;

/// A file-system operation that failed: what was being done, where, and the OS error.
#[derive(Debug)]
pub struct FsError {
    /// What was being done (`"create"`, `"sync"`, `"replace"`, ...).
    pub action: &'static str,
    /// The file or directory.
    pub path: PathBuf,
    /// The operating system's error.
    pub source: std::io::Error,
}

impl FsError {
    fn new(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        FsError {
            action,
            path: path.into(),
            source,
        }
    }
}

impl fmt::Display for FsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "could not {} {}: {}",
            self.action,
            self.path.display(),
            self.source
        )
    }
}

impl std::error::Error for FsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Whether an I/O error of this kind can pass when the same call is tried again (an
/// interrupted call, a busy resource, a timeout); every store's `is_retryable` asks this.
pub fn is_transient(kind: std::io::ErrorKind) -> bool {
    matches!(
        kind,
        std::io::ErrorKind::Interrupted
            | std::io::ErrorKind::WouldBlock
            | std::io::ErrorKind::TimedOut
            | std::io::ErrorKind::ResourceBusy
    )
}

/// Whether a write waits for stable storage (fsync of the file and its directory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sync {
    /// fsync the file before the rename and the directory after it.
    Yes,
    /// Leave write-back to the OS: a process crash still leaves old or new, whole; a power
    /// loss may lose the change, but a replaced file's old data stays whole (its new bytes
    /// are synced before the rename all the same).
    No,
}

/// How [`install`] puts the new file in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Install {
    /// Replace whatever is at the path (rename).
    Replace,
    /// Create the path, failing with `AlreadyExists` if it exists (a hard link).
    CreateNew,
}

/// A temporary name beside `path` no other writer (thread or process) uses at once.
fn temp_beside(path: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    dir.join(format!(".{name}.{}.{n}.tmp", std::process::id()))
}

/// Puts `content` at `path` whole: written to a temporary file beside it (synced when
/// `sync` says so), then renamed or linked into place and the directory synced. A crash
/// leaves the old file or the new one, never a mix, and never a stray temporary file
/// that a later write could trip on. Returns the metadata of the file now at `path`.
pub fn install(
    path: &Path,
    content: &[u8],
    how: Install,
    sync: Sync,
) -> Result<fs::Metadata, FsError> {
    let temp = temp_beside(path);
    let result = (|| {
        let file =
            io::open(&temp, Open::CREATE_NEW).map_err(|e| FsError::new("create", &temp, e))?;
        io::write_at(&file, &temp, 0, content).map_err(|e| FsError::new("write", &temp, e))?;
        // Replacing a file that holds data: its new bytes reach the disk before the new name
        // does, even when nothing else is synced. Otherwise a power loss could keep the
        // rename and lose the bytes, and take the old file's long-durable data with it.
        let replaces_data = how == Install::Replace && path.exists();
        if sync == Sync::Yes || replaces_data {
            io::sync_all(&file, &temp).map_err(|e| FsError::new("sync", &temp, e))?;
        }
        let metadata = file
            .metadata()
            .map_err(|e| FsError::new("inspect", &temp, e))?;
        match how {
            Install::Replace => {
                io::rename(&temp, path).map_err(|e| FsError::new("replace", path, e))?;
            }
            Install::CreateNew => {
                io::hard_link(&temp, path).map_err(|e| FsError::new("create", path, e))?;
            }
        }
        if sync == Sync::Yes {
            sync_dir(path.parent().unwrap_or(Path::new(".")))?;
        }
        Ok(metadata)
    })();
    if temp.exists() {
        let _ = io::remove_file(&temp);
    }
    result
}

/// Replaces `path` with `content` atomically, creating its directory if needed (durably,
/// when `sync` says so).
pub fn write_atomic(path: &Path, content: &[u8], sync: Sync) -> Result<(), FsError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    match sync {
        Sync::Yes => create_dir_durable(dir)?,
        Sync::No => io::create_dir_all(dir).map_err(|e| FsError::new("create", dir, e))?,
    }
    install(path, content, Install::Replace, sync).map(|_| ())
}

/// Creates `dir` and its missing parents so that they survive a power loss: each new
/// directory's parent is fsynced once it appears. Without that, a store created in a new
/// directory could vanish whole with the directory entry, acknowledged writes and all.
/// Nothing is synced when `dir` exists.
pub fn create_dir_durable(dir: &Path) -> Result<(), FsError> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut missing = Vec::new();
    let mut at = Some(dir);
    while let Some(d) = at {
        if d.as_os_str().is_empty() || d.is_dir() {
            break;
        }
        missing.push(d);
        at = d.parent();
    }
    io::create_dir_all(dir).map_err(|e| FsError::new("create", dir, e))?;
    for made in missing.iter().rev() {
        let parent = made
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        sync_dir(parent)?;
    }
    Ok(())
}

/// fsyncs a directory, so a rename or a new entry in it survives a power loss. A file
/// system that cannot sync a directory (`InvalidInput`) is accepted: the rename is atomic
/// all the same.
pub fn sync_dir(dir: &Path) -> Result<(), FsError> {
    match io::sync_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => Ok(()),
        Err(e) => Err(FsError::new("sync", dir, e)),
    }
}

/// Appends damaged bytes to the sidecar at `sidecar`, each piece under a header line
/// `### nanobot-rs repair <stamp>: <label>`, byte for byte, and syncs it: what a repair
/// removes from a file is kept, never dropped.
pub fn keep_aside(
    sidecar: &Path,
    stamp: &str,
    pieces: &[(String, Vec<u8>)],
) -> Result<(), FsError> {
    if pieces.is_empty() {
        return Ok(());
    }
    let mut out = Vec::new();
    for (label, bytes) in pieces {
        out.extend_from_slice(format!("### nanobot-rs repair {stamp}: {label}\n").as_bytes());
        out.extend_from_slice(bytes);
        out.push(b'\n');
    }
    let mut file = io::open(sidecar, Open::APPEND_OR_CREATE)
        .map_err(|e| FsError::new("open the damage sidecar", sidecar, e))?;
    io::append(&mut file, sidecar, &out)
        .map_err(|e| FsError::new("write the damage sidecar", sidecar, e))?;
    io::sync_all(&file, sidecar).map_err(|e| FsError::new("sync the damage sidecar", sidecar, e))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn dir(label: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("fs-support-{label}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn create_new_refuses_an_existing_file_and_leaves_no_temporary() {
        let dir = dir("create-new");
        let path = dir.join("a.jsonl");
        install(&path, b"one", Install::CreateNew, Sync::No).unwrap();
        let error = install(&path, b"two", Install::CreateNew, Sync::No).unwrap_err();
        assert_eq!(error.source.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read(&path).unwrap(), b"one");
        let names: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(
            names,
            vec![std::ffi::OsString::from("a.jsonl")],
            "no temporary left"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sidecar_pieces_are_kept_byte_for_byte() {
        let dir = dir("sidecar");
        let sidecar = dir.join("a.damaged");
        keep_aside(&sidecar, "T", &[("torn".into(), vec![0xff, b'{'])]).unwrap();
        keep_aside(&sidecar, "U", &[]).unwrap();
        assert_eq!(
            fs::read(&sidecar).unwrap(),
            b"### nanobot-rs repair T: torn\n\xff{\n"
        );
        let error = write_atomic(&dir.join("a.damaged/x"), b"", Sync::No).unwrap_err();
        assert!(error.to_string().starts_with("could not create"), "{error}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
