//! The Dream lease as an advisory lock on `memory/.dream.lock`, held by an open file: a
//! process that dies releases it with its files, so a crash never leaves a stale lease.
//!
//! The file holds the fence of the latest grant on its first line and, while the lease is
//! held, the holder on its second. Fences only grow: a release keeps the fence and clears
//! the holder. A lock file as older releases wrote it (the holder alone) counts as fence 0.

use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nanobot_fs_support::io::{self as fsio, Open};

use async_trait::async_trait;

use crate::error::MemoryError;
use crate::lease::{Fence, Lease, LeaseCapabilities, LeaseHolder, MemoryLease, lease_lost};

/// The lease of one workspace, shared by every process that opens it.
#[derive(Debug, Clone)]
pub struct FileLease {
    workspace: PathBuf,
    path: PathBuf,
}

impl FileLease {
    /// The lease of `workspace` (`memory/.dream.lock`).
    pub fn open(workspace: &Path) -> Result<Self, MemoryError> {
        let dir = workspace.join("memory");
        fsio::create_dir_all(&dir).map_err(|e| MemoryError::io("create", &dir, e))?;
        Ok(FileLease {
            workspace: workspace.to_owned(),
            path: dir.join(".dream.lock"),
        })
    }

    /// The workspace whose lease this is.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    fn file(&self) -> Result<File, MemoryError> {
        fsio::open(&self.path, Open::READ_WRITE_OR_CREATE)
            .map_err(|e| MemoryError::io("open", &self.path, e))
    }

    /// The fence and holder recorded in the lock file.
    fn recorded(&self, file: &mut File) -> Result<(Fence, String), MemoryError> {
        let bytes = fsio::read_from(file, &self.path, 0)
            .map_err(|e| MemoryError::io("read", &self.path, e))?;
        Ok(parse(&String::from_utf8_lossy(&bytes)))
    }
}

/// The fence and holder of a lock file's text.
fn parse(text: &str) -> (Fence, String) {
    let (first, rest) = text.split_once('\n').unwrap_or((text, ""));
    match first.trim().parse::<u64>() {
        Ok(fence) => (Fence(fence), rest.to_owned()),
        // Written by an older release: the holder alone.
        Err(_) => (Fence(0), text.to_owned()),
    }
}

/// Writes the fence and holder over what was there, then cuts what is left of a longer
/// record: the fence is never missing from the file in between.
fn record(file: &mut File, path: &Path, fence: Fence, holder: &str) -> Result<(), MemoryError> {
    let text = format!("{}\n{holder}", fence.0);
    fsio::write_at(file, path, 0, text.as_bytes())
        .and_then(|()| fsio::set_len(file, path, text.len() as u64))
        .map_err(|e| MemoryError::io("write", path, e))
}

/// The held lock: on drop the holder is cleared (the fence stays) and the lock released.
struct Held {
    file: File,
    path: PathBuf,
    fence: Fence,
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = record(&mut self.file, &self.path, self.fence, "");
        let _ = self.file.unlock();
    }
}

#[async_trait]
impl MemoryLease for FileLease {
    async fn try_acquire(&self, holder: &str, ttl: Duration) -> Result<Option<Lease>, MemoryError> {
        let mut file = self.file()?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Ok(None),
            Err(TryLockError::Error(e)) => return Err(MemoryError::io("lock", &self.path, e)),
        }
        let (last, _) = self.recorded(&mut file)?;
        let fence = Fence(last.0 + 1);
        record(&mut file, &self.path, fence, holder)?;
        let held = Held {
            file,
            path: self.path.clone(),
            fence,
        };
        Ok(Some(Lease::new(
            fence,
            holder,
            ttl,
            None,
            Some(Box::new(held)),
        )))
    }

    async fn renew(&self, lease: &mut Lease) -> Result<(), MemoryError> {
        // A lock lasts while its holder lives; renewing only confirms it is still ours.
        self.check(lease.fence).await
    }

    async fn check(&self, fence: Fence) -> Result<(), MemoryError> {
        let mut file = self.file()?;
        let (recorded, holder) = self.recorded(&mut file)?;
        // Held (by us: the fence only moves under the lock) and not released.
        let held = matches!(file.try_lock(), Err(TryLockError::WouldBlock));
        if held && recorded == fence && !holder.is_empty() {
            Ok(())
        } else {
            Err(lease_lost(fence, (recorded != fence).then_some(recorded)))
        }
    }

    async fn release(&self, lease: Lease) -> Result<(), MemoryError> {
        drop(lease);
        Ok(())
    }

    async fn holder(&self) -> Result<Option<LeaseHolder>, MemoryError> {
        let mut file = self.file()?;
        match file.try_lock() {
            Ok(()) => {
                let _ = file.unlock();
                Ok(None)
            }
            Err(TryLockError::WouldBlock) => {
                let (fence, holder) = self.recorded(&mut file)?;
                Ok(Some(LeaseHolder {
                    holder: if holder.is_empty() {
                        "another process".to_owned()
                    } else {
                        holder
                    },
                    fence,
                    expires_at: None,
                }))
            }
            Err(TryLockError::Error(e)) => Err(MemoryError::io("lock", &self.path, e)),
        }
    }

    fn capabilities(&self) -> LeaseCapabilities {
        LeaseCapabilities {
            expires: false,
            shared_storage: true,
        }
    }
}
