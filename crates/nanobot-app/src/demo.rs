//! `nanobot demo`: memory at work against a real model, step by step. A conversation long
//! enough, with a small window, to cross the consolidation threshold; an idle compaction;
//! a Dream run; and the versions Dream recorded. `cargo xtask demo` starts the local model
//! and runs this.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nanobot_llm_port::{TextSink, TokioClock};
use nanobot_memory_core::AutoCompact;
use nanobot_memory_store::{Document, HistoryJournal, MemoryDocumentsExt};
use nanobot_session_store::SessionKey;

use crate::bot::{Bot, model_client};
use crate::config::Config;
use crate::error::AppError;

const CONVERSATION: [&str; 8] = [
    "Hi! I'm Ada, a software engineer from Berlin. I'm planning a trip to Lisbon in May with my two kids, Max who is nine and Lina who is six. We have one week and a modest budget.",
    "Important: Lina, my youngest, is allergic to peanuts, so every restaurant matters. I always carry an epinephrine auto-injector, and I'd like to know how to explain the allergy in Portuguese.",
    "By the way, I prefer short, practical answers with concrete steps rather than long descriptions. Bullet points are fine, no need for introductions.",
    "Both kids love aquariums and sea animals. Is the Lisbon Oceanarium worth a whole morning, and should we book tickets ahead or just show up early on a weekday?",
    "We booked an apartment near Alfama, which is hilly with narrow streets. How do we get around with two kids without taking taxis everywhere? Is a Viva Viagem card the right thing?",
    "Should we do a day trip to Sintra? The kids like castles, but I worry about the walking, the crowds and the train ride from Rossio station.",
    "Where can we find good pastel de nata near Alfama for a quick breakfast?",
    "Remind me: what did I tell you about allergies, and what should I say in Portuguese at restaurants?",
];

/// Words that show a fact of the conversation reached memory: her name, the allergy, the
/// preference for short answers.
const FACT_WORDS: [&str; 5] = ["ada", "peanut", "short", "concise", "brief"];

/// Runs the demo in `workspace` (a new temporary directory when `None`). With `check`, it
/// fails unless memory worked: at least one archive is a model's summary, a Dream version
/// carries a fact of the conversation into `USER.md` or `memory/MEMORY.md`, and the next
/// prompt holds it.
pub async fn run(
    workspace: Option<std::path::PathBuf>,
    check: bool,
    env: &dyn Fn(&str) -> Option<String>,
    out: &mut dyn Write,
) -> Result<(), AppError> {
    let workspace = workspace.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("nanobot-demo-{}", std::process::id()))
    });
    let mut demo = Demo::open(&workspace, env, out).await?;
    demo.conversation().await?;
    demo.idle_compaction().await?;
    let report = demo.dream().await?;
    let checks = demo.checks(&report).await?;
    for (ok, line) in &checks {
        demo.say(&format!(
            "{} {line}",
            if *ok { "[ok]" } else { "[missing]" }
        ));
    }
    demo.say(&format!(
        "\nDone in {:.0} s. The workspace stays for a look around; chat with it: nanobot --workspace {} chat",
        demo.started.elapsed().as_secs_f64(),
        workspace.display()
    ));
    let failed: Vec<&str> = checks
        .iter()
        .filter(|(ok, _)| !ok)
        .map(|(_, line)| line.as_str())
        .collect();
    if check && !failed.is_empty() {
        return Err(AppError::Demo {
            reason: failed.join("; "),
        });
    }
    Ok(())
}

/// The demo under way: its bot, where it writes, and what it counted.
struct Demo<'a> {
    bot: Bot,
    out: &'a mut dyn Write,
    started: Instant,
    /// Archives that are the model's summaries (not `[RAW]`).
    summaries: usize,
    /// The conversation's session.
    key: SessionKey,
}

impl<'a> Demo<'a> {
    /// The bot on the local model with a window small on purpose, in `workspace`.
    async fn open(
        workspace: &std::path::Path,
        env: &dyn Fn(&str) -> Option<String>,
        out: &'a mut dyn Write,
    ) -> Result<Demo<'a>, AppError> {
        let started = Instant::now();
        let demo_env = |name: &str| -> Option<String> {
            let default = match name {
                "NANOBOT_WORKSPACE" => return Some(workspace.display().to_string()),
                "NANOBOT_PROVIDER" => "local",
                "NANOBOT_CONTEXT_WINDOW" => "2560",
                // Archive a little at a time, so each archive request fits the small window.
                "NANOBOT_CONSOLIDATION_RATIO" => "0.8",
                // Greedy answers: the same run on every machine with the same model.
                "NANOBOT_TEMPERATURE" => "0",
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
            "== nanobot demo: memory at work\nmodel {} at {}; context window {} tokens (small on purpose), answers up to {} tokens\narchives asked with a schema: {}; Dream mode: {}\nworkspace {}\nIt takes about 4 minutes on 2 cores with Qwen2.5-Coder-1.5B (about 2 with --fast); each step is shown as it happens.\n",
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
        bot.memory.documents.initialize().await?;
        let key = SessionKey::new("cli:demo").map_err(|e| AppError::Usage(e.to_string()))?;
        Ok(Demo {
            bot,
            out,
            started,
            summaries: 0,
            key,
        })
    }

    fn say(&mut self, text: &str) {
        let _ = writeln!(self.out, "{text}");
        let _ = self.out.flush();
    }

    /// Step 1: a conversation that outgrows its window, each archive shown as it is made.
    async fn conversation(&mut self) -> Result<(), AppError> {
        self.say(&format!(
            "== 1. A conversation that outgrows its window ({} turns)",
            CONVERSATION.len()
        ));
        for (n, text) in CONVERSATION.iter().enumerate() {
            let turn_started = Instant::now();
            let entries_before = self.bot.memory.journal.latest_cursor().await?;
            self.say(&format!(
                "\n[turn {} of {}] you> {text}",
                n + 1,
                CONVERSATION.len()
            ));
            let sink: TextSink = Arc::new(|_: &str| {});
            let report = self.bot.turn(&self.key, text, &sink).await?;
            self.say(&format!("bot> {}", one_paragraph(&report.answer)));
            self.bot.finish().await?;
            let handle = self.bot.memory.sessions.get_or_create(&self.key).await?;
            let (count, archived, raw) = handle.read(|s| {
                (
                    s.messages().len(),
                    s.last_consolidated(),
                    crate::bot::last_raw_archive(s),
                )
            });
            self.say(&format!(
                "     [prompt ~{} tokens; session: {count} messages, {archived} archived; {:.0} s]",
                report.prompt_tokens,
                turn_started.elapsed().as_secs_f64()
            ));
            self.show_new_entries(entries_before, raw.as_deref())
                .await?;
            if n == 0 {
                let per_turn = self.started.elapsed().as_secs_f64();
                self.say(&format!(
                    "     (first turn took {per_turn:.0} s; the whole demo should take about {:.0} minutes)",
                    (per_turn * (CONVERSATION.len() as f64 + 6.0) / 60.0).ceil()
                ));
            }
        }
        Ok(())
    }

    /// The journal entries after `before`: a summary's first line, or why it went raw.
    async fn show_new_entries(&mut self, before: u64, raw: Option<&str>) -> Result<(), AppError> {
        for entry in self.bot.memory.journal.read_since(before, None).await? {
            if entry.content.starts_with("[RAW]") {
                let why = raw
                    .and_then(|r| r.split_once(": ").map(|(_, why)| why.to_owned()))
                    .unwrap_or_else(|| "no summary could be made".into());
                self.say(&format!(
                    "     [memory] journal entry #{}: the messages themselves ([RAW]), because {why}",
                    entry.cursor
                ));
            } else {
                self.summaries += 1;
                self.say(&format!(
                    "     [memory] journal entry #{}, the model's summary: {}",
                    entry.cursor,
                    first_line(&entry.content)
                ));
            }
        }
        Ok(())
    }

    /// Step 2: a session left idle is archived, and its summary reaches the next prompt.
    async fn idle_compaction(&mut self) -> Result<(), AppError> {
        self.say("\n== 2. An idle session is compacted");
        let idle = SessionKey::new("cli:idle-demo").map_err(|e| AppError::Usage(e.to_string()))?;
        let text = "I'm also learning Portuguese, slowly. Obrigada is thank you, right?";
        self.say(&format!("you> {text}"));
        let quiet: TextSink = Arc::new(|_: &str| {});
        let report = self.bot.turn(&idle, text, &quiet).await?;
        self.say(&format!("bot> {}", one_paragraph(&report.answer)));
        self.bot.finish().await?;
        let autocompact =
            AutoCompact::new(self.bot.memory.consolidator.clone(), Duration::from_secs(2));
        autocompact.touch(&idle);
        self.say("(waiting 2 s of silence, the demo's idle time-to-live)");
        tokio::time::sleep(Duration::from_millis(2_200)).await;
        for done in autocompact.compact_due().await {
            let line = match done.result {
                Ok(Some(record)) => {
                    let how = match &record.outcome {
                        nanobot_memory_core::Archived::Raw { reason, .. } => {
                            format!("the messages themselves ([RAW]), because {reason}")
                        }
                        _ => {
                            self.summaries += 1;
                            "a summary".to_owned()
                        }
                    };
                    format!(
                        "[memory] {} was idle: messages {}-{} archived as {how}",
                        done.key, record.start, record.end
                    )
                }
                Ok(None) => format!("[memory] {} was idle, nothing left to archive", done.key),
                Err(e) => format!("[memory] {}: idle compaction failed: {e}", done.key),
            };
            self.say(&line);
        }
        let handle = self.bot.memory.sessions.get_or_create(&idle).await?;
        let summary = handle.read(nanobot_memory_core::SessionSummary::of);
        self.say(&format!(
            "next prompt of {idle} carries the summary: {}",
            summary.map_or("(none)".to_owned(), |s| first_line(&s.text))
        ));
        Ok(())
    }

    /// Steps 3 and 4: a Dream run, the versions it recorded, and the memory files now.
    async fn dream(&mut self) -> Result<nanobot_dream::RunReport, AppError> {
        self.say("\n== 3. Dream turns the journal into lasting memory");
        let journal = &self.bot.memory.journal;
        let pending = journal.latest_cursor().await? - journal.dream_cursor().await?;
        let mode = self.bot.memory.dream.mode().name();
        self.say(&format!(
            "{pending} journal entries wait for Dream ({mode} mode)"
        ));
        let report = self
            .bot
            .memory
            .dream
            .run(nanobot_dream::Trigger::Manual)
            .await?;
        crate::bot::clear_progress();
        self.say(&nanobot_dream::format::run_reply(&report));
        self.say("\n== 4. What Dream changed (memory versions, a git repository)");
        let log = nanobot_dream::format::log(&self.bot.memory.dream.log(10).await?);
        self.say(&log);
        let repository = self
            .bot
            .config
            .workspace
            .join(nanobot_memory_store::REPOSITORY);
        self.say(&format!(
            "(read it with any git: git --git-dir {} log -p)",
            repository.display()
        ));
        self.say("\n== Memory now");
        for document in [Document::User, Document::Memory] {
            let text = self
                .bot
                .memory
                .documents
                .read_text(document)
                .await?
                .unwrap_or_default();
            self.say(&format!("--- {}\n{}", document.path(), text.trim_end()));
        }
        Ok(report)
    }

    /// Did it remember: summaries made, a fact carried into memory by Dream's version, and
    /// that fact in the next prompt.
    async fn checks(
        &mut self,
        report: &nanobot_dream::RunReport,
    ) -> Result<Vec<(bool, String)>, AppError> {
        self.say("\n== Did it remember?");
        let carried = match &report.version {
            Some(version) => {
                let (_, diffs) = self.bot.memory.dream.show(&version.id).await?;
                diffs
                    .iter()
                    .filter(|d| {
                        d.path == Document::User.path() || d.path == Document::Memory.path()
                    })
                    .flat_map(|d| d.added_lines())
                    .find(|line| has_fact(line))
                    .map(str::to_owned)
            }
            None => None,
        };
        let prompt = self
            .bot
            .build_prompt(&self.key, "What do you know about me?")
            .await?;
        let prompt_text = serde_json::to_string(&prompt.messages).unwrap_or_default();
        let in_prompt = carried
            .as_deref()
            .is_some_and(|line| prompt_text.contains(&json_escaped(line.trim())));
        let summaries = self.summaries;
        Ok(vec![
            (summaries > 0, format!("{summaries} archives are the model's summaries, not [RAW]")),
            (
                carried.is_some(),
                match &carried {
                    Some(line) => format!("Dream's version carries a fact into memory: {}", line.trim()),
                    None => "no Dream version carries her name, the allergy or the short-answers preference into USER.md or memory/MEMORY.md".into(),
                },
            ),
            (in_prompt, "the next prompt of cli:demo holds that fact".to_owned()),
        ])
    }
}

/// Whether `line` names a fact of the conversation: one of [`FACT_WORDS`] as the start of
/// a word ("peanuts" counts, "Obrigada" does not).
fn has_fact(line: &str) -> bool {
    line.to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .any(|word| {
            FACT_WORDS
                .iter()
                .any(|w| word.starts_with(w) && (word.len() <= w.len() + 2))
        })
}

/// `text` as it appears inside a JSON string.
fn json_escaped(text: &str) -> String {
    let quoted = serde_json::to_string(text).unwrap_or_default();
    quoted.trim_matches('"').to_owned()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_are_whole_words() {
        assert!(has_fact("- Name: Ada"));
        assert!(has_fact("- Lina is allergic to peanuts"));
        assert!(has_fact("- Prefers short answers"));
        assert!(!has_fact("- Obrigada is thank you"));
        assert!(!has_fact("- Canada trip"));
    }
}
