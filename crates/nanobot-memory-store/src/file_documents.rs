//! Durable documents as files in the workspace, where nanobot-ai keeps them.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use nanobot_fs_support::io::{self as fsio, Open};

use async_trait::async_trait;

use crate::documents::{
    AuxFile, DocVersion, Document, DocumentCapabilities, DocumentText, DocumentsStamp, Expected,
    MemoryDocuments, SkillSet, SkillText, document_conflict, skill_path, validate_skill_name,
};
use crate::error::MemoryError;

/// The lock every compare-and-set write holds, so the check and the replace are one step
/// for every process sharing the workspace.
const WRITE_LOCK: &str = "memory/.documents.lock";

/// `SOUL.md`, `USER.md`, `memory/MEMORY.md` and `skills/<name>/SKILL.md` under a workspace.
#[derive(Debug, Clone)]
pub struct FileDocuments {
    workspace: PathBuf,
}

/// Holds the write lock until dropped.
struct WriteLock(fs::File);

impl Drop for WriteLock {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

impl FileDocuments {
    /// The documents of `workspace` (created if missing).
    pub fn open(workspace: &Path) -> Result<Self, MemoryError> {
        nanobot_fs_support::create_dir_durable(workspace)?;
        Ok(FileDocuments {
            workspace: workspace.to_owned(),
        })
    }

    /// The workspace the documents live in.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// The file of `document`.
    pub fn path_of(&self, document: Document) -> PathBuf {
        self.workspace.join(document.path())
    }

    /// Takes the write lock (created on first use).
    fn write_lock(&self) -> Result<WriteLock, MemoryError> {
        let path = self.workspace.join(WRITE_LOCK);
        if let Some(dir) = path.parent() {
            fsio::create_dir_all(dir).map_err(|e| MemoryError::io("create", dir, e))?;
        }
        let file = fsio::open(&path, Open::WRITE_OR_CREATE)
            .map_err(|e| MemoryError::io("open", &path, e))?;
        file.lock().map_err(|e| MemoryError::io("lock", &path, e))?;
        Ok(WriteLock(file))
    }

    /// Replaces the file at `relative` with `text` if it is as `expected`, under the lock.
    fn replace(
        &self,
        relative: &str,
        text: &str,
        expected: Expected,
    ) -> Result<DocVersion, MemoryError> {
        let path = self.confined(relative)?;
        let _lock = self.write_lock()?;
        let found = read_bytes(&path)?.map(|b| DocVersion::of_bytes(&b));
        if !expected.is_met_by(found) {
            return Err(document_conflict(relative, expected, found));
        }
        write_atomic(&path, text.as_bytes())?;
        Ok(DocVersion::of_bytes(text.as_bytes()))
    }

    /// `relative` under the workspace, refused when any part of it below the workspace is a
    /// symbolic link: a link could lead a read or a write outside the memory files.
    fn confined(&self, relative: &str) -> Result<PathBuf, MemoryError> {
        let mut path = self.workspace.clone();
        for part in relative.split('/') {
            path.push(part);
            match fs::symlink_metadata(&path) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    return Err(MemoryError::InvalidFile {
                        path,
                        reason: "is a symbolic link; memory files are never read or written through links (replace the link with the file itself)".into(),
                    });
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                Err(e) => return Err(MemoryError::io("inspect", &path, e)),
            }
        }
        Ok(self.workspace.join(relative))
    }
}

fn read_bytes(path: &Path) -> Result<Option<Vec<u8>>, MemoryError> {
    match fsio::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.kind() == io::ErrorKind::IsADirectory => Ok(None),
        Err(e) => Err(MemoryError::io("read", path, e)),
    }
}

/// The file's text and version; bytes that are not UTF-8 are decoded lossily and say so
/// ([`DocumentText::decoded_lossily`]), so a prompt still shows the file and nothing writes
/// the replaced text back.
fn read_document(path: &Path) -> Result<Option<DocumentText>, MemoryError> {
    Ok(read_bytes(path)?.map(DocumentText::from_bytes))
}

/// An auxiliary file's text; it must be UTF-8 (only this program writes those).
fn read_text(path: &Path) -> Result<Option<String>, MemoryError> {
    match read_bytes(path)? {
        None => Ok(None),
        Some(bytes) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| MemoryError::InvalidFile {
                path: path.to_owned(),
                reason: "the file is not UTF-8 text; fix or remove the invalid bytes".into(),
            }),
    }
}

/// Replaces `path` with `text` atomically: a temporary file beside it, fsync, rename,
/// directory fsync. A crash leaves the old text or the new, never a mix.
pub(crate) fn write_atomic(path: &Path, text: &[u8]) -> Result<(), MemoryError> {
    Ok(nanobot_fs_support::write_atomic(
        path,
        text,
        nanobot_fs_support::Sync::Yes,
    )?)
}

#[async_trait]
impl MemoryDocuments for FileDocuments {
    async fn read(&self, document: Document) -> Result<Option<DocumentText>, MemoryError> {
        read_document(&self.confined(document.path())?)
    }

    async fn write(
        &self,
        document: Document,
        text: &str,
        expected: Expected,
    ) -> Result<DocVersion, MemoryError> {
        self.replace(document.path(), text, expected)
    }

    async fn skills(&self) -> Result<SkillSet, MemoryError> {
        let dir = self.workspace.join("skills");
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(SkillSet::default()),
            Err(e) => return Err(MemoryError::io("list", &dir, e)),
        };
        let mut set = SkillSet::default();
        for entry in entries {
            let entry = entry.map_err(|e| MemoryError::io("list", &dir, e))?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                set.skipped.push(format!(
                    "skipped the skill folder {:?} in {}: its name is not UTF-8",
                    entry.file_name(),
                    dir.display()
                ));
                continue;
            };
            if validate_skill_name(&name).is_err() {
                if !name.starts_with('.') {
                    set.skipped.push(format!(
                        "skipped the skill folder {name:?} in {}: a skill name is ASCII letters, digits, '-' or '_'",
                        dir.display()
                    ));
                }
                continue;
            }
            let path = match self.confined(&skill_path(&name)) {
                Ok(path) => path,
                Err(e @ MemoryError::InvalidFile { .. }) => {
                    set.skipped.push(format!("skipped the skill {name}: {e}"));
                    continue;
                }
                Err(e) => return Err(e),
            };
            if let Some(document) = read_document(&path)? {
                set.skills.push(SkillText { name, document });
            }
        }
        set.skills.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(set)
    }

    async fn read_skill(&self, name: &str) -> Result<Option<DocumentText>, MemoryError> {
        validate_skill_name(name)?;
        read_document(&self.confined(&skill_path(name))?)
    }

    async fn write_skill(
        &self,
        name: &str,
        text: &str,
        expected: Expected,
    ) -> Result<DocVersion, MemoryError> {
        validate_skill_name(name)?;
        self.replace(&skill_path(name), text, expected)
    }

    async fn delete_skill(&self, name: &str, expected: Expected) -> Result<bool, MemoryError> {
        validate_skill_name(name)?;
        let dir = self.confined(&format!("skills/{name}"))?;
        let file = self.confined(&skill_path(name))?;
        let _lock = self.write_lock()?;
        let found = read_bytes(&file)?.map(|b| DocVersion::of_bytes(&b));
        if !expected.is_met_by(found) {
            return Err(document_conflict(&skill_path(name), expected, found));
        }
        match fsio::remove_dir_all(&dir) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(MemoryError::io("delete", &dir, e)),
        }
    }

    async fn read_aux(&self, file: AuxFile) -> Result<Option<String>, MemoryError> {
        read_text(&self.confined(file.path())?)
    }

    async fn write_aux(&self, file: AuxFile, text: &str) -> Result<(), MemoryError> {
        write_atomic(&self.confined(file.path())?, text.as_bytes())
    }

    async fn stamp(&self) -> Result<Option<DocumentsStamp>, MemoryError> {
        // Reading the files is as cheap as proving they did not change.
        Ok(None)
    }

    fn capabilities(&self) -> DocumentCapabilities {
        DocumentCapabilities {
            shared_storage: true,
        }
    }
}
