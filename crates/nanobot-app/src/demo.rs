//! `nanobot demo`: the library's demo (`nanobot_memory::demo`) on the configured bot, with
//! the demo's defaults: the local model, a window small on purpose, greedy answers kept
//! from repeating themselves. `cargo xtask demo` starts the local model and runs this.

use std::io::Write;
use std::sync::Arc;

use nanobot_llm_port::TokioClock;
use nanobot_memory::demo::Demo;

use crate::bot::{Bot, model_client};
use crate::config::Config;
use crate::error::AppError;

/// Runs the demo in `workspace` (a new temporary directory when `None`). With `check`, it
/// fails unless memory worked (see `nanobot_memory::demo`'s checks).
pub async fn run(
    workspace: Option<std::path::PathBuf>,
    check: bool,
    env: &dyn Fn(&str) -> Option<String>,
    out: &mut dyn Write,
) -> Result<(), AppError> {
    let started = std::time::Instant::now();
    let workspace = workspace.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("nanobot-demo-{}", std::process::id()))
    });
    let demo_env = |name: &str| -> Option<String> {
        let default = match name {
            "NANOBOT_WORKSPACE" => return Some(workspace.display().to_string()),
            "NANOBOT_PROVIDER" => "local",
            "NANOBOT_CONTEXT_WINDOW" => "2560",
            // Archive a little at a time, so each archive request fits the small window.
            "NANOBOT_CONSOLIDATION_RATIO" => "0.8",
            // Greedy answers: the same run on every machine with the same model.
            "NANOBOT_TEMPERATURE" => "0",
            // A greedy small model copies its previous answer into the next one (turns 4 to
            // 8 once gave one answer): a mild penalty over the whole window (docs/FACTS.md).
            "NANOBOT_FREQUENCY_PENALTY" => "0.3",
            "NANOBOT_REPEAT_LAST_N" => "2560",
            "NANOBOT_MAX_OUTPUT_TOKENS" => "128",
            "NANOBOT_DREAM_MAX_STEPS" => "4",
            "NANOBOT_STREAM" => "true",
            _ => return env(name),
        };
        env(name).or(Some(default.into()))
    };
    let config = Config::load(None, &demo_env)?;
    let _ = writeln!(
        out,
        "== nanobot demo: memory at work\nmodel {} at {}; context window {} tokens (small on purpose), answers up to {} tokens\narchives asked with a schema: {}; Dream mode: {}\nworkspace {}\nAbout 5 minutes on 2 cores with Qwen2.5-Coder-1.5B (about 2 with --fast); each turn says how long is left on this machine.\n",
        config.llm.model,
        config.llm.base_url,
        config.llm.context_window,
        config.llm.max_output_tokens,
        config.memory.archive_with_schema,
        config.dream.mode.name(),
        workspace.display()
    );
    let _ = out.flush();
    let llm = model_client(&config)?;
    let bot = Bot::open(config, llm, Arc::new(TokioClock::system())).await?;
    let demo = Demo::new(bot.agent.clone(), bot.memory.clone(), out)?
        .after_dream(crate::bot::clear_progress);
    let checks = demo.run().await?;
    let _ = writeln!(
        out,
        "\nDone in {:.0} s. The workspace stays for a look around; chat with it: nanobot --workspace {} chat",
        started.elapsed().as_secs_f64(),
        workspace.display()
    );
    let failed: Vec<&str> = checks
        .iter()
        .filter(|c| !c.passed)
        .map(|c| c.line.as_str())
        .collect();
    if check && !failed.is_empty() {
        return Err(AppError::Demo {
            reason: failed.join("; "),
        });
    }
    Ok(())
}
