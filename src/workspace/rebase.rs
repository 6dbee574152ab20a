//! Putting a pull request's changes on top of its moved base (`shepherd.conflicts: rebase`,
//! issue 15), for a branch that is ours alone: every commit since the merge base was made
//! by our configured author (committer too). The base is squash-merged into the branch's
//! head without committing, so a conflict keeps git's markers with the branch's side first
//! (as `merge_base` leaves them); the branch ref is then moved to the base, so the landing
//! commit (`commit_once`) has the base head as its only parent: one commit, linear history.
//!
//! A squash rather than `git rebase`: deterministic (one merge, one set of markers, never a
//! half-finished rebase for the agent to continue or abort), and replaying our own
//! follow-up commits one by one adds nothing. The push then replaces the old head with
//! `--force-with-lease` to exactly the sha read here (`ws.lease`).
//!
//! Like `merge.rs`, runs at prepare in the fresh clone, before the agent; the landing commit
//! and the push come from the orchestrator's repository (issue 23).

use super::git::Git;
use super::merge::{contains, start_merge};
use super::{Author, Workspace, WorkspaceError, WorkspaceManager};

/// What putting the branch on the base did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BaseRebase {
    /// The branch already contains the base: nothing to do.
    Contained,
    /// Commits since the merge base not made by our author: the workspace is untouched
    /// (the caller merges instead).
    NotOursAlone { foreign: Vec<String> },
    /// The workspace now sits on `onto`; `conflicted` files hold markers.
    Rebased {
        onto: String,
        conflicted: Vec<String>,
    },
}

/// The commits of `log` (records `sha NUL author name NUL author email NUL committer name
/// NUL committer email`, one per line) not made and committed by `author`.
pub fn foreign_commits(log: &str, author: &Author) -> Vec<String> {
    log.lines()
        .filter(|l| !l.is_empty())
        .filter_map(|line| {
            let f: Vec<&str> = line.split('\0').collect();
            let ours = f.len() == 5
                && f[1] == author.name
                && f[2] == author.email
                && f[3] == author.name
                && f[4] == author.email;
            (!ours).then(|| f[0].to_string())
        })
        .collect()
}

impl WorkspaceManager {
    /// Puts the workspace's branch on `origin/<base>` when every commit of the branch since
    /// the merge base is `author`'s; sets `ws.base_sha` to the base head and `ws.lease` to
    /// the old head on success.
    pub fn rebase_onto_base(
        &self,
        ws: &mut Workspace,
        base: &str,
        author: &Author,
    ) -> Result<BaseRebase, WorkspaceError> {
        let git = |op: &str| Git::new(op).current_dir(&ws.path);
        let base_sha = self.origin_base(ws, base)?;
        let head = ws.base_sha.clone();
        if contains(ws, &base_sha, &head)? {
            return Ok(BaseRebase::Contained);
        }
        let fork = git("merge-base")
            .args(["merge-base", "--end-of-options", &head, &base_sha])
            .stdout()?;
        let log = git("log")
            .args([
                "log",
                "--format=%H%x00%an%x00%ae%x00%cn%x00%ce",
                "--end-of-options",
            ])
            .arg(format!("{fork}..{head}"))
            .stdout()?;
        let foreign = foreign_commits(&log, author);
        if !foreign.is_empty() {
            return Ok(BaseRebase::NotOursAlone { foreign });
        }
        let conflicted = start_merge(ws, &base_sha, &["--squash"])?;
        // The branch now starts at the base; index and files keep the merged state, so
        // `git status` shows the pull request's changes on top of the base.
        git("update-ref")
            .args(["update-ref", "--no-deref", "--end-of-options"])
            .arg(format!("refs/heads/{}", ws.branch))
            .args([&base_sha, &head])
            .run()?;
        ws.lease = Some(head);
        ws.base_sha = base_sha.clone();
        ws.merge_parents.clear();
        Ok(BaseRebase::Rebased {
            onto: base_sha,
            conflicted,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::PrepareRequest;
    use std::path::Path;
    use std::process::Command;

    fn git_as(who: &str, dir: &Path, args: &[&str]) -> String {
        let email = if who == "Polyphony" {
            "polyphony@localhost"
        } else {
            "p@e"
        };
        let out = Command::new("git")
            .args(["-c", "commit.gpgsign=false"])
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", who)
            .env("GIT_AUTHOR_EMAIL", email)
            .env("GIT_COMMITTER_NAME", who)
            .env("GIT_COMMITTER_EMAIL", email)
            .output()
            .expect("git");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// An origin whose `main` and our `feature` both changed line 1 of `a.txt`.
    fn origin(root: &Path) -> (String, std::path::PathBuf) {
        let work = root.join("work");
        std::fs::create_dir_all(&work).expect("mkdir");
        git_as("Person", &work, &["init", "-q", "-b", "main"]);
        std::fs::write(work.join("a.txt"), "one\ntwo\n").expect("write");
        git_as("Person", &work, &["add", "-A"]);
        git_as("Person", &work, &["commit", "-qm", "base"]);
        git_as("Person", &work, &["checkout", "-qb", "feature"]);
        std::fs::write(work.join("a.txt"), "ONE\ntwo\n").expect("write");
        git_as("Polyphony", &work, &["commit", "-qam", "feature"]);
        git_as("Person", &work, &["checkout", "-q", "main"]);
        std::fs::write(work.join("a.txt"), "uno\ntwo\n").expect("write");
        git_as("Person", &work, &["commit", "-qam", "main moved"]);
        git_as(
            "Person",
            root,
            &["clone", "-q", "--bare", "work", "origin.git"],
        );
        (root.join("origin.git").display().to_string(), work)
    }

    fn prepared(root: &Path, repo: &str) -> (WorkspaceManager, Workspace) {
        let manager = WorkspaceManager::new(root.join("ws"), root.join("mirrors"));
        let ws = manager
            .prepare(&PrepareRequest {
                repo: repo.to_string(),
                task_id: "t-f1".into(),
                attempt: 1,
                base_ref: Some("feature".into()),
                branch: "feature".into(),
                token: None,
                owner: None,
            })
            .expect("prepare");
        (manager, ws)
    }

    #[test]
    fn our_branch_lands_as_one_commit_on_the_base_and_the_lease_guards_the_push() {
        let root = tempfile::tempdir().expect("temp");
        let (repo, work) = origin(root.path());
        let origin = Path::new(&repo);
        let (manager, mut ws) = prepared(root.path(), &repo);
        let old_head = ws.base_sha.clone();
        let main = git_as("Person", origin, &["rev-parse", "main"]);
        let BaseRebase::Rebased { onto, conflicted } = manager
            .rebase_onto_base(&mut ws, "main", &author())
            .expect("rebase")
        else {
            panic!("not rebased");
        };
        assert_eq!(
            (onto.as_str(), conflicted.as_slice()),
            (main.as_str(), &["a.txt".to_string()][..])
        );
        assert_eq!(ws.lease.as_deref(), Some(old_head.as_str()));
        let text = std::fs::read_to_string(ws.path.join("a.txt")).expect("read");
        let (ours, theirs) = (
            text.find("ONE").expect("ours"),
            text.find("uno").expect("theirs"),
        );
        assert!(
            text.contains("<<<<<<<") && ours < theirs,
            "the branch's side first: {text}"
        );

        std::fs::write(ws.path.join("a.txt"), "uno ONE\ntwo\n").expect("write");
        let sha = manager
            .commit_once(
                &ws,
                &author(),
                "follow-up",
                crate::workspace::DEFAULT_MAX_CHANGED_FILES,
            )
            .expect("commit")
            .sha
            .expect("sha");
        let own = crate::workspace::own_repo_path(&ws);
        let local = git_as("Person", &own, &["rev-list", "--parents", "-n1", &sha]);
        assert_eq!(local, format!("{sha} {main}"), "one parent: the base head");

        // Someone pushes to the branch after we read it: the lease refuses, nothing lost.
        git_as("Person", &work, &["checkout", "-q", "feature"]);
        std::fs::write(work.join("c.txt"), "c\n").expect("write");
        git_as("Person", &work, &["add", "-A"]);
        git_as("Person", &work, &["commit", "-qm", "theirs"]);
        let theirs = git_as("Person", &work, &["rev-parse", "HEAD"]);
        let mut pushed = ws.clone();
        pushed.lease = Some(theirs.clone());
        let mut stale = ws.clone();
        stale.lease = Some(old_head.clone());
        git_as("Person", &work, &["push", "-q", &repo, "feature"]);
        let err = manager
            .push_commit(&stale, &sha, "feature", None)
            .unwrap_err();
        assert!(matches!(err, WorkspaceError::PushRejected { .. }), "{err}");
        assert_eq!(git_as("Person", origin, &["rev-parse", "feature"]), theirs);

        // With the head the remote holds, the branch is replaced by exactly the commit.
        manager
            .push_commit(&pushed, &sha, "feature", None)
            .expect("push");
        assert_eq!(git_as("Person", origin, &["rev-parse", "feature"]), sha);
    }

    #[test]
    fn a_foreign_commit_leaves_the_workspace_untouched() {
        let root = tempfile::tempdir().expect("temp");
        let (repo, _) = origin(root.path());
        let (manager, mut ws) = prepared(root.path(), &repo);
        let before = ws.clone();
        let other = Author {
            name: "Other".into(),
            email: "o@e".into(),
        };
        let out = manager
            .rebase_onto_base(&mut ws, "main", &other)
            .expect("rebase");
        assert!(
            matches!(out, BaseRebase::NotOursAlone { ref foreign } if foreign.len() == 1),
            "{out:?}"
        );
        assert_eq!(ws, before);
        let text = std::fs::read_to_string(ws.path.join("a.txt")).expect("read");
        assert_eq!(text, "ONE\ntwo\n");
    }

    fn author() -> Author {
        Author {
            name: "Polyphony".into(),
            email: "polyphony@localhost".into(),
        }
    }

    #[test]
    fn a_commit_is_ours_only_when_authored_and_committed_by_us() {
        let log = "a1\0Polyphony\0polyphony@localhost\0Polyphony\0polyphony@localhost\n\
                   b2\0Alice\0alice@e\0Alice\0alice@e\n\
                   c3\0Polyphony\0polyphony@localhost\0Alice\0alice@e\n\
                   d4\0Polyphony\0other@e\0Polyphony\0polyphony@localhost\n";
        assert_eq!(foreign_commits(log, &author()), ["b2", "c3", "d4"]);
        let ours = "a1\0Polyphony\0polyphony@localhost\0Polyphony\0polyphony@localhost\n";
        assert!(foreign_commits(ours, &author()).is_empty());
        assert!(foreign_commits("", &author()).is_empty());
    }
}
