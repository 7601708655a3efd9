//! Cutting text to a token budget, keeping its beginning and saying that it was cut.

use nanobot_llm_port::TokenCounter;

/// The longest beginning of `text` that, followed by `marker`, counts at most `budget`
/// tokens; cut at a line end when one is near, never inside a character.
pub(crate) fn head(text: &str, budget: usize, marker: &str, counter: &dyn TokenCounter) -> String {
    let fits = |cut: usize| counter.count(&text[..cut]) + counter.count(marker) <= budget;
    let total = counter.count(text).max(1);
    let target = budget.saturating_sub(counter.count(marker));
    // Start from the proportional guess, then shrink until it fits.
    let mut cut = floor_boundary(text, text.len().saturating_mul(target) / total);
    while cut > 0 && !fits(cut) {
        cut = floor_boundary(text, cut - cut.div_ceil(10));
    }
    // Prefer ending at a line break in the last fifth of what is kept.
    if let Some(newline) = text[..cut].rfind('\n')
        && newline >= cut - cut / 5
    {
        cut = newline;
    }
    let mut out = String::with_capacity(cut + marker.len());
    out.push_str(&text[..cut]);
    out.push_str(marker);
    out
}

fn floor_boundary(text: &str, mut at: usize) -> usize {
    at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;
    use nanobot_llm_port::Utf8Bytes;

    #[test]
    fn keeps_the_head_within_budget() {
        let text = "line one\nline two\nline three\n".repeat(20);
        let out = head(&text, 100, "\n... (truncated)", &Utf8Bytes);
        assert!(out.len() <= 100, "{}", out.len());
        assert!(out.ends_with("\n... (truncated)"));
        assert!(text.starts_with(out.trim_end_matches("\n... (truncated)")));
    }

    #[test]
    fn never_cuts_inside_a_character() {
        let text = "日本語のテキスト".repeat(30);
        let out = head(&text, 50, "…", &Utf8Bytes);
        assert!(out.len() <= 50);
    }
}
