//! `nanobot chat`: the interactive conversation, with AutoCompact and Dream running beside
//! it. It writes to the terminal directly.
#![allow(clippy::print_stdout)]

use std::io::{BufRead, IsTerminal, Write};
use std::sync::{Arc, Mutex};

use nanobot_llm_port::TextSink;
use nanobot_session_store::SessionKey;
use rustyline::DefaultEditor;
use rustyline::error::ReadlineError;

use crate::bot::Bot;
use crate::commands;
use crate::error::AppError;

/// The interactive conversation, until Ctrl-D or the end of the input.
pub(super) async fn chat(bot: Arc<Bot>, key: SessionKey) -> Result<(), AppError> {
    let shutdown = Arc::new(tokio::sync::Notify::new());
    spawn_background(&bot, &shutdown);
    println!(
        "nanobot ({}, {}). /help for commands; Ctrl-D leaves.",
        bot.config.llm.model, key
    );
    let editor = if std::io::stdin().is_terminal() {
        let editor = DefaultEditor::new().map_err(|e| AppError::Terminal(e.to_string()))?;
        Some(Arc::new(Mutex::new(editor)))
    } else {
        None
    };
    while let Some(line) = next_line(editor.as_ref()).await? {
        let line = line.trim();
        if !line.is_empty() {
            answer(&bot, &key, line).await;
        }
    }
    shutdown.notify_waiters();
    bot.finish().await?;
    println!("Saved. Bye.");
    Ok(())
}

/// AutoCompact of idle sessions and Dream on its schedule, each saying what it did.
fn spawn_background(bot: &Arc<Bot>, shutdown: &Arc<tokio::sync::Notify>) {
    if let Some(autocompact) = bot.memory.autocompact.clone() {
        let stop = shutdown.clone();
        let (sessions, clock) = (bot.memory.sessions.clone(), bot.agent.clock().clone());
        tokio::spawn(
            autocompact.run(async move { stop.notified().await }, move |done| {
                if let Ok(Some(record)) = &done.result {
                    let raw = match &record.outcome {
                        nanobot_memory_core::Archived::Raw { reason, .. } => {
                            format!(" raw, without a summary ({reason})")
                        }
                        _ => String::new(),
                    };
                    let archived = record.end - record.start;
                    println!(
                        "\n[memory] {} was idle: {archived} messages archived{raw}",
                        done.key
                    );
                }
                let (sessions, clock) = (sessions.clone(), clock.clone());
                tokio::spawn(async move {
                    nanobot_turn::record_compaction(&sessions, clock.as_ref(), &done).await;
                });
            }),
        );
    }
    crate::bot::spawn_dream_schedule(bot.clone(), shutdown.clone(), |scope, line| {
        if scope.subject.is_agent() {
            println!("\n[dream] {line}");
        } else {
            println!("\n[dream {}] {line}", scope.subject);
        }
    });
}

/// The next line the user typed (`None`: they left); Ctrl-C at the prompt asks again.
async fn next_line(editor: Option<&Arc<Mutex<DefaultEditor>>>) -> Result<Option<String>, AppError> {
    let terminal = |e: tokio::task::JoinError| AppError::Terminal(e.to_string());
    let Some(editor) = editor else {
        return tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            match std::io::stdin().lock().read_line(&mut line) {
                Ok(0) | Err(_) => None,
                Ok(_) => Some(line.trim_end_matches(['\n', '\r']).to_owned()),
            }
        })
        .await
        .map_err(terminal);
    };
    loop {
        let editor = editor.clone();
        let read = tokio::task::spawn_blocking(move || {
            let mut editor = editor.lock().unwrap_or_else(|p| p.into_inner());
            let line = editor.readline("you> ");
            if let Ok(text) = &line {
                let _ = editor.add_history_entry(text.as_str());
            }
            line
        })
        .await
        .map_err(terminal)?;
        match read {
            Ok(line) => return Ok(Some(line)),
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => return Ok(None),
            Err(e) => return Err(AppError::Terminal(e.to_string())),
        }
    }
}

/// A slash command's reply, or a turn streamed as the model writes it (Ctrl-C cancels the
/// answer; the message stays saved).
async fn answer(bot: &Bot, key: &SessionKey, line: &str) {
    if let Some(reply) = commands::slash(bot, key, line).await {
        match reply {
            Ok(text) => println!("{text}"),
            Err(e) => println!("error: {e}"),
        }
        return;
    }
    let sink: TextSink = Arc::new(|text: &str| {
        print!("{text}");
        let _ = std::io::stdout().flush();
    });
    print!("bot> ");
    let _ = std::io::stdout().flush();
    tokio::select! {
        result = bot.turn(key, line, &sink) => match result {
            Ok(_) => println!(),
            Err(e) => println!("\nerror: {e}"),
        },
        _ = tokio::signal::ctrl_c() => println!("\n(cancelled; your message is saved, the answer is not)"),
    }
}
