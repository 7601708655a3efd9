//! The vectors beside the index: one model per scope, put, missing, cleared, nearest.

use super::lexical::Ranked;
use super::*;

impl PgIndex {
    /// Records that stored vectors went away: every copy of them reads them again.
    pub(super) async fn vectors_gone(&self, tx: &mut sqlx::PgConnection) -> Result<(), IndexError> {
        crate::query(&format!(
            "UPDATE {} SET vectors_epoch = (vectors_epoch + 1) % 4611686018427387903 WHERE scope_id = $1",
            self.t("search_heads")
        ))
        .bind(self.scope_id)
        .execute(&mut *tx)
        .await
        .map_err(failed("record removed vectors"))?;
        Ok(())
    }

    /// The scope's vector stamp and the vectors numbered `from` or above (all of them for
    /// `None`), read in one statement so both are of one snapshot. `None` when the scope's
    /// index has no head row yet (it holds nothing).
    pub(super) async fn vector_rows(
        &self,
        from: Option<i64>,
    ) -> Result<Option<(VectorStamp, Vec<VectorRow>)>, IndexError> {
        let rows = crate::query(&format!(
            "WITH h AS (SELECT vectors_epoch, next_seq FROM {heads} WHERE scope_id = $1) \
             SELECT h.vectors_epoch, h.next_seq, c.chunk_id, c.source, c.part, c.kind, c.at, c.vector \
             FROM h LEFT JOIN {chunks} c ON c.scope_id = $1 AND c.vector IS NOT NULL \
               AND ($2::bigint IS NULL OR c.vector_seq >= $2)",
            heads = self.t("search_heads"),
            chunks = self.t("search_chunks"),
        ))
        .bind(self.scope_id)
        .bind(from)
        .fetch_all(&self.inner.pool())
        .await
        .map_err(failed("read vectors"))?;
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        let stamp = VectorStamp {
            epoch: first.get(0),
            next: first.get(1),
        };
        let vectors = rows
            .iter()
            .filter_map(|row| {
                let vector: Option<&[u8]> = row.get(7);
                Some(VectorRow {
                    key: row.get::<Option<i64>, _>(2)?,
                    source: row.get(3),
                    part: u32::try_from(row.get::<i32, _>(4)).ok()?,
                    kind: SourceKind::from_name(row.get::<&str, _>(5))?,
                    at: row.get(6),
                    vector: decode_vector(vector?),
                })
            })
            .collect();
        Ok(Some((stamp, vectors)))
    }

    /// The scope's stamp, and the rows `copy` needs when it is not current (with the
    /// stamp of their own snapshot).
    pub(super) async fn vector_stamp_or_rows(
        &self,
        copy: &VectorCache,
    ) -> Result<Option<(VectorStamp, Option<Fetched>)>, IndexError> {
        let stamp = crate::query(&format!(
            "SELECT vectors_epoch, next_seq FROM {} WHERE scope_id = $1",
            self.t("search_heads")
        ))
        .bind(self.scope_id)
        .fetch_optional(&self.inner.pool())
        .await
        .map_err(failed("read the vectors' stamp"))?
        .map(|row| VectorStamp {
            epoch: row.get(0),
            next: row.get(1),
        });
        let Some(stamp) = stamp else {
            return Ok(None);
        };
        Ok(match copy.refresh_for(stamp) {
            CacheRefresh::Current => Some((stamp, None)),
            CacheRefresh::Append { from } => self
                .vector_rows(Some(from))
                .await?
                .map(|(stamp, rows)| (stamp, Some(Fetched::Since(rows)))),
            CacheRefresh::Reload => self
                .vector_rows(None)
                .await?
                .map(|(stamp, rows)| (stamp, Some(Fetched::All(rows)))),
        })
    }
}

#[async_trait]
impl VectorIndex for PgIndex {
    async fn vector_model(&self) -> Result<Option<EmbeddingModel>, IndexError> {
        self.inner
            .deadline("index vector model", async {
                held_model(&self.inner.pool(), &self.t("search_heads"), self.scope_id)
                    .await
                    .map_err(failed("read the vectors' model"))
            })
            .await
    }

    async fn put_vectors(
        &self,
        model: &EmbeddingModel,
        vectors: Vec<ChunkVector>,
    ) -> Result<(), IndexError> {
        check_vectors(model, &vectors)?;
        if vectors.is_empty() {
            return Ok(());
        }
        let groups: Vec<&str> = vectors.iter().map(|v| v.group.as_str()).collect();
        let parts: Vec<i32> = vectors
            .iter()
            .map(|v| i32::try_from(v.part).unwrap_or(i32::MAX))
            .collect();
        let blobs: Vec<Vec<u8>> = vectors.iter().map(|v| encode_vector(&v.vector)).collect();
        let heads = self.t("search_heads");
        let dimensions = i32::try_from(model.dimensions).unwrap_or(i32::MAX);
        self.inner
            .deadline("index put vectors", async {
                crate::transaction(
                    self.inner.pool(),
                    failed("begin storing vectors"),
                    async |tx| {
                        self.lock(tx).await?;
                        if let Some(held) = held_model(&mut *tx, &heads, self.scope_id)
                            .await
                            .map_err(failed("read the vectors' model"))?
                            && held != *model
                        {
                            return Err(other_model(&held, model));
                        }
                        crate::query(&format!(
                            "INSERT INTO {heads} (scope_id, vector_model, vector_dims) VALUES ($1, $2, $3) \
                             ON CONFLICT (scope_id) DO UPDATE SET vector_model = EXCLUDED.vector_model, vector_dims = EXCLUDED.vector_dims"
                        ))
                        .bind(self.scope_id)
                        .bind(&model.name)
                        .bind(dimensions)
                        .execute(&mut *tx)
                        .await
                        .map_err(failed("record the vectors' model"))?;
                        // Numbered for the copies of the vectors; a chunk keeps the vector
                        // it has (stored vectors never change).
                        let first = self.take_seqs(tx, blobs.len() as i64).await?;
                        crate::query(&format!(
                            "UPDATE {} c SET vector = x.vector, vector_seq = $5 + x.i - 1 \
                             FROM unnest($2::text[], $3::int[], $4::bytea[]) WITH ORDINALITY AS x(grp, part, vector, i) \
                             WHERE c.scope_id = $1 AND c.grp = x.grp AND c.part = x.part AND c.vector IS NULL",
                            self.t("search_chunks")
                        ))
                        .bind(self.scope_id)
                        .bind(&groups)
                        .bind(&parts)
                        .bind(&blobs)
                        .bind(first)
                        .execute(&mut *tx)
                        .await
                        .map_err(failed("store vectors"))?;
                        Ok(())
                    },
                )
                .await
            })
            .await
    }

    async fn missing_vectors(&self, limit: usize) -> Result<Vec<Chunk>, IndexError> {
        self.inner
            .deadline("index missing vectors", async {
                let rows = crate::query(&format!(
                    "SELECT grp, part, source, kind, at, body FROM {} \
                     WHERE scope_id = $1 AND vector IS NULL ORDER BY grp, part LIMIT $2",
                    self.t("search_chunks")
                ))
                .bind(self.scope_id)
                .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                .fetch_all(&self.inner.pool())
                .await
                .map_err(failed("list chunks without a vector"))?;
                Ok(rows
                    .into_iter()
                    .filter_map(|row| {
                        Some(Chunk {
                            kind: SourceKind::from_name(row.get::<&str, _>(3))?,
                            group: row.get(0),
                            source: row.get(2),
                            part: u32::try_from(row.get::<i32, _>(1)).ok()?,
                            text: row.get(5),
                            at: row.get(4),
                        })
                    })
                    .collect())
            })
            .await
    }

    async fn clear_vectors(&self) -> Result<(), IndexError> {
        self.inner
            .deadline("index clear vectors", async {
                crate::transaction(
                    self.inner.pool(),
                    failed("begin clearing vectors"),
                    async |tx| {
                        self.lock(tx).await?;
                        crate::query(&format!(
                            "UPDATE {} SET vector = NULL, vector_seq = NULL WHERE scope_id = $1 AND vector IS NOT NULL",
                            self.t("search_chunks")
                        ))
                        .bind(self.scope_id)
                        .execute(&mut *tx)
                        .await
                        .map_err(failed("clear vectors"))?;
                        self.vectors_gone(tx).await?;
                        crate::query(&format!(
                            "UPDATE {} SET vector_model = NULL, vector_dims = NULL WHERE scope_id = $1",
                            self.t("search_heads")
                        ))
                        .bind(self.scope_id)
                        .execute(&mut *tx)
                        .await
                        .map_err(failed("clear the vectors' model"))?;
                        Ok(())
                    },
                )
                .await
            })
            .await
    }

    async fn nearest(
        &self,
        query: &[f32],
        request: &SearchRequest,
    ) -> Result<Vec<Hit>, IndexError> {
        request.check()?;
        self.inner
            .deadline("index nearest", async {
                let mut copy = self.vectors.lock().await;
                // One small read when the copy is current; the new vectors when some were
                // stored since; all of them when some went away.
                let Some((stamp, rows)) = self.vector_stamp_or_rows(&copy).await? else {
                    return Ok(Vec::new());
                };
                match (copy.refresh_for(stamp), rows) {
                    (CacheRefresh::Current, _) => {}
                    (CacheRefresh::Append { .. }, Some(Fetched::Since(rows))) => {
                        copy.append(stamp, rows);
                    }
                    (_, Some(Fetched::All(rows))) => copy.reload(stamp, rows),
                    // A vector went away between the two reads: read them all.
                    _ => match self.vector_rows(None).await? {
                        Some((stamp, rows)) => copy.reload(stamp, rows),
                        None => return Ok(Vec::new()),
                    },
                }
                let nearest = copy.nearest(query, request);
                drop(copy);
                let terms = query_terms(&request.query);
                self.hits(
                    nearest
                        .into_iter()
                        .map(|found| Ranked {
                            id: found.key,
                            source: found.source,
                            kind: found.kind.name().to_owned(),
                            at: found.at,
                            score: found.score,
                        })
                        .collect(),
                    request.limit,
                    &terms,
                )
                .await
                .map_err(failed("read the hits"))
            })
            .await
    }
}

/// Vectors read to bring a copy up to date.
pub(super) enum Fetched {
    /// Those stored since the copy's stamp.
    Since(Vec<VectorRow>),
    /// Every one.
    All(Vec<VectorRow>),
}

pub(super) async fn held_model<'e, E>(
    executor: E,
    heads: &str,
    scope_id: i64,
) -> Result<Option<EmbeddingModel>, sqlx::Error>
where
    E: sqlx::Executor<'e, Database = sqlx::Postgres>,
{
    let row = crate::query(&format!(
        "SELECT vector_model, vector_dims FROM {heads} WHERE scope_id = $1 AND vector_model IS NOT NULL"
    ))
    .bind(scope_id)
    .fetch_optional(executor)
    .await?;
    Ok(row.map(|row| EmbeddingModel {
        name: row.get(0),
        dimensions: usize::try_from(row.get::<i32, _>(1)).unwrap_or(0),
    }))
}
