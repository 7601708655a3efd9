//! Dream's commands: a run, its versions, a restore, its instructions.

use std::fmt::Write as _;

use nanobot_dream::{Trigger, format};

use super::ScopeCommands;
use crate::AssemblyError;

impl ScopeCommands<'_> {
    /// `/dream`: a run now (`dry_run`: what it would change, nothing written).
    pub async fn dream_run(&self, dry_run: bool) -> Result<String, AssemblyError> {
        let dream = &self.memory.dream;
        let report = if dry_run {
            dream.dry_run().await?
        } else {
            dream.run(Trigger::Manual).await?
        };
        Ok(format::run_reply(&report))
    }

    /// `memory blame FILE`: each line of a memory file with the version that wrote it and
    /// the conversations it came from.
    pub async fn memory_blame(&self, path: &str) -> Result<String, AssemblyError> {
        let lines = self.memory.dream.blame(path).await?;
        Ok(format::blame(path, &lines))
    }

    /// `memory history [COUNT|QUERY]`: the newest journal entries (10, or `COUNT`), or the
    /// memory lines mentioning `QUERY`.
    pub async fn memory_history_of(&self, what: Option<&str>) -> Result<String, AssemblyError> {
        match what {
            None => self.memory_history(10).await,
            Some(what) => match what.trim().parse::<usize>() {
                Ok(count) => self.memory_history(count).await,
                Err(_) => self.memory_line_history(what).await,
            },
        }
    }

    /// `memory history QUERY`: the memory lines mentioning `query`, held now or replaced,
    /// with the time each was held.
    pub async fn memory_line_history(&self, query: &str) -> Result<String, AssemblyError> {
        let found = self.memory.dream.line_history(query).await?;
        Ok(format::history(query, &found))
    }

    /// `/dream-log [id]`: Dream's versions, or one with its changes.
    pub async fn dream_log(&self, id: Option<&str>) -> Result<String, AssemblyError> {
        if let Some(id) = id {
            let (version, diffs) = self.memory.dream.show(id).await?;
            return Ok(format::show(&version, &diffs));
        }
        let mut out = format::log(&self.memory.dream.log(20).await?);
        if let Some(workspace) = self.workspace {
            out.push_str(&foreign_history(workspace));
        }
        Ok(out)
    }

    /// `/dream-restore [id]`: the versions to restore, or a restore to before `id`.
    pub async fn dream_restore(&self, id: Option<&str>) -> Result<String, AssemblyError> {
        if let Some(id) = id {
            return Ok(format::restore_reply(&self.memory.dream.restore(id).await?));
        }
        let versions: Vec<_> = self
            .memory
            .dream
            .log(50)
            .await?
            .into_iter()
            .filter(|v| v.message.starts_with("dream:"))
            .take(10)
            .collect();
        if versions.is_empty() {
            return Ok("Dream memory has no saved versions to restore yet.".into());
        }
        let mut out = String::from(
            "## Dream Restore\n\nChoose a Dream memory version to restore. Latest first:\n",
        );
        for v in &versions {
            let at = v.time.format("%Y-%m-%d %H:%M UTC");
            let _ = write!(out, "\n- `{}` {at} - {}", v.short_id(), v.subject());
        }
        out.push_str("\n\nPreview one with `/dream-log <id>`; restore with `/dream-restore <id>`.");
        Ok(out)
    }

    /// `/dream-prompt [init]`: whose instructions Dream follows; `init` copies the default.
    pub async fn dream_prompt(&self, argument: Option<&str>) -> Result<String, AssemblyError> {
        let dream = &self.memory.dream;
        Ok(
            match argument.map(|a| a.trim().to_ascii_lowercase()).as_deref() {
                None => {
                    let (_, custom) = dream.instructions().await?;
                    if custom {
                        "Dream memory instructions: custom for this workspace, in `prompts/dream.md`. Delete or empty that file to go back to the default.".into()
                    } else {
                        "Dream memory instructions: nanobot default. Run `/dream-prompt init` to create an editable copy at `prompts/dream.md`.".into()
                    }
                }
                Some("init") => {
                    if dream.init_instructions().await? {
                        "Created Dream memory instructions at `prompts/dream.md`. They fully replace the default; delete or empty the file to go back.".into()
                    } else {
                        "Dream memory instructions already exist at `prompts/dream.md`.".into()
                    }
                }
                Some(_) => "Usage: /dream-prompt [init]".into(),
            },
        )
    }
}

/// The versions nanobot-ai recorded in the workspace's own `.git`, read-only, so nothing
/// recorded there is out of sight (empty when there are none).
#[cfg(feature = "files")]
fn foreign_history(workspace: &std::path::Path) -> String {
    let mut out = String::new();
    match nanobot_memory_store::workspace_git_history(workspace, 20) {
        Ok(Some(history)) if !history.is_empty() => {
            let _ = write!(
                out,
                "\n\nEarlier versions in {} (nanobot-ai's; read-only, view them with git):",
                workspace.join(".git").display()
            );
            for version in history {
                let _ = write!(
                    out,
                    "\n  {}  {}  {}",
                    version.id.get(..8).unwrap_or(&version.id),
                    version.time.format("%Y-%m-%d %H:%M UTC"),
                    version.message.lines().next().unwrap_or("")
                );
            }
        }
        Ok(_) => {}
        Err(e) => {
            let _ = write!(out, "\n\n(The workspace's .git could not be read: {e})");
        }
    }
    out
}

/// Without the file backends there is no workspace `.git` to read.
#[cfg(not(feature = "files"))]
fn foreign_history(_workspace: &std::path::Path) -> String {
    String::new()
}
