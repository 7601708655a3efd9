//! `nanobot demo`: memory at work against a real model, step by step. A conversation long
//! enough, with a small window, to cross the consolidation threshold; an idle compaction;
//! a Dream run; and the versions Dream recorded. `cargo xtask demo` starts the local model
//! and runs this.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use llm_port::{TextSink, TokioClock};
use memory_core::AutoCompact;
use memory_store::{Document, HistoryJournal, MemoryDocuments, MemoryDocumentsExt};
use session_store::SessionKey;

use crate::bot::{Bot, model_client};
use crate::config::Config;
use crate::error::AppError;

const CONVERSATION: [&str; 12] = [
    "Hi! I'm Ada, a software engineer from Berlin. I'm planning a trip to Lisbon in May with my two kids, Max who is nine and Lina who is six. We have one week and a modest budget.",
    "Important: Lina, my youngest, is allergic to peanuts, so every restaurant matters. I always carry an epinephrine auto-injector, and I'd like to know how to explain the allergy in Portuguese.",
    "Both kids love aquariums and sea animals. Is the Lisbon Oceanarium worth a whole morning, and should we book tickets ahead or just show up early on a weekday?",
    "We booked an apartment near Alfama, which is hilly with narrow streets. How do we get around with two kids without taking taxis everywhere? Is a Viva Viagem card the right thing?",
    "Max has read about tram 28 and wants to ride it end to end. I heard it gets very crowded and there are pickpockets. Any tips for riding it with children?",
    "By the way, I prefer short, practical answers with concrete steps rather than long descriptions. Bullet points are fine, no need for introductions.",
    "Should we do a day trip to Sintra? The kids like castles, but I worry about the walking, the crowds and the train ride from Rossio station.",
    "What should we pack for Lisbon in May? I expect warm afternoons but I'm not sure about evenings, rain, or how much sun protection the kids will need.",
    "Where can we find good pastel de nata? I know about Belem, but is there a place near Alfama that is less touristy and good for a quick breakfast?",
    "We might visit a beach one afternoon. Is Cascais easy to reach by train, and is the water warm enough in May for kids to swim?",
    "One evening I'd like a quiet dinner with fado music that still works for children. Is that realistic, and how late do restaurants usually serve dinner?",
    "Remind me: what did I tell you about allergies, and what should I say in Portuguese at restaurants?",
];

/// Runs the demo in `workspace` (a new temporary directory when `None`).
pub async fn run(
    workspace: Option<std::path::PathBuf>,
    env: &dyn Fn(&str) -> Option<String>,
    out: &mut dyn Write,
) -> Result<(), AppError> {
    let workspace = workspace.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("nanobot-demo-{}", std::process::id()))
    });
    let demo_env = |name: &str| -> Option<String> {
        match name {
            "NANOBOT_WORKSPACE" => Some(workspace.display().to_string()),
            "NANOBOT_PROVIDER" => env(name).or(Some("local".into())),
            "NANOBOT_CONTEXT_WINDOW" => env(name).or(Some("2560".into())),
            // Archive a little at a time, so each archive request fits the small window.
            "NANOBOT_CONSOLIDATION_RATIO" => env(name).or(Some("0.8".into())),
            "NANOBOT_MAX_OUTPUT_TOKENS" => env(name).or(Some("128".into())),
            "NANOBOT_DREAM_MAX_STEPS" => env(name).or(Some("8".into())),
            "NANOBOT_STREAM" => env(name).or(Some("true".into())),
            _ => env(name),
        }
    };
    let config = Config::load(None, &demo_env)?;
    let mut say = |text: &str| {
        let _ = writeln!(out, "{text}");
        let _ = out.flush();
    };
    say(&format!(
        "== nanobot demo: memory at work\nmodel {} at {}; context window {} tokens (small on purpose), answers up to {} tokens\nworkspace {}\n",
        config.model,
        config.base_url,
        config.context_window,
        config.max_output_tokens,
        workspace.display()
    ));
    let llm = model_client(&config)?;
    let bot = Bot::open(config, llm, Arc::new(TokioClock::system())).await?;
    bot.documents.initialize().await?;

    say("== 1. A conversation that outgrows its window");
    let key = SessionKey::new("cli:demo").map_err(|e| AppError::Usage(e.to_string()))?;
    for text in CONVERSATION {
        let entries_before = bot.journal.latest_cursor().await?;
        say(&format!("\nyou> {text}"));
        let sink: TextSink = Arc::new(|_: &str| {});
        let report = bot.turn(&key, text, &sink).await?;
        say(&format!("bot> {}", one_paragraph(&report.answer)));
        bot.finish().await?;
        let handle = bot.sessions.get_or_create(&key).await?;
        let (count, archived) = handle.read(|s| (s.messages().len(), s.last_consolidated()));
        say(&format!(
            "     [prompt ~{} tokens; session: {count} messages, {archived} archived]",
            report.prompt_tokens
        ));
        for entry in bot.journal.read_since(entries_before, None).await? {
            say(&format!(
                "     [memory] consolidated into journal entry #{}: {}",
                entry.cursor,
                first_line(&entry.content)
            ));
        }
    }

    say("\n== 2. An idle session is compacted");
    let idle = SessionKey::new("cli:idle-demo").map_err(|e| AppError::Usage(e.to_string()))?;
    for text in [
        "I'm also learning Portuguese, slowly.",
        "Obrigada is thank you, right?",
    ] {
        say(&format!("you> {text}"));
        let quiet: TextSink = Arc::new(|_: &str| {});
        let report = bot.turn(&idle, text, &quiet).await?;
        say(&format!("bot> {}", one_paragraph(&report.answer)));
    }
    bot.finish().await?;
    let autocompact = AutoCompact::new(bot.consolidator.clone(), Duration::from_secs(2));
    autocompact.touch(&idle);
    say("(waiting 2 s of silence, the demo's idle time-to-live)");
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    for done in autocompact.compact_due().await {
        match done.result {
            Ok(Some(record)) => say(&format!(
                "[memory] {} was idle: messages {}-{} archived",
                done.key, record.start, record.end
            )),
            Ok(None) => say(&format!(
                "[memory] {} was idle, nothing left to archive",
                done.key
            )),
            Err(e) => say(&format!(
                "[memory] {}: idle compaction failed: {e}",
                done.key
            )),
        }
    }
    let summary = bot
        .sessions
        .get_or_create(&idle)
        .await?
        .read(memory_core::SessionSummary::of);
    say(&format!(
        "next prompt of {idle} carries the summary: {}",
        summary.map_or("(none)".to_owned(), |s| first_line(&s.text))
    ));

    say("\n== 3. Dream turns the journal into lasting memory");
    let pending = bot.journal.latest_cursor().await? - bot.journal.dream_cursor().await?;
    say(&format!("{pending} journal entries wait for Dream"));
    let report = bot.dream.run(dream::Trigger::Manual).await?;
    say(&dream::format::run_reply(&report));

    say("\n== 4. What Dream changed (memory versions, a git repository)");
    say(&dream::format::log(&bot.dream.log(10).await?));
    say(&format!(
        "(read it with any git: git --git-dir {} log -p)",
        bot.config
            .workspace
            .join(memory_store::REPOSITORY)
            .display()
    ));
    say("\n== Memory now");
    for document in [Document::User, Document::Memory] {
        let text = bot.documents.read(document).await?.unwrap_or_default();
        say(&format!("--- {}\n{}", document.path(), text.trim_end()));
    }
    say(
        "\nDone. The workspace stays for a look around; chat with it: nanobot --workspace <dir> chat",
    );
    Ok(())
}

fn one_paragraph(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > 300 {
        format!("{}…", flat.chars().take(300).collect::<String>())
    } else {
        flat
    }
}

fn first_line(text: &str) -> String {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    line.chars().take(160).collect()
}
