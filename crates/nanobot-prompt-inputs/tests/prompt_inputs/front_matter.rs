//! Front matter: nanobot's own skills, nested YAML as PyYAML reads it (checked against the
//! installed nanobot-ai), any text without a panic, bounded nesting, and the fuzz corpus.

use nanobot_bench_workload::testing::{peer_python, run_peer};
use nanobot_prompt_inputs::{
    FrontMatterError, MAX_FRONT_MATTER_DEPTH, check_front_matter, parse_front_matter,
};

#[test]
fn front_matter_of_nanobots_own_skills() {
    let github = "---\nname: github\ndescription: \"Interact with GitHub using the `gh` CLI.\"\nmetadata: {\"nanobot\":{\"emoji\":\"🐙\",\"requires\":{\"bins\":[\"gh\"]}}}\n---\n\n# GitHub Skill\n";
    let (fields, body) = parse_front_matter(github);
    assert_eq!(fields["name"], "github");
    assert_eq!(
        fields["description"],
        "Interact with GitHub using the `gh` CLI."
    );
    assert_eq!(fields["metadata"]["nanobot"]["requires"]["bins"][0], "gh");
    assert_eq!(body, "\n# GitHub Skill\n");
    let (fields, body) = parse_front_matter(
        "---\nname: x\nnested:\n  child: 1\nalways: true\ncount: 3\nquote: 'it''s'\n---\nbody",
    );
    assert_eq!(fields["always"], true);
    assert_eq!(fields["count"], 3);
    assert_eq!(fields["quote"], "it's");
    assert_eq!(fields["nested"], serde_json::json!({"child": 1}));
    assert_eq!(body, "body");
    // No closing line: not front matter.
    let (fields, body) = parse_front_matter("---\nname: x\n");
    assert!(fields.is_empty());
    assert_eq!(body, "---\nname: x\n");
}

/// Front matter written the ways skill authors write YAML, each with what PyYAML's
/// `safe_load` (which nanobot uses) makes of it.
const FRONT_MATTERS: &[(&str, &str)] = &[
    (
        "nested metadata",
        "name: deploy\ndescription: Ship it.\nmetadata:\n  nanobot:\n    always: true\n    requires:\n      bins:\n        - kubectl\n        - helm\n      env: [KUBECONFIG]\n",
    ),
    (
        "folded description",
        "name: long\ndescription: >\n  Summarise long documents\n  into short notes.\n\n  Second paragraph.\nhomepage: https://example.com/a#b\n",
    ),
    (
        "literal and chomping",
        "name: lit\nkeep: |+\n  one\n  two\n\nstrip: |-\n  three\nclip: |\n  four\n",
    ),
    (
        "scalars and comments",
        "name: scal # the name\ncount: 3\nratio: 0.5\nexp: 1e3\nsci: 1.5e+3\nnothing: ~\nempty:\nyes: true\nalways: yes\nflow: {always: on, bins: [gh, 'my tool']}\nquoted: \"a: b\"\nsingle: 'it''s'\n# a comment line\nurl: http://x.y:80/z\n",
    ),
    (
        "sequence of mappings",
        "name: seq\ninstall:\n  - id: brew\n    kind: brew\n    bins: [gh]\n  - id: apt\n    kind: apt\nbins:\n- gh\n- curl\nafter: 1\n",
    ),
    (
        "json metadata",
        "name: github\nmetadata: {\"nanobot\":{\"emoji\":\"🐙\",\"requires\":{\"bins\":[\"gh\"]}}}\n",
    ),
];

#[test]
fn front_matter_reads_nested_yaml() {
    let parse = |yaml: &str| parse_front_matter(&format!("---\n{yaml}---\nbody")).0;
    let nested = parse(FRONT_MATTERS[0].1);
    assert_eq!(nested["metadata"]["nanobot"]["always"], true);
    assert_eq!(
        nested["metadata"]["nanobot"]["requires"]["bins"],
        serde_json::json!(["kubectl", "helm"])
    );
    let folded = parse(FRONT_MATTERS[1].1);
    assert_eq!(
        folded["description"],
        "Summarise long documents into short notes.\nSecond paragraph.\n"
    );
    assert_eq!(folded["homepage"], "https://example.com/a#b");
    let literal = parse(FRONT_MATTERS[2].1);
    assert_eq!(literal["keep"], "one\ntwo\n\n");
    assert_eq!(literal["strip"], "three");
    // The last value of the front matter: nanobot reads it without a final line break.
    assert_eq!(literal["clip"], "four");
    let scalars = parse(FRONT_MATTERS[3].1);
    assert_eq!(scalars["name"], "scal");
    assert_eq!(scalars["nothing"], serde_json::Value::Null);
    assert_eq!(scalars["empty"], serde_json::Value::Null);
    assert_eq!(scalars["quoted"], "a: b");
    assert_eq!(
        scalars["True"], true,
        "YAML 1.1 reads the key `yes` as True"
    );
    assert_eq!(scalars["url"], "http://x.y:80/z");
    let sequence = parse(FRONT_MATTERS[4].1);
    assert_eq!(sequence["install"][0]["bins"][0], "gh");
    assert_eq!(sequence["install"][1]["kind"], "apt");
    assert_eq!(sequence["bins"], serde_json::json!(["gh", "curl"]));
    assert_eq!(sequence["after"], 1);
}

/// Every sample, and the front matter of every skill nanobot-ai ships, reads here as
/// nanobot-ai reads it (`parse_skill_metadata`, PyYAML underneath; `NANOBOT_PEER_PYTHON`).
#[test]
fn front_matter_matches_nanobot_ai() {
    let Some(python) = peer_python("front matter parity test") else {
        return;
    };
    let samples: Vec<String> = FRONT_MATTERS
        .iter()
        .map(|(_, yaml)| format!("---\n{yaml}---\nbody\n"))
        .collect();
    let script = r#"
import json, sys
from pathlib import Path
import nanobot
from nanobot.agent.skills import parse_skill_metadata
texts = json.load(sys.stdin)
texts += [p.read_text(encoding="utf-8") for p in sorted(Path(nanobot.__file__).parent.glob("skills/*/SKILL.md"))]
print(json.dumps([[t, parse_skill_metadata(t)] for t in texts]))
"#;
    let input = serde_json::to_vec(&samples).unwrap();
    let cases: Vec<(String, serde_json::Value)> =
        serde_json::from_value(run_peer(&python, script, &[], Some(&input))).unwrap();
    assert!(
        cases.len() > samples.len() + 5,
        "nanobot-ai's own skills are read too"
    );
    for (text, expected) in cases {
        let (fields, _) = parse_front_matter(&text);
        assert_eq!(
            serde_json::Value::Object(fields),
            expected,
            "{}",
            &text[..text.len().min(200)]
        );
    }
}

/// Front matter is user data: any text parses without a panic.
#[test]
fn front_matter_survives_any_text() {
    const ALPHABET: &[char] = &[
        ' ', ' ', '-', ':', '\n', '\n', '|', '>', '"', '\'', '[', ']', '{', '}', ',', '#', 'a',
        'b', '1', '.', 'e', '+', '\\', '日', '\t', '\r', '~',
    ];
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..5_000 {
        let mut text = String::from("---\n");
        let len = (state % 60) as usize;
        for _ in 0..len {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            text.push(ALPHABET[(state >> 33) as usize % ALPHABET.len()]);
        }
        text.push_str("\n---\nbody");
        let (_, body) = parse_front_matter(&text);
        assert!(text.ends_with(body));
    }
}

/// Issue 12.4: nesting without bound cannot overflow the stack: flow collections and
/// indented blocks deeper than the limit stay text, and the checked parse says why.
#[test]
fn front_matter_nesting_is_bounded() {
    let deep_flow = format!("---\nname: x\nmetadata: {}\n---\nbody", "[".repeat(200_000));
    let (fields, body) = parse_front_matter(&deep_flow);
    assert_eq!(body, "body");
    assert!(fields["metadata"].is_string(), "kept as its text");
    assert_eq!(
        check_front_matter(&deep_flow).unwrap_err(),
        FrontMatterError::TooDeep {
            limit: MAX_FRONT_MATTER_DEPTH
        }
    );
    let closed = format!(
        "---\nmetadata: {}{}\n---\n",
        "[".repeat(100),
        "]".repeat(100)
    );
    assert!(check_front_matter(&closed).is_err());

    let mut deep_block = String::from("---\n");
    for i in 0..300 {
        deep_block.push_str(&" ".repeat(i));
        deep_block.push_str(&format!("k{i}:\n"));
    }
    deep_block.push_str("---\nbody");
    let (fields, body) = parse_front_matter(&deep_block);
    assert_eq!(body, "body");
    assert!(fields.contains_key("k0"));
    assert!(check_front_matter(&deep_block).is_err());

    // Ordinary nesting is untouched.
    let fine = "---\nmetadata: {\"nanobot\": {\"requires\": {\"bins\": [\"git\"]}}}\n---\n";
    let (fields, _) = check_front_matter(fine).unwrap();
    assert_eq!(fields["metadata"]["nanobot"]["requires"]["bins"][0], "git");
}

/// A fuzz finding (the long campaign, seed 20261203, 663,754th execution): a flow mapping
/// whose keys are themselves mappings wrote each key out as JSON, escaping the quotes of the
/// level below at every level: 2^depth bytes, out of memory at a few dozen levels (the input
/// is in the fuzz corpus). PyYAML refuses a collection as a key ("found unhashable key"); the
/// value now stays text.
#[test]
fn collections_as_flow_mapping_keys_leave_the_value_as_text() {
    let nested = format!(
        "---\nname: x\nmeta: {}1: 2{}\n---\nbody",
        "{".repeat(20),
        "}".repeat(20)
    );
    let (fields, body) = parse_front_matter(&nested);
    assert_eq!(body, "body");
    assert!(fields["meta"].is_string(), "{:?}", fields["meta"]);
    for text in ["{[a, b]: 1}", "{{a: 1}: 2}", "{x: {[y]: 1}}"] {
        let (fields, _) = parse_front_matter(&format!("---\nmeta: {text}\n---\n"));
        assert_eq!(fields["meta"], text);
    }
    // Scalar keys are read as before.
    let (fields, _) = parse_front_matter("---\nmeta: {a: 1, 2: b}\n---\n");
    assert_eq!(fields["meta"]["a"], 1);
    assert_eq!(fields["meta"]["2"], "b");
}

/// Every input of the `front_matter` fuzz corpus (`fuzz/corpus/`) reads without a panic.
#[test]
fn the_fuzz_corpus_replays() {
    for (_, data) in nanobot_bench_workload::testing::fuzz_corpus("front_matter") {
        let text = String::from_utf8_lossy(&data).into_owned();
        let (_, body) = parse_front_matter(&text);
        assert!(body.len() <= text.len());
        let _ = check_front_matter(&text);
    }
}
