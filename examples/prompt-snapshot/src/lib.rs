//! A bot builder's bot, assembled in one function that both the program and its CI test
//! call, so the test snapshots the prompt the program really sends.

use nanobot_memory::context::{BuilderConfig, Host};
use nanobot_memory::{AgentSettings, BotBuilder, IsolationMode};

/// The support bot: one memory per user, a small window, prompts without the tool notes.
/// `host` names the machine in the prompt (a test pins it, so every machine renders the
/// same bytes).
pub fn support_bot(builder: BotBuilder, host: Host) -> BotBuilder {
    let mut context = BuilderConfig::new(host);
    context.tool_contract = false;
    builder
        .isolation(IsolationMode::User)
        .settings(AgentSettings::new("support-model", 8_192, 512))
        .context(context)
        .search(false)
}
