//! Merging the base into a pull request's branch for a follow-up (issue 15): the merge is
//! started, never committed here, so conflicted files keep git's markers for the agent to
//! resolve; the landing commit (`commit_once`) then records the merged base as its second
//! parent. The branch's history is kept and the push is a fast-forward (`rebase.rs` is the
//! opt-in alternative, `shepherd.conflicts: rebase`).
//!
//! Runs at prepare, in the fresh clone, before the agent: the clone is still the
//! orchestrator's then. After the agent, only the working tree it left is read (issue 23):
//! the landing commit is made in the orchestrator's repository, whose objects include the
//! merged base (the mirror's), so what is pushed to the pull request is what was verified.

use super::git::Git;
use super::{Workspace, WorkspaceError, WorkspaceManager};

/// What merging the base did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseMerge {
    /// The base commit merged in; `None` when the branch already contains it.
    pub merged: Option<String>,
    /// Files left with conflict markers.
    pub conflicted: Vec<String>,
}

impl WorkspaceManager {
    /// The commit `origin/<base>` names in the workspace's clone.
    pub(super) fn origin_base(&self, ws: &Workspace, base: &str) -> Result<String, WorkspaceError> {
        let name = base.strip_prefix("refs/heads/").unwrap_or(base);
        Git::new("rev-parse")
            .current_dir(&ws.path)
            .args(["rev-parse", "--verify", "--end-of-options"])
            .arg(format!("refs/remotes/origin/{name}^{{commit}}"))
            .stdout()
            .map_err(|_| WorkspaceError::BaseRefNotFound {
                repo: ws.upstream.clone(),
                base_ref: name.to_string(),
            })
    }

    /// Merges `origin/<base>` into the workspace's branch without committing. On return
    /// `ws.merge_parents` names the merged commit (when there was one).
    pub fn merge_base(&self, ws: &mut Workspace, base: &str) -> Result<BaseMerge, WorkspaceError> {
        let base_sha = self.origin_base(ws, base)?;
        if contains(ws, &base_sha, &ws.base_sha)? {
            return Ok(BaseMerge {
                merged: None,
                conflicted: Vec::new(),
            });
        }
        let conflicted = start_merge(ws, &base_sha, &["--no-ff", "--no-commit", "--no-edit"])?;
        ws.merge_parents = vec![base_sha.clone()];
        Ok(BaseMerge {
            merged: Some(base_sha),
            conflicted,
        })
    }
}

/// Whether `head` already contains `commit`.
pub(super) fn contains(ws: &Workspace, commit: &str, head: &str) -> Result<bool, WorkspaceError> {
    let (out, _, _) = Git::new("merge-base")
        .current_dir(&ws.path)
        .args([
            "merge-base",
            "--is-ancestor",
            "--end-of-options",
            commit,
            head,
        ])
        .output()?;
    Ok(out.status.success())
}

/// Starts `git merge <how> base_sha` in the workspace without committing, conflicted files
/// keeping git's markers (branch side first) for the agent; returns those files. An error
/// only when git failed without leaving a conflict.
pub(super) fn start_merge(
    ws: &Workspace,
    base_sha: &str,
    how: &[&str],
) -> Result<Vec<String>, WorkspaceError> {
    let git = |op: &str| Git::new(op).current_dir(&ws.path);
    let (out, op, _) = git("merge")
        .args([
            "-c",
            "user.name=Polyphony",
            "-c",
            "user.email=polyphony@localhost",
            "-c",
            "merge.conflictStyle=merge",
            "merge",
        ])
        .args(how)
        .args(["--quiet", "--end-of-options", base_sha])
        .output()?;
    let conflicted: Vec<String> = git("diff")
        .args(["diff", "--name-only", "--diff-filter=U", "-z"])
        .run()?
        .stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    if !out.status.success() && conflicted.is_empty() {
        return Err(super::git::git_error(&op, &out, None));
    }
    Ok(conflicted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::PrepareRequest;
    use std::path::Path;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@e",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .expect("git");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// An origin whose `main` and `feature` both changed line 1 of `a.txt`.
    fn origin(root: &Path) -> String {
        let work = root.join("work");
        std::fs::create_dir_all(&work).expect("mkdir");
        git(&work, &["init", "-q", "-b", "main"]);
        std::fs::write(work.join("a.txt"), "one\ntwo\n").expect("write");
        std::fs::write(work.join("b.txt"), "b\n").expect("write");
        git(&work, &["add", "-A"]);
        git(&work, &["commit", "-qm", "base"]);
        git(&work, &["checkout", "-qb", "feature"]);
        std::fs::write(work.join("a.txt"), "ONE\ntwo\n").expect("write");
        git(&work, &["commit", "-qam", "feature"]);
        git(&work, &["checkout", "-q", "main"]);
        std::fs::write(work.join("a.txt"), "uno\ntwo\n").expect("write");
        git(&work, &["commit", "-qam", "main moved"]);
        let bare = root.join("origin.git");
        git(root, &["clone", "-q", "--bare", "work", "origin.git"]);
        bare.display().to_string()
    }

    #[test]
    fn a_conflicting_base_leaves_markers_and_becomes_the_second_parent() {
        let root = tempfile::tempdir().expect("temp");
        let repo = origin(root.path());
        let manager = WorkspaceManager::new(root.path().join("ws"), root.path().join("mirrors"));
        let mut ws = manager
            .prepare(&PrepareRequest {
                repo,
                task_id: "t-f1".into(),
                attempt: 1,
                base_ref: Some("feature".into()),
                branch: "feature".into(),
                token: None,
                owner: None,
            })
            .expect("prepare");
        let merge = manager.merge_base(&mut ws, "main").expect("merge");
        assert_eq!(merge.conflicted, ["a.txt"]);
        let main = merge.merged.clone().expect("merged");
        let text = std::fs::read_to_string(ws.path.join("a.txt")).expect("read");
        assert!(text.contains("<<<<<<<") && text.contains("uno") && text.contains("ONE"));

        // The agent resolves; the landing commit is a merge of the branch head and main.
        std::fs::write(ws.path.join("a.txt"), "uno ONE\ntwo\n").expect("write");
        let author = crate::workspace::Author {
            name: "P".into(),
            email: "p@e".into(),
        };
        let sha = manager
            .commit_once(
                &ws,
                &author,
                "follow-up",
                crate::workspace::DEFAULT_MAX_CHANGED_FILES,
            )
            .expect("commit")
            .sha
            .expect("sha");
        // Read from the orchestrator's repository: the workspace never sees the commit.
        let own = crate::workspace::own_repo_path(&ws);
        let parents = git(&own, &["rev-list", "--parents", "-n1", &sha]);
        assert_eq!(parents, format!("{sha} {} {main}", ws.base_sha));

        // Merging again (a later follow-up, on the pushed commit) finds the base contained.
        ws.base_sha = sha;
        ws.merge_parents.clear();
        let own_dir = own.display().to_string();
        git(&ws.path, &["fetch", "-q", &own_dir, "refs/heads/feature"]);
        git(&ws.path, &["merge", "--abort"]);
        git(&ws.path, &["checkout", "-q", "--detach", &ws.base_sha]);
        let again = manager.merge_base(&mut ws, "main").expect("again");
        assert_eq!(again.merged, None);
    }
}
