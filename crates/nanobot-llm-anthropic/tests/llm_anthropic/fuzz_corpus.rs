//! The committed inputs of the `sse_stream` and `provider_json` fuzz targets
//! (`fuzz/corpus/`), replayed as ordinary tests: read without a panic, and the two
//! answers the corpus holds as examples read as answers.

use nanobot_bench_workload::testing::fuzz_corpus;
use nanobot_llm_http::SseParser;

#[test]
fn the_stream_corpus_replays() {
    let mut answered = 0;
    for (path, data) in fuzz_corpus("sse_stream") {
        let Some((_, bytes)) = data.split_first() else {
            continue;
        };
        let events = SseParser::new().feed(bytes);
        if nanobot_llm_anthropic::fuzzing::assemble_stream(
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
    let answered = fuzz_corpus("provider_json")
        .iter()
        .filter(|(_, data)| nanobot_llm_anthropic::fuzzing::parse_answer(data).is_ok())
        .count();
    assert!(answered >= 1, "the example answer of this provider reads");
}
