//! Invariants over random inputs: building twice (and on a fresh builder) gives the same
//! bytes; the report's parts add up to the total; the stable prefix is a prefix of the
//! system prompt, unchanged by the volatile parts; the system message comes first and the
//! history is kept in order.

use std::sync::Arc;

use nanobot_bench_workload::{SplitMix64, gen_text};
use nanobot_context_builder::{
    BuilderConfig, CurrentMessage, Part, RuntimeBlock, Summary, Turn, WorkspaceSnapshot,
};
use nanobot_llm_port::Message;

use crate::support::{builder, builder_with, entry, host, skill, workspace};

fn maybe(rng: &mut SplitMix64, len: usize) -> Option<String> {
    if rng.below(3) == 0 {
        return None;
    }
    let n = 1 + rng.below(len as u64) as usize;
    Some(gen_text(rng, n, true))
}

fn random_workspace(rng: &mut SplitMix64) -> WorkspaceSnapshot {
    let skills = (0..rng.below(5))
        .map(|i| {
            let always = rng.below(4) == 0;
            let missing = rng.below(4) == 0;
            skill(
                &format!("skill-{i}"),
                &format!(
                    "---\ndescription: {}\nmetadata: {{\"nanobot\": {{\"always\": {always}, \"requires\": {{\"bins\": [\"{}\"]}}}}}}\n---\n{}",
                    gen_text(rng, 30, false).replace(['\n', ':', '#'], " "),
                    if missing { "missing-x" } else { "sh" },
                    gen_text(rng, 200, true)
                ),
            )
        })
        .collect();
    WorkspaceSnapshot {
        agents_md: maybe(rng, 400),
        soul_md: maybe(rng, 400),
        user_md: maybe(rng, 400),
        memory_md: maybe(rng, 3000),
        project_dir: (rng.below(4) == 0).then(|| "/srv/p".to_owned()),
        skills,
        ..workspace()
    }
}

fn random_history(rng: &mut SplitMix64) -> Vec<Message> {
    (0..rng.below(8))
        .map(|i| {
            let n = 1 + rng.below(300) as usize;
            let text = gen_text(rng, n, true);
            if i % 2 == 0 {
                Message::user(text)
            } else {
                Message::assistant(text)
            }
        })
        .collect()
}

#[test]
fn same_inputs_same_bytes_and_parts_add_up() {
    let mut rng = SplitMix64::new(11);
    let shared = builder();
    for case in 0..60 {
        let ws = random_workspace(&mut rng);
        let history = random_history(&mut rng);
        let journal: Vec<_> = (0..rng.below(6))
            .map(|i| entry(i, Some("cli:r"), &gen_text(&mut rng, 200, true)))
            .collect();
        let summary = (rng.below(2) == 0).then(|| Summary {
            text: gen_text(&mut rng, 150, true),
            last_active: "2026-08-19T10:00:00".into(),
        });
        let mut current = CurrentMessage::user(gen_text(&mut rng, 100, true));
        if rng.below(2) == 0 {
            current.text.push_str(" $skill-0 $skill-1");
        }
        if rng.below(3) == 0 {
            current =
                current.with_runtime_context(RuntimeBlock::new("s", gen_text(&mut rng, 80, true)));
        }
        let turn = Turn {
            channel: Some(["cli", "telegram", "slack"][rng.below(3) as usize]),
            session_key: Some("cli:r"),
            summary: summary.as_ref(),
            history: &history,
            journal: &journal,
            exclude_memory: rng.below(5) == 0,
            current: Some(current),
            ..Turn::default()
        };
        let mut config = BuilderConfig::new(host());
        config.limits.memory_tokens = 50 + rng.below(2000) as usize;
        config.limits.recent_history_tokens = 20 + rng.below(300) as usize;
        let fresh = builder_with(config.clone());
        let a = fresh.build(&ws, &turn).unwrap();
        let b = fresh.build(&ws, &turn).unwrap();
        let c = builder_with(config).build(&ws, &turn).unwrap();
        assert_eq!(a, b, "case {case}: second build differs");
        assert_eq!(a, c, "case {case}: a fresh builder differs");
        let _ = shared.build(&ws, &turn).unwrap();

        let r = &a.report;
        assert_eq!(
            r.parts.iter().map(|p| p.tokens).sum::<usize>(),
            r.total_tokens,
            "case {case}"
        );
        let system = a.system_prompt();
        let system_bytes: usize = r
            .parts
            .iter()
            .filter(|p| Part::SYSTEM.contains(&p.part) || p.part == Part::Separators)
            .map(|p| p.bytes)
            .sum();
        assert_eq!(system_bytes, system.len(), "case {case}");
        assert!(r.stable_prefix_bytes <= system.len());
        assert!(matches!(a.messages[0], Message::System(_)));
        // History kept in order, the current message merged at most into the last one.
        assert!(a.messages.len() > history.len());
        for (i, m) in history
            .iter()
            .enumerate()
            .take(history.len().saturating_sub(1))
        {
            assert_eq!(&a.messages[1 + i], m, "case {case}");
        }

        // Volatile parts never move the stable prefix.
        let no_volatile = fresh_prefix(&ws, &turn, fresh.config().clone());
        assert_eq!(no_volatile, r.stable_prefix_hash, "case {case}");
    }
}

fn fresh_prefix(ws: &WorkspaceSnapshot, turn: &Turn<'_>, config: BuilderConfig) -> String {
    let quiet = Turn {
        summary: None,
        journal: &[],
        ..turn.clone()
    };
    let b = nanobot_context_builder::ContextBuilder::new(
        config,
        Arc::new(nanobot_llm_port::Cl100kBase),
    );
    b.build(ws, &quiet).unwrap().report.stable_prefix_hash
}
