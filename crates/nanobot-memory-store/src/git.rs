//! Memory versions as a real git repository, written and read in pure Rust (no git
//! program, no C library): loose objects (zlib, SHA-1) and one branch, in a bare repository
//! of its own at `<workspace>/.nanobot/memory.git`. Any git can read it
//! (`git --git-dir .nanobot/memory.git log -p`); it never touches a repository the user
//! keeps around the workspace, so versioning also works inside one.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};
use gix::bstr::ByteSlice;

use crate::error::MemoryError;
use crate::file_documents::write_atomic;
use crate::versions::{MemoryVersions, RewriteVersion, Snapshot, Version, resolve_prefix};

/// The repository's place under the workspace.
pub const REPOSITORY: &str = ".nanobot/memory.git";
const BRANCH: &str = "refs/heads/main";
const NAME: &str = "nanobot";
const EMAIL: &str = "nanobot@dream";
/// Beside the repository: a rewritten history being built, and the old one being removed.
const STAGING: &str = "memory.git.rewrite";
const RETIRED: &str = "memory.git.old";
/// In a finished staging repository: it may replace the old one.
const FINISHED: &str = "REWRITTEN";

/// A git repository of memory versions, read and written through `gix`: loose or packed
/// objects, loose or packed refs, ref updates under git's own lock files and checked
/// against the tip they were made on, so `git gc`, `git pack-refs` or a concurrent git
/// leave it working.
#[derive(Debug, Clone)]
pub struct GitVersions {
    dir: PathBuf,
    repo: gix::ThreadSafeRepository,
}

/// One parsed commit.
struct Commit {
    tree: gix::ObjectId,
    parent: Option<gix::ObjectId>,
    time: DateTime<Utc>,
    message: String,
}

fn unavailable(dir: &Path, what: &str, e: impl std::fmt::Display) -> MemoryError {
    MemoryError::VersioningUnavailable {
        reason: format!("{} could not {what}: {e}", dir.display()),
    }
}

impl GitVersions {
    /// The repository of `workspace`, created (empty) when missing.
    pub fn open(workspace: &Path) -> Result<Self, MemoryError> {
        let dir = workspace.join(REPOSITORY);
        finish_swap(&dir)?;
        Self::open_dir(dir)
    }

    fn open_dir(dir: PathBuf) -> Result<Self, MemoryError> {
        if !dir.join("HEAD").is_file() {
            init(&dir)?;
        }
        for needed in ["objects", "refs"] {
            if !dir.join(needed).is_dir() {
                return Err(MemoryError::VersioningUnavailable {
                    reason: format!(
                        "{} is not a git repository (no {needed}); move it away and a new one is created",
                        dir.display()
                    ),
                });
            }
        }
        // Isolated: the user's and the system's git configuration do not change what is
        // written (identity, hooks, object format), so versions are the same everywhere.
        let repo = gix::open_opts(&dir, gix::open::Options::isolated())
            .map_err(|e| unavailable(&dir, "be opened", e))?
            .into_sync();
        Ok(GitVersions { dir, repo })
    }

    /// The repository's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn repo(&self) -> gix::Repository {
        self.repo.to_thread_local()
    }

    fn parse_id(&self, id: &str) -> Result<gix::ObjectId, MemoryError> {
        if id.len() != 40 {
            return Err(MemoryError::UnknownVersion { id: id.to_owned() });
        }
        gix::ObjectId::from_hex(id.as_bytes())
            .map_err(|_| MemoryError::UnknownVersion { id: id.to_owned() })
    }

    /// The commit the branch points at.
    fn head(&self) -> Result<Option<gix::ObjectId>, MemoryError> {
        let repo = self.repo();
        let found = repo
            .try_find_reference(BRANCH)
            .map_err(|e| unavailable(&self.dir, "read its branch", e))?;
        match found {
            None => Ok(None),
            Some(mut reference) => reference
                .peel_to_id()
                .map(|id| Some(id.detach()))
                .map_err(|e| unavailable(&self.dir, "read its branch", e)),
        }
    }

    fn commit_at(&self, id: gix::ObjectId) -> Result<Commit, MemoryError> {
        read_commit(&self.repo(), &self.dir, id)
    }

    /// Commit ids from the branch tip along first parents, newest first.
    fn chain(&self, limit: usize) -> Result<Vec<Version>, MemoryError> {
        let mut out = Vec::new();
        let mut next = self.head()?;
        while let Some(id) = next {
            if out.len() >= limit {
                break;
            }
            let commit = self.commit_at(id)?;
            next = commit.parent;
            out.push(Version {
                id: id.to_string(),
                parent: commit.parent.map(|p| p.to_string()),
                message: commit.message,
                time: commit.time,
            });
        }
        Ok(out)
    }

    /// Writes the tree of `files` (paths with `/`), returning its id.
    fn write_tree(
        &self,
        repo: &gix::Repository,
        files: &[(&str, &str)],
    ) -> Result<gix::ObjectId, MemoryError> {
        use gix::objs::tree::{Entry, EntryKind};
        let mut tree = gix::objs::Tree::empty();
        let mut i = 0;
        while i < files.len() {
            let (path, content) = files[i];
            match path.split_once('/') {
                None => {
                    let oid = repo
                        .write_blob(content.as_bytes())
                        .map_err(|e| unavailable(&self.dir, "store a file", e))?
                        .detach();
                    tree.entries.push(Entry {
                        mode: EntryKind::Blob.into(),
                        filename: path.into(),
                        oid,
                    });
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
                    let oid = self.write_tree(repo, &children)?;
                    tree.entries.push(Entry {
                        mode: EntryKind::Tree.into(),
                        filename: dir.into(),
                        oid,
                    });
                }
            }
        }
        // git's order: by name, a directory compared as `name/`.
        tree.entries.sort();
        repo.write_object(&tree)
            .map(|id| id.detach())
            .map_err(|e| unavailable(&self.dir, "store a tree", e))
    }
}

/// Completes a rewrite a crash interrupted between moving the old repository away and
/// moving the rewritten one in, and removes a retired repository left behind. A staging
/// repository still being built is left to the rewrite that builds it.
fn finish_swap(dir: &Path) -> Result<(), MemoryError> {
    let staging = dir.with_file_name(STAGING);
    if !dir.join("HEAD").is_file() && staging.join(FINISHED).is_file() {
        std::fs::rename(&staging, dir).map_err(|e| MemoryError::io("move in", &staging, e))?;
    }
    let retired = dir.with_file_name(RETIRED);
    if retired.exists() && dir.join("HEAD").is_file() {
        std::fs::remove_dir_all(&retired).map_err(|e| MemoryError::io("remove", &retired, e))?;
    }
    Ok(())
}

/// Puts the finished `staging` repository in the place of `dir`, the old one removed.
fn swap_in(dir: &Path, staging: &Path) -> Result<(), MemoryError> {
    write_atomic(
        &staging.join(FINISHED),
        b"a rewritten history, ready to replace the old\n",
    )?;
    let retired = dir.with_file_name(RETIRED);
    if retired.exists() {
        std::fs::remove_dir_all(&retired).map_err(|e| MemoryError::io("remove", &retired, e))?;
    }
    std::fs::rename(dir, &retired).map_err(|e| MemoryError::io("move away", dir, e))?;
    finish_swap(dir)?;
    let _ = std::fs::remove_file(dir.join(FINISHED));
    Ok(())
}

/// A new bare repository: the layout git itself creates, automatic gc off (gix and git
/// both read packs, but nobody should repack under a running Dream unasked).
fn init(dir: &Path) -> Result<(), MemoryError> {
    for sub in ["objects", "refs/heads", "refs/tags"] {
        let path = dir.join(sub);
        std::fs::create_dir_all(&path).map_err(|e| MemoryError::io("create", &path, e))?;
    }
    write_atomic(
        &dir.join("config"),
        b"[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n[gc]\n\tauto = 0\n",
    )?;
    write_atomic(
        &dir.join("description"),
        b"nanobot memory versions: SOUL.md, USER.md, memory/MEMORY.md, skills/ and Dream's cursor\n",
    )?;
    // HEAD last: its presence marks a finished repository.
    write_atomic(&dir.join("HEAD"), format!("ref: {BRANCH}\n").as_bytes())
}

fn read_commit(
    repo: &gix::Repository,
    dir: &Path,
    id: gix::ObjectId,
) -> Result<Commit, MemoryError> {
    let object = repo
        .try_find_object(id)
        .map_err(|e| MemoryError::InvalidFile {
            path: dir.to_owned(),
            reason: format!("holds a damaged object {id}: {e}"),
        })?
        .ok_or_else(|| MemoryError::UnknownVersion { id: id.to_string() })?;
    let commit = object
        .try_into_commit()
        .map_err(|_| MemoryError::UnknownVersion { id: id.to_string() })?;
    let bad = |why: String| MemoryError::InvalidFile {
        path: dir.to_owned(),
        reason: format!("holds a commit {id} that cannot be read: {why}"),
    };
    let tree = commit.tree_id().map_err(|e| bad(e.to_string()))?.detach();
    let parent = commit.parent_ids().next().map(|p| p.detach());
    let seconds = commit.time().map_err(|e| bad(e.to_string()))?.seconds;
    let message = commit
        .message_raw()
        .map_err(|e| bad(e.to_string()))?
        .to_str_lossy()
        .trim_end_matches('\n')
        .to_owned();
    Ok(Commit {
        tree,
        parent,
        time: Utc
            .timestamp_opt(seconds, 0)
            .single()
            .unwrap_or(DateTime::UNIX_EPOCH),
        message,
    })
}

/// Every file of tree `id` into `out`, paths joined with `/`.
fn read_tree(
    repo: &gix::Repository,
    dir: &Path,
    id: gix::ObjectId,
    prefix: &str,
    out: &mut Snapshot,
) -> Result<(), MemoryError> {
    let damaged = |e: String| MemoryError::InvalidFile {
        path: dir.to_owned(),
        reason: format!("holds a damaged tree {id}: {e}"),
    };
    let tree = repo.find_tree(id).map_err(|e| damaged(e.to_string()))?;
    for entry in tree.iter() {
        let entry = entry.map_err(|e| damaged(e.to_string()))?;
        let path = format!("{prefix}{}", entry.filename().to_str_lossy());
        if entry.mode().is_tree() {
            read_tree(repo, dir, entry.oid().to_owned(), &format!("{path}/"), out)?;
        } else if entry.mode().is_blob() {
            let blob = repo
                .find_blob(entry.oid())
                .map_err(|e| damaged(e.to_string()))?;
            out.insert(path, blob.data.to_str_lossy().into_owned());
        }
    }
    Ok(())
}

impl GitVersions {
    /// Records `files` as a commit on the branch; `None` when they equal the tip's, unless
    /// `same_allowed` (a rewrite keeps every version, changed or not).
    fn record(
        &self,
        message: &str,
        files: &Snapshot,
        time: DateTime<Utc>,
        same_allowed: bool,
    ) -> Result<Option<Version>, MemoryError> {
        let repo = self.repo();
        let list: Vec<(&str, &str)> = files
            .iter()
            .map(|(p, c)| (p.as_str(), c.as_str()))
            .collect();
        let tree = self.write_tree(&repo, &list)?;
        let parent = self.head()?;
        if !same_allowed
            && let Some(parent) = parent
            && self.commit_at(parent)?.tree == tree
        {
            return Ok(None);
        }
        let message = message.trim_end_matches('\n');
        let signature = gix::actor::Signature {
            name: NAME.into(),
            email: EMAIL.into(),
            time: gix::date::Time {
                seconds: time.timestamp(),
                offset: 0,
            },
        };
        let (mut committer_time, mut author_time) = (
            gix::date::parse::TimeBuf::default(),
            gix::date::parse::TimeBuf::default(),
        );
        // The branch moves only if it still points at `parent` (git's lock file and a
        // compare-and-set), so two writers cannot lose each other's version.
        let id = repo
            .commit_as(
                signature.to_ref(&mut committer_time),
                signature.to_ref(&mut author_time),
                BRANCH,
                format!("{message}\n"),
                tree,
                parent,
            )
            .map_err(|e| unavailable(&self.dir, "record a version", e))?
            .detach();
        Ok(Some(Version {
            id: id.to_string(),
            parent: parent.map(|p| p.to_string()),
            message: message.to_owned(),
            time: Utc
                .timestamp_opt(time.timestamp(), 0)
                .single()
                .unwrap_or(time),
        }))
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
        self.record(message, files, time, false)
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
        let id = self.parse_id(id)?;
        let commit = self.commit_at(id)?;
        let mut out = Snapshot::new();
        read_tree(&self.repo(), &self.dir, commit.tree, "", &mut out)?;
        Ok(out)
    }

    async fn rewrite(&self, edit: RewriteVersion<'_>) -> Result<usize, MemoryError> {
        let mut chain = self.chain(usize::MAX)?;
        chain.reverse();
        // The new history is built beside the old one and swapped in whole: no object of
        // the old one survives, and a crash leaves one or the other.
        let staging = self.dir.with_file_name(STAGING);
        if staging.exists() {
            std::fs::remove_dir_all(&staging)
                .map_err(|e| MemoryError::io("remove", &staging, e))?;
        }
        init(&staging)?;
        let fresh = GitVersions::open_dir(staging.clone())?;
        let mut changed = 0;
        for version in &chain {
            let files = self.files_at(&version.id).await?;
            let (message, rewritten) = edit(version, files.clone());
            if message != version.message || rewritten != files {
                changed += 1;
            }
            fresh.record(&message, &rewritten, version.time, true)?;
        }
        swap_in(&self.dir, &staging)?;
        Ok(changed)
    }
}

/// One commit of a nanobot-ai workspace's own git history (read-only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignVersion {
    /// The commit id.
    pub id: String,
    /// When it was committed.
    pub time: DateTime<Utc>,
    /// Its message.
    pub message: String,
}

/// The newest `limit` commits of the repository at `<workspace>/.git` along first parents
/// from HEAD: where nanobot-ai records its Dream versions, so a user who moves over sees
/// them. `Ok(None)` when the workspace has no git repository; read-only, never written.
pub fn workspace_git_history(
    workspace: &Path,
    limit: usize,
) -> Result<Option<Vec<ForeignVersion>>, MemoryError> {
    let dir = workspace.join(".git");
    if !dir.exists() {
        return Ok(None);
    }
    let repo = gix::open_opts(&dir, gix::open::Options::isolated())
        .map_err(|e| unavailable(&dir, "be opened", e))?;
    let Ok(head) = repo.head_id() else {
        // An unborn HEAD: a repository without commits.
        return Ok(Some(Vec::new()));
    };
    let mut out = Vec::new();
    let mut next = Some(head.detach());
    while let Some(id) = next {
        if out.len() >= limit {
            break;
        }
        let commit = read_commit(&repo, &dir, id)?;
        next = commit.parent;
        out.push(ForeignVersion {
            id: id.to_string(),
            time: commit.time,
            message: commit.message,
        });
    }
    Ok(Some(out))
}
