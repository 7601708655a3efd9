//! The stack wired by hand, in a few dozen lines: `minimal-bot WORKSPACE "message"` answers
//! one message, remembering the conversation in WORKSPACE. The model is any
//! OpenAI-compatible server (`OPENAI_BASE_URL`, default the local one of `cargo xtask llm`).
#![allow(clippy::print_stdout)]

use std::sync::Arc;

use context_builder::{BuilderConfig, ContextBuilder, CurrentMessage, Host, Turn};
use llm_openai::{OpenAiClient, OpenAiConfig};
use llm_port::{Cl100kBase, LlmClient, LlmRequest, TokioClock};
use memory_core::{ConsolidationConfig, Consolidator, PlainPrompt, replayed_messages};
use memory_store::{FileJournal, WorkspaceLoader};
use session_store::{FileSessionStore, HistoryOptions, SessionKey, SessionManager, StoredMessage};

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

    // Sessions on files, the journal, and the Consolidator over them.
    let store = FileSessionStore::open_workspace(&workspace, Default::default())?;
    let sessions = Arc::new(SessionManager::new(
        Arc::new(store),
        Arc::new(TokioClock::system()),
        Arc::new(Cl100kBase),
    ));
    let journal = Arc::new(FileJournal::open(&workspace)?);
    let consolidator = Arc::new(Consolidator::new(
        ConsolidationConfig::new("local", 4_096, 512),
        llm.clone(),
        journal,
        sessions.clone(),
        Arc::new(PlainPrompt::default()),
        Arc::new(Cl100kBase),
    )?);

    // One turn: history, prompt, model, save, consolidate.
    let key = SessionKey::new("cli:minimal")?;
    let handle = sessions.get_or_create(&key).await?;
    let history = replayed_messages(&handle.history(&HistoryOptions::default()));
    let builder = ContextBuilder::new(BuilderConfig::new(Host::this_build()), Arc::new(Cl100kBase));
    let workspace_files = WorkspaceLoader::new(&workspace)?.load()?;
    let prompt = builder.build(
        &workspace_files,
        &Turn {
            history: &history,
            current: Some(CurrentMessage::user(text.clone())),
            ..Turn::default()
        },
    )?;
    let answer = llm
        .complete(&LlmRequest::new("local", prompt.messages).with_max_tokens(256))
        .await?;
    println!("{}", answer.message.text_content());
    handle.add_message(StoredMessage::user(text));
    handle.add_message(StoredMessage::assistant(answer.message.text_content()));
    sessions.end_turn(&handle).await?;
    consolidator.maybe_consolidate(&key, None).await?;
    Ok(())
}
