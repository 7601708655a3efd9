//! The files a run works on, in memory: the run's tools read and write this overlay, and
//! nothing reaches the workspace until the run completes (all or nothing, and a dry run
//! for free).

use std::collections::BTreeMap;

use nanobot_memory_store::{
    DocVersion, Document, Expected, MemoryDocuments, MemoryError, Snapshot,
};
use serde_json::Value;

use crate::sandbox::{self, Target};

/// The memory files as a run sees them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overlay {
    base: BTreeMap<Target, String>,
    /// The version of each file when the run read it: a change is applied only onto it.
    versions: BTreeMap<Target, DocVersion>,
    current: BTreeMap<Target, String>,
    max_file_chars: usize,
    /// What each file held when the model last read it (a repeated read of an unchanged
    /// file gets a short note instead of the text again, as nanobot's `read_file` does).
    last_read: BTreeMap<Target, String>,
}

/// What one tool call did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutcome {
    /// The text the model gets back.
    pub text: String,
    /// Whether it was an error.
    pub is_error: bool,
    /// Whether it was an edit that changed nothing.
    pub no_op_edit: bool,
}

impl ToolOutcome {
    pub(crate) fn ok(text: impl Into<String>) -> Self {
        ToolOutcome {
            text: text.into(),
            is_error: false,
            no_op_edit: false,
        }
    }

    pub(crate) fn error(text: impl Into<String>) -> Self {
        ToolOutcome {
            text: text.into(),
            is_error: true,
            no_op_edit: false,
        }
    }

    pub(crate) fn no_op(text: impl Into<String>) -> Self {
        ToolOutcome {
            text: text.into(),
            is_error: true,
            no_op_edit: true,
        }
    }
}

impl Overlay {
    /// The workspace's memory files as they are now.
    pub async fn load(
        documents: &dyn MemoryDocuments,
        max_file_chars: usize,
    ) -> Result<Overlay, MemoryError> {
        let mut base = BTreeMap::new();
        let mut versions = BTreeMap::new();
        let mut keep = |target: Target, read: nanobot_memory_store::DocumentText| {
            if read.decoded_lossily {
                // Editing the replaced text would write U+FFFD over the original bytes.
                return Err(MemoryError::InvalidFile {
                    path: target.path().into(),
                    reason:
                        "is not UTF-8 text; fix or remove the invalid bytes before Dream edits it"
                            .into(),
                });
            }
            versions.insert(target.clone(), read.version);
            base.insert(target, read.text);
            Ok(())
        };
        for document in Document::ALL {
            if let Some(read) = documents.read(document).await? {
                keep(Target::Document(document), read)?;
            }
        }
        for skill in documents.skills().await?.skills {
            keep(Target::Skill(skill.name), skill.document)?;
        }
        Ok(Overlay {
            current: base.clone(),
            base,
            versions,
            max_file_chars,
            last_read: BTreeMap::new(),
        })
    }

    /// What a change of `target` expects to find: the version the run read, or nothing.
    pub fn expected(&self, target: &Target) -> Expected {
        match self.versions.get(target) {
            Some(version) => Expected::Version(*version),
            None => Expected::Absent,
        }
    }

    /// The text of `target` now, if it exists.
    pub fn get(&self, target: &Target) -> Option<&str> {
        self.current.get(target).map(String::as_str)
    }

    /// The skills there are now.
    pub fn skills(&self) -> impl Iterator<Item = &Target> {
        self.current
            .keys()
            .filter(|t| matches!(t, Target::Skill(_)))
    }

    /// Files whose text differs from when the run started: (target, before, after).
    pub fn changes(&self) -> Vec<(Target, Option<&str>, &str)> {
        self.current
            .iter()
            .filter(|(t, text)| self.base.get(*t) != Some(*text))
            .map(|(t, text)| {
                (
                    t.clone(),
                    self.base.get(t).map(String::as_str),
                    text.as_str(),
                )
            })
            .collect()
    }

    /// The files as a snapshot (workspace-relative paths).
    pub fn snapshot(&self) -> Snapshot {
        self.current
            .iter()
            .map(|(t, text)| (t.path(), text.clone()))
            .collect()
    }

    /// The text of `target` when the run started, if it existed.
    pub(crate) fn base(&self, target: &Target) -> Option<&str> {
        self.base.get(target).map(String::as_str)
    }

    /// Puts `new` (a line the run appended) in the place of the line `old`, the appended
    /// copy taken out: a replacement, as a diff shows it.
    pub(crate) fn supersede_line(&mut self, target: &Target, old: &str, new: &str) {
        let Some(text) = self.current.get(target) else {
            return;
        };
        let mut lines: Vec<String> = text.split_inclusive('\n').map(str::to_owned).collect();
        let bare = |l: &String| l.trim_end_matches(['\n', '\r']).to_owned();
        let (Some(at), Some(copy)) = (
            lines.iter().position(|l| bare(l) == old),
            lines.iter().rposition(|l| bare(l) == new),
        ) else {
            return;
        };
        lines[at] = format!("{new}\n");
        lines.remove(copy);
        self.current.insert(target.clone(), lines.concat());
    }

    /// Takes one occurrence of each of `lines` out of `target`, last first (an added line
    /// follows the one it repeats), keeping the file's other lines and its final newline.
    pub(crate) fn drop_lines(&mut self, target: &Target, lines: &[String]) {
        let Some(text) = self.current.get(target) else {
            return;
        };
        let kept = crate::lines::take_out(text, lines);
        let text = without_empty_sections(&kept, self.base.get(target).map(String::as_str));
        self.current.insert(target.clone(), text);
    }

    /// Runs tool `name` with its JSON `arguments`.
    pub fn call(&mut self, name: &str, arguments: &str) -> ToolOutcome {
        let args: Value = match serde_json::from_str(arguments) {
            Ok(Value::Object(map)) => Value::Object(map),
            Ok(_) | Err(_) if arguments.trim().is_empty() => Value::Object(Default::default()),
            _ => {
                return ToolOutcome::error(format!(
                    "Error: the arguments of {name} are not a JSON object: {}",
                    excerpt(arguments)
                ));
            }
        };
        let text = |key: &str| args.get(key).and_then(Value::as_str);
        match name {
            "list_files" => ToolOutcome::ok(self.list()),
            "read_file" => match text("path").map(sandbox::parse) {
                None => missing("read_file", "path"),
                Some(Err(e)) => ToolOutcome::error(e),
                Some(Ok(target)) => match self.current.get(&target) {
                    Some(body) if self.last_read.get(&target) == Some(body) => {
                        ToolOutcome::ok(format!(
                            "[File unchanged since last read: {}. Its text is above; edit it with edit_file or write_file, or give your final answer.]",
                            target.path()
                        ))
                    }
                    Some(body) => {
                        self.last_read.insert(target.clone(), body.clone());
                        ToolOutcome::ok(format!("{}:\n{body}", target.path()))
                    }
                    None => ToolOutcome::error(format!(
                        "Error: {} does not exist yet; create it with write_file",
                        target.path()
                    )),
                },
            },
            "write_file" => match (text("path").map(sandbox::parse), text("content")) {
                (None, _) => missing("write_file", "path"),
                (_, None) => missing("write_file", "content"),
                (Some(Err(e)), _) => ToolOutcome::error(e),
                (Some(Ok(target)), Some(content)) => self.write(target, content.to_owned()),
            },
            "edit_file" => match (
                text("path").map(sandbox::parse),
                text("old_text"),
                text("new_text"),
            ) {
                (None, _, _) => missing("edit_file", "path"),
                (_, None, _) => missing("edit_file", "old_text"),
                (_, _, None) => missing("edit_file", "new_text"),
                (Some(Err(e)), _, _) => ToolOutcome::error(e),
                (Some(Ok(target)), Some(old), Some(new)) => {
                    let all = args
                        .get("replace_all")
                        .and_then(Value::as_bool)
                        .unwrap_or(false);
                    self.edit(target, old, new, all)
                }
            },
            other => ToolOutcome::error(format!(
                "Error: there is no tool {other:?}; use list_files, read_file, edit_file or write_file"
            )),
        }
    }

    fn list(&self) -> String {
        let mut out = String::from("Memory files:");
        for document in Document::ALL {
            let target = Target::Document(document);
            let size = self.current.get(&target).map_or(0, |t| t.chars().count());
            let state = if self.current.contains_key(&target) {
                format!("{size} characters")
            } else {
                "missing".to_owned()
            };
            out.push_str(&format!("\n- {} ({state})", target.path()));
        }
        let skills: Vec<&Target> = self
            .current
            .keys()
            .filter(|t| matches!(t, Target::Skill(_)))
            .collect();
        if skills.is_empty() {
            out.push_str("\nSkills: none yet");
        } else {
            out.push_str("\nSkills:");
            for target in skills {
                let description = self
                    .current
                    .get(target)
                    .map(|text| {
                        nanobot_prompt_inputs::skill_info("x", text)
                            .description
                            .unwrap_or_default()
                    })
                    .unwrap_or_default();
                out.push_str(&format!(
                    "\n- {} — {}",
                    target.path(),
                    one_line(&description)
                ));
            }
        }
        out
    }

    pub(crate) fn write(&mut self, target: Target, content: String) -> ToolOutcome {
        if let Some(refusal) = self.too_large(&target, &content) {
            return refusal;
        }
        if matches!(target, Target::Skill(_))
            && let Err(e) = nanobot_prompt_inputs::check_front_matter(&content)
        {
            return ToolOutcome::error(format!("Error: {} was not written: {e}", target.path()));
        }
        if self.current.get(&target) == Some(&content) {
            return ToolOutcome::no_op(format!(
                "Error: {} already has exactly this content; nothing was written",
                target.path()
            ));
        }
        let chars = content.chars().count();
        let path = target.path();
        self.current.insert(target, content);
        ToolOutcome::ok(format!("Successfully wrote {chars} characters to {path}"))
    }

    pub(crate) fn edit(&mut self, target: Target, old: &str, new: &str, all: bool) -> ToolOutcome {
        let path = target.path();
        if old == new {
            return ToolOutcome::no_op(format!(
                "Error: old_text and new_text are identical; {path} was not changed"
            ));
        }
        let Some(text) = self.current.get(&target) else {
            if old.is_empty() {
                return self.write(target, new.to_owned());
            }
            return ToolOutcome::error(format!(
                "Error: {path} does not exist; create it with write_file"
            ));
        };
        if old.is_empty() {
            if text.trim().is_empty() {
                return self.write(target, new.to_owned());
            }
            return ToolOutcome::error(format!(
                "Error: old_text is empty but {path} is not; quote the exact text to replace"
            ));
        }
        let count = text.matches(old).count();
        let updated = match count {
            0 => {
                return ToolOutcome::error(format!(
                    "Error: old_text was not found in {path}; read the file and copy the exact text"
                ));
            }
            1 => text.replacen(old, new, 1),
            n if all => {
                let replaced = text.replace(old, new);
                return match self.write(target, replaced) {
                    outcome if outcome.is_error => outcome,
                    _ => ToolOutcome::ok(format!("Successfully edited {path} ({n} replacements)")),
                };
            }
            n => {
                return ToolOutcome::error(format!(
                    "Error: old_text matches {n} places in {path}; include more surrounding text, or set replace_all"
                ));
            }
        };
        match self.write(target, updated) {
            outcome if outcome.is_error => outcome,
            _ => ToolOutcome::ok(format!("Successfully edited {path}")),
        }
    }

    fn too_large(&self, target: &Target, content: &str) -> Option<ToolOutcome> {
        let chars = content.chars().count();
        (self.max_file_chars > 0 && chars > self.max_file_chars).then(|| {
            ToolOutcome::error(format!(
                "Error: {} would have {chars} characters, over the {} allowed for a memory file; keep memory concise",
                target.path(),
                self.max_file_chars
            ))
        })
    }
}

/// `lines` (each with its newline) without the headings the run added (not in `base`)
/// that no longer head anything: a section whose lines were all taken out goes with them.
fn without_empty_sections(lines: &[&str], base: Option<&str>) -> String {
    let base: Vec<&str> = base.map_or(Vec::new(), |b| b.lines().collect());
    let heading = |l: &str| l.trim_start().starts_with('#');
    let mut out: Vec<&str> = Vec::with_capacity(lines.len());
    let mut dropped = false;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let end = (i + 1..lines.len())
            .find(|&j| !lines[j].trim().is_empty())
            .unwrap_or(lines.len());
        let empty = end == lines.len() || heading(lines[end]);
        if heading(line) && empty && !base.contains(&line.trim_end_matches(['\n', '\r'])) {
            i = end;
            dropped = true;
            continue;
        }
        out.push(line);
        i += 1;
    }
    while dropped && out.len() > 1 && out.last().is_some_and(|l| l.trim().is_empty()) {
        out.pop();
    }
    out.concat()
}

fn missing(tool: &str, argument: &str) -> ToolOutcome {
    ToolOutcome::error(format!("Error: {tool} needs the argument {argument:?}"))
}

fn excerpt(text: &str) -> String {
    text.chars().take(200).collect()
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
