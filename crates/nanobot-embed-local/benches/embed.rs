//! Throughput of the in-process embedder and its agreement with the reference server
//! (issue 31, acceptance 5). `NANOBOT_TEST_EMBED_MODEL_DIR=... [NANOBOT_TEST_EMBEDDINGS_URL=...]
//! cargo bench -p nanobot-embed-local --bench embed -- [--texts N]` prints one JSON report:
//! chunks per second over the conversational eval corpus's turns (all cores, and one), and,
//! with the server named, the worst and mean cosine against its vectors and its own rate.
#![allow(
    clippy::print_stdout,
    clippy::expect_used,
    clippy::unwrap_used,
    missing_docs
)]

use std::path::Path;
use std::time::Instant;

use nanobot_embed_local::LocalEmbedder;
use nanobot_llm_port::Embedder;
use serde_json::json;

fn main() {
    let Ok(dir) = std::env::var("NANOBOT_TEST_EMBED_MODEL_DIR") else {
        println!(
            "skipped: NANOBOT_TEST_EMBED_MODEL_DIR is not set (`cargo xtask llm install --model minilm`)"
        );
        return;
    };
    let args: Vec<String> = std::env::args().collect();
    let count: usize = args
        .iter()
        .position(|a| a == "--texts")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(1_000);
    let texts = corpus_turns(count);
    let tokens_hint: usize = texts.iter().map(|t| t.split_whitespace().count()).sum();
    let load = Instant::now();
    let embedder = LocalEmbedder::load(Path::new(&dir), "all-MiniLM-L6-v2").expect("the model");
    let load_ms = load.elapsed().as_secs_f64() * 1e3;
    let rate = |embedder: &LocalEmbedder| {
        let started = Instant::now();
        for batch in texts.chunks(64) {
            embedder.embed_now(batch);
        }
        texts.len() as f64 / started.elapsed().as_secs_f64()
    };
    let all_cores = rate(&embedder);
    let one_core = rate(&embedder.clone().with_threads(1));
    let mut report = json!({
        "texts": texts.len(),
        "words_per_text": tokens_hint as f64 / texts.len() as f64,
        "load_ms": load_ms,
        "chunks_per_second": all_cores,
        "chunks_per_second_one_thread": one_core,
        "threads": std::thread::available_parallelism().map_or(1, |n| n.get()),
    });
    if let Ok(url) = std::env::var("NANOBOT_TEST_EMBEDDINGS_URL") {
        report["reference"] = agreement(&embedder, &url, &texts[..texts.len().min(200)]);
    }
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
}

/// The first `count` turns of the conversational corpus, as stored (`Name: text`).
fn corpus_turns(count: usize) -> Vec<String> {
    let sessions = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../nanobot-search-eval/corpora/dialogue/sessions");
    let mut files: Vec<_> = std::fs::read_dir(&sessions)
        .expect("the corpus")
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    let mut texts = Vec::new();
    for file in files {
        for line in std::fs::read_to_string(file).unwrap().lines().skip(1) {
            let message: serde_json::Value = serde_json::from_str(line).unwrap();
            texts.push(message["content"].as_str().unwrap_or_default().to_owned());
        }
    }
    texts.truncate(count);
    texts
}

/// Cosine of our vectors against the server's, and the server's own rate.
fn agreement(embedder: &LocalEmbedder, url: &str, texts: &[String]) -> serde_json::Value {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let config = nanobot_llm_openai::OpenAiConfig::new(url, "all-MiniLM-L6-v2");
    let server = nanobot_llm_openai::OpenAiEmbedder::new(config, 384).unwrap();
    let started = Instant::now();
    let expected = runtime
        .block_on(server.embed(texts))
        .expect("the reference server");
    let server_rate = texts.len() as f64 / started.elapsed().as_secs_f64();
    let got = embedder.embed_now(texts);
    let cosines: Vec<f32> = expected
        .iter()
        .zip(&got)
        .map(|(a, b)| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>())
        .collect();
    json!({
        "texts": texts.len(),
        "worst_cosine": cosines.iter().copied().fold(f32::INFINITY, f32::min),
        "mean_cosine": cosines.iter().sum::<f32>() / cosines.len().max(1) as f32,
        "server_chunks_per_second": server_rate,
    })
}
