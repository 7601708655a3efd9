//! Search by words: the shared lexical plan (`nanobot_memory_index::LexicalQuery`) over the
//! FTS5 vocabulary, candidates by FTS5's BM25 over the matched words, ranked by the plan.

use super::*;

pub(super) fn search(
    connection: &Connection,
    request: &SearchRequest,
) -> rusqlite::Result<Vec<Hit>> {
    let total: i64 = connection
        .prepare_cached("SELECT n FROM chunk_count")?
        .query_row([], |row| row.get(0))?;
    if total == 0 {
        return Ok(Vec::new());
    }
    let query = LexicalQuery::parse(&request.query);
    let mut answers = Vec::new();
    for lookups in query.lookups() {
        let mut found = Vec::new();
        for lookup in &lookups {
            found.push(vocabulary(connection, lookup)?);
        }
        answers.push(found);
    }
    let plan = query.plan(answers, total as usize);
    if plan.is_empty() {
        return Ok(Vec::new());
    }
    let newer_than = if plan.all_common() && total as usize > COMMON_QUERY_WINDOW {
        newest_id(connection)?.map(|newest| newest - COMMON_QUERY_WINDOW as i64)
    } else {
        None
    };
    let candidates = candidates(connection, request, &plan.match_terms(), newer_than)?;
    Ok(plan.hits(candidates, request.limit))
}

/// The chunks holding any of `terms` that `request` admits, best first by FTS5's BM25
/// over those terms, at most [`CANDIDATES`], with their text.
fn candidates(
    connection: &Connection,
    request: &SearchRequest,
    terms: &[(QueryTerm, usize)],
    newer_than: Option<i64>,
) -> rusqlite::Result<Vec<Chunk>> {
    let expression = terms
        .iter()
        .map(|(term, _)| {
            let quoted = format!("\"{}\"", term.text.replace('"', "\"\""));
            if term.prefix { quoted + "*" } else { quoted }
        })
        .collect::<Vec<_>>()
        .join(" OR ");
    let (kinds, since) = request_bounds(request);
    // Ranked first, the texts joined for the best rows only: sorting every matching row
    // with its text was most of the cost of a query whose terms are in many chunks.
    let sql = format!(
        "WITH best AS (
           SELECT chunk_terms.rowid AS id, bm25(chunk_terms) AS rank
           FROM chunk_terms JOIN chunks c ON c.id = chunk_terms.rowid
           WHERE chunk_terms MATCH ?1 AND c.kind IN ({kinds}) AND (?2 IS NULL OR c.at >= ?2)
             AND chunk_terms.rowid > ?4
           ORDER BY rank, c.source, c.part
           LIMIT ?3)
         SELECT c.grp, c.source, c.part, c.kind, c.at, c.text
         FROM best JOIN chunks c ON c.id = best.id ORDER BY best.rank, c.source, c.part"
    );
    let mut statement = connection.prepare_cached(&sql)?;
    let rows = statement.query_map(
        params![
            expression,
            since,
            CANDIDATES as i64,
            newer_than.unwrap_or(i64::MIN)
        ],
        |row| {
            let written: Option<String> = row.get(4)?;
            Ok(Chunk {
                group: row.get(0)?,
                source: row.get(1)?,
                part: row.get(2)?,
                kind: kind_of(row.get(3)?),
                at: written.and_then(|text| NaiveDateTime::parse_from_str(&text, TIME_FORMAT).ok()),
                text: row.get(5)?,
            })
        },
    )?;
    rows.collect()
}

/// The indexed words a lookup finds, with how many chunks hold each.
fn vocabulary(
    connection: &Connection,
    lookup: &VocabularyLookup,
) -> rusqlite::Result<Vec<(String, usize)>> {
    let (sql, word) = match lookup {
        VocabularyLookup::Exact(word) => {
            ("SELECT term, doc FROM chunk_vocab WHERE term = ?1", word)
        }
        VocabularyLookup::Prefix(start) => (
            "SELECT term, doc FROM chunk_vocab WHERE term >= ?1 AND term < ?1 || char(1114111) ORDER BY term",
            start,
        ),
    };
    // One statement per kind of lookup, kept by the connection: a query makes several.
    let mut statement = connection.prepare_cached(sql)?;
    let rows = statement.query_map([word], |row| {
        Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)? as usize))
    })?;
    rows.collect()
}

/// The newest chunk's id (ids grow with every write), if there is any.
fn newest_id(connection: &Connection) -> rusqlite::Result<Option<i64>> {
    connection.query_row("SELECT max(id) FROM chunks", [], |row| row.get(0))
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
