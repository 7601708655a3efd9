//! The Dream lease as an advisory lock on `memory/.dream.lock`, held by an open file: a
//! process that dies releases it with its files, so a crash never leaves a stale lease.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::error::MemoryError;
use crate::lease::{LeaseGuard, MemoryLease};

/// The lease of one workspace, shared by every process that opens it.
#[derive(Debug, Clone)]
pub struct FileLease {
    path: PathBuf,
}

impl FileLease {
    /// The lease of `workspace` (`memory/.dream.lock`).
    pub fn open(workspace: &Path) -> Result<Self, MemoryError> {
        let dir = workspace.join("memory");
        fs::create_dir_all(&dir).map_err(|e| MemoryError::io("create", &dir, e))?;
        Ok(FileLease {
            path: dir.join(".dream.lock"),
        })
    }

    fn file(&self) -> Result<File, MemoryError> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.path)
            .map_err(|e| MemoryError::io("open", &self.path, e))
    }
}

struct Held(File);

impl Drop for Held {
    fn drop(&mut self) {
        let _ = self.0.set_len(0);
        let _ = self.0.unlock();
    }
}

impl MemoryLease for FileLease {
    fn try_acquire(&self, holder: &str) -> Result<Option<LeaseGuard>, MemoryError> {
        let mut file = self.file()?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Ok(None),
            Err(TryLockError::Error(e)) => return Err(MemoryError::io("lock", &self.path, e)),
        }
        let written = file
            .set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)))
            .and_then(|_| file.write_all(holder.as_bytes()));
        written.map_err(|e| MemoryError::io("write", &self.path, e))?;
        Ok(Some(LeaseGuard::new(Held(file))))
    }

    fn holder(&self) -> Result<Option<String>, MemoryError> {
        let mut file = self.file()?;
        match file.try_lock() {
            Ok(()) => {
                let _ = file.unlock();
                Ok(None)
            }
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                Ok(Some(if text.is_empty() {
                    "another process".to_owned()
                } else {
                    text
                }))
            }
            Err(TryLockError::Error(e)) => Err(MemoryError::io("lock", &self.path, e)),
        }
    }
}
