//! The server's own costs (issue 18, acceptance 6), in process over the in-memory backend
//! with a model that answers at once, so what is measured is the server and the turn, not a
//! model: a non-streamed turn's latency at 20 concurrent sessions, the time from the model's
//! first token to the client's first content chunk, and the memory each idle session keeps.
//!
//! `cargo bench -p nanobot-serve --bench serve` prints one JSON report. Targets: overhead
//! p99 ≤ 5 ms at 20 sessions, first SSE byte ≤ 20 ms after the first token, ≤ 16 KB per
//! idle session. The 20 sessions are measured twice: back to back (20 turns always in
//! flight on 2 cores: each waits behind the others, a saturation figure) and paced (each
//! session a turn every 50 ms: the server's own cost per turn). The sessions' first turns,
//! where the process builds and counts its first prompt, are reported apart.
#![allow(
    clippy::print_stdout,
    clippy::expect_used,
    clippy::unwrap_used,
    missing_docs
)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use nanobot_context_builder::{BuilderConfig, ContextBuilder, Host};
use nanobot_llm_port::{
    Capabilities, Cl100kBase, LlmClient, LlmError, LlmRequest, LlmResponse, SystemClock, TextSink,
};
use nanobot_serve::{ServeSettings, Server};
use nanobot_turn::{Agent, AgentSettings, InMemoryBackend};
use serde_json::json;
use tower::ServiceExt;

/// Answers at once; when streaming, the first token, a pause, the rest (the first token's
/// time is kept).
struct Instant0 {
    pause: Duration,
    first_token: Mutex<Vec<Instant>>,
}

#[async_trait::async_trait]
impl LlmClient for Instant0 {
    async fn complete(&self, _request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        Ok(LlmResponse::text("ok"))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(128_000)
    }

    async fn complete_streaming(
        &self,
        _request: &LlmRequest,
        sink: &TextSink,
    ) -> Result<LlmResponse, LlmError> {
        self.first_token.lock().unwrap().push(Instant::now());
        sink("first ");
        tokio::time::sleep(self.pause).await;
        sink("rest");
        Ok(LlmResponse::text("first rest"))
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[(((sorted.len() - 1) as f64) * p).round() as usize]
}

fn summary(mut ms: Vec<f64>) -> serde_json::Value {
    ms.sort_by(f64::total_cmp);
    json!({"p50_ms": percentile(&ms, 0.5), "p99_ms": percentile(&ms, 0.99), "max_ms": ms[ms.len() - 1], "count": ms.len()})
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

fn server(llm: Arc<Instant0>) -> Router {
    let mut builder = BuilderConfig::new(Host::new("Linux", "x86_64", "nanobot-rs"));
    builder.tool_contract = false;
    let agent = Arc::new(Agent::new(
        AgentSettings::new("nanobot", 32_768, 512),
        llm,
        Arc::new(ContextBuilder::new(builder, Arc::new(Cl100kBase))),
        Arc::new(InMemoryBackend::new(
            Arc::new(SystemClock),
            Arc::new(Cl100kBase),
        )),
        Arc::new(SystemClock),
        Arc::new(Cl100kBase),
    ));
    let mut settings = ServeSettings::new("nanobot");
    settings.max_concurrent_turns = 64;
    Server::new(agent, settings).router()
}

fn request(session: &str, stream: bool) -> Request<Body> {
    Request::builder()
        .method("POST")
        .uri("/v1/chat/completions")
        .header("content-type", "application/json")
        .header("x-session-id", session)
        .body(Body::from(
            json!({"model": "nanobot", "stream": stream, "messages": [{"role": "user", "content": "hello there"}]})
                .to_string(),
        ))
        .unwrap()
}

/// One non-streamed turn of `session`, answered whole: its time in milliseconds.
async fn turn_ms(router: &Router, session: &str) -> f64 {
    let started = Instant::now();
    let response = router
        .clone()
        .oneshot(request(session, false))
        .await
        .unwrap();
    let _ = response.into_body().collect().await.unwrap();
    started.elapsed().as_secs_f64() * 1e3
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let report = rt.block_on(async {
        // A non-streamed turn at 20 concurrent sessions, 50 turns each, the model at once.
        let router = server(Arc::new(Instant0 {
            pause: Duration::ZERO,
            first_token: Mutex::new(Vec::new()),
        }));
        // Each session's first turn at once: the process's first prompt is built and
        // counted then (reported apart: a start-up cost, not the per-turn overhead).
        let mut first = Vec::new();
        for s in 0..20 {
            let router = router.clone();
            first.push(tokio::spawn(async move {
                turn_ms(&router, &format!("s{s}")).await
            }));
        }
        let mut first_turns = Vec::new();
        for task in first {
            first_turns.push(task.await.unwrap());
        }
        let mut tasks = Vec::new();
        for s in 0..20 {
            let router = router.clone();
            tasks.push(tokio::spawn(async move {
                let mut took = Vec::new();
                for _ in 0..50 {
                    took.push(turn_ms(&router, &format!("s{s}")).await);
                }
                took
            }));
        }
        let mut overhead = Vec::new();
        for task in tasks {
            overhead.extend(task.await.unwrap());
        }

        // The same 20 sessions at a steady rate instead of back to back: each sends a turn
        // every 50 ms (400 turns a second over the 2 cores), 25 turns each. What a turn
        // costs the server when it is not queued behind 19 others.
        let mut paced = Vec::new();
        for s in 0..20 {
            let router = router.clone();
            paced.push(tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(50));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                // Spread the sessions over the period.
                tokio::time::sleep(Duration::from_micros(2_500 * s)).await;
                let mut took = Vec::new();
                for _ in 0..25 {
                    tick.tick().await;
                    took.push(turn_ms(&router, &format!("s{s}")).await);
                }
                took
            }));
        }
        let mut steady = Vec::new();
        for task in paced {
            steady.extend(task.await.unwrap());
        }

        // The first content chunk after the model's first token (then 20 ms to the rest),
        // 100 streamed turns.
        let llm = Arc::new(Instant0 {
            pause: Duration::from_millis(20),
            first_token: Mutex::new(Vec::new()),
        });
        let streaming = server(llm.clone());
        let mut first_byte = Vec::new();
        for n in 0..100 {
            let response = streaming
                .clone()
                .oneshot(request(&format!("stream{n}"), true))
                .await
                .unwrap();
            let mut body = response.into_body();
            loop {
                let frame = body.frame().await.unwrap().unwrap();
                if let Some(data) = frame.data_ref()
                    && String::from_utf8_lossy(data).contains("first ")
                {
                    let arrived = Instant::now();
                    let token = *llm.first_token.lock().unwrap().last().unwrap();
                    first_byte.push((arrived - token).as_secs_f64() * 1e3);
                    break;
                }
            }
            while body.frame().await.is_some() {}
        }

        // Idle sessions: 2,000 of them, one turn each.
        let before = rss_bytes();
        for n in 0..2_000 {
            turn_ms(&router, &format!("idle{n}")).await;
        }
        let after = rss_bytes();
        json!({
            "first_turns_of_20_sessions_at_once": summary(first_turns),
            "non_stream_turn_at_20_sessions_back_to_back": summary(overhead),
            "non_stream_turn_at_20_sessions_400_per_second": summary(steady),
            "first_sse_byte_after_first_token": summary(first_byte),
            "idle_sessions": 2_000,
            "rss_growth_bytes": after.saturating_sub(before),
            "bytes_per_idle_session": after.saturating_sub(before) / 2_000,
        })
    });
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
}
