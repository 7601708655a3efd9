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
    let embedder = crate::HashingEmbedder::new(64);
    let missing = seed_without_vectors(index).await?;
    put_vectors_of_one_model(index, &embedder, &missing).await?;
    nearest_contract(index, &embedder).await?;
    replaced_removed_and_cleared(index, &embedder).await
}

/// A failed rule of the vector suite.
fn broken<T>(rule: &str, detail: String) -> Result<T, String> {
    Err(format!("{rule}: {detail}"))
}

/// Every chunk's vector from `embedder`.
fn embed_all(
    embedder: &crate::HashingEmbedder,
    chunks: &[crate::Chunk],
) -> Vec<crate::ChunkVector> {
    chunks
        .iter()
        .map(|c| crate::ChunkVector {
            group: c.group.clone(),
            part: c.part,
            vector: embedder.vector(&c.text),
        })
        .collect()
}

/// A fresh index holds no model; three chunks are listed as missing their vectors, in
/// order and within the limit.
async fn seed_without_vectors<I>(index: &I) -> Result<Vec<crate::Chunk>, String>
where
    I: MemoryIndex + crate::VectorIndex,
{
    use crate::journal_chunk;
    if index
        .vector_model()
        .await
        .map_err(|e| e.to_string())?
        .is_some()
    {
        return broken("a new index holds no model", String::new());
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
        return broken(
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
        return broken("missing_vectors keeps to its limit", String::new());
    }
    Ok(missing)
}

/// Vectors of another length and of a second model are refused; a put records the model
/// and leaves nothing missing.
async fn put_vectors_of_one_model<I>(
    index: &I,
    embedder: &crate::HashingEmbedder,
    missing: &[crate::Chunk],
) -> Result<(), String>
where
    I: MemoryIndex + crate::VectorIndex,
{
    use nanobot_llm_port::{Embedder, EmbeddingModel};
    let model = embedder.model();
    // Refusals first: nothing of them may be stored.
    let mut short = embed_all(embedder, &missing[..1]);
    short[0].vector.pop();
    if index.put_vectors(&model, short).await.is_ok() {
        return broken("a vector of another length is refused", String::new());
    }
    index
        .put_vectors(&model, embed_all(embedder, missing))
        .await
        .map_err(|e| e.to_string())?;
    if index.vector_model().await.map_err(|e| e.to_string())? != Some(model.clone()) {
        return broken("the model of the vectors is recorded", String::new());
    }
    if !index
        .missing_vectors(10)
        .await
        .map_err(|e| e.to_string())?
        .is_empty()
    {
        return broken("no chunk is missing its vector after a put", String::new());
    }
    let other = EmbeddingModel {
        name: "another-model".into(),
        dimensions: 64,
    };
    match index
        .put_vectors(&other, embed_all(embedder, missing))
        .await
    {
        Err(IndexError::InvalidUpdate { .. }) => {}
        outcome => {
            return broken(
                "vectors of a second model are refused",
                format!("{outcome:?}"),
            );
        }
    }
    Ok(())
}

/// `nearest` finds the closest chunk first, answers the same twice, keeps to the
/// request's sources.
async fn nearest_contract<I>(index: &I, embedder: &crate::HashingEmbedder) -> Result<(), String>
where
    I: MemoryIndex + crate::VectorIndex,
{
    let query = embedder.vector("green tea");
    let request = SearchRequest::new("green tea").limit(2);
    let hits = index
        .nearest(&query, &request)
        .await
        .map_err(|e| e.to_string())?;
    if hits.first().map(|h| h.source.as_str()) != Some("history#2") || hits.len() != 2 {
        return broken("nearest finds the closest chunk first", format!("{hits:?}"));
    }
    if index
        .nearest(&query, &request)
        .await
        .map_err(|e| e.to_string())?
        != hits
    {
        return broken("nearest is deterministic", String::new());
    }
    let sessions_only = request.clone().sources([crate::SourceKind::Sessions]);
    if !index
        .nearest(&query, &sessions_only)
        .await
        .map_err(|e| e.to_string())?
        .is_empty()
    {
        return broken("nearest keeps to the request's sources", String::new());
    }
    Ok(())
}

/// A replaced group loses its vector, a removed one its hits; clearing drops every vector
/// and the model.
async fn replaced_removed_and_cleared<I>(
    index: &I,
    embedder: &crate::HashingEmbedder,
) -> Result<(), String>
where
    I: MemoryIndex + crate::VectorIndex,
{
    use crate::journal_chunk;
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
        return broken("a replaced chunk loses its vector", format!("{missing:?}"));
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
        return broken(
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
        return broken("clearing drops every vector and the model", String::new());
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
    let h = Handles {
        reader,
        writer,
        embedder: crate::HashingEmbedder::new(64),
    };
    let failed = |e: IndexError| e.to_string();
    h.write(1, "The nightly backup job on pluto-db-02 timed out")
        .await
        .map_err(failed)?;
    h.write(2, "The user prefers green tea to coffee")
        .await
        .map_err(failed)?;
    h.embed_missing().await.map_err(failed)?;
    let first = h.nearest("green tea").await.map_err(failed)?;
    if sources(&first) != ["history#2", "history#1"] {
        return Err(format!("the reader sees the writer's vectors: {first:?}"));
    }
    // A replaced chunk loses its vector: the reader's copy must not keep it.
    h.write(2, "The user has given up hot drinks")
        .await
        .map_err(failed)?;
    let replaced = h.nearest("green tea").await.map_err(failed)?;
    if sources(&replaced) != ["history#1"] {
        return Err(format!(
            "a replaced chunk's vector is gone for the reader: {replaced:?}"
        ));
    }
    // New vectors: the reader's copy gains them.
    h.write(3, "Green tea with jasmine every morning")
        .await
        .map_err(failed)?;
    h.embed_missing().await.map_err(failed)?;
    let added = h.nearest("green tea").await.map_err(failed)?;
    if added
        .first()
        .map(|(s, snippet)| (s.as_str(), snippet.contains("jasmine")))
        != Some(("history#3", true))
        || added.len() != 3
    {
        return Err(format!("a new vector is found by the reader: {added:?}"));
    }
    h.writer.clear_vectors().await.map_err(failed)?;
    let cleared = h.nearest("green tea").await.map_err(failed)?;
    if !cleared.is_empty() {
        return Err(format!(
            "cleared vectors are gone for the reader: {cleared:?}"
        ));
    }
    h.embed_missing().await.map_err(failed)?;
    let again = h.nearest("green tea").await.map_err(failed)?;
    if again != added {
        return Err(format!(
            "vectors put again rank as before: {again:?} against {added:?}"
        ));
    }
    Ok(())
}

/// The two handles of the copies case and the embedder both use.
struct Handles<'a, I> {
    reader: &'a I,
    writer: &'a I,
    embedder: crate::HashingEmbedder,
}

impl<I> Handles<'_, I>
where
    I: MemoryIndex + crate::VectorIndex,
{
    /// The writer stores one journal chunk.
    async fn write(&self, cursor: u64, text: &str) -> Result<(), IndexError> {
        self.writer
            .replace(GroupUpdate::from_chunks(vec![crate::journal_chunk(
                cursor,
                "2026-03-01 10:00",
                text,
            )]))
            .await
    }

    /// The writer embeds every chunk without a vector.
    async fn embed_missing(&self) -> Result<(), IndexError> {
        use nanobot_llm_port::Embedder;
        let missing = self.writer.missing_vectors(100).await?;
        let vectors = missing
            .iter()
            .map(|c| crate::ChunkVector {
                group: c.group.clone(),
                part: c.part,
                vector: self.embedder.vector(&c.text),
            })
            .collect();
        self.writer
            .put_vectors(&self.embedder.model(), vectors)
            .await
    }

    /// The reader's nearest chunks to `query`: (source, snippet).
    async fn nearest(&self, query: &str) -> Result<Vec<(String, String)>, IndexError> {
        let hits = self
            .reader
            .nearest(
                &self.embedder.vector(query),
                &SearchRequest::new(query).limit(10),
            )
            .await?;
        Ok(hits.into_iter().map(|h| (h.source, h.snippet)).collect())
    }
}

/// The sources of hits, in order.
fn sources(hits: &[(String, String)]) -> Vec<String> {
    hits.iter().map(|(source, _)| source.clone()).collect()
}
