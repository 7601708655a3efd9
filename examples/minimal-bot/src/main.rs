//! The stack wired by hand, in a few dozen lines: `minimal-bot WORKSPACE "message"` answers
//! one message, remembering the conversation in WORKSPACE. The model is any
//! OpenAI-compatible server (`OPENAI_BASE_URL`, default the local one of `cargo xtask llm`).
//! The turn itself is the library's (`nanobot-turn`), the same the `nanobot` program runs.
#![allow(clippy::print_stdout)]

use std::sync::Arc;

use context_builder::{BuilderConfig, ContextBuilder, Host};
use llm_openai::{OpenAiClient, OpenAiConfig};
use llm_port::{Cl100kBase, LlmClient, TextSink, TokioClock};
use memory_scope::{ScopeKey, Subject};
use memory_store::{FileDocuments, FileJournal, FileLease, MemoryVersionStore};
use nanobot_turn::{Agent, AgentSettings, OneScope, ScopeStores};
use prompt_inputs::PromptLoader;
use session_store::{FileSessionStore, SessionKey, SessionManager};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(workspace), Some(text)) = (args.next(), args.next()) else {
        return Err("usage: minimal-bot WORKSPACE \"message\"".into());
    };
    let workspace = std::path::PathBuf::from(workspace);
    std::fs::create_dir_all(&workspace)?;
    let base =
        std::env::var("OPENAI_BASE_URL").unwrap_or_else(|_| "http://127.0.0.1:8088/v1".into());
    let llm: Arc<dyn LlmClient> = Arc::new(OpenAiClient::new(OpenAiConfig::new(base, "local"))?);
    let clock = Arc::new(TokioClock::system());

    // One memory (the agent's) on files: sessions, the journal, the prompt's files.
    let store = FileSessionStore::open_workspace(&workspace, Default::default())?;
    let documents = Arc::new(FileDocuments::open(&workspace)?);
    let stores = ScopeStores::stepwise(
        Arc::new(SessionManager::new(
            Arc::new(store),
            clock.clone(),
            Arc::new(Cl100kBase),
        )),
        Arc::new(FileJournal::open(&workspace)?),
        documents.clone(),
        Arc::new(PromptLoader::new(documents).with_agent_dir(&workspace)?),
        Ok(Arc::new(MemoryVersionStore::new())),
        Arc::new(FileLease::open(&workspace)?),
    );
    let builder = ContextBuilder::new(BuilderConfig::new(Host::this_build()), Arc::new(Cl100kBase));
    let agent = Agent::new(
        AgentSettings::new("local", 4_096, 256),
        llm,
        Arc::new(builder),
        Arc::new(OneScope::new(stores)),
        clock,
        Arc::new(Cl100kBase),
    );

    // One turn: consolidate if needed, prompt, model, save, consolidate in the background.
    let memory = agent.memory(&ScopeKey::local(Subject::Agent)).await?;
    let key = SessionKey::new("cli:minimal")?;
    let print: TextSink = Arc::new(|text: &str| print!("{text}"));
    agent.turn(&memory, &key, &text, &print).await?;
    println!();
    agent.finish().await?;
    Ok(())
}
