//! Removing workspaces the store recorded, measuring disk usage, and chowning a fresh clone to
//! the container user.
//!
//! Must never delete outside `workspace_root`: the path is resolved (symlinks included) and
//! refused unless it lies strictly below the root. Never follows symlinks while walking.

use super::{io_err, WorkspaceError, WorkspaceManager};
use std::collections::HashSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

impl WorkspaceManager {
    /// Removes a workspace directory strictly inside `workspace_root` and returns the bytes
    /// freed (allocated blocks). A path that no longer exists frees 0 bytes. The task directory
    /// above it is removed too once empty.
    pub fn remove(&self, path: &Path) -> Result<u64, WorkspaceError> {
        let root = self
            .workspace_root
            .canonicalize()
            .map_err(io_err("resolve workspace root", &self.workspace_root))?;
        let meta = match std::fs::symlink_metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(io_err("inspect", path)(e)),
        };
        let outside = || WorkspaceError::OutsideRoot {
            path: path.to_path_buf(),
            root: root.clone(),
        };
        if !meta.is_dir() {
            // A symlink (or file) where a workspace was recorded: removing its target could hit
            // anything on the host.
            return Err(outside());
        }
        let resolved = path.canonicalize().map_err(io_err("resolve", path))?;
        if resolved == root || !resolved.starts_with(&root) {
            return Err(outside());
        }
        let mut freed = disk_usage(&resolved);
        // The orchestrator's own repository beside an attempt (issue 23) goes with it.
        let own = super::key::own_repo_beside(&resolved);
        if std::fs::symlink_metadata(&own).is_ok_and(|m| m.is_dir()) {
            freed += disk_usage(&own);
            std::fs::remove_dir_all(&own).map_err(io_err("remove", &own))?;
        }
        // Check checkouts beside it (`N.check-K`) a killed daemon left behind (issue 24).
        for check in check_checkouts_beside(&resolved) {
            freed += disk_usage(&check);
            if std::fs::remove_dir_all(&check).is_err() {
                make_dirs_writable(&check);
                std::fs::remove_dir_all(&check).map_err(io_err("remove", &check))?;
            }
        }
        if let Err(e) = std::fs::remove_dir_all(&resolved) {
            // The container user may have left read-only directories: open them up and retry.
            if e.kind() != std::io::ErrorKind::PermissionDenied {
                return Err(io_err("remove", &resolved)(e));
            }
            make_dirs_writable(&resolved);
            std::fs::remove_dir_all(&resolved).map_err(io_err("remove", &resolved))?;
        }
        if let Some(parent) = resolved.parent() {
            if parent != root && parent.starts_with(&root) {
                // The marker goes only when it is all that is left; then the directory
                // goes too. Both fail harmlessly while other attempts of the task remain.
                let only_marker = std::fs::read_dir(parent).is_ok_and(|entries| {
                    entries
                        .flatten()
                        .all(|e| e.file_name() == super::marker::KEY_MARKER)
                });
                if only_marker {
                    let _ = std::fs::remove_file(parent.join(super::marker::KEY_MARKER));
                }
                let _ = std::fs::remove_dir(parent);
            }
        }
        tracing::info!(path = %resolved.display(), freed, "workspace removed");
        Ok(freed)
    }
}

/// The real directories `{name}.check-{k}` beside attempt directory `dir` (`k` a number):
/// the clean checkouts the checks ran in (`orchestrator::verify::check_dir`).
fn check_checkouts_beside(dir: &Path) -> Vec<PathBuf> {
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name().and_then(|n| n.to_str()))
    else {
        return Vec::new();
    };
    let prefix = format!("{name}.check-");
    let Ok(entries) = std::fs::read_dir(parent) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|e| {
            e.file_name().to_str().is_some_and(|n| {
                n.strip_prefix(&prefix)
                    .is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()))
            })
        })
        .map(|e| e.path())
        .collect()
}

/// Bytes allocated on disk under `path` (blocks, hard links counted once, symlinks not
/// followed). Unreadable entries are skipped: this is a report, not a guarantee.
pub fn disk_usage(path: &Path) -> u64 {
    let mut seen = HashSet::new();
    let mut total = 0u64;
    walk(path, &mut |_, meta| {
        if meta.nlink() > 1 && !seen.insert((meta.dev(), meta.ino())) {
            return;
        }
        total += meta.blocks() * 512;
    });
    total
}

/// `chown -R uid:gid path` without following symlinks (the links themselves are chowned).
pub(crate) fn chown_recursive(path: &Path, uid: u32, gid: u32) -> Result<(), WorkspaceError> {
    let mut first_err = None;
    walk(path, &mut |p, _| {
        if first_err.is_none() {
            if let Err(e) = std::os::unix::fs::lchown(p, Some(uid), Some(gid)) {
                first_err = Some(io_err("chown", p)(e));
            }
        }
    });
    first_err.map_or(Ok(()), Err)
}

fn make_dirs_writable(path: &Path) {
    walk(path, &mut |p, meta| {
        if meta.is_dir() {
            let mode = meta.permissions().mode() | 0o700;
            let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
        }
    });
}

/// Visits `path` and everything below it (pre-order), never following symlinks.
fn walk(path: &Path, visit: &mut dyn FnMut(&Path, &std::fs::Metadata)) {
    let mut stack: Vec<PathBuf> = vec![path.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        visit(&p, &meta);
        if meta.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&p) {
                stack.extend(entries.flatten().map(|e| e.path()));
            }
        }
    }
}
