//! The session port on PostgreSQL.
//!
//! A session is a `sessions` row (its metadata, pointer, `next_seq`, and its revision:
//! `epoch` changes when the messages are replaced, `revision` with every write) and its
//! messages, one `messages` row each, `seq` from 0, the body verbatim. An append is one
//! statement: a compare-and-set on the revision that feeds the insert of the new messages,
//! so a stale writer changes nothing. A read is two statements that agree by construction
//! (the second checks the epoch the first saw).

use async_trait::async_trait;
use chrono::NaiveDateTime;
use nanobot_llm_port::tokens::to_python_json;
use nanobot_session_store::{
    Append, Loaded, MIN_REPLAY_MESSAGES, PREVIEW_SCAN_RECORDS, PreviewScan, Repair, ReplayView,
    Revision, Session, SessionCapabilities, SessionError, SessionInfo, SessionKey, SessionMeta,
    SessionStore, StoredMessage, TurnLock, listing_title, sort_listing,
};
use serde_json::{Map, Value};
use sqlx::Row;
use sqlx::postgres::PgRow;

use crate::PgScope;
use crate::error::session as db;
use crate::journal::{decode, encode};

/// The columns [`session_row`] reads, in its order.
pub(crate) const SESSION_COLUMNS: &str = "session_id, epoch, revision, next_seq, pointer, created_at, updated_at, metadata, provider_state";

mod rows;

pub(crate) use rows::*;

impl PgScope {
    pub(crate) fn now(&self) -> NaiveDateTime {
        nanobot_session_store::local_naive(self.clock.now())
    }

    /// The session's row, `None` when there is none.
    pub(crate) async fn session_row(
        &self,
        key: &SessionKey,
    ) -> Result<Option<SessionRow>, SessionError> {
        let sql = format!(
            "SELECT {SESSION_COLUMNS} FROM {} WHERE scope_id = $1 AND session_key = $2",
            self.inner.t("sessions")
        );
        let row = crate::query(&sql)
            .bind(self.scope_id)
            .bind(key.as_str())
            .fetch_optional(&self.inner.pool())
            .await
            .map_err(db("read a session"))?;
        Ok(row.as_ref().map(session_row))
    }

    /// The messages `[from, to)` of the session whose row was read at `revision`, or
    /// `None` when its messages were replaced since (the caller reads again).
    async fn messages(
        &self,
        id: i64,
        revision: Revision,
        from: i64,
        to: i64,
        repairs: &mut Vec<Repair>,
    ) -> Result<Option<Vec<StoredMessage>>, SessionError> {
        let sql = format!(
            "SELECT m.seq, m.body FROM {messages} m JOIN {sessions} s USING (session_id) \
             WHERE m.session_id = $1 AND s.epoch = $2 AND m.seq >= $3 AND m.seq < $4 ORDER BY m.seq",
            messages = self.inner.t("messages"),
            sessions = self.inner.t("sessions"),
        );
        let rows = crate::query(&sql)
            .bind(id)
            .bind(signed(revision.epoch))
            .bind(from)
            .bind(to)
            .fetch_all(&self.inner.pool())
            .await
            .map_err(db("read a session's messages"))?;
        if i64::try_from(rows.len()).unwrap_or(i64::MAX) != to - from {
            return Ok(None);
        }
        let mut messages = Vec::with_capacity(rows.len());
        for row in rows {
            let seq: i64 = row.get(0);
            match StoredMessage::from_json_text(row.get::<&str, _>(1)) {
                Ok(message) => messages.push(message),
                Err(reason) => repairs.push(Repair::CorruptLine {
                    line: count(seq) + 1,
                    reason,
                }),
            }
        }
        Ok(Some(messages))
    }

    /// The current revision of `key`, for a conflict's report.
    async fn found(&self, key: &SessionKey) -> Result<Option<Revision>, SessionError> {
        self.current_revision(key).await
    }

    async fn create(
        &self,
        key: &SessionKey,
        messages: &[StoredMessage],
        meta: &SessionMeta,
    ) -> Result<Revision, SessionError> {
        SessionError::check_pointer(key, meta.last_consolidated, messages.len())?;
        let columns = MetaColumns::of(meta);
        let rows = Rows::of(messages);
        let sql = format!(
            "WITH s AS ( \
               INSERT INTO {sessions} (scope_id, session_key, epoch, revision, next_seq, pointer, \
                 created_at, updated_at, metadata, provider_state, title, preview_user, preview_other) \
               VALUES ($1, $2, nextval('{epochs}'), 1, $3, $4, $5, $6, $7, $8, $9, \
                 (SELECT t FROM unnest($10::text[]) WITH ORDINALITY x(t, i) WHERE t IS NOT NULL AND i <= $12 ORDER BY i LIMIT 1), \
                 (SELECT t FROM unnest($11::text[]) WITH ORDINALITY x(t, i) WHERE t IS NOT NULL AND i <= $12 ORDER BY i LIMIT 1)) \
               ON CONFLICT (scope_id, session_key) DO NOTHING \
               RETURNING session_id, epoch, revision), \
             m AS ( \
               INSERT INTO {messages} (session_id, seq, role, body) \
               SELECT s.session_id, x.i - 1, x.role, x.body FROM s, \
                 unnest($13::text[], $14::text[]) WITH ORDINALITY AS x(role, body, i)) \
             SELECT epoch, revision FROM s",
            sessions = self.inner.t("sessions"),
            messages = self.inner.t("messages"),
            epochs = self.inner.t("session_epochs"),
        );
        let row = crate::query(&sql)
            .bind(self.scope_id)
            .bind(key.as_str())
            .bind(signed(messages.len() as u64))
            .bind(columns.pointer)
            .bind(columns.created_at)
            .bind(columns.updated_at)
            .bind(&columns.metadata)
            .bind(&columns.provider_state)
            .bind(&columns.title)
            .bind(&rows.user_previews)
            .bind(&rows.other_previews)
            .bind(PREVIEW_SCAN_RECORDS as i64)
            .bind(&rows.roles)
            .bind(&rows.bodies)
            .fetch_optional(&self.inner.relaxed())
            .await
            .map_err(db("create a session"))?;
        match row {
            Some(row) => Ok(revision_of(row.get(0), row.get(1))),
            None => {
                // It exists: a conflict, with the revision found.
                let found = self.found(key).await?;
                SessionError::check_revision(key, None, found)?;
                Err(SessionError::backend(
                    "the session was created and deleted by another writer meanwhile; try again",
                ))
            }
        }
    }
}

#[async_trait]
impl SessionStore for PgScope {
    async fn load(&self, key: &SessionKey) -> Result<Option<Loaded>, SessionError> {
        self.inner
            .deadline("load", async {
                loop {
                    let Some(mut row) = self.session_row(key).await? else {
                        return Ok(None);
                    };
                    let Some(messages) = self
                        .messages(row.id, row.revision, 0, row.next_seq, &mut row.repairs)
                        .await?
                    else {
                        continue; // replaced meanwhile: read the new version
                    };
                    if row.meta.last_consolidated > messages.len() {
                        row.repairs.push(Repair::PointerReset {
                            found: row.meta.last_consolidated.to_string(),
                        });
                        row.meta.last_consolidated = 0;
                    }
                    let mut session = Session::from_parts(key.clone(), messages, row.meta);
                    session.mark_persisted();
                    return Ok(Some(Loaded {
                        session,
                        revision: row.revision,
                        repairs: row.repairs,
                    }));
                }
            })
            .await
    }

    async fn append(
        &self,
        key: &SessionKey,
        expected: Option<Revision>,
        append: Append<'_>,
    ) -> Result<Revision, SessionError> {
        self.inner.deadline("append", async {
        let Some(expected) = expected else {
            let meta = append
                .meta
                .cloned()
                .unwrap_or_else(|| SessionMeta::new(self.now()));
            return self.create(key, append.messages, &meta).await;
        };
        let rows = Rows::of(append.messages);
        let n = signed(append.messages.len() as u64);
        let columns = append.meta.map(MetaColumns::of);
        let sql = format!(
            "WITH s AS ( \
               UPDATE {sessions} SET \
                 next_seq = next_seq + $5, \
                 revision = revision + 1, \
                 pointer = COALESCE($6, pointer), \
                 created_at = COALESCE($7, created_at), \
                 updated_at = COALESCE($8, updated_at), \
                 metadata = COALESCE($9, metadata), \
                 provider_state = CASE WHEN $10 THEN $11 ELSE provider_state END, \
                 title = CASE WHEN $10 THEN $12 ELSE title END, \
                 preview_user = COALESCE(preview_user, (SELECT t FROM unnest($13::text[]) WITH ORDINALITY x(t, i) \
                   WHERE t IS NOT NULL AND next_seq + i <= $15 ORDER BY i LIMIT 1)), \
                 preview_other = COALESCE(preview_other, (SELECT t FROM unnest($14::text[]) WITH ORDINALITY x(t, i) \
                   WHERE t IS NOT NULL AND next_seq + i <= $15 ORDER BY i LIMIT 1)) \
               WHERE scope_id = $1 AND session_key = $2 AND epoch = $3 AND revision = $4 \
                 AND ($6::bigint IS NULL OR ($6 >= pointer AND $6 <= next_seq + $5)) \
               RETURNING session_id, epoch, revision, next_seq - $5 AS first), \
             m AS ( \
               INSERT INTO {messages} (session_id, seq, role, body) \
               SELECT s.session_id, s.first + x.i - 1, x.role, x.body FROM s, \
                 unnest($16::text[], $17::text[]) WITH ORDINALITY AS x(role, body, i)) \
             SELECT epoch, revision FROM s",
            sessions = self.inner.t("sessions"),
            messages = self.inner.t("messages"),
        );
        let row = crate::query(&sql)
            .bind(self.scope_id)
            .bind(key.as_str())
            .bind(signed(expected.epoch))
            .bind(signed(expected.offset))
            .bind(n)
            .bind(columns.as_ref().map(|c| c.pointer))
            .bind(columns.as_ref().map(|c| c.created_at))
            .bind(columns.as_ref().map(|c| c.updated_at))
            .bind(columns.as_ref().map(|c| c.metadata.clone()))
            .bind(columns.is_some())
            .bind(columns.as_ref().and_then(|c| c.provider_state.clone()))
            .bind(columns.as_ref().and_then(|c| c.title.clone()))
            .bind(&rows.user_previews)
            .bind(&rows.other_previews)
            .bind(PREVIEW_SCAN_RECORDS as i64)
            .bind(&rows.roles)
            .bind(&rows.bodies)
            .fetch_optional(&self.inner.relaxed())
            .await
            .map_err(db("append to a session"))?;
        if let Some(row) = row {
            return Ok(revision_of(row.get(0), row.get(1)));
        }
        Err(self.refused_append(key, expected, &append).await)
        }).await
    }

    async fn rewrite(
        &self,
        session: &Session,
        expected: Option<Revision>,
    ) -> Result<Revision, SessionError> {
        self.inner.deadline("rewrite", async {
        let key = session.key();
        let Some(expected) = expected else {
            return self.create(key, session.messages(), session.meta()).await;
        };
        SessionError::check_pointer(
            key,
            session.meta().last_consolidated,
            session.messages().len(),
        )?;
        let columns = MetaColumns::of(session.meta());
        let rows = Rows::of(session.messages());
        let attempts = std::sync::atomic::AtomicU32::new(0);
        let written = crate::retrying(|| crate::transaction(self.inner.pool(), db("rewrite a session"), async |tx| {
            crate::forced_point(&self.inner, tx, "rewrite", &attempts).await.map_err(db("rewrite a session"))?;
            let sql = format!(
                "UPDATE {sessions} SET epoch = nextval('{epochs}'), revision = 1, next_seq = $5, pointer = $6, \
                   created_at = $7, updated_at = $8, metadata = $9, provider_state = $10, title = $11, \
                   preview_user = (SELECT t FROM unnest($12::text[]) WITH ORDINALITY x(t, i) WHERE t IS NOT NULL AND i <= $14 ORDER BY i LIMIT 1), \
                   preview_other = (SELECT t FROM unnest($13::text[]) WITH ORDINALITY x(t, i) WHERE t IS NOT NULL AND i <= $14 ORDER BY i LIMIT 1) \
                 WHERE scope_id = $1 AND session_key = $2 AND epoch = $3 AND revision = $4 \
                 RETURNING session_id, epoch, revision",
                sessions = self.inner.t("sessions"),
                epochs = self.inner.t("session_epochs"),
            );
            let row = crate::query(&sql)
                .bind(self.scope_id)
                .bind(key.as_str())
                .bind(signed(expected.epoch))
                .bind(signed(expected.offset))
                .bind(signed(session.messages().len() as u64))
                .bind(columns.pointer)
                .bind(columns.created_at)
                .bind(columns.updated_at)
                .bind(&columns.metadata)
                .bind(&columns.provider_state)
                .bind(&columns.title)
                .bind(&rows.user_previews)
                .bind(&rows.other_previews)
                .bind(PREVIEW_SCAN_RECORDS as i64)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db("rewrite a session"))?;
            let Some(row) = row else {
                return Ok(None);
            };
            let id: i64 = row.get(0);
            let revision = revision_of(row.get(1), row.get(2));
            self.replace_messages(tx, id, &rows).await?;
            Ok(Some(revision))
        }))
        .await?;
        match written {
            Some(revision) => Ok(revision),
            None => {
                // Nothing written: the session moved on (or went).
                let found = self.found(key).await?;
                SessionError::check_revision(key, Some(expected), found)?;
                Err(SessionError::backend(
                    "the rewrite was refused for no reason the store can tell",
                ))
            }
        }
        }).await
    }

    async fn list(&self) -> Result<Vec<SessionInfo>, SessionError> {
        self.inner
            .deadline("list", async {
                let sql = format!(
                    "SELECT session_key, created_at, updated_at, next_seq, title, \
               COALESCE(preview_user, preview_other, '') FROM {} WHERE scope_id = $1",
                    self.inner.t("sessions")
                );
                let rows = crate::query(&sql)
                    .bind(self.scope_id)
                    .fetch_all(&self.inner.pool())
                    .await
                    .map_err(db("list the sessions"))?;
                let mut infos = Vec::with_capacity(rows.len());
                for row in rows {
                    let Ok(key) = SessionKey::new(row.get::<&str, _>(0)) else {
                        continue;
                    };
                    infos.push(SessionInfo {
                        key,
                        created_at: row.get(1),
                        updated_at: row.get(2),
                        message_count: count(row.get(3)),
                        title: row.get::<Option<String>, _>(4).map(decode),
                        preview: decode(row.get(5)),
                    });
                }
                sort_listing(&mut infos);
                Ok(infos)
            })
            .await
    }

    async fn delete(&self, key: &SessionKey) -> Result<bool, SessionError> {
        self.inner
            .deadline("delete", async {
                let deleted = crate::query(&format!(
                    "DELETE FROM {} WHERE scope_id = $1 AND session_key = $2",
                    self.inner.t("sessions")
                ))
                .bind(self.scope_id)
                .bind(key.as_str())
                .execute(&self.inner.pool())
                .await
                .map_err(db("delete a session"))?;
                Ok(deleted.rows_affected() > 0)
            })
            .await
    }

    async fn open_for_replay(&self, key: &SessionKey) -> Result<Option<ReplayView>, SessionError> {
        self.inner
            .deadline("open_for_replay", async {
                let sql = format!(
                    "SELECT {columns}, ( \
               SELECT max(m.seq) FROM {messages} m WHERE m.session_id = s.session_id \
                 AND m.role = 'user' AND m.seq <= LEAST(s.pointer, GREATEST(s.next_seq - $3, 0))) \
             FROM {sessions} s WHERE s.scope_id = $1 AND s.session_key = $2",
                    columns = SESSION_COLUMNS
                        .split(", ")
                        .map(|c| format!("s.{c}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    messages = self.inner.t("messages"),
                    sessions = self.inner.t("sessions"),
                );
                loop {
                    let Some(row) = crate::query(&sql)
                        .bind(self.scope_id)
                        .bind(key.as_str())
                        .bind(MIN_REPLAY_MESSAGES as i64)
                        .fetch_optional(&self.inner.pool())
                        .await
                        .map_err(db("open a session for replay"))?
                    else {
                        return Ok(None);
                    };
                    let user: Option<i64> = row.get(9);
                    let mut session = session_row(&row);
                    let tail_start = user.map_or(0, |u| (u - 1).max(0));
                    let Some(tail) = self
                        .messages(
                            session.id,
                            session.revision,
                            tail_start,
                            session.next_seq,
                            &mut session.repairs,
                        )
                        .await?
                    else {
                        continue;
                    };
                    let message_count = count(session.next_seq);
                    if session.meta.last_consolidated > message_count {
                        session.meta.last_consolidated = 0;
                    }
                    return Ok(Some(ReplayView {
                        key: key.clone(),
                        meta: session.meta,
                        message_count,
                        tail_start: count(tail_start),
                        tail,
                        revision: session.revision,
                    }));
                }
            })
            .await
    }

    async fn flush(&self, key: &SessionKey, expected: Revision) -> Result<Revision, SessionError> {
        self.inner
            .deadline("flush", async {
                if self.inner.durability == crate::Durability::TurnEnd {
                    // A write committed synchronously: the write-ahead log is flushed up to its
                    // commit, so every append before it (committed without waiting) is durable
                    // too. It changes nothing (the revision stays), and checks the revision.
                    let sql = format!(
                        "UPDATE {} SET revision = revision \
                 WHERE scope_id = $1 AND session_key = $2 AND epoch = $3 AND revision = $4",
                        self.inner.t("sessions")
                    );
                    let done = crate::query(&sql)
                        .bind(self.scope_id)
                        .bind(key.as_str())
                        .bind(signed(expected.epoch))
                        .bind(signed(expected.offset))
                        .execute(&self.inner.pool())
                        .await
                        .map_err(db("make a session durable"))?;
                    if done.rows_affected() == 1 {
                        return Ok(expected);
                    }
                }
                // Appends were durable when they returned (or need not be); a stale caller still
                // learns it is stale.
                let found = self.found(key).await?;
                SessionError::check_revision(key, Some(expected), found)?;
                Ok(expected)
            })
            .await
    }

    async fn try_lock_turn(&self, key: &SessionKey) -> Result<Option<TurnLock>, SessionError> {
        self.inner
            .deadline("try_lock_turn", async { self.lock_turn(key).await })
            .await
    }

    async fn current_revision(&self, key: &SessionKey) -> Result<Option<Revision>, SessionError> {
        self.inner
            .deadline("current_revision", async {
                let sql = format!(
                    "SELECT epoch, revision FROM {} WHERE scope_id = $1 AND session_key = $2",
                    self.inner.t("sessions")
                );
                let row = crate::query(&sql)
                    .bind(self.scope_id)
                    .bind(key.as_str())
                    .fetch_optional(&self.inner.pool())
                    .await
                    .map_err(db("read a session's revision"))?;
                Ok(row.map(|row| revision_of(row.get(0), row.get(1))))
            })
            .await
    }

    fn capabilities(&self) -> SessionCapabilities {
        SessionCapabilities {
            shared_storage: true,
            partial_replay: true,
        }
    }
}

impl PgScope {
    /// Why an append wrote nothing: a stale revision, or a pointer out of bounds.
    async fn refused_append(
        &self,
        key: &SessionKey,
        expected: Revision,
        append: &Append<'_>,
    ) -> SessionError {
        let current = match self.session_row(key).await {
            Ok(current) => current,
            Err(e) => return e,
        };
        if let Err(stale) =
            SessionError::check_revision(key, Some(expected), current.as_ref().map(|r| r.revision))
        {
            return stale;
        }
        if let (Some(current), Some(meta)) = (current, append.meta)
            && let Err(out_of_bounds) = SessionError::check_append_pointer(
                key,
                Some(current.meta.last_consolidated),
                meta.last_consolidated,
                count(current.next_seq) + append.messages.len(),
            )
        {
            return out_of_bounds;
        }
        SessionError::backend("the append was refused for no reason the store can tell")
    }

    /// A rewritten session's messages in place of the old ones.
    async fn replace_messages(
        &self,
        tx: &mut sqlx::PgConnection,
        id: i64,
        rows: &Rows,
    ) -> Result<(), SessionError> {
        crate::query(&format!(
            "DELETE FROM {} WHERE session_id = $1",
            self.inner.t("messages")
        ))
        .bind(id)
        .execute(&mut *tx)
        .await
        .map_err(db("rewrite a session's messages"))?;
        crate::query(&format!(
            "INSERT INTO {} (session_id, seq, role, body) \
             SELECT $1, x.i - 1, x.role, x.body FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS x(role, body, i)",
            self.inner.t("messages")
        ))
        .bind(id)
        .bind(&rows.roles)
        .bind(&rows.bodies)
        .execute(tx)
        .await
        .map_err(db("rewrite a session's messages"))?;
        Ok(())
    }
}
