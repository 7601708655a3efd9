//! Memory versions as a real git repository, written and read in pure Rust (no git
//! program, no C library): loose objects (zlib, SHA-1) and one branch, in a bare repository
//! of its own at `<workspace>/.nanobot/memory.git`. Any git can read it
//! (`git --git-dir .nanobot/memory.git log -p`); it never touches a repository the user
//! keeps around the workspace, so versioning also works inside one.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};
use sha1::{Digest, Sha1};

use crate::error::MemoryError;
use crate::file_documents::write_atomic;
use crate::versions::{MemoryVersions, Snapshot, Version, resolve_prefix};

/// The repository's place under the workspace.
pub const REPOSITORY: &str = ".nanobot/memory.git";
const BRANCH: &str = "refs/heads/main";
const IDENTITY: &str = "nanobot <nanobot@dream>";

/// A git repository of memory versions.
#[derive(Debug, Clone)]
pub struct GitVersions {
    dir: PathBuf,
}

/// One parsed commit.
struct Commit {
    tree: String,
    parent: Option<String>,
    time: DateTime<Utc>,
    message: String,
}

impl GitVersions {
    /// The repository of `workspace`, created (empty) when missing.
    pub fn open(workspace: &Path) -> Result<Self, MemoryError> {
        let dir = workspace.join(REPOSITORY);
        let git = GitVersions { dir };
        if !git.dir.join("HEAD").is_file() {
            git.init()?;
        }
        for needed in ["objects", "refs/heads"] {
            if !git.dir.join(needed).is_dir() {
                return Err(MemoryError::VersioningUnavailable {
                    reason: format!(
                        "{} is not a git repository (no {needed}); move it away and a new one is created",
                        git.dir.display()
                    ),
                });
            }
        }
        Ok(git)
    }

    /// The repository's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn init(&self) -> Result<(), MemoryError> {
        for sub in ["objects", "refs/heads", "refs/tags"] {
            let path = self.dir.join(sub);
            fs::create_dir_all(&path).map_err(|e| MemoryError::io("create", &path, e))?;
        }
        self.write_file(
            "config",
            b"[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n[gc]\n\tauto = 0\n",
        )?;
        self.write_file(
            "description",
            b"nanobot memory versions: SOUL.md, USER.md, memory/MEMORY.md, skills/ and Dream's cursor\n",
        )?;
        // HEAD last: its presence marks a finished repository.
        self.write_file("HEAD", format!("ref: {BRANCH}\n").as_bytes())
    }

    fn write_file(&self, relative: &str, bytes: &[u8]) -> Result<(), MemoryError> {
        write_atomic(&self.dir.join(relative), bytes)
    }

    fn object_path(&self, id: &str) -> PathBuf {
        self.dir.join("objects").join(&id[..2]).join(&id[2..])
    }

    /// Stores an object; its id.
    fn put(&self, kind: &str, body: &[u8]) -> Result<String, MemoryError> {
        let mut raw = format!("{kind} {}\0", body.len()).into_bytes();
        raw.extend_from_slice(body);
        let id = hex(&Sha1::digest(&raw));
        let path = self.object_path(&id);
        if path.exists() {
            return Ok(id);
        }
        let compressed = miniz_oxide::deflate::compress_to_vec_zlib(&raw, 6);
        write_atomic(&path, &compressed)?;
        Ok(id)
    }

    /// An object's kind and body.
    fn get(&self, id: &str) -> Result<(String, Vec<u8>), MemoryError> {
        if id.len() != 40 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(MemoryError::UnknownVersion { id: id.to_owned() });
        }
        let path = self.object_path(id);
        let compressed = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let packed = fs::read_dir(self.dir.join("objects/pack"))
                    .map(|mut d| d.next().is_some())
                    .unwrap_or(false);
                return Err(if packed {
                    MemoryError::VersioningUnavailable {
                        reason: format!(
                            "object {id} is in a pack file ({} was repacked with `git gc`), which this reader does not read; unpack it with `git unpack-objects` or move the repository away to start a new one",
                            self.dir.display()
                        ),
                    }
                } else {
                    MemoryError::UnknownVersion { id: id.to_owned() }
                });
            }
            Err(e) => return Err(MemoryError::io("read", &path, e)),
        };
        let corrupt = |why: &str| MemoryError::InvalidFile {
            path: path.clone(),
            reason: format!("is not a valid git object ({why}); the repository is damaged"),
        };
        let raw = miniz_oxide::inflate::decompress_to_vec_zlib(&compressed)
            .map_err(|_| corrupt("it does not inflate"))?;
        let nul = raw
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| corrupt("no header"))?;
        let header = std::str::from_utf8(&raw[..nul]).map_err(|_| corrupt("bad header"))?;
        let (kind, len) = header
            .split_once(' ')
            .ok_or_else(|| corrupt("bad header"))?;
        let body = raw[nul + 1..].to_vec();
        if len.parse::<usize>().ok() != Some(body.len()) {
            return Err(corrupt("wrong length"));
        }
        if hex(&Sha1::digest(&raw)) != id {
            return Err(corrupt("its content does not match its id"));
        }
        Ok((kind.to_owned(), body))
    }

    /// The commit the branch points at.
    fn head(&self) -> Result<Option<String>, MemoryError> {
        let path = self.dir.join(BRANCH);
        match fs::read_to_string(&path) {
            Ok(text) => Ok(Some(text.trim().to_owned())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // `git pack-refs` moves branches into packed-refs.
                let packed = match fs::read_to_string(self.dir.join("packed-refs")) {
                    Ok(text) => text,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                    Err(e) => return Err(MemoryError::io("read", self.dir.join("packed-refs"), e)),
                };
                Ok(packed.lines().find_map(|line| {
                    let (id, name) = line.split_once(' ')?;
                    (name == BRANCH).then(|| id.to_owned())
                }))
            }
            Err(e) => Err(MemoryError::io("read", &path, e)),
        }
    }

    fn commit_at(&self, id: &str) -> Result<Commit, MemoryError> {
        let (kind, body) = self.get(id)?;
        let bad = || MemoryError::InvalidFile {
            path: self.object_path(id),
            reason: "is not a commit this repository can read".into(),
        };
        if kind != "commit" {
            return Err(bad());
        }
        let text = String::from_utf8_lossy(&body);
        let (headers, message) = text.split_once("\n\n").unwrap_or((&text, ""));
        let mut tree = None;
        let mut parent = None;
        let mut time = None;
        for line in headers.lines() {
            if let Some(rest) = line.strip_prefix("tree ") {
                tree = Some(rest.to_owned());
            } else if let Some(rest) = line.strip_prefix("parent ") {
                parent.get_or_insert_with(|| rest.to_owned());
            } else if let Some(rest) = line.strip_prefix("committer ") {
                let mut fields = rest.rsplitn(3, ' ');
                let _zone = fields.next();
                time = fields
                    .next()
                    .and_then(|s| s.parse::<i64>().ok())
                    .and_then(|t| Utc.timestamp_opt(t, 0).single());
            }
        }
        Ok(Commit {
            tree: tree.ok_or_else(bad)?,
            parent,
            time: time.ok_or_else(bad)?,
            message: message.trim_end_matches('\n').to_owned(),
        })
    }

    fn version(&self, id: &str) -> Result<Version, MemoryError> {
        let commit = self.commit_at(id)?;
        Ok(Version {
            id: id.to_owned(),
            parent: commit.parent,
            message: commit.message,
            time: commit.time,
        })
    }

    /// Commit ids from the branch tip along first parents, newest first.
    fn chain(&self, limit: usize) -> Result<Vec<Version>, MemoryError> {
        let mut out = Vec::new();
        let mut next = self.head()?;
        while let Some(id) = next {
            if out.len() >= limit {
                break;
            }
            let version = self.version(&id)?;
            next = version.parent.clone();
            out.push(version);
        }
        Ok(out)
    }

    /// Writes the tree of `files` (paths with `/`), returning its id.
    fn write_tree(&self, files: &[(&str, &str)]) -> Result<String, MemoryError> {
        // Group by the first path component.
        let mut entries: Vec<(String, bool, String)> = Vec::new();
        let mut i = 0;
        while i < files.len() {
            let (path, content) = files[i];
            match path.split_once('/') {
                None => {
                    entries.push((
                        path.to_owned(),
                        false,
                        self.put("blob", content.as_bytes())?,
                    ));
                    i += 1;
                }
                Some((dir, _)) => {
                    let mut children = Vec::new();
                    while i < files.len() && files[i].0.split_once('/').map(|(d, _)| d) == Some(dir)
                    {
                        let rest = files[i].0.split_once('/').map_or("", |(_, r)| r);
                        children.push((rest, files[i].1));
                        i += 1;
                    }
                    entries.push((dir.to_owned(), true, self.write_tree(&children)?));
                }
            }
        }
        // git orders tree entries by name, a directory compared as `name/`.
        entries.sort_by(|a, b| {
            let key = |e: &(String, bool, String)| {
                let mut k = e.0.as_bytes().to_vec();
                if e.1 {
                    k.push(b'/');
                }
                k
            };
            key(a).cmp(&key(b))
        });
        let mut body = Vec::new();
        for (name, is_dir, id) in entries {
            body.extend_from_slice(if is_dir { b"40000 " } else { b"100644 " });
            body.extend_from_slice(name.as_bytes());
            body.push(0);
            body.extend_from_slice(&unhex(&id));
        }
        self.put("tree", &body)
    }

    fn read_tree(&self, id: &str, prefix: &str, out: &mut Snapshot) -> Result<(), MemoryError> {
        let (kind, body) = self.get(id)?;
        if kind != "tree" {
            return Err(MemoryError::InvalidFile {
                path: self.object_path(id),
                reason: "is not a tree".into(),
            });
        }
        let mut rest = body.as_slice();
        while !rest.is_empty() {
            let space = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
            let nul = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
            if nul + 21 > rest.len() || space > nul {
                return Err(MemoryError::InvalidFile {
                    path: self.object_path(id),
                    reason: "is a damaged tree".into(),
                });
            }
            let mode = String::from_utf8_lossy(&rest[..space]).into_owned();
            let name = String::from_utf8_lossy(&rest[space + 1..nul]).into_owned();
            let child = hex(&rest[nul + 1..nul + 21]);
            rest = &rest[nul + 21..];
            let path = format!("{prefix}{name}");
            if mode == "40000" {
                self.read_tree(&child, &format!("{path}/"), out)?;
            } else {
                let (_, blob) = self.get(&child)?;
                out.insert(path, String::from_utf8_lossy(&blob).into_owned());
            }
        }
        Ok(())
    }
}

#[async_trait]
impl MemoryVersions for GitVersions {
    async fn commit(
        &self,
        message: &str,
        files: &Snapshot,
        time: DateTime<Utc>,
    ) -> Result<Option<Version>, MemoryError> {
        let list: Vec<(&str, &str)> = files
            .iter()
            .map(|(p, c)| (p.as_str(), c.as_str()))
            .collect();
        let tree = self.write_tree(&list)?;
        let parent = self.head()?;
        if let Some(parent) = &parent
            && self.commit_at(parent)?.tree == tree
        {
            return Ok(None);
        }
        let stamp = time.timestamp();
        let mut body = format!("tree {tree}\n");
        if let Some(parent) = &parent {
            body.push_str(&format!("parent {parent}\n"));
        }
        body.push_str(&format!(
            "author {IDENTITY} {stamp} +0000\ncommitter {IDENTITY} {stamp} +0000\n\n{}\n",
            message.trim_end_matches('\n')
        ));
        let id = self.put("commit", body.as_bytes())?;
        self.write_file(BRANCH, format!("{id}\n").as_bytes())?;
        Ok(Some(Version {
            id,
            parent,
            message: message.trim_end_matches('\n').to_owned(),
            time: Utc.timestamp_opt(stamp, 0).single().unwrap_or(time),
        }))
    }

    async fn log(&self, limit: usize) -> Result<Vec<Version>, MemoryError> {
        self.chain(limit)
    }

    async fn resolve(&self, id: &str) -> Result<Version, MemoryError> {
        let all = self.chain(usize::MAX)?;
        let full = resolve_prefix(id, all.iter().map(|v| v.id.as_str()))?.to_owned();
        all.into_iter()
            .find(|v| v.id == full)
            .ok_or_else(|| MemoryError::UnknownVersion { id: id.to_owned() })
    }

    async fn files_at(&self, id: &str) -> Result<Snapshot, MemoryError> {
        let commit = self.commit_at(id)?;
        let mut out = Snapshot::new();
        self.read_tree(&commit.tree, "", &mut out)?;
        Ok(out)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len() / 2)
        .filter_map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok())
        .collect()
}
