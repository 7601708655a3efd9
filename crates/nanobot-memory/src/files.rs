//! Every scope's memory on files: the agent's scope is the workspace as nanobot-ai lays it
//! out, byte for byte; any other scope is a nanobot-shaped directory under `scopes/`
//! (`nanobot_memory_scope::ScopeDirs` decides where). Versions are a git repository per scope, and
//! search reads a derived SQLite index beside each scope's files, opened on first search.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use nanobot_llm_port::{Clock, TokenCounter};
use nanobot_memory_scope::{FileLinks, ScopeDirs, ScopeKey, Subject};
use nanobot_memory_store::{
    FileDocuments, FileJournal, FileLease, GitVersions, JournalDurability, MemoryDocuments,
    MemoryError, MemoryVersions, ScopedDocuments,
};
use nanobot_prompt_inputs::{PromptFiles, PromptLoader};
use nanobot_session_store::{
    Durability, FileSessionStore, FileStoreOptions, SessionManager, SessionStore,
};
use nanobot_turn::{MemoryBackend, ScopeStores, TurnError};

use crate::{AssemblyError, OffWorker, ScopeSummary};

/// Where the agent scope's sessions live in the workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(rename_all = "lowercase")
)]
#[non_exhaustive]
pub enum Layout {
    /// nanobot-ai's own layout when the workspace is one nanobot-ai made (it holds
    /// `.nanobot/workspace-id`), ours otherwise.
    #[default]
    Auto,
    /// `<workspace>/sessions/`, as nanobot-ai 0.3 lays out a workspace of its own.
    Workspace,
    /// nanobot-ai's namespace layout under the sessions root.
    Nanobot,
}

/// How the file backend keeps a workspace.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FileOptions {
    /// When appended messages reach the disk (default: at the end of each turn).
    pub durability: Durability,
    /// Where the agent scope's sessions live.
    pub layout: Layout,
    /// nanobot-ai's sessions root, for [`Layout::Nanobot`] (default `~/.nanobot/sessions`).
    pub sessions_root: PathBuf,
}

impl Default for FileOptions {
    fn default() -> Self {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default();
        FileOptions {
            durability: Durability::TurnEnd,
            layout: Layout::Auto,
            sessions_root: home.join(".nanobot/sessions"),
        }
    }
}

impl FileOptions {
    /// The same options with `durability`.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// The same options with `layout`.
    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    /// The same options with nanobot-ai's sessions root at `root`.
    pub fn sessions_root(mut self, root: impl Into<PathBuf>) -> Self {
        self.sessions_root = root.into();
        self
    }
}

/// One scope's files, each store opened on its own (no scoping, no wrappers).
#[derive(Debug)]
#[non_exhaustive]
pub struct ScopeFiles {
    /// The scope's directory (the workspace, for the agent's scope).
    pub root: PathBuf,
    /// Its sessions (the agent's in nanobot-ai's namespace when the layout says so).
    pub sessions: FileSessionStore,
    /// Its history journal.
    pub journal: FileJournal,
    /// Its own documents (not the agent's shared ones).
    pub documents: FileDocuments,
    /// Its versions repository, or why there is none.
    pub versions: Result<GitVersions, Arc<MemoryError>>,
}

/// Every scope's memory in one workspace directory.
pub struct FileBackend {
    workspace: PathBuf,
    dirs: ScopeDirs,
    store_options: FileStoreOptions,
    nanobot_layout: bool,
    sessions_root: PathBuf,
    clock: Arc<dyn Clock>,
    counter: Arc<dyn TokenCounter>,
    agent_documents: Arc<FileDocuments>,
    agent_files: Arc<PromptLoader>,
}

impl std::fmt::Debug for FileBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileBackend")
            .field("workspace", &self.workspace)
            .finish_non_exhaustive()
    }
}

impl FileBackend {
    /// The scopes of `workspace` (which must exist), on files.
    pub fn open(
        workspace: &Path,
        options: &FileOptions,
        clock: Arc<dyn Clock>,
        counter: Arc<dyn TokenCounter>,
    ) -> Result<FileBackend, AssemblyError> {
        // An existing nanobot-ai workspace keeps its sessions where nanobot-ai put them.
        let nanobot_layout = match options.layout {
            Layout::Nanobot => true,
            Layout::Auto => workspace.join(".nanobot/workspace-id").is_file(),
            Layout::Workspace => false,
        };
        let agent_documents = Arc::new(FileDocuments::open(workspace)?);
        Ok(FileBackend {
            dirs: ScopeDirs::new(workspace),
            store_options: FileStoreOptions::default()
                .durability(options.durability)
                .clock(clock.clone()),
            nanobot_layout,
            sessions_root: options.sessions_root.clone(),
            clock,
            counter,
            agent_files: Arc::new(
                PromptLoader::new(agent_documents.clone()).with_agent_dir(workspace)?,
            ),
            agent_documents,
            workspace: workspace.to_owned(),
        })
    }

    /// The workspace.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// The scope directories (for listing and erasing scopes).
    pub fn dirs(&self) -> &ScopeDirs {
        &self.dirs
    }

    /// The operator's identity links, kept in the workspace.
    pub fn links(&self) -> FileLinks {
        FileLinks::new(&self.workspace)
    }

    fn open_agent_sessions(&self) -> Result<FileSessionStore, AssemblyError> {
        Ok(if self.nanobot_layout {
            FileSessionStore::open_nanobot(
                &self.workspace,
                &self.sessions_root,
                self.store_options.clone(),
            )?
        } else {
            FileSessionStore::open_workspace(&self.workspace, self.store_options.clone())?
        })
    }

    /// The files of `scope` as this backend lays them out, each store opened on its own
    /// (the one place that decides where a scope's sessions, journal, documents and
    /// versions are: the backend, the workspace transfer and the listing all ask it).
    pub fn scope_files(&self, scope: &ScopeKey) -> Result<ScopeFiles, AssemblyError> {
        let root = self.dirs.open(scope)?;
        Ok(ScopeFiles {
            sessions: self.scope_sessions(&scope.subject, &root)?,
            journal: FileJournal::open_with(
                &root,
                self.clock.clone(),
                JournalDurability::default(),
            )?,
            documents: FileDocuments::open(&root)?,
            versions: GitVersions::open(&root).map_err(Arc::new),
            root,
        })
    }

    /// The session store of a scope whose directory is `root` (the agent's where the
    /// layout puts them).
    fn scope_sessions(
        &self,
        subject: &Subject,
        root: &Path,
    ) -> Result<FileSessionStore, AssemblyError> {
        Ok(if subject.is_agent() {
            self.open_agent_sessions()?
        } else {
            FileSessionStore::open_workspace(root, self.store_options.clone())?
        })
    }

    /// What every scope directory holds (the agent's scope, the workspace itself, is not
    /// listed): sessions counted by their store, entries by the journal's cursors. Nothing
    /// is created: a scope without sessions counts none.
    pub async fn scope_summaries(&self) -> Result<Vec<ScopeSummary>, AssemblyError> {
        let mut summaries = Vec::new();
        for dir in self.dirs.list()? {
            let store = if dir.subject.is_agent() {
                Some(self.open_agent_sessions()?)
            } else {
                FileSessionStore::open_workspace_if_present(&dir.path, self.store_options.clone())?
            };
            let sessions = match store {
                Some(store) => store.list().await?,
                None => Vec::new(),
            };
            let (latest, dream) = FileJournal::peek_cursors(&dir.path)?;
            let location = dir.path.display().to_string();
            summaries.push(ScopeSummary::counted(
                dir.subject,
                location,
                sessions.len(),
                latest.unwrap_or(0),
                dream,
            ));
        }
        Ok(summaries)
    }

    fn open_scope(&self, scope: &ScopeKey) -> Result<ScopeStores, AssemblyError> {
        let files = self.scope_files(scope)?;
        let root = files.root;
        let agent = scope.subject.is_agent();
        let store = files.sessions;
        // Sessions and the journal are written by every turn and archive: their blocking IO
        // runs with the worker handed off.
        let sessions = Arc::new(
            SessionManager::new(
                Arc::new(OffWorker::new(store)),
                self.clock.clone(),
                self.counter.clone(),
            )
            .with_recorded_token_counts(true),
        );
        let journal = Arc::new(OffWorker::new(files.journal));
        let (documents, prompt_files) = self.documents(agent, files.documents)?;
        let versions = files
            .versions
            .map(|g| Arc::new(g) as Arc<dyn MemoryVersions>);
        let stores = ScopeStores::stepwise(
            sessions,
            journal,
            documents,
            prompt_files,
            versions,
            Arc::new(FileLease::open(&root)?),
        );
        #[cfg(feature = "search")]
        let stores = stores.with_search_index(Arc::new(lazy_index(root)));
        Ok(stores)
    }

    /// A user's or a chat's documents: its own private files, the agent's shared ones
    /// read-only; its prompts read both through the port.
    fn documents(
        &self,
        agent: bool,
        own: FileDocuments,
    ) -> Result<crate::DocumentsAndPrompts, AssemblyError> {
        if agent {
            return Ok((self.agent_documents.clone(), self.agent_files.clone()));
        }
        let documents: Arc<dyn MemoryDocuments> = Arc::new(ScopedDocuments::new(
            Arc::new(own),
            self.agent_documents.clone(),
        ));
        let files = PromptLoader::new(documents.clone()).with_agent_dir(&self.workspace)?;
        Ok((documents, Arc::new(files)))
    }
}

/// The search index: a derived SQLite file in the scope directory, opened when the scope's
/// memory is first searched (nanobot-ai never reads it).
#[cfg(feature = "search")]
fn lazy_index(dir: PathBuf) -> nanobot_memory_index::LazyIndex {
    nanobot_memory_index::LazyIndex::new(Box::new(move || {
        let index = nanobot_index_sqlite::SqliteIndex::open_in(&dir)?;
        // Derived data: a damaged file was set aside and is fed again by the next indexing
        // pass; the user hears of it, nothing fails.
        for repair in index.repairs() {
            tracing::warn!(
                path = %repair.path.display(),
                "the search index was rebuilt: {}",
                repair.reason
            );
        }
        Ok(Arc::new(index) as Arc<dyn nanobot_memory_index::SearchIndex>)
    }))
}

#[async_trait]
impl MemoryBackend for FileBackend {
    async fn open(&self, scope: &ScopeKey) -> Result<ScopeStores, TurnError> {
        self.open_scope(scope)
            .map_err(AssemblyError::into_turn_error)
    }

    async fn scopes_with_dream_work(&self) -> Result<Vec<ScopeKey>, TurnError> {
        let mut due = Vec::new();
        if FileJournal::may_have_unread_entries(&self.workspace)? {
            due.push(ScopeKey::local(Subject::Agent));
        }
        for dir in self.dirs.list()? {
            if FileJournal::may_have_unread_entries(&dir.path)? {
                due.push(ScopeKey::local(dir.subject));
            }
        }
        Ok(due)
    }

    fn shared_prompt_files(&self) -> Arc<dyn PromptFiles> {
        self.agent_files.clone()
    }
}
