//! Every scope's memory copied between a workspace on files (nanobot-ai's or nanobot-rs's)
//! and a PostgreSQL store, through the ports (`nanobot import` and `nanobot export`).
//!
//! Both are idempotent and resumable: what the target already holds is skipped (a session
//! whose messages are a prefix of the source's gets the rest; journal entries past the
//! target's latest cursor are added with their own cursors; versions past the target's are
//! replayed in order), and nothing the target holds is ever overwritten: a session,
//! document or version history that differs is reported and left as it is.

use std::path::Path;
use std::sync::Arc;

use nanobot_llm_port::{Cl100kBase, SystemClock};
use nanobot_memory_scope::{FileLinks, LinkTable, ScopeKey, Subject};
use nanobot_memory_store::{
    AuxFile, Document, Expected, JournalImport, MemoryDocuments, MemoryVersions,
};
use nanobot_session_store::{
    Append, FileSessionStore, FileStoreOptions, SessionStore, StoredMessage,
};
use nanobot_store_postgres::PgStore;

use crate::{AssemblyError, FileBackend, FileOptions};

/// How one copy went.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Transfer {
    /// Scopes visited.
    pub scopes: usize,
    /// Sessions created or brought up to date.
    pub sessions: usize,
    /// Journal entries added.
    pub entries: usize,
    /// Documents, skills and Dream records written.
    pub documents: usize,
    /// Versions replayed.
    pub versions: usize,
    /// Links added.
    pub links: usize,
    /// What differed in the target and was left as it was, one sentence each.
    pub kept: Vec<String>,
}

impl Transfer {
    /// One line for people.
    pub fn summary(&self) -> String {
        let mut text = format!(
            "{} scope(s): {} session(s), {} journal entries, {} document(s), {} version(s), {} link(s) copied",
            self.scopes, self.sessions, self.entries, self.documents, self.versions, self.links
        );
        if !self.kept.is_empty() {
            text.push_str(&format!(
                "; {} item(s) differ in the target and were left as they are:",
                self.kept.len()
            ));
            for kept in &self.kept {
                text.push_str("\n  - ");
                text.push_str(kept);
            }
        }
        text
    }
}

/// One scope's stores, on either side.
struct Side {
    sessions: Arc<dyn SessionStore>,
    journal: Arc<dyn JournalImport>,
    documents: Arc<dyn MemoryDocuments>,
    versions: Option<Arc<dyn MemoryVersions>>,
}

/// The scopes of a workspace on files, opened as the file backend lays them out: the
/// agent's (the workspace itself, its sessions in nanobot-ai's namespace when it has a
/// workspace id) and every directory under `scopes/`.
struct Workspace {
    backend: FileBackend,
}

impl Workspace {
    fn open(root: &Path, sessions_root: &Path) -> Result<Workspace, AssemblyError> {
        let options = FileOptions::default().sessions_root(sessions_root);
        let backend =
            FileBackend::open(root, &options, Arc::new(SystemClock), Arc::new(Cl100kBase))?;
        Ok(Workspace { backend })
    }

    fn subjects(&self) -> Result<Vec<Subject>, AssemblyError> {
        let mut subjects = vec![Subject::Agent];
        subjects.extend(self.backend.dirs().list()?.into_iter().map(|d| d.subject));
        Ok(subjects)
    }

    fn side(&self, subject: &Subject) -> Result<Side, AssemblyError> {
        let files = self
            .backend
            .scope_files(&ScopeKey::local(subject.clone()))?;
        Ok(Side {
            sessions: Arc::new(files.sessions),
            journal: Arc::new(files.journal),
            documents: Arc::new(files.documents),
            versions: files
                .versions
                .ok()
                .map(|g| Arc::new(g) as Arc<dyn MemoryVersions>),
        })
    }
}

async fn pg_side(store: &PgStore, subject: &Subject) -> Result<Side, AssemblyError> {
    let scope = Arc::new(store.scope(&ScopeKey::local(subject.clone())).await?);
    Ok(Side {
        sessions: scope.clone(),
        journal: scope.clone(),
        documents: scope.clone(),
        versions: Some(scope),
    })
}

/// The JSON of each message, for comparing two copies of a session.
fn values(messages: &[StoredMessage]) -> Vec<serde_json::Value> {
    messages
        .iter()
        .map(|m| serde_json::Value::Object(m.fields().clone()))
        .collect()
}

async fn copy_sessions(
    label: &str,
    from: &dyn SessionStore,
    to: &dyn SessionStore,
    done: &mut Transfer,
    progress: &dyn Fn(&str),
) -> Result<(), AssemblyError> {
    let listed = from.list().await?;
    for (n, info) in listed.iter().enumerate() {
        let Some(source) = from.load(&info.key).await? else {
            continue;
        };
        let source = source.session;
        match to.load(&info.key).await? {
            None => {
                to.append(
                    &info.key,
                    None,
                    Append {
                        messages: source.messages(),
                        meta: Some(source.meta()),
                    },
                )
                .await?;
                done.sessions += 1;
            }
            Some(target) => {
                let (have, want) = (values(target.session.messages()), values(source.messages()));
                if have == want && target.session.meta() == source.meta() {
                    // Already copied.
                } else if want.starts_with(&have) {
                    to.append(
                        &info.key,
                        Some(target.revision),
                        Append {
                            messages: &source.messages()[have.len()..],
                            meta: Some(source.meta()),
                        },
                    )
                    .await?;
                    done.sessions += 1;
                } else {
                    done.kept.push(format!(
                        "{label}: session {} differs in the target ({} messages there, {} here)",
                        info.key,
                        have.len(),
                        want.len()
                    ));
                }
            }
        }
        if (n + 1) % 50 == 0 || n + 1 == listed.len() {
            progress(&format!("{label}: sessions {}/{}", n + 1, listed.len()));
        }
    }
    Ok(())
}

async fn copy_documents(
    label: &str,
    from: &dyn MemoryDocuments,
    to: &dyn MemoryDocuments,
    done: &mut Transfer,
) -> Result<(), AssemblyError> {
    for document in Document::ALL {
        let Some(source) = from.read(document).await? else {
            continue;
        };
        if source.decoded_lossily {
            done.kept.push(format!(
                "{label}: {} is not UTF-8 and was not copied",
                document.path()
            ));
            continue;
        }
        match to.read(document).await? {
            None => {
                to.write(document, &source.text, Expected::Absent).await?;
                done.documents += 1;
            }
            Some(target) if target.text == source.text => {}
            Some(_) => done.kept.push(format!(
                "{label}: {} differs in the target",
                document.path()
            )),
        }
    }
    for skill in from.skills().await?.skills {
        match to.read_skill(&skill.name).await? {
            None => {
                to.write_skill(&skill.name, &skill.document.text, Expected::Absent)
                    .await?;
                done.documents += 1;
            }
            Some(target) if target.text == skill.document.text => {}
            Some(_) => done.kept.push(format!(
                "{label}: skill {} differs in the target",
                skill.name
            )),
        }
    }
    for aux in [
        AuxFile::DreamPrompt,
        AuxFile::DreamState,
        AuxFile::DreamPending,
        AuxFile::DreamProposals,
        AuxFile::DreamReview,
    ] {
        let Some(source) = from.read_aux(aux).await? else {
            continue;
        };
        match to.read_aux(aux).await? {
            None => {
                to.write_aux(aux, &source).await?;
                done.documents += 1;
            }
            Some(target) if target == source => {}
            Some(_) => done
                .kept
                .push(format!("{label}: {} differs in the target", aux.path())),
        }
    }
    Ok(())
}

async fn copy_versions(
    label: &str,
    from: &dyn MemoryVersions,
    to: &dyn MemoryVersions,
    done: &mut Transfer,
) -> Result<(), AssemblyError> {
    let mut source = from.log(usize::MAX).await?;
    source.reverse();
    let mut target = to.log(usize::MAX).await?;
    target.reverse();
    for (have, want) in target.iter().zip(&source) {
        let same = have.message == want.message
            && have.time == want.time
            && to.files_at(&have.id).await? == from.files_at(&want.id).await?;
        if !same {
            done.kept.push(format!(
                "{label}: the version history differs in the target ({} versions there)",
                target.len()
            ));
            return Ok(());
        }
    }
    for version in source.iter().skip(target.len()) {
        let files = from.files_at(&version.id).await?;
        if to
            .commit(&version.message, &files, version.time)
            .await?
            .is_some()
        {
            done.versions += 1;
        }
    }
    Ok(())
}

async fn copy_links(
    from: &dyn LinkTable,
    to: &dyn LinkTable,
    done: &mut Transfer,
) -> Result<(), AssemblyError> {
    let source = from.records().await?;
    let target = to.records().await?;
    if !source.starts_with(&target) {
        done.kept.push(format!(
            "the identity links differ in the target ({} records there)",
            target.len()
        ));
        return Ok(());
    }
    for record in &source[target.len()..] {
        to.append(record.clone()).await?;
        done.links += 1;
    }
    Ok(())
}

async fn copy_scope(
    label: &str,
    from: &Side,
    to: &Side,
    done: &mut Transfer,
    progress: &dyn Fn(&str),
) -> Result<(), AssemblyError> {
    copy_sessions(
        label,
        from.sessions.as_ref(),
        to.sessions.as_ref(),
        done,
        progress,
    )
    .await?;
    let entries = from.journal.read_since(0, None).await?;
    let latest = from.journal.latest_cursor().await?;
    let dream = from.journal.dream_cursor().await?;
    done.entries += to.journal.import(&entries, latest, dream).await?;
    progress(&format!("{label}: journal {} entries", entries.len()));
    copy_documents(label, from.documents.as_ref(), to.documents.as_ref(), done).await?;
    if let (Some(from), Some(to)) = (&from.versions, &to.versions) {
        copy_versions(label, from.as_ref(), to.as_ref(), done).await?;
    }
    done.scopes += 1;
    Ok(())
}

/// `nanobot import WORKSPACE`: every scope of the workspace on files (its sessions where
/// nanobot-ai keeps them when it has a workspace id: `<sessions_root>/<id>/`) into `store`.
pub async fn import(
    workspace: &Path,
    sessions_root: &Path,
    store: &PgStore,
    progress: &dyn Fn(&str),
) -> Result<Transfer, AssemblyError> {
    if !workspace.is_dir() {
        return Err(AssemblyError::Io {
            path: workspace.to_owned(),
            what: "is not a workspace directory",
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        });
    }
    let files = Workspace::open(workspace, sessions_root)?;
    if let Ok(id) = std::fs::read_to_string(workspace.join(".nanobot/workspace-id")) {
        let id = id.trim();
        match store.meta("workspace_id").await? {
            None => store.set_meta("workspace_id", id).await?,
            Some(kept) if kept == id => {}
            Some(kept) => {
                return Err(AssemblyError::Refused {
                    why: format!(
                        "the store holds workspace {kept}, not {id}: import into another schema (storage.schema)"
                    ),
                });
            }
        }
    }
    let mut done = Transfer::default();
    for subject in files.subjects()? {
        let label = subject.to_string();
        let from = files.side(&subject)?;
        let to = pg_side(store, &subject).await?;
        copy_scope(&label, &from, &to, &mut done, progress).await?;
    }
    copy_links(&FileLinks::new(workspace), &store.links(), &mut done).await?;
    // Statistics for what was just written, so the first turns read tails, not sessions.
    store.analyze().await?;
    Ok(done)
}

/// `nanobot export DIR`: every scope of `store` into a workspace on files that nanobot-ai
/// 0.3.5 opens: the agent's sessions in nanobot-ai's namespace under `sessions_root`
/// (the imported workspace id kept), its memory files and journal where nanobot-ai keeps
/// them, versions replayed as commits, every other scope under `scopes/`.
pub async fn export(
    dir: &Path,
    sessions_root: &Path,
    store: &PgStore,
    progress: &dyn Fn(&str),
) -> Result<Transfer, AssemblyError> {
    std::fs::create_dir_all(dir).map_err(|e| AssemblyError::io(dir, "cannot be created", e))?;
    let id_file = dir.join(".nanobot/workspace-id");
    if !id_file.is_file()
        && let Some(id) = store.meta("workspace_id").await?
    {
        let nanobot = dir.join(".nanobot");
        std::fs::create_dir_all(&nanobot)
            .map_err(|e| AssemblyError::io(&nanobot, "cannot be created", e))?;
        std::fs::write(&id_file, &id)
            .map_err(|e| AssemblyError::io(&id_file, "cannot be written", e))?;
    }
    // The agent's sessions go to nanobot-ai's namespace: make sure the workspace has an id
    // before the file backend looks for one.
    FileSessionStore::open_nanobot(dir, sessions_root, FileStoreOptions::default())?;
    let files = Workspace::open(dir, sessions_root)?;
    let mut done = Transfer::default();
    let scopes = store.scopes().await?;
    let mut subjects: Vec<Subject> = vec![Subject::Agent];
    subjects.extend(
        scopes
            .into_iter()
            .map(|s| s.key.subject)
            .filter(|s| !s.is_agent()),
    );
    for subject in subjects {
        let label = subject.to_string();
        let from = pg_side(store, &subject).await?;
        let to = files.side(&subject)?;
        copy_scope(&label, &from, &to, &mut done, progress).await?;
        for session in to.sessions.list().await? {
            // Line 1 made current for nanobot-ai's readers.
            if let Some(revision) = to.sessions.current_revision(&session.key).await? {
                to.sessions.flush(&session.key, revision).await?;
            }
        }
    }
    copy_links(&store.links(), &FileLinks::new(dir), &mut done).await?;
    Ok(done)
}
