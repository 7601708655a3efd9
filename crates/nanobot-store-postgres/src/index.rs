//! A scope's search index on PostgreSQL (`nanobot_memory_index::MemoryIndex` and `VectorIndex`),
//! in the tables of migration 2: chunks with a `tsvector` of their normalised tokens under
//! a GIN index, per-term chunk counts for the ranking, the indexing pass's marks, and the
//! vectors of one embedding model.
//!
//! The text normaliser is the one every backend shares (`nanobot_memory_index::tokens`); the
//! `tsvector` is built here from its tokens, never by PostgreSQL's parser or a text search
//! configuration, so the two backends find the same words. Each lexeme is prefixed by the
//! scope id: the GIN index then finds one scope's rows only, however much other scopes
//! hold, and no query can match another scope's chunk.
//!
//! Ranking: each searched term weighs its inverse document frequency (BM25's, from the
//! per-scope counts) times `ts_rank` of the chunk for that term (term frequency, saturated,
//! divided by 1 + log of the chunk's length); the common-term rule and the window for an
//! all-common query are the port's (`terms_to_search`, `COMMON_QUERY_WINDOW`). Writers of
//! one scope's index take a transaction-scoped advisory lock, so two instances indexing at
//! once queue instead of colliding on the counts.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use chrono::NaiveDateTime;
use nanobot_llm_port::EmbeddingModel;
use nanobot_memory_index::{
    CANDIDATES, COMMON_QUERY_WINDOW, CacheRefresh, Chunk, ChunkVector, GroupUpdate, Hit,
    IndexError, IndexStats, LexicalQuery, MemoryIndex, QueryTerm, SearchRequest, SourceKind,
    VectorCache, VectorIndex, VectorRow, VectorStamp, VocabularyLookup, check_updates,
    check_vectors, decode_vector, encode_vector, other_model, query_terms, snippet,
};
use sqlx::Row;

use crate::{Inner, PgScope, TimedOut};

/// The most query terms a search ranks by (the rarest ones): a pasted paragraph as a query
/// must not make a statement with hundreds of terms.
mod encoding;
mod lexical;
mod vectors;

use encoding::NewChunks;

const MAX_SEARCHED_TERMS: usize = 16;
/// PostgreSQL keeps positions 1 to 16,383 and at most 256 positions per lexeme.
const MAX_POSITION: usize = 16_383;
const MAX_POSITIONS_PER_TERM: usize = 256;
/// A `tsvector` may not exceed 1 MB; a chunk's is cut well below (its first lexemes kept).
const MAX_TSVECTOR_BYTES: usize = 512 * 1024;

/// The search index of one scope (see [`PgScope::index`]).
#[derive(Clone)]
pub struct PgIndex {
    inner: Arc<Inner>,
    scope_id: i64,
    /// This handle's copy of the scope's vectors (`nanobot_memory_index::VectorCache`), held
    /// while it is brought up to date and ranked in.
    vectors: Arc<tokio::sync::Mutex<VectorCache>>,
}

impl std::fmt::Debug for PgIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgIndex")
            .field("scope_id", &self.scope_id)
            .finish_non_exhaustive()
    }
}

impl PgScope {
    /// This scope's search index. Searches see only this scope's chunks.
    pub fn index(&self) -> PgIndex {
        PgIndex {
            inner: self.inner.clone(),
            scope_id: self.scope_id,
            vectors: Arc::new(tokio::sync::Mutex::new(VectorCache::new())),
        }
    }
}

impl TimedOut for IndexError {
    fn timed_out(call: &str, after: std::time::Duration) -> Self {
        let (message, source) = crate::stalled(call, after);
        IndexError::Storage {
            action: message,
            retryable: true,
            source: Box::new(source),
        }
    }
}

fn failed(action: &'static str) -> impl Fn(sqlx::Error) -> IndexError {
    move |error| IndexError::Storage {
        action: action.to_owned(),
        retryable: crate::is_transient(&error),
        source: Box::new(error),
    }
}

impl PgIndex {
    fn t(&self, name: &str) -> String {
        self.inner.t(name)
    }

    async fn lock(&self, tx: &mut sqlx::PgConnection) -> Result<(), IndexError> {
        crate::query("SELECT pg_advisory_xact_lock($1)")
            .bind(
                self.inner
                    .schema
                    .lock_key(&format!("search:{}", self.scope_id)),
            )
            .execute(&mut *tx)
            .await
            .map_err(failed("lock the search index"))?;
        Ok(())
    }

    /// Makes the scope's head row when missing and takes `count` chunk numbers from it;
    /// the first.
    async fn take_seqs(&self, tx: &mut sqlx::PgConnection, count: i64) -> Result<i64, IndexError> {
        let heads = self.t("search_heads");
        crate::query(&format!(
            "INSERT INTO {heads} (scope_id) VALUES ($1) ON CONFLICT (scope_id) DO NOTHING"
        ))
        .bind(self.scope_id)
        .execute(&mut *tx)
        .await
        .map_err(failed("count the index's chunks"))?;
        crate::query_scalar::<i64>(&format!(
            "UPDATE {heads} SET next_seq = next_seq + $2 WHERE scope_id = $1 RETURNING next_seq - $2"
        ))
        .bind(self.scope_id)
        .bind(count)
        .fetch_one(&mut *tx)
        .await
        .map_err(failed("number the index's chunks"))
    }

    /// Removes chunks (the groups named, or those under a prefix) and returns the count
    /// changes of the terms they held, and how many were removed.
    async fn remove_where(
        &self,
        tx: &mut sqlx::PgConnection,
        condition: &str,
        bind: Vec<String>,
    ) -> Result<(HashMap<String, i64>, i64), IndexError> {
        let rows = crate::query(&format!(
            "DELETE FROM {} WHERE scope_id = $1 AND {condition} \
             RETURNING tsvector_to_array(terms), vector IS NOT NULL",
            self.t("search_chunks")
        ))
        .bind(self.scope_id)
        .bind(bind)
        .fetch_all(&mut *tx)
        .await
        .map_err(failed("remove chunks from the search index"))?;
        if rows.iter().any(|row| row.get::<bool, _>(1)) {
            self.vectors_gone(tx).await?;
        }
        let mut changes: HashMap<String, i64> = HashMap::new();
        for row in &rows {
            let lexemes: Vec<String> = row.get(0);
            for lexeme in &lexemes {
                *changes.entry(self.token(lexeme).to_owned()).or_default() -= 1;
            }
        }
        Ok((changes, rows.len() as i64))
    }
}

#[async_trait]
impl MemoryIndex for PgIndex {
    async fn replace(&self, updates: Vec<GroupUpdate>) -> Result<(), IndexError> {
        check_updates(&updates)?;
        if updates.is_empty() {
            return Ok(());
        }
        let groups: Vec<String> = updates.iter().map(|u| u.group.clone()).collect();
        let mut rows = NewChunks::default();
        let mut added: HashMap<String, i64> = HashMap::new();
        // The last update of a group wins, as the in-memory index does.
        let mut last: HashMap<&str, usize> = HashMap::new();
        for (i, update) in updates.iter().enumerate() {
            last.insert(update.group.as_str(), i);
        }
        for (i, update) in updates.iter().enumerate() {
            if last.get(update.group.as_str()) != Some(&i) {
                continue;
            }
            for chunk in &update.chunks {
                let (terms, tokens) = self.tsvector(&chunk.text);
                for token in tokens {
                    *added.entry(token).or_default() += 1;
                }
                rows.push(chunk, terms);
            }
        }
        self.inner
            .deadline("index replace", async {
                crate::retrying(|| {
                    crate::transaction(
                        self.inner.pool(),
                        failed("begin an index update"),
                        async |tx| {
                            self.lock(tx).await?;
                            let first_seq = self.take_seqs(tx, rows.len() as i64).await?;
                            let (mut changes, removed) = self
                                .remove_where(tx, "grp = ANY($2)", groups.clone())
                                .await?;
                            crate::query(&format!(
                                "INSERT INTO {} (scope_id, grp, part, seq, source, kind, at, body, terms) \
                                 SELECT $1, x.grp, x.part, $9 + x.i - 1, x.source, x.kind, x.at, x.body, x.terms::tsvector \
                                 FROM unnest($2::text[], $3::int[], $4::text[], $5::text[], $6::timestamp[], $7::text[], $8::text[]) \
                                   WITH ORDINALITY AS x(grp, part, source, kind, at, body, terms, i)",
                                self.t("search_chunks")
                            ))
                            .bind(self.scope_id)
                            .bind(&rows.groups)
                            .bind(&rows.parts)
                            .bind(&rows.sources)
                            .bind(&rows.kinds)
                            .bind(&rows.at)
                            .bind(&rows.bodies)
                            .bind(&rows.terms)
                            .bind(first_seq)
                            .execute(&mut *tx)
                            .await
                            .map_err(failed("add chunks to the search index"))?;
                            for (term, count) in &added {
                                *changes.entry(term.clone()).or_default() += count;
                            }
                            self.count(tx, changes, rows.len() as i64 - removed).await
                        },
                    )
                })
                .await
            })
            .await
    }

    async fn purge(&self) -> Result<(), IndexError> {
        // Deleted rows are gone for every reader at commit; PostgreSQL reclaims their space
        // at its next VACUUM, which a shared database's operator schedules, not a bot.
        Ok(())
    }

    async fn remove_prefix(&self, prefix: &str) -> Result<(), IndexError> {
        let prefix = prefix.to_owned();
        self.inner
            .deadline("index remove", async {
                crate::retrying(|| {
                    crate::transaction(
                        self.inner.pool(),
                        failed("begin an index update"),
                        async |tx| {
                            self.lock(tx).await?;
                            let (changes, removed) = self
                                .remove_where(
                                    tx,
                                    "grp >= ($2::text[])[1] AND grp < ($2::text[])[1] || chr(1114111)",
                                    vec![prefix.clone()],
                                )
                                .await?;
                            self.count(tx, changes, -removed).await
                        },
                    )
                })
                .await
            })
            .await
    }

    async fn search(&self, request: &SearchRequest) -> Result<Vec<Hit>, IndexError> {
        request.check()?;
        self.inner
            .deadline("index search", async {
                self.lexical(request)
                    .await
                    .map_err(failed("search the index"))
            })
            .await
    }

    async fn stats(&self) -> Result<IndexStats, IndexError> {
        self.inner
            .deadline("index stats", async {
                let row = crate::query(&format!(
                    "SELECT count(*), count(DISTINCT grp) FROM {} WHERE scope_id = $1",
                    self.t("search_chunks")
                ))
                .bind(self.scope_id)
                .fetch_one(&self.inner.pool())
                .await
                .map_err(failed("count the index"))?;
                let count = |i: usize| usize::try_from(row.get::<i64, _>(i)).unwrap_or(0);
                Ok(IndexStats::new(count(0), count(1)))
            })
            .await
    }

    async fn marks(&self) -> Result<BTreeMap<String, String>, IndexError> {
        self.inner
            .deadline("index marks", async {
                Ok(crate::query(&format!(
                    "SELECT name, value FROM {} WHERE scope_id = $1",
                    self.t("search_marks")
                ))
                .bind(self.scope_id)
                .fetch_all(&self.inner.pool())
                .await
                .map_err(failed("read the index's marks"))?
                .into_iter()
                .map(|row| (row.get(0), row.get(1)))
                .collect())
            })
            .await
    }

    async fn set_marks(&self, marks: Vec<(String, Option<String>)>) -> Result<(), IndexError> {
        if marks.is_empty() {
            return Ok(());
        }
        let (set, removed): (Vec<_>, Vec<_>) =
            marks.into_iter().partition(|(_, value)| value.is_some());
        let (names, values): (Vec<String>, Vec<String>) = set
            .into_iter()
            .filter_map(|(name, value)| value.map(|value| (name, value)))
            .unzip();
        let removed: Vec<String> = removed.into_iter().map(|(name, _)| name).collect();
        let table = self.t("search_marks");
        self.inner
            .deadline("index marks", async {
                crate::transaction(
                    self.inner.pool(),
                    failed("begin setting marks"),
                    async |tx| {
                        crate::query(&format!(
                            "DELETE FROM {table} WHERE scope_id = $1 AND name = ANY($2)"
                        ))
                        .bind(self.scope_id)
                        .bind(&removed)
                        .execute(&mut *tx)
                        .await
                        .map_err(failed("remove marks"))?;
                        crate::query(&format!(
                            "INSERT INTO {table} (scope_id, name, value) \
                             SELECT $1, x.name, x.value FROM unnest($2::text[], $3::text[]) AS x(name, value) \
                             ON CONFLICT (scope_id, name) DO UPDATE SET value = EXCLUDED.value"
                        ))
                        .bind(self.scope_id)
                        .bind(&names)
                        .bind(&values)
                        .execute(&mut *tx)
                        .await
                        .map_err(failed("set marks"))?;
                        Ok(())
                    },
                )
                .await
            })
            .await
    }
}
