//! Byte parity with nanobot-ai 0.3.5's `build_system_prompt` on real workspaces, loaded by
//! `nanobot_prompt_inputs::PromptLoader` over file documents: identity for every channel, bootstrap files with their
//! templates, memory, active skills, the skills index (built-in skills included) and the
//! summary. Two documented differences are normalised before comparing: nanobot lists
//! skills in directory order (we sort them), and 0.3.5's "# Current Project" part, which the
//! spec's version does not have, is not produced here.

use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;

use nanobot_bench_workload::testing::{TempDir, peer_python, run_peer};
use nanobot_context_builder::{BuilderConfig, ContextBuilder, Host, Summary, Turn};
use nanobot_llm_port::Cl100kBase;
use nanobot_memory_store::Document;
use serde_json::{Value, json};

const SCRIPT: &str = r#"
import json, platform, sys
from pathlib import Path
from nanobot.agent.context import ContextBuilder
from nanobot.agent.skills import BUILTIN_SKILLS_DIR

spec = json.loads(sys.stdin.read())
builtin = sorted(d.name for d in BUILTIN_SKILLS_DIR.iterdir() if (d / "SKILL.md").is_file())
ctx = ContextBuilder(Path(spec["ws"]), disabled_skills=None if spec["builtin"] else builtin)
prompts = [
    ctx.build_system_prompt(
        channel=case["channel"],
        session_summary=case["summary"],
        include_memory=case["memory"],
    )
    for case in spec["cases"]
]
print(json.dumps({
    "os": platform.system(),
    "machine": platform.machine(),
    "runtime": "Python " + platform.python_version(),
    "builtin_dir": str(BUILTIN_SKILLS_DIR),
    "disabled": [] if spec["builtin"] else builtin,
    "prompts": prompts,
}))
"#;

fn write(root: &Path, relative: &str, text: &str) {
    let path = root.join(relative);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Skill lines sorted within each group, so directory order does not matter.
fn sort_skill_lines(prompt: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut run: Vec<&str> = Vec::new();
    for line in prompt.split('\n') {
        if line.starts_with("- **") {
            run.push(line);
            continue;
        }
        run.sort();
        out.extend(run.drain(..).map(str::to_owned));
        out.push(line.to_owned());
    }
    run.sort();
    out.extend(run.drain(..).map(str::to_owned));
    out.join("\n")
}

struct Case {
    channel: Option<&'static str>,
    summary: Option<Summary>,
    memory: bool,
}

fn compare(python: &str, ws: &Path, builtin: bool, cases: &[Case]) {
    let spec = json!({
        "ws": ws,
        "builtin": builtin,
        "cases": cases.iter().map(|c| json!({
            "channel": c.channel,
            "summary": c.summary.as_ref().map(|s| json!({"text": s.text, "last_active": s.last_active})),
            "memory": c.memory,
        })).collect::<Vec<Value>>(),
    });
    let peer = run_peer(
        python,
        SCRIPT,
        &[] as &[&OsStr],
        Some(spec.to_string().as_bytes()),
    );
    let host = Host::new(
        peer["os"].as_str().unwrap(),
        peer["machine"].as_str().unwrap(),
        peer["runtime"].as_str().unwrap(),
    );
    let builtin_dir = builtin.then(|| Path::new(peer["builtin_dir"].as_str().unwrap()));
    let snapshot = crate::support::load_workspace(ws, builtin_dir);
    let mut config = BuilderConfig::new(host);
    // Without built-ins the peer disables every built-in name, which hides a workspace
    // skill of the same name too; do the same.
    config.disabled_skills = peer["disabled"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_owned())
        .collect();
    let builder = ContextBuilder::new(config, Arc::new(Cl100kBase));
    for (case, expected) in cases.iter().zip(peer["prompts"].as_array().unwrap()) {
        let ours = builder.system_prompt(
            &snapshot,
            &Turn {
                channel: case.channel,
                summary: case.summary.as_ref(),
                exclude_memory: !case.memory,
                ..Turn::default()
            },
        );
        let expected = expected.as_str().unwrap();
        assert_eq!(
            sort_skill_lines(&ours),
            sort_skill_lines(expected),
            "channel {:?}, summary {}, memory {}",
            case.channel,
            case.summary.is_some(),
            case.memory
        );
    }
}

fn channels() -> Vec<Case> {
    [
        None,
        Some("cli"),
        Some("telegram"),
        Some("whatsapp"),
        Some("email"),
        Some("slack"),
    ]
    .into_iter()
    .map(|channel| Case {
        channel,
        summary: None,
        memory: true,
    })
    .collect()
}

#[test]
fn empty_workspace_matches_nanobot() {
    let Some(python) = peer_python("empty_workspace_matches_nanobot") else {
        return;
    };
    let ws = TempDir::new("ctx-parity-empty");
    compare(&python, ws.path(), false, &channels());
    compare(&python, ws.path(), true, &channels()[..2]);
}

#[test]
fn onboarded_workspace_matches_nanobot() {
    let Some(python) = peer_python("onboarded_workspace_matches_nanobot") else {
        return;
    };
    let ws = TempDir::new("ctx-parity-onboarded");
    write(
        ws.path(),
        "AGENTS.md",
        include_str!("../../templates/AGENTS.md"),
    );
    for document in Document::ALL {
        write(ws.path(), document.path(), document.template());
    }
    compare(&python, ws.path(), true, &channels()[..3]);
}

#[test]
fn edited_workspace_with_skills_and_summary_matches_nanobot() {
    let Some(python) = peer_python("edited_workspace_with_skills_and_summary_matches_nanobot")
    else {
        return;
    };
    let ws = TempDir::new("ctx-parity-edited");
    write(ws.path(), "AGENTS.md", "Rules.\n");
    write(
        ws.path(),
        "SOUL.md",
        Document::Soul.legacy_template().unwrap(),
    );
    write(
        ws.path(),
        "USER.md",
        "# User\n\nAda. Likes tea.\n\n---\n\nMore.\n",
    );
    write(
        ws.path(),
        "memory/MEMORY.md",
        "# Long-term Memory\n\n- Ada likes tea.\n",
    );
    write(
        ws.path(),
        "skills/always-on/SKILL.md",
        "---\nname: always-on\ndescription: Always here\nmetadata: {\"nanobot\": {\"always\": true}}\n---\n\n# Always\n\nDo the always thing.\n",
    );
    write(
        ws.path(),
        "skills/needs-tool/SKILL.md",
        "---\nname: needs-tool\ndescription: Needs a tool that is missing.\nmetadata:\n  nanobot:\n    requires:\n      bins: [definitely-missing-binary-xyz]\n      env: [NANOBOT_RS_DEFINITELY_UNSET_VAR]\n---\nbody\n",
    );
    write(
        ws.path(),
        "skills/plain/SKILL.md",
        "No front matter here.\n",
    );
    write(
        ws.path(),
        "skills/weather/SKILL.md",
        "---\nname: weather\ndescription: My own weather\n---\nmine\n",
    );
    write(ws.path(), "TOOLS.md", "never shown\n");
    write(ws.path(), "HEARTBEAT.md", "never shown either\n");
    let summary = Summary {
        text: "- Ada asked about tea.\n- She prefers green.".into(),
        last_active: "2026-08-19T10:00:00.123456".into(),
    };
    let cases = vec![
        Case {
            channel: Some("cli"),
            summary: Some(summary.clone()),
            memory: true,
        },
        Case {
            channel: None,
            summary: Some(Summary {
                text: "(nothing)".into(),
                ..summary.clone()
            }),
            memory: false,
        },
    ];
    compare(&python, ws.path(), false, &cases);
    compare(&python, ws.path(), true, &cases);
}
