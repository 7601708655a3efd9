#![allow(clippy::unwrap_used)]
use super::*;
use crate::io::{self as fsio, Open};
use crate::observe::watch;
use std::sync::Arc;

fn dir(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fs-crash-{label}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_synced_append_survives_every_crash_and_an_unsynced_one_only_sometimes() {
    let root = dir("append");
    let path = root.join("log");
    fs::write(&path, b"old\n").unwrap();
    let recorder = Arc::new(Recorder::start(&root).unwrap());
    let _watching = watch(&root, recorder.clone());
    let mut file = fsio::open(&path, Open::APPEND_OR_CREATE).unwrap();
    fsio::append(&mut file, &path, b"synced\n").unwrap();
    fsio::sync_data(&file, &path).unwrap();
    recorder.mark(1);
    fsio::append(&mut file, &path, b"unsynced\n").unwrap();
    let trace = recorder.trace();
    assert_eq!(trace.operations(), 3);
    assert_eq!(trace.marks_before(3), vec![1]);
    let mut outcomes = BTreeSet::new();
    for seed in 0..200 {
        let state = trace.crash_state(3, seed);
        let bytes = state.file(Path::new("log")).unwrap().to_vec();
        assert!(bytes.starts_with(b"old\nsynced\n"), "{bytes:?}");
        outcomes.insert(bytes);
    }
    assert!(outcomes.contains(b"old\nsynced\n".as_slice()));
    assert!(outcomes.contains(b"old\nsynced\nunsynced\n".as_slice()));
    // Before the fsync, the first append may be gone too.
    let lost =
        (0..200).any(|seed| trace.crash_state(1, seed).file(Path::new("log")) == Some(b"old\n"));
    assert!(lost);
    fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_new_file_needs_its_directory_synced_and_a_rename_is_all_or_nothing() {
    let root = dir("rename");
    let recorder = Arc::new(Recorder::start(&root).unwrap());
    let _watching = watch(&root, recorder.clone());
    let path = root.join("doc");
    crate::write_atomic(&path, b"first version", crate::Sync::No).unwrap();
    let unsynced_end = recorder.operations();
    crate::write_atomic(&path, b"second version", crate::Sync::Yes).unwrap();
    let trace = recorder.trace();
    for seed in 0..300 {
        let state = trace.crash_state(trace.operations(), seed);
        assert_eq!(state.file(Path::new("doc")), Some(&b"second version"[..]));
        let early = trace.crash_state(unsynced_end, seed);
        let doc = early.file(Path::new("doc"));
        // Unsynced: gone, empty (the rename came through, the data did not), or whole.
        assert!(
            matches!(doc, None | Some(b"") | Some(b"first version")),
            "{doc:?}"
        );
    }
    let state = trace.crash_state(trace.operations(), 7);
    let out = dir("rename-out");
    state.materialize(&out).unwrap();
    assert_eq!(fs::read(out.join("doc")).unwrap(), b"second version");
    fs::remove_dir_all(&root).unwrap();
    fs::remove_dir_all(&out).unwrap();
}

#[test]
fn a_torn_write_keeps_whole_sectors() {
    let root = dir("torn");
    let path = root.join("big");
    let recorder = Arc::new(Recorder::start(&root).unwrap());
    let _watching = watch(&root, recorder.clone());
    let file = fsio::open(&path, Open::WRITE_OR_CREATE).unwrap();
    fsio::sync_dir(&root).unwrap();
    fsio::write_at(&file, &path, 0, &[7u8; 2000]).unwrap();
    let trace = recorder.trace();
    let mut lengths = BTreeSet::new();
    for seed in 0..300 {
        let state = trace.crash_state(trace.operations(), seed);
        let Some(bytes) = state.file(Path::new("big")) else {
            continue;
        };
        let sevens = bytes.iter().take_while(|b| **b == 7).count();
        assert!(sevens % 512 == 0 || sevens == 2000, "{sevens}");
        assert!(bytes[sevens..].iter().all(|b| *b == 0));
        lengths.insert(bytes.len());
    }
    assert!(lengths.len() > 2, "{lengths:?}");
    fs::remove_dir_all(&root).unwrap();
}
