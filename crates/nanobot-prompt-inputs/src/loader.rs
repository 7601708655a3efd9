//! Loads a prompt's inputs. The memory files (`SOUL.md`, `USER.md`, `memory/MEMORY.md`)
//! and the workspace's skills come through the document port, so whatever backend keeps
//! them (files, a database) is what the prompt shows; `AGENTS.md` (the operator's
//! instructions for a project) and the built-in skills come from directories on this
//! machine. A skill is parsed again only when its version (or, for a built-in one, its size
//! or modification time) changed. When the document port gives a stamp
//! ([`MemoryDocuments::stamp`]), the documents are read again only when it changed: one
//! small read per turn instead of one per document (what a database backend needs).

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use async_trait::async_trait;
use nanobot_memory_store::{
    DocVersion, Document, DocumentText, DocumentsStamp, MemoryDocuments, MemoryError,
};

use crate::skills::{RequirementProbe, SkillFile, SkillSource};
use crate::snapshot::{PromptFiles, WorkspaceSnapshot};

/// What a parsed skill was parsed from: a document version, or a built-in file's stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    Version(DocVersion),
    Stamp {
        len: u64,
        modified: Option<SystemTime>,
    },
}

/// Parsed skills by group and name, with what each was parsed from.
type ParsedSkills = HashMap<(SkillSource, String), (Seen, Arc<SkillFile>)>;

/// What a load took from the document port.
#[derive(Clone)]
struct PortDocuments {
    soul_md: Option<String>,
    user_md: Option<String>,
    memory_md: Option<String>,
    skills: Vec<Arc<SkillFile>>,
    warnings: Vec<String>,
}

/// Loads [`WorkspaceSnapshot`]s of one scope: its documents through the port, plus the
/// agent's `AGENTS.md` (or a project's) and the built-in skills.
///
/// Requirement probes (`PATH`, environment) are answered once per loader and remembered,
/// so loading before every turn costs the document reads and nothing else;
/// [`PromptLoader::forget_probes`] re-probes after the environment changed.
pub struct PromptLoader {
    documents: Arc<dyn MemoryDocuments>,
    agent: Option<PathBuf>,
    project: Option<PathBuf>,
    builtin: Option<PathBuf>,
    probe: CachedProbe,
    skills: Mutex<ParsedSkills>,
    /// The port's documents as last read, under the stamp read before them.
    read: Mutex<Option<(DocumentsStamp, PortDocuments)>>,
}

impl std::fmt::Debug for PromptLoader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromptLoader")
            .field("agent", &self.agent)
            .field("project", &self.project)
            .field("builtin", &self.builtin)
            .finish_non_exhaustive()
    }
}

impl PromptLoader {
    /// A loader of `documents` (a scope's: for a user's or a chat's scope, the agent's
    /// `SOUL.md` and skills come through it read-only), without `AGENTS.md` or built-in
    /// skills until [`PromptLoader::with_agent_dir`] and
    /// [`PromptLoader::with_builtin_skills`] name them.
    pub fn new(documents: Arc<dyn MemoryDocuments>) -> Self {
        PromptLoader {
            documents,
            agent: None,
            project: None,
            builtin: None,
            probe: CachedProbe::new(Arc::new(SystemProbe)),
            skills: Mutex::new(HashMap::new()),
            read: Mutex::new(None),
        }
    }

    /// The agent workspace at `dir` (which must exist): the prompt names it, and its
    /// `AGENTS.md` is read when there is no project.
    pub fn with_agent_dir(mut self, dir: &Path) -> Result<Self, MemoryError> {
        self.agent = Some(resolve(dir)?);
        Ok(self)
    }

    /// Turns work in `project`: its `AGENTS.md` is used, never the agent workspace's. The
    /// same directory as the agent workspace means no separate project.
    pub fn with_project(mut self, project: &Path) -> Result<Self, MemoryError> {
        let project = resolve(project)?;
        self.project = (Some(&project) != self.agent.as_ref()).then_some(project);
        Ok(self)
    }

    /// Skills shipped with the program, listed after the workspace's own.
    pub fn with_builtin_skills(mut self, dir: &Path) -> Result<Self, MemoryError> {
        self.builtin = Some(resolve(dir)?);
        Ok(self)
    }

    /// Answers requirement checks with `probe` instead of the real `PATH` and environment.
    pub fn with_probe(mut self, probe: Arc<dyn RequirementProbe>) -> Self {
        self.probe = CachedProbe::new(probe);
        self
    }

    /// Forgets every probe answer and parsed skill, so the next load checks again.
    pub fn forget_probes(&self) {
        self.probe.clear();
        lock(&self.skills).clear();
        *lock(&self.read) = None;
    }

    /// The scope's prompt inputs as they are now.
    pub async fn load(&self) -> Result<WorkspaceSnapshot, MemoryError> {
        let mut warnings = Vec::new();
        let agents_md = match self.project.as_ref().or(self.agent.as_ref()) {
            Some(root) => read_lossy(&root.join("AGENTS.md"), &mut warnings)?,
            None => None,
        };
        let port = self.port_documents().await?;
        warnings.extend(port.warnings);
        let mut skills = port.skills;
        let mut cache = lock(&self.skills);
        if let Some(builtin) = &self.builtin {
            let shadowed: Vec<String> = skills.iter().map(|s| s.name().to_owned()).collect();
            let mut more = self.load_builtin(builtin, &mut cache, &mut warnings)?;
            more.retain(|s| !shadowed.iter().any(|n| n == s.name()));
            skills.extend(more);
        }
        drop(cache);
        Ok(WorkspaceSnapshot {
            agent_dir: self.agent.as_deref().map(display).unwrap_or_default(),
            project_dir: self.project.as_deref().map(display),
            agents_md,
            soul_md: port.soul_md,
            user_md: port.user_md,
            memory_md: port.memory_md,
            skills,
            builtin_skills_dir: self.builtin.as_deref().map(display),
            warnings,
        })
    }

    /// The documents and skills of the port: as last read while its stamp is unchanged,
    /// else read (and kept under the stamp read before them, so a change made meanwhile is
    /// read at the next load).
    async fn port_documents(&self) -> Result<PortDocuments, MemoryError> {
        let stamp = self.documents.stamp().await?;
        if let Some(stamp) = stamp
            && let Some((kept, documents)) = lock(&self.read).as_ref()
            && *kept == stamp
        {
            return Ok(documents.clone());
        }
        let mut warnings = Vec::new();
        let mut document = async |which: Document| -> Result<Option<String>, MemoryError> {
            Ok(self
                .documents
                .read(which)
                .await?
                .map(|read| text_of(which.path(), read, &mut warnings)))
        };
        let soul_md = document(Document::Soul).await?;
        let user_md = document(Document::User).await?;
        let memory_md = document(Document::Memory).await?;

        let listed = self.documents.skills().await?;
        warnings.extend(listed.skipped);
        let mut skills = Vec::with_capacity(listed.skills.len());
        let mut cache = lock(&self.skills);
        for skill in listed.skills {
            let key = (SkillSource::Workspace, skill.name.clone());
            let seen = Seen::Version(skill.document.version);
            if let Some((known, parsed)) = cache.get(&key)
                && *known == seen
            {
                skills.push(parsed.clone());
                continue;
            }
            let path = nanobot_memory_store::skill_path(&skill.name);
            let text = text_of(&path, skill.document, &mut warnings);
            let parsed = Arc::new(SkillFile::parse(
                &skill.name,
                SkillSource::Workspace,
                &text,
                &self.probe,
            ));
            cache.insert(key, (seen, parsed.clone()));
            skills.push(parsed);
        }
        drop(cache);
        let documents = PortDocuments {
            soul_md,
            user_md,
            memory_md,
            skills,
            warnings,
        };
        if let Some(stamp) = stamp {
            *lock(&self.read) = Some((stamp, documents.clone()));
        }
        Ok(documents)
    }

    /// The built-in skills (`<dir>/<name>/SKILL.md`), sorted by name.
    fn load_builtin(
        &self,
        dir: &Path,
        cache: &mut ParsedSkills,
        warnings: &mut Vec<String>,
    ) -> Result<Vec<Arc<SkillFile>>, MemoryError> {
        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_error("list", dir, e)),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io_error("list", dir, e))?;
            let Ok(name) = entry.file_name().into_string() else {
                warnings.push(format!(
                    "skipped the skill folder {:?} in {}: its name is not UTF-8",
                    entry.file_name(),
                    dir.display()
                ));
                continue;
            };
            if nanobot_memory_store::validate_skill_name(&name).is_err() {
                if !name.starts_with('.') {
                    warnings.push(format!(
                        "skipped the skill folder {name:?} in {}: a skill name is ASCII letters, digits, '-' or '_'",
                        dir.display()
                    ));
                }
                continue;
            }
            names.push(name);
        }
        names.sort();
        let mut skills = Vec::with_capacity(names.len());
        for name in names {
            let path = dir.join(&name).join("SKILL.md");
            let meta = match fs::metadata(&path) {
                Ok(meta) if meta.is_file() => meta,
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_error("read", &path, e)),
            };
            let seen = Seen::Stamp {
                len: meta.len(),
                modified: meta.modified().ok(),
            };
            let key = (SkillSource::BuiltIn, name.clone());
            if let Some((known, skill)) = cache.get(&key)
                && *known == seen
            {
                skills.push(skill.clone());
                continue;
            }
            let Some(text) = read_lossy(&path, warnings)? else {
                continue;
            };
            let skill = Arc::new(SkillFile::parse(
                &name,
                SkillSource::BuiltIn,
                &text,
                &self.probe,
            ));
            cache.insert(key, (seen, skill.clone()));
            skills.push(skill);
        }
        Ok(skills)
    }
}

#[async_trait]
impl PromptFiles for PromptLoader {
    async fn load(&self) -> Result<WorkspaceSnapshot, MemoryError> {
        PromptLoader::load(self).await
    }
}

/// The text of a document as read; a lossy decode is reported as a warning.
fn text_of(path: &str, read: DocumentText, warnings: &mut Vec<String>) -> String {
    if read.decoded_lossily {
        warnings.push(format!(
            "{path} is not valid UTF-8; invalid bytes were replaced with U+FFFD in the prompt (the file is unchanged)"
        ));
    }
    read.text
}

/// The absolute, symlink-free form of `path`, as the prompt names it.
fn resolve(path: &Path) -> Result<PathBuf, MemoryError> {
    fs::canonicalize(path).map_err(|e| io_error("open", path, e))
}

fn io_error(action: &'static str, path: &Path, source: io::Error) -> MemoryError {
    MemoryError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

fn display(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// A file's text; invalid UTF-8 is replaced (and reported) rather than failing the turn.
fn read_lossy(path: &Path, warnings: &mut Vec<String>) -> Result<Option<String>, MemoryError> {
    match fs::read(path) {
        Ok(bytes) => {
            let read = DocumentText::from_bytes(bytes);
            Ok(Some(text_of(&path.display().to_string(), read, warnings)))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.kind() == io::ErrorKind::IsADirectory => Ok(None),
        Err(e) => Err(io_error("read", path, e)),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// The real `PATH` and environment of this process.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemProbe;

impl RequirementProbe for SystemProbe {
    fn has_binary(&self, name: &str) -> bool {
        if name.contains(std::path::MAIN_SEPARATOR) {
            return is_executable(Path::new(name));
        }
        std::env::var_os("PATH").is_some_and(|paths| {
            std::env::split_paths(&paths).any(|dir| is_executable(&dir.join(name)))
        })
    }

    fn has_env(&self, name: &str) -> bool {
        std::env::var_os(name).is_some_and(|v| !v.is_empty())
    }
}

fn is_executable(path: &Path) -> bool {
    match fs::metadata(path) {
        #[cfg(unix)]
        Ok(meta) => {
            use std::os::unix::fs::PermissionsExt;
            meta.is_file() && meta.permissions().mode() & 0o111 != 0
        }
        #[cfg(not(unix))]
        Ok(meta) => meta.is_file(),
        Err(_) => false,
    }
}

/// Remembers each answer of the probe it wraps.
struct CachedProbe {
    inner: Arc<dyn RequirementProbe>,
    answers: Mutex<HashMap<(bool, String), bool>>,
}

impl CachedProbe {
    fn new(inner: Arc<dyn RequirementProbe>) -> Self {
        CachedProbe {
            inner,
            answers: Mutex::new(HashMap::new()),
        }
    }

    fn clear(&self) {
        lock(&self.answers).clear();
    }

    fn ask(&self, binary: bool, name: &str) -> bool {
        if let Some(answer) = lock(&self.answers).get(&(binary, name.to_owned())) {
            return *answer;
        }
        let answer = if binary {
            self.inner.has_binary(name)
        } else {
            self.inner.has_env(name)
        };
        lock(&self.answers).insert((binary, name.to_owned()), answer);
        answer
    }
}

impl RequirementProbe for CachedProbe {
    fn has_binary(&self, name: &str) -> bool {
        self.ask(true, name)
    }

    fn has_env(&self, name: &str) -> bool {
        self.ask(false, name)
    }
}
