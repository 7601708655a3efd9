//! `postgres-bot USER "message"`: one turn, each user's memory (and its search index) in
//! PostgreSQL at `DATABASE_URL`, schema `NANOBOT_SCHEMA`; the model at `OPENAI_BASE_URL`.
use nanobot_memory::{Bot, Durability, IsolationMode, Speaker};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, user, text] = &args[..] else {
        return Err("usage: postgres-bot USER MESSAGE".into());
    };
    let env = |name: &str, default: &str| std::env::var(name).unwrap_or(default.into());
    let database = env("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test");
    let schema = env("NANOBOT_SCHEMA", "nanobot");
    let bot = Bot::builder()
        .postgres_with(database, schema, Durability::TurnEnd)
        .openai(&env("OPENAI_BASE_URL", "http://127.0.0.1:8088/v1"), "local")
        .isolation(IsolationMode::User)
        .search(true)
        .build()
        .await?;
    let reply = bot.turn(&Speaker::user(user), "cli:chat", text).await?;
    println!("{}", reply.answer);
    Ok(bot.finish().await?)
}
