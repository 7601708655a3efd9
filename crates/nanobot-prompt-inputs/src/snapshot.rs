//! What a prompt needs from a workspace, read in one go: the bootstrap files, long-term
//! memory and the skills. The context builder takes this and does no IO of its own.

use std::sync::Arc;

use async_trait::async_trait;
use nanobot_memory_store::MemoryError;

use crate::skills::SkillFile;

/// The workspace files a prompt is built from, as they were when loaded.
///
/// Fill it by hand (tests) or with [`crate::PromptLoader`], which reads the memory files
/// and skills through the document port.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkspaceSnapshot {
    /// The agent workspace as the prompt names it (an absolute path).
    pub agent_dir: String,
    /// The project directory, when the turn works in one other than the agent workspace.
    pub project_dir: Option<String>,
    /// `AGENTS.md` of the project (or of the agent workspace when there is no project).
    pub agents_md: Option<String>,
    /// `SOUL.md` of the agent workspace.
    pub soul_md: Option<String>,
    /// `USER.md` of the agent workspace.
    pub user_md: Option<String>,
    /// `memory/MEMORY.md` of the agent workspace.
    pub memory_md: Option<String>,
    /// Every skill, workspace skills first, each group sorted by name; a built-in skill
    /// with the name of a workspace skill is left out.
    pub skills: Vec<Arc<SkillFile>>,
    /// The directory of the built-in skills as the prompt names it, when there are any.
    pub builtin_skills_dir: Option<String>,
    /// Problems met while loading that did not stop it (a file that was not UTF-8 and was
    /// decoded lossily, an unreadable skill), one sentence each.
    pub warnings: Vec<String>,
}

/// Where a prompt's workspace files come from: read before every turn.
/// [`crate::PromptLoader`] reads them through the document port (so any storage backend
/// changes what the prompt shows); a fixed [`WorkspaceSnapshot`] serves as its own source
/// (tests).
#[async_trait]
pub trait PromptFiles: Send + Sync {
    /// The files as they are now.
    async fn load(&self) -> Result<WorkspaceSnapshot, MemoryError>;
}

#[async_trait]
impl PromptFiles for WorkspaceSnapshot {
    async fn load(&self) -> Result<WorkspaceSnapshot, MemoryError> {
        Ok(self.clone())
    }
}
