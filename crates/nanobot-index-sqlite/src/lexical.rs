//! Search by words: term counts from the vocabulary, BM25 over FTS5, one hit per source.

use super::*;

pub(super) fn search(
    connection: &Connection,
    request: &SearchRequest,
) -> rusqlite::Result<Vec<Hit>> {
    let terms = query_terms(&request.query);
    let total: i64 = connection.query_row("SELECT count(*) FROM chunks", [], |row| row.get(0))?;
    if total == 0 {
        return Ok(Vec::new());
    }
    let counted = document_counts(connection, &terms)?;
    let documents: Vec<usize> = counted.iter().map(|(_, count)| *count as usize).collect();
    let kept: Vec<&QueryTerm> = terms_to_search(&documents, total as usize)
        .into_iter()
        .map(|i| counted[i].0)
        .collect();
    if kept.is_empty() {
        return Ok(Vec::new());
    }
    let newer_than = newest_only(connection, &documents, total)?;
    let expression = kept
        .iter()
        .map(|term| {
            let quoted = format!("\"{}\"", term.text.replace('"', "\"\""));
            if term.prefix { quoted + "*" } else { quoted }
        })
        .collect::<Vec<_>>()
        .join(" OR ");
    let (kinds, since) = request_bounds(request);
    // The text is read for the hits only, after ranking: sorting every matching row with
    // its text was most of the cost of a query whose terms are in most chunks.
    let sql = format!(
        "SELECT c.source, c.part, c.kind, c.at, c.id, bm25(chunk_terms) AS rank
         FROM chunk_terms JOIN chunks c ON c.id = chunk_terms.rowid
         WHERE chunk_terms MATCH ?1 AND c.kind IN ({kinds}) AND (?2 IS NULL OR c.at >= ?2)
           AND chunk_terms.rowid > ?4
         ORDER BY rank, c.source, c.part
         LIMIT ?3"
    );
    let rows = (request.limit * ROWS_PER_HIT) as i64;
    let mut statement = connection.prepare(&sql)?;
    let mut text_of = connection.prepare("SELECT text FROM chunks WHERE id = ?1")?;
    let mut hits: Vec<Hit> = Vec::new();
    let mut found = statement.query(params![
        expression,
        since,
        rows,
        newer_than.unwrap_or(i64::MIN)
    ])?;
    while let Some(row) = found.next()? {
        if hits.len() == request.limit {
            break;
        }
        let source: String = row.get(0)?;
        if hits.iter().any(|hit| hit.source == source) {
            continue;
        }
        let kind = kind_of(row.get(2)?);
        let written: Option<String> = row.get(3)?;
        let id: i64 = row.get(4)?;
        let text: String = text_of.query_row([id], |row| row.get(0))?;
        let rank: f64 = row.get(5)?;
        hits.push(Hit {
            source,
            kind,
            at: written.and_then(|text| NaiveDateTime::parse_from_str(&text, TIME_FORMAT).ok()),
            // bm25() is lower for better matches; a hit's score is higher for better ones.
            score: -rank,
            snippet: snippet(&text, &terms),
        });
    }
    Ok(hits)
}

/// How many chunks hold each term (a prefix term: every term it begins).
pub(super) fn document_counts<'t>(
    connection: &Connection,
    terms: &'t [QueryTerm],
) -> rusqlite::Result<Vec<(&'t QueryTerm, i64)>> {
    let mut counted = Vec::new();
    for term in terms {
        let documents: i64 = if term.prefix {
            connection.query_row(
                "SELECT coalesce(sum(doc), 0) FROM chunk_vocab WHERE term >= ?1 AND term < ?1 || char(1114111)",
                [&term.text],
                |row| row.get(0),
            )?
        } else {
            connection
                .query_row(
                    "SELECT doc FROM chunk_vocab WHERE term = ?1",
                    [&term.text],
                    |row| row.get(0),
                )
                .optional()?
                .unwrap_or(0)
        };
        counted.push((term, documents));
    }
    Ok(counted)
}

/// When every term is common, the lowest chunk id worth ranking: the newest chunks only
/// (ids grow with every write).
pub(super) fn newest_only(
    connection: &Connection,
    documents: &[usize],
    total: i64,
) -> rusqlite::Result<Option<i64>> {
    let all_common = documents
        .iter()
        .all(|&count| count == 0 || count as f64 / total as f64 > COMMON_TERM_SHARE);
    if !(all_common && total as usize > COMMON_QUERY_WINDOW) {
        return Ok(None);
    }
    let newest: i64 =
        connection.query_row("SELECT coalesce(max(id), 0) FROM chunks", [], |row| {
            row.get(0)
        })?;
    Ok(Some(newest - COMMON_QUERY_WINDOW as i64))
}

/// A request's sources as an SQL list of kind numbers, and its time bound as stored.
pub(super) fn request_bounds(request: &SearchRequest) -> (String, Option<String>) {
    let kinds = request
        .sources
        .iter()
        .map(|kind| kind_number(*kind).to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let since = request.since.map(|at| at.format(TIME_FORMAT).to_string());
    (kinds, since)
}
