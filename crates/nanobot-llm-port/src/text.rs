//! Cleaning model output: reasoning a model leaked into its answer text.

mod calls;

pub use calls::{CallPlacement, tool_calls_in_text};

const TAGS: [&str; 3] = ["think", "thinking", "thought"];

/// Removes model reasoning from answer text, then trims it: well-formed
/// `<think>…</think>` (and `thinking`, `thought`) blocks anywhere; an unclosed block that
/// starts the text (everything after the tag); `<thinking/>` markers at either end; an opening
/// tag glued to text (`<think广场`); orphan closing tags at the very start or end; a
/// `<channel|>` or `<|channel|>` marker at the start; and a partial control tag cut off at the
/// end of a stream (`<thi`, `<|chan`).
///
/// Tags in the middle of prose are left alone where they could be the subject of the text.
pub fn strip_think(text: &str) -> String {
    let mut out = text.to_owned();
    // Well-formed blocks, anywhere.
    for tag in TAGS {
        let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
        while let Some(start) = out.find(&open) {
            match out[start..].find(&close) {
                Some(end) => out.replace_range(start..start + end + close.len(), ""),
                None => break,
            }
        }
    }
    // An unclosed block that starts the text hides everything after it.
    let lead = out.trim_start();
    if TAGS.iter().any(|t| lead.starts_with(&format!("<{t}>"))) {
        return String::new();
    }
    // Self-closing markers at either end.
    for tag in TAGS {
        let marker = format!("<{tag}/>");
        let trimmed = out.trim();
        if let Some(rest) = trimmed.strip_prefix(&marker) {
            out = rest.to_owned();
        }
        let trimmed = out.trim_end();
        if let Some(rest) = trimmed.strip_suffix(&marker) {
            out = rest.to_owned();
        }
    }
    remove_glued_tags(&mut out);
    remove_orphan_closers(&mut out);
    cut_partial_tag(&mut out);
    out.trim().to_owned()
}

/// Opening tags glued to text.
fn remove_glued_tags(out: &mut String) {
    // An opening tag glued to text: `<think` followed by something that cannot continue a
    // tag name.
    for tag in TAGS {
        let glued = format!("<{tag}");
        let mut from = 0;
        while let Some(found) = out[from..].find(&glued) {
            let at = from + found;
            let next = out[at + glued.len()..].chars().next();
            let continues = next.is_some_and(|c| c.is_ascii_alphanumeric() || "_-:>/".contains(c));
            if continues || next.is_none() {
                from = at + glued.len();
            } else {
                out.replace_range(at..at + glued.len(), "");
                from = at;
            }
        }
    }
}

/// Orphan closing tags at either end, and a leading channel marker.
fn remove_orphan_closers(out: &mut String) {
    // Orphan closing tags at the very start or end, and a leading channel marker.
    loop {
        let before = out.len();
        let trimmed = out.trim().to_owned();
        *out = trimmed;
        for tag in TAGS {
            let close = format!("</{tag}>");
            if let Some(rest) = out.strip_prefix(&close) {
                *out = rest.to_owned();
            }
            if let Some(rest) = out.strip_suffix(&close) {
                *out = rest.to_owned();
            }
        }
        for marker in ["<|channel|>", "<channel|>"] {
            if let Some(rest) = out.strip_prefix(marker) {
                *out = rest.to_owned();
            }
        }
        if out.len() == before {
            break;
        }
    }
}

/// A control tag cut off at the end of a stream.
fn cut_partial_tag(out: &mut String) {
    // A control tag cut off at the end of a stream.
    if let Some(open) = out.rfind('<') {
        let tail = &out[open + 1..];
        let partial = tail.trim_start_matches('/').trim_end_matches('>');
        let partial = partial.trim_start_matches('|').trim_end_matches('|');
        let is_prefix = !partial.is_empty()
            && (TAGS.iter().any(|t| t.starts_with(partial)) || "channel".starts_with(partial));
        if is_prefix && !tail.contains(char::is_whitespace) {
            out.truncate(open);
        }
    }
}
