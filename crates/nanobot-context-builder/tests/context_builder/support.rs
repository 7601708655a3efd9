//! Fixtures shared by the tests.

use std::sync::Arc;

use nanobot_context_builder::{
    BuilderConfig, ContextBuilder, Host, JournalEntry, SkillFile, SkillSource, WorkspaceSnapshot,
};
use nanobot_llm_port::Cl100kBase;
use nanobot_prompt_inputs::RequirementProbe;

/// Linux, x86_64, a fixed runtime: snapshots do not depend on the host.
pub(crate) fn host() -> Host {
    Host::new("Linux", "x86_64", "nanobot-rs 0.1")
}

pub(crate) fn builder() -> ContextBuilder {
    builder_with(BuilderConfig::new(host()))
}

pub(crate) fn builder_with(config: BuilderConfig) -> ContextBuilder {
    ContextBuilder::new(config, Arc::new(Cl100kBase))
}

pub(crate) fn workspace() -> WorkspaceSnapshot {
    WorkspaceSnapshot {
        agent_dir: "/home/ada/.nanobot/workspace".into(),
        ..WorkspaceSnapshot::default()
    }
}

/// Binaries and variables named `missing*` are absent; everything else is present.
pub(crate) struct Probe;

impl RequirementProbe for Probe {
    fn has_binary(&self, name: &str) -> bool {
        !name.starts_with("missing")
    }
    fn has_env(&self, name: &str) -> bool {
        !name.starts_with("MISSING")
    }
}

pub(crate) fn skill(name: &str, text: &str) -> Arc<SkillFile> {
    Arc::new(SkillFile::parse(name, SkillSource::Workspace, text, &Probe))
}

pub(crate) fn entry(cursor: u64, key: Option<&str>, content: &str) -> JournalEntry {
    JournalEntry {
        cursor,
        timestamp: format!("2026-08-19 10:{:02}", cursor % 60),
        content: content.into(),
        session_key: key.map(str::to_owned),
        message_range: None,
        message_digest: None,
        extra: Default::default(),
    }
}

/// The system prompt's parts, for fixtures whose files hold no separator of their own.
pub(crate) fn parts(system: &str) -> Vec<&str> {
    system.split(nanobot_context_builder::SEPARATOR).collect()
}

/// The prompt inputs of the workspace at `workspace` (and built-in skills in `builtin`),
/// read through its file documents as the app reads them.
pub(crate) fn load_workspace(
    workspace: &std::path::Path,
    builtin: Option<&std::path::Path>,
) -> WorkspaceSnapshot {
    let documents = Arc::new(nanobot_memory_store::FileDocuments::open(workspace).unwrap());
    let mut loader = nanobot_prompt_inputs::PromptLoader::new(documents)
        .with_agent_dir(workspace)
        .unwrap();
    if let Some(dir) = builtin {
        loader = loader.with_builtin_skills(dir).unwrap();
    }
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(loader.load())
        .unwrap()
}
