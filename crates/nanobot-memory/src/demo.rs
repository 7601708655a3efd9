//! The README's main job as a library: memory at work against a real model, step by step.
//! A conversation long enough, with a small window, to cross the consolidation threshold;
//! an idle compaction; a Dream run; the versions Dream recorded; and checks of what a viewer
//! should see (answers that listen, a last answer from memory, the user's profile filled,
//! no fact twice, every curated line with its sources). `nanobot demo` runs it on the
//! configured bot; a bot builder can run it on theirs.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nanobot_llm_port::TextSink;
use nanobot_memory_core::{AutoCompact, SessionSummary};
use nanobot_memory_store::{Document, HistoryJournal, MemoryDocumentsExt};
use nanobot_session_store::SessionKey;
use nanobot_turn::{Agent, ScopeMemory};

use crate::AssemblyError;

mod checks;
pub use checks::DemoCheck;

/// The conversation: a trip with a child's allergy, a preference, and a last question that
/// only memory can answer.
pub const CONVERSATION: [&str; 8] = [
    "Hi! I'm Ada, a software engineer from Berlin. I'm planning a trip to Lisbon in May with my two kids, Max who is nine and Lina who is six. We have one week and a modest budget.",
    "Important: Lina, my youngest, is allergic to peanuts, so every restaurant matters. I always carry an epinephrine auto-injector, and I'd like to know how to explain the allergy in Portuguese.",
    "By the way, I prefer short, practical answers with concrete steps rather than long descriptions. Bullet points are fine, no need for introductions.",
    "Both kids love aquariums and sea animals. Is the Lisbon Oceanarium worth a whole morning, and should we book tickets ahead or just show up early on a weekday?",
    "We booked an apartment near Alfama, which is hilly with narrow streets. How do we get around with two kids without taking taxis everywhere? Is a Viva Viagem card the right thing?",
    "Should we do a day trip to Sintra? The kids like castles, but I worry about the walking, the crowds and the train ride from Rossio station.",
    "Where can we find good pastel de nata near Alfama for a quick breakfast?",
    "Remind me: what did I tell you about allergies, and what should I say in Portuguese at restaurants?",
];

/// The idle session's one turn.
pub const IDLE_TURN: &str = "I'm also learning Portuguese, slowly. Obrigada is thank you, right?";

/// What a turn costs on average, in fastest turns: the archives some turns wait for.
const TURN_COST: f64 = 1.4;

/// What the steps after the conversation cost, in fastest turns: the idle compaction and
/// Dream. Both measured on 2 cores with Qwen2.5-Coder-1.5B (fastest turn 14 s, eight turns
/// 247 s with two archives, then 63 s).
const AFTER_TURNS: f64 = 4.5;

/// The demo on an assembled bot's agent and one scope's memory.
pub struct Demo<'a> {
    agent: Arc<Agent>,
    memory: Arc<ScopeMemory>,
    out: &'a mut dyn Write,
    after_dream: Box<dyn Fn() + Send + 'a>,
    /// Archives that are the model's summaries (not `[RAW]`).
    summaries: usize,
    /// The conversation's answers, in order.
    answers: Vec<String>,
    /// The conversation's session.
    key: SessionKey,
}

impl<'a> Demo<'a> {
    /// The demo in `memory`'s scope of `agent`, writing to `out`.
    pub fn new(
        agent: Arc<Agent>,
        memory: Arc<ScopeMemory>,
        out: &'a mut dyn Write,
    ) -> Result<Self, AssemblyError> {
        Ok(Demo {
            agent,
            memory,
            out,
            after_dream: Box::new(|| {}),
            summaries: 0,
            answers: Vec::new(),
            key: SessionKey::new("cli:demo")?,
        })
    }

    /// Calls `done` once Dream has run (the app clears its progress line there).
    pub fn after_dream(mut self, done: impl Fn() + Send + 'a) -> Self {
        self.after_dream = Box::new(done);
        self
    }

    /// Every step, then the checks, each printed as `[ok]` or `[missing]`.
    pub async fn run(mut self) -> Result<Vec<DemoCheck>, AssemblyError> {
        self.memory.documents.initialize().await?;
        self.conversation().await?;
        self.idle_compaction().await?;
        let report = self.dream().await?;
        let checks = self.checks(&report).await?;
        for check in &checks {
            let mark = if check.passed { "[ok]" } else { "[missing]" };
            self.say(&format!("{mark} {}", check.line));
        }
        Ok(checks)
    }

    fn say(&mut self, text: &str) {
        let _ = writeln!(self.out, "{text}");
        let _ = self.out.flush();
    }

    /// Step 1: a conversation that outgrows its window, each archive shown as it is made,
    /// and after each turn the time left, from this machine's turns so far.
    async fn conversation(&mut self) -> Result<(), AssemblyError> {
        self.say(&format!(
            "== 1. A conversation that outgrows its window ({} turns)",
            CONVERSATION.len()
        ));
        let mut turn_seconds = Vec::new();
        for (n, text) in CONVERSATION.iter().enumerate() {
            let turn_started = Instant::now();
            let entries_before = self.memory.journal.latest_cursor().await?;
            self.say(&format!(
                "\n[turn {} of {}] you> {text}",
                n + 1,
                CONVERSATION.len()
            ));
            let sink: TextSink = Arc::new(|_: &str| {});
            let report = self
                .agent
                .turn(&self.memory, &self.key, text, &sink)
                .await?;
            self.say(&format!("bot> {}", one_paragraph(&report.answer)));
            self.answers.push(report.answer.clone());
            self.agent.finish().await?;
            let handle = self.memory.sessions.get_or_create(&self.key).await?;
            let (count, archived, raw) = handle.read(|s| {
                (
                    s.messages().len(),
                    s.last_consolidated(),
                    nanobot_turn::last_raw_archive(s),
                )
            });
            let seconds = turn_started.elapsed().as_secs_f64();
            turn_seconds.push(seconds);
            self.say(&format!(
                "     [prompt ~{} tokens; session: {count} messages, {archived} archived; {seconds:.0} s{}]",
                report.prompt_tokens,
                time_left(&turn_seconds, CONVERSATION.len())
            ));
            self.show_new_entries(entries_before, raw.as_deref())
                .await?;
        }
        Ok(())
    }

    /// The journal entries after `before`: a summary's first line, or why it went raw.
    async fn show_new_entries(
        &mut self,
        before: u64,
        raw: Option<&str>,
    ) -> Result<(), AssemblyError> {
        for entry in self.memory.journal.read_since(before, None).await? {
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
    async fn idle_compaction(&mut self) -> Result<(), AssemblyError> {
        self.say("\n== 2. An idle session is compacted");
        let idle = SessionKey::new("cli:idle-demo")?;
        let text = IDLE_TURN;
        self.say(&format!("you> {text}"));
        let quiet: TextSink = Arc::new(|_: &str| {});
        let report = self.agent.turn(&self.memory, &idle, text, &quiet).await?;
        self.say(&format!("bot> {}", one_paragraph(&report.answer)));
        self.agent.finish().await?;
        let autocompact =
            AutoCompact::new(self.memory.consolidator.clone(), Duration::from_secs(2));
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
        let handle = self.memory.sessions.get_or_create(&idle).await?;
        let summary = handle.read(SessionSummary::of);
        self.say(&format!(
            "next prompt of {idle} carries the summary: {}",
            summary.map_or("(none)".to_owned(), |s| first_line(&s.text))
        ));
        Ok(())
    }

    /// Steps 3 and 4: a Dream run, the versions it recorded, and the memory files now.
    async fn dream(&mut self) -> Result<nanobot_dream::RunReport, AssemblyError> {
        self.say("\n== 3. Dream turns the journal into lasting memory");
        let journal = &self.memory.journal;
        let pending = journal.latest_cursor().await? - journal.dream_cursor().await?;
        let mode = self.memory.dream.mode().name();
        self.say(&format!(
            "{pending} journal entries wait for Dream ({mode} mode)"
        ));
        let report = self
            .memory
            .dream
            .run(nanobot_dream::Trigger::Manual)
            .await?;
        (self.after_dream)();
        self.say(&nanobot_dream::format::run_reply(&report));
        self.say("\n== 4. What Dream changed (memory versions, a git repository)");
        let log = nanobot_dream::format::log(&self.memory.dream.log(10).await?);
        self.say(&log);
        self.say(
            "(each version with its diff: nanobot memory log ID; where each line came from: nanobot memory blame USER.md)",
        );
        self.say("\n== Memory now");
        for document in [Document::User, Document::Memory] {
            let text = self
                .memory
                .documents
                .read_text(document)
                .await?
                .unwrap_or_default();
            self.say(&format!("--- {}\n{}", document.path(), text.trim_end()));
        }
        Ok(report)
    }
}

/// After the turns so far (their seconds), what is left of `turns`, in words.
fn time_left(seconds: &[f64], turns: usize) -> String {
    // The fastest turn: the first also loads the model, and some wait for an archive.
    let fastest = seconds.iter().copied().fold(f64::INFINITY, f64::min);
    let fastest = if fastest.is_finite() { fastest } else { 15.0 };
    let left = fastest * (turns.saturating_sub(seconds.len()) as f64 * TURN_COST + AFTER_TURNS);
    format!("; about {:.0} min left", (left / 60.0).ceil())
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
    fn time_left_follows_this_machines_fastest_turn() {
        // Measured: 25 s, 64 s, 16 s... then 63 s after the turns; 310 s in all.
        assert_eq!(time_left(&[25.0], 8), "; about 6 min left");
        assert_eq!(time_left(&[25.0, 64.0, 16.0], 8), "; about 4 min left");
        let all = [25.0, 64.0, 16.0, 14.0, 15.0, 14.0, 60.0, 39.0];
        assert_eq!(time_left(&all, 8), "; about 2 min left");
    }
}
