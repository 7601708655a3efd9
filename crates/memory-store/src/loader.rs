//! Reads a workspace's prompt files from disk, in nanobot-ai's layout, re-parsing a skill
//! only when its file changed.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use crate::documents::validate_skill_name;
use crate::error::MemoryError;
use crate::skills::{RequirementProbe, SkillFile, SkillSource};
use crate::snapshot::WorkspaceSnapshot;

/// Loads [`WorkspaceSnapshot`]s of one agent workspace (and optionally a project and a
/// directory of built-in skills).
///
/// A `SKILL.md` is parsed again only when its size or modification time changed, and
/// requirement probes (`PATH`, environment) are answered once per loader and remembered,
/// so loading before every turn costs a few `stat` calls. [`WorkspaceLoader::forget_probes`]
/// re-probes after the environment changed.
pub struct WorkspaceLoader {
    agent: PathBuf,
    /// Where `USER.md` and `memory/MEMORY.md` are read: the agent workspace, or the
    /// directory of the scope a turn belongs to.
    private: Option<PathBuf>,
    project: Option<PathBuf>,
    builtin: Option<PathBuf>,
    probe: CachedProbe,
    skills: Mutex<HashMap<PathBuf, (Stamp, Arc<SkillFile>)>>,
}

impl std::fmt::Debug for WorkspaceLoader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkspaceLoader")
            .field("agent", &self.agent)
            .field("private", &self.private)
            .field("project", &self.project)
            .field("builtin", &self.builtin)
            .finish_non_exhaustive()
    }
}

/// Size and modification time: a file with the same stamp is not read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
}

impl WorkspaceLoader {
    /// A loader of the agent workspace at `agent_workspace`, which must exist.
    pub fn new(agent_workspace: &Path) -> Result<Self, MemoryError> {
        Ok(WorkspaceLoader {
            agent: resolve(agent_workspace)?,
            private: None,
            project: None,
            builtin: None,
            probe: CachedProbe::new(Arc::new(SystemProbe)),
            skills: Mutex::new(HashMap::new()),
        })
    }

    /// Turns work in `project`: its `AGENTS.md` is used, never the agent workspace's. The
    /// same directory as the agent workspace means no separate project.
    pub fn with_project(mut self, project: &Path) -> Result<Self, MemoryError> {
        let project = resolve(project)?;
        self.project = (project != self.agent).then_some(project);
        Ok(self)
    }

    /// The private files (`USER.md`, `memory/MEMORY.md`) are read from `scope_dir`, the
    /// directory of a user's or a chat's scope, instead of the agent workspace; `SOUL.md`,
    /// `AGENTS.md` and skills still come from the agent (shared, read-only for the scope).
    /// A missing file there is an empty one: the agent's own private files never stand in.
    pub fn with_scope_dir(mut self, scope_dir: &Path) -> Result<Self, MemoryError> {
        let dir = resolve(scope_dir)?;
        self.private = (dir != self.agent).then_some(dir);
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
    }

    /// Reads the workspace as it is now.
    pub fn load(&self) -> Result<WorkspaceSnapshot, MemoryError> {
        let mut warnings = Vec::new();
        let project_root = self.project.as_deref().unwrap_or(&self.agent);
        let agents_md = read_lossy(&project_root.join("AGENTS.md"), &mut warnings)?;
        let soul_md = read_lossy(&self.agent.join("SOUL.md"), &mut warnings)?;
        let private = self.private.as_deref().unwrap_or(&self.agent);
        let user_md = read_lossy(&private.join("USER.md"), &mut warnings)?;
        let memory_md = read_lossy(&private.join("memory").join("MEMORY.md"), &mut warnings)?;

        let mut skills = self.load_group(
            &self.agent.join("skills"),
            SkillSource::Workspace,
            &mut warnings,
        )?;
        if let Some(builtin) = &self.builtin {
            let shadowed: Vec<String> = skills.iter().map(|s| s.name().to_owned()).collect();
            let mut more = self.load_group(builtin, SkillSource::BuiltIn, &mut warnings)?;
            more.retain(|s| !shadowed.iter().any(|n| n == s.name()));
            skills.extend(more);
        }
        Ok(WorkspaceSnapshot {
            agent_dir: display(&self.agent),
            project_dir: self.project.as_deref().map(display),
            agents_md,
            soul_md,
            user_md,
            memory_md,
            skills,
            builtin_skills_dir: self.builtin.as_deref().map(display),
            warnings,
        })
    }

    /// The skills of one directory (`<dir>/<name>/SKILL.md`), sorted by name.
    fn load_group(
        &self,
        dir: &Path,
        source: SkillSource,
        warnings: &mut Vec<String>,
    ) -> Result<Vec<Arc<SkillFile>>, MemoryError> {
        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(MemoryError::io("list", dir, e)),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| MemoryError::io("list", dir, e))?;
            let Ok(name) = entry.file_name().into_string() else {
                warnings.push(format!(
                    "skipped the skill folder {:?} in {}: its name is not UTF-8",
                    entry.file_name(),
                    dir.display()
                ));
                continue;
            };
            if validate_skill_name(&name).is_err() {
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
        let mut cache = lock(&self.skills);
        for name in names {
            let path = dir.join(&name).join("SKILL.md");
            let meta = match fs::metadata(&path) {
                Ok(meta) if meta.is_file() => meta,
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(MemoryError::io("read", &path, e)),
            };
            let stamp = Stamp {
                len: meta.len(),
                modified: meta.modified().ok(),
            };
            if let Some((known, skill)) = cache.get(&path)
                && *known == stamp
            {
                skills.push(skill.clone());
                continue;
            }
            let Some(text) = read_lossy(&path, warnings)? else {
                continue;
            };
            let skill = Arc::new(SkillFile::parse(&name, source, &text, &self.probe));
            cache.insert(path, (stamp, skill.clone()));
            skills.push(skill);
        }
        Ok(skills)
    }
}

/// The absolute, symlink-free form of `path`, as the prompt names it.
fn resolve(path: &Path) -> Result<PathBuf, MemoryError> {
    fs::canonicalize(path).map_err(|e| MemoryError::io("open", path, e))
}

fn display(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// The file's text; invalid UTF-8 is replaced (and reported) rather than failing the turn.
fn read_lossy(path: &Path, warnings: &mut Vec<String>) -> Result<Option<String>, MemoryError> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(e) => {
                warnings.push(format!(
                    "{} is not valid UTF-8; invalid bytes were replaced with U+FFFD in the prompt (the file is unchanged)",
                    path.display()
                ));
                String::from_utf8_lossy(e.as_bytes()).into_owned()
            }
        })),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.kind() == io::ErrorKind::IsADirectory => Ok(None),
        Err(e) => Err(MemoryError::io("read", path, e)),
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

impl crate::snapshot::PromptFiles for WorkspaceLoader {
    fn load(&self) -> Result<WorkspaceSnapshot, MemoryError> {
        WorkspaceLoader::load(self)
    }
}
