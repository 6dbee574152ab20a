//! Marker files that say "Polyphony made this directory" (issue 12, data loss).
//!
//! `workspace_root` and `mirror_root` each hold [`ROOT_MARKER`] once Polyphony has used
//! them; every task directory `{workspace_root}/{key}/` holds [`KEY_MARKER`] from the
//! moment it is created, before any attempt directory below it. Cleanup removes an
//! unrecorded directory only when it is `{key}/{n}` under a marked task directory, and
//! `config check` refuses a non-empty root that carries no root marker: a directory
//! Polyphony did not create is never deleted.

use std::path::Path;

use super::{create_dir_all, io_err, WorkspaceError};

/// File name of the marker in `workspace_root` and `mirror_root`.
pub const ROOT_MARKER: &str = ".polyphony-root";

/// File name of the marker in each `{workspace_root}/{key}/` directory.
pub const KEY_MARKER: &str = ".polyphony-workspace";

const ROOT_TEXT: &str = "Created by Polyphony. `polyphony cleanup` may remove directories below this one that it made.\n";
const KEY_TEXT: &str =
    "Created by Polyphony: the numbered directories here are attempt workspaces.\n";

/// Creates `root` when missing and writes its marker when absent.
pub fn ensure_root(root: &Path) -> Result<(), WorkspaceError> {
    create_dir_all(root)?;
    write_once(&root.join(ROOT_MARKER), ROOT_TEXT)
}

/// Writes the task-directory marker into `key_dir` when absent.
pub fn mark_key_dir(key_dir: &Path) -> Result<(), WorkspaceError> {
    write_once(&key_dir.join(KEY_MARKER), KEY_TEXT)
}

/// Whether `dir` carries the task-directory marker (a regular file, not a symlink).
pub fn is_marked_key_dir(dir: &Path) -> bool {
    is_regular(&dir.join(KEY_MARKER))
}

/// Whether `dir` carries the root marker (a regular file, not a symlink).
pub fn is_marked_root(dir: &Path) -> bool {
    is_regular(&dir.join(ROOT_MARKER))
}

fn is_regular(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file())
}

fn write_once(path: &Path, text: &str) -> Result<(), WorkspaceError> {
    if is_regular(path) {
        return Ok(());
    }
    std::fs::write(path, text).map_err(io_err("write marker", path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_are_written_once_and_recognised() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        assert!(!is_marked_root(&root));
        ensure_root(&root).unwrap();
        ensure_root(&root).unwrap();
        assert!(is_marked_root(&root));
        let key = root.join("local-1");
        std::fs::create_dir(&key).unwrap();
        assert!(!is_marked_key_dir(&key));
        mark_key_dir(&key).unwrap();
        assert!(is_marked_key_dir(&key));
        // A symlinked marker does not count: it could point anywhere.
        let other = root.join("other");
        std::fs::create_dir(&other).unwrap();
        std::os::unix::fs::symlink(key.join(KEY_MARKER), other.join(KEY_MARKER)).unwrap();
        assert!(!is_marked_key_dir(&other));
    }
}
