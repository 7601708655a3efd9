//! Durable documents as files in the workspace, where nanobot-ai keeps them.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use async_trait::async_trait;

use crate::documents::{
    AuxFile, Document, MemoryDocuments, SkillInfo, skill_info, validate_skill_name,
};
use crate::error::MemoryError;

/// `SOUL.md`, `USER.md`, `memory/MEMORY.md` and `skills/<name>/SKILL.md` under a workspace.
#[derive(Debug, Clone)]
pub struct FileDocuments {
    workspace: PathBuf,
}

impl FileDocuments {
    /// The documents of `workspace` (created if missing).
    pub fn open(workspace: &Path) -> Result<Self, MemoryError> {
        fs::create_dir_all(workspace).map_err(|e| MemoryError::io("create", workspace, e))?;
        Ok(FileDocuments {
            workspace: workspace.to_owned(),
        })
    }

    /// The file of `document`.
    pub fn path_of(&self, document: Document) -> PathBuf {
        self.workspace.join(document.path())
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

fn read_text(path: &Path) -> Result<Option<String>, MemoryError> {
    match fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| MemoryError::InvalidFile {
                path: path.to_owned(),
                reason: "the file is not UTF-8 text; fix or remove the invalid bytes".into(),
            }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(MemoryError::io("read", path, e)),
    }
}

/// Replaces `path` with `text` atomically: a temporary file beside it, fsync, rename,
/// directory fsync. A crash leaves the old text or the new, never a mix.
pub(crate) fn write_atomic(path: &Path, text: &[u8]) -> Result<(), MemoryError> {
    Ok(fs_support::write_atomic(path, text, fs_support::Sync::Yes)?)
}

#[async_trait]
impl MemoryDocuments for FileDocuments {
    async fn read(&self, document: Document) -> Result<Option<String>, MemoryError> {
        read_text(&self.confined(document.path())?)
    }

    async fn write(&self, document: Document, text: &str) -> Result<(), MemoryError> {
        write_atomic(&self.confined(document.path())?, text.as_bytes())
    }

    async fn list_skills(&self) -> Result<Vec<SkillInfo>, MemoryError> {
        let dir = self.workspace.join("skills");
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(MemoryError::io("list", &dir, e)),
        };
        let mut skills = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| MemoryError::io("list", &dir, e))?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if validate_skill_name(&name).is_err() {
                continue;
            }
            let path = match self.confined(&format!("skills/{name}/SKILL.md")) {
                Ok(path) => path,
                Err(MemoryError::InvalidFile { .. }) => continue,
                Err(e) => return Err(e),
            };
            if let Some(text) = read_text(&path)? {
                skills.push(skill_info(&name, &text));
            }
        }
        skills.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(skills)
    }

    async fn read_skill(&self, name: &str) -> Result<Option<String>, MemoryError> {
        validate_skill_name(name)?;
        read_text(&self.confined(&format!("skills/{name}/SKILL.md"))?)
    }

    async fn write_skill(&self, name: &str, text: &str) -> Result<(), MemoryError> {
        validate_skill_name(name)?;
        write_atomic(
            &self.confined(&format!("skills/{name}/SKILL.md"))?,
            text.as_bytes(),
        )
    }

    async fn delete_skill(&self, name: &str) -> Result<bool, MemoryError> {
        validate_skill_name(name)?;
        let dir = self.confined(&format!("skills/{name}"))?;
        match fs::remove_dir_all(&dir) {
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
}
