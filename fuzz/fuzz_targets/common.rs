//! What the fuzz targets share: a scratch directory per process, and a `block_on` for the
//! stores' async functions (they do their IO synchronously, so one poll finishes them).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// `<temp>/nanobot-fuzz-<label>-<pid>/`, created once.
pub fn scratch(label: &str, cell: &'static OnceLock<PathBuf>) -> &'static Path {
    cell.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("nanobot-fuzz-{label}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    })
}

#[allow(dead_code)] // The configuration target has nothing async.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
    }
}
