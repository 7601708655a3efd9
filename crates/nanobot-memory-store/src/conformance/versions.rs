//! Memory versions' cases.

use super::*;

pub(super) fn snapshot(files: &[(&str, &str)]) -> Snapshot {
    files
        .iter()
        .map(|(p, c)| ((*p).to_owned(), (*c).to_owned()))
        .collect()
}

pub(super) fn minute(m: u32) -> chrono::DateTime<chrono::Utc> {
    use chrono::TimeZone;
    chrono::Utc.with_ymd_and_hms(2026, 11, 30, 9, m, 0).unwrap()
}

/// Versions: no empty versions, a parent chain, the log newest first, lookup by a unique
/// prefix in any case, the files as of any version.
pub async fn versions_contract(versions: impl MemoryVersions) {
    assert!(versions.log(10).await.unwrap().is_empty());
    let v1 = snapshot(&[
        ("SOUL.md", "soul 1\n"),
        ("memory/MEMORY.md", "m\n"),
        ("memory/.dream_cursor", "0"),
    ]);
    let first = versions
        .commit("dream: first", &v1, minute(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.parent, None);
    assert_eq!(first.short_id().len(), 8);
    assert_eq!(
        versions
            .commit("dream: same", &v1, minute(2))
            .await
            .unwrap(),
        None,
        "no empty versions"
    );
    let v2 = snapshot(&[
        ("SOUL.md", "soul 2\n"),
        ("memory/MEMORY.md", "m\n"),
        ("memory/.dream_cursor", "3"),
        ("skills/tea/SKILL.md", "---\nname: tea\n---\nbrew\n"),
        ("skills/a-b/SKILL.md", "x"),
        ("skills/a/SKILL.md", "y"),
        ("USER.md", "ünïcödé ✓\n"),
    ]);
    let second = versions
        .commit("dream: second\n\nbody", &v2, minute(3))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(second.parent.as_deref(), Some(first.id.as_str()));
    assert_eq!(second.subject(), "dream: second");
    assert_eq!(second.time, minute(3));
    let log = versions.log(10).await.unwrap();
    assert_eq!(
        log.iter().map(|v| v.id.as_str()).collect::<Vec<_>>(),
        [second.id.as_str(), first.id.as_str()]
    );
    assert_eq!(versions.log(1).await.unwrap().len(), 1);
    assert_eq!(log[0].message, "dream: second\n\nbody");
    assert_eq!(versions.files_at(&first.id).await.unwrap(), v1);
    assert_eq!(versions.files_at(&second.id).await.unwrap(), v2);
    assert_eq!(
        versions.resolve(&second.id[..8]).await.unwrap().id,
        second.id
    );
    assert_eq!(
        versions
            .resolve(&second.id.to_uppercase())
            .await
            .unwrap()
            .id,
        second.id
    );
    for bad in ["", "abc", "zzzzzzzz", "0000000000"] {
        assert!(
            matches!(
                versions.resolve(bad).await,
                Err(MemoryError::UnknownVersion { .. })
            ),
            "{bad:?}"
        );
    }
    assert!(matches!(
        versions
            .files_at("0000000000000000000000000000000000000000")
            .await,
        Err(MemoryError::UnknownVersion { .. })
    ));
}

/// A long history: the log's limit takes the newest, and every version's files come back.
pub async fn versions_history(versions: impl MemoryVersions) {
    let mut ids = Vec::new();
    for i in 0..25 {
        let files = snapshot(&[
            ("USER.md", &format!("# User\n- fact {i}\n")),
            ("memory/.dream_cursor", &i.to_string()),
        ]);
        ids.push(
            versions
                .commit(&format!("dream: run {i}"), &files, minute(i))
                .await
                .unwrap()
                .unwrap()
                .id,
        );
    }
    let log = versions.log(10).await.unwrap();
    assert_eq!(
        log.iter().map(|v| v.id.clone()).collect::<Vec<_>>(),
        ids.iter().rev().take(10).cloned().collect::<Vec<_>>()
    );
    for (i, id) in ids.iter().enumerate() {
        let files = versions.files_at(id).await.unwrap();
        assert_eq!(files["USER.md"], format!("# User\n- fact {i}\n"));
        assert_eq!(
            versions.resolve(id).await.unwrap().subject(),
            format!("dream: run {i}")
        );
    }
}

/// Two instances over one storage: a version committed through one is the other's latest,
/// A rewrite (an erasure) changes what every version holds, keeps the versions' order,
/// times and count, and the history goes on from it.
pub async fn versions_rewrite(versions: impl MemoryVersions) {
    let secret = "- Door code 4417\n";
    for (m, text) in [
        (1, "# Memory\n"),
        (2, "# Memory\n- Door code 4417\n"),
        (3, "# Memory\n- Door code 4417\n- Likes tea\n"),
    ] {
        let message = format!("dream: run {m}\n\n+{}", text.lines().last().unwrap_or(""));
        let files = snapshot(&[("memory/MEMORY.md", text)]);
        versions.commit(&message, &files, minute(m)).await.unwrap();
    }
    let erase = |_: &Version, mut files: Snapshot| -> (String, Snapshot) {
        for text in files.values_mut() {
            *text = text.replace(secret, "");
        }
        (String::new(), files)
    };
    let edit = |version: &Version, files: Snapshot| {
        let (_, files) = erase(version, files);
        (version.message.replace("Door code 4417", "(erased)"), files)
    };
    assert_eq!(versions.rewrite(&edit).await.unwrap(), 2);
    let log = versions.log(10).await.unwrap();
    assert_eq!(log.len(), 3);
    let times: Vec<_> = log.iter().map(|v| v.time).collect();
    assert_eq!(times, [minute(3), minute(2), minute(1)]);
    for version in &log {
        assert!(!version.message.contains("4417"), "{}", version.message);
        let files = versions.files_at(&version.id).await.unwrap();
        assert!(files.values().all(|t| !t.contains("4417")), "{files:?}");
        assert_eq!(versions.resolve(&version.id).await.unwrap().id, version.id);
    }
    assert_eq!(log[0].parent.as_deref(), Some(log[1].id.as_str()));
    let files = snapshot(&[("memory/MEMORY.md", "# Memory\n- Likes tea\n- Walks\n")]);
    let next = versions
        .commit("dream: run 4", &files, minute(4))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next.parent.as_deref(), Some(log[0].id.as_str()));
    assert_eq!(
        versions.rewrite(&edit).await.unwrap(),
        0,
        "nothing left to erase"
    );
}

/// and its next version's parent.
pub async fn shared_versions(first: impl MemoryVersions, second: impl MemoryVersions) {
    let one = first
        .commit("dream: one", &snapshot(&[("USER.md", "1")]), minute(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(second.log(1).await.unwrap()[0].id, one.id);
    let two = second
        .commit("dream: two", &snapshot(&[("USER.md", "2")]), minute(2))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(two.parent.as_deref(), Some(one.id.as_str()));
    assert_eq!(first.resolve(&two.id).await.unwrap(), two);
}
