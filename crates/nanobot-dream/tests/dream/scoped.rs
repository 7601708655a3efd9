//! A user's or a chat's Dream: its own files are written, the agent's shared `SOUL.md` and
//! skills only get proposals.

use crate::support::WriteAny as _;
use nanobot_memory_store::MemoryDocumentsExt as _;
use std::sync::Arc;

use nanobot_dream::{Dream, RunStatus, Trigger};
use nanobot_llm_port::Utf8Bytes;
use nanobot_memory_store::{
    Document, HistoryJournal, InMemoryDocuments, InMemoryJournal, InMemoryLease, InMemoryVersions,
    MemoryDocuments, MemoryError, MemoryVersions, NewEntry, ScopedDocuments,
};

use crate::support::{TestClock, config, edit, script, write};

#[tokio::test]
async fn a_scoped_run_writes_its_own_files_and_proposes_shared_ones() {
    let clock = TestClock::new();
    let agent = Arc::new(InMemoryDocuments::new());
    agent
        .write_doc_any(Document::Soul, "# Soul\n\n- Helpful\n")
        .await
        .unwrap();
    agent
        .write_doc_any(Document::User, "# Operator\n")
        .await
        .unwrap();
    agent
        .write_skill(
            "cook",
            "---\ndescription: cooking\n---\nRecipes.\n",
            nanobot_memory_store::Expected::Absent,
        )
        .await
        .unwrap();
    let own = Arc::new(InMemoryDocuments::new());
    own.write_doc_any(Document::User, "# User\n").await.unwrap();
    let documents = Arc::new(ScopedDocuments::new(own.clone(), agent.clone()));
    let journal = Arc::new(InMemoryJournal::new(clock.clone()));
    journal
        .append(&[NewEntry::text("Ada likes tea").from_session("telegram:1")])
        .await
        .unwrap();
    let versions = Arc::new(InMemoryVersions::new());
    let llm = Arc::new(
        script(
            &[&[
                edit("USER.md", "# User\n", "# User\n\n- Likes tea\n"),
                edit("SOUL.md", "- Helpful\n", "- Helpful\n- Talks about tea\n"),
                write("skills/tea/SKILL.md", "---\ndescription: tea\n---\nBrew.\n"),
            ]],
            "done",
        )
        .then_text("nothing to change"),
    );
    let mut cfg = config();
    cfg.propose_shared = true;
    let dream = Dream::new(
        cfg,
        llm.clone(),
        nanobot_dream::DreamStores::stepwise(
            journal.clone(),
            documents.clone(),
            Ok(versions.clone() as Arc<dyn MemoryVersions>),
            Arc::new(InMemoryLease::new()),
        ),
        clock.clone(),
        Arc::new(Utf8Bytes),
    )
    .unwrap();
    let report = dream.run(Trigger::Manual).await.unwrap();
    assert_eq!(report.status, RunStatus::Completed);
    // The model saw the shared files, and the operator's USER.md never.
    let request = format!("{:?}", llm.requests()[0].messages);
    assert!(request.contains("- Helpful"), "{request}");
    assert!(!request.contains("# Operator"));
    // Its own file is written; the agent's files are untouched.
    assert_eq!(
        own.read_text(Document::User).await.unwrap().as_deref(),
        Some("# User\n\n- Likes tea\n")
    );
    assert_eq!(
        agent.read_text(Document::Soul).await.unwrap().as_deref(),
        Some("# Soul\n\n- Helpful\n")
    );
    assert!(agent.read_skill("tea").await.unwrap().is_none());
    assert_eq!(report.proposed, vec!["SOUL.md", "skills/tea/SKILL.md"]);
    let proposals = dream.proposals().await.unwrap();
    assert_eq!(proposals.len(), 2);
    assert_eq!(proposals[0].path, "SOUL.md");
    assert!(proposals[0].after.contains("Talks about tea"));
    assert_eq!(proposals[1].before, None);
    assert!(
        proposals[0]
            .diff()
            .unwrap()
            .added_lines()
            .any(|l| l.contains("tea"))
    );
    // The scope's versions hold its own files only.
    let latest = versions.log(1).await.unwrap();
    let files = versions.files_at(&latest[0].id).await.unwrap();
    assert!(files.contains_key("USER.md"));
    assert!(!files.contains_key("SOUL.md"));
    assert!(!files.keys().any(|k| k.starts_with("skills/")));
    // The shared files cannot be written through the scope at all.
    assert!(matches!(
        documents.write_doc_any(Document::Soul, "x").await,
        Err(MemoryError::ReadOnly { .. })
    ));
    assert!(
        documents
            .write_skill("tea", "x", nanobot_memory_store::Expected::Any)
            .await
            .is_err()
    );
    // Reviewed proposals leave the queue.
    let dismissed = dream.dismiss_proposals(&[0]).await.unwrap();
    assert_eq!(dismissed[0].path, "SOUL.md");
    assert_eq!(dream.proposals().await.unwrap().len(), 1);
    // A second run with nothing new makes no version for the shared files' sake.
    let before = versions.log(10).await.unwrap().len();
    agent
        .write_doc_any(Document::Soul, "# Soul\n\n- Changed by the agent\n")
        .await
        .unwrap();
    journal
        .append(&[NewEntry::text("nothing new").from_session("telegram:1")])
        .await
        .unwrap();
    assert_eq!(
        dream.run(Trigger::Manual).await.unwrap().status,
        RunStatus::Completed
    );
    let after = versions.log(10).await.unwrap();
    assert!(
        after.len() <= before + 1 && !after[0].subject().contains("outside"),
        "{:?}",
        after.iter().map(|v| v.subject()).collect::<Vec<_>>()
    );
}

/// Issue 35: a scope whose every edit waits for review gets proposals for its own files
/// too (nothing written); approving one applies it as a restorable version, rejecting one
/// records why; a proposal over text that changed since is refused.
#[tokio::test]
async fn every_edit_waits_for_review_when_the_scope_asks() {
    let clock = TestClock::new();
    let documents = Arc::new(InMemoryDocuments::new());
    documents
        .write_doc_any(Document::User, "# User\n")
        .await
        .unwrap();
    documents
        .write_doc_any(Document::Memory, "# Memory\n")
        .await
        .unwrap();
    let journal = Arc::new(InMemoryJournal::new(clock.clone()));
    journal
        .append(&[NewEntry::text("Ada likes tea").from_session("telegram:1")])
        .await
        .unwrap();
    let versions = Arc::new(InMemoryVersions::new());
    let llm = Arc::new(script(
        &[&[
            edit("USER.md", "# User\n", "# User\n\n- Likes tea\n"),
            edit(
                "memory/MEMORY.md",
                "# Memory\n",
                "# Memory\n\n- Tea in the morning\n",
            ),
        ]],
        "done",
    ));
    let dream = Dream::new(
        config(),
        llm,
        nanobot_dream::DreamStores::stepwise(
            journal.clone(),
            documents.clone(),
            Ok(versions.clone() as Arc<dyn MemoryVersions>),
            Arc::new(InMemoryLease::new()),
        ),
        clock.clone(),
        Arc::new(Utf8Bytes),
    )
    .unwrap();
    dream.set_review_every_edit(true).await.unwrap();
    assert!(dream.review().await.unwrap().every_edit);
    let report = dream.run(Trigger::Manual).await.unwrap();
    assert_eq!(report.status, RunStatus::Completed);
    assert_eq!(report.proposed, vec!["USER.md", "memory/MEMORY.md"]);
    assert_eq!(
        documents
            .read_text(Document::User)
            .await
            .unwrap()
            .as_deref(),
        Some("# User\n"),
        "nothing is written before review"
    );
    let proposals = dream.proposals().await.unwrap();
    assert!(proposals.iter().all(|p| !p.shared && !p.reason.is_empty()));
    let (user, memory) = (&proposals[0], &proposals[1]);

    let version = dream.apply_proposal(user, "ops").await.unwrap().unwrap();
    assert!(
        version.message.starts_with("dream: approved proposal"),
        "{version:?}"
    );
    dream
        .settle_proposal(&user.id(), true, "", Some(&version))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        documents
            .read_text(Document::User)
            .await
            .unwrap()
            .as_deref(),
        Some("# User\n\n- Likes tea\n")
    );
    let refused = dream
        .settle_proposal(&memory.id(), false, "not a memory", None)
        .await
        .unwrap();
    assert!(refused.is_some());
    assert!(dream.proposals().await.unwrap().is_empty());
    let review = dream.review().await.unwrap();
    assert_eq!(review.decisions.len(), 2);
    assert!(review.decisions[0].approved && !review.decisions[1].approved);
    assert_eq!(review.decisions[1].reason, "not a memory");
    assert_eq!(
        documents
            .read_text(Document::Memory)
            .await
            .unwrap()
            .as_deref(),
        Some("# Memory\n")
    );
    // Approving over a file that changed since the proposal is refused.
    documents
        .write_doc_any(Document::User, "# User\n\n- Hand edit\n")
        .await
        .unwrap();
    assert!(matches!(
        dream.apply_proposal(user, "ops").await,
        Err(nanobot_dream::DreamError::Memory(
            MemoryError::Conflict { .. }
        ))
    ));
    // The approval is a Dream version: it can be restored.
    dream.restore(&version.id).await.unwrap();
}
