//! `PromptLoader` over file documents: which files a prompt gets (spec context.md cases 10,
//! 11, 16, 25, 29), sorted skills, lossy decoding, and re-parsing only what changed.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use nanobot_bench_workload::testing::TempDir;
use nanobot_memory_store::FileDocuments;
use nanobot_prompt_inputs::{PromptLoader, RequirementProbe, SkillSource, WorkspaceSnapshot};

/// The loader of the agent workspace at `workspace`, over its file documents.
fn loader(workspace: &Path) -> PromptLoader {
    PromptLoader::new(Arc::new(FileDocuments::open(workspace).unwrap()))
        .with_agent_dir(workspace)
        .unwrap()
}

fn write(root: &Path, relative: &str, text: impl AsRef<[u8]>) {
    let path = root.join(relative);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

async fn load_in(workspace: &Path, project: &Path) -> WorkspaceSnapshot {
    loader(workspace)
        .with_project(project)
        .unwrap()
        .load()
        .await
        .unwrap()
}

#[tokio::test]
async fn project_supplies_agents_md_and_the_agent_workspace_the_rest() {
    let ws = TempDir::new("loader-ws");
    let project = TempDir::new("loader-proj");
    for root in [ws.path(), project.path()] {
        write(root, "AGENTS.md", format!("agents of {}", root.display()));
        write(root, "SOUL.md", "soul");
        write(root, "USER.md", "user");
    }
    write(ws.path(), "memory/MEMORY.md", "memory");
    write(ws.path(), "TOOLS.md", "tools");
    write(ws.path(), "HEARTBEAT.md", "heartbeat");

    let loaded = load_in(ws.path(), project.path()).await;
    let project_dir = std::fs::canonicalize(project.path()).unwrap();
    assert_eq!(
        loaded.agents_md.unwrap(),
        format!("agents of {}", project.path().display())
    );
    assert_eq!(
        loaded.project_dir.as_deref(),
        Some(project_dir.to_str().unwrap())
    );
    assert_eq!(loaded.soul_md.as_deref(), Some("soul"));
    assert_eq!(loaded.memory_md.as_deref(), Some("memory"));

    // Case 11: a project without AGENTS.md does not fall back to the agent workspace's.
    std::fs::remove_file(project.path().join("AGENTS.md")).unwrap();
    let loaded = load_in(ws.path(), project.path()).await;
    assert_eq!(loaded.agents_md, None);

    // The agent workspace as its own project is no project.
    let same = load_in(ws.path(), ws.path()).await;
    assert_eq!(same.project_dir, None);
    assert!(same.agents_md.unwrap().starts_with("agents of"));
}

#[tokio::test]
async fn skills_are_sorted_shadow_built_ins_and_skip_bad_folders() {
    let ws = TempDir::new("loader-skills");
    let builtin = TempDir::new("loader-builtin");
    for name in ["zeta", "alpha", "mid"] {
        write(
            ws.path(),
            &format!("skills/{name}/SKILL.md"),
            format!("---\ndescription: ws {name}\n---\nbody"),
        );
    }
    write(ws.path(), "skills/no-skill-file/README.md", "not a skill");
    write(
        ws.path(),
        "skills/bad name/SKILL.md",
        "---\ndescription: x\n---\n",
    );
    for name in ["weather", "alpha"] {
        write(
            builtin.path(),
            &format!("{name}/SKILL.md"),
            format!("---\ndescription: builtin {name}\n---\n"),
        );
    }
    let loaded = loader(ws.path())
        .with_builtin_skills(builtin.path())
        .unwrap()
        .load()
        .await
        .unwrap();
    let listed: Vec<(&str, SkillSource, String)> = loaded
        .skills
        .iter()
        .map(|s| (s.name(), s.source, s.description().into_owned()))
        .collect();
    assert_eq!(
        listed,
        [
            ("alpha", SkillSource::Workspace, "ws alpha".to_owned()),
            ("mid", SkillSource::Workspace, "ws mid".to_owned()),
            ("zeta", SkillSource::Workspace, "ws zeta".to_owned()),
            (
                "weather",
                SkillSource::BuiltIn,
                "builtin weather".to_owned()
            ),
        ]
    );
    assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
    assert!(loaded.warnings[0].contains("bad name"));
}

#[tokio::test]
async fn invalid_utf8_is_decoded_lossily_and_reported() {
    let ws = TempDir::new("loader-utf8");
    write(ws.path(), "SOUL.md", b"caf\xe9 soul\n");
    let loaded = loader(ws.path()).load().await.unwrap();
    assert_eq!(loaded.soul_md.as_deref(), Some("caf\u{fffd} soul\n"));
    assert_eq!(loaded.warnings.len(), 1);
    assert!(loaded.warnings[0].contains("not valid UTF-8"));
    // The file itself is untouched.
    assert_eq!(
        std::fs::read(ws.path().join("SOUL.md")).unwrap(),
        b"caf\xe9 soul\n"
    );
}

struct CountingProbe(AtomicUsize);

impl RequirementProbe for CountingProbe {
    fn has_binary(&self, _name: &str) -> bool {
        self.0.fetch_add(1, Ordering::SeqCst);
        false
    }
    fn has_env(&self, _name: &str) -> bool {
        self.0.fetch_add(1, Ordering::SeqCst);
        true
    }
}

#[tokio::test]
async fn skills_are_parsed_once_and_probes_answered_once() {
    let ws = TempDir::new("loader-cache");
    let skill = "---\ndescription: gh\nmetadata: {\"nanobot\": {\"requires\": {\"bins\": [\"gh\"], \"env\": [\"TOKEN\"]}}}\n---\nbody";
    write(ws.path(), "skills/gh/SKILL.md", skill);
    write(ws.path(), "skills/gh2/SKILL.md", skill);
    let probe = Arc::new(CountingProbe(AtomicUsize::new(0)));
    let loader = loader(ws.path()).with_probe(probe.clone());
    let first = loader.load().await.unwrap();
    assert_eq!(first.skills[0].missing, ["CLI: gh"]);
    assert_eq!(
        probe.0.load(Ordering::SeqCst),
        2,
        "one probe per distinct requirement"
    );
    let second = loader.load().await.unwrap();
    assert!(
        Arc::ptr_eq(&first.skills[0], &second.skills[0]),
        "an unchanged skill is not re-parsed"
    );

    // A changed file is parsed again.
    write(
        ws.path(),
        "skills/gh/SKILL.md",
        "---\ndescription: changed, and longer than before\n---\nbody",
    );
    let third = loader.load().await.unwrap();
    assert_eq!(
        third.skills[0].description(),
        "changed, and longer than before"
    );
    assert!(Arc::ptr_eq(&first.skills[1], &third.skills[1]));

    loader.forget_probes();
    let _ = loader.load().await.unwrap();
    assert_eq!(probe.0.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn a_missing_workspace_is_a_clear_error() {
    let documents = Arc::new(nanobot_memory_store::InMemoryDocuments::new());
    let err = PromptLoader::new(documents)
        .with_agent_dir(Path::new("/definitely/not/here"))
        .unwrap_err();
    assert!(err.to_string().contains("/definitely/not/here"), "{err}");
}
