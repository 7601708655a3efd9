//! `cargo xtask eval search`: every labelled corpus into every backend, each question asked
//! of each lane, and a textbook BM25 over the same chunks in the same run; a JSON report
//! and a Markdown table (see README.md).
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod corpus;
mod embed;
mod metrics;
mod rerank;
mod run;
mod textbook;

use std::path::PathBuf;
use std::process::ExitCode;

use corpus::{Corpus, Storage, default_corpora};

use run::{Backend, Options, evaluate, markdown};

const USAGE: &str = "usage: nanobot-search-eval [--corpus DIR]... [--backends memory,sqlite,postgres] [--storage sessions,journal] [--model-dir DIR] [--neighbour-weights W,...] [--coverage-weights W,...] [--report FILE]";

fn main() -> ExitCode {
    match run_cli() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("nanobot-search-eval: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run_cli() -> Result<(), String> {
    let options = parse(std::env::args().skip(1).collect())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("a runtime: {e}"))?;
    let embedder = match &options.model_dir {
        Some(dir) => Some(embed::CachedEmbedder::load(dir)?),
        None => {
            eprintln!("no --model-dir (nor NANOBOT_TEST_EMBED_MODEL_DIR): the words lanes only");
            None
        }
    };
    let mut results = Vec::new();
    for dir in &options.corpora {
        for &storage in &options.storage {
            let corpus = Corpus::load(dir, storage)?;
            eprintln!(
                "{} as {}: {} chunks, {} questions",
                corpus.name,
                storage.name(),
                corpus.chunks().count(),
                corpus.questions.len()
            );
            results.push(runtime.block_on(evaluate(
                &corpus,
                storage,
                &options,
                embedder.clone(),
            ))?);
        }
    }
    let report = serde_json::json!({ "results": results });
    if let Some(parent) = options.report.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    std::fs::write(&options.report, text + "\n")
        .map_err(|e| format!("{}: {e}", options.report.display()))?;
    println!("{}", markdown(&results));
    eprintln!("report: {}", options.report.display());
    Ok(())
}

fn parse(args: Vec<String>) -> Result<Options, String> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let root = manifest
        .ancestors()
        .nth(2)
        .map_or_else(|| manifest.clone(), PathBuf::from);
    let mut options = Options {
        corpora: Vec::new(),
        backends: vec![Backend::Memory, Backend::Sqlite],
        storage: vec![Storage::Sessions, Storage::Journal],
        report: root.join("target/eval/search.json"),
        postgres_url: nanobot_store_postgres::testing::url(),
        model_dir: std::env::var_os("NANOBOT_TEST_EMBED_MODEL_DIR").map(PathBuf::from),
        neighbour_weights: Vec::new(),
        coverage_weights: Vec::new(),
    };
    if options.postgres_url.is_some() {
        options.backends.push(Backend::Postgres);
    }
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| format!("{arg} needs a value\n{USAGE}"))
        };
        match arg.as_str() {
            "--corpus" => options.corpora.push(PathBuf::from(value()?)),
            "--report" => options.report = PathBuf::from(value()?),
            "--model-dir" => options.model_dir = Some(PathBuf::from(value()?)),
            "--neighbour-weights" => options.neighbour_weights = weights(&arg, &value()?)?,
            "--coverage-weights" => options.coverage_weights = weights(&arg, &value()?)?,
            "--backends" => {
                options.backends = value()?
                    .split(',')
                    .map(Backend::parse)
                    .collect::<Result<_, _>>()?;
            }
            "--storage" => {
                options.storage = value()?
                    .split(',')
                    .map(|name| match name {
                        "sessions" => Ok(Storage::Sessions),
                        "journal" => Ok(Storage::Journal),
                        other => Err(format!("--storage: {other:?} is not sessions or journal")),
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--help" | "-h" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    if options.corpora.is_empty() {
        options.corpora = default_corpora(&root);
    }
    if options.backends.contains(&Backend::Postgres) && options.postgres_url.is_none() {
        return Err("postgres: NANOBOT_TEST_PG_URL is not set".to_owned());
    }
    Ok(options)
}

/// A comma-separated list of weights, each at least 0.
fn weights(flag: &str, list: &str) -> Result<Vec<f64>, String> {
    list.split(',')
        .map(|w| match w.parse::<f64>() {
            Ok(weight) if weight >= 0.0 => Ok(weight),
            _ => Err(format!("{flag}: {w:?} is not a weight >= 0")),
        })
        .collect()
}
