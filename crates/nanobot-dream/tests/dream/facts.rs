//! Memory that stays true, with a scripted model: a knowledge update replaces the old fact
//! (kept in the versions with the time it was held), a repeated fact is refused whatever
//! the model does, and blame names the conversations each line came from.

use chrono::Duration;
use nanobot_dream::{Trigger, format};
use nanobot_memory_store::{Document, HistoryJournal, NewEntry};

use crate::support::{Fixture, WriteAny, edit, fixture, script};

async fn say(f: &Fixture, session: &str, messages: (u64, u64), text: &str) -> u64 {
    let entry = NewEntry::text(text)
        .from_session(session)
        .covering(messages.0, messages.1);
    f.journal.append(&[entry]).await.unwrap()[0]
}

fn sessions(origin: &Option<nanobot_dream::Origin>) -> Vec<String> {
    origin
        .as_ref()
        .expect("an origin")
        .sources
        .iter()
        .map(|s| s.session_key.clone().unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn a_move_replaces_the_old_city_which_history_keeps_with_its_time() {
    let f = fixture(
        script(
            &[&[edit("memory/MEMORY.md", "- Project X active", "- Project X active\n- Lives in Berlin")]],
            "noted",
        )
        .then(nanobot_llm_port::LlmResponse::tool_calls(vec![
            nanobot_llm_port::ToolCall::with_json(
                "c",
                "edit_file",
                &serde_json::json!({"path": "memory/MEMORY.md", "old_text": "- Lives in Berlin", "new_text": "- Lives in Paris"}),
            ),
        ]))
        .then_text("updated"),
    );
    f.seed().await;
    say(&f, "telegram:ada", (0, 4), "- We live in Berlin").await;
    let first = f.dream.run(Trigger::Manual).await.unwrap().version.unwrap();
    f.clock.advance(Duration::weeks(3));
    say(&f, "cli:direct", (10, 16), "- We moved to Paris last week").await;
    let second = f.dream.run(Trigger::Manual).await.unwrap().version.unwrap();

    let memory = f.doc(Document::Memory).await.unwrap();
    assert!(
        memory.contains("- Lives in Paris") && !memory.contains("Berlin"),
        "{memory}"
    );
    assert!(
        !memory.contains("Source-"),
        "no provenance in what the prompt shows: {memory}"
    );

    let found = f.dream.line_history("berlin").await.unwrap();
    assert!(found.current.is_empty());
    let [past] = found.past.as_slice() else {
        panic!("one past line: {found:?}");
    };
    assert_eq!(past.text, "- Lives in Berlin");
    assert_eq!(past.replaced_by, ["- Lives in Paris"]);
    assert_eq!(past.until.id, second.id);
    assert_eq!(past.origin.as_ref().unwrap().version.id, first.id);
    assert_eq!(sessions(&past.origin), ["telegram:ada"]);
    let shown = format::history("berlin", &found);
    assert!(
        shown.contains("held from 2026-11-30 09:00 UTC until 2026-12-21 09:00 UTC"),
        "{shown}"
    );
    assert!(shown.contains("replaced by: - Lives in Paris"), "{shown}");
    // Why: what the conversation that replaced it said.
    assert!(
        shown.contains("because of entry 2, session cli:direct messages 10-16"),
        "{shown}"
    );
    assert_eq!(past.because.len(), 1);

    let paris = f.dream.line_history("Paris").await.unwrap();
    assert_eq!(paris.current.len(), 1);
    assert_eq!(sessions(&paris.current[0].2), ["cli:direct"]);
    assert!(paris.past.is_empty());
}

#[tokio::test]
async fn a_repeated_fact_is_refused_whatever_the_model_writes() {
    let f = fixture(script(
        &[&[
            edit(
                "memory/MEMORY.md",
                "- Project X active",
                "- Project X active\n\n## Health\n\n- Allergic to peanuts\n- Prefers short answers",
            ),
            edit(
                "USER.md",
                "",
                "# User\n\n- Name: Ada\n- Prefers short answers.",
            ),
        ]],
        "done",
    ));
    f.seed().await;
    let existing = "# Memory\n\n- Project X active\n- User is allergic to peanuts (severe)\n";
    crate::support::WriteAny::write_doc_any(f.documents.as_ref(), Document::Memory, existing)
        .await
        .unwrap();
    say(
        &f,
        "telegram:ada",
        (0, 8),
        "- Ada is allergic to peanuts\n- Ada likes short answers",
    )
    .await;
    let report = f.dream.run(Trigger::Manual).await.unwrap();

    let memory = f.doc(Document::Memory).await.unwrap();
    assert_eq!(memory.matches("peanuts").count(), 1, "{memory}");
    // USER.md is read first (its order in the prompt): its copy stays, MEMORY.md's goes.
    assert!(!memory.contains("short"), "{memory}");
    // The heading it added heads the line already there, so it stays.
    assert!(
        memory.contains("## Health\n\n- User is allergic"),
        "{memory}"
    );
    let user = f.doc(Document::User).await.unwrap();
    assert_eq!(user, "# User\n\n- Name: Ada\n- Prefers short answers.");
    let refused: Vec<(&str, &str)> = report
        .repeats
        .iter()
        .map(|r| (r.line.as_str(), r.existing.as_str()))
        .collect();
    assert_eq!(
        refused,
        [
            (
                "- Allergic to peanuts",
                "- User is allergic to peanuts (severe)"
            ),
            ("- Prefers short answers", "- Prefers short answers."),
        ]
    );
    let reply = format::run_reply(&report);
    assert!(
        reply.contains("Lines not added because memory already says them"),
        "{reply}"
    );
}

#[tokio::test]
async fn blame_names_the_session_each_line_came_from() {
    let f = fixture(script(
        &[&[edit(
            "memory/MEMORY.md",
            "- Project X active",
            "- Project X active\n- Daughter Mia starts school in September\n- Team moved to PostgreSQL 16",
        )]],
        "done",
    ));
    f.seed().await;
    say(
        &f,
        "telegram:ada",
        (0, 6),
        "- Ada's daughter Mia starts school in September",
    )
    .await;
    say(
        &f,
        "slack:work",
        (3, 9),
        "- The team moved its database to PostgreSQL 16",
    )
    .await;
    let version = f.dream.run(Trigger::Manual).await.unwrap().version.unwrap();

    let lines = f.dream.blame("memory/MEMORY.md").await.unwrap();
    let line = |text: &str| lines.iter().find(|l| l.text == text).unwrap();
    assert_eq!(
        sessions(&line("- Daughter Mia starts school in September").origin),
        ["telegram:ada"]
    );
    assert_eq!(
        sessions(&line("- Team moved to PostgreSQL 16").origin),
        ["slack:work"]
    );
    let mia = &line("- Daughter Mia starts school in September")
        .origin
        .clone()
        .unwrap();
    assert_eq!(mia.version.id, version.id);
    assert_eq!(mia.sources[0].messages, Some((0, 6)));
    // A line from before Dream: saved as an edit outside Dream, no sources.
    let seeded = line("- Project X active").origin.clone().unwrap();
    assert!(!seeded.by_dream && seeded.sources.is_empty());
    let shown = format::blame("memory/MEMORY.md", &lines);
    assert!(shown.contains("session slack:work messages 3-9"), "{shown}");

    // A restore and a restore of the restore bring the line back with where it came from.
    let restore = f
        .dream
        .restore(version.short_id())
        .await
        .unwrap()
        .version
        .unwrap();
    f.dream.restore(restore.short_id()).await.unwrap();
    let lines = f.dream.blame("memory/MEMORY.md").await.unwrap();
    let again = lines
        .iter()
        .find(|l| l.text == "- Team moved to PostgreSQL 16")
        .unwrap();
    assert_eq!(sessions(&again.origin), ["slack:work"]);
    // A line typed since the last version has no version yet.
    crate::support::WriteAny::write_doc_any(
        f.documents.as_ref(),
        Document::Memory,
        &(f.doc(Document::Memory).await.unwrap() + "- Typed by hand\n"),
    )
    .await
    .unwrap();
    let lines = f.dream.blame("memory/MEMORY.md").await.unwrap();
    assert_eq!(lines.last().unwrap().origin, None);
    assert!(f.dream.blame("../etc/passwd").await.is_err());
}

#[tokio::test]
async fn forgetting_a_session_takes_the_lines_only_it_taught() {
    let f = fixture(script(
        &[&[edit(
            "memory/MEMORY.md",
            "- Project X active",
            "- Project X active\n- Door code 4417\n- Allergic to peanuts",
        )]],
        "done",
    ));
    f.seed().await;
    say(
        &f,
        "telegram:7",
        (0, 2),
        "- Door code 4417, allergic to peanuts; project X active (a line written by hand: it stays)",
    )
    .await;
    say(&f, "cli:direct", (0, 2), "- Ada is allergic to peanuts").await;
    f.dream.run(Trigger::Manual).await.unwrap();
    let from =
        |s: &nanobot_dream::provenance::Source| s.session_key.as_deref() == Some("telegram:7");

    let plan = f.dream.lines_from(&from).await.unwrap();
    assert_eq!(
        plan.removed,
        [("memory/MEMORY.md".to_owned(), "- Door code 4417".to_owned())]
    );
    assert_eq!(
        plan.kept,
        [(
            "memory/MEMORY.md".to_owned(),
            "- Allergic to peanuts".to_owned()
        )]
    );
    assert_eq!(
        f.doc(Document::Memory)
            .await
            .unwrap()
            .matches("4417")
            .count(),
        1,
        "a plan changes nothing"
    );

    let (done, version) = f
        .dream
        .forget_lines(&from, "session telegram:7")
        .await
        .unwrap();
    assert_eq!(done, plan);
    let version = version.unwrap();
    assert!(
        version
            .message
            .starts_with("dream: forget session telegram:7")
    );
    assert!(
        !version.message.contains("4417"),
        "the version message repeats nothing: {}",
        version.message
    );
    assert_eq!(
        f.doc(Document::Memory).await.unwrap(),
        "# Memory\n\n- Project X active\n- Allergic to peanuts\n"
    );
    let (again, none) = f
        .dream
        .forget_lines(&from, "session telegram:7")
        .await
        .unwrap();
    assert!(
        again.is_empty() && none.is_none(),
        "run again, it finds nothing"
    );
    // The removed line is history now: when it was held, and that it was removed.
    let found = f.dream.line_history("door code").await.unwrap();
    assert_eq!(found.past.len(), 1);
    assert!(found.past[0].replaced_by.is_empty());

    // Erased from the history too: no version holds it, in its files or its message.
    assert!(f.dream.erase_from_history(&from).await.unwrap() >= 1);
    for version in f.dream.log(100).await.unwrap() {
        let files =
            nanobot_memory_store::MemoryVersions::files_at(f.versions.as_ref(), &version.id)
                .await
                .unwrap();
        assert!(files.values().all(|t| !t.contains("4417")), "{files:?}");
        assert!(!version.message.contains("4417"), "{}", version.message);
    }
    assert!(
        f.dream
            .line_history("door code")
            .await
            .unwrap()
            .past
            .is_empty()
    );
    assert_eq!(
        f.dream.erase_from_history(&from).await.unwrap(),
        0,
        "nothing left"
    );
}

/// A small model in plan mode appends a `[correction]` instead of replacing: the line it
/// corrects is replaced all the same, and history keeps the old one with its time.
#[tokio::test]
async fn a_correction_the_model_appended_replaces_the_line_it_corrects() {
    let plan = serde_json::json!({"append": [
        {"file": "memory/MEMORY.md", "heading": "Memory", "line": "Ada moved to Paris; she lives in Paris now"},
        {"file": "memory/MEMORY.md", "heading": "Memory", "line": "Lina is allergic to peanuts"}
    ], "replace": []});
    let llm = nanobot_llm_port::testing::ScriptedLlm::new().then_text(plan.to_string());
    let mut config = crate::support::config();
    config.mode = nanobot_dream::DreamMode::Plan;
    let f = crate::support::fixture_with(llm, config);
    let before = "# Memory\n\n- Ada lives in Berlin\n- Project X active\n";
    crate::support::WriteAny::write_doc_any(f.documents.as_ref(), Document::Memory, before)
        .await
        .unwrap();
    say(
        &f,
        "cli:direct",
        (0, 4),
        "- [correction] Ada moved to Paris; she lives in Paris now\n- [permanent] Lina is allergic to peanuts",
    )
    .await;
    let report = f.dream.run(Trigger::Manual).await.unwrap();
    assert_eq!(
        f.doc(Document::Memory).await.unwrap(),
        "# Memory\n\n- Ada moved to Paris; she lives in Paris now\n- Project X active\n- Lina is allergic to peanuts\n"
    );
    assert_eq!(report.superseded.len(), 1, "{report:?}");
    assert_eq!(report.superseded[0].old, "- Ada lives in Berlin");
    assert!(format::run_reply(&report).contains("Corrections that replaced the line they correct"));
    let found = f.dream.line_history("Berlin").await.unwrap();
    assert_eq!(found.past.len(), 1);
    assert_eq!(
        found.past[0].replaced_by,
        ["- Ada moved to Paris; she lives in Paris now"]
    );
}

#[tokio::test]
async fn the_audit_finds_a_fact_said_twice_and_counts_the_lines_dream_sourced() {
    let f = fixture(script(
        &[&[edit(
            "memory/MEMORY.md",
            "- Project X active",
            "- Project X active\n- Lina is allergic to peanuts",
        )]],
        "noted",
    ));
    f.seed().await;
    say(
        &f,
        "telegram:ada",
        (0, 4),
        "- [permanent] Lina is allergic to peanuts",
    )
    .await;
    f.dream.run(Trigger::Manual).await.unwrap().version.unwrap();
    let clean = f.dream.audit().await.unwrap();
    assert!(clean.is_clean(), "{clean:?}");
    assert_eq!(clean.curated_lines, 1);

    // The same fact again under another heading, by hand: the hand-written line is not
    // Dream's, the pair is, since Dream wrote one of them.
    let memory = f.doc(Document::Memory).await.unwrap();
    f.documents
        .write_doc_any(
            Document::Memory,
            &format!("{memory}\n## Health\n\n- Lina: allergic to peanuts\n"),
        )
        .await
        .unwrap();
    let audit = f.dream.audit().await.unwrap();
    assert!(!audit.is_clean());
    let [(first, second)] = audit.repeated.as_slice() else {
        panic!("one pair: {audit:?}");
    };
    assert_eq!(first.1, "- Lina is allergic to peanuts");
    assert_eq!(second.1, "- Lina: allergic to peanuts");
    assert!(audit.unsourced.is_empty(), "{audit:?}");
}

#[tokio::test]
async fn of_two_new_lines_where_one_says_all_the_other_does_the_fuller_one_is_kept() {
    let f = fixture(script(
        &[&[edit(
            "memory/MEMORY.md",
            "- Project X active",
            "- Project X active\n- Learning Portuguese\n- Also learning Portuguese, slowly",
        )]],
        "done",
    ));
    f.seed().await;
    say(
        &f,
        "cli:idle",
        (0, 2),
        "- [permanent] Learning Portuguese, slowly",
    )
    .await;
    let report = f.dream.run(Trigger::Manual).await.unwrap();
    let memory = f.doc(Document::Memory).await.unwrap();
    assert_eq!(
        memory,
        "# Memory\n\n- Project X active\n- Also learning Portuguese, slowly\n"
    );
    let [repeat] = report.repeats.as_slice() else {
        panic!("one repeat: {:?}", report.repeats);
    };
    assert_eq!(repeat.line, "- Learning Portuguese");
    assert_eq!(repeat.existing, "- Also learning Portuguese, slowly");
    assert!(f.dream.audit().await.unwrap().is_clean());
}
