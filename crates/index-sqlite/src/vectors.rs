//! The vector lane of the side index: each chunk's vector in `vectors` (little-endian
//! `f32`s), the model they belong to in `vector_model`, nearest by a scan in Rust.

use async_trait::async_trait;
use chrono::NaiveDateTime;
use llm_port::EmbeddingModel;
use memory_index::{
    Chunk, ChunkVector, Hit, IndexError, SearchRequest, VectorIndex, check_vectors, cosine,
    decode_vector, encode_vector, other_model, query_terms, snippet,
};
use rusqlite::{OptionalExtension, params};

use crate::{SqliteIndex, TIME_FORMAT, kind_of, request_bounds};

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
                let transaction = connection.transaction()?;
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
                    let mut put = transaction.prepare(
                        "INSERT OR REPLACE INTO vectors (chunk, vector)
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
            let transaction = connection.transaction()?;
            transaction.execute("DELETE FROM vectors", [])?;
            transaction.execute("DELETE FROM vector_model", [])?;
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
        self.with_connection("searching by vector", move |connection| {
            let (kinds, since) = request_bounds(&request);
            let mut statement = connection.prepare(&format!(
                "SELECT c.id, c.source, c.part, c.kind, c.at, v.vector
                 FROM vectors v JOIN chunks c ON c.id = v.chunk
                 WHERE c.kind IN ({kinds}) AND (?1 IS NULL OR c.at >= ?1)"
            ))?;
            // Ranked without the texts; only the hits' texts are read.
            let mut scored: Vec<(f64, i64, String, u32, i64, Option<String>)> = statement
                .query_map([since], |row| {
                    let vector: Vec<u8> = row.get(5)?;
                    Ok((
                        f64::from(cosine(&query, &decode_vector(&vector))),
                        row.get(0)?,
                        row.get(1)?,
                        row.get(2)?,
                        row.get(3)?,
                        row.get(4)?,
                    ))
                })?
                .collect::<rusqlite::Result<_>>()?;
            scored.sort_by(|a, b| {
                b.0.total_cmp(&a.0)
                    .then_with(|| a.2.cmp(&b.2))
                    .then_with(|| a.3.cmp(&b.3))
            });
            let terms = query_terms(&request.query);
            let mut text_of = connection.prepare("SELECT text FROM chunks WHERE id = ?1")?;
            let mut hits: Vec<Hit> = Vec::new();
            for (score, id, source, _, kind, at) in scored {
                if hits.len() == request.limit {
                    break;
                }
                if hits.iter().any(|hit| hit.source == source) {
                    continue;
                }
                let text: String = text_of.query_row([id], |row| row.get(0))?;
                hits.push(Hit {
                    source,
                    kind: kind_of(kind),
                    at: at.and_then(|at| NaiveDateTime::parse_from_str(&at, TIME_FORMAT).ok()),
                    score,
                    snippet: snippet(&text, &terms),
                });
            }
            Ok(hits)
        })
        .await
    }
}
