//! `files-bot WORKSPACE USER "message"`: one turn, each user's memory kept apart in WORKSPACE.
use nanobot_memory::{Bot, IsolationMode, Speaker};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, workspace, user, text] = &args[..] else {
        return Err("usage: files-bot WORKSPACE USER MESSAGE".into());
    };
    let model = std::env::var("OPENAI_BASE_URL").unwrap_or("http://127.0.0.1:8088/v1".into());
    let bot = Bot::builder()
        .files(workspace)
        .openai(&model, "local")
        .isolation(IsolationMode::User)
        .build()
        .await?;
    let reply = bot.turn(&Speaker::user(user), "cli:chat", text).await?;
    println!("{}", reply.answer);
    Ok(bot.finish().await?)
}
