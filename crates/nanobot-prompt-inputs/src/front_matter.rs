//! The YAML front matter of a `SKILL.md`, read as far as skills use YAML: nested block
//! mappings and sequences, literal (`|`) and folded (`>`) block scalars, quoted and plain
//! scalars, and JSON-style flow values (`metadata: {"nanobot": {...}}`). Anchors, tags and
//! multi-document streams are not interpreted; such a value stays as its text. The file
//! itself is never rewritten from the parsed form, so nothing is lost.

use std::cell::Cell;

use serde_json::{Map, Value};

/// How deeply blocks and flow collections may nest. Deeper values stay as their text, so
/// a hostile `SKILL.md` (`[[[[…`, or thousands of ever-deeper indented lines) can neither
/// overflow the stack nor build a value whose drop would.
pub const MAX_FRONT_MATTER_DEPTH: usize = 64;

/// Why a front matter was refused by [`check_front_matter`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrontMatterError {
    /// Blocks or flow collections nest deeper than [`MAX_FRONT_MATTER_DEPTH`].
    TooDeep {
        /// The limit.
        limit: usize,
    },
}

impl std::fmt::Display for FrontMatterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrontMatterError::TooDeep { limit } => write!(
                f,
                "the front matter nests deeper than {limit} levels; flatten it (the deeper \
                 values would be read as plain text)"
            ),
        }
    }
}

impl std::error::Error for FrontMatterError {}

thread_local! {
    /// Set when a parse met a value nested past the limit (kept as text).
    static TOO_DEEP: Cell<bool> = const { Cell::new(false) };
}

/// Parses like [`parse_front_matter`], but refuses a front matter nested deeper than
/// [`MAX_FRONT_MATTER_DEPTH`] (what a writer of skills, such as Dream, should check).
pub fn check_front_matter(text: &str) -> Result<(Map<String, Value>, &str), FrontMatterError> {
    TOO_DEEP.with(|flag| flag.set(false));
    let parsed = parse_front_matter(text);
    if TOO_DEEP.with(Cell::take) {
        return Err(FrontMatterError::TooDeep {
            limit: MAX_FRONT_MATTER_DEPTH,
        });
    }
    Ok(parsed)
}

/// The front matter of a `SKILL.md` (the block between a first line `---` and the next
/// `---`) and the body after it. Without a closing `---` there is no front matter and the
/// whole text is the body. Values nested deeper than [`MAX_FRONT_MATTER_DEPTH`] stay as
/// their text.
pub fn parse_front_matter(text: &str) -> (Map<String, Value>, &str) {
    let Some(rest) = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
    else {
        return (Map::new(), text);
    };
    let mut offset = 0;
    let mut lines = Vec::new();
    for line in rest.split_inclusive('\n') {
        offset += line.len();
        let line = line.trim_end_matches(['\n', '\r']);
        if line.trim_end() == "---" {
            let lines = Lines::new(&lines);
            let fields = match parse_block(&lines, 0, lines.len(), 0) {
                Value::Object(fields) => fields,
                _ => Map::new(),
            };
            return (fields, &rest[offset..]);
        }
        lines.push(line);
    }
    (Map::new(), text)
}

/// The front matter's lines with their indentation, comments and blank lines told apart.
struct Lines<'a> {
    text: &'a [&'a str],
    /// How many blocks the parse is inside now.
    depth: Cell<usize>,
}

impl<'a> Lines<'a> {
    fn new(text: &'a [&'a str]) -> Self {
        Lines {
            text,
            depth: Cell::new(0),
        }
    }

    fn len(&self) -> usize {
        self.text.len()
    }

    /// Blank lines and whole-line comments carry no structure.
    fn is_content(&self, index: usize) -> bool {
        let trimmed = self.text[index].trim_start();
        !trimmed.is_empty() && !trimmed.starts_with('#')
    }

    fn indent(&self, index: usize) -> usize {
        let line = self.text[index];
        line.len() - line.trim_start_matches([' ', '\t']).len()
    }

    /// Whether line `index` is a sequence item at `indent` (or deeper, inside one).
    fn item_at(&self, index: usize, end: usize, indent: usize) -> bool {
        index < end
            && (self.indent(index) > indent
                || (self.indent(index) == indent && {
                    let line = self.text[index].trim();
                    line == "-" || line.starts_with("- ")
                }))
    }

    /// The end of the block that starts after `start` and is indented more than `parent`.
    fn block_end(&self, start: usize, end: usize, parent: usize) -> usize {
        (start..end)
            .find(|&i| self.is_content(i) && self.indent(i) <= parent)
            .unwrap_or(end)
    }
}

/// The value of lines `[start, end)`, whose entries sit at `indent` or deeper; past the
/// depth limit, their text.
fn parse_block(lines: &Lines<'_>, start: usize, end: usize, indent: usize) -> Value {
    let Some(first) = (start..end).find(|&i| lines.is_content(i)) else {
        return Value::Null;
    };
    if lines.depth.get() >= MAX_FRONT_MATTER_DEPTH {
        TOO_DEEP.with(|flag| flag.set(true));
        return Value::String(lines.text[first..end].join("\n"));
    }
    lines.depth.set(lines.depth.get() + 1);
    let value = parse_block_at(lines, first, end, indent);
    lines.depth.set(lines.depth.get() - 1);
    value
}

fn parse_block_at(lines: &Lines<'_>, first: usize, end: usize, indent: usize) -> Value {
    let own = lines.indent(first).max(indent);
    if lines.text[first].trim_start().starts_with("- ") || lines.text[first].trim() == "-" {
        parse_sequence(lines, first, end, own)
    } else {
        Value::Object(parse_mapping(lines, first, end, own))
    }
}

fn parse_mapping(lines: &Lines<'_>, start: usize, end: usize, indent: usize) -> Map<String, Value> {
    let mut fields = Map::new();
    let mut i = start;
    while i < end {
        if !lines.is_content(i) || lines.indent(i) != indent {
            i += 1;
            continue;
        }
        let line = lines.text[i].trim();
        let Some((key, value)) = split_key(line) else {
            i += 1;
            continue;
        };
        let next = lines.block_end(i + 1, end, indent);
        if strip_comment(value).is_empty() && lines.item_at(next, end, indent) {
            // `key:` followed by `- item` lines at the key's own indentation.
            let last = (next..end)
                .find(|&j| lines.is_content(j) && !lines.item_at(j, end, indent))
                .unwrap_or(end);
            fields.insert(unquote_key(key), parse_sequence(lines, next, last, indent));
            i = last;
            continue;
        }
        let value = entry_value(lines, value, i + 1, next, indent);
        fields.insert(unquote_key(key), value);
        i = next;
    }
    fields
}

fn parse_sequence(lines: &Lines<'_>, start: usize, end: usize, indent: usize) -> Value {
    let mut items = Vec::new();
    let mut i = start;
    while i < end {
        if !lines.is_content(i) || lines.indent(i) != indent {
            i += 1;
            continue;
        }
        let item = lines.text[i].trim();
        let Some(rest) = item.strip_prefix('-') else {
            i += 1;
            continue;
        };
        let rest = rest.trim_start();
        let next = lines.block_end(i + 1, end, indent);
        if let Some((key, value)) = split_key(rest).filter(|_| !is_flow(rest)) {
            // `- key: value` opens a mapping whose other keys sit under the key.
            let inner = indent + (item.len() - rest.len());
            let mut fields = parse_mapping(lines, i + 1, next, inner);
            let first = entry_value(lines, value, i + 1, next, inner);
            let mut mapping = Map::new();
            mapping.insert(unquote_key(key), first);
            mapping.append(&mut fields);
            items.push(Value::Object(mapping));
        } else if rest.is_empty() {
            items.push(parse_block(lines, i + 1, next, indent + 1));
        } else {
            items.push(entry_value(lines, rest, i + 1, next, indent));
        }
        i = next;
    }
    Value::Array(items)
}

/// The value after `key:`: inline, a block scalar, or the nested block below it.
fn entry_value(lines: &Lines<'_>, inline: &str, start: usize, end: usize, indent: usize) -> Value {
    let inline = strip_comment(inline);
    if let Some(style) = block_scalar_style(inline) {
        return Value::String(block_scalar(lines, start, end, style));
    }
    if inline.is_empty() {
        return parse_block(lines, start, end, indent + 1);
    }
    scalar(inline)
}

/// `key: value` or `key:` (a key ends at the first `: ` or a final `:` outside quotes).
fn split_key(line: &str) -> Option<(&str, &str)> {
    if line.starts_with(['"', '\'']) {
        let quote = line.as_bytes()[0] as char;
        let close = line[1..].find(quote)? + 1;
        let after = line[close + 1..].trim_start();
        let value = after.strip_prefix(':')?;
        return Some((&line[..=close], value.trim()));
    }
    if is_flow(line) {
        return None;
    }
    let bytes = line.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        if b == b':' && (i + 1 == bytes.len() || bytes[i + 1] == b' ' || bytes[i + 1] == b'\t') {
            let key = line[..i].trim();
            return (!key.is_empty()).then(|| (key, line[i + 1..].trim()));
        }
    }
    None
}

fn is_flow(text: &str) -> bool {
    text.starts_with(['{', '['])
}

/// A key as nanobot keys its metadata: `str()` of what PyYAML read (`yes` is `True`).
fn unquote_key(key: &str) -> String {
    match scalar(key) {
        Value::String(text) => text,
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Null => "None".into(),
        other => other.to_string(),
    }
}

/// A plain scalar ends where ` #` starts a comment; quoted and flow values are left whole.
fn strip_comment(text: &str) -> &str {
    if text.starts_with(['"', '\'', '{', '[']) {
        return text.trim();
    }
    match text.find(" #") {
        Some(cut) => text[..cut].trim_end(),
        None => text.trim(),
    }
}

#[derive(Clone, Copy)]
struct BlockStyle {
    folded: bool,
    chomp: Chomp,
}

#[derive(Clone, Copy, PartialEq)]
enum Chomp {
    Clip,
    Strip,
    Keep,
}

fn block_scalar_style(inline: &str) -> Option<BlockStyle> {
    let mut chars = inline.chars();
    let folded = match chars.next()? {
        '|' => false,
        '>' => true,
        _ => return None,
    };
    let mut chomp = Chomp::Clip;
    for c in chars {
        match c {
            '-' => chomp = Chomp::Strip,
            '+' => chomp = Chomp::Keep,
            '1'..='9' => {}
            _ => return None,
        }
    }
    Some(BlockStyle { folded, chomp })
}

/// The text of a `|` or `>` block scalar from lines `[start, end)`.
fn block_scalar(lines: &Lines<'_>, start: usize, end: usize, style: BlockStyle) -> String {
    let body = &lines.text[start..end];
    let indent = body
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start_matches(' ').len())
        .min()
        .unwrap_or(0);
    let content: Vec<&str> = body
        .iter()
        .map(|l| {
            if l.trim().is_empty() {
                ""
            } else {
                &l[indent.min(l.len())..]
            }
        })
        .collect();
    let mut text = String::new();
    if style.folded {
        // Lines join with a space; each blank line stands for one newline.
        for line in &content {
            if line.is_empty() {
                text.push('\n');
            } else {
                if !text.is_empty() && !text.ends_with('\n') {
                    text.push(' ');
                }
                text.push_str(line);
            }
        }
    } else {
        text = content.join("\n");
    }
    let trailing = text.len() - text.trim_end_matches('\n').len();
    text.truncate(text.len() - trailing);
    // nanobot hands PyYAML the front matter without its last line break, so a block
    // scalar that ends the front matter has no final line break of its own.
    let final_break = usize::from(end < lines.len());
    match style.chomp {
        Chomp::Strip => {}
        Chomp::Clip if !text.is_empty() => text.push_str(&"\n".repeat(final_break)),
        Chomp::Clip => {}
        Chomp::Keep => text.push_str(&"\n".repeat(trailing + final_break)),
    }
    text
}

/// A one-line value: JSON-style flow or double-quoted text as JSON, single-quoted text,
/// YAML's null, booleans and numbers, anything else as the text itself.
fn scalar(text: &str) -> Value {
    let text = text.trim();
    if text.starts_with('"') {
        return serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()));
    }
    if text.starts_with(['{', '[']) {
        let json = serde_json::from_str(text).ok().filter(|value| {
            // serde_json allows 128 levels; the front matter's limit holds here too.
            let shallow = depth_of(value) <= MAX_FRONT_MATTER_DEPTH;
            if !shallow {
                TOO_DEEP.with(|flag| flag.set(true));
            }
            shallow
        });
        return json
            .or_else(|| Flow::new(text).whole())
            .unwrap_or_else(|| Value::String(text.to_owned()));
    }
    if let Some(inner) = text.strip_prefix('\'').and_then(|t| t.strip_suffix('\'')) {
        return Value::String(inner.replace("''", "'"));
    }
    // YAML 1.1 as PyYAML resolves it, since nanobot reads skills with PyYAML.
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => {
            return Value::Bool(true);
        }
        "false" | "False" | "FALSE" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => {
            return Value::Bool(false);
        }
        _ => {}
    }
    if let Ok(number) = text.parse::<i64>() {
        return Value::from(number);
    }
    if is_yaml_float(text)
        && let Ok(number) = text.parse::<f64>()
        && let Some(number) = serde_json::Number::from_f64(number)
    {
        return Value::Number(number);
    }
    Value::String(text.to_owned())
}

/// How deeply `value` nests (a scalar is 0), without recursion.
fn depth_of(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0)];
    while let Some((value, depth)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(fields) => Box::new(fields.values()),
            _ => continue,
        };
        deepest = deepest.max(depth + 1);
        stack.extend(children.map(|child| (child, depth + 1)));
    }
    deepest
}

/// PyYAML's float: digits with a decimal point, and an exponent only with its sign.
fn is_yaml_float(text: &str) -> bool {
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => (&unsigned[..at], Some(&unsigned[at + 1..])),
        None => (unsigned, None),
    };
    let Some((whole, fraction)) = mantissa.split_once('.') else {
        return false;
    };
    let digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    (!whole.is_empty() || !fraction.is_empty())
        && digits(whole)
        && digits(fraction)
        && exponent.is_none_or(|e| e.len() > 1 && e.starts_with(['-', '+']) && digits(&e[1..]))
}

/// A YAML flow collection with plain scalars (`[gh, curl]`, `{always: true}`), which JSON
/// does not read.
struct Flow<'a> {
    text: &'a str,
    at: usize,
    depth: usize,
}

impl<'a> Flow<'a> {
    fn new(text: &'a str) -> Self {
        Flow {
            text,
            at: 0,
            depth: 0,
        }
    }

    /// Enters a collection, or fails (the whole value stays text) past the depth limit.
    fn enter(&mut self) -> Option<()> {
        if self.depth >= MAX_FRONT_MATTER_DEPTH {
            TOO_DEEP.with(|flag| flag.set(true));
            return None;
        }
        self.depth += 1;
        self.at += 1;
        Some(())
    }

    /// The value, if the whole text is one.
    fn whole(mut self) -> Option<Value> {
        let value = self.value()?;
        self.skip_space();
        (self.at == self.text.len()).then_some(value)
    }

    fn skip_space(&mut self) {
        let rest = &self.text[self.at..];
        self.at += rest.len() - rest.trim_start().len();
    }

    fn peek(&self) -> Option<char> {
        self.text[self.at..].chars().next()
    }

    fn value(&mut self) -> Option<Value> {
        self.skip_space();
        match self.peek()? {
            '[' => {
                self.enter()?;
                let mut items = Vec::new();
                loop {
                    self.skip_space();
                    if self.peek()? == ']' {
                        self.at += 1;
                        self.depth -= 1;
                        return Some(Value::Array(items));
                    }
                    items.push(self.value()?);
                    self.separator(']')?;
                }
            }
            '{' => {
                self.enter()?;
                let mut fields = Map::new();
                loop {
                    self.skip_space();
                    if self.peek()? == '}' {
                        self.at += 1;
                        self.depth -= 1;
                        return Some(Value::Object(fields));
                    }
                    let key = match self.value()? {
                        Value::String(key) => key,
                        // PyYAML refuses a collection as a key ("found unhashable key"), and
                        // so does this reader: the value stays text. Writing the collection
                        // out as the key instead escaped the quotes of the level below at
                        // every level, 2^depth bytes (found by fuzzing: out of memory).
                        Value::Array(_) | Value::Object(_) => return None,
                        other => other.to_string(),
                    };
                    self.skip_space();
                    let value = if self.peek()? == ':' {
                        self.at += 1;
                        self.value()?
                    } else {
                        Value::Null
                    };
                    fields.insert(key, value);
                    self.separator('}')?;
                }
            }
            '"' | '\'' => self.quoted(),
            _ => {
                let rest = &self.text[self.at..];
                let end = rest
                    .char_indices()
                    .find(|&(i, c)| {
                        matches!(c, ',' | ']' | '}')
                            || (c == ':' && rest[i + 1..].starts_with([' ', ',', ']', '}']))
                            || (c == ':' && i + 1 == rest.len())
                    })
                    .map_or(rest.len(), |(i, _)| i);
                self.at += end;
                Some(scalar(&rest[..end]))
            }
        }
    }

    /// After an item: a comma, or the closing bracket (left for the caller).
    fn separator(&mut self, close: char) -> Option<()> {
        self.skip_space();
        match self.peek()? {
            ',' => {
                self.at += 1;
                Some(())
            }
            c if c == close => Some(()),
            _ => None,
        }
    }

    fn quoted(&mut self) -> Option<Value> {
        let rest = &self.text[self.at..];
        let quote = rest.chars().next()?;
        let mut end = 1;
        let bytes = rest.as_bytes();
        while end < bytes.len() {
            if bytes[end] == quote as u8 {
                if quote == '\'' && bytes.get(end + 1) == Some(&b'\'') {
                    end += 2;
                    continue;
                }
                break;
            }
            if quote == '"' && bytes[end] == b'\\' {
                end += 1;
            }
            end += 1;
        }
        let literal = rest.get(..=end)?;
        self.at += literal.len();
        Some(scalar(literal))
    }
}
