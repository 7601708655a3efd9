//! The PostgreSQL bot, run as its user would, against the local server (a schema of its
//! own, dropped afterwards) and a loopback model.

use std::process::Command;
use std::sync::Arc;

use nanobot_llm_http::testing::FakeServer;
use nanobot_store_postgres::testing::{TestSchema, url};

fn run(database: &str, schema: &str, model: &str, user: &str, text: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_postgres-bot"))
        .args([user, text])
        .env("DATABASE_URL", database)
        .env("NANOBOT_SCHEMA", schema)
        .env("OPENAI_BASE_URL", model)
        .output()
        .expect("postgres-bot runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_users_keep_their_memories_apart_and_may_search_them() {
    let Some(database) = url() else {
        nanobot_bench_workload::testing::skip(
            "postgres-bot",
            "NANOBOT_TEST_PG_URL is not set (`cargo xtask ci` sets it to the local PostgreSQL)",
        );
        return;
    };
    let model = FakeServer::chat_model(Arc::new(|text: &str| format!("Noted: {text}"))).await;
    let model_url = format!("{}/v1", model.url());
    let schema = TestSchema::new(&database);
    let name = schema.name().to_owned();
    let (db, m) = (database.clone(), model_url.clone());
    let answers = tokio::task::spawn_blocking(move || {
        [
            run(&db, &name, &m, "ada", "My bees are called PG-CANARY."),
            run(&db, &name, &m, "bob", "What are the bees called?"),
            run(&db, &name, &m, "ada", "What are my bees called?"),
        ]
    })
    .await
    .unwrap();
    assert_eq!(answers[0].trim(), "Noted: My bees are called PG-CANARY.");

    let requests: Vec<String> = model
        .requests()
        .iter()
        .map(|r| r.json().to_string())
        .collect();
    assert_eq!(requests.len(), 3, "{requests:?}");
    // Every turn offers the model the search over its own memory.
    assert!(requests.iter().all(|r| r.contains("search_memory")));
    // Bob's turn never saw Ada's words; Ada's next turn, in another process, did.
    assert!(!requests[1].contains("PG-CANARY"));
    assert!(requests[2].contains("PG-CANARY"));

    // The schema holds what the bot wrote: two users' scopes; dropped with the store.
    let store = schema.store().await;
    let scopes = store.scopes().await.unwrap();
    assert!(
        scopes.iter().filter(|s| !s.key.subject.is_agent()).count() >= 2,
        "{scopes:?}"
    );
}
