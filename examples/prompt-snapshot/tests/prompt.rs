//! The prompt of the support bot for a user with a known memory, snapshotted: a change in
//! the bot's assembly, its memory files or nanobot-memory itself shows up as a diff in
//! review instead of as a surprise in production.

use std::sync::Arc;

use chrono::{TimeZone, Utc};
use nanobot_memory::context::Host;
use nanobot_memory::llm::TokioClock;
use nanobot_memory::scope::{ScopeKey, Subject, UserKey};
use nanobot_memory::store::{Document, Expected};
use nanobot_memory::{Bot, Speaker};

#[tokio::test]
async fn the_support_bots_prompt_is_what_review_approved() {
    let start = Utc.with_ymd_and_hms(2026, 3, 2, 9, 30, 0).unwrap();
    let bot = prompt_snapshot::support_bot(Bot::builder(), Host::new("Linux", "x86_64", "CI"))
        // Never called: building a prompt asks no model.
        .openai("http://127.0.0.1:9/v1", "support-model")
        .clock(Arc::new(TokioClock::starting_at(start)))
        .build()
        .await
        .unwrap();
    let ada = ScopeKey::local(Subject::User(UserKey::new("cli", "ada").unwrap()));
    let memory = bot.memory(&ada).await.unwrap();
    memory
        .documents
        .write(
            Document::User,
            "# User\n\n- Name: Ada\n- Prefers short answers.\n",
            Expected::Absent,
        )
        .await
        .unwrap();

    let prompt = bot
        .prompt(
            &Speaker::user("ada"),
            "cli:chat",
            "What do you know about me?",
        )
        .await
        .unwrap();
    insta::assert_snapshot!("system_prompt", prompt.system_prompt());
    insta::assert_json_snapshot!("messages", serde_json::to_value(&prompt.messages).unwrap());
}
