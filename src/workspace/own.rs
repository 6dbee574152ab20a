//! The orchestrator's own repository of an attempt (issue 23, "landing by construction"):
//! a bare repository at `{workspace_root}/{key}/{attempt}.land.git`, beside the attempt's
//! workspace and outside everything a container mounts. The orchestrator creates it at
//! prepare, writes its config, and is the only writer: nothing of the agent's `.git` (refs,
//! objects, packs, index, config, hooks, replace refs, commit-graph, alternates) is ever
//! copied or read into it. It borrows the mirror's objects read-only through its one
//! alternates entry (written here, never read from a workspace); without a mirror it
//! fetches the base history from the fresh clone at prepare, before any agent ran.
//!
//! Every host-side git step after the agent (the landing commit, the gates' reads, the
//! clean checkout for the checks, the push, the read-back, the hand-off) runs here, with
//! replace objects, system and global config off (`git.rs`).
//!
//! Architecture Invariant: no function here takes a path inside the agent's workspace
//! except `create`, which runs before the agent starts.

use super::git::Git;
use super::key::own_repo_beside;
use super::{io_err, Workspace, WorkspaceError, WorkspaceManager};
use std::path::{Path, PathBuf};

/// Where the orchestrator's repository of `ws` lives (it may not exist yet).
pub fn own_repo_path(ws: &Workspace) -> PathBuf {
    own_repo_beside(&ws.path)
}

/// An opened orchestrator repository.
pub(crate) struct OwnRepo {
    dir: PathBuf,
}

impl OwnRepo {
    /// The repository's git directory.
    pub(crate) fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// `git --git-dir=<this repository> ...`, run inside it (no discovery of anything else).
    pub(crate) fn git<'a>(&self, op: &str) -> Git<'a> {
        let mut arg = std::ffi::OsString::from("--git-dir=");
        arg.push(&self.dir);
        Git::new(op).arg(arg).current_dir(&self.dir)
    }
}

/// The config of every orchestrator repository: bare, no reflogs, nothing else. The object
/// format follows the base commit id recorded at prepare (64 hex digits = sha256).
fn render_config(sha256: bool) -> String {
    let (version, extensions) = if sha256 {
        (1, "[extensions]\n\tobjectformat = sha256\n")
    } else {
        (0, "")
    };
    format!(
        "[core]\n\trepositoryformatversion = {version}\n\tfilemode = true\n\tbare = true\n\tlogallrefupdates = false\n{extensions}"
    )
}

/// Creates the orchestrator's repository of `ws` (replacing a leftover one), borrowing
/// `mirror_objects` when given, else fetching the base from `ws`'s fresh clone. Called by
/// `prepare` only, before any agent ran in `ws`.
pub(crate) fn create(ws: &Workspace, mirror_objects: Option<&Path>) -> Result<(), WorkspaceError> {
    let dir = own_repo_path(ws);
    if std::fs::symlink_metadata(&dir).is_ok() {
        std::fs::remove_dir_all(&dir).map_err(io_err("remove a stale repository", &dir))?;
    }
    init(&dir, ws.base_sha.len() == 64, mirror_objects)?;
    if mirror_objects.is_none() {
        // No mirror: the fresh clone (still the orchestrator's, the agent has not run) gives
        // the base and the upstream's branches, for a follow-up's merge of its base.
        OwnRepo { dir: dir.clone() }
            .git("fetch (base)")
            .args([
                "fetch",
                "--quiet",
                "--no-tags",
                "--no-write-fetch-head",
                "--",
            ])
            .arg(&ws.path)
            .args([
                "+HEAD:refs/polyphony/base",
                "+refs/remotes/origin/*:refs/polyphony/origin/*",
            ])
            .run()?;
    }
    Ok(())
}

fn init(dir: &Path, sha256: bool, mirror_objects: Option<&Path>) -> Result<(), WorkspaceError> {
    let mut init = Git::new("init (own)").args(["init", "--quiet", "--bare", "--template="]);
    if sha256 {
        init = init.arg("--object-format=sha256");
    }
    init.arg("--").arg(dir).run()?;
    let config = dir.join("config");
    std::fs::write(&config, render_config(sha256)).map_err(io_err("write", &config))?;
    if let Some(objects) = mirror_objects {
        super::shared::write_alternates_in(&dir.join("objects"), objects)?;
    }
    Ok(())
}

impl WorkspaceManager {
    /// The orchestrator's repository of `ws`. One missing (a workspace recorded before issue
    /// 23) is created now from the mirror, which holds the base; never from the workspace.
    pub(crate) fn own_repo(&self, ws: &Workspace) -> Result<OwnRepo, WorkspaceError> {
        let dir = own_repo_path(ws);
        if dir.join("objects").is_dir() {
            return Ok(OwnRepo { dir });
        }
        let mirror = self.mirror_path(&ws.upstream)?;
        let objects = mirror.join("objects").canonicalize().map_err(|_| {
            WorkspaceError::InvalidInput {
                what: "workspace",
                value: ws.path.display().to_string(),
                reason: format!(
                    "the orchestrator's repository {} is missing and there is no mirror to rebuild it from; the attempt must start over",
                    dir.display()
                ),
            }
        })?;
        init(&dir, ws.base_sha.len() == 64, Some(&objects))?;
        Ok(OwnRepo { dir })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_repository_sits_beside_the_attempt_directory() {
        assert_eq!(
            own_repo_beside(Path::new("/w/key/3")),
            PathBuf::from("/w/key/3.land.git")
        );
    }

    #[test]
    fn the_config_is_bare_and_follows_the_object_format() {
        assert!(render_config(false).contains("bare = true"));
        assert!(!render_config(false).contains("sha256"));
        assert!(render_config(true).contains("objectformat = sha256"));
    }
}
