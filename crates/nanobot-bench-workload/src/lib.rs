#![doc = include_str!("../README.md")]

use serde_json::{Map, Value, json};

pub mod testing;

/// The seed every workload derives its inputs from (`workload.md`, section 2).
pub const SEED: u64 = 42;

/// English words; each is emitted followed by one ASCII space.
pub const EN: [&str; 64] = [
    "the",
    "session",
    "memory",
    "agent",
    "tool",
    "file",
    "history",
    "token",
    "budget",
    "context",
    "summary",
    "message",
    "user",
    "assistant",
    "please",
    "check",
    "update",
    "config",
    "error",
    "result",
    "value",
    "run",
    "build",
    "test",
    "deploy",
    "server",
    "client",
    "request",
    "response",
    "cache",
    "index",
    "query",
    "search",
    "write",
    "read",
    "append",
    "save",
    "load",
    "list",
    "path",
    "module",
    "function",
    "return",
    "string",
    "number",
    "json",
    "line",
    "async",
    "await",
    "python",
    "rust",
    "fast",
    "slow",
    "large",
    "small",
    "today",
    "tomorrow",
    "because",
    "however",
    "maybe",
    "done",
    "workspace",
    "provider",
    "model",
];

/// Chinese phrases, emitted without a separator.
pub const ZH: [&str; 32] = [
    "我们",
    "需要",
    "检查",
    "会话",
    "记忆",
    "文件",
    "历史",
    "工具",
    "结果",
    "配置",
    "错误",
    "更新",
    "今天",
    "明天",
    "因为",
    "但是",
    "可能",
    "完成",
    "用户",
    "助手",
    "消息",
    "上下文",
    "摘要",
    "性能",
    "测试",
    "部署",
    "服务器",
    "请求",
    "响应",
    "缓存",
    "搜索",
    "读取",
];

/// Punctuation pieces, exact strings (newlines and quotes exercise JSON escaping).
pub const PUNCT: [&str; 9] = [", ", ". ", "，", "。", "？", "！", "\n", ": ", "\"ok\" "];

/// Tool names used by the generated tool rounds and tool definitions.
pub const TOOL_NAMES: [&str; 5] = ["read_file", "exec", "web_search", "grep", "list_dir"];

/// SplitMix64 (Steele, Lea, Flood 2014), all arithmetic modulo 2^64.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// `next_u64() % n`: plain modulo, no rejection, exactly as the peer draws.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        // The lists are tiny, so the index always fits.
        items[self.below(items.len() as u64) as usize]
    }
}

/// Mixed English and Chinese text of exactly `length` Unicode code points.
/// Without `punct` the punctuation branch is folded into the Chinese one.
pub fn gen_text(rng: &mut SplitMix64, length: usize, punct: bool) -> String {
    let mut text = String::new();
    let mut count = 0;
    while count < length {
        let roll = rng.below(100);
        let before = text.len();
        if roll < 60 {
            text.push_str(rng.pick(&EN));
            text.push(' ');
        } else if roll < 92 || !punct {
            text.push_str(rng.pick(&ZH));
        } else {
            text.push_str(rng.pick(&PUNCT));
        }
        count += text[before..].chars().count();
    }
    match text.char_indices().nth(length) {
        Some((cut, _)) => text[..cut].to_owned(),
        None => text,
    }
}

/// `n` message specs (role, content and the extra keys of tool rounds), in the peer's draw
/// order: a user turn, with probability 1/4 a tool call and its result, then an answer.
pub fn message_stream(seed: u64, n: usize) -> Vec<Value> {
    let mut rng = SplitMix64::new(seed);
    let mut out = Vec::with_capacity(n + 3);
    while out.len() < n {
        let length = 240 + rng.below(121) as usize;
        out.push(json!({"role": "user", "content": gen_text(&mut rng, length, true)}));
        if rng.below(4) == 0 {
            let call_id = format!("call_{:016x}", rng.next_u64());
            let name = rng.pick(&TOOL_NAMES);
            let module = rng.below(100);
            let query = gen_text(&mut rng, 40, false);
            let arguments = format!(r#"{{"path": "src/module_{module}.py", "query": "{query}"}}"#);
            out.push(json!({
                "role": "assistant",
                "content": "",
                "tool_calls": [{
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }],
            }));
            let length = 400 + rng.below(401) as usize;
            out.push(json!({
                "role": "tool",
                "content": gen_text(&mut rng, length, true),
                "tool_call_id": call_id,
                "name": name,
            }));
        }
        let length = 240 + rng.below(121) as usize;
        out.push(json!({"role": "assistant", "content": gen_text(&mut rng, length, true)}));
    }
    out.truncate(n);
    out
}

/// History journal entries: one generator, `400..=600` code points each.
pub fn history_entries(seed: u64, n: usize) -> Vec<String> {
    let mut rng = SplitMix64::new(seed);
    (0..n)
        .map(|_| {
            let length = 400 + rng.below(201) as usize;
            gen_text(&mut rng, length, true)
        })
        .collect()
}

/// The fake LLM's summary text (1,500 code points).
pub fn fake_summary(seed: u64) -> String {
    gen_text(&mut SplitMix64::new(seed + 2), 1500, true)
}

/// MEMORY.md of at most `max_bytes` UTF-8 bytes, cut at a code-point boundary.
pub fn memory_md(seed: u64, max_bytes: usize) -> String {
    let mut text = gen_text(&mut SplitMix64::new(seed + 3), max_bytes, true);
    let mut cut = text.len().min(max_bytes);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text
}

/// The current user message of the prompt-assembly workload (300 code points).
pub fn current_message(seed: u64) -> String {
    gen_text(&mut SplitMix64::new(seed + 5), 300, true)
}

/// Five OpenAI-style function tools, one per [`TOOL_NAMES`] entry.
pub fn tool_definitions() -> Vec<Value> {
    TOOL_NAMES
        .iter()
        .map(|name| {
            json!({
                "type": "function",
                "function": {
                    "name": name,
                    "description": format!("Benchmark stand-in for the {name} tool."),
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "path": {"type": "string", "description": "Workspace-relative path."},
                            "query": {"type": "string", "description": "Free-text argument."},
                        },
                        "required": ["path"],
                    },
                },
            })
        })
        .collect()
}

/// The canonical JSONL of section 2.6: sorted keys, compact separators, raw UTF-8, one
/// line per spec. Its SHA-256 proves a replay generates the peer's bytes.
pub fn canonical_jsonl(stream: &[Value]) -> String {
    let mut out = String::new();
    for spec in stream {
        out.push_str(&sorted(spec).to_string());
        out.push('\n');
    }
    out
}

fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let mut out = Map::new();
            for key in keys {
                out.insert(key.clone(), sorted(&map[key]));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// One random kind of damage a crash or a careless edit does to a file: a cut at a random
/// byte, up to 12 bytes overwritten with random bytes, or up to 20 bytes of JSON-ish
/// garbage (newlines and invalid UTF-8 included) inserted. For the readers' damage tests.
pub fn damage(rng: &mut SplitMix64, original: &[u8]) -> Vec<u8> {
    const GARBAGE: &[u8] = b"{}\"\n:,0x\xff\xc3a";
    let mut bytes = original.to_vec();
    if bytes.is_empty() {
        return bytes;
    }
    let at = rng.below(bytes.len() as u64) as usize;
    match rng.below(3) {
        0 => bytes.truncate(at),
        1 => {
            let len = (1 + rng.below(12) as usize).min(bytes.len() - at);
            for byte in &mut bytes[at..at + len] {
                *byte = rng.below(256) as u8;
            }
        }
        _ => {
            let garbage: Vec<u8> = (0..1 + rng.below(20))
                .map(|_| GARBAGE[rng.below(GARBAGE.len() as u64) as usize])
                .collect();
            bytes.splice(at..at, garbage);
        }
    }
    bytes
}

/// Whether `needle` occurs in `haystack` (an empty needle always does).
pub fn contains_bytes(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}
