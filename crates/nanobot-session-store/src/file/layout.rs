//! Where sessions live: nanobot-ai's namespace under its sessions root, and the
//! workspace id.

use super::*;

/// Finds, recovers or creates nanobot-ai's session namespace for `workspace`.
pub(super) fn nanobot_namespace(
    workspace: &Path,
    sessions_root: &Path,
) -> Result<PathBuf, SessionError> {
    fs::create_dir_all(workspace)
        .map_err(|e| SessionError::io("create the workspace", workspace, e))?;
    let workspace = fs::canonicalize(workspace)
        .map_err(|e| SessionError::io("resolve the workspace", workspace, e))?;
    fs::create_dir_all(sessions_root)
        .map_err(|e| SessionError::io("create the sessions root", sessions_root, e))?;
    let root = fs::canonicalize(sessions_root)
        .map_err(|e| SessionError::io("resolve the sessions root", sessions_root, e))?;
    if root.starts_with(&workspace) {
        return Err(SessionError::InvalidStorage {
            path: root,
            reason: "session storage must be outside the agent workspace (nanobot-ai refuses it too); choose a sessions root elsewhere".into(),
        });
    }
    let lock_path = root.join(".workspace-migration.lock");
    let lock = fsio::open(&lock_path, Open::WRITE_OR_CREATE)
        .map_err(|e| SessionError::io("open", &lock_path, e))?;
    lock.lock()
        .map_err(|e| SessionError::io("lock", &lock_path, e))?;

    let id_path = workspace.join(".nanobot").join("workspace-id");
    let mut id = workspace_id(&id_path, &root, &workspace)?;
    for _ in 0..3 {
        let ns = root.join(&id);
        let marker = ns.join(".workspace");
        let expected = format!("{}\n", workspace.display());
        match fsio::read_to_string(&marker) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                nanobot_fs_support::create_dir_durable(&ns)?;
                let has_data = fs::read_dir(&ns)
                    .map_err(|e| SessionError::io("list", &ns, e))?
                    .any(|entry| entry.is_ok_and(|e| e.file_name() != ".session-files.lock"));
                if has_data {
                    return Err(SessionError::InvalidStorage {
                        path: ns,
                        reason: "the session namespace has data but no workspace marker".into(),
                    });
                }
                write_marker(&marker, &expected)?;
                return Ok(ns);
            }
            Err(e) => return Err(SessionError::io("read", &marker, e)),
            Ok(text) => {
                let claimed = PathBuf::from(text.trim_end_matches('\n'));
                if claimed.as_os_str().is_empty() {
                    return Err(SessionError::InvalidStorage {
                        path: marker,
                        reason: "the workspace marker is empty".into(),
                    });
                }
                match fs::canonicalize(&claimed) {
                    Ok(path) if path == workspace => return Ok(ns),
                    // The workspace moved or was renamed: it keeps its sessions.
                    Err(_) => {
                        write_marker(&marker, &expected)?;
                        return Ok(ns);
                    }
                    // Another existing workspace owns this id: this one is a copy.
                    Ok(_) => {
                        id = new_workspace_id();
                        write_workspace_id(&id_path, &id)?;
                    }
                }
            }
        }
    }
    Err(SessionError::InvalidStorage {
        path: workspace,
        reason: "could not allocate an isolated session namespace".into(),
    })
}

/// The workspace's id from `.nanobot/workspace-id`: read and checked, or (when missing)
/// recovered from the namespace whose marker names this workspace, or new, and written.
fn workspace_id(id_path: &Path, root: &Path, workspace: &Path) -> Result<String, SessionError> {
    match fs::symlink_metadata(id_path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(SessionError::InvalidStorage {
            path: id_path.to_owned(),
            reason: "the workspace id must not be a symlink; restore its original identifier"
                .into(),
        }),
        Ok(_) => {
            let text =
                fsio::read_to_string(id_path).map_err(|e| SessionError::io("read", id_path, e))?;
            let id = text.trim().to_owned();
            if !is_workspace_id(&id) {
                return Err(SessionError::InvalidStorage {
                    path: id_path.to_owned(),
                    reason: format!(
                        "{id:?} is not a workspace id (32 lowercase hex digits); restore its original identifier"
                    ),
                });
            }
            Ok(id)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let id = recover_namespace(root, workspace)?.unwrap_or_else(new_workspace_id);
            write_workspace_id(id_path, &id)?;
            Ok(id)
        }
        Err(e) => Err(SessionError::io("inspect", id_path, e)),
    }
}

/// Writes the namespace's `.workspace` marker whole (a torn marker would orphan the
/// namespace's sessions after a power loss).
fn write_marker(marker: &Path, expected: &str) -> Result<(), SessionError> {
    Ok(nanobot_fs_support::write_atomic(
        marker,
        expected.as_bytes(),
        nanobot_fs_support::Sync::Yes,
    )?)
}

pub(super) fn is_workspace_id(id: &str) -> bool {
    id.len() == 32
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

pub(super) fn new_workspace_id() -> String {
    format!(
        "{:016x}{:016x}",
        random_u64(),
        random_u64().rotate_left(17) ^ 0x9e37_79b9_7f4a_7c15
    )
}

pub(super) fn write_workspace_id(path: &Path, id: &str) -> Result<(), SessionError> {
    let dir = path.parent().unwrap_or(path);
    fsio::create_dir_all(dir).map_err(|e| SessionError::io("create", dir, e))?;
    let temp = dir.join(format!(".workspace-id.{:016x}.tmp", random_u64()));
    let result = (|| {
        #[cfg(unix)]
        let file = fsio::open_with_mode(&temp, Open::CREATE_NEW, 0o600);
        #[cfg(not(unix))]
        let file = fsio::open(&temp, Open::CREATE_NEW);
        let file = file.map_err(|e| SessionError::io("create", &temp, e))?;
        fsio::write_at(&file, &temp, 0, format!("{id}\n").as_bytes())
            .map_err(|e| SessionError::io("write", &temp, e))?;
        fsio::sync_all(&file, &temp).map_err(|e| SessionError::io("sync", &temp, e))?;
        fsio::rename(&temp, path).map_err(|e| SessionError::io("write", path, e))?;
        nanobot_fs_support::sync_dir(dir)?;
        Ok(())
    })();
    if temp.exists() {
        let _ = fsio::remove_file(&temp);
    }
    result
}

/// The namespace whose marker names `workspace`, when its id file was lost.
pub(super) fn recover_namespace(
    root: &Path,
    workspace: &Path,
) -> Result<Option<String>, SessionError> {
    let mut found = Vec::new();
    for entry in fs::read_dir(root).map_err(|e| SessionError::io("list", root, e))? {
        let entry = entry.map_err(|e| SessionError::io("list", root, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !is_workspace_id(&name) || entry.file_type().map(|t| t.is_symlink()).unwrap_or(true) {
            continue;
        }
        let Ok(text) = fs::read_to_string(entry.path().join(".workspace")) else {
            continue;
        };
        if fs::canonicalize(text.trim_end_matches('\n')).is_ok_and(|p| p == workspace) {
            found.push(name);
        }
    }
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => Err(SessionError::InvalidStorage {
            path: root.to_owned(),
            reason: format!(
                "several session namespaces claim {}; remove the stale marker",
                workspace.display()
            ),
        }),
    }
}
