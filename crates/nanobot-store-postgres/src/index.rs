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
    COMMON_QUERY_WINDOW, COMMON_TERM_SHARE, CacheRefresh, Chunk, ChunkVector, GroupUpdate, Hit,
    IndexError, IndexStats, MemoryIndex, QueryTerm, SearchRequest, SourceKind, VectorCache,
    VectorIndex, VectorRow, VectorStamp, check_updates, check_vectors, decode_vector,
    encode_vector, other_model, query_terms, snippet, terms_to_search,
};
use sqlx::Row;

use crate::{Inner, PgScope, TimedOut};

/// The most query terms a search ranks by (the rarest ones): a pasted paragraph as a query
/// must not make a statement with hundreds of terms.
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

    /// The lexeme of `token` in this scope.
    fn lexeme(&self, token: &str) -> String {
        format!("{}:{token}", self.scope_id)
    }

    /// The token of one of this scope's lexemes.
    fn token<'a>(&self, lexeme: &'a str) -> &'a str {
        lexeme.split_once(':').map_or(lexeme, |(_, token)| token)
    }

    /// The `tsvector` literal of `text` and its distinct tokens.
    fn tsvector(&self, text: &str) -> (String, Vec<String>) {
        let mut positions: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (at, token) in nanobot_memory_index::tokens(text).into_iter().enumerate() {
            let list = positions.entry(token).or_default();
            let position = (at + 1).min(MAX_POSITION);
            if list.len() < MAX_POSITIONS_PER_TERM && list.last() != Some(&position) {
                list.push(position);
            }
        }
        let mut literal = String::new();
        let mut tokens = Vec::with_capacity(positions.len());
        for (token, at) in positions {
            if literal.len() > MAX_TSVECTOR_BYTES {
                break;
            }
            if !literal.is_empty() {
                literal.push(' ');
            }
            literal.push_str(&quoted(&self.lexeme(&token)));
            literal.push(':');
            let list: Vec<String> = at.iter().map(usize::to_string).collect();
            literal.push_str(&list.join(","));
            tokens.push(token);
        }
        (literal, tokens)
    }

    /// The `tsquery` literal of one query term.
    fn tsquery(&self, term: &QueryTerm) -> String {
        let lexeme = quoted(&self.lexeme(&term.text));
        if term.prefix {
            format!("{lexeme}:*")
        } else {
            lexeme
        }
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

    /// Records that stored vectors went away: every copy of them reads them again.
    async fn vectors_gone(&self, tx: &mut sqlx::PgConnection) -> Result<(), IndexError> {
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
    async fn vector_rows(
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

    /// Applies term-count changes and the change of the chunk count.
    async fn count(
        &self,
        tx: &mut sqlx::PgConnection,
        changes: HashMap<String, i64>,
        chunks: i64,
    ) -> Result<(), IndexError> {
        let (terms, deltas): (Vec<String>, Vec<i64>) =
            changes.into_iter().filter(|(_, delta)| *delta != 0).unzip();
        if !terms.is_empty() {
            let table = self.t("search_terms");
            // Terms no chunk holds any more are deleted, then the other decreases applied
            // (each statement reads the counts as they were before this change), then the
            // increases.
            crate::query(&format!(
                "DELETE FROM {table} t USING unnest($2::text[], $3::bigint[]) AS x(term, delta) \
                 WHERE t.scope_id = $1 AND t.term = x.term AND x.delta < 0 AND t.chunks + x.delta <= 0"
            ))
            .bind(self.scope_id)
            .bind(&terms)
            .bind(&deltas)
            .execute(&mut *tx)
            .await
            .map_err(failed("count the index's terms"))?;
            crate::query(&format!(
                "UPDATE {table} t SET chunks = t.chunks + x.delta \
                 FROM unnest($2::text[], $3::bigint[]) AS x(term, delta) \
                 WHERE t.scope_id = $1 AND t.term = x.term AND x.delta < 0 AND t.chunks + x.delta > 0"
            ))
            .bind(self.scope_id)
            .bind(&terms)
            .bind(&deltas)
            .execute(&mut *tx)
            .await
            .map_err(failed("count the index's terms"))?;
            crate::query(&format!(
                "INSERT INTO {table} (scope_id, term, chunks) \
                 SELECT $1, x.term, x.delta FROM unnest($2::text[], $3::bigint[]) AS x(term, delta) WHERE x.delta > 0 \
                 ON CONFLICT (scope_id, term) DO UPDATE SET chunks = {table}.chunks + EXCLUDED.chunks"
            ))
            .bind(self.scope_id)
            .bind(&terms)
            .bind(&deltas)
            .execute(&mut *tx)
            .await
            .map_err(failed("count the index's terms"))?;
        }
        if chunks != 0 {
            // The head row exists: `take_seqs` made it before anything was added (a removal
            // that finds chunks finds it too).
            crate::query(&format!(
                "UPDATE {table} SET chunks = chunks + $2 WHERE scope_id = $1",
                table = self.t("search_heads")
            ))
            .bind(self.scope_id)
            .bind(chunks)
            .execute(&mut *tx)
            .await
            .map_err(failed("count the index's chunks"))?;
        }
        Ok(())
    }

    /// How many chunks the index holds, and how many hold each term (a prefix term: the
    /// sum over the terms it starts), in one round trip.
    async fn counts(&self, terms: &[QueryTerm]) -> Result<(usize, Vec<usize>), sqlx::Error> {
        let texts: Vec<&str> = terms.iter().map(|t| t.text.as_str()).collect();
        let prefixes: Vec<bool> = terms.iter().map(|t| t.prefix).collect();
        let row = crate::query(&format!(
            "SELECT coalesce((SELECT chunks FROM {heads} WHERE scope_id = $1), 0), \
               coalesce((SELECT array_agg(d.n ORDER BY d.i) FROM ( \
                 SELECT x.i, CASE WHEN x.prefix THEN \
                   (SELECT coalesce(sum(t.chunks), 0)::bigint FROM {terms} t \
                     WHERE t.scope_id = $1 AND t.term >= x.term AND t.term < x.term || chr(1114111)) \
                 ELSE (SELECT coalesce(max(t.chunks), 0)::bigint FROM {terms} t \
                     WHERE t.scope_id = $1 AND t.term = x.term) END AS n \
                 FROM unnest($2::text[], $3::boolean[]) WITH ORDINALITY AS x(term, prefix, i)) d), \
                 '{{}}'::bigint[])",
            heads = self.t("search_heads"),
            terms = self.t("search_terms")
        ))
        .bind(self.scope_id)
        .bind(&texts)
        .bind(&prefixes)
        .fetch_one(&self.inner.pool())
        .await?;
        let count = |n: i64| usize::try_from(n).unwrap_or(0);
        let documents: Vec<i64> = row.get(1);
        Ok((
            count(row.get(0)),
            documents.into_iter().map(count).collect(),
        ))
    }

    /// Two round trips: the counts, then the ranking with the hits' texts.
    async fn lexical(&self, request: &SearchRequest) -> Result<Vec<Hit>, sqlx::Error> {
        let terms = query_terms(&request.query);
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        let (total, documents) = self.counts(&terms).await?;
        if total == 0 || documents.len() != terms.len() {
            return Ok(Vec::new());
        }
        let mut kept: Vec<usize> = terms_to_search(&documents, total);
        if kept.is_empty() {
            return Ok(Vec::new());
        }
        kept.sort_by_key(|&i| (documents[i], i));
        kept.truncate(MAX_SEARCHED_TERMS);
        kept.sort_unstable();
        let all_common = documents
            .iter()
            .all(|&count| count == 0 || count as f64 / total as f64 > COMMON_TERM_SHARE);
        // Every term common: rank among the newest chunks only (a range of the (scope,
        // seq) index, so the cost does not grow with the index).
        let window = if all_common && total > COMMON_QUERY_WINDOW {
            format!(
                "AND c.seq >= (SELECT next_seq FROM {heads} WHERE scope_id = $1) - {COMMON_QUERY_WINDOW}",
                heads = self.t("search_heads")
            )
        } else {
            String::new()
        };
        let n = total as f64;
        let queries: Vec<String> = kept.iter().map(|&i| self.tsquery(&terms[i])).collect();
        let weights: Vec<f64> = kept
            .iter()
            .map(|&i| {
                let df = documents[i] as f64;
                (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
            })
            .collect();
        let any = queries.join(" | ");
        let score = (1..=queries.len())
            .map(|i| format!("$7[{i}] * ts_rank(c.terms, ($6::tsquery[])[{i}], 1)"))
            .collect::<Vec<_>>()
            .join(" + ");
        let (kinds, since) = bounds(request);
        // Ranked, then each source's best chunk, then the best `limit` of those with
        // their texts: one statement, texts read for the hits only.
        let rows = crate::query(&format!(
            "WITH ranked AS ( \
               SELECT c.chunk_id, c.source, c.part, c.kind, c.at, ({score})::float8 AS score \
               FROM {chunks} c \
               WHERE c.scope_id = $1 AND c.terms @@ $2::tsquery AND c.kind = ANY($3) \
                 AND ($4::timestamp IS NULL OR c.at >= $4) {window}), \
             best AS ( \
               SELECT DISTINCT ON (source) * FROM ranked ORDER BY source, score DESC, part), \
             top AS (SELECT * FROM best ORDER BY score DESC, source, part LIMIT $5) \
             SELECT top.source, top.kind, top.at, top.score, c.body \
             FROM top JOIN {chunks} c ON c.chunk_id = top.chunk_id \
             ORDER BY top.score DESC, top.source, top.part",
            chunks = self.t("search_chunks")
        ))
        // Planned for this query's terms each time: a plan made once for any terms cannot
        // tell a rare term (the GIN index) from a common one.
        .persistent(false)
        .bind(self.scope_id)
        .bind(&any)
        .bind(&kinds)
        .bind(since)
        .bind(i64::try_from(request.limit).unwrap_or(i64::MAX))
        .bind(&queries)
        .bind(&weights)
        .fetch_all(&self.inner.pool())
        .await?;
        Ok(rows
            .iter()
            .filter_map(|row| {
                Some(Hit {
                    source: row.get(0),
                    kind: SourceKind::from_name(row.get::<&str, _>(1))?,
                    at: row.get(2),
                    score: row.get(3),
                    snippet: snippet(row.get::<&str, _>(4), &terms),
                })
            })
            .collect())
    }

    /// One hit per source, best first, at most `limit`, with snippets read for the hits
    /// only.
    async fn hits(
        &self,
        ranked: Vec<Ranked>,
        limit: usize,
        terms: &[QueryTerm],
    ) -> Result<Vec<Hit>, sqlx::Error> {
        let mut chosen: Vec<Ranked> = Vec::new();
        for row in ranked {
            if chosen.len() == limit {
                break;
            }
            if chosen.iter().any(|c| c.source == row.source) {
                continue;
            }
            chosen.push(row);
        }
        let ids: Vec<i64> = chosen.iter().map(|c| c.id).collect();
        let bodies: HashMap<i64, String> = crate::query(&format!(
            "SELECT chunk_id, body FROM {} WHERE chunk_id = ANY($1)",
            self.t("search_chunks")
        ))
        .bind(&ids)
        .fetch_all(&self.inner.pool())
        .await?
        .into_iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
        Ok(chosen
            .into_iter()
            .filter_map(|c| {
                let kind = SourceKind::from_name(&c.kind)?;
                let body = bodies.get(&c.id)?;
                Some(Hit {
                    source: c.source,
                    kind,
                    at: c.at,
                    score: c.score,
                    snippet: snippet(body, terms),
                })
            })
            .collect())
    }
}

/// A ranked chunk before its text is read.
struct Ranked {
    id: i64,
    source: String,
    kind: String,
    at: Option<NaiveDateTime>,
    score: f64,
}

/// `text` as a quoted lexeme of a `tsvector` or `tsquery` literal.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "''"))
}

/// The request's sources (by name) and time bound.
fn bounds(request: &SearchRequest) -> (Vec<String>, Option<NaiveDateTime>) {
    (
        request
            .sources
            .iter()
            .map(|kind| kind.name().to_owned())
            .collect(),
        request.since,
    )
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
                Ok(IndexStats {
                    chunks: count(0),
                    groups: count(1),
                })
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

/// The columns of the chunks one `replace` inserts.
#[derive(Default)]
struct NewChunks {
    groups: Vec<String>,
    parts: Vec<i32>,
    sources: Vec<String>,
    kinds: Vec<String>,
    at: Vec<Option<NaiveDateTime>>,
    bodies: Vec<String>,
    terms: Vec<String>,
}

impl NewChunks {
    fn push(&mut self, chunk: &Chunk, terms: String) {
        self.groups.push(chunk.group.clone());
        self.parts
            .push(i32::try_from(chunk.part).unwrap_or(i32::MAX));
        self.sources.push(chunk.source.clone());
        self.kinds.push(chunk.kind.name().to_owned());
        self.at.push(chunk.at);
        // PostgreSQL text cannot hold NUL.
        self.bodies.push(chunk.text.replace('\0', "\u{fffd}"));
        self.terms.push(terms);
    }

    fn len(&self) -> usize {
        self.groups.len()
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
enum Fetched {
    /// Those stored since the copy's stamp.
    Since(Vec<VectorRow>),
    /// Every one.
    All(Vec<VectorRow>),
}

impl PgIndex {
    /// The scope's stamp, and the rows `copy` needs when it is not current (with the
    /// stamp of their own snapshot).
    async fn vector_stamp_or_rows(
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

async fn held_model<'e, E>(
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
