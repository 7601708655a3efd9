//! The skills section: bodies of the always-on skills and an index of the rest.

use super::*;

/// How a client's instructions are introduced: the model should know whose they are.
pub(super) const INSTRUCTIONS_HEADER: &str = "# Instructions from the client\n\nThe application you are serving through sent these instructions with this request:\n\n";

pub(super) const SKILLS_HEADER: &str = "# Skills\n\nThe following skills extend your capabilities. Each group lists one root and relative SKILL.md paths; join them when using `read_file`.\n\n";

pub(super) fn write_skill_bodies(out: &mut String, skills: &[&SkillFile]) {
    for (i, skill) in skills.iter().enumerate() {
        if i > 0 {
            out.push_str(SEPARATOR);
        }
        out.push_str("### Skill: ");
        out.push_str(skill.name());
        out.push_str("\n\n");
        out.push_str(&skill.body);
    }
}

pub(super) fn write_skills_index(out: &mut String, ws: &WorkspaceSnapshot, skills: &[&SkillFile]) {
    let groups = [
        (SkillSource::Workspace, "Workspace skills"),
        (SkillSource::BuiltIn, "Built-in skills"),
    ];
    let mut first_group = true;
    for (source, label) in groups {
        let mut entries = skills.iter().filter(|s| s.source == source).peekable();
        if entries.peek().is_none() {
            continue;
        }
        if !first_group {
            out.push_str("\n\n");
        }
        first_group = false;
        let root = match (&ws.project_dir, source) {
            (None, _) => "skills".to_owned(),
            (Some(_), SkillSource::Workspace) => format!("{}/skills", ws.agent_dir),
            (Some(_), SkillSource::BuiltIn) => ws
                .builtin_skills_dir
                .clone()
                .unwrap_or_else(|| "skills".to_owned()),
        };
        let _ = write!(out, "### {label} (`{root}`)");
        for skill in entries {
            let _ = write!(out, "\n- **{}** — {}", skill.name(), skill.description());
            if !skill.missing.is_empty() {
                let _ = write!(out, " (unavailable: {})", skill.missing.join(", "));
            }
            let _ = write!(out, "  `{}`", skill.relative_path);
        }
    }
}
