//! `quota_handoff: continue` (issue 14): the work an attempt left when it met a usage limit
//! carried into the next attempt's fresh clone, so the next agent continues from it.
//!
//! The limited workspace is untrusted like any agent's: its working tree is taken through
//! `commit_once` (its files only, one commit on the base in the orchestrator's repository;
//! issue 23) and read back from that commit in one batched `cat-file`; nothing of its
//! `.git`, index or ignored files comes along. Each changed path is written into the new
//! clone (prepared, the next agent not yet started), never through a symlink and never
//! outside it.
//!
//! Must not: commit, push or touch the upstream (the new attempt is verified like any).

use std::path::{Component, Path};

use super::{io_err, Author, TreeChange, Workspace, WorkspaceError, WorkspaceManager};

/// What was carried over: the limited attempt's commit and the paths it changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handoff {
    pub sha: String,
    /// `(status, path)`: `A`dded, `M`odified, `D`eleted, `T`ype changed, as `git diff-tree`
    /// names them; symlinks and submodules are listed but not carried.
    pub changes: Vec<(char, String)>,
}

impl WorkspaceManager {
    /// Copies the changes `from` holds (committed or not) over `to`. `Ok(None)` when
    /// `from` changed nothing.
    pub fn hand_over(
        &self,
        from: &Workspace,
        to: &Workspace,
        author: &Author,
    ) -> Result<Option<Handoff>, WorkspaceError> {
        let outcome = self.commit_once(
            from,
            author,
            "Polyphony: the work so far of an attempt stopped by a usage limit",
            super::commit::DEFAULT_MAX_CHANGED_FILES,
        )?;
        let Some(sha) = outcome.sha else {
            return Ok(None);
        };
        let changes = self.changes(from, &sha)?;
        // Deletions and what is not a regular file first; then every regular file's content
        // in one batched read.
        let mut files = Vec::new();
        for change in &changes {
            if is_regular(change) {
                files.push(change);
            } else {
                carry_other(to, change)?;
            }
        }
        let oids = files.iter().map(|c| c.new_oid.clone()).collect();
        let mut failed = None;
        self.read_blobs(
            from,
            oids,
            &mut |i, bytes| match write_file(to, files[i], bytes) {
                Ok(()) => true,
                Err(e) => {
                    failed = Some(e);
                    false
                }
            },
        )?;
        if let Some(e) = failed {
            return Err(e);
        }
        Ok(Some(Handoff {
            sha,
            changes: changes.into_iter().map(|c| (c.status, c.path)).collect(),
        }))
    }
}

fn is_regular(change: &TreeChange) -> bool {
    change.status != 'D' && matches!(change.new_mode.as_str(), "100644" | "100755")
}

/// Applies a change that carries no file content: a deletion removes the file; symlinks
/// and submodules are left out (they could point anywhere).
fn carry_other(to: &Workspace, change: &TreeChange) -> Result<(), WorkspaceError> {
    let dest = safe_path(&to.path, &change.path)?;
    if change.status == 'D' {
        match std::fs::symlink_metadata(&dest) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => std::fs::remove_file(&dest)
                .map_err(io_err("remove a handed-over deletion", &dest))?,
            Err(_) => {}
        }
    }
    Ok(())
}

/// Writes one regular file of the change into `to` with its mode.
fn write_file(to: &Workspace, change: &TreeChange, content: &[u8]) -> Result<(), WorkspaceError> {
    let dest = safe_path(&to.path, &change.path)?;
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent)
            .map_err(io_err("create a handed-over directory", parent))?;
    }
    // Never write through whatever stands at the path (a symlink in the new clone).
    if let Ok(meta) = std::fs::symlink_metadata(&dest) {
        if meta.is_dir() {
            return Err(invalid(&change.path, "a directory stands at this path"));
        }
        std::fs::remove_file(&dest).map_err(io_err("replace a handed-over file", &dest))?;
    }
    std::fs::write(&dest, content).map_err(io_err("write a handed-over file", &dest))?;
    if change.new_mode == "100755" {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o755))
            .map_err(io_err("make a handed-over file executable", &dest))?;
    }
    Ok(())
}

/// `root/rel`, refusing anything that could leave `root` or reach `.git`: absolute paths,
/// `..`, a `.git` component, and a symlink on the way.
fn safe_path(root: &Path, rel: &str) -> Result<std::path::PathBuf, WorkspaceError> {
    let rel_path = Path::new(rel);
    let mut dest = root.to_path_buf();
    let mut parts = rel_path.components().peekable();
    if parts.peek().is_none() {
        return Err(invalid(rel, "empty path"));
    }
    while let Some(part) = parts.next() {
        let Component::Normal(name) = part else {
            return Err(invalid(rel, "not a plain relative path"));
        };
        if name.eq_ignore_ascii_case(".git") {
            return Err(invalid(rel, "names .git"));
        }
        dest.push(name);
        if parts.peek().is_some() {
            if let Ok(meta) = std::fs::symlink_metadata(&dest) {
                if meta.file_type().is_symlink() {
                    return Err(invalid(rel, "a symlink stands on the way"));
                }
            }
        }
    }
    Ok(dest)
}

fn invalid(path: &str, reason: &str) -> WorkspaceError {
    WorkspaceError::InvalidInput {
        what: "handed-over path",
        value: path.to_string(),
        reason: reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_and_away_from_git() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        assert_eq!(safe_path(root, "src/a.rs").unwrap(), root.join("src/a.rs"));
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            ".git/config",
            "sub/.GIT/hooks/x",
        ] {
            assert!(safe_path(root, bad).is_err(), "{bad}");
        }
        std::os::unix::fs::symlink("/tmp", root.join("link")).unwrap();
        assert!(safe_path(root, "link/x").is_err());
        // The symlink itself as the last component is replaced, not followed (see carry).
        assert_eq!(safe_path(root, "link").unwrap(), root.join("link"));
    }
}
