//! The suite of the vectors beside an index.

use super::*;

/// The vector lane's contract (`crate::VectorIndex`) on a fresh `index`: vectors of one
/// model only, of its length; a replaced or removed group loses its vectors; the chunks
/// without one listed in order; `nearest` deterministic, one hit per source, within the
/// request. An `Err` names the broken rule.
pub async fn vector_suite<I>(index: &I) -> Result<(), String>
where
    I: MemoryIndex + crate::VectorIndex,
{
    use crate::{ChunkVector, HashingEmbedder, journal_chunk};
    use nanobot_llm_port::{Embedder, EmbeddingModel};

    let fail = |rule: &str, detail: String| Err(format!("{rule}: {detail}"));
    let embedder = HashingEmbedder::new(64);
    let model = embedder.model();
    if index
        .vector_model()
        .await
        .map_err(|e| e.to_string())?
        .is_some()
    {
        return fail("a new index holds no model", String::new());
    }
    let texts = [
        "The nightly backup job on pluto-db-02 timed out",
        "The user prefers green tea to coffee",
        "用户喜欢喝茶",
    ];
    let chunks: Vec<_> = texts
        .iter()
        .enumerate()
        .map(|(i, text)| journal_chunk(i as u64 + 1, "2026-03-01 10:00", text))
        .collect();
    index
        .replace(GroupUpdate::from_chunks(chunks))
        .await
        .map_err(|e| e.to_string())?;
    let missing = index.missing_vectors(10).await.map_err(|e| e.to_string())?;
    let groups: Vec<&str> = missing.iter().map(|c| c.group.as_str()).collect();
    if groups != ["history#1", "history#2", "history#3"] {
        return fail(
            "missing_vectors lists every chunk in order",
            format!("{groups:?}"),
        );
    }
    if index
        .missing_vectors(2)
        .await
        .map_err(|e| e.to_string())?
        .len()
        != 2
    {
        return fail("missing_vectors keeps to its limit", String::new());
    }
    let embed = |chunks: &[crate::Chunk]| {
        chunks
            .iter()
            .map(|c| ChunkVector {
                group: c.group.clone(),
                part: c.part,
                vector: embedder.vector(&c.text),
            })
            .collect::<Vec<_>>()
    };
    // Refusals first: nothing of them may be stored.
    let mut short = embed(&missing[..1]);
    short[0].vector.pop();
    if index.put_vectors(&model, short).await.is_ok() {
        return fail("a vector of another length is refused", String::new());
    }
    index
        .put_vectors(&model, embed(&missing))
        .await
        .map_err(|e| e.to_string())?;
    if index.vector_model().await.map_err(|e| e.to_string())? != Some(model.clone()) {
        return fail("the model of the vectors is recorded", String::new());
    }
    if !index
        .missing_vectors(10)
        .await
        .map_err(|e| e.to_string())?
        .is_empty()
    {
        return fail("no chunk is missing its vector after a put", String::new());
    }
    let other = EmbeddingModel {
        name: "another-model".into(),
        dimensions: 64,
    };
    match index.put_vectors(&other, embed(&missing)).await {
        Err(IndexError::InvalidUpdate { .. }) => {}
        outcome => {
            return fail(
                "vectors of a second model are refused",
                format!("{outcome:?}"),
            );
        }
    }
    let query = embedder.vector("green tea");
    let request = SearchRequest::new("green tea").limit(2);
    let hits = index
        .nearest(&query, &request)
        .await
        .map_err(|e| e.to_string())?;
    if hits.first().map(|h| h.source.as_str()) != Some("history#2") || hits.len() != 2 {
        return fail("nearest finds the closest chunk first", format!("{hits:?}"));
    }
    if index
        .nearest(&query, &request)
        .await
        .map_err(|e| e.to_string())?
        != hits
    {
        return fail("nearest is deterministic", String::new());
    }
    let sessions_only = request.clone().sources([crate::SourceKind::Sessions]);
    if !index
        .nearest(&query, &sessions_only)
        .await
        .map_err(|e| e.to_string())?
        .is_empty()
    {
        return fail("nearest keeps to the request's sources", String::new());
    }
    // A replaced group loses its vector; a removed one its hits.
    index
        .replace(GroupUpdate::from_chunks(vec![journal_chunk(
            2,
            "2026-03-01 10:00",
            "The user now drinks coffee only",
        )]))
        .await
        .map_err(|e| e.to_string())?;
    let missing = index.missing_vectors(10).await.map_err(|e| e.to_string())?;
    if missing.len() != 1 || missing[0].group != "history#2" {
        return fail("a replaced chunk loses its vector", format!("{missing:?}"));
    }
    index
        .remove_prefix("history#1")
        .await
        .map_err(|e| e.to_string())?;
    let all = SearchRequest::new("backup").limit(10);
    let hits = index
        .nearest(&embedder.vector("backup"), &all)
        .await
        .map_err(|e| e.to_string())?;
    if hits.iter().any(|h| h.source == "history#1") {
        return fail(
            "a removed chunk is not found by vector",
            format!("{hits:?}"),
        );
    }
    index.clear_vectors().await.map_err(|e| e.to_string())?;
    if index
        .vector_model()
        .await
        .map_err(|e| e.to_string())?
        .is_some()
        || index
            .missing_vectors(10)
            .await
            .map_err(|e| e.to_string())?
            .len()
            != 2
    {
        return fail("clearing drops every vector and the model", String::new());
    }
    Ok(())
}

/// Two handles on one empty index (two processes' opens of one file, two instances on
/// one database): what one writes to the vector lane, the other's `nearest` answers by
/// at once, whatever copy of the vectors it keeps (a replaced chunk's vector gone, a new
/// chunk's vector added, every vector cleared and put again). An `Err` names the broken
/// rule.
pub async fn vector_copies_follow_other_handles<I>(reader: &I, writer: &I) -> Result<(), String>
where
    I: MemoryIndex + crate::VectorIndex,
{
    use crate::{ChunkVector, HashingEmbedder, journal_chunk};
    use nanobot_llm_port::Embedder;

    let embedder = HashingEmbedder::new(64);
    let model = embedder.model();
    let failed = |e: IndexError| e.to_string();
    let write = |cursor: u64, text: &'static str| async move {
        writer
            .replace(GroupUpdate::from_chunks(vec![journal_chunk(
                cursor,
                "2026-03-01 10:00",
                text,
            )]))
            .await
    };
    let embed_missing = || async {
        let missing = writer.missing_vectors(100).await?;
        let vectors = missing
            .iter()
            .map(|c| ChunkVector {
                group: c.group.clone(),
                part: c.part,
                vector: embedder.vector(&c.text),
            })
            .collect();
        writer.put_vectors(&model, vectors).await
    };
    let nearest = |query: &'static str| async move {
        let hits = reader
            .nearest(
                &embedder.vector(query),
                &SearchRequest::new(query).limit(10),
            )
            .await?;
        Ok::<_, IndexError>(
            hits.into_iter()
                .map(|h| (h.source, h.snippet))
                .collect::<Vec<_>>(),
        )
    };
    let sources = |hits: &[(String, String)]| {
        hits.iter()
            .map(|(source, _)| source.clone())
            .collect::<Vec<_>>()
    };

    write(1, "The nightly backup job on pluto-db-02 timed out")
        .await
        .map_err(failed)?;
    write(2, "The user prefers green tea to coffee")
        .await
        .map_err(failed)?;
    embed_missing().await.map_err(failed)?;
    let first = nearest("green tea").await.map_err(failed)?;
    if sources(&first) != ["history#2", "history#1"] {
        return Err(format!("the reader sees the writer's vectors: {first:?}"));
    }
    // A replaced chunk loses its vector: the reader's copy must not keep it.
    write(2, "The user has given up hot drinks")
        .await
        .map_err(failed)?;
    let replaced = nearest("green tea").await.map_err(failed)?;
    if sources(&replaced) != ["history#1"] {
        return Err(format!(
            "a replaced chunk's vector is gone for the reader: {replaced:?}"
        ));
    }
    // New vectors: the reader's copy gains them.
    write(3, "Green tea with jasmine every morning")
        .await
        .map_err(failed)?;
    embed_missing().await.map_err(failed)?;
    let added = nearest("green tea").await.map_err(failed)?;
    if added
        .first()
        .map(|(s, snippet)| (s.as_str(), snippet.contains("jasmine")))
        != Some(("history#3", true))
        || added.len() != 3
    {
        return Err(format!("a new vector is found by the reader: {added:?}"));
    }
    writer.clear_vectors().await.map_err(failed)?;
    let cleared = nearest("green tea").await.map_err(failed)?;
    if !cleared.is_empty() {
        return Err(format!(
            "cleared vectors are gone for the reader: {cleared:?}"
        ));
    }
    embed_missing().await.map_err(failed)?;
    let again = nearest("green tea").await.map_err(failed)?;
    if again != added {
        return Err(format!(
            "vectors put again rank as before: {again:?} against {added:?}"
        ));
    }
    Ok(())
}
