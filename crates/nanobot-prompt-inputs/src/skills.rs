//! Skills as a prompt uses them: parsed once when loaded, so building a prompt never
//! re-reads or re-parses a `SKILL.md` (nanobot-ai parses every one several times per turn).

use serde_json::{Map, Value};

use crate::front_matter::parse_front_matter;

/// A skill as a prompt lists it: its name, description and front matter.
#[derive(Debug, Clone, PartialEq)]
pub struct SkillInfo {
    /// The folder name (`skills/<name>/`), which is also the skill's identity.
    pub name: String,
    /// The front matter's `description`, if any.
    pub description: Option<String>,
    /// Every front matter field, decoded as far as the simple `key: value` form goes.
    pub front_matter: Map<String, Value>,
}

/// The listing entry of a skill whose `SKILL.md` reads `text`.
pub fn skill_info(name: &str, text: &str) -> SkillInfo {
    let (front_matter, _) = parse_front_matter(text);
    SkillInfo {
        name: name.to_owned(),
        description: front_matter
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_owned),
        front_matter,
    }
}

/// Where a skill comes from; the prompt lists the groups in this order, and a name found in
/// an earlier group hides the same name in a later one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SkillSource {
    /// `<workspace>/skills/<name>/SKILL.md`: the user's and Dream's own skills.
    Workspace,
    /// Skills shipped with the program (nanobot-ai's `nanobot/skills/`), advertised under
    /// the relative root `skills`, as nanobot does.
    BuiltIn,
}

/// What a skill needs from the machine it runs on (`metadata.nanobot.requires`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requirements {
    /// Programs that must be on `PATH`.
    pub bins: Vec<String>,
    /// Environment variables that must be set and non-empty.
    pub env: Vec<String>,
}

/// Answers whether a requirement is met. Probed when skills are loaded, never while a
/// prompt is built, so the prompt does not depend on the process environment of the
/// moment and tests can inject the answers.
pub trait RequirementProbe: Send + Sync {
    /// Whether `name` is an executable on `PATH`.
    fn has_binary(&self, name: &str) -> bool;
    /// Whether the environment variable `name` is set and non-empty.
    fn has_env(&self, name: &str) -> bool;
}

/// A loaded skill: its listing entry, where it lives, its body, and what it lacks.
#[derive(Debug, Clone, PartialEq)]
pub struct SkillFile {
    /// Name, description and front matter.
    pub info: SkillInfo,
    /// Which group it belongs to.
    pub source: SkillSource,
    /// The path of its `SKILL.md` relative to its group's root (`<name>/SKILL.md`).
    pub relative_path: String,
    /// The text after the front matter, trimmed (nanobot's `_strip_frontmatter`); the
    /// whole text when there is no front matter.
    pub body: String,
    /// Whether the skill asks to be always active (`always: true` at the top level or under
    /// `metadata.nanobot` / `metadata.openclaw`).
    pub always: bool,
    /// What the machine lacks, as nanobot words it (`CLI: gh`, `ENV: GITHUB_TOKEN`); empty
    /// when the skill is available.
    pub missing: Vec<String>,
}

impl SkillFile {
    /// Parses `text`, the `SKILL.md` of skill `name`, and checks its requirements.
    pub fn parse(
        name: &str,
        source: SkillSource,
        text: &str,
        probe: &dyn RequirementProbe,
    ) -> SkillFile {
        let info = skill_info(name, text);
        let nanobot = nanobot_metadata(info.front_matter.get("metadata"));
        let requirements = requirements(&nanobot);
        let always = nanobot
            .get("always")
            .is_some_and(nanobot_llm_port::tokens::python_truthy)
            || info
                .front_matter
                .get("always")
                .is_some_and(nanobot_llm_port::tokens::python_truthy);
        let missing = requirements
            .bins
            .iter()
            .filter(|bin| !probe.has_binary(bin))
            .map(|bin| format!("CLI: {bin}"))
            .chain(
                requirements
                    .env
                    .iter()
                    .filter(|var| !probe.has_env(var))
                    .map(|var| format!("ENV: {var}")),
            )
            .collect();
        SkillFile {
            relative_path: format!("{name}/SKILL.md"),
            body: strip_front_matter(text).to_owned(),
            info,
            source,
            always,
            missing,
        }
    }

    /// The skill's name.
    pub fn name(&self) -> &str {
        &self.info.name
    }

    /// The description the prompt shows: the front matter's on one line (a folded or
    /// literal YAML block would otherwise break the one-line-per-skill index), or the name
    /// when it has none.
    pub fn description(&self) -> std::borrow::Cow<'_, str> {
        match self.info.description.as_deref() {
            Some(d) if !d.trim().is_empty() => {
                if d.contains(['\n', '\r', '\t']) || d.trim().len() != d.len() || d.contains("  ") {
                    std::borrow::Cow::Owned(d.split_whitespace().collect::<Vec<_>>().join(" "))
                } else {
                    std::borrow::Cow::Borrowed(d)
                }
            }
            _ => std::borrow::Cow::Borrowed(&self.info.name),
        }
    }

    /// Whether every requirement is met.
    pub fn is_available(&self) -> bool {
        self.missing.is_empty()
    }
}

/// The body of a skill document: after its front matter, trimmed; the text unchanged when
/// it has none.
pub fn strip_front_matter(text: &str) -> &str {
    if !text.starts_with("---") {
        return text;
    }
    let (fields, body) = parse_front_matter(text);
    if fields.is_empty() && body.len() == text.len() {
        return text;
    }
    body.trim()
}

/// The `nanobot` (or legacy `openclaw`) mapping of a front matter's `metadata`, which may be
/// a mapping or a JSON string.
fn nanobot_metadata(raw: Option<&Value>) -> Map<String, Value> {
    let parsed;
    let data = match raw {
        Some(Value::Object(map)) => map,
        Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(map)) => {
                parsed = map;
                &parsed
            }
            _ => return Map::new(),
        },
        _ => return Map::new(),
    };
    match data.get("nanobot").or_else(|| data.get("openclaw")) {
        Some(Value::Object(payload)) => payload.clone(),
        _ => Map::new(),
    }
}

/// `requires.bins` and `requires.env`, tolerating nulls and entries of the wrong type.
fn requirements(nanobot: &Map<String, Value>) -> Requirements {
    let Some(Value::Object(requires)) = nanobot.get("requires") else {
        return Requirements::default();
    };
    let list = |key: &str| -> Vec<String> {
        match requires.get(key) {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(Value::as_str)
                .filter(|s| !s.trim().is_empty())
                .map(str::to_owned)
                .collect(),
            _ => Vec::new(),
        }
    };
    Requirements {
        bins: list("bins"),
        env: list("env"),
    }
}

/// The requirements a skill declares (for tools that show them).
pub fn skill_requirements(info: &SkillInfo) -> Requirements {
    requirements(&nanobot_metadata(info.front_matter.get("metadata")))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Probe;
    impl RequirementProbe for Probe {
        fn has_binary(&self, name: &str) -> bool {
            name == "git"
        }
        fn has_env(&self, name: &str) -> bool {
            name == "HOME"
        }
    }

    #[test]
    fn parses_requirements_always_and_body() {
        let text = "---\nname: gh\ndescription: GitHub\nmetadata: {\"nanobot\": {\"always\": true, \"requires\": {\"bins\": [\"gh\", \"git\", null], \"env\": [\"HOME\", \"TOKEN\"]}}}\n---\n\n# Body\n\n";
        let skill = SkillFile::parse("gh", SkillSource::Workspace, text, &Probe);
        assert!(skill.always);
        assert_eq!(skill.missing, ["CLI: gh", "ENV: TOKEN"]);
        assert_eq!(skill.body, "# Body");
        assert_eq!(skill.relative_path, "gh/SKILL.md");
        assert_eq!(skill.description(), "GitHub");
    }

    #[test]
    fn text_without_front_matter_is_kept_whole() {
        let skill = SkillFile::parse("plain", SkillSource::BuiltIn, "  just text\n", &Probe);
        assert_eq!(skill.body, "  just text\n");
        assert_eq!(skill.description(), "plain");
        assert!(!skill.always);
        assert!(skill.is_available());
    }

    #[test]
    fn top_level_always_and_openclaw_metadata() {
        let top = SkillFile::parse(
            "a",
            SkillSource::Workspace,
            "---\nalways: true\n---\nx",
            &Probe,
        );
        assert!(top.always);
        let legacy = SkillFile::parse(
            "b",
            SkillSource::Workspace,
            "---\nmetadata:\n  openclaw:\n    always: true\n---\nx",
            &Probe,
        );
        assert!(legacy.always);
        let off = SkillFile::parse(
            "c",
            SkillSource::Workspace,
            "---\nalways: false\n---\nx",
            &Probe,
        );
        assert!(!off.always);
    }
}
