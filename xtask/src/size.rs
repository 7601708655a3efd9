//! `cargo xtask size`: a library source file stays under 600 lines and a function under 80,
//! so each file holds one job and each function reads as steps.
//!
//! Library sources are the `src/` trees of the crates under `crates/` that have a
//! `src/lib.rs` (binaries, `xtask` and tests are tools, not code others read to use ours).
//! A function runs from its `fn` line to the line holding its closing brace at the same
//! indentation, as rustfmt lays it out (the format check runs first).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The longest library source file, in lines.
const MAX_FILE_LINES: usize = 600;
/// The longest function, in lines.
const MAX_FN_LINES: usize = 80;
/// The app's whole `src`, in lines: it wires the library crates and prints; what a bot
/// builder could reuse belongs in them (issue 29).
const MAX_APP_LINES: usize = 2_800;
/// The app crate.
const APP: &str = "crates/nanobot-app/src/";

/// Files (`crates/x/src/f.rs`) and functions (`crates/x/src/f.rs::name`) allowed over the
/// limits, each with the reason it stays. An entry that is no longer over its limit fails
/// the check, so the list only shrinks. Empty: every file and function is within its limit.
const ALLOWED: &[(&str, &str)] = &[];

/// One file or function over its limit.
#[derive(Debug, PartialEq, Eq)]
struct Oversize {
    /// `path` or `path::function`.
    key: String,
    lines: usize,
    limit: usize,
}

/// Checks every library source file of the workspace at `root`.
pub(crate) fn check(root: &Path) -> Result<(), String> {
    let mut found = Vec::new();
    let mut app_lines = 0;
    for file in library_sources(root)? {
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let relative = file
            .strip_prefix(root)
            .unwrap_or(&file)
            .to_string_lossy()
            .replace('\\', "/");
        if relative.starts_with(APP) {
            app_lines += text.lines().count();
        }
        found.extend(oversized(&relative, &text));
    }
    if app_lines > MAX_APP_LINES {
        return Err(format!(
            "{APP} holds {app_lines} lines, over its {MAX_APP_LINES}: move what a bot builder could reuse into the library crates"
        ));
    }
    println!("the app: {app_lines} lines of src (at most {MAX_APP_LINES})");
    judge(&found, ALLOWED)
}

/// The verdict on what is over its limit, given the allow-list.
fn judge(found: &[Oversize], allowed: &[(&str, &str)]) -> Result<(), String> {
    let mut problems = String::new();
    for item in found {
        if !allowed.iter().any(|(key, _)| *key == item.key) {
            let _ = writeln!(
                problems,
                "  {}: {} lines (at most {})",
                item.key, item.lines, item.limit
            );
        }
    }
    for (key, _) in allowed {
        if !found.iter().any(|item| item.key == *key) {
            let _ = writeln!(
                problems,
                "  {key}: allowed in xtask/src/size.rs but no longer over its limit; \
                 remove the entry"
            );
        }
    }
    if problems.is_empty() {
        println!(
            "sizes: no library file over {MAX_FILE_LINES} lines and no function over \
             {MAX_FN_LINES} beyond the {} allowed in xtask/src/size.rs",
            allowed.len()
        );
        Ok(())
    } else {
        Err(format!(
            "sizes: split these by job (or allow them in xtask/src/size.rs, saying why):\n{problems}"
        ))
    }
}

/// Every `.rs` file under `crates/*/src` of a crate with a library target.
fn library_sources(root: &Path) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    let crates = root.join("crates");
    for entry in read_dir(&crates)? {
        let src = entry.join("src");
        if src.join("lib.rs").is_file() {
            collect_rs(&src, &mut files)?;
        }
    }
    files.sort();
    Ok(files)
}

fn collect_rs(dir: &Path, into: &mut Vec<PathBuf>) -> Result<(), String> {
    for path in read_dir(dir)? {
        if path.is_dir() {
            collect_rs(&path, into)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
    Ok(())
}

fn read_dir(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    let mut paths = Vec::new();
    for entry in entries {
        paths.push(
            entry
                .map_err(|e| format!("cannot list {}: {e}", dir.display()))?
                .path(),
        );
    }
    Ok(paths)
}

/// The file itself and each of its functions, where over the limit.
fn oversized(path: &str, text: &str) -> Vec<Oversize> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    if lines.len() > MAX_FILE_LINES {
        found.push(Oversize {
            key: path.to_owned(),
            lines: lines.len(),
            limit: MAX_FILE_LINES,
        });
    }
    for (start, line) in lines.iter().enumerate() {
        let Some((indent, name)) = function_start(line) else {
            continue;
        };
        if let Some(end) = function_end(&lines, start, indent) {
            let length = end - start + 1;
            if length > MAX_FN_LINES {
                found.push(Oversize {
                    key: format!("{path}::{name}"),
                    lines: length,
                    limit: MAX_FN_LINES,
                });
            }
        }
    }
    found
}

/// The indentation and name of a function whose signature starts on `line`.
fn function_start(line: &str) -> Option<(&str, &str)> {
    let body = line.trim_start();
    let indent = &line[..line.len() - body.len()];
    let mut rest = body;
    if let Some(after) = rest.strip_prefix("pub") {
        rest = match after.strip_prefix('(') {
            Some(scoped) => scoped.split_once(')')?.1,
            None => after,
        }
        .trim_start();
    }
    for qualifier in ["const ", "async ", "unsafe ", "extern \"C\" "] {
        if let Some(after) = rest.strip_prefix(qualifier) {
            rest = after.trim_start();
        }
    }
    let after_fn = rest.strip_prefix("fn ")?;
    let name_end = after_fn
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(after_fn.len());
    (name_end > 0).then(|| (indent, &after_fn[..name_end]))
}

/// The line of the function's closing brace; `None` for a declaration without a body.
fn function_end(lines: &[&str], start: usize, indent: &str) -> Option<usize> {
    let mut at = start;
    while let Some(line) = lines.get(at) {
        let trimmed = line.trim_end();
        if trimmed.ends_with(';') {
            return None;
        }
        if trimmed.ends_with('{') || trimmed.ends_with('}') {
            break;
        }
        at += 1;
    }
    if lines.get(at)?.trim_end().ends_with('}') {
        return Some(at);
    }
    let closing = format!("{indent}}}");
    (at + 1..lines.len()).find(|&i| lines[i].trim_end() == closing)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(n: usize) -> String {
        (0..n).map(|i| format!("    let x{i} = {i};\n")).collect()
    }

    #[test]
    fn a_long_function_is_found_by_name_and_a_short_one_is_not() {
        let text = format!(
            "/// Doc.\npub(crate) async fn long(a: u8) -> u8 {{\n{}}}\n\nfn short() {{\n{}}}\n",
            body(79),
            body(3)
        );
        let found = oversized("crates/x/src/a.rs", &text);
        assert_eq!(
            found,
            vec![Oversize {
                key: "crates/x/src/a.rs::long".into(),
                lines: 81,
                limit: MAX_FN_LINES
            }]
        );
    }

    #[test]
    fn methods_signatures_over_several_lines_and_trait_declarations() {
        let text = format!(
            "impl A {{\n    pub fn method(\n        &self,\n    ) -> u8 {{\n{}    }}\n}}\ntrait T {{\n    fn declared(&self);\n}}\n",
            body(80)
        );
        let found = oversized("f.rs", &text);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].key, "f.rs::method");
        assert_eq!(found[0].lines, 84);
    }

    #[test]
    fn a_long_file_is_found_and_one_line_functions_are_not_functions_without_end() {
        let text = "fn one() {}\n".repeat(601);
        let found = oversized("f.rs", &text);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].lines, 601);
    }

    #[test]
    fn the_allow_list_excuses_and_must_stay_true() {
        let found = vec![Oversize {
            key: "f.rs".into(),
            lines: 700,
            limit: 600,
        }];
        assert!(judge(&found, &[]).is_err());
        assert!(judge(&found, &[("f.rs", "why")]).is_ok());
        let stale = judge(&[], &[("f.rs", "why")]).unwrap_err();
        assert!(stale.contains("no longer over its limit"), "{stale}");
    }
}
