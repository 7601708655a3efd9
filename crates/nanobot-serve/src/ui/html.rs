//! HTML built so that memory text can never become markup: tag and attribute names are
//! `&'static str` written in this crate, and every text and attribute value passes through
//! [`escape`]. There is no way to put a runtime string into a page unescaped.

use std::fmt::Write as _;

/// A piece of a page, always well-formed and escaped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Markup(String);

impl Markup {
    /// Nothing.
    pub(crate) fn empty() -> Markup {
        Markup(String::new())
    }

    /// `text`, escaped.
    pub(crate) fn text(text: &str) -> Markup {
        Markup(escape(text))
    }

    /// This, then `more`.
    pub(crate) fn then(mut self, more: Markup) -> Markup {
        self.0.push_str(&more.0);
        self
    }

    /// The pieces one after another.
    pub(crate) fn join(pieces: impl IntoIterator<Item = Markup>) -> Markup {
        let mut out = String::new();
        for piece in pieces {
            out.push_str(&piece.0);
        }
        Markup(out)
    }

    /// The page's text.
    pub(crate) fn into_string(self) -> String {
        self.0
    }
}

/// `<tag attrs>children</tag>`.
pub(crate) fn el(tag: &'static str, attrs: &[(&'static str, &str)], children: Markup) -> Markup {
    let mut out = open(tag, attrs);
    out.push_str(&children.0);
    let _ = write!(out, "</{tag}>");
    Markup(out)
}

/// `<tag attrs>` with no closing tag (`input`, `meta`, `link`).
pub(crate) fn void(tag: &'static str, attrs: &[(&'static str, &str)]) -> Markup {
    Markup(open(tag, attrs))
}

/// `<tag>text</tag>`, the text escaped.
pub(crate) fn tag_text(tag: &'static str, text: &str) -> Markup {
    el(tag, &[], Markup::text(text))
}

/// A link to `href` (built from our own routes and escaped) showing `text`.
pub(crate) fn link(href: &str, text: &str) -> Markup {
    el("a", &[("href", href)], Markup::text(text))
}

fn open(tag: &'static str, attrs: &[(&'static str, &str)]) -> String {
    let mut out = format!("<{tag}");
    for (name, value) in attrs {
        let _ = write!(out, " {name}=\"{}\"", escape(value));
    }
    out.push('>');
    out
}

/// Text safe in an element and in a quoted attribute.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `value` for a URL query (RFC 3986 unreserved characters kept, the rest percent-encoded).
pub(crate) fn query_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}
