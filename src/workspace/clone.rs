//! `prepare`: the per-attempt directory, the clone (sharing the mirror's objects, or with the
//! mirror as reference and dissociated), the base commit and the attempt branch, then ownership.
//!
//! Must not reuse a directory: an attempt directory is created with `mkdir` (atomic, fails if
//! it exists) before git writes into it, and removed again if anything after that fails.

use super::cleanup::chown_recursive;
use super::git::Git;
use super::key::task_key;
use super::upstream::resolve_upstream;
use super::{io_err, CloneMode, PrepareRequest, Workspace, WorkspaceError, WorkspaceManager};
use std::path::{Path, PathBuf};

fn check_branch(branch: &str) -> Result<(), WorkspaceError> {
    let full = format!("refs/heads/{branch}");
    if branch.starts_with('-') || !git2::Reference::is_valid_name(&full) {
        return Err(WorkspaceError::InvalidInput {
            what: "branch",
            value: branch.to_string(),
            reason: "not a valid git branch name (see `git check-ref-format --branch`)".into(),
        });
    }
    Ok(())
}

fn check_base_ref(base: &str) -> Result<(), WorkspaceError> {
    if base.is_empty() || base.starts_with('-') || base.contains(['\0', '\n', '\r']) {
        return Err(WorkspaceError::InvalidInput {
            what: "base ref",
            value: base.to_string(),
            reason: "expected a branch, tag or commit name".into(),
        });
    }
    Ok(())
}

impl WorkspaceManager {
    /// Prepares `{workspace_root}/{task_key}/{attempt}/`: fetches (or creates) the mirror, clones
    /// it sharing its objects (`CloneMode::Shared`) or clones the upstream with the mirror as
    /// reference and dissociates (`CloneMode::Dissociate`), creates `branch` at the
    /// base commit, chowns to `owner`. If the mirror cannot be fetched the clone comes straight
    /// from upstream and `used_mirror` is false.
    pub fn prepare(&self, req: &PrepareRequest) -> Result<Workspace, WorkspaceError> {
        let key = task_key(&req.task_id)?;
        if req.attempt == 0 {
            return Err(WorkspaceError::InvalidInput {
                what: "attempt",
                value: "0".into(),
                reason: "attempt numbers start at 1".into(),
            });
        }
        check_branch(&req.branch)?;
        if let Some(b) = &req.base_ref {
            check_base_ref(b)?;
        }
        let upstream = resolve_upstream(&req.repo)?;
        let token = req.token.as_deref();
        let dir = self.create_attempt_dir(&key, req.attempt)?;
        let result = self
            .clone_into(&dir, &upstream, req, token)
            .map_err(|e| super::disk::explain(e, &dir));
        match result {
            Ok(ws) => Ok(ws),
            Err(e) => {
                // The directory is ours (we just made it): leave nothing half-built behind.
                let _ = std::fs::remove_dir_all(&dir);
                let _ = std::fs::remove_dir_all(super::key::own_repo_beside(&dir));
                Err(e)
            }
        }
    }

    fn clone_into(
        &self,
        dir: &Path,
        upstream: &str,
        req: &PrepareRequest,
        token: Option<&str>,
    ) -> Result<Workspace, WorkspaceError> {
        let askpass = self.askpass()?;
        let (mirror, lock, synced) = self.sync_mirror(upstream, token, true)?;
        let (used_mirror, mirror_note) = match synced {
            Ok(()) => (true, None),
            Err(e) => {
                tracing::warn!(repo = upstream, error = %e, "mirror unavailable; cloning straight from upstream");
                (
                    false,
                    Some(format!(
                        "mirror {} could not be updated, cloned from upstream instead: {e}",
                        mirror.display()
                    )),
                )
            }
        };
        lock.shared()?;
        let mut mirror_objects = None;
        if used_mirror && self.clone_mode == CloneMode::Shared {
            mirror_objects = Some(super::shared::clone_shared(&mirror, upstream, dir)?);
        } else {
            let mut clone = Git::new("clone").args(["clone", "--quiet", "--no-checkout"]);
            if used_mirror {
                clone = clone.arg("--reference").arg(&mirror).arg("--dissociate");
            }
            clone
                .arg("--")
                .arg(upstream)
                .arg(dir)
                .token(&askpass, token, upstream)
                .run()?;
        }
        drop(lock);

        let base_sha = resolve_base(dir, req.base_ref.as_deref()).ok_or_else(|| {
            WorkspaceError::BaseRefNotFound {
                repo: upstream.to_string(),
                base_ref: req.base_ref.clone().unwrap_or_else(|| "HEAD".into()),
            }
        })?;
        let base_ref = match &req.base_ref {
            Some(b) => b.clone(),
            None => Git::new("symbolic-ref")
                .current_dir(dir)
                .args(["symbolic-ref", "--quiet", "--short", "HEAD"])
                .stdout()
                .unwrap_or_else(|_| "HEAD".into()),
        };
        Git::new("checkout")
            .current_dir(dir)
            // Writing the files is most of a shared clone's cost and is bound by file-creation
            // latency, not CPU: parallel workers overlap it (issue 18, docs/benchmarks.md).
            .args(["-c", "checkout.workers=8"])
            .args([
                "checkout",
                "--quiet",
                "--no-track",
                "-b",
                &req.branch,
                "--end-of-options",
                &base_sha,
            ])
            .run()?;
        // Issue 24: a parallel checkout exits 0 after failing to write a file on a full disk.
        // Still the orchestrator's clone (no agent ran): its index says what must be there.
        let listing = Git::new("ls-files")
            .current_dir(dir)
            .args(super::disk::LIST_LOST)
            .run()
            .map_err(|e| super::disk::explain(e, dir))?;
        super::disk::verify_checkout(&listing.stdout, dir)?;
        super::disk::ensure_room(
            dir,
            super::disk::MIN_FREE_BYTES,
            "an attempt's working tree",
        )?;
        if let Some((uid, gid)) = req.owner {
            chown_recursive(dir, uid, gid)?;
        }
        tracing::info!(path = %dir.display(), branch = %req.branch, base = %base_sha, used_mirror, "workspace prepared");
        let ws = Workspace {
            path: dir.to_path_buf(),
            branch: req.branch.clone(),
            base_ref,
            base_sha,
            upstream: upstream.to_string(),
            used_mirror,
            mirror_note,
            mirror_objects,
            merge_parents: Vec::new(),
            lease: None,
        };
        // The orchestrator's own repository of the attempt (issue 23), made now, before any
        // agent ran: borrowing the mirror's objects, or the clone's while it is still ours.
        let borrowed = match used_mirror {
            true => Some(
                mirror
                    .join("objects")
                    .canonicalize()
                    .map_err(io_err("resolve mirror objects", &mirror))?,
            ),
            false => None,
        };
        super::own::create(&ws, borrowed.as_deref())?;
        Ok(ws)
    }

    /// Creates `{root}/{key}/{attempt}` (the last component with a plain `mkdir`), refusing
    /// symlinked or non-directory key entries and anything that resolves outside the root.
    fn create_attempt_dir(&self, key: &str, attempt: u32) -> Result<PathBuf, WorkspaceError> {
        super::marker::ensure_root(&self.workspace_root)?;
        let root = self
            .workspace_root
            .canonicalize()
            .map_err(io_err("resolve workspace root", &self.workspace_root))?;
        let key_dir = root.join(key);
        match std::fs::symlink_metadata(&key_dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(WorkspaceError::OutsideRoot {
                    path: key_dir,
                    root,
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                match std::fs::create_dir(&key_dir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(io_err("create task directory", &key_dir)(e)),
                }
            }
            Err(e) => return Err(io_err("inspect task directory", &key_dir)(e)),
        }
        let resolved = key_dir
            .canonicalize()
            .map_err(io_err("resolve task directory", &key_dir))?;
        if resolved.parent() != Some(root.as_path()) {
            return Err(WorkspaceError::OutsideRoot {
                path: key_dir,
                root,
            });
        }
        // Before the attempt directory exists, so even a crash mid-clone leaves it marked.
        super::marker::mark_key_dir(&resolved)?;
        let dir = resolved.join(attempt.to_string());
        match std::fs::create_dir(&dir) {
            Ok(()) => Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(WorkspaceError::AlreadyExists { path: dir })
            }
            Err(e) => Err(io_err("create attempt directory", &dir)(e)),
        }
    }
}

/// Full commit id of `base` in the fresh clone: a branch is found as `origin/<name>`, then a
/// tag, then anything `rev-parse` accepts (a commit id). `None` = the clone's HEAD.
fn resolve_base(dir: &Path, base: Option<&str>) -> Option<String> {
    let candidates: Vec<String> = match base {
        None => vec!["HEAD".into()],
        Some(b) => match b.strip_prefix("refs/heads/") {
            Some(name) => vec![format!("refs/remotes/origin/{name}")],
            None if b.starts_with("refs/") => vec![b.to_string()],
            None => vec![
                format!("refs/remotes/origin/{b}"),
                format!("refs/tags/{b}"),
                b.to_string(),
            ],
        },
    };
    candidates.iter().find_map(|c| {
        Git::new("rev-parse")
            .current_dir(dir)
            .args(["rev-parse", "--verify", "--quiet", "--end-of-options"])
            .arg(format!("{c}^{{commit}}"))
            .stdout()
            .ok()
            .filter(|s| !s.is_empty())
    })
}
