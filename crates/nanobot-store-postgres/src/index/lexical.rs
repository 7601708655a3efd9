//! Search by words: term counts, BM25 ranking over the GIN index, hits with their groups.

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

    /// How many chunks the index holds, and how many hold each term (a prefix term: the
    /// sum over the terms it starts), in one round trip.
    pub(super) async fn counts(
        &self,
        terms: &[QueryTerm],
    ) -> Result<(usize, Vec<usize>), sqlx::Error> {
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
    pub(super) async fn lexical(&self, request: &SearchRequest) -> Result<Vec<Hit>, sqlx::Error> {
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
        let window = self.newest_only(&documents, total);
        let queries: Vec<String> = kept.iter().map(|&i| self.tsquery(&terms[i])).collect();
        let weights = idf_weights(&kept, &documents, total);
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

    /// When every term is common, a clause that ranks among the newest chunks only (a
    /// range of the (scope, seq) index, so the cost does not grow with the index).
    fn newest_only(&self, documents: &[usize], total: usize) -> String {
        let all_common = documents
            .iter()
            .all(|&count| count == 0 || count as f64 / total as f64 > COMMON_TERM_SHARE);
        if all_common && total > COMMON_QUERY_WINDOW {
            format!(
                "AND c.seq >= (SELECT next_seq FROM {heads} WHERE scope_id = $1) - {COMMON_QUERY_WINDOW}",
                heads = self.t("search_heads")
            )
        } else {
            String::new()
        }
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

/// BM25's inverse document frequency of each kept term: ln(1 + (N - df + 0.5) / (df + 0.5)).
fn idf_weights(kept: &[usize], documents: &[usize], total: usize) -> Vec<f64> {
    let n = total as f64;
    kept.iter()
        .map(|&i| {
            let df = documents[i] as f64;
            (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
        })
        .collect()
}
