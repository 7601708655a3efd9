//! Embeds the labelled search corpus (`fixtures/search`) for the conformance suite, so the
//! suite runs from a registry package with no file outside it: one `include_str!` per file,
//! listed here from the directory so a file the generator adds is embedded too.

use std::path::{Path, PathBuf};

fn main() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/search");
    println!("cargo::rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    collect(&root, &root, &mut files);
    files.sort();
    let mut table = String::from("&[\n");
    for (name, path) in files {
        table.push_str(&format!(
            "    ({name:?}, include_str!({:?})),\n",
            path.display().to_string()
        ));
    }
    table.push_str("]\n");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default()).join("corpus.rs");
    std::fs::write(out, table)
}

/// The corpus's data files (`.jsonl`, `.json`, `.md` under `workspace/`), by name relative
/// to the corpus root.
fn collect(root: &Path, dir: &Path, files: &mut Vec<(String, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        println!("cargo::rerun-if-changed={}", path.display());
        if path.is_dir() {
            collect(root, &path, files);
            continue;
        }
        let Ok(name) = path.strip_prefix(root) else {
            continue;
        };
        let name = name.to_string_lossy().replace('\\', "/");
        let data = name.ends_with(".jsonl")
            || name == "queries.json"
            || (name.starts_with("workspace/") && name.ends_with(".md"));
        if data {
            files.push((name, path));
        }
    }
}
