//! The isolation suite: two users' scopes side by side, every port checked for leaks both ways.

use super::*;

mod reads;

use reads::check_reads;

pub(super) fn agent_over(backend: Arc<dyn MemoryBackend>, llm: Arc<dyn LlmClient>) -> Agent {
    let mut config = BuilderConfig::new(Host::new("Linux", "x86_64", "nanobot-rs"));
    config.tool_contract = false;
    Agent::new(
        AgentSettings::new("test-model", 32_768, 512),
        llm,
        Arc::new(ContextBuilder::new(config, Arc::new(Cl100kBase))),
        backend,
        Arc::new(SystemClock),
        Arc::new(Cl100kBase),
    )
}

pub(super) struct Person {
    pub(super) scope: ScopeKey,
    pub(super) canary: &'static str,
    pub(super) stores: ScopeStores,
}

/// Text of everything a value holds, for canary searches.
pub(super) fn text_of(value: &impl std::fmt::Debug) -> String {
    format!("{value:?}")
}

pub(super) fn assert_clean(what: &str, text: &str, me: &Person, other: &Person) {
    assert!(
        !text.contains(other.canary),
        "{what} of {} shows {}'s canary: {text}",
        me.scope,
        other.scope
    );
}

pub(super) const SESSION: &str = "telegram:chat-1";

/// Seeds a person's scope with the same session and messages as the other, plus a canary
/// in every kind of memory.
pub(super) async fn seed(person: &Person) {
    let key = SessionKey::new(SESSION).unwrap();
    let store = person.stores.sessions.store().clone();
    let same = StoredMessage::user("Hello, here is my note for today.");
    let canary = StoredMessage::user(format!("Remember: {}", person.canary));
    let answer = StoredMessage::assistant("Noted.");
    let existing = store.current_revision(&key).await.unwrap();
    assert!(existing.is_none(), "a new scope has no session {SESSION}");
    store
        .append(
            &key,
            None,
            Append {
                messages: &[same, canary, answer],
                meta: None,
            },
        )
        .await
        .unwrap();
    let journal = &person.stores.journal;
    journal
        .append(
            &[NewEntry::text(&format!("- [permanent] {}", person.canary)).from_session(SESSION)],
        )
        .await
        .unwrap();
    journal
        .append_one(NewEntry::text("A shared, harmless line.").from_session(SESSION))
        .await
        .unwrap();
    let documents = &person.stores.documents;
    documents
        .write(
            Document::User,
            &format!("# User\n\n- {}\n", person.canary),
            Expected::Any,
        )
        .await
        .unwrap();
    documents
        .write(
            Document::Memory,
            &format!("# Memory\n\n- {}\n", person.canary),
            Expected::Any,
        )
        .await
        .unwrap();
    documents
        .write_aux(
            AuxFile::DreamState,
            &format!("{{\"note\":\"{}\"}}", person.canary),
        )
        .await
        .unwrap();
}

/// Runs the isolation suite against `backend`: two users, a group, and every port method.
/// Panics with the leak it found.
pub async fn isolation_suite(backend: Arc<dyn MemoryBackend>) {
    let missing = uncovered_methods();
    assert!(
        missing.is_empty(),
        "port methods without an isolation case: {missing:?}"
    );
    let people = two_people(backend.as_ref()).await;
    for person in &people {
        seed(person).await;
    }
    let pairs = [(&people[0], &people[1]), (&people[1], &people[0])];
    for (me, other) in pairs {
        check_reads(me, other).await;
    }
    stamps_stay_apart(&people).await;

    // Prompts and Dream input, through the library turn.
    let llm = Arc::new(
        ScriptedLlm::new()
            .then_text("Nothing to change.")
            .then_text("Nothing to change.")
            .then_text("Hello."),
    );
    let agent = agent_over(backend.clone(), llm.clone());
    let key = SessionKey::new(SESSION).unwrap();
    for (me, other) in pairs {
        prompts_search_and_dream(&agent, &llm, &key, me, other).await;
        versions_and_cursors(me, other).await;
    }
    // Dream's cursor of one scope never moved the other's, and both were moved by their own.
    for person in &people {
        let journal = &person.stores.journal;
        assert_eq!(
            journal.dream_cursor().await.unwrap(),
            journal.latest_cursor().await.unwrap()
        );
    }
    locks_leases_and_commits(&people, &key).await;
    archives_stay_apart(&people, &key).await;
    shared_files_read_only(&people).await;
    group_sees_no_private_files(backend.as_ref(), &agent, &key, &people).await;
}

/// Alice and Bob, each with their scope's stores and a canary only their files hold.
async fn two_people(backend: &dyn MemoryBackend) -> [Person; 2] {
    let alice = ScopeKey::local(Subject::User(UserKey::parse("telegram:1").unwrap()));
    let bob = ScopeKey::local(Subject::User(UserKey::parse("telegram:2").unwrap()));
    [
        Person {
            stores: backend.open(&alice).await.unwrap(),
            scope: alice,
            canary: "CANARY-ALICE-7f3a",
        },
        Person {
            stores: backend.open(&bob).await.unwrap(),
            scope: bob,
            canary: "CANARY-BOB-91c2",
        },
    ]
}

/// A scope's stamp moves with its own files and the agent's, never another scope's.
async fn stamps_stay_apart(people: &[Person; 2]) {
    let pairs = [(&people[0], &people[1]), (&people[1], &people[0])];
    for (me, other) in pairs {
        let before = other.stores.documents.stamp().await.unwrap();
        let user = me.stores.documents.read(Document::User).await.unwrap();
        let text = user.as_ref().map_or_else(String::new, |u| u.text.clone());
        me.stores
            .documents
            .write(
                Document::User,
                &format!("{text}- stamped\n"),
                Expected::from_read(user.as_ref()),
            )
            .await
            .unwrap();
        assert_eq!(
            other.stores.documents.stamp().await.unwrap(),
            before,
            "{}'s stamp moved with {}'s USER.md",
            other.scope,
            me.scope
        );
    }
}

/// Each scope's prompt, memory search and Dream input hold its own canary and nothing of
/// the other's.
async fn prompts_search_and_dream(
    agent: &Agent,
    llm: &ScriptedLlm,
    key: &SessionKey,
    me: &Person,
    other: &Person,
) {
    let memory = agent.memory(&me.scope).await.unwrap();
    let prompt = agent
        .build_prompt(&memory, key, "What do you remember?")
        .await
        .unwrap();
    let text = text_of(&prompt.messages);
    assert!(
        text.contains(me.canary),
        "own canary missing in {}'s prompt",
        me.scope
    );
    assert_clean("prompt", &text, me, other);
    if memory.index.is_some() {
        search_stays_apart(&memory, key, me, other).await;
    }
    let before = llm.requests().len();
    let report = memory.dream.run(Trigger::Manual).await.unwrap();
    assert_eq!(report.status, RunStatus::Completed, "{report:?}");
    let requests = llm.requests();
    assert_eq!(requests.len(), before + 1);
    let dream_input = text_of(&requests[before].messages);
    assert!(
        dream_input.contains(me.canary),
        "own canary missing in Dream's input"
    );
    assert_clean("Dream input", &dream_input, me, other);
}

/// Memory search, where the backend keeps an index: each finds its own canary and nothing
/// of the other's, however the other's is asked for.
async fn search_stays_apart(
    memory: &crate::ScopeMemory,
    key: &SessionKey,
    me: &Person,
    other: &Person,
) {
    let search = SearchMemory::new(Arc::new(Cl100kBase));
    let context = ToolContext {
        memory,
        session: key,
    };
    for query in [me.canary, other.canary] {
        let arguments = serde_json::json!({"query": query, "limit": 10}).to_string();
        let found = search.call(context, &arguments).await;
        assert!(found.recalled, "{}: {}", me.scope, found.content);
        if query == me.canary {
            assert!(
                found.content.contains(me.canary),
                "{} did not find its own canary: {}",
                me.scope,
                found.content
            );
        }
        // The opening tag repeats the query; what was found is below it.
        let results = found.content.split_once('\n').map_or("", |(_, rest)| rest);
        assert_clean("search_memory", results, me, other);
    }
}

/// Versions: a commit here, read back here only; cursors move per scope.
async fn versions_and_cursors(me: &Person, other: &Person) {
    let versions = me.stores.versions.as_ref().expect("versions");
    let mut files = Snapshot::new();
    files.insert(
        "USER.md".into(),
        format!("# User\n\n- {}\n- more\n", me.canary),
    );
    versions
        .commit("isolation suite", &files, chrono::Utc::now())
        .await
        .unwrap();
    let log = versions.log(100).await.unwrap();
    for version in &log {
        let resolved = versions.resolve(&version.id).await.unwrap();
        assert_clean("resolve", &text_of(&resolved), me, other);
        assert_clean(
            "files_at",
            &text_of(&versions.files_at(&version.id).await.unwrap()),
            me,
            other,
        );
    }
    // A rewrite (an erasure) changes this scope's history only.
    let theirs_log = other
        .stores
        .versions
        .as_ref()
        .expect("versions")
        .log(100)
        .await
        .unwrap();
    let erase = |v: &nanobot_memory_store::Version, mut files: Snapshot| {
        files
            .values_mut()
            .for_each(|t| *t = t.replace("- more\n", ""));
        (v.message.clone(), files)
    };
    assert!(versions.rewrite(&erase).await.unwrap() >= 1, "{}", me.scope);
    for version in versions.log(100).await.unwrap() {
        let files = versions.files_at(&version.id).await.unwrap();
        assert!(
            files.values().all(|t| !t.contains("- more\n")),
            "{}",
            me.scope
        );
    }
    let other_versions = other.stores.versions.as_ref().expect("versions");
    assert_eq!(other_versions.log(100).await.unwrap(), theirs_log);
    // Cursors move per scope.
    let journal = &me.stores.journal;
    journal
        .set_dream_cursor(journal.latest_cursor().await.unwrap())
        .await
        .unwrap();
    journal.compact(1_000).await.unwrap();
    // Removing an entry (a forgotten conversation) removes it from this scope only.
    let theirs = other.stores.journal.read_since(0, None).await.unwrap();
    if let Some(newest) = journal.read_last(1).await.unwrap().first() {
        assert_eq!(journal.remove_entries(&[newest.cursor]).await.unwrap(), 1);
        let left = journal.read_since(0, None).await.unwrap();
        assert!(
            left.iter().all(|e| e.cursor != newest.cursor),
            "{}",
            me.scope
        );
    }
    assert_eq!(
        other.stores.journal.read_since(0, None).await.unwrap(),
        theirs
    );
}

/// Locks and leases are per scope: both users can hold theirs on the same session at once;
/// a memory commit under each one's lease changes that scope's files only.
async fn locks_leases_and_commits(people: &[Person; 2], key: &SessionKey) {
    let locks_a = people[0]
        .stores
        .sessions
        .store()
        .try_lock_turn(key)
        .await
        .unwrap();
    let locks_b = people[1]
        .stores
        .sessions
        .store()
        .try_lock_turn(key)
        .await
        .unwrap();
    assert!(
        locks_a.is_some() && locks_b.is_some(),
        "one turn lock shared by two scopes"
    );
    let minute = std::time::Duration::from_secs(60);
    let lease_a = people[0]
        .stores
        .lease
        .try_acquire("suite a", minute)
        .await
        .unwrap();
    let lease_b = people[1]
        .stores
        .lease
        .try_acquire("suite b", minute)
        .await
        .unwrap();
    let (Some(mut lease_a), Some(lease_b)) = (lease_a, lease_b) else {
        panic!("one Dream lease shared by two scopes");
    };
    assert_eq!(
        people[1]
            .stores
            .lease
            .holder()
            .await
            .unwrap()
            .map(|h| h.holder)
            .as_deref(),
        Some("suite b")
    );
    let _ = people[0].stores.lease.capabilities();
    people[0].stores.lease.renew(&mut lease_a).await.unwrap();
    people[0].stores.lease.check(lease_a.fence).await.unwrap();
    people[1].stores.lease.check(lease_b.fence).await.unwrap();
    commits_stay_apart(people, &lease_a, &lease_b).await;
    people[0].stores.lease.release(lease_a).await.unwrap();
    people[1].stores.lease.release(lease_b).await.unwrap();
    drop((locks_a, locks_b));
}

/// A memory commit under each scope's own lease changes that scope's files only.
async fn commits_stay_apart(
    people: &[Person; 2],
    lease_a: &nanobot_memory_store::Lease,
    lease_b: &nanobot_memory_store::Lease,
) {
    let pairs = [(&people[0], &people[1]), (&people[1], &people[0])];
    for (person, lease) in [(&people[0], lease_a), (&people[1], lease_b)] {
        let stores = &person.stores;
        assert_eq!(
            stores.commit.recover(lease.fence).await.unwrap(),
            Recovery::Nothing
        );
        let before = stores.documents.read(Document::Memory).await.unwrap();
        let text = format!("# Memory\n\n- {}\n- committed\n", person.canary);
        stores
            .commit
            .commit(&MemoryChange {
                fence: lease.fence,
                files: vec![FileChange {
                    file: MemoryFile::Document(Document::Memory),
                    expected: Expected::from_read(before.as_ref()),
                    text: Some(text.clone()),
                }],
                cursor: None,
                version: None,
                time: chrono::Utc::now(),
            })
            .await
            .unwrap();
        assert_eq!(
            stores.documents.read_text(Document::Memory).await.unwrap(),
            Some(text)
        );
    }
    for (me, other) in pairs {
        let text = me
            .stores
            .documents
            .read_text(Document::Memory)
            .await
            .unwrap();
        assert_clean("memory commit", &text_of(&text), me, other);
    }
}

/// Archive commits: each scope archives its own copy of the session; neither finds the
/// other's archive, and each journal holds its own only.
async fn archives_stay_apart(people: &[Person; 2], key: &SessionKey) {
    let pairs = [(&people[0], &people[1]), (&people[1], &people[0])];
    for (me, other) in pairs {
        let loaded = me.stores.sessions.store().load(key).await.unwrap().unwrap();
        let session = loaded.session;
        let from = session.last_consolidated();
        let to = from + 1;
        let digest = archive_digest(&session.messages()[from..to]);
        let mut after = session.clone();
        after.set_last_consolidated(to).unwrap();
        let found_before = me
            .stores
            .archive
            .find_archive(key, from as u64)
            .await
            .unwrap();
        assert!(
            found_before.is_empty(),
            "{} found {}'s archive",
            me.scope,
            other.scope
        );
        let committed = me
            .stores
            .archive
            .commit_archive(&ArchiveCommit {
                session: key,
                expected: loaded.revision,
                from: from as u64,
                to: to as u64,
                digest: &digest,
                entries: &[format!("- archived by {}", me.canary)],
                meta: after.meta(),
            })
            .await
            .unwrap();
        let found = me
            .stores
            .archive
            .find_archive(key, from as u64)
            .await
            .unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].cursors, committed.cursors);
        assert_clean(
            "find_archive",
            &text_of(&me.stores.journal.read_since(0, None).await.unwrap()),
            me,
            other,
        );
    }
}

/// Shared files are read-only from a user's scope; a write there is refused.
async fn shared_files_read_only(people: &[Person; 2]) {
    let documents = &people[0].stores.documents;
    assert!(
        documents
            .write(Document::Soul, "# Soul\nleak\n", Expected::Any)
            .await
            .is_err()
    );
    assert!(
        documents
            .write_skill("leak", "x", Expected::Any)
            .await
            .is_err()
    );
    assert!(documents.delete_skill("leak", Expected::Any).await.is_err());
    assert!(
        documents.initialize().await.is_err(),
        "initialize would write SOUL.md"
    );
}

/// The group rule: a group's chat scope sees no user's private files, and its turns are
/// kept in its own scope.
async fn group_sees_no_private_files(
    backend: &dyn MemoryBackend,
    agent: &Agent,
    key: &SessionKey,
    people: &[Person; 2],
) {
    let group = ScopeKey::local(Subject::Chat(ChatKey::parse("telegram:-100").unwrap()));
    let memory = agent.memory(&group).await.unwrap();
    let prompt = agent
        .build_prompt(&memory, key, "Who are we?")
        .await
        .unwrap();
    let text = text_of(&prompt.messages);
    for person in people {
        assert!(
            !text.contains(person.canary),
            "the group's prompt shows {}'s canary",
            person.scope
        );
    }
    // Its turns are kept in its own scope.
    let silent: nanobot_llm_port::TextSink = Arc::new(|_: &str| {});
    agent
        .turn(&memory, key, "Hello group", &silent)
        .await
        .unwrap();
    agent.finish().await.unwrap();
    let group_stores = backend.open(&group).await.unwrap();
    assert!(
        group_stores
            .sessions
            .store()
            .load(key)
            .await
            .unwrap()
            .is_some()
    );
    for person in people {
        let loaded = person
            .stores
            .sessions
            .store()
            .load(key)
            .await
            .unwrap()
            .unwrap();
        assert!(!text_of(&loaded.session.messages()).contains("Hello group"));
    }
}
