//! The vector lane of the side index: each chunk's vector in `vectors` (little-endian
//! `f32`s, numbered in the order they were stored), the model they belong to in
//! `vector_model`, and nearest ranked in this process's copy of them
//! (`nanobot_memory_index::VectorCache`), brought up to date by the stamp on every query.

use async_trait::async_trait;
use chrono::NaiveDateTime;
use nanobot_llm_port::EmbeddingModel;
use nanobot_memory_index::{
    CacheRefresh, Chunk, ChunkVector, Hit, IndexError, SearchRequest, VectorIndex, VectorRow,
    VectorStamp, check_vectors, decode_vector, encode_vector, other_model, query_terms, snippet,
};
use rusqlite::{OptionalExtension, TransactionBehavior, params};

use crate::{SqliteIndex, TIME_FORMAT, kind_of};

/// The epoch a new file starts at: its own, so a copy of another file's vectors never
/// matches it.
pub(crate) fn first_epoch() -> i64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    ((nanos as i64) ^ (i64::from(std::process::id()) << 40)) & i64::MAX
}

/// Records that stored vectors went away: every copy reloads.
pub(crate) fn bump_epoch(connection: &rusqlite::Connection) -> rusqlite::Result<()> {
    connection.execute(
        "UPDATE vector_epoch SET epoch = (epoch + 1) & 9223372036854775807 WHERE only = 1",
        [],
    )?;
    Ok(())
}

/// Where the file's vectors stand.
fn stamp(connection: &rusqlite::Connection) -> rusqlite::Result<VectorStamp> {
    connection.query_row(
        "SELECT (SELECT epoch FROM vector_epoch WHERE only = 1),
                coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'vectors'), 0) + 1",
        [],
        |row| {
            Ok(VectorStamp {
                epoch: row.get::<_, Option<i64>>(0)?.unwrap_or(0),
                next: row.get(1)?,
            })
        },
    )
}

/// The vectors numbered `from` or above, with what ranking needs of their chunks.
fn vector_rows(connection: &rusqlite::Connection, from: i64) -> rusqlite::Result<Vec<VectorRow>> {
    let mut statement = connection.prepare(
        "SELECT c.id, c.source, c.part, c.kind, c.at, v.vector
         FROM vectors v JOIN chunks c ON c.id = v.chunk WHERE v.seq >= ?1",
    )?;
    let rows = statement.query_map([from], |row| {
        let at: Option<String> = row.get(4)?;
        let vector: Vec<u8> = row.get(5)?;
        Ok(VectorRow {
            key: row.get(0)?,
            source: row.get(1)?,
            part: row.get(2)?,
            kind: kind_of(row.get(3)?),
            at: at.and_then(|at| NaiveDateTime::parse_from_str(&at, TIME_FORMAT).ok()),
            vector: decode_vector(&vector),
        })
    })?;
    rows.collect()
}

fn held_model(connection: &rusqlite::Connection) -> rusqlite::Result<Option<EmbeddingModel>> {
    connection
        .query_row(
            "SELECT name, dimensions FROM vector_model WHERE only = 1",
            [],
            |row| {
                Ok(EmbeddingModel {
                    name: row.get(0)?,
                    dimensions: row.get::<_, i64>(1)? as usize,
                })
            },
        )
        .optional()
}

#[async_trait]
impl VectorIndex for SqliteIndex {
    async fn vector_model(&self) -> Result<Option<EmbeddingModel>, IndexError> {
        self.with_connection("reading the vector model", |connection| {
            held_model(connection)
        })
        .await
    }

    async fn put_vectors(
        &self,
        model: &EmbeddingModel,
        vectors: Vec<ChunkVector>,
    ) -> Result<(), IndexError> {
        check_vectors(model, &vectors)?;
        let model = model.clone();
        let wanted = model.clone();
        let refused = self
            .with_connection("storing vectors", move |connection| {
                let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
                if let Some(held) = held_model(&transaction)?
                    && held != model
                {
                    return Ok(Some(held));
                }
                transaction.execute(
                    "INSERT OR REPLACE INTO vector_model (only, name, dimensions) VALUES (1, ?1, ?2)",
                    params![model.name, model.dimensions as i64],
                )?;
                {
                    // A chunk keeps the vector it has (stored vectors never change, which
                    // is what lets copies of them be brought up to date by appending).
                    let mut put = transaction.prepare(
                        "INSERT OR IGNORE INTO vectors (chunk, vector)
                         SELECT id, ?3 FROM chunks WHERE grp = ?1 AND part = ?2",
                    )?;
                    for vector in &vectors {
                        put.execute(params![vector.group, vector.part, encode_vector(&vector.vector)])?;
                    }
                }
                transaction.commit()?;
                Ok(None)
            })
            .await?;
        match refused {
            None => Ok(()),
            Some(held) => Err(other_model(&held, &wanted)),
        }
    }

    async fn missing_vectors(&self, limit: usize) -> Result<Vec<Chunk>, IndexError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.with_connection("listing chunks without a vector", move |connection| {
            let mut statement = connection.prepare(
                "SELECT grp, source, part, kind, at, text FROM chunks c
                 WHERE NOT EXISTS (SELECT 1 FROM vectors v WHERE v.chunk = c.id)
                 ORDER BY grp, part LIMIT ?1",
            )?;
            let rows = statement.query_map([limit], |row| {
                let at: Option<String> = row.get(4)?;
                Ok(Chunk {
                    group: row.get(0)?,
                    source: row.get(1)?,
                    part: row.get(2)?,
                    kind: kind_of(row.get(3)?),
                    at: at.and_then(|at| NaiveDateTime::parse_from_str(&at, TIME_FORMAT).ok()),
                    text: row.get(5)?,
                })
            })?;
            rows.collect()
        })
        .await
    }

    async fn clear_vectors(&self) -> Result<(), IndexError> {
        self.with_connection("clearing vectors", |connection| {
            let transaction =
                connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
            transaction.execute("DELETE FROM vectors", [])?;
            transaction.execute("DELETE FROM vector_model", [])?;
            bump_epoch(&transaction)?;
            transaction.commit()
        })
        .await
    }

    async fn nearest(
        &self,
        query: &[f32],
        request: &SearchRequest,
    ) -> Result<Vec<Hit>, IndexError> {
        request.check()?;
        let query = query.to_vec();
        let request = request.clone();
        let cache = self.vectors.clone();
        self.with_connection("searching by vector", move |connection| {
            // The stamp and the rows in one snapshot.
            let transaction = connection.transaction()?;
            let stamp = stamp(&transaction)?;
            let nearest = {
                let mut copy = cache
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                match copy.refresh_for(stamp) {
                    CacheRefresh::Current => {}
                    CacheRefresh::Append { from } => {
                        copy.append(stamp, vector_rows(&transaction, from)?);
                    }
                    CacheRefresh::Reload => copy.reload(stamp, vector_rows(&transaction, 0)?),
                }
                copy.nearest(&query, &request)
            };
            // Only the hits' texts are read.
            let terms = query_terms(&request.query);
            let mut text_of = transaction.prepare("SELECT text FROM chunks WHERE id = ?1")?;
            let mut hits: Vec<Hit> = Vec::with_capacity(nearest.len());
            for found in nearest {
                let text: String = text_of.query_row([found.key], |row| row.get(0))?;
                hits.push(Hit {
                    source: found.source,
                    kind: found.kind,
                    at: found.at,
                    score: found.score,
                    snippet: snippet(&text, &terms),
                });
            }
            Ok(hits)
        })
        .await
    }
}
