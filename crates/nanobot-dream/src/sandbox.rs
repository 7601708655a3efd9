//! What Dream's tools may touch: exactly `SOUL.md`, `USER.md`, `memory/MEMORY.md` and
//! `skills/<name>/SKILL.md`, spelled exactly so. The grammar is checked on the text the
//! model wrote, before anything reaches storage; the storage then refuses symbolic links
//! below the workspace, so neither `..`, absolute paths, links, case tricks nor look-alike
//! characters lead anywhere else. Reads are confined the same way.

use nanobot_memory_store::{Document, validate_skill_name};

/// A file Dream may touch: one of the durable documents or a skill's `SKILL.md` (the
/// memory commit port's own type, so a parsed path is what a commit applies).
pub use nanobot_memory_store::MemoryFile as Target;

/// Why a path was refused, as the model sees it.
pub const OUTSIDE: &str = "outside allowed directory";

/// The target `path` names, or the error text the model gets.
pub fn parse(path: &str) -> Result<Target, String> {
    let refuse = |why: &str| {
        Err(format!(
            "Error: {path:?} is {OUTSIDE}: {why}. Dream may only use SOUL.md, USER.md, memory/MEMORY.md and skills/<name>/SKILL.md (exact spelling, relative to the workspace). This is a hard policy boundary; do not try other spellings."
        ))
    };
    if path.is_empty() {
        return refuse("the path is empty");
    }
    if path
        .chars()
        .any(|c| c.is_control() || c == '\\' || c == '\0')
    {
        return refuse("control characters and backslashes are not allowed");
    }
    if !path.is_ascii() {
        return refuse("only ASCII paths are allowed");
    }
    if path.starts_with('/') || path.starts_with('~') || path.contains(':') {
        return refuse("absolute paths are not allowed");
    }
    let relative = path.strip_prefix("./").unwrap_or(path);
    let parts: Vec<&str> = relative.split('/').collect();
    if parts
        .iter()
        .any(|p| p.is_empty() || *p == "." || *p == "..")
    {
        return refuse("'.', '..' and empty path segments are not allowed");
    }
    match parts.as_slice() {
        ["SOUL.md"] => Ok(Target::Document(Document::Soul)),
        ["USER.md"] => Ok(Target::Document(Document::User)),
        ["memory", "MEMORY.md"] => Ok(Target::Document(Document::Memory)),
        ["skills", name, "SKILL.md"] => match validate_skill_name(name) {
            Ok(()) => Ok(Target::Skill((*name).to_owned())),
            Err(_) => refuse("a skill name is 1 to 64 ASCII letters, digits, '-' or '_'"),
        },
        _ => refuse("not one of the memory files"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_exactly_the_four_places() {
        assert_eq!(parse("SOUL.md"), Ok(Target::Document(Document::Soul)));
        assert_eq!(parse("./USER.md"), Ok(Target::Document(Document::User)));
        assert_eq!(
            parse("memory/MEMORY.md"),
            Ok(Target::Document(Document::Memory))
        );
        assert_eq!(
            parse("skills/tea-time/SKILL.md"),
            Ok(Target::Skill("tea-time".into()))
        );
    }
}
