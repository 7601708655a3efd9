//! Line diffs of memory files: what a change log says is computed from the files, never
//! taken from what the model claims it did.

use std::fmt::Write as _;

/// One line of an edit script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Same(usize, usize),
    Removed(usize),
    Added(usize),
}

/// The longest common subsequence edit script of two line lists (quadratic, bounded: large
/// inputs fall back to "everything removed, everything added").
fn script(a: &[&str], b: &[&str]) -> Vec<Op> {
    // Common head and tail cost nothing.
    let head = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let tail = a[head..]
        .iter()
        .rev()
        .zip(b[head..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (ma, mb) = (&a[head..a.len() - tail], &b[head..b.len() - tail]);
    let mut ops: Vec<Op> = (0..head).map(|i| Op::Same(i, i)).collect();
    if ma.len().saturating_mul(mb.len()) > 4_000_000 {
        ops.extend((0..ma.len()).map(|i| Op::Removed(head + i)));
        ops.extend((0..mb.len()).map(|j| Op::Added(head + j)));
    } else {
        let (n, m) = (ma.len(), mb.len());
        let mut lcs = vec![0u32; (n + 1) * (m + 1)];
        for i in (0..n).rev() {
            for j in (0..m).rev() {
                lcs[i * (m + 1) + j] = if ma[i] == mb[j] {
                    lcs[(i + 1) * (m + 1) + j + 1] + 1
                } else {
                    lcs[(i + 1) * (m + 1) + j].max(lcs[i * (m + 1) + j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < n || j < m {
            if i < n && j < m && ma[i] == mb[j] {
                ops.push(Op::Same(head + i, head + j));
                i += 1;
                j += 1;
            } else if i < n && (j == m || lcs[(i + 1) * (m + 1) + j] >= lcs[i * (m + 1) + j + 1]) {
                ops.push(Op::Removed(head + i));
                i += 1;
            } else {
                ops.push(Op::Added(head + j));
                j += 1;
            }
        }
    }
    let (sa, sb) = (a.len() - tail, b.len() - tail);
    ops.extend((0..tail).map(|k| Op::Same(sa + k, sb + k)));
    ops
}

/// Lines of `text`, CRLF read as LF; a missing final newline is a difference of its own.
fn lines(text: &str) -> Vec<&str> {
    text.split_inclusive('\n').collect()
}

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

/// The diff of one file from `before` to `after` (`None`: the file does not exist).
pub fn file_diff(path: &str, before: Option<&str>, after: Option<&str>) -> Option<FileDiff> {
    let old = before.unwrap_or("").replace("\r\n", "\n");
    let new = after.unwrap_or("").replace("\r\n", "\n");
    if old == new && before.is_some() == after.is_some() {
        return None;
    }
    let (a, b) = (lines(&old), lines(&new));
    let ops = script(&a, &b);
    let added = ops.iter().filter(|o| matches!(o, Op::Added(_))).count();
    let removed = ops.iter().filter(|o| matches!(o, Op::Removed(_))).count();
    let mut unified = format!(
        "--- {}\n+++ {}\n",
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
    // Hunks: runs of changes with up to 3 lines of context around them.
    let changed: Vec<usize> = ops
        .iter()
        .enumerate()
        .filter(|(_, o)| !matches!(o, Op::Same(..)))
        .map(|(i, _)| i)
        .collect();
    let mut k = 0;
    while k < changed.len() {
        let start = changed[k].saturating_sub(3);
        let mut end = changed[k];
        while k + 1 < changed.len() && changed[k + 1] <= end + 7 {
            k += 1;
            end = changed[k];
        }
        let end = (end + 4).min(ops.len());
        let hunk = &ops[start..end];
        let a_start = hunk.iter().find_map(|o| match o {
            Op::Same(i, _) | Op::Removed(i) => Some(*i),
            Op::Added(_) => None,
        });
        let b_start = hunk.iter().find_map(|o| match o {
            Op::Same(_, j) | Op::Added(j) => Some(*j),
            Op::Removed(_) => None,
        });
        let a_len = hunk.iter().filter(|o| !matches!(o, Op::Added(_))).count();
        let b_len = hunk.iter().filter(|o| !matches!(o, Op::Removed(_))).count();
        let _ = writeln!(
            unified,
            "@@ -{},{a_len} +{},{b_len} @@",
            a_start.map_or(0, |i| i + 1),
            b_start.map_or(0, |j| j + 1)
        );
        for op in hunk {
            let (mark, line) = match *op {
                Op::Same(i, _) => (' ', a[i]),
                Op::Removed(i) => ('-', a[i]),
                Op::Added(j) => ('+', b[j]),
            };
            unified.push(mark);
            unified.push_str(line);
            if !line.ends_with('\n') {
                unified.push_str("\n\\ No newline at end of file\n");
            }
        }
        k += 1;
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
