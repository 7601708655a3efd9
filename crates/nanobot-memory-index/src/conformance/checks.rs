//! The checks of the words suite, one job each.

use super::*;

/// `texts` as journal entries from cursor `first` on, all written at `at`.
fn journal_entries(first: u64, at: &str, texts: &[impl AsRef<str>]) -> Vec<GroupUpdate> {
    let chunks = (first..)
        .zip(texts)
        .map(|(cursor, text)| journal_chunk(cursor, at, text.as_ref()))
        .collect();
    GroupUpdate::from_chunks(chunks)
}

/// A failed check's message.
pub(super) fn fail(check: &str, e: IndexError) -> String {
    format!("{check}: {e}")
}

/// The same hits every time, one per source, snippets within bounds.
pub(super) async fn stable_hits(a: &dyn MemoryIndex, fixture: &Fixture) -> Result<(), String> {
    for query in &fixture.queries {
        let request = SearchRequest::new(&query.query).limit(10);
        let first = a.search(&request).await.map_err(|e| fail(&query.id, e))?;
        let second = a.search(&request).await.map_err(|e| fail(&query.id, e))?;
        if first != second {
            return Err(format!("{}: two searches gave different hits", query.id));
        }
        check_hits(&query.id, &first)?;
    }
    Ok(())
}

/// Isolation: scope b holds its own few chunks; nothing crosses either way.
pub(super) async fn isolation(
    a: &dyn MemoryIndex,
    b: &dyn MemoryIndex,
    fixture: &Fixture,
) -> Result<(), String> {
    let planted = [
        "Scope b only: the vault code is ZEBRA-7731.",
        "Scope b only: 秘密的会议在周四。",
        "Scope b only: INC-20931 is a different incident here, about the printer.",
    ];
    b.replace(journal_entries(9001, "2026-11-01 10:00", &planted))
        .await
        .map_err(|e| fail("loading scope b", e))?;
    for query in ["ZEBRA-7731", "秘密", "会议", "vault code"] {
        let hits = a
            .search(&SearchRequest::new(query).limit(10))
            .await
            .map_err(|e| fail("isolation", e))?;
        if let Some(hit) = hits.iter().find(|hit| hit.snippet.contains("Scope b only")) {
            return Err(format!(
                "isolation: scope a found scope b's {} for {query:?}",
                hit.source
            ));
        }
    }
    for query in &fixture.queries {
        let hits = b
            .search(&SearchRequest::new(&query.query).limit(10))
            .await
            .map_err(|e| fail("isolation", e))?;
        if let Some(hit) = hits
            .iter()
            .find(|hit| !hit.snippet.contains("Scope b only"))
        {
            return Err(format!(
                "isolation: scope b found scope a's {} for {}",
                hit.source, query.id
            ));
        }
    }
    Ok(())
}

/// Freshness: searchable when replace returns, gone when the removal returns.
pub(super) async fn freshness(a: &dyn MemoryIndex) -> Result<(), String> {
    let fresh = journal_chunk(
        301,
        "2026-11-30 12:00",
        "The courier code for the new locker is KOALA-5150.",
    );
    a.replace(vec![GroupUpdate {
        group: fresh.group.clone(),
        chunks: vec![fresh],
    }])
    .await
    .map_err(|e| fail("freshness", e))?;
    let found = a
        .search(&SearchRequest::new("KOALA-5150"))
        .await
        .map_err(|e| fail("freshness", e))?;
    if found.first().map(|hit| hit.source.as_str()) != Some("history#301") {
        return Err(format!(
            "freshness: a new entry is not the first hit: {found:?}"
        ));
    }
    a.replace(vec![GroupUpdate::remove("history#301")])
        .await
        .map_err(|e| fail("freshness", e))?;
    if !a
        .search(&SearchRequest::new("KOALA-5150"))
        .await
        .map_err(|e| fail("freshness", e))?
        .is_empty()
    {
        return Err("freshness: a removed entry is still found".into());
    }
    Ok(())
}

/// A memory file replaced as a whole: its old sections are gone.
pub(super) async fn memory_rewrite(a: &dyn MemoryIndex) -> Result<(), String> {
    let counter = Cl100kBase::new();
    let rewritten = memory_chunks(
        "MEMORY.md",
        "# Long-term memory\n\n## Travel\n\n- The Zanzibar trip was cancelled.\n",
        parse_timestamp("2026-12-01 09:00"),
        &counter,
        Chunking::default(),
    );
    a.replace(vec![GroupUpdate {
        group: "MEMORY.md".into(),
        chunks: rewritten,
    }])
    .await
    .map_err(|e| fail("replacing a file", e))?;
    let hits = a
        .search(&SearchRequest::new("EMP-55018"))
        .await
        .map_err(|e| fail("replacing a file", e))?;
    if hits.iter().any(|hit| hit.source.starts_with("MEMORY.md#")) {
        return Err("replacing a file: a section of the old MEMORY.md is still found".into());
    }
    let hits = a
        .search(&SearchRequest::new("Zanzibar cancelled"))
        .await
        .map_err(|e| fail("replacing a file", e))?;
    if hits.first().map(|hit| hit.source.as_str()) != Some("MEMORY.md#Travel") {
        return Err(format!(
            "replacing a file: the new section is not the first hit: {hits:?}"
        ));
    }
    Ok(())
}

/// A cleared session: every message of it is gone, other sessions stay.
pub(super) async fn cleared_session(a: &dyn MemoryIndex, fixture: &Fixture) -> Result<(), String> {
    let target = fixture
        .queries
        .iter()
        .find(|q| q.relevant.iter().any(|s| s.starts_with("session:")))
        .ok_or("the fixture has no session query")?;
    let source = &target.relevant[0];
    let key = source
        .trim_start_matches("session:")
        .rsplit_once('#')
        .map(|(key, _)| key)
        .unwrap_or_default();
    a.remove_prefix(&session_prefix(key))
        .await
        .map_err(|e| fail("clearing a session", e))?;
    let hits = a
        .search(&SearchRequest::new(&target.query).limit(10))
        .await
        .map_err(|e| fail("clearing a session", e))?;
    if hits.iter().any(|hit| hit.source == *source) {
        return Err(format!(
            "clearing a session: {source} is still found after its session was removed"
        ));
    }
    let other = fixture
        .queries
        .iter()
        .find(|q| {
            q.kind == QueryKind::Exact
                && q.relevant
                    .iter()
                    .any(|s| s.starts_with("session:") && !s.starts_with(&session_prefix(key)))
        })
        .ok_or("the fixture has one session query only")?;
    let hits = a
        .search(&SearchRequest::new(&other.query))
        .await
        .map_err(|e| fail("clearing a session", e))?;
    if !hits.iter().any(|hit| other.relevant.contains(&hit.source)) {
        return Err(format!(
            "clearing a session removed another session's message ({})",
            other.id
        ));
    }
    Ok(())
}

/// Marks: set, read back, changed, removed; each scope has its own.
pub(super) async fn marks(a: &dyn MemoryIndex, b: &dyn MemoryIndex) -> Result<(), String> {
    a.set_marks(vec![
        ("journal".into(), Some("300".into())),
        ("session:telegram:1000".into(), Some("1.4:9".into())),
    ])
    .await
    .map_err(|e| fail("marks", e))?;
    a.set_marks(vec![
        ("journal".into(), Some("301".into())),
        ("session:telegram:1000".into(), None),
    ])
    .await
    .map_err(|e| fail("marks", e))?;
    let marks = a.marks().await.map_err(|e| fail("marks", e))?;
    if marks.len() != 1 || marks.get("journal").map(String::as_str) != Some("301") {
        return Err(format!("marks: expected only journal = 301, got {marks:?}"));
    }
    if !b.marks().await.map_err(|e| fail("marks", e))?.is_empty() {
        return Err("marks: scope b sees scope a's marks".into());
    }
    Ok(())
}

/// The request's bounds.
pub(super) async fn request_bounds(a: &dyn MemoryIndex) -> Result<(), String> {
    let only_history = a
        .search(
            &SearchRequest::new("user")
                .limit(10)
                .sources([SourceKind::History]),
        )
        .await
        .map_err(|e| fail("sources", e))?;
    if only_history.is_empty() || only_history.iter().any(|h| h.kind != SourceKind::History) {
        return Err(format!(
            "sources: asked for history only, got {only_history:?}"
        ));
    }
    let since = parse_timestamp("2026-10-01 00:00").ok_or("a timestamp")?;
    let recent = a
        .search(&SearchRequest::new("user").limit(10).since(since))
        .await
        .map_err(|e| fail("since", e))?;
    if recent.is_empty() || recent.iter().any(|h| h.at.is_none_or(|at| at < since)) {
        return Err(format!(
            "since: asked for hits after {since}, got {recent:?}"
        ));
    }
    for (label, request) in [
        ("limit 0", SearchRequest::new("user").limit(0)),
        ("limit 11", SearchRequest::new("user").limit(11)),
        ("no words", SearchRequest::new("?! -- …")),
        ("no sources", SearchRequest::new("user").sources([])),
    ] {
        match a.search(&request).await {
            Err(IndexError::InvalidRequest { .. }) => {}
            other => return Err(format!("{label}: not refused as invalid: {other:?}")),
        }
    }
    Ok(())
}

pub(super) fn check_hits(id: &str, hits: &[Hit]) -> Result<(), String> {
    for (i, hit) in hits.iter().enumerate() {
        if hit.snippet.chars().count() > MAX_SNIPPET_CHARS {
            return Err(format!(
                "{id}: a snippet of {} characters",
                hit.snippet.chars().count()
            ));
        }
        if hits[..i].iter().any(|other| other.source == hit.source) {
            return Err(format!("{id}: {} returned twice", hit.source));
        }
        if i > 0 && hits[i - 1].score < hit.score {
            return Err(format!("{id}: hits not best first"));
        }
    }
    Ok(())
}

/// For a backend that keeps [`crate::COMMON_QUERY_WINDOW`] (optional in the port): a query
/// whose every term is in most chunks ranks among the newest `COMMON_QUERY_WINDOW` chunks
/// only, so the oldest chunks, though they say the word most often, are not found; a rare
/// word beside it is searched across the whole index. `index` must be empty.
pub async fn common_query_window(index: &dyn MemoryIndex) -> Result<(), String> {
    use crate::{COMMON_QUERY_WINDOW, journal_chunk};
    let total = COMMON_QUERY_WINDOW + 50;
    let chunks: Vec<_> = (1..=total as u64)
        .map(|cursor| {
            let text = if cursor <= 50 {
                "weather weather weather weather report".to_owned()
            } else {
                format!("weather note number{cursor}")
            };
            journal_chunk(cursor, "2026-12-01 10:00", &text)
        })
        .collect();
    index
        .replace(GroupUpdate::from_chunks(chunks))
        .await
        .map_err(|e| format!("loading: {e}"))?;
    let hits = index
        .search(&SearchRequest::new("weather"))
        .await
        .map_err(|e| format!("searching: {e}"))?;
    if hits.len() != 5 {
        return Err(format!("{} hits for a word in every chunk", hits.len()));
    }
    let oldest_searched = (total - COMMON_QUERY_WINDOW) as u64;
    for hit in &hits {
        let cursor: u64 = hit
            .source
            .trim_start_matches("history#")
            .parse()
            .map_err(|_| format!("an unexpected source {}", hit.source))?;
        if cursor <= oldest_searched {
            return Err(format!("{} is older than the window", hit.source));
        }
    }
    let rare = index
        .search(&SearchRequest::new("weather report"))
        .await
        .map_err(|e| format!("searching: {e}"))?;
    if rare.first().map(|hit| hit.source.as_str()) != Some("history#1") {
        return Err(format!(
            "a rare word beside a common one: {:?}",
            rare.first()
        ));
    }
    Ok(())
}

/// Issue 31's rules of the words lane, on scope b (emptied first): a name held by most
/// chunks still decides whose fact comes first (the two cello turns differ in little else,
/// and the tie would go to Jonas's, the lower source), other forms of a word are found, and
/// function words ("when did ... the") rank nothing.
pub(super) async fn word_forms_and_names(b: &dyn MemoryIndex) -> Result<(), String> {
    b.remove_prefix("")
        .await
        .map_err(|e| fail("emptying scope b", e))?;
    let turns = [
        "Jonas: I started cello lessons last month, my teacher is strict.",
        "Maria: I started cello lessons last month, my teacher is patient.",
        "Maria: We went to the beach on Sunday.",
        "Jonas: The paintings I made for the fair sold out.",
        "Maria: Sounds lovely, well done.",
        "Maria: I painted a lighthouse at dusk this week.",
        "Jonas: When did the bus come?",
        "Maria: Thanks!",
    ];
    b.replace(journal_entries(7001, "2026-11-02 10:00", &turns))
        .await
        .map_err(|e| fail("loading scope b", e))?;
    for (query, expected) in [
        ("When did Maria start cello lessons?", "history#7002"),
        ("When did Jonas start cello lessons?", "history#7001"),
        ("Where did Maria go?", "history#7003"),
        ("What is Maria painting?", "history#7006"),
        ("Which paintings did Jonas sell?", "history#7004"),
    ] {
        let hits = b
            .search(&SearchRequest::new(query).limit(3))
            .await
            .map_err(|e| fail("word forms and names", e))?;
        if hits.first().map(|hit| hit.source.as_str()) != Some(expected) {
            return Err(format!(
                "word forms and names: {query:?} should find {expected} first, found {:?}",
                hits.iter().map(|hit| &hit.source).collect::<Vec<_>>()
            ));
        }
    }
    b.remove_prefix("")
        .await
        .map_err(|e| fail("emptying scope b", e))
}

/// The words lane scores as the in-memory index does on the same chunks, however a backend
/// stores them: a word repeated past PostgreSQL's 256 positions, a turn of several
/// kilobytes, other forms, a Chinese character standing for every word it starts.
pub(super) async fn same_scores_as_in_memory(b: &dyn MemoryIndex) -> Result<(), String> {
    let filler: String = (0..400)
        .map(|i| format!("note{i} about the shipyard"))
        .collect::<Vec<_>>()
        .join(", ");
    let turns = [
        "Maria: The harbour festival had boats, boats and more boats.".to_owned(),
        format!("Jonas: {filler}, and a boat in the harbour."),
        format!("Maria: {}harbour!", "ha ".repeat(300)),
        "Jonas: We sailed past the harbours at dawn.".to_owned(),
        "Maria: 我们在港口看船，港湾很美。".to_owned(),
        "Jonas: The festival ends on Sunday.".to_owned(),
        "Maria: Ha, I knew it.".to_owned(),
    ];
    let updates = journal_entries(8001, "2026-11-03 09:00", &turns);
    b.remove_prefix("")
        .await
        .map_err(|e| fail("emptying scope b", e))?;
    b.replace(updates.clone())
        .await
        .map_err(|e| fail("loading scope b", e))?;
    let reference = crate::memory::InMemoryIndex::new();
    reference
        .replace(updates)
        .await
        .map_err(|e| fail("loading the in-memory index", e))?;
    for query in [
        "harbour boats",
        "ha harbour",
        "sailing boat",
        "港",
        "Maria harbour",
    ] {
        let request = SearchRequest::new(query).limit(10);
        let got = b.search(&request).await.map_err(|e| fail(query, e))?;
        let want = reference
            .search(&request)
            .await
            .map_err(|e| fail(query, e))?;
        let same = got.len() == want.len()
            && got.iter().zip(&want).all(|(g, w)| {
                g.source == w.source
                    && g.snippet == w.snippet
                    && (g.score - w.score).abs() <= 1e-9 * w.score.abs().max(1.0)
            });
        if !same {
            return Err(format!(
                "scores: {query:?} gave {:?}, the in-memory index {:?}",
                got.iter().map(|h| (&h.source, h.score)).collect::<Vec<_>>(),
                want.iter()
                    .map(|h| (&h.source, h.score))
                    .collect::<Vec<_>>()
            ));
        }
    }
    b.remove_prefix("")
        .await
        .map_err(|e| fail("emptying scope b", e))
}
