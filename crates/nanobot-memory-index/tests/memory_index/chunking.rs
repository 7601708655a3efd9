use nanobot_llm_port::tokens::Cl100kBase;
use nanobot_llm_port::tokens::TokenCounter;
use nanobot_memory_index::{
    Chunking, SourceKind, group_of, journal_chunk, memory_chunks, parse_timestamp, session_chunk,
};

#[test]
fn a_memory_file_is_cut_at_headings_and_named_by_them() {
    let text = "# Memory\n\n## Work\n\n- Standup at 9:30.\n\n## Travel\n\n- Flight LX1612.\n\n## Empty\n\n### Deeper\n\nNested text.\n";
    let chunks = memory_chunks(
        "MEMORY.md",
        text,
        None,
        &Cl100kBase::new(),
        Chunking::default(),
    );
    let sources: Vec<&str> = chunks.iter().map(|c| c.source.as_str()).collect();
    // The title's section and the empty section have no text of their own.
    assert_eq!(
        sources,
        ["MEMORY.md#Work", "MEMORY.md#Travel", "MEMORY.md#Deeper"]
    );
    assert!(
        chunks
            .iter()
            .all(|c| c.group == "MEMORY.md" && c.kind == SourceKind::Memory)
    );
    assert_eq!(chunks.iter().map(|c| c.part).collect::<Vec<_>>(), [0, 1, 2]);
    // The heading is part of the chunk: a query for the topic finds it.
    assert!(chunks[1].text.starts_with("## Travel"));
}

#[test]
fn text_before_the_first_heading_and_headings_in_code_fences() {
    let text = "Loose notes.\n\n## Code\n\n```sh\n# not a heading\necho hi\n```\n";
    let chunks = memory_chunks(
        "USER.md",
        text,
        None,
        &Cl100kBase::new(),
        Chunking::default(),
    );
    let sources: Vec<&str> = chunks.iter().map(|c| c.source.as_str()).collect();
    assert_eq!(sources, ["USER.md#", "USER.md#Code"]);
    assert!(chunks[1].text.contains("# not a heading"));
}

#[test]
fn a_long_section_becomes_overlapping_windows_that_cover_it() {
    let counter = Cl100kBase::new();
    let paragraphs: Vec<String> = (0..120)
        .map(|i| format!("Paragraph {i} says something about topic number {i} in detail."))
        .collect();
    let text = format!("## Long\n\n{}\n", paragraphs.join("\n\n"));
    let chunking = {
        let mut value = Chunking::default();
        value.max_tokens = 100;
        value.overlap_tokens = 20;
        value
    };
    let chunks = memory_chunks("MEMORY.md", &text, None, &counter, chunking);
    assert!(chunks.len() > 5, "{} chunks", chunks.len());
    for chunk in &chunks {
        assert!(counter.count(&chunk.text) <= 100 + 2, "{}", chunk.text);
        assert_eq!(chunk.source, "MEMORY.md#Long");
    }
    // Every paragraph is in some chunk, and neighbours share their edge.
    for paragraph in &paragraphs {
        assert!(
            chunks.iter().any(|c| c.text.contains(paragraph.as_str())),
            "{paragraph}"
        );
    }
    for pair in chunks.windows(2) {
        let last_line = pair[0].text.lines().last().unwrap_or_default();
        assert!(
            pair[1].text.contains(last_line),
            "no overlap between windows"
        );
    }
}

#[test]
fn a_long_line_without_spaces_is_cut_too() {
    let counter = Cl100kBase::new();
    let text = format!("## 中文\n\n{}\n", "用户喜欢喝茶".repeat(200));
    let chunks = memory_chunks("MEMORY.md", &text, None, &counter, {
        let mut value = Chunking::default();
        value.max_tokens = 100;
        value.overlap_tokens = 10;
        value
    });
    assert!(chunks.len() > 3);
    let joined: String = chunks.iter().map(|c| c.text.as_str()).collect();
    assert!(joined.matches("喝茶").count() >= 190);
}

#[test]
fn sessions_index_user_and_assistant_text_only() {
    assert!(session_chunk("telegram:1", 0, "user", "hello", None).is_some());
    assert!(session_chunk("telegram:1", 1, "assistant", "hi", None).is_some());
    assert!(session_chunk("telegram:1", 2, "tool", "result", None).is_none());
    assert!(session_chunk("telegram:1", 3, "assistant", "  ", None).is_none());
    assert!(session_chunk("telegram:1", 4, "system", "prompt", None).is_none());
    let chunk = session_chunk(
        "telegram:1",
        7,
        "user",
        "x",
        Some("2026-03-01T10:00:00.123456"),
    )
    .expect("a chunk");
    assert_eq!(chunk.source, "session:telegram:1#7");
    assert_eq!(chunk.group, chunk.source);
    assert!(chunk.at.is_some());
}

#[test]
fn groups_and_timestamps() {
    assert_eq!(group_of("history#12"), "history#12");
    assert_eq!(group_of("session:telegram:1#4"), "session:telegram:1#4");
    assert_eq!(group_of("MEMORY.md#Travel"), "MEMORY.md");
    assert_eq!(group_of("USER.md#"), "USER.md");
    assert!(parse_timestamp("2026-03-01 09:30").is_some());
    assert!(parse_timestamp("2026-03-01T09:30:00").is_some());
    assert!(parse_timestamp("yesterday").is_none());
    assert_eq!(journal_chunk(3, "garbage", "text").at, None);
}
