//! Memory versions (in memory and as a git repository), the Dream lease, auxiliary files and
//! the documents' refusal of symbolic links.

use std::path::Path;
use std::process::Command;

use chrono::{TimeZone, Utc};
use nanobot_bench_workload::testing::TempDir;
use nanobot_memory_store::{
    AuxFile, Document, FileDocuments, FileLease, GitVersions, InMemoryVersions, MemoryDocuments,
    MemoryError, MemoryLease, MemoryVersions, Snapshot,
};

fn snapshot(files: &[(&str, &str)]) -> Snapshot {
    files
        .iter()
        .map(|(p, c)| ((*p).to_owned(), (*c).to_owned()))
        .collect()
}

fn at(minute: u32) -> chrono::DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 9, minute, 0).unwrap()
}

/// The contract every versions backend keeps.
async fn contract(versions: &dyn MemoryVersions) {
    assert!(versions.log(10).await.unwrap().is_empty());
    let v1 = snapshot(&[
        ("SOUL.md", "soul 1\n"),
        ("memory/MEMORY.md", "m\n"),
        ("memory/.dream_cursor", "0"),
    ]);
    let first = versions
        .commit("dream: first", &v1, at(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.parent, None);
    assert_eq!(first.short_id().len(), 8);
    // No empty versions.
    assert_eq!(
        versions.commit("dream: same", &v1, at(2)).await.unwrap(),
        None
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
        .commit("dream: second\n\nbody", &v2, at(3))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(second.parent.as_deref(), Some(first.id.as_str()));
    assert_eq!(second.subject(), "dream: second");
    assert_eq!(second.time, at(3));

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
}

#[tokio::test]
async fn in_memory_versions_keep_the_contract() {
    contract(&InMemoryVersions::new()).await;
}

#[tokio::test]
async fn git_versions_keep_the_contract_and_git_reads_them() {
    let ws = TempDir::new("git-versions");
    let git = GitVersions::open(ws.path()).unwrap();
    contract(&git).await;
    // Reopening finds the same history.
    let again = GitVersions::open(ws.path()).unwrap();
    assert_eq!(again.log(10).await.unwrap(), git.log(10).await.unwrap());

    let Some(git_cli) = git_program() else {
        return;
    };
    let dir = git.dir().to_str().unwrap().to_owned();
    let run = |args: &[&str]| {
        let out = Command::new(&git_cli)
            .arg("--git-dir")
            .arg(&dir)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    run(&["fsck", "--strict", "--no-dangling"]);
    let head = git.log(1).await.unwrap().remove(0);
    assert_eq!(run(&["rev-parse", "HEAD"]).trim(), head.id);
    assert_eq!(
        run(&["log", "-1", "--format=%B"]).trim_end(),
        "dream: second\n\nbody"
    );
    assert_eq!(run(&["show", "HEAD:USER.md"]), "ünïcödé ✓\n");
    assert_eq!(
        run(&["show", "HEAD:skills/tea/SKILL.md"]),
        "---\nname: tea\n---\nbrew\n"
    );
    assert_eq!(
        run(&["log", "--format=%h", "--abbrev=8", "-1"]).trim(),
        head.short_id()
    );
    assert_eq!(
        run(&["log", "--format=%ct", "-1"]).trim(),
        at(3).timestamp().to_string()
    );

    // A commit git itself writes is read back too.
    let tree = run(&["rev-parse", "HEAD^{tree}"]);
    let made = Command::new(&git_cli)
        .args([
            "--git-dir",
            &dir,
            "commit-tree",
            tree.trim(),
            "-p",
            &head.id,
            "-m",
            "user: by git",
        ])
        .env("GIT_AUTHOR_NAME", "u")
        .env("GIT_AUTHOR_EMAIL", "u@x")
        .env("GIT_COMMITTER_NAME", "u")
        .env("GIT_COMMITTER_EMAIL", "u@x")
        .output()
        .unwrap();
    let id = String::from_utf8(made.stdout).unwrap().trim().to_owned();
    run(&["update-ref", "refs/heads/main", &id]);
    let log = git.log(1).await.unwrap();
    assert_eq!(
        (log[0].id.as_str(), log[0].subject()),
        (id.as_str(), "user: by git")
    );
}

fn git_program() -> Option<String> {
    nanobot_bench_workload::testing::git_program("git cross-check of GitVersions")
        .then(|| "git".to_owned())
}

#[tokio::test]
async fn ambiguous_prefixes_are_refused_with_candidates() {
    let versions = InMemoryVersions::new();
    let mut ids = Vec::new();
    for i in 0..40 {
        let v = versions
            .commit("dream: n", &snapshot(&[("SOUL.md", &i.to_string())]), at(1))
            .await
            .unwrap()
            .unwrap();
        ids.push(v.id);
    }
    // Find two ids sharing a 4-character prefix, if any; the contract is checked on them.
    let mut sorted = ids.clone();
    sorted.sort();
    if let Some(pair) = sorted.windows(2).find(|w| w[0][..4] == w[1][..4]) {
        match versions.resolve(&pair[0][..4]).await {
            Err(MemoryError::AmbiguousVersion { candidates, .. }) => assert!(candidates.len() >= 2),
            other => panic!("expected ambiguity, got {other:?}"),
        }
    }
    let err = nanobot_memory_store::resolve_prefix("abcd", ["abcd1", "abcd2"]).unwrap_err();
    assert!(err.to_string().contains("matches 2 versions"), "{err}");
}

/// A lock file written by an older release (the holder alone) is read as fence 0, and the
/// next grant takes fence 1.
#[tokio::test]
async fn an_old_lock_file_is_read_as_fence_zero() {
    let ws = TempDir::new("lease-old");
    std::fs::create_dir_all(ws.path().join("memory")).unwrap();
    std::fs::write(ws.path().join("memory/.dream.lock"), "scheduled, pid 9").unwrap();
    let lease = FileLease::open(ws.path()).unwrap();
    let held = lease
        .try_acquire("new", std::time::Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(held.fence, nanobot_memory_store::Fence(1));
    drop(held);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("memory/.dream.lock")).unwrap(),
        "1\n"
    );
}

#[tokio::test]
async fn aux_files_and_symbolic_links() {
    let ws = TempDir::new("docs-links");
    let outside = TempDir::new("docs-outside");
    let docs = FileDocuments::open(ws.path()).unwrap();
    docs.write_aux(AuxFile::DreamPrompt, "Custom.\n")
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.path().join("prompts/dream.md")).unwrap(),
        "Custom.\n"
    );
    assert_eq!(docs.read_aux(AuxFile::DreamState).await.unwrap(), None);

    // A skill folder that is a link to elsewhere is neither read, listed nor written.
    std::fs::write(outside.path().join("SKILL.md"), "secret").unwrap();
    std::fs::create_dir_all(ws.path().join("skills")).unwrap();
    symlink(outside.path(), &ws.path().join("skills/evil"));
    assert!(docs.read_skill("evil").await.is_err());
    assert!(
        docs.write_skill("evil", "pwned", nanobot_memory_store::Expected::Any)
            .await
            .is_err()
    );
    let listed = docs.skills().await.unwrap();
    assert!(listed.skills.is_empty());
    assert!(
        listed.skipped[0].contains("symbolic link"),
        "{:?}",
        listed.skipped
    );
    assert_eq!(
        std::fs::read_to_string(outside.path().join("SKILL.md")).unwrap(),
        "secret"
    );

    // SOUL.md as a link is refused, and the target is untouched.
    std::fs::write(outside.path().join("target.md"), "keep").unwrap();
    symlink(
        &outside.path().join("target.md"),
        &ws.path().join("SOUL.md"),
    );
    let err = docs
        .write(Document::Soul, "x", nanobot_memory_store::Expected::Any)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert!(docs.read(Document::Soul).await.is_err());
    assert_eq!(
        std::fs::read_to_string(outside.path().join("target.md")).unwrap(),
        "keep"
    );
}

fn symlink(target: &Path, link: &Path) {
    #[cfg(unix)]
    std::os::unix::fs::symlink(target, link).unwrap();
}

/// Issue 12.8: `git gc` (packed objects) and `git pack-refs` (packed branch) leave the
/// versions working: the log, every version's files, a new commit, and `git fsck`.
#[tokio::test]
async fn versions_survive_git_gc_and_packed_refs() {
    if git_program().is_none() {
        return;
    }
    let ws = TempDir::new("git-gc");
    let git = GitVersions::open(ws.path()).unwrap();
    let at = |s: i64| Utc.timestamp_opt(1_800_000_000 + s, 0).unwrap();
    for i in 0..3 {
        git.commit(
            &format!("version {i}"),
            &snapshot(&[
                ("USER.md", &format!("# User\n\n- fact {i}\n")),
                ("skills/tea/SKILL.md", "tea"),
            ]),
            at(i),
        )
        .await
        .unwrap()
        .unwrap();
    }
    let before = git.log(10).await.unwrap();
    let dir = git.dir().to_str().unwrap().to_owned();
    for args in [
        &["gc", "--aggressive", "--prune=now", "-q"][..],
        &["pack-refs", "--all"],
    ] {
        let out = Command::new("git")
            .arg("--git-dir")
            .arg(&dir)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(
        !ws.path()
            .join(".nanobot/memory.git/refs/heads/main")
            .exists(),
        "packed"
    );

    let again = GitVersions::open(ws.path()).unwrap();
    assert_eq!(again.log(10).await.unwrap(), before);
    let files = again.files_at(&before[1].id).await.unwrap();
    assert_eq!(files["USER.md"], "# User\n\n- fact 1\n");
    assert_eq!(files["skills/tea/SKILL.md"], "tea");
    let next = again
        .commit(
            "after gc",
            &snapshot(&[("USER.md", "# User\n\n- after\n")]),
            at(9),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next.parent.as_deref(), Some(before[0].id.as_str()));
    assert_eq!(again.resolve(&next.id[..8]).await.unwrap(), next);
    let fsck = Command::new("git")
        .args(["--git-dir", &dir, "fsck", "--strict"])
        .output()
        .unwrap();
    assert!(
        fsck.status.success(),
        "{}",
        String::from_utf8_lossy(&fsck.stderr)
    );
}

/// An erasure leaves no object of the old history: git itself, listing every object in the
/// repository (reachable or not, loose or packed), finds the erased text nowhere; a
/// repository packed by `git gc` before is rewritten too, and git checks the result.
#[tokio::test]
async fn a_rewrite_leaves_no_old_object_behind() {
    let ws = TempDir::new("git-rewrite");
    let git = GitVersions::open(ws.path()).unwrap();
    for (i, text) in [
        "- tea\n",
        "- tea\n- door 4417\n",
        "- tea\n- door 4417\n- jazz\n",
    ]
    .iter()
    .enumerate()
    {
        let message = format!("dream: run {i}\n\n+{}", text.lines().last().unwrap_or(""));
        git.commit(
            &message,
            &snapshot(&[("memory/MEMORY.md", text)]),
            at(i as u32),
        )
        .await
        .unwrap();
    }
    let dir = git.dir().to_str().unwrap().to_owned();
    let git_cli = |args: &[&str]| {
        let out = Command::new("git")
            .arg("--git-dir")
            .arg(&dir)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    git_cli(&["gc", "-q"]);
    let all = ["cat-file", "--batch-all-objects", "--batch"];
    assert!(git_cli(&all).contains("4417"), "there before");
    let edit = |v: &nanobot_memory_store::Version, mut files: Snapshot| {
        for text in files.values_mut() {
            *text = text.replace("- door 4417\n", "");
        }
        (v.message.replace("door 4417", "(erased)"), files)
    };
    assert_eq!(git.rewrite(&edit).await.unwrap(), 2);
    assert!(!git_cli(&all).contains("4417"), "an old object survived");
    git_cli(&["fsck", "--strict"]);
    assert_eq!(git.log(10).await.unwrap().len(), 3);
    // A reopened handle (another process) reads the new history and writes after it.
    let again = GitVersions::open(ws.path()).unwrap();
    let tip = again.log(1).await.unwrap().remove(0);
    let next = again
        .commit(
            "after",
            &snapshot(&[("memory/MEMORY.md", "- tea\n")]),
            at(9),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next.parent.as_deref(), Some(tip.id.as_str()));
    assert!(!ws.path().join(".nanobot/memory.git.old").exists());
    assert!(!ws.path().join(".nanobot/memory.git.rewrite").exists());
}

/// A crash between moving the old history away and moving the new one in: the next open
/// finishes the swap, nothing of the history is lost.
#[tokio::test]
async fn an_interrupted_swap_is_finished_at_the_next_open() {
    let ws = TempDir::new("git-swap");
    let git = GitVersions::open(ws.path()).unwrap();
    git.commit("one", &snapshot(&[("USER.md", "- a\n")]), at(1))
        .await
        .unwrap();
    let nanobot = ws.path().join(".nanobot");
    // What a rewrite leaves when it dies after its first rename.
    copy_dir(
        &nanobot.join("memory.git"),
        &nanobot.join("memory.git.rewrite"),
    );
    std::fs::write(nanobot.join("memory.git.rewrite/REWRITTEN"), "").unwrap();
    std::fs::rename(nanobot.join("memory.git"), nanobot.join("memory.git.old")).unwrap();
    let again = GitVersions::open(ws.path()).unwrap();
    assert_eq!(again.log(10).await.unwrap().len(), 1);
    assert!(!nanobot.join("memory.git.old").exists());
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}
