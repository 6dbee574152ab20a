//! Whether a checkout is complete (issue 24, `disk.rs`): git's parallel checkout can exit 0
//! after it failed to write a file, so every path the index tracks is checked on disk
//! before anything builds on the checkout.

use super::disk::{disk_full, explain, free_bytes, MIN_FREE_BYTES, NAMED};
use super::git::Git;
use super::WorkspaceError;
use std::path::Path;

/// Checks that every path `git` (already pointed at the index and the work tree) tracks is
/// on disk as the index says. A lost path is `DiskFull` when the filesystem is under the
/// floor, else `IncompleteCheckout`.
pub(crate) fn verify_checkout(git: Git<'_>, work_tree: &Path) -> Result<(), WorkspaceError> {
    let out = git
        .args(["ls-files", "-z", "--deleted", "--modified"])
        .run()
        .map_err(|e| explain(e, work_tree))?;
    let mut lost: Vec<String> = Vec::new();
    for p in out.stdout.split(|b| *b == 0).filter(|p| !p.is_empty()) {
        let p = String::from_utf8_lossy(p).into_owned();
        if !lost.contains(&p) {
            lost.push(p);
        }
    }
    if lost.is_empty() {
        return Ok(());
    }
    let count = lost.len();
    let mut named = lost.into_iter().take(NAMED).collect::<Vec<_>>().join(", ");
    if count > NAMED {
        named.push_str(&format!(" and {} more", count - NAMED));
    }
    let what = format!("the checkout is missing or truncated {count} tracked file(s): {named}");
    match free_bytes(work_tree) {
        Some(free) if free < MIN_FREE_BYTES => Err(disk_full(work_tree, what)),
        _ => Err(WorkspaceError::IncompleteCheckout {
            path: work_tree.to_path_buf(),
            what,
        }),
    }
}
