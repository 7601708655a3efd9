//! The committed inputs of the `sse_stream` and `provider_json` fuzz targets
//! (`fuzz/corpus/`), replayed as ordinary tests: read without a panic, and the two
//! answers the corpus holds as examples read as answers.

use std::path::{Path, PathBuf};

use llm_http::SseParser;

fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let path = e.path();
            let bytes = std::fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect();
    inputs.sort();
    assert!(inputs.len() >= 2, "the {target} corpus is committed");
    inputs
}

#[test]
fn the_stream_corpus_replays() {
    let mut answered = 0;
    for (path, data) in inputs("sse_stream") {
        let Some((_, bytes)) = data.split_first() else {
            continue;
        };
        let events = SseParser::new().feed(bytes);
        if llm_anthropic::fuzzing::assemble_stream(
            events.iter().map(|e| (e.event.as_deref(), e.data.as_str())),
        )
        .is_ok()
        {
            answered += 1;
        } else {
            eprintln!("{}: no answer", path.display());
        }
    }
    assert!(answered >= 1, "the example stream of this provider reads");
}

#[test]
fn the_answer_corpus_replays() {
    let answered = inputs("provider_json")
        .iter()
        .filter(|(_, data)| llm_anthropic::fuzzing::parse_answer(data).is_ok())
        .count();
    assert!(answered >= 1, "the example answer of this provider reads");
}
