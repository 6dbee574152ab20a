//! Clones that borrow the mirror's objects (`CloneMode::Shared`, issue 18), and mirror
//! maintenance that never breaks them.
//!
//! A shared clone is `git clone --shared` of the mirror: its `objects/info/alternates` names the
//! mirror's object directory (canonical, absolute), so preparing an attempt costs the refs and
//! the checkout, not a copy of the history. The agent container sees that directory read-only
//! at the same absolute path, so git inside works and writes new objects to the clone's own
//! object directory. Host-side git after the agent never reads the clone: it reads only the
//! orchestrator's own repository (`own.rs`), which borrows the mirror the same way.
//!
//! Maintenance: a fetch never runs git's own auto-gc (it could prune objects a live clone
//! references); `auto_gc` runs it afterwards under the mirror's exclusive lock with
//! `gc.pruneExpire=never` while any workspace under `workspace_root` borrows from the mirror,
//! so a repack keeps every object (unreachable ones go to a cruft pack) and nothing is deleted.
//! Pruning happens only when no workspace borrows. Must not touch a workspace.

use super::git::Git;
use super::mirror::MirrorLock;
use super::{io_err, WorkspaceError, WorkspaceManager};
use std::path::{Path, PathBuf};

/// What `gc_mirror` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorGc {
    /// Workspaces under `workspace_root` that borrow this mirror's objects.
    pub live_workspaces: usize,
    /// Whether unreachable objects could be pruned (only when no workspace borrows).
    pub pruned: bool,
}

/// `git clone --shared --no-checkout MIRROR DIR`, `origin` pointed back at `upstream`, and the
/// alternates entry rewritten to the canonical object directory. The caller holds the mirror
/// lock (shared). Returns that object directory.
pub(crate) fn clone_shared(
    mirror: &Path,
    upstream: &str,
    dir: &Path,
) -> Result<PathBuf, WorkspaceError> {
    let objects = mirror
        .join("objects")
        .canonicalize()
        .map_err(io_err("resolve mirror objects", mirror))?;
    Git::new("clone (shared)")
        .args(["clone", "--quiet", "--no-checkout", "--shared", "--"])
        .arg(mirror)
        .arg(dir)
        .run()?;
    Git::new("remote set-url")
        .current_dir(dir)
        .args(["remote", "set-url", "origin", upstream])
        .run()?;
    write_alternates(&dir.join(".git"), &objects)?;
    Ok(objects)
}

/// Makes `objects` the only alternates entry of the repository at `dot_git`.
pub(crate) fn write_alternates(dot_git: &Path, objects: &Path) -> Result<(), WorkspaceError> {
    write_alternates_in(&dot_git.join("objects"), objects)
}

/// Makes `objects` the only alternates entry of the object directory `object_dir`.
pub(crate) fn write_alternates_in(object_dir: &Path, objects: &Path) -> Result<(), WorkspaceError> {
    let info = object_dir.join("info");
    std::fs::create_dir_all(&info).map_err(io_err("create", &info))?;
    let file = info.join("alternates");
    let mut line = objects.as_os_str().as_encoded_bytes().to_vec();
    line.push(b'\n');
    std::fs::write(&file, line).map_err(io_err("write", &file))
}

impl WorkspaceManager {
    /// Workspaces under `workspace_root` whose alternates name `objects`. A workspace whose
    /// alternates cannot be read (the container user made it unreadable) counts as borrowing:
    /// keeping objects is always safe, pruning is not.
    fn borrowers(&self, objects: &Path) -> usize {
        let Ok(keys) = std::fs::read_dir(&self.workspace_root) else {
            return 0;
        };
        let mut n = 0;
        for key in keys.flatten() {
            if !key.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let Ok(attempts) = std::fs::read_dir(key.path()) else {
                continue;
            };
            for attempt in attempts.flatten() {
                if !attempt.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                // An attempt borrows through its clone or through the orchestrator's own
                // repository beside it (`N.land.git`, bare: issue 23); counted once.
                let name = attempt.file_name().to_string_lossy().into_owned();
                let files = match name.strip_suffix(super::key::SUFFIX) {
                    Some(clone) if attempt.path().with_file_name(clone).is_dir() => continue,
                    Some(_) => vec![attempt.path().join("objects/info/alternates")],
                    None => vec![
                        attempt.path().join(".git/objects/info/alternates"),
                        super::key::own_repo_beside(&attempt.path())
                            .join("objects/info/alternates"),
                    ],
                };
                let borrows = files.iter().any(|file| match std::fs::read(file) {
                    Ok(text) => text
                        .split(|b| *b == b'\n')
                        .any(|l| l == objects.as_os_str().as_encoded_bytes()),
                    Err(e) => e.kind() != std::io::ErrorKind::NotFound,
                });
                n += usize::from(borrows);
            }
        }
        n
    }

    /// git's automatic gc on `mirror`, run after a fetch under the exclusive lock, with pruning
    /// off while a workspace borrows. A failure is logged, never an attempt's failure.
    pub(crate) fn auto_gc(&self, mirror: &Path) {
        if let Err(e) = self.gc_locked(mirror, true) {
            tracing::warn!(mirror = %mirror.display(), error = %e, "mirror auto-gc failed; the mirror is still usable");
        }
    }

    /// A full `git gc` of the mirror of `repo`, waiting for the exclusive lock (no clone or
    /// fetch runs meanwhile). While any workspace borrows the mirror's objects nothing is
    /// pruned (`--prune=never`); otherwise git's default expiry applies.
    pub fn gc_mirror(&self, repo: &str) -> Result<MirrorGc, WorkspaceError> {
        let mirror = self.mirror_path(repo)?;
        let lock = MirrorLock::open(&mirror)?;
        lock.exclusive()?;
        self.gc_locked(&mirror, false)
    }

    fn gc_locked(&self, mirror: &Path, auto: bool) -> Result<MirrorGc, WorkspaceError> {
        let objects = mirror
            .join("objects")
            .canonicalize()
            .map_err(io_err("resolve mirror objects", mirror))?;
        let live_workspaces = self.borrowers(&objects);
        let mut gc = Git::new("gc (mirror)").args([
            "-c",
            "gc.autoDetach=false",
            "-c",
            "maintenance.autoDetach=false",
        ]);
        if live_workspaces > 0 {
            gc = gc.args(["-c", "gc.pruneExpire=never"]);
        }
        gc = gc.arg("--git-dir").arg(mirror).args(["gc", "--quiet"]);
        if auto {
            gc = gc.arg("--auto");
        }
        gc.run()?;
        Ok(MirrorGc {
            live_workspaces,
            pruned: live_workspaces == 0,
        })
    }
}
