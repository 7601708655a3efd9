//! Issue 36, acceptance 5: `nanobot serve` as the app builds it (the file backend in a
//! workspace, the app's configuration) with 1,000 sessions, each sending a turn every 2 s to
//! a model that answers at once, so what is measured is the server, the turn and the
//! storage. Driven in process through the server's router (no TCP: the client's own cost
//! would share the 2 cores). Target: overhead p99 ≤ 5 ms; the memory each idle session
//! keeps is reported.
//!
//! `cargo bench -p nanobot-app --bench serve_scale [-- --sessions 1000 --period-ms 2000
//! --rounds 3]` prints one JSON report.
#![allow(
    clippy::print_stdout,
    clippy::expect_used,
    clippy::unwrap_used,
    missing_docs
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use axum::Router;
use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use nanobot_llm_port::{Capabilities, LlmClient, LlmError, LlmRequest, LlmResponse};
use nanobot_serve::{ServeSettings, Server};
use serde_json::{Value, json};
use tower::ServiceExt;

struct Instant0;

#[async_trait]
impl LlmClient for Instant0 {
    async fn complete(&self, _request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        Ok(LlmResponse::text("Noted, thank you."))
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::new(65_536)
    }
}

fn arg(args: &[String], name: &str, default: u64) -> u64 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().expect("a number"))
}

fn summary(mut ms: Vec<f64>) -> Value {
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() as f64 - 1.0) * q).round() as usize];
    json!({"p50_ms": at(0.5), "p99_ms": at(0.99), "max_ms": ms[ms.len() - 1], "count": ms.len()})
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn request(session: &str, turn: u64) -> Request<Body> {
    Request::builder()
        .method("POST")
        .uri("/v1/chat/completions")
        .header("content-type", "application/json")
        .header("x-session-id", session)
        .body(Body::from(
            json!({"model": "nanobot", "messages": [{"role": "user", "content": format!("turn {turn}: how is the weather today?")}]})
                .to_string(),
        ))
        .unwrap()
}

/// One turn, answered whole: its time in milliseconds.
async fn turn_ms(router: &Router, session: &str, turn: u64) -> f64 {
    let started = Instant::now();
    let response = router
        .clone()
        .oneshot(request(session, turn))
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    let _ = response.into_body().collect().await.unwrap();
    started.elapsed().as_secs_f64() * 1e3
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let sessions = arg(&args, "--sessions", 1_000);
    let period = Duration::from_millis(arg(&args, "--period-ms", 2_000));
    let rounds = arg(&args, "--rounds", 3);
    // Writes left by whatever ran before (the peer's benchmark writes thousands of files)
    // reach the disk first: the turns' own syncs would otherwise wait behind them.
    let _ = std::process::Command::new("sync").status();
    let workspace = std::env::temp_dir().join(format!("nbrs-serve-scale-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&workspace);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let report = rt.block_on(async {
        let path = workspace.display().to_string();
        let env = move |name: &str| match name {
            "NANOBOT_WORKSPACE" => Some(path.clone()),
            "NANOBOT_DREAM_ENABLED" => Some("false".to_owned()),
            _ => None,
        };
        let config = nanobot_app::Config::load(None, &env).unwrap();
        let bot = nanobot_app::Bot::open(
            config,
            Arc::new(Instant0),
            Arc::new(nanobot_llm_port::SystemClock),
        )
        .await
        .unwrap();
        let mut settings = ServeSettings::new("nanobot");
        settings.max_concurrent_turns = 64;
        let router = Server::new(bot.agent.clone(), settings).router();
        let before = rss_bytes();
        // Every session's first turn, one after another: sessions are created then.
        let mut first = Vec::new();
        for s in 0..sessions {
            first.push(turn_ms(&router, &format!("user-{s:05}"), 0).await);
        }
        let after_first = rss_bytes();
        // Then each session a turn every `period`, the sessions spread over it.
        let started = Instant::now();
        let mut tasks = Vec::new();
        for s in 0..sessions {
            let router = router.clone();
            let offset = period.mul_f64(s as f64 / sessions as f64);
            tasks.push(tokio::spawn(async move {
                tokio::time::sleep(offset).await;
                let mut tick = tokio::time::interval(period);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let mut took = Vec::new();
                for turn in 1..=rounds {
                    tick.tick().await;
                    took.push(turn_ms(&router, &format!("user-{s:05}"), turn).await);
                }
                took
            }));
        }
        let mut steady = Vec::new();
        for task in tasks {
            steady.extend(task.await.unwrap());
        }
        let wall = started.elapsed().as_secs_f64();
        let after = rss_bytes();
        bot.finish().await.unwrap();
        json!({
            "sessions": sessions,
            "period_s": period.as_secs_f64(),
            "rounds": rounds,
            "first_turns": summary(first),
            "steady_turns": summary(steady),
            "turns_per_second": (sessions * rounds) as f64 / wall,
            "rss_before_bytes": before,
            "rss_after_first_turns_bytes": after_first,
            "rss_after_bytes": after,
            "bytes_per_idle_session": after_first.saturating_sub(before) / sessions.max(1),
        })
    });
    let _ = std::fs::remove_dir_all(&workspace);
    let report = json!({"workloads": {"serve_scale": report}});
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
}
