//! Every read of every port, checked for the other scope's canary.

use super::*;

/// Every read path of `me`'s stores, checked against `other`'s canary (and for its own).
pub(super) async fn check_reads(me: &Person, other: &Person) {
    check_session_reads(me, other).await;
    check_journal_reads(me, other).await;
    check_document_reads(me, other).await;
}

/// Sessions: load, list, replay; writes stay in the scope.
pub(super) async fn check_session_reads(me: &Person, other: &Person) {
    let key = SessionKey::new(SESSION).unwrap();
    let store = me.stores.sessions.store().clone();
    let _ = store.capabilities();
    let loaded = store.load(&key).await.unwrap().expect("own session");
    let text = text_of(&loaded.session.messages());
    assert!(text.contains(me.canary), "own canary missing in load");
    assert_clean("load", &text, me, other);
    let list = store.list().await.unwrap();
    assert_eq!(list.len(), 1, "list shows exactly the scope's own session");
    assert_clean("list", &text_of(&list), me, other);
    let replay = store.open_for_replay(&key).await.unwrap().unwrap();
    assert_clean("open_for_replay", &text_of(&replay.tail), me, other);
    // Writes stay in the scope: a rewrite and a new session here change nothing there.
    let mut session = loaded.session.clone();
    session.add_message(
        StoredMessage::assistant(format!("also {}", me.canary)),
        chrono::Utc::now().naive_utc(),
    );
    let revision = store
        .rewrite(&session, Some(loaded.revision))
        .await
        .unwrap();
    let revision = store.flush(&key, revision).await.unwrap();
    assert_eq!(store.current_revision(&key).await.unwrap(), Some(revision));
    let scratch = SessionKey::new("telegram:scratch").unwrap();
    let mut scratch_session =
        nanobot_session_store::Session::new(scratch.clone(), chrono::Utc::now().naive_utc());
    scratch_session.add_message(
        StoredMessage::user(me.canary),
        chrono::Utc::now().naive_utc(),
    );
    store
        .save_changes(&mut scratch_session, None)
        .await
        .unwrap();
    assert!(store.delete(&scratch).await.unwrap());
}

/// Journal reads, by cursor and newest first.
pub(super) async fn check_journal_reads(me: &Person, other: &Person) {
    let journal = &me.stores.journal;
    let _ = journal.capabilities();
    let all = journal.read_since(0, None).await.unwrap();
    assert!(text_of(&all).contains(me.canary));
    assert_clean("read_since", &text_of(&all), me, other);
    assert_clean(
        "read_last",
        &text_of(&journal.read_last(100).await.unwrap()),
        me,
        other,
    );
    for cursor in 0..=journal.latest_cursor().await.unwrap() + 2 {
        assert_clean(
            "read_since(cursor)",
            &text_of(&journal.read_since(cursor, None).await.unwrap()),
            me,
            other,
        );
    }
    assert_clean(
        "unprocessed",
        &text_of(&journal.unprocessed(Some(100)).await.unwrap()),
        me,
        other,
    );
    assert_clean(
        "unprocessed_newest",
        &text_of(&journal.unprocessed_newest(100).await.unwrap()),
        me,
        other,
    );
}

/// Documents, private and shared.
pub(super) async fn check_document_reads(me: &Person, other: &Person) {
    let documents = &me.stores.documents;
    let _ = documents.capabilities();
    for document in Document::ALL {
        let text = text_of(&documents.read(document).await.unwrap());
        assert_clean(document.path(), &text, me, other);
        let text = documents
            .read_text(document)
            .await
            .unwrap()
            .unwrap_or_default();
        assert_clean(document.path(), &text, me, other);
    }
    assert_clean(
        "skills",
        &text_of(&documents.skills().await.unwrap()),
        me,
        other,
    );
    for name in documents.skill_names().await.unwrap() {
        let text = documents.read_skill(&name).await.unwrap();
        assert_clean("read_skill", &text_of(&text), me, other);
    }
    for aux in [
        AuxFile::DreamState,
        AuxFile::DreamPrompt,
        AuxFile::DreamPending,
        AuxFile::DreamProposals,
    ] {
        assert_clean(
            "read_aux",
            &text_of(&documents.read_aux(aux).await.unwrap()),
            me,
            other,
        );
    }
}
