//! The file layout: the agent scope is the workspace itself, byte for byte as before; every
//! other scope is a nanobot-shaped directory `<workspace>/scopes/<name>/` with its own
//! sessions, journal, cursors, `USER.md`, `memory/MEMORY.md` and versions repository, so
//! erasing a user is one directory removal. Links live in `scopes/links.jsonl`.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use nanobot_fs_support::io::{self as fsio, Open};
use serde::{Deserialize, Serialize};

use crate::error::ScopeError;
use crate::key::{ScopeKey, Subject, UserKey};
use crate::links::{LinkRecord, LinkTable, check_record};

/// The directory below the workspace that holds every non-agent scope.
pub const SCOPES_DIR: &str = "scopes";

/// The record in each scope directory that names its key (the name alone cannot, when it
/// is hashed).
pub const SCOPE_RECORD: &str = "scope.json";

/// What `scope.json` holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopeRecord {
    /// The scope.
    pub scope: ScopeKey,
    /// When its directory was made.
    pub created_at: DateTime<Utc>,
}

/// A scope directory found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeDir {
    /// Its subject (from `scope.json`, or the name when the record is missing).
    pub subject: Subject,
    /// The directory.
    pub path: PathBuf,
    /// When it was made, when `scope.json` says.
    pub created_at: Option<DateTime<Utc>>,
}

/// The scope directories of one workspace.
#[derive(Debug, Clone)]
pub struct ScopeDirs {
    workspace: PathBuf,
}

impl ScopeDirs {
    /// The scopes of the workspace at `workspace`.
    pub fn new(workspace: &Path) -> Self {
        ScopeDirs {
            workspace: workspace.to_path_buf(),
        }
    }

    /// The workspace.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// `<workspace>/scopes`.
    pub fn scopes_dir(&self) -> PathBuf {
        self.workspace.join(SCOPES_DIR)
    }

    /// Where `subject`'s memory lives: the workspace for the agent, else its directory
    /// under `scopes/` (which may not exist yet).
    pub fn root(&self, subject: &Subject) -> PathBuf {
        match subject.dir_name() {
            None => self.workspace.clone(),
            Some(name) => self.scopes_dir().join(name),
        }
    }

    /// The root of `scope`, created with its `scope.json` when missing.
    pub fn open(&self, scope: &ScopeKey) -> Result<PathBuf, ScopeError> {
        let root = self.root(&scope.subject);
        if scope.subject.is_agent() {
            return Ok(root);
        }
        let record = root.join(SCOPE_RECORD);
        if record.is_file() {
            let existing = read_record(&record)?;
            if existing.scope.subject != scope.subject {
                return Err(ScopeError::Corrupt {
                    what: record.display().to_string(),
                    reason: format!(
                        "it names {}, not {} (two keys with one hashed name)",
                        existing.scope.subject, scope.subject
                    ),
                });
            }
            return Ok(root);
        }
        nanobot_fs_support::create_dir_durable(&root)?;
        let text = serde_json::to_vec_pretty(&ScopeRecord {
            scope: scope.clone(),
            created_at: Utc::now(),
        })
        .map_err(|e| ScopeError::Corrupt {
            what: "a scope record".into(),
            reason: e.to_string(),
        })?;
        match nanobot_fs_support::install(
            &record,
            &text,
            nanobot_fs_support::Install::CreateNew,
            nanobot_fs_support::Sync::Yes,
        ) {
            Ok(_) => Ok(root),
            // Another process made it first: the same key, checked on the next open.
            Err(e) if e.source.kind() == ErrorKind::AlreadyExists => Ok(root),
            Err(e) => Err(e.into()),
        }
    }

    /// Every scope directory, sorted by subject. A directory whose record is unreadable
    /// and whose name names no subject is an error, not skipped: the operator must see it.
    pub fn list(&self) -> Result<Vec<ScopeDir>, ScopeError> {
        let dir = self.scopes_dir();
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(ScopeError::io("list", &dir, e)),
        };
        let mut found = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| ScopeError::io("list", &dir, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            if name.starts_with('.') || !path.is_dir() {
                continue;
            }
            let record = path.join(SCOPE_RECORD);
            let (subject, created_at) = if record.is_file() {
                let record = read_record(&record)?;
                (record.scope.subject, Some(record.created_at))
            } else {
                let subject = Subject::from_dir_name(&name).ok_or_else(|| ScopeError::Corrupt {
                    what: path.display().to_string(),
                    reason: "a directory under scopes/ without scope.json".into(),
                })?;
                (subject, None)
            };
            found.push(ScopeDir {
                subject,
                path,
                created_at,
            });
        }
        found.sort_by(|a, b| a.subject.cmp(&b.subject));
        Ok(found)
    }

    /// Erases `subject`'s scope: its directory, with sessions, journal, documents and
    /// versions, is first renamed aside (so no turn opens a half-removed scope) and then
    /// removed. `false` when there was none. The agent scope cannot be erased this way.
    pub fn delete(&self, subject: &Subject) -> Result<bool, ScopeError> {
        if subject.is_agent() {
            return Err(ScopeError::InvalidKey {
                key: "agent".into(),
                reason: "the agent scope is the workspace itself; it is not deleted here".into(),
            });
        }
        let root = self.root(subject);
        if !root.exists() {
            return Ok(false);
        }
        let aside = self.scopes_dir().join(format!(
            ".deleting-{}-{}",
            std::process::id(),
            root.file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
        ));
        fsio::rename(&root, &aside).map_err(|e| ScopeError::io("move aside", &root, e))?;
        fsio::remove_dir_all(&aside).map_err(|e| ScopeError::io("remove", &aside, e))?;
        nanobot_fs_support::sync_dir(&self.scopes_dir())?;
        Ok(true)
    }
}

fn read_record(path: &Path) -> Result<ScopeRecord, ScopeError> {
    let text = fsio::read(path).map_err(|e| ScopeError::io("read", path, e))?;
    serde_json::from_slice(&text).map_err(|e| ScopeError::Corrupt {
        what: path.display().to_string(),
        reason: e.to_string(),
    })
}

/// Links kept in `<workspace>/scopes/links.jsonl`: one JSON record per line, appended under
/// a lock (`scopes/.links.lock`), so two operators never lose each other's change. A line
/// torn by a crash is moved to `links.jsonl.damaged` by the next change; any other line that
/// cannot be read is an error (an unlink skipped would keep two people's memory joined).
#[derive(Debug, Clone)]
pub struct FileLinks {
    path: PathBuf,
    lock: PathBuf,
}

impl FileLinks {
    /// The links of the workspace at `workspace` (the file may not exist yet).
    pub fn new(workspace: &Path) -> Self {
        let dir = workspace.join(SCOPES_DIR);
        FileLinks {
            path: dir.join("links.jsonl"),
            lock: dir.join(".links.lock"),
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn locked(&self) -> Result<fs::File, ScopeError> {
        let dir = self.lock.parent().unwrap_or(Path::new("."));
        nanobot_fs_support::create_dir_durable(dir)?;
        let file = fsio::open(&self.lock, Open::WRITE_OR_CREATE)
            .map_err(|e| ScopeError::io("open", &self.lock, e))?;
        file.lock()
            .map_err(|e| ScopeError::io("lock", &self.lock, e))?;
        Ok(file)
    }

    /// The bytes of the file, and the records of its complete lines.
    fn read(&self) -> Result<(Vec<u8>, Vec<LinkRecord>), ScopeError> {
        let bytes = match fsio::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok((Vec::new(), Vec::new())),
            Err(e) => return Err(ScopeError::io("read", &self.path, e)),
        };
        let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let mut records = Vec::new();
        for (number, line) in bytes[..complete].split(|&b| b == b'\n').enumerate() {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let record = serde_json::from_slice(line).map_err(|e| ScopeError::Corrupt {
                what: format!("{} line {}", self.path.display(), number + 1),
                reason: e.to_string(),
            })?;
            records.push(record);
        }
        Ok((bytes, records))
    }

    /// Moves a torn last line aside, so the next line starts on its own.
    fn repair_tail(&self, bytes: &[u8]) -> Result<(), ScopeError> {
        let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        if complete == bytes.len() {
            return Ok(());
        }
        let sidecar = self.path.with_extension("jsonl.damaged");
        nanobot_fs_support::keep_aside(
            &sidecar,
            &Utc::now().to_rfc3339(),
            &[("a torn last line".into(), bytes[complete..].to_vec())],
        )?;
        let file = fsio::open(&self.path, Open::READ_WRITE)
            .map_err(|e| ScopeError::io("open", &self.path, e))?;
        fsio::set_len(&file, &self.path, complete as u64)
            .map_err(|e| ScopeError::io("truncate", &self.path, e))?;
        Ok(())
    }
}

#[async_trait]
impl LinkTable for FileLinks {
    async fn records(&self) -> Result<Vec<LinkRecord>, ScopeError> {
        Ok(self.read()?.1)
    }

    async fn append(&self, record: LinkRecord) -> Result<(), ScopeError> {
        let _lock = self.locked()?;
        let (bytes, records) = self.read()?;
        check_record(&records, &record)?;
        self.repair_tail(&bytes)?;
        let mut line = serde_json::to_vec(&record).map_err(|e| ScopeError::Corrupt {
            what: "a link record".into(),
            reason: e.to_string(),
        })?;
        line.push(b'\n');
        let existed = self.path.exists();
        let mut file = fsio::open(&self.path, Open::APPEND_OR_CREATE)
            .map_err(|e| ScopeError::io("open", &self.path, e))?;
        fsio::append(&mut file, &self.path, &line)
            .map_err(|e| ScopeError::io("append to", &self.path, e))?;
        fsio::sync_all(&file, &self.path).map_err(|e| ScopeError::io("sync", &self.path, e))?;
        if !existed {
            // The file's name must survive a power loss as its synced record does.
            nanobot_fs_support::sync_dir(self.path.parent().unwrap_or(Path::new(".")))?;
        }
        Ok(())
    }

    async fn forget(&self, user: &UserKey) -> Result<usize, ScopeError> {
        let _lock = self.locked()?;
        let (_, records) = self.read()?;
        let kept: Vec<&LinkRecord> = records
            .iter()
            .filter(|r| r.identity != *user && r.target != *user)
            .collect();
        let removed = records.len() - kept.len();
        if removed == 0 {
            return Ok(0);
        }
        let mut text = Vec::new();
        for record in kept {
            let line = serde_json::to_vec(record).map_err(|e| ScopeError::Corrupt {
                what: "a link record".into(),
                reason: e.to_string(),
            })?;
            text.extend_from_slice(&line);
            text.push(b'\n');
        }
        nanobot_fs_support::write_atomic(&self.path, &text, nanobot_fs_support::Sync::Yes)?;
        Ok(removed)
    }
}
