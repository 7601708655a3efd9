//! Line diffs of memory files: what a change log says is computed from the files, never
//! taken from what the model claims it did.

use std::fmt::Write as _;

/// A file's change: lines added and removed, and its unified diff (3 lines of context).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDiff {
    /// The workspace-relative path.
    pub path: String,
    /// Lines added.
    pub added: usize,
    /// Lines removed.
    pub removed: usize,
    /// The unified diff, `--- a/…` / `+++ b/…` headers included.
    pub unified: String,
}

impl FileDiff {
    /// The lines the change added (without their `+`).
    pub fn added_lines(&self) -> impl Iterator<Item = &str> {
        self.unified
            .lines()
            .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
            .map(|l| &l[1..])
    }
}

/// The diff of one file from `before` to `after` (`None`: the file does not exist).
pub fn file_diff(path: &str, before: Option<&str>, after: Option<&str>) -> Option<FileDiff> {
    let old = before.unwrap_or("").replace("\r\n", "\n");
    let new = after.unwrap_or("").replace("\r\n", "\n");
    if old == new && before.is_some() == after.is_some() {
        return None;
    }
    // Myers' algorithm over lines, without a deadline: the same inputs always give the
    // same diff, and a large MEMORY.md gets a real diff (O((N+M)·D)), not "all removed,
    // all added".
    let diff = similar::TextDiff::configure()
        .algorithm(similar::Algorithm::Myers)
        .diff_lines(old.as_str(), new.as_str());
    let (mut added, mut removed) = (0, 0);
    for change in diff.iter_all_changes() {
        match change.tag() {
            similar::ChangeTag::Insert => added += 1,
            similar::ChangeTag::Delete => removed += 1,
            similar::ChangeTag::Equal => {}
        }
    }
    let (from, to) = (
        if before.is_some() {
            format!("a/{path}")
        } else {
            "/dev/null".into()
        },
        if after.is_some() {
            format!("b/{path}")
        } else {
            "/dev/null".into()
        },
    );
    let mut unified = format!("--- {from}\n+++ {to}\n");
    for hunk in diff.unified_diff().context_radius(3).iter_hunks() {
        let _ = write!(unified, "{hunk}");
    }
    Some(FileDiff {
        path: path.to_owned(),
        added,
        removed,
        unified,
    })
}

/// The change log body: one `path: +A -R` line per file, the totals, then the diff (cut at
/// 6,000 characters). Empty when nothing changed.
pub fn summary(diffs: &[FileDiff]) -> String {
    if diffs.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    for d in diffs {
        let _ = writeln!(out, "{}: +{} -{}", d.path, d.added, d.removed);
    }
    let plural = |n: usize, one: &str, many: &str| {
        if n == 1 {
            one.to_owned()
        } else {
            many.to_owned()
        }
    };
    let (added, removed): (usize, usize) = diffs
        .iter()
        .fold((0, 0), |(a, r), d| (a + d.added, r + d.removed));
    let _ = write!(
        out,
        "{} {} changed, {added} {}(+), {removed} {}(-)",
        diffs.len(),
        plural(diffs.len(), "file", "files"),
        plural(added, "insertion", "insertions"),
        plural(removed, "deletion", "deletions"),
    );
    let body: String = diffs.iter().map(|d| d.unified.as_str()).collect();
    if !body.is_empty() {
        let mut cut = body.len().min(6_000);
        while !body.is_char_boundary(cut) {
            cut -= 1;
        }
        out.push_str("\n\n```diff\n");
        out.push_str(&body[..cut]);
        if cut < body.len() {
            out.push_str("\n...[diff truncated]\n");
        }
        out.push_str("```");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_hunks() {
        let d = file_diff("memory/MEMORY.md", Some(""), Some("# Memory\n- new fact\n")).unwrap();
        assert_eq!((d.added, d.removed), (2, 0));
        assert_eq!(
            summary(&[d]),
            "memory/MEMORY.md: +2 -0\n1 file changed, 2 insertions(+), 0 deletions(-)\n\n```diff\n--- a/memory/MEMORY.md\n+++ b/memory/MEMORY.md\n@@ -0,0 +1,2 @@\n+# Memory\n+- new fact\n```"
        );
    }

    #[test]
    fn crlf_only_is_no_change_but_a_dropped_newline_is() {
        assert_eq!(
            file_diff("a", Some("# Memory\r\n"), Some("# Memory\n")),
            None
        );
        assert!(file_diff("a", Some("# Memory\n"), Some("# Memory")).is_some());
        assert!(file_diff("a", Some("x\ry"), Some("x\ny")).is_some());
    }

    /// Issue 12.11: a large file with a few edits gets a real diff, not "remove all, add
    /// all" (the old quadratic LCS gave up past 4 million line pairs).
    #[test]
    fn a_large_file_gets_a_real_diff() {
        let before: String = (0..5_000).map(|i| format!("- fact number {i}\n")).collect();
        let after = before
            .replace("- fact number 10\n", "- fact number ten\n")
            .replace("- fact number 4000\n", "")
            + "- a new fact\n";
        let d = file_diff("memory/MEMORY.md", Some(&before), Some(&after)).unwrap();
        assert_eq!((d.added, d.removed), (2, 2));
        assert!(
            d.unified
                .contains("-- fact number 10\n+- fact number ten\n"),
            "{}",
            d.unified
        );
        assert!(d.unified.lines().count() < 40, "{}", d.unified);
    }

    #[test]
    fn a_middle_edit_has_context() {
        let before: String = (1..=10).map(|i| format!("line {i}\n")).collect();
        let after = before.replace("line 5\n", "line five\n");
        let d = file_diff("f", Some(&before), Some(&after)).unwrap();
        assert_eq!((d.added, d.removed), (1, 1));
        assert!(
            d.unified.contains(
                "@@ -2,7 +2,7 @@\n line 2\n line 3\n line 4\n-line 5\n+line five\n line 6\n"
            ),
            "{}",
            d.unified
        );
    }
}
