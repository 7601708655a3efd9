//! The memory documents' cases: files, skills, compare-and-set, stamps.

use super::*;

/// Documents: missing reads as `None`, writes replace, templates fill only what is missing.
pub async fn documents_read_write(store: impl MemoryDocuments) {
    assert_eq!(store.read(Document::Soul).await.unwrap(), None);
    let written = store.initialize().await.unwrap();
    assert_eq!(written, Document::ALL);
    assert_eq!(
        store.read_text(Document::User).await.unwrap().as_deref(),
        Some(Document::User.template())
    );
    let before = store.read(Document::Memory).await.unwrap();
    let version = store
        .write(
            Document::Memory,
            "# Memory\n- likes tea 🍵\n",
            Expected::from_read(before.as_ref()),
        )
        .await
        .unwrap();
    let read = store.read(Document::Memory).await.unwrap().unwrap();
    assert_eq!(read.text, "# Memory\n- likes tea 🍵\n");
    assert_eq!(read.version, version);
    assert!(!read.decoded_lossily);
    // Initializing again touches nothing.
    assert!(store.initialize().await.unwrap().is_empty());
    assert_eq!(
        store.read_text(Document::Memory).await.unwrap().as_deref(),
        Some("# Memory\n- likes tea 🍵\n")
    );
}

/// Skills: sorted listing with their text, read, replace, delete; hostile names refused.
pub async fn skills(store: impl MemoryDocuments) {
    assert!(store.skills().await.unwrap().skills.is_empty());
    store
        .write_skill(
            "weather",
            "---\nname: weather\ndescription: Current weather.\n---\n# Weather\n",
            Expected::Absent,
        )
        .await
        .unwrap();
    store.write_skill("a-first", "---\ndescription: \"Quoted: yes\"\nmetadata: {\"nanobot\": {\"emoji\": \"🦞\"}}\n---\nbody\n", Expected::Absent).await.unwrap();
    store
        .write_skill("no_front_matter", "just text\n", Expected::Absent)
        .await
        .unwrap();
    let listed = store.skills().await.unwrap();
    let names: Vec<&str> = listed.skills.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["a-first", "no_front_matter", "weather"]);
    assert_eq!(listed.skills[1].document.text, "just text\n");
    assert_eq!(
        store.skill_names().await.unwrap(),
        ["a-first", "no_front_matter", "weather"]
    );
    let weather = store.read_skill("weather").await.unwrap().unwrap();
    store
        .write_skill(
            "weather",
            "---\ndescription: Changed.\n---\n",
            Expected::Version(weather.version),
        )
        .await
        .unwrap();
    let changed = store.read_skill("weather").await.unwrap().unwrap();
    assert_eq!(changed.text, "---\ndescription: Changed.\n---\n");
    assert!(
        store
            .delete_skill("weather", Expected::Version(changed.version))
            .await
            .unwrap()
    );
    assert!(!store.delete_skill("weather", Expected::Any).await.unwrap());
    assert_eq!(store.read_skill("weather").await.unwrap(), None);
    for hostile in [
        "",
        "..",
        "../x",
        "a/b",
        "/etc",
        "a b",
        "é",
        &"x".repeat(65),
        "a\0b",
        "C:",
        "skill.md",
    ] {
        let error = store
            .write_skill(hostile, "x", Expected::Any)
            .await
            .unwrap_err();
        assert!(
            matches!(error, MemoryError::InvalidName { .. }),
            "{hostile:?}: {error}"
        );
        assert!(store.read_skill(hostile).await.is_err());
    }
}

/// Compare-and-set: a write that names a version other than the stored one, or expects no
/// document where there is one, is a conflict and changes nothing.
pub async fn documents_compare_and_set(store: impl MemoryDocuments) {
    document_versions_refuse_stale_writers(&store).await;
    skill_versions_refuse_stale_writers(&store).await;
    recreated_skills_refuse_older_versions(&store).await;
    racing_writers_one_wins(&store).await;
}

/// A document written from a version that is no longer current is refused.
async fn document_versions_refuse_stale_writers(store: &impl MemoryDocuments) {
    let first = store
        .write(Document::User, "# User\n- one\n", Expected::Absent)
        .await
        .unwrap();
    let error = store
        .write(Document::User, "# User\n- again\n", Expected::Absent)
        .await
        .unwrap_err();
    assert!(matches!(error, MemoryError::Conflict { .. }), "{error}");
    let second = store
        .write(Document::User, "# User\n- two\n", Expected::Version(first))
        .await
        .unwrap();
    assert_ne!(first, second, "a change gives a new version");
    // A writer that read the first version is stale now.
    let error = store
        .write(
            Document::User,
            "# User\n- lost update\n",
            Expected::Version(first),
        )
        .await
        .unwrap_err();
    assert!(matches!(error, MemoryError::Conflict { .. }), "{error}");
    let read = store.read(Document::User).await.unwrap().unwrap();
    assert_eq!(read.text, "# User\n- two\n");
    assert_eq!(read.version, second);
}

/// Skills too.
async fn skill_versions_refuse_stale_writers(store: &impl MemoryDocuments) {
    let skill = store
        .write_skill("tea", "brew\n", Expected::Absent)
        .await
        .unwrap();
    store
        .write_skill("tea", "brew longer\n", Expected::Version(skill))
        .await
        .unwrap();
    let error = store
        .write_skill("tea", "stale\n", Expected::Version(skill))
        .await
        .unwrap_err();
    assert!(matches!(error, MemoryError::Conflict { .. }), "{error}");
    let error = store
        .delete_skill("tea", Expected::Version(skill))
        .await
        .unwrap_err();
    assert!(matches!(error, MemoryError::Conflict { .. }), "{error}");
    assert_eq!(
        store.read_skill("tea").await.unwrap().unwrap().text,
        "brew longer\n"
    );
}

async fn recreated_skills_refuse_older_versions(store: &impl MemoryDocuments) {
    // A skill deleted and created again with other text: a writer holding a version from
    // before the deletion is stale (no version comes back for other text; a per-document
    // counter would start again where it started before).
    let held = store
        .write_skill("chai", "spiced\n", Expected::Absent)
        .await
        .unwrap();
    assert!(
        store
            .delete_skill("chai", Expected::Version(held))
            .await
            .unwrap()
    );
    store
        .write_skill("chai", "plain\n", Expected::Absent)
        .await
        .unwrap();
    let error = store
        .write_skill(
            "chai",
            "from before the deletion\n",
            Expected::Version(held),
        )
        .await
        .unwrap_err();
    assert!(matches!(error, MemoryError::Conflict { .. }), "{error}");
    assert_eq!(
        store.read_skill("chai").await.unwrap().unwrap().text,
        "plain\n"
    );
}

/// Racing writers from one version: exactly one wins.
async fn racing_writers_one_wins(store: &impl MemoryDocuments) {
    let base = store.read(Document::Memory).await.unwrap();
    let expected = Expected::from_read(base.as_ref());
    let wins = AtomicUsize::new(0);
    let racers = (0..6)
        .map(|i| {
            let wins = &wins;
            Box::pin(async move {
                yield_now().await;
                match store
                    .write(
                        Document::Memory,
                        &format!("# Memory\n- racer {i}\n"),
                        expected,
                    )
                    .await
                {
                    Ok(_) => {
                        wins.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(MemoryError::Conflict { .. }) => {}
                    Err(other) => panic!("{other}"),
                }
            }) as Pin<Box<dyn Future<Output = ()> + Send + '_>>
        })
        .collect();
    interleave(racers).await;
    assert_eq!(wins.load(Ordering::SeqCst), 1, "one writer wins the race");
}

/// The stamp, for a store that gives one: the same while nothing changes (a refused write
/// changes nothing), different after every change to a document or skill, and never the
/// stamp of other contents: a stamp seen again (a skill deleted and created again, say)
/// means the same documents as when it was seen first.
pub async fn documents_stamp(store: impl MemoryDocuments) {
    let Some(start) = store.stamp().await.unwrap() else {
        return; // no stamps: readers read every time, nothing to check
    };
    let mut watch = StampWatch {
        store: &store,
        seen: Vec::new(),
    };
    assert_eq!(watch.stamp().await, start, "nothing changed");
    let contents = watch.contents().await;
    watch.seen.push((start, contents));
    stamp_follows_documents(&mut watch).await;
    stamp_follows_skills(&mut watch).await;
    store
        .write(Document::User, "# User\n", Expected::Any)
        .await
        .unwrap();
    watch.changed("another document").await;
}

/// Documents created, replaced, and a refused write that changes nothing.
async fn stamp_follows_documents<S: MemoryDocuments>(watch: &mut StampWatch<'_, S>) {
    let store = watch.store;
    let memory = store
        .write(Document::Memory, "# Memory\n- one\n", Expected::Absent)
        .await
        .unwrap();
    watch.changed("a document created").await;
    store
        .write(
            Document::Memory,
            "# Memory\n- two\n",
            Expected::Version(memory),
        )
        .await
        .unwrap();
    watch.changed("a document replaced").await;
    let before_refusal = watch.stamp().await;
    assert!(
        store
            .write(
                Document::Memory,
                "# Memory\n- stale\n",
                Expected::Version(memory)
            )
            .await
            .is_err()
    );
    assert_eq!(
        watch.stamp().await,
        before_refusal,
        "a refused write changed the stamp"
    );
}

/// A skill created, replaced, deleted and created again.
async fn stamp_follows_skills<S: MemoryDocuments>(watch: &mut StampWatch<'_, S>) {
    let store = watch.store;
    let tea = store
        .write_skill("tea", "---\ndescription: Tea.\n---\n", Expected::Absent)
        .await
        .unwrap();
    watch.changed("a skill created").await;
    store
        .write_skill(
            "tea",
            "---\ndescription: Green tea.\n---\n",
            Expected::Version(tea),
        )
        .await
        .unwrap();
    watch.changed("a skill replaced").await;
    assert!(store.delete_skill("tea", Expected::Any).await.unwrap());
    watch.changed("a skill deleted").await;
    store
        .write_skill(
            "tea",
            "---\ndescription: Black tea.\n---\n",
            Expected::Absent,
        )
        .await
        .unwrap();
    watch.changed("a skill created again").await;
}

/// A store's stamps as a test sees them, with the contents each stamp stood for.
struct StampWatch<'a, S> {
    store: &'a S,
    seen: Vec<(DocumentsStamp, Vec<Option<String>>)>,
}

impl<S: MemoryDocuments> StampWatch<'_, S> {
    async fn stamp(&self) -> DocumentsStamp {
        self.store
            .stamp()
            .await
            .unwrap()
            .expect("a stamp once, a stamp always")
    }

    async fn contents(&self) -> Vec<Option<String>> {
        let mut all = Vec::new();
        for document in Document::ALL {
            all.push(self.store.read_text(document).await.unwrap());
        }
        for skill in self.store.skills().await.unwrap().skills {
            all.push(Some(format!("{}: {}", skill.name, skill.document.text)));
        }
        all
    }

    /// After a change: a new stamp that holds still, never one seen with other contents.
    async fn changed(&mut self, what: &str) {
        let now = self.stamp().await;
        let (previous, _) = self.seen.last().expect("the start");
        assert_ne!(now, *previous, "{what}: the stamp did not change");
        assert_eq!(
            self.stamp().await,
            now,
            "{what}: the stamp moved with nothing changing"
        );
        let now_contents = self.contents().await;
        for (earlier, earlier_contents) in &self.seen {
            if *earlier == now {
                assert_eq!(
                    *earlier_contents, now_contents,
                    "{what}: a stamp seen before, with other documents"
                );
            }
        }
        self.seen.push((now, now_contents));
    }
}

/// Two instances over one storage: a write through one makes the other's read stale.
pub async fn shared_documents(first: impl MemoryDocuments, second: impl MemoryDocuments) {
    let created = first
        .write(Document::Memory, "# Memory\n", Expected::Absent)
        .await
        .unwrap();
    let seen = second.read(Document::Memory).await.unwrap().unwrap();
    assert_eq!(seen.version, created);
    second
        .write(
            Document::Memory,
            "# Memory\n- from the second\n",
            Expected::Version(created),
        )
        .await
        .unwrap();
    let error = first
        .write(
            Document::Memory,
            "# Memory\n- stale\n",
            Expected::Version(created),
        )
        .await
        .unwrap_err();
    assert!(matches!(error, MemoryError::Conflict { .. }), "{error}");
    assert_eq!(
        first.read_text(Document::Memory).await.unwrap().as_deref(),
        Some("# Memory\n- from the second\n")
    );
    // A stamp sees the other instance's changes.
    if let Some(before) = first.stamp().await.unwrap() {
        second
            .write_skill("shared", "---\ndescription: Shared.\n---\n", Expected::Any)
            .await
            .unwrap();
        assert_ne!(first.stamp().await.unwrap(), Some(before));
    }
}
