//! The history journal on PostgreSQL: one `journal_heads` row per scope hands out cursors
//! inside the inserting statement, holding its row lock until commit, so cursors are
//! gap-free and assigned in commit order: a reader polling `cursor > x` never skips one.

use async_trait::async_trait;
use nanobot_memory_store::{
    Compaction, HistoryJournal, JournalCapabilities, JournalEntry, MemoryError, NewEntry, stamp,
};
use serde_json::Map;
use sqlx::postgres::PgRow;
use sqlx::{Postgres, Row};

use crate::PgScope;
use crate::error::memory as db;

/// The columns [`entry`] reads.
pub(crate) const ENTRY_COLUMNS: &str =
    "cursor, ts, content, session_key, range_start, range_end, digest, extra";

pub(crate) fn entry(row: &PgRow) -> JournalEntry {
    let range = match (row.get::<Option<i64>, _>(4), row.get::<Option<i64>, _>(5)) {
        (Some(start), Some(end)) if start >= 0 && end >= start => {
            Some((start.unsigned_abs(), end.unsigned_abs()))
        }
        _ => None,
    };
    JournalEntry {
        cursor: row.get::<i64, _>(0).unsigned_abs(),
        timestamp: row.get(1),
        content: decode(row.get(2)),
        session_key: row.get(3),
        message_range: range,
        message_digest: range.and(row.get(6)),
        extra: row
            .get::<Option<&str>, _>(7)
            .and_then(|text| serde_json::from_str(text).ok())
            .unwrap_or_else(Map::new),
    }
}

/// The columns of entries to insert, one array each.
pub(crate) struct EntryArrays {
    pub(crate) contents: Vec<String>,
    pub(crate) sessions: Vec<Option<String>>,
    pub(crate) starts: Vec<Option<i64>>,
    pub(crate) ends: Vec<Option<i64>>,
    pub(crate) digests: Vec<Option<String>>,
}

impl EntryArrays {
    pub(crate) fn of(entries: &[NewEntry<'_>]) -> EntryArrays {
        EntryArrays {
            contents: entries.iter().map(|e| encode(e.content)).collect(),
            sessions: entries
                .iter()
                .map(|e| e.session_key.map(str::to_owned))
                .collect(),
            starts: entries
                .iter()
                .map(|e| e.message_range.map(|(s, _)| signed(s)))
                .collect(),
            ends: entries
                .iter()
                .map(|e| e.message_range.map(|(_, e)| signed(e)))
                .collect(),
            digests: entries
                .iter()
                .map(|e| e.digest.map(str::to_owned))
                .collect(),
        }
    }
}

/// Free text as a column keeps it: a JSON string literal, since PostgreSQL's `text` cannot
/// hold NUL and journal contents, documents and records may.
pub(crate) fn encode(text: &str) -> String {
    serde_json::Value::String(text.to_owned()).to_string()
}

/// The text [`encode`] stored.
pub(crate) fn decode(stored: String) -> String {
    match serde_json::from_str::<String>(&stored) {
        Ok(text) => text,
        Err(_) => stored,
    }
}

pub(crate) fn signed(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

impl PgScope {
    /// Appends `entries` through `executor` (a pool or a transaction): the head row's
    /// cursor is bumped and the rows inserted in one statement. The cursors, in order.
    pub(crate) async fn append_entries<'e, E>(
        &self,
        executor: E,
        entries: &[NewEntry<'_>],
    ) -> Result<Vec<u64>, sqlx::Error>
    where
        E: sqlx::Executor<'e, Database = Postgres>,
    {
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let arrays = EntryArrays::of(entries);
        let sql = format!(
            "WITH h AS ( \
               UPDATE {heads} SET latest = latest + $2 WHERE scope_id = $1 RETURNING latest - $2 AS base) \
             INSERT INTO {journal} (scope_id, cursor, ts, content, session_key, range_start, range_end, digest) \
             SELECT $1, h.base + x.i, $3, x.content, x.session_key, x.range_start, x.range_end, x.digest \
             FROM h, unnest($4::text[], $5::text[], $6::bigint[], $7::bigint[], $8::text[]) \
               WITH ORDINALITY AS x(content, session_key, range_start, range_end, digest, i) \
             RETURNING cursor",
            heads = self.inner.t("journal_heads"),
            journal = self.inner.t("journal"),
        );
        let rows = crate::query(&sql)
            .bind(self.scope_id)
            .bind(signed(entries.len() as u64))
            .bind(stamp(self.clock.as_ref()))
            .bind(&arrays.contents)
            .bind(&arrays.sessions)
            .bind(&arrays.starts)
            .bind(&arrays.ends)
            .bind(&arrays.digests)
            .fetch_all(executor)
            .await?;
        let mut cursors: Vec<u64> = rows
            .iter()
            .map(|row| row.get::<i64, _>(0).unsigned_abs())
            .collect();
        cursors.sort_unstable();
        Ok(cursors)
    }

    /// The journal's head: (latest cursor, Dream's cursor).
    pub(crate) async fn head(&self) -> Result<(u64, u64), MemoryError> {
        let row = crate::query(&format!(
            "SELECT latest, dream_cursor FROM {} WHERE scope_id = $1",
            self.inner.t("journal_heads")
        ))
        .bind(self.scope_id)
        .fetch_optional(&self.inner.pool())
        .await
        .map_err(db("read the journal's cursors"))?;
        Ok(row.map_or((0, 0), |row| {
            (
                row.get::<i64, _>(0).unsigned_abs(),
                row.get::<i64, _>(1).unsigned_abs(),
            )
        }))
    }
}

impl PgScope {
    /// Inserts imported entries with their own cursors.
    async fn insert_imported(
        &self,
        tx: &mut sqlx::PgConnection,
        fresh: &[&JournalEntry],
    ) -> Result<(), MemoryError> {
        let sql = format!(
            "INSERT INTO {} (scope_id, cursor, ts, content, session_key, range_start, range_end, digest, extra) \
                 SELECT $1, x.cursor, x.ts, x.content, x.session_key, x.range_start, x.range_end, x.digest, x.extra \
                 FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::bigint[], $8::text[], $9::text[]) \
                   AS x(cursor, ts, content, session_key, range_start, range_end, digest, extra)",
            self.inner.t("journal")
        );
        crate::query(&sql)
            .bind(self.scope_id)
            .bind(fresh.iter().map(|e| signed(e.cursor)).collect::<Vec<_>>())
            .bind(
                fresh
                    .iter()
                    .map(|e| e.timestamp.clone())
                    .collect::<Vec<_>>(),
            )
            .bind(fresh.iter().map(|e| encode(&e.content)).collect::<Vec<_>>())
            .bind(
                fresh
                    .iter()
                    .map(|e| e.session_key.clone())
                    .collect::<Vec<_>>(),
            )
            .bind(
                fresh
                    .iter()
                    .map(|e| e.message_range.map(|(s, _)| signed(s)))
                    .collect::<Vec<_>>(),
            )
            .bind(
                fresh
                    .iter()
                    .map(|e| e.message_range.map(|(_, e)| signed(e)))
                    .collect::<Vec<_>>(),
            )
            .bind(
                fresh
                    .iter()
                    .map(|e| e.message_digest.clone())
                    .collect::<Vec<_>>(),
            )
            .bind(
                fresh
                    .iter()
                    .map(|e| {
                        (!e.extra.is_empty())
                            .then(|| serde_json::Value::Object(e.extra.clone()).to_string())
                    })
                    .collect::<Vec<_>>(),
            )
            .execute(tx)
            .await
            .map_err(db("import journal entries"))?;
        Ok(())
    }

    /// Copies `entries` (from another journal, in cursor order) with their own cursors,
    /// timestamps and every field, skipping those at or below the latest cursor already
    /// here (so an import can be run again, or resumed); then raises the latest cursor to
    /// `latest` (the source's, which may lie past its last entry) and Dream's cursor to
    /// `dream_cursor` (never past the latest). How many were copied.
    pub async fn import_journal(
        &self,
        entries: &[JournalEntry],
        latest_cursor: u64,
        dream_cursor: u64,
    ) -> Result<usize, MemoryError> {
        crate::transaction(self.inner.pool(), db("import journal entries"), async |tx| {
            let (latest, _) = self.lock_head(tx).await?;
            let fresh: Vec<&JournalEntry> = entries.iter().filter(|e| e.cursor > latest).collect();
            if !fresh.is_empty() {
                self.insert_imported(tx, &fresh).await?;
            }
            let newest = fresh
                .last()
                .map_or(latest, |e| e.cursor.max(latest))
                .max(latest_cursor);
            crate::query(&format!(
                "UPDATE {} SET latest = $2, dream_cursor = GREATEST(dream_cursor, LEAST($3, $2)) WHERE scope_id = $1",
                self.inner.t("journal_heads")
            ))
            .bind(self.scope_id)
            .bind(signed(newest))
            .bind(signed(dream_cursor))
            .execute(&mut *tx)
            .await
            .map_err(db("import the journal's cursors"))?;
            Ok(fresh.len())
        })
        .await
    }
}

#[async_trait]
impl nanobot_memory_store::JournalImport for PgScope {
    async fn import(
        &self,
        entries: &[JournalEntry],
        latest: u64,
        dream: u64,
    ) -> Result<usize, MemoryError> {
        self.import_journal(entries, latest, dream).await
    }
}

#[async_trait]
impl HistoryJournal for PgScope {
    async fn append(&self, entries: &[NewEntry<'_>]) -> Result<Vec<u64>, MemoryError> {
        self.inner
            .deadline("append", async {
                self.append_entries(&self.inner.pool(), entries)
                    .await
                    .map_err(db("append to the journal"))
            })
            .await
    }

    async fn read_since(
        &self,
        cursor: u64,
        limit: Option<usize>,
    ) -> Result<Vec<JournalEntry>, MemoryError> {
        self.inner.deadline("read_since", async {
        let sql = format!(
            "SELECT {ENTRY_COLUMNS} FROM {} WHERE scope_id = $1 AND cursor > $2 ORDER BY cursor LIMIT $3",
            self.inner.t("journal")
        );
        let rows = crate::query(&sql)
            .bind(self.scope_id)
            .bind(signed(cursor))
            .bind(limit.map(|l| signed(l as u64)))
            .fetch_all(&self.inner.pool())
            .await
            .map_err(db("read the journal"))?;
        Ok(rows.iter().map(entry).collect())
        }).await
    }

    async fn read_last(&self, count: usize) -> Result<Vec<JournalEntry>, MemoryError> {
        self.inner.deadline("read_last", async {
        let sql = format!(
            "SELECT {ENTRY_COLUMNS} FROM {} WHERE scope_id = $1 ORDER BY cursor DESC LIMIT $2",
            self.inner.t("journal")
        );
        let rows = crate::query(&sql)
            .bind(self.scope_id)
            .bind(signed(count as u64))
            .fetch_all(&self.inner.pool())
            .await
            .map_err(db("read the journal"))?;
        let mut entries: Vec<JournalEntry> = rows.iter().map(entry).collect();
        entries.reverse();
        Ok(entries)
        }).await
    }

    async fn latest_cursor(&self) -> Result<u64, MemoryError> {
        self.inner
            .deadline("latest_cursor", async { Ok(self.head().await?.0) })
            .await
    }

    async fn dream_cursor(&self) -> Result<u64, MemoryError> {
        self.inner
            .deadline("dream_cursor", async { Ok(self.head().await?.1) })
            .await
    }

    async fn set_dream_cursor(&self, cursor: u64) -> Result<(), MemoryError> {
        self.inner.deadline("set_dream_cursor", async {
        let sql = format!(
            "UPDATE {} SET dream_cursor = $2 WHERE scope_id = $1 AND latest >= $2 RETURNING latest",
            self.inner.t("journal_heads")
        );
        let moved = crate::query(&sql)
            .bind(self.scope_id)
            .bind(signed(cursor))
            .fetch_optional(&self.inner.pool())
            .await
            .map_err(db("move Dream's cursor"))?;
        match moved {
            Some(_) => Ok(()),
            None => Err(MemoryError::InvalidCursor {
                cursor,
                latest: self.head().await?.0,
            }),
        }
        }).await
    }

    async fn compact(&self, max_entries: usize) -> Result<Compaction, MemoryError> {
        self.inner.deadline("compact", async {
        // nanobot-ai's rule (nanobot_memory_store::compaction_start): the oldest beyond the bound,
        // never an entry Dream has not read.
        let journal = self.inner.t("journal");
        let sql = format!(
            "WITH n AS (SELECT count(*) AS before FROM {journal} WHERE scope_id = $1), \
             edge AS (SELECT cursor FROM {journal} WHERE scope_id = $1 ORDER BY cursor DESC OFFSET $2 LIMIT 1), \
             d AS (DELETE FROM {journal} j USING edge, {heads} h \
                   WHERE $2 > 0 AND j.scope_id = $1 AND h.scope_id = $1 \
                     AND j.cursor <= edge.cursor AND j.cursor <= h.dream_cursor RETURNING 1) \
             SELECT n.before, (SELECT count(*) FROM d) FROM n",
            heads = self.inner.t("journal_heads"),
        );
        let row = crate::query(&sql)
            .bind(self.scope_id)
            .bind(signed(max_entries as u64))
            .fetch_one(&self.inner.pool())
            .await
            .map_err(db("compact the journal"))?;
        let before = usize::try_from(row.get::<i64, _>(0)).unwrap_or(0);
        let dropped = usize::try_from(row.get::<i64, _>(1)).unwrap_or(0);
        Ok(Compaction {
            before,
            dropped,
            kept: before - dropped,
        })
        }).await
    }

    async fn remove_entries(&self, cursors: &[u64]) -> Result<usize, MemoryError> {
        self.inner
            .deadline("remove entries", async {
                // The heads row keeps the latest cursor: a removed number is never handed out again.
                let cursors: Vec<i64> = cursors.iter().map(|&c| signed(c)).collect();
                let done = crate::query(&format!(
                    "DELETE FROM {} WHERE scope_id = $1 AND cursor = ANY($2)",
                    self.inner.t("journal")
                ))
                .bind(self.scope_id)
                .bind(&cursors)
                .execute(&self.inner.pool())
                .await
                .map_err(db("remove journal entries"))?;
                Ok(usize::try_from(done.rows_affected()).unwrap_or(usize::MAX))
            })
            .await
    }

    fn capabilities(&self) -> JournalCapabilities {
        JournalCapabilities {
            shared_storage: true,
        }
    }
}
