//! Documents and skills on PostgreSQL: one row per file, written compare-and-set on its
//! version in one statement each. The version is the text's hash, as the file and
//! in-memory backends make it ([`DocVersion::of_bytes`]): a document deleted and created
//! again with other text never takes an old version back, so a writer holding the old one
//! is refused (a counter would start again at 1 and let it through).

use async_trait::async_trait;
use nanobot_memory_store::{
    AuxFile, DocVersion, Document, DocumentCapabilities, DocumentText, DocumentsStamp, Expected,
    MemoryDocuments, MemoryError, SkillSet, SkillText, document_conflict, skill_path,
    validate_skill_name,
};
use sqlx::{PgConnection, Row};

use crate::PgScope;
use crate::error::memory as db;
use crate::journal::{decode, encode};

/// The version as its column holds it (the 64 bits reinterpreted).
fn version(value: i64) -> DocVersion {
    DocVersion(u64::from_be_bytes(value.to_be_bytes()))
}

/// The column value of `version`.
fn column(version: DocVersion) -> i64 {
    i64::from_be_bytes(version.0.to_be_bytes())
}

fn text(content: String, version_value: i64) -> DocumentText {
    DocumentText {
        text: decode(content),
        version: version(version_value),
        decoded_lossily: false,
    }
}

impl PgScope {
    /// The document at `path`, through `conn`.
    pub(crate) async fn read_path(
        &self,
        conn: &mut PgConnection,
        path: &str,
    ) -> Result<Option<DocumentText>, MemoryError> {
        let row = crate::query(&format!(
            "SELECT content, version FROM {} WHERE scope_id = $1 AND path = $2",
            self.inner.t("documents")
        ))
        .bind(self.scope_id)
        .bind(path)
        .fetch_optional(conn)
        .await
        .map_err(db("read a document"))?;
        Ok(row.map(|row| text(row.get(0), row.get(1))))
    }

    /// Writes `content` at `path` through `conn` if the document is as `expected`.
    pub(crate) async fn write_path(
        &self,
        conn: &mut PgConnection,
        path: &str,
        content: &str,
        expected: Expected,
    ) -> Result<DocVersion, MemoryError> {
        let documents = self.inner.t("documents");
        let sql = match expected {
            Expected::Absent => format!(
                "INSERT INTO {documents} (scope_id, path, version, content) VALUES ($1, $2, $4, $3) \
                 ON CONFLICT (scope_id, path) DO NOTHING RETURNING version"
            ),
            Expected::Version(_) => format!(
                "UPDATE {documents} SET content = $3, version = $4, updated_at = now() \
                 WHERE scope_id = $1 AND path = $2 AND version = $5 RETURNING version"
            ),
            Expected::Any => format!(
                "INSERT INTO {documents} AS d (scope_id, path, version, content) VALUES ($1, $2, $4, $3) \
                 ON CONFLICT (scope_id, path) DO UPDATE SET content = EXCLUDED.content, \
                   version = EXCLUDED.version, updated_at = now() RETURNING version"
            ),
        };
        let mut query = crate::query(&sql)
            .bind(self.scope_id)
            .bind(path)
            .bind(encode(content))
            .bind(column(DocVersion::of_bytes(content.as_bytes())));
        if let Expected::Version(v) = expected {
            query = query.bind(column(v));
        }
        let row = query
            .fetch_optional(&mut *conn)
            .await
            .map_err(db("write a document"))?;
        match row {
            Some(row) => Ok(version(row.get(0))),
            None => {
                let found = self.read_path(conn, path).await?.map(|d| d.version);
                Err(document_conflict(path, expected, found))
            }
        }
    }

    /// Deletes the document at `path` through `conn` if it is as `expected`; whether it
    /// existed.
    pub(crate) async fn delete_path(
        &self,
        conn: &mut PgConnection,
        path: &str,
        expected: Expected,
    ) -> Result<bool, MemoryError> {
        let version = match expected {
            Expected::Absent => {
                let found = self.read_path(conn, path).await?.map(|d| d.version);
                return match found {
                    None => Ok(false),
                    Some(_) => Err(document_conflict(path, expected, found)),
                };
            }
            Expected::Version(v) => Some(column(v)),
            Expected::Any => None,
        };
        let deleted = crate::query(&format!(
            "DELETE FROM {} WHERE scope_id = $1 AND path = $2 AND ($3::bigint IS NULL OR version = $3) RETURNING 1",
            self.inner.t("documents")
        ))
        .bind(self.scope_id)
        .bind(path)
        .bind(version)
        .fetch_optional(&mut *conn)
        .await
        .map_err(db("delete a document"))?;
        if deleted.is_some() {
            return Ok(true);
        }
        if expected == Expected::Any {
            return Ok(false);
        }
        let found = self.read_path(conn, path).await?.map(|d| d.version);
        Err(document_conflict(path, expected, found))
    }

    async fn conn(&self) -> Result<sqlx::pool::PoolConnection<sqlx::Postgres>, MemoryError> {
        self.inner
            .pool()
            .acquire()
            .await
            .map_err(db("reach the database"))
    }
}

#[async_trait]
impl MemoryDocuments for PgScope {
    async fn read(&self, document: Document) -> Result<Option<DocumentText>, MemoryError> {
        self.inner
            .deadline("read", async {
                self.read_path(&mut *self.conn().await?, document.path())
                    .await
            })
            .await
    }

    async fn write(
        &self,
        document: Document,
        text: &str,
        expected: Expected,
    ) -> Result<DocVersion, MemoryError> {
        self.inner
            .deadline("write", async {
                self.write_path(&mut *self.conn().await?, document.path(), text, expected)
                    .await
            })
            .await
    }

    async fn skills(&self) -> Result<SkillSet, MemoryError> {
        self.inner.deadline("skills", async {
        let rows = crate::query(&format!(
            "SELECT path, content, version FROM {} WHERE scope_id = $1 AND path LIKE 'skills/%/SKILL.md'",
            self.inner.t("documents")
        ))
        .bind(self.scope_id)
        .fetch_all(&self.inner.pool())
        .await
        .map_err(db("list the skills"))?;
        let mut set = SkillSet::default();
        for row in rows {
            let path: String = row.get(0);
            let Some(name) = path
                .strip_prefix("skills/")
                .and_then(|p| p.strip_suffix("/SKILL.md"))
                .filter(|name| validate_skill_name(name).is_ok())
            else {
                set.skipped.push(format!(
                    "skipped the document {path:?}: not a skill's SKILL.md"
                ));
                continue;
            };
            set.skills.push(SkillText {
                name: name.to_owned(),
                document: text(row.get(1), row.get(2)),
            });
        }
        set.skills.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(set)
        }).await
    }

    async fn read_skill(&self, name: &str) -> Result<Option<DocumentText>, MemoryError> {
        self.inner
            .deadline("read_skill", async {
                validate_skill_name(name)?;
                self.read_path(&mut *self.conn().await?, &skill_path(name))
                    .await
            })
            .await
    }

    async fn write_skill(
        &self,
        name: &str,
        text: &str,
        expected: Expected,
    ) -> Result<DocVersion, MemoryError> {
        self.inner
            .deadline("write_skill", async {
                validate_skill_name(name)?;
                self.write_path(&mut *self.conn().await?, &skill_path(name), text, expected)
                    .await
            })
            .await
    }

    async fn delete_skill(&self, name: &str, expected: Expected) -> Result<bool, MemoryError> {
        self.inner
            .deadline("delete_skill", async {
                validate_skill_name(name)?;
                self.delete_path(&mut *self.conn().await?, &skill_path(name), expected)
                    .await
            })
            .await
    }

    async fn read_aux(&self, file: AuxFile) -> Result<Option<String>, MemoryError> {
        self.inner
            .deadline("read_aux", async {
                let row = crate::query(&format!(
                    "SELECT content FROM {} WHERE scope_id = $1 AND name = $2",
                    self.inner.t("aux_files")
                ))
                .bind(self.scope_id)
                .bind(file.path())
                .fetch_optional(&self.inner.pool())
                .await
                .map_err(db("read a Dream record"))?;
                Ok(row.map(|row| decode(row.get(0))))
            })
            .await
    }

    async fn write_aux(&self, file: AuxFile, text: &str) -> Result<(), MemoryError> {
        self.inner
            .deadline("write_aux", async {
                crate::query(&format!(
                    "INSERT INTO {} (scope_id, name, content) VALUES ($1, $2, $3) \
             ON CONFLICT (scope_id, name) DO UPDATE SET content = EXCLUDED.content",
                    self.inner.t("aux_files")
                ))
                .bind(self.scope_id)
                .bind(file.path())
                .bind(encode(text))
                .execute(&self.inner.pool())
                .await
                .map_err(db("write a Dream record"))?;
                Ok(())
            })
            .await
    }

    async fn stamp(&self) -> Result<Option<DocumentsStamp>, MemoryError> {
        self.inner.deadline("stamp", async {
        // The paths and versions (text hashes) of every document and skill, hashed: one
        // small read instead of reading them all.
        let digest: String = crate::query_scalar(&format!(
            "SELECT md5(coalesce(string_agg(path || ' ' || version::text, E'\\n' ORDER BY path), '')) \
             FROM {} WHERE scope_id = $1",
            self.inner.t("documents")
        ))
        .bind(self.scope_id)
        .fetch_one(&self.inner.pool())
        .await
        .map_err(db("read the documents' stamp"))?;
        let stamp = digest
            .get(..16)
            .and_then(|hex| u64::from_str_radix(hex, 16).ok())
            .ok_or_else(|| MemoryError::backend(format!("an unreadable stamp {digest:?}")))?;
        Ok(Some(DocumentsStamp(stamp)))
        }).await
    }

    fn capabilities(&self) -> DocumentCapabilities {
        DocumentCapabilities {
            shared_storage: true,
        }
    }
}
