//! The acceptance cases of `../shared/spec/context.md` section 5 that concern building
//! (cases 1–48; replay, 50–55, is session-store's; governance, 56–62, belongs to the turn
//! loop). Whole prompts are insta snapshots, redacted with the crate's own helper.

use std::collections::BTreeSet;

use nanobot_context_builder::snapshot::render;
use nanobot_context_builder::{
    Appended, BuilderConfig, CurrentMessage, Host, Omission, Part, RuntimeBlock, Summary, Turn,
    WorkspaceSnapshot,
};
use nanobot_llm_port::{Content, ContentPart, Message};
use nanobot_memory_store::Document;

use crate::support::{builder, builder_with, entry, host, parts, skill, workspace};

const AGENTS_TEMPLATE: &str = include_str!("../../templates/AGENTS.md");

fn full_workspace() -> WorkspaceSnapshot {
    WorkspaceSnapshot {
        agents_md: Some("Rules.\n".into()),
        soul_md: Some("Soul.\n".into()),
        user_md: Some("Ada, likes tea.\n".into()),
        memory_md: Some("# Long-term Memory\n\n- Ada likes tea.\n".into()),
        skills: vec![
            skill(
                "always-on",
                "---\nname: always-on\ndescription: Always here\nmetadata: {\"nanobot\": {\"always\": true}}\n---\n\nDo the always thing.\n",
            ),
            skill(
                "review",
                "---\nname: review\ndescription: Review code\n---\n\nReview carefully.\n",
            ),
        ],
        ..workspace()
    }
}

fn summary() -> Summary {
    Summary {
        text: "S".into(),
        last_active: "2026-08-19T10:00:00".into(),
    }
}

// 1 (E): an empty workspace gives identity, tool contract and (with a skill) the index.
#[test]
fn case_01_empty_workspace() {
    let ws = WorkspaceSnapshot {
        skills: vec![skill(
            "weather",
            "---\nname: weather\ndescription: Weather\n---\nx",
        )],
        ..workspace()
    };
    let prompt = builder().build(&ws, &Turn::default()).unwrap();
    let system = prompt.system_prompt();
    let p = parts(system);
    assert_eq!(p.len(), 3);
    assert!(p[0].starts_with("## Runtime"));
    assert!(p[1].starts_with("# Tool Usage Notes"));
    assert!(p[2].starts_with("# Skills"));
    for absent in [
        "## AGENTS.md",
        "# Memory",
        "# Active Skills",
        "# Recent History",
        "[Archived Context Summary]",
    ] {
        assert!(!system.contains(absent), "{absent}");
    }
    insta::assert_snapshot!(render(&prompt));
}

// A client's instructions (an API caller's system message) go right after the stable
// prefix: the prefix, and so its cache, is the same with or without them.
#[test]
fn client_instructions_follow_the_stable_prefix() {
    let ws = full_workspace();
    let journal = [entry(1, Some("cli:ada"), "Ada asked about tea.")];
    let s = summary();
    let plain = Turn {
        channel: Some("api"),
        session_key: Some("api:ada"),
        summary: Some(&s),
        journal: &journal,
        current: Some(CurrentMessage::user("hello")),
        ..Turn::default()
    };
    let with = Turn {
        instructions: Some("  Answer in French.\n"),
        ..plain.clone()
    };
    let b = builder();
    let without = b.build(&ws, &plain).unwrap();
    let prompt = b.build(&ws, &with).unwrap();
    assert_eq!(
        prompt.report.stable_prefix_hash,
        without.report.stable_prefix_hash
    );
    let system = prompt.system_prompt();
    let (stable, rest) = prompt.system_split();
    assert_eq!(stable, without.system_split().0);
    assert!(
        rest.starts_with("\n\n---\n\n# Instructions from the client\n\n"),
        "{rest}"
    );
    assert!(system.contains("sent these instructions with this request:\n\nAnswer in French.\n\n---\n\n[Archived Context Summary]"), "{system}");
    assert!(prompt.report.tokens(Part::Instructions) > 0);
    assert_eq!(without.report.tokens(Part::Instructions), 0);
    assert!(
        !without
            .system_prompt()
            .contains("Instructions from the client")
    );
    // Blank instructions are none.
    let blank = Turn {
        instructions: Some(" \n "),
        ..plain.clone()
    };
    assert_eq!(b.build(&ws, &blank).unwrap(), without);
}

// 2 (E) and 3 (E): every part, in order, and the same bytes every time.
#[test]
fn case_02_03_every_part_in_order_and_deterministic() {
    let ws = full_workspace();
    let journal = [entry(1, Some("cli:ada"), "Ada asked about tea.")];
    let s = summary();
    let turn = Turn {
        channel: Some("telegram"),
        session_key: Some("cli:ada"),
        summary: Some(&s),
        journal: &journal,
        current: Some(CurrentMessage::user("hello")),
        ..Turn::default()
    };
    let b = builder();
    let prompt = b.build(&ws, &turn).unwrap();
    let system = prompt.system_prompt();
    let heads: Vec<&str> = parts(system)
        .iter()
        .map(|p| p.lines().next().unwrap())
        .collect();
    assert_eq!(
        heads,
        [
            "## Runtime",
            "## AGENTS.md",
            "# Tool Usage Notes",
            "# Memory",
            "# Active Skills",
            "# Skills",
            "# Recent History",
            "[Archived Context Summary]"
        ]
    );
    let reported: Vec<Part> = prompt.report.parts.iter().map(|p| p.part).collect();
    let without_instructions: Vec<Part> = Part::SYSTEM
        .into_iter()
        .filter(|p| *p != Part::Instructions)
        .collect();
    assert_eq!(&reported[..8], &without_instructions[..]);
    // A second builder (cold memo) and the same builder again give the same bytes.
    assert_eq!(builder().build(&ws, &turn).unwrap(), prompt);
    assert_eq!(b.build(&ws, &turn).unwrap(), prompt);
    insta::assert_snapshot!(render(&prompt));
}

// 4 (E): a freshly onboarded workspace shows only SOUL.md of its files.
#[test]
fn case_04_onboarded_workspace() {
    let ws = WorkspaceSnapshot {
        agents_md: Some(AGENTS_TEMPLATE.into()),
        soul_md: Some(Document::Soul.template().into()),
        user_md: Some(Document::User.template().into()),
        memory_md: Some(Document::Memory.template().into()),
        ..workspace()
    };
    let prompt = builder().build(&ws, &Turn::default()).unwrap();
    let system = prompt.system_prompt();
    assert!(system.contains("## SOUL.md"));
    for absent in ["## AGENTS.md", "## USER.md", "# Memory", "(your name)"] {
        assert!(!system.contains(absent), "{absent}");
    }
    assert!(
        prompt
            .report
            .omitted
            .contains(&(Part::Memory, Omission::Template))
    );
    insta::assert_snapshot!(system);
}

// 5 (E), 6 (E): workspace bullets, relative or absolute; the project is never named.
#[test]
fn case_05_06_workspace_paths() {
    let same = builder().system_prompt(&workspace(), &Turn::default());
    assert!(same.contains("- Custom skills: skills/{skill-name}/SKILL.md"));
    assert!(!same.contains("/home/ada"));
    let ws = WorkspaceSnapshot {
        project_dir: Some("/srv/project".into()),
        ..workspace()
    };
    let other = builder().system_prompt(&ws, &Turn::default());
    assert!(other.contains("Nanobot's agent workspace is at: /home/ada/.nanobot/workspace\n"));
    assert!(other.contains("- Long-term memory: /home/ada/.nanobot/workspace/memory/MEMORY.md"));
    assert!(!other.contains("/srv/project"));
}

// 7 (E), 8 (E): the format hint per channel, and its exact whitespace.
#[test]
fn case_07_08_format_hints() {
    let hint = |channel: &str| -> Option<String> {
        let system = builder().system_prompt(
            &workspace(),
            &Turn {
                channel: Some(channel),
                ..Turn::default()
            },
        );
        let identity = parts(&system)[0].to_owned();
        assert!(!identity.ends_with('\n'));
        identity
            .split("## Format Hint\n")
            .nth(1)
            .map(|rest| rest.lines().next().unwrap().to_owned())
    };
    for channel in ["telegram", "qq", "discord"] {
        assert!(
            hint(channel)
                .unwrap()
                .starts_with("This conversation is on a messaging app.")
        );
    }
    for channel in ["whatsapp", "sms"] {
        assert!(hint(channel).unwrap().ends_with("Use plain text only."));
    }
    assert!(
        hint("email")
            .unwrap()
            .starts_with("This conversation is via email.")
    );
    for channel in ["cli", "mochat"] {
        assert!(
            hint(channel)
                .unwrap()
                .starts_with("Output is rendered in a terminal.")
        );
    }
    for channel in ["slack", "feishu", "websocket", ""] {
        assert_eq!(hint(channel), None, "{channel}");
    }
    let plain = builder().system_prompt(&workspace(), &Turn::default());
    assert!(plain.contains("shell commands.\n\n\n## External Content\n\n"));
    let cli = builder().system_prompt(
        &workspace(),
        &Turn {
            channel: Some("cli"),
            ..Turn::default()
        },
    );
    assert!(cli.contains("shell commands.\n\n## Format Hint\nOutput is rendered in a terminal. Avoid markdown headings and tables. Use plain text with minimal formatting.\n\n## External Content\n\n"));
}

// 9: the Windows policy and macOS's name.
#[test]
fn case_09_windows_and_macos() {
    let windows = builder_with(BuilderConfig::new(Host::new("Windows", "AMD64", "r")))
        .system_prompt(&workspace(), &Turn::default());
    let policy = windows
        .split("## Platform Policy (Windows)\n")
        .nth(1)
        .unwrap()
        .split("\n\n")
        .next()
        .unwrap();
    assert_eq!(policy.lines().filter(|l| l.starts_with("- ")).count(), 3);
    assert!(policy.starts_with("- You are running on Windows."));
    let mac = builder_with(BuilderConfig::new(Host::new("Darwin", "arm64", "r")))
        .system_prompt(&workspace(), &Turn::default());
    assert!(mac.starts_with("## Runtime\nmacOS arm64, r\n"));
}

// 12 (E), 13, 14, 15: templates, the legacy SOUL.md, whitespace-only files, exact bytes.
#[test]
fn case_12_to_15_bootstrap_files() {
    let b = builder();
    let system = |ws: &WorkspaceSnapshot| b.system_prompt(ws, &Turn::default());

    let templates = WorkspaceSnapshot {
        agents_md: Some(format!("\n{AGENTS_TEMPLATE}\n\n")),
        user_md: Some(format!("  {}", Document::User.template())),
        soul_md: Some(Document::Soul.template().into()),
        ..workspace()
    };
    let text = system(&templates);
    assert!(!text.contains("## AGENTS.md") && !text.contains("## USER.md"));
    assert!(text.contains("## SOUL.md"));

    let legacy = WorkspaceSnapshot {
        soul_md: Some(Document::Soul.legacy_template().unwrap().into()),
        ..workspace()
    };
    let text = system(&legacy);
    assert!(text.contains(Document::Soul.template()));
    assert!(!text.contains("Execution Rules"));

    let blank = WorkspaceSnapshot {
        agents_md: Some(" \n\t\n".into()),
        ..workspace()
    };
    assert!(!system(&blank).contains("## AGENTS.md"));

    let two = WorkspaceSnapshot {
        agents_md: Some("Rules.\n".into()),
        soul_md: Some("Soul.\n".into()),
        ..workspace()
    };
    assert_eq!(
        parts(&system(&two))[1],
        "## AGENTS.md\n\nRules.\n\n\n## SOUL.md\n\nSoul.\n"
    );
}

// 17 (E): the tool contract, verbatim, exactly once, even in an empty workspace.
#[test]
fn case_17_tool_contract_once() {
    let contract = include_str!("../../templates/tool_contract.md").trim_end_matches('\n');
    let system = builder().system_prompt(&full_workspace(), &Turn::default());
    assert_eq!(system.matches(contract).count(), 1);
    let empty = builder().system_prompt(&workspace(), &Turn::default());
    assert_eq!(parts(&empty)[1], contract);
}

// 18 (E), 19 (E), 20, 21: the memory part.
#[test]
fn case_18_to_21_memory() {
    let b = builder();
    let with_memory = |memory: &str, exclude: bool| {
        let ws = WorkspaceSnapshot {
            memory_md: Some(memory.into()),
            soul_md: Some("Soul.\n".into()),
            ..workspace()
        };
        b.build(
            &ws,
            &Turn {
                exclude_memory: exclude,
                ..Turn::default()
            },
        )
        .unwrap()
    };
    let template = with_memory(Document::Memory.template(), false);
    assert!(!template.system_prompt().contains("# Memory"));

    let file = "# Long-term Memory\n\n- Ada likes tea.\n";
    let shown = with_memory(file, false);
    assert_eq!(
        parts(shown.system_prompt())[3],
        format!("# Memory\n\n## Long-term Memory\n{file}")
    );

    let excluded = with_memory(file, true);
    assert!(!excluded.system_prompt().contains("# Memory"));
    assert!(excluded.system_prompt().contains("## SOUL.md"));
    assert!(
        excluded
            .report
            .omitted
            .contains(&(Part::Memory, Omission::Disabled))
    );

    // Departure: a whitespace-only MEMORY.md adds no empty part (nanobot-ai adds one).
    let blank = with_memory("\n", false);
    assert!(!blank.system_prompt().contains("# Memory"));
}

// Improvement: MEMORY.md and bootstrap files are capped, with a visible marker.
#[test]
fn oversized_files_are_cut_with_a_marker() {
    let mut config = BuilderConfig::new(host());
    config.limits.memory_tokens = 200;
    config.limits.bootstrap_file_tokens = 100;
    let b = builder_with(config);
    let memory: String = (0..400).map(|i| format!("- fact number {i}\n")).collect();
    let ws = WorkspaceSnapshot {
        memory_md: Some(memory.clone()),
        soul_md: Some("voice ".repeat(500)),
        ..workspace()
    };
    let prompt = b.build(&ws, &Turn::default()).unwrap();
    let cuts: Vec<(&str, usize)> = prompt
        .report
        .truncations
        .iter()
        .map(|t| (t.file, t.cap))
        .collect();
    assert_eq!(cuts, [("SOUL.md", 100), ("MEMORY.md", 200)]);
    let memory_part = parts(prompt.system_prompt())[3];
    assert!(memory_part.contains("- fact number 0\n"));
    assert!(memory_part.ends_with("[... MEMORY.md is cut here: it is over its 200-token limit in the prompt; read the file for the rest.]"));
    let header = nanobot_llm_port::TokenCounter::count(
        &nanobot_llm_port::Cl100kBase,
        "# Memory\n\n## Long-term Memory\n",
    );
    assert!(prompt.report.tokens(Part::Memory) <= 200 + header + 1);
    // The cut ends at a line end.
    assert!(
        memory_part.contains("\n\n\n[... MEMORY.md") || memory_part.contains("\n\n[... MEMORY.md")
    );
}

// 22 (E), 23, 24 (E), 26, 27, 28: skills.
#[test]
fn case_22_to_28_skills() {
    let ws = WorkspaceSnapshot {
        skills: vec![
            skill(
                "a",
                "---\nname: a\nmetadata: {\"nanobot\": {\"always\": true}}\n---\n\nBody of a.\n",
            ),
            skill(
                "b",
                "---\nname: b\ndescription: >\n  Folded\n  text\nmetadata: {\"nanobot\": {\"always\": true, \"requires\": {\"bins\": [\"missing-bin\"]}}}\n---\nx",
            ),
            skill("c", "---\nname: c\n---\nno description"),
            skill("d", "---\nname: d\ndescription: Dee\n---\nx"),
        ],
        ..workspace()
    };
    let system = builder().system_prompt(&ws, &Turn::default());
    let p = parts(&system);
    assert_eq!(p[2], "# Active Skills\n\n### Skill: a\n\nBody of a.");
    assert_eq!(
        p[3],
        "# Skills\n\nThe following skills extend your capabilities. Each group lists one root and relative SKILL.md paths; join them when using `read_file`.\n\n\
         ### Workspace skills (`skills`)\n\
         - **b** — Folded text (unavailable: CLI: missing-bin)  `b/SKILL.md`\n\
         - **c** — c  `c/SKILL.md`\n\
         - **d** — Dee  `d/SKILL.md`"
    );

    let mut config = BuilderConfig::new(host());
    config.disabled_skills = BTreeSet::from(["a".to_owned(), "d".to_owned()]);
    let disabled = builder_with(config);
    let prompt = disabled
        .build(
            &ws,
            &Turn {
                current: Some(CurrentMessage::user("try $d")),
                ..Turn::default()
            },
        )
        .unwrap();
    let system = prompt.system_prompt();
    assert!(!system.contains("# Active Skills") && !system.contains("**d**"));
    assert!(prompt.runtime_context.is_none());

    let project = WorkspaceSnapshot {
        project_dir: Some("/srv/project".into()),
        builtin_skills_dir: Some("/opt/nanobot/skills".into()),
        skills: vec![
            skill("mine", "---\ndescription: Mine\n---\nx"),
            std::sync::Arc::new(nanobot_prompt_inputs::SkillFile::parse(
                "weather",
                nanobot_prompt_inputs::SkillSource::BuiltIn,
                "---\ndescription: Weather\n---\nx",
                &crate::support::Probe,
            )),
        ],
        ..workspace()
    };
    let system = builder().system_prompt(&project, &Turn::default());
    assert!(system.ends_with(
        "### Workspace skills (`/home/ada/.nanobot/workspace/skills`)\n- **mine** — Mine  `mine/SKILL.md`\n\n\
         ### Built-in skills (`/opt/nanobot/skills`)\n- **weather** — Weather  `weather/SKILL.md`"
    ));
    assert!(!system.contains("/srv/project"));
}

// 30 (E), 31 (E), 32, 33 (E), 35, 36: Recent History.
#[test]
fn case_30_to_36_recent_history() {
    let b = builder();
    let recent = |journal: &[nanobot_context_builder::JournalEntry],
                  key: Option<&str>,
                  b: &nanobot_context_builder::ContextBuilder| {
        let system = b.system_prompt(
            &workspace(),
            &Turn {
                session_key: key,
                journal,
                ..Turn::default()
            },
        );
        parts(&system)
            .iter()
            .find(|p| p.starts_with("# Recent History"))
            .map(|p| (*p).to_owned())
    };
    let two = [entry(1, Some("cli:a"), "e1"), entry(2, Some("cli:a"), "e2")];
    assert_eq!(
        recent(&two, Some("cli:a"), &b).unwrap(),
        "# Recent History\n\n- [2026-08-19 10:01] e1\n- [2026-08-19 10:02] e2"
    );

    let mixed = [
        entry(1, Some("cli:a"), "mine"),
        entry(2, Some("telegram:b"), "other channel"),
        entry(3, None, "keyless"),
        entry(4, Some("cron:x"), "cron"),
        entry(5, Some("dream:y"), "dream"),
        entry(6, Some("heartbeat"), "heartbeat"),
    ];
    let own = recent(&mixed, Some("cli:a"), &b).unwrap();
    assert!(own.contains("mine") && !own.contains("other channel") && !own.contains("keyless"));

    let mut config = BuilderConfig::new(host());
    config.unified_session = true;
    let unified = recent(&mixed, Some("cli:a"), &builder_with(config)).unwrap();
    for shown in ["mine", "other channel", "keyless"] {
        assert!(unified.contains(shown), "{shown}");
    }
    for hidden in ["cron", "] dream", "] heartbeat"] {
        assert!(!unified.contains(hidden), "{hidden}");
    }

    let seventy: Vec<_> = (0..70)
        .map(|i| entry(i, Some("k"), &format!("entry-{i}")))
        .collect();
    let text = recent(&seventy, Some("k"), &b).unwrap();
    assert!(!text.contains("entry-19\n") && !text.contains("] entry-0\n"));
    assert!(text.contains("] entry-20\n") && text.ends_with("] entry-69"));

    assert_eq!(recent(&[], Some("k"), &b), None);
    let excluded = b.build(
        &workspace(),
        &Turn {
            journal: &two,
            exclude_recent_history: true,
            ..Turn::default()
        },
    );
    assert!(
        !excluded
            .unwrap()
            .system_prompt()
            .contains("# Recent History")
    );

    // Improvement: continuation lines of an entry are indented under it.
    let multi = [entry(1, None, "- fact one\n- fact two\n\nend")];
    assert_eq!(
        recent(&multi, None, &b).unwrap(),
        "# Recent History\n\n- [2026-08-19 10:01] - fact one\n  - fact two\n\n  end"
    );
}

// 34 (E): over the budget, the NEWEST entries survive, whole (nanobot-ai keeps the oldest).
#[test]
fn case_34_newest_history_survives() {
    let journal: Vec<_> = (0..50)
        .map(|i| entry(i, Some("k"), &format!("entry-{i} {}", "word ".repeat(300))))
        .collect();
    let prompt = builder()
        .build(
            &workspace(),
            &Turn {
                session_key: Some("k"),
                journal: &journal,
                ..Turn::default()
            },
        )
        .unwrap();
    let part = parts(prompt.system_prompt())
        .into_iter()
        .find(|p| p.starts_with("# Recent History"))
        .unwrap()
        .to_owned();
    assert!(prompt.report.tokens(Part::RecentHistory) <= 8_000 + 10);
    let shown = prompt.report.recent_history.shown;
    assert!(shown > 10 && shown < 50, "{shown}");
    assert!(part.contains(&format!("- ({} older entries not shown;", 50 - shown)));
    assert!(part.contains("] entry-49 "));
    assert!(!part.contains("] entry-0 "));
    // Whole entries only: every shown entry ends with its last word.
    assert_eq!(part.matches("word \n").count() + 1, shown);

    // A single entry over the budget is cut at its end, with the marker.
    let huge = [entry(1, Some("k"), &"word ".repeat(20_000))];
    let prompt = builder()
        .build(
            &workspace(),
            &Turn {
                session_key: Some("k"),
                journal: &huge,
                ..Turn::default()
            },
        )
        .unwrap();
    assert!(prompt.system_prompt().ends_with("\n... (truncated)"));
    assert!(prompt.report.recent_history.newest_cut);
    assert!(prompt.report.tokens(Part::RecentHistory) <= 8_000 + 10);
}

// 37 (E), 38 (E): the summary part, and its journal twin shown once.
#[test]
fn case_37_38_summary() {
    let s = summary();
    let journal = [entry(1, Some("cli:a"), "S")];
    let prompt = builder()
        .build(
            &workspace(),
            &Turn {
                session_key: Some("cli:a"),
                summary: Some(&s),
                journal: &journal,
                ..Turn::default()
            },
        )
        .unwrap();
    let system = prompt.system_prompt();
    assert!(system.ends_with(
        "\n\n---\n\n[Archived Context Summary]\n\nPrevious conversation summary (last active 2026-08-19T10:00:00):\nS"
    ));
    assert!(!system.contains("# Recent History"));
    let nothing = Summary {
        text: "(nothing)".into(),
        ..summary()
    };
    let none = builder().system_prompt(
        &workspace(),
        &Turn {
            summary: Some(&nothing),
            ..Turn::default()
        },
    );
    assert!(!none.contains("[Archived Context Summary]"));
}

// 39 (E), 40 (E), 41, 42 (E): the message list and runtime context.
#[test]
fn case_39_to_42_messages_and_runtime_context() {
    let b = builder();
    let ws = workspace();
    let hello = b
        .build(
            &ws,
            &Turn {
                current: Some(CurrentMessage::user("hello")),
                ..Turn::default()
            },
        )
        .unwrap();
    assert_eq!(hello.messages.len(), 2);
    assert_eq!(hello.messages[1], Message::user("hello"));
    assert!(hello.runtime_context.is_none());

    let prev = [Message::user("prev")];
    let merged = b
        .build(
            &ws,
            &Turn {
                history: &prev,
                current: Some(
                    CurrentMessage::user("now").with_runtime_context(RuntimeBlock::new("s", "CTX")),
                ),
                ..Turn::default()
            },
        )
        .unwrap();
    assert_eq!(merged.messages.len(), 2);
    assert_eq!(merged.messages[1], Message::user("prev\n\nnow\n\nCTX"));
    let marker = merged.runtime_context.unwrap();
    assert_eq!(marker.sources, ["s"]);
    assert_eq!(marker.appended, Appended::Suffix("CTX".into()));
    assert_eq!(
        marker.to_json(),
        serde_json::json!({"version": 1, "sources": ["s"], "suffix": "CTX"})
    );

    let answered = [Message::assistant("a")];
    let three = b
        .build(
            &ws,
            &Turn {
                history: &answered,
                current: Some(CurrentMessage::user("now")),
                ..Turn::default()
            },
        )
        .unwrap();
    assert_eq!(three.messages.len(), 3);

    let empty_text = b
        .build(
            &ws,
            &Turn {
                current: Some(
                    CurrentMessage::user("")
                        .with_runtime_context(RuntimeBlock::new(" a ", " one "))
                        .with_runtime_context(RuntimeBlock::new("b", "two"))
                        .with_runtime_context(RuntimeBlock::new("c", "   ")),
                ),
                ..Turn::default()
            },
        )
        .unwrap();
    assert_eq!(empty_text.messages[1], Message::user("one\n\ntwo"));
    assert_eq!(empty_text.runtime_context.unwrap().sources, ["a", "b"]);

    let bad = b.build(
        &ws,
        &Turn {
            current: Some(
                CurrentMessage::user("x").with_runtime_context(RuntimeBlock::new(" ", "c")),
            ),
            ..Turn::default()
        },
    );
    assert_eq!(
        bad.unwrap_err(),
        nanobot_context_builder::ContextError::EmptyRuntimeSource { index: 0 }
    );
}

const PNG: &[u8] =
    b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89";

// 43 (E), 44: images first, then text, then runtime blocks; non-images skipped.
#[test]
fn case_43_44_images() {
    let b = builder();
    let prompt = b
        .build(
            &workspace(),
            &Turn {
                current: Some(
                    CurrentMessage::user("look")
                        .with_image("/tmp/a.png", PNG.to_vec())
                        .with_image("/tmp/notes.txt", b"plain text".to_vec())
                        .with_image("/tmp/b.jpg", PNG.to_vec())
                        .with_runtime_context(RuntimeBlock::new("s", "CTX")),
                ),
                ..Turn::default()
            },
        )
        .unwrap();
    let Some(Content::Parts(content)) = prompt.messages[1].content() else {
        panic!("parts expected");
    };
    assert_eq!(content.len(), 4);
    for image in &content[..2] {
        let ContentPart::ImageUrl { image_url, .. } = image else {
            panic!("image expected");
        };
        assert!(
            image_url
                .url
                .starts_with("data:image/png;base64,iVBORw0KGgo")
        );
    }
    assert_eq!(content[2].as_text(), Some("look"));
    assert_eq!(content[3].as_text(), Some("CTX"));
    assert_eq!(prompt.report.images, ["/tmp/a.png", "/tmp/b.jpg"]);
    assert_eq!(
        prompt.runtime_context.as_ref().unwrap().appended,
        Appended::Blocks(vec!["CTX".into()])
    );
    // One estimator: each image costs the configured flat amount, not its base64 text.
    let current = prompt.report.tokens(Part::Current);
    assert!((2 * 765..2 * 765 + 20).contains(&current), "{current}");
    insta::assert_snapshot!(render(&prompt));
}

// 45 (E), 46: `$name` attaches a skill to the user turn, never to the system prompt.
#[test]
fn case_45_46_explicit_skills() {
    let ws = full_workspace();
    let b = builder();
    let plain = b
        .build(
            &ws,
            &Turn {
                current: Some(CurrentMessage::user("review")),
                ..Turn::default()
            },
        )
        .unwrap();
    let invoked = b
        .build(
            &ws,
            &Turn {
                current: Some(CurrentMessage::user("please $review this")),
                ..Turn::default()
            },
        )
        .unwrap();
    assert_eq!(plain.system_prompt(), invoked.system_prompt());
    assert_eq!(
        invoked.messages[1],
        Message::user(
            "please $review this\n\n[Active Skills — instructions for this user turn]\n### Skill: review\n\nReview carefully.\n[/Active Skills]"
        )
    );
    assert_eq!(
        invoked.runtime_context.as_ref().unwrap().sources,
        ["explicit_skills"]
    );
    assert_eq!(invoked.report.invoked_skills, ["review"]);

    for text in ["$HOME", "a$review", "$$review", "$always-on"] {
        let prompt = b
            .build(
                &ws,
                &Turn {
                    current: Some(CurrentMessage::user(text)),
                    ..Turn::default()
                },
            )
            .unwrap();
        assert!(prompt.runtime_context.is_none(), "{text}");
    }
}

// 47: an assistant message gets no runtime context; 48: blocks keep the caller's order,
// the explicit-skills block comes last.
#[test]
fn case_47_48_roles_and_order() {
    let b = builder();
    let ws = full_workspace();
    let mut assistant = CurrentMessage::user("x $review");
    assistant.speaker = nanobot_context_builder::Speaker::Assistant;
    assistant
        .runtime_context
        .push(RuntimeBlock::new("s", "CTX"));
    let prompt = b
        .build(
            &ws,
            &Turn {
                current: Some(assistant),
                ..Turn::default()
            },
        )
        .unwrap();
    assert_eq!(prompt.messages[1], Message::assistant("x $review"));
    assert!(prompt.runtime_context.is_none());

    let ordered = b
        .build(
            &ws,
            &Turn {
                current: Some(
                    CurrentMessage::user("$review")
                        .with_runtime_context(RuntimeBlock::new("webui_quote", "Q"))
                        .with_runtime_context(RuntimeBlock::new("goal", "G")),
                ),
                ..Turn::default()
            },
        )
        .unwrap();
    assert_eq!(
        ordered.runtime_context.unwrap().sources,
        ["webui_quote", "goal", "explicit_skills"]
    );
}

// The report: parts add up, the stable prefix survives volatile changes only.
#[test]
fn report_accounts_for_everything_and_hashes_the_stable_prefix() {
    let b = builder();
    let ws = full_workspace();
    let history = [Message::user("earlier"), Message::assistant("reply")];
    let s1 = summary();
    let s2 = Summary {
        text: "S2".into(),
        ..summary()
    };
    let build = |ws: &WorkspaceSnapshot, s: &Summary| {
        b.build(
            ws,
            &Turn {
                summary: Some(s),
                history: &history,
                current: Some(CurrentMessage::user("now")),
                ..Turn::default()
            },
        )
        .unwrap()
    };
    let first = build(&ws, &s1);
    let second = build(&ws, &s2);
    let r = &first.report;
    assert_eq!(
        r.parts.iter().map(|p| p.tokens).sum::<usize>(),
        r.total_tokens
    );
    assert_eq!(r.stable_prefix_hash.len(), 64);
    assert_eq!(r.stable_prefix_hash, second.report.stable_prefix_hash);
    let (stable, volatile) = first.system_split();
    assert!(stable.ends_with("`review/SKILL.md`"));
    assert!(volatile.starts_with("\n\n---\n\n[Archived Context Summary]"));
    let edited = WorkspaceSnapshot {
        memory_md: Some("# Long-term Memory\n\n- Ada likes coffee now.\n".into()),
        ..ws.clone()
    };
    assert_ne!(
        build(&edited, &s1).report.stable_prefix_hash,
        r.stable_prefix_hash
    );
    // A history estimate from the caller is used as given.
    let given = b
        .build(
            &ws,
            &Turn {
                history: &history,
                history_tokens: Some(1234),
                ..Turn::default()
            },
        )
        .unwrap();
    assert_eq!(given.report.tokens(Part::History), 1234);
    assert_eq!(
        given.report.history_tokens,
        nanobot_context_builder::HistoryTokens::FromCaller
    );
}

// A bot without tools can leave the tool notes out (spec weakness 15).
#[test]
fn the_tool_contract_can_be_left_out() {
    let mut config = BuilderConfig::new(host());
    config.tool_contract = false;
    let prompt = builder_with(config)
        .build(&workspace(), &Turn::default())
        .unwrap();
    assert!(!prompt.system_prompt().contains("# Tool Usage Notes"));
    assert!(
        prompt
            .report
            .omitted
            .contains(&(Part::ToolContract, Omission::Disabled))
    );
    assert_eq!(parts(prompt.system_prompt()).len(), 1);
}
