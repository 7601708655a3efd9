//! Search by words: the shared lexical plan (`nanobot_memory_index::LexicalQuery`) over the
//! per-scope term counts, candidates from the GIN index ranked by BM25's idf times
//! `ts_rank`, then ranked by the plan.

use super::*;

impl PgIndex {
    /// Applies term-count changes and the change of the chunk count.
    pub(super) async fn count(
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

    /// How many chunks the index holds, and what each vocabulary lookup finds (the indexed
    /// words and how many chunks hold each), in one round trip.
    async fn vocabulary(
        &self,
        lookups: &[Vec<VocabularyLookup>],
    ) -> Result<(usize, Vec<Vec<Vec<(String, usize)>>>), sqlx::Error> {
        let flat: Vec<&VocabularyLookup> = lookups.iter().flatten().collect();
        let (texts, prefixes): (Vec<&str>, Vec<bool>) = flat
            .iter()
            .map(|lookup| match lookup {
                VocabularyLookup::Exact(word) => (word.as_str(), false),
                VocabularyLookup::Prefix(start) => (start.as_str(), true),
            })
            .unzip();
        // Row 0 is the chunk count; the others are (lookup's position, word, chunks). A
        // range of the (scope, term) key either way: an exact word is the range [w, w].
        let rows = crate::query(&format!(
            "SELECT 0::bigint, '', coalesce((SELECT chunks FROM {heads} WHERE scope_id = $1), 0) \
             UNION ALL \
             SELECT x.i, v.term, v.chunks \
             FROM unnest($2::text[], $3::boolean[]) WITH ORDINALITY AS x(term, prefix, i), \
             LATERAL (SELECT t.term, t.chunks FROM {terms} t WHERE t.scope_id = $1 \
               AND t.term >= x.term \
               AND t.term <= CASE WHEN x.prefix THEN x.term || chr(1114111) ELSE x.term END \
               ORDER BY t.term) v",
            heads = self.t("search_heads"),
            terms = self.t("search_terms")
        ))
        .bind(self.scope_id)
        .bind(&texts)
        .bind(&prefixes)
        .fetch_all(&self.inner.pool())
        .await?;
        let count = |n: i64| usize::try_from(n).unwrap_or(0);
        let mut total = 0;
        let mut found: Vec<Vec<(String, usize)>> = vec![Vec::new(); flat.len()];
        for row in &rows {
            let position = count(row.get(0));
            if position == 0 {
                total = count(row.get(2));
            } else if let Some(slot) = found.get_mut(position - 1) {
                slot.push((row.get(1), count(row.get(2))));
            }
        }
        let mut answers = found.into_iter();
        let grouped = lookups
            .iter()
            .map(|word| answers.by_ref().take(word.len()).collect())
            .collect();
        Ok((total, grouped))
    }

    /// Two round trips: the vocabulary, then the candidates with their texts, ranked by the
    /// shared plan.
    pub(super) async fn lexical(&self, request: &SearchRequest) -> Result<Vec<Hit>, sqlx::Error> {
        let query = LexicalQuery::parse(&request.query);
        let (total, answers) = self.vocabulary(&query.lookups()).await?;
        if total == 0 {
            return Ok(Vec::new());
        }
        let plan = query.plan(answers, total);
        if plan.is_empty() {
            return Ok(Vec::new());
        }
        let mut matched = plan.match_terms();
        matched.sort_by_key(|(term, documents)| (*documents, term.text.clone()));
        matched.truncate(MAX_SEARCHED_TERMS);
        let window = if plan.all_common() && total > COMMON_QUERY_WINDOW {
            format!(
                "AND c.seq >= (SELECT next_seq FROM {heads} WHERE scope_id = $1) - {COMMON_QUERY_WINDOW}",
                heads = self.t("search_heads")
            )
        } else {
            String::new()
        };
        let candidates = self.candidates(request, &matched, total, &window).await?;
        Ok(plan.hits(candidates, request.limit))
    }

    /// The chunks holding any of `matched` that `request` admits, best first by each
    /// term's inverse document frequency times `ts_rank`, at most `CANDIDATES`, with
    /// their texts.
    async fn candidates(
        &self,
        request: &SearchRequest,
        matched: &[(QueryTerm, usize)],
        total: usize,
        window: &str,
    ) -> Result<Vec<Chunk>, sqlx::Error> {
        let queries: Vec<String> = matched.iter().map(|(term, _)| self.tsquery(term)).collect();
        let weights: Vec<f64> = matched
            .iter()
            .map(|(_, documents)| idf(*documents, total))
            .collect();
        let any = queries.join(" | ");
        let score = (1..=queries.len())
            .map(|i| format!("$7[{i}] * ts_rank(c.terms, ($6::tsquery[])[{i}], 1)"))
            .collect::<Vec<_>>()
            .join(" + ");
        let (kinds, since) = bounds(request);
        // The GIN index alone finds this scope's chunks (its lexemes carry the scope id).
        // Without a window the scope is tested row by row, never by the (scope, seq)
        // index: with stale statistics (a scope just filled) the planner intersected the
        // two, reading every entry of the scope (7 ms of 25 at 100,000 chunks).
        let scope = if window.is_empty() {
            "(c.scope_id + 0) = $1"
        } else {
            "c.scope_id = $1"
        };
        let rows = crate::query(&format!(
            "WITH ranked AS ( \
               SELECT c.chunk_id, c.source, c.part, ({score})::float8 AS score \
               FROM {chunks} c \
               WHERE {scope} AND c.terms @@ $2::tsquery AND c.kind = ANY($3) \
                 AND ($4::timestamp IS NULL OR c.at >= $4) {window} \
               ORDER BY score DESC, c.source, c.part LIMIT $5) \
             SELECT c.grp, c.source, c.part, c.kind, c.at, c.body \
             FROM ranked JOIN {chunks} c ON c.chunk_id = ranked.chunk_id \
             ORDER BY ranked.score DESC, ranked.source, ranked.part",
            chunks = self.t("search_chunks")
        ))
        // Planned for this query's terms each time: a plan made once for any terms cannot
        // tell a rare term (the GIN index) from a common one.
        .persistent(false)
        .bind(self.scope_id)
        .bind(&any)
        .bind(&kinds)
        .bind(since)
        .bind(i64::try_from(CANDIDATES).unwrap_or(i64::MAX))
        .bind(&queries)
        .bind(&weights)
        .fetch_all(&self.inner.pool())
        .await?;
        Ok(rows
            .iter()
            .filter_map(|row| {
                Some(Chunk {
                    group: row.get(0),
                    source: row.get(1),
                    part: u32::try_from(row.get::<i32, _>(2)).ok()?,
                    kind: SourceKind::from_name(row.get::<&str, _>(3))?,
                    at: row.get(4),
                    text: row.get(5),
                })
            })
            .collect())
    }

    /// One hit per source, best first, at most `limit`, with snippets read for the hits
    /// only.
    pub(super) async fn hits(
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
pub(super) struct Ranked {
    pub(super) id: i64,
    pub(super) source: String,
    pub(super) kind: String,
    pub(super) at: Option<NaiveDateTime>,
    pub(super) score: f64,
}

/// The request's sources (by name) and time bound.
pub(super) fn bounds(request: &SearchRequest) -> (Vec<String>, Option<NaiveDateTime>) {
    (
        request
            .sources
            .iter()
            .map(|kind| kind.name().to_owned())
            .collect(),
        request.since,
    )
}

/// BM25's inverse document frequency: ln(1 + (N - df + 0.5) / (df + 0.5)).
fn idf(documents: usize, total: usize) -> f64 {
    let (n, df) = (total as f64, documents as f64);
    (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
}
