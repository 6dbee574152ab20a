//! The landing commit and what is judged about it (issue 11, "the pushed commit is the
//! verified commit"): `commit_once` turns the agent's final tree into ONE commit on the base
//! and returns its sha; `changes`, `blob` and `checkout` read that sha only, and
//! `push_commit` / `remote_sha` send exactly that sha and read back what the remote holds.
//!
//! Must not read anything but objects from the agent's `.git` once the commit exists: refs,
//! the index and the work tree can change under us (a check script repointed the branch), an
//! object id cannot. The clean checkout is made with a temporary index outside the
//! workspace, into a fresh directory the orchestrator created.

use super::cleanup::chown_recursive;
use super::clone::resolve_upstream;
use super::commit::{check_author, check_message, harden};
use super::git::Git;
use super::key::scrub;
use super::{io_err, Author, CommitOutcome, Workspace, WorkspaceError, WorkspaceManager};
use std::path::Path;

/// One path that differs between the base and the landing commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeChange {
    /// Relative to the repository root.
    pub path: String,
    /// `A`dded, `M`odified, `D`eleted or `T`ype changed.
    pub status: char,
    /// Octal git mode on the base side (`000000` when added).
    pub old_mode: String,
    /// Octal git mode in the landing commit (`160000` is a gitlink, `000000` deleted).
    pub new_mode: String,
    /// Object id in the landing commit (all zeros when deleted).
    pub new_oid: String,
    /// Blob size in bytes in the landing commit (`None` for gitlinks and deletions).
    pub size: Option<u64>,
}

impl TreeChange {
    /// Whether the landing commit holds a blob (file or symlink) at this path.
    pub fn has_blob(&self) -> bool {
        self.status != 'D' && self.new_mode != "160000" && self.new_mode != "000000"
    }
}

fn check_oid(what: &'static str, oid: &str) -> Result<(), WorkspaceError> {
    let hex = oid.len() >= 40 && oid.bytes().all(|b| b.is_ascii_hexdigit());
    if !hex {
        return Err(WorkspaceError::InvalidInput {
            what,
            value: oid.to_string(),
            reason: "expected a full object id (40 or 64 hex digits)".into(),
        });
    }
    Ok(())
}

impl WorkspaceManager {
    /// Stages the agent's work (`.gitignore` respected, deletions included) and commits the
    /// resulting tree as ONE commit whose only parent is `ws.base_sha`, whatever the agent
    /// committed or where it left HEAD: the agent's own commits, messages and authors never
    /// land. The attempt branch is pointed at it for people reading the workspace; callers
    /// use the returned sha, never the branch.
    pub fn commit_once(
        &self,
        ws: &Workspace,
        author: &Author,
        message: &str,
    ) -> Result<CommitOutcome, WorkspaceError> {
        check_author(author)?;
        check_message(message)?;
        check_oid("base commit", &ws.base_sha)?;
        harden(ws)?;
        let git = |op: &str| Git::new(op).current_dir(&ws.path);
        git("add").args(["add", "--all", "--", "."]).run()?;
        let tree = git("write-tree").args(["write-tree"]).stdout()?;
        check_oid("tree", &tree)?;
        let base_tree = git("rev-parse")
            .args(["rev-parse", "--verify", "--end-of-options"])
            .arg(format!("{}^{{tree}}", ws.base_sha))
            .stdout()?;
        if tree == base_tree {
            return Ok(CommitOutcome {
                sha: None,
                created_commit: false,
                changed_paths: Vec::new(),
                empty: true,
            });
        }
        let mut parents = vec!["-p".to_string(), ws.base_sha.clone()];
        for parent in &ws.merge_parents {
            check_oid("merged commit", parent)?;
            parents.extend(["-p".to_string(), parent.clone()]);
        }
        let sha = git("commit-tree")
            .env("GIT_AUTHOR_NAME", &author.name)
            .env("GIT_AUTHOR_EMAIL", &author.email)
            .env("GIT_COMMITTER_NAME", &author.name)
            .env("GIT_COMMITTER_EMAIL", &author.email)
            .arg("commit-tree")
            .args(&parents)
            .args(["-m", message, &tree])
            .stdout()?;
        check_oid("commit", &sha)?;
        git("update-ref")
            .args(["update-ref", "--no-deref"])
            .arg(format!("refs/heads/{}", ws.branch))
            .arg(&sha)
            .run()?;
        let changed_paths = self
            .changes(ws, &sha)?
            .into_iter()
            .map(|c| c.path)
            .collect();
        Ok(CommitOutcome {
            sha: Some(sha),
            created_commit: true,
            changed_paths,
            empty: false,
        })
    }

    /// Every path that differs between `ws.base_sha` and `sha`, with modes and blob sizes.
    pub fn changes(&self, ws: &Workspace, sha: &str) -> Result<Vec<TreeChange>, WorkspaceError> {
        check_oid("commit", sha)?;
        check_oid("base commit", &ws.base_sha)?;
        harden(ws)?;
        let git = |op: &str| Git::new(op).current_dir(&ws.path);
        let raw = git("diff-tree")
            .args([
                "diff-tree",
                "-r",
                "-z",
                "--raw",
                "--no-renames",
                "--no-abbrev",
            ])
            .args([&ws.base_sha, sha])
            .run()?
            .stdout;
        let mut changes = Vec::new();
        let mut fields = raw.split(|b| *b == 0).filter(|f| !f.is_empty());
        while let Some(meta) = fields.next() {
            let meta = String::from_utf8_lossy(meta);
            let Some(path) = fields.next() else { break };
            let parts: Vec<&str> = meta.trim_start_matches(':').split(' ').collect();
            if parts.len() < 5 {
                continue;
            }
            changes.push(TreeChange {
                path: String::from_utf8_lossy(path).into_owned(),
                status: parts[4].chars().next().unwrap_or('M'),
                old_mode: parts[0].to_string(),
                new_mode: parts[1].to_string(),
                new_oid: parts[3].to_string(),
                size: None,
            });
        }
        if changes.iter().any(TreeChange::has_blob) {
            let listing = git("ls-tree")
                .args([
                    "ls-tree",
                    "-r",
                    "-l",
                    "-z",
                    "--full-tree",
                    "--end-of-options",
                ])
                .arg(sha)
                .run()?
                .stdout;
            let mut sizes = std::collections::HashMap::new();
            for entry in listing.split(|b| *b == 0).filter(|e| !e.is_empty()) {
                let Some(tab) = entry.iter().position(|b| *b == b'\t') else {
                    continue;
                };
                let head = String::from_utf8_lossy(&entry[..tab]);
                let path = String::from_utf8_lossy(&entry[tab + 1..]).into_owned();
                if let Some(size) = head.split_whitespace().nth(3).and_then(|s| s.parse().ok()) {
                    sizes.insert(path, size);
                }
            }
            for c in changes.iter_mut().filter(|c| c.has_blob()) {
                c.size = sizes.get(&c.path).copied();
            }
        }
        Ok(changes)
    }

    /// The content of blob `oid` (read from the workspace's object store).
    pub fn blob(&self, ws: &Workspace, oid: &str) -> Result<Vec<u8>, WorkspaceError> {
        check_oid("blob", oid)?;
        Ok(Git::new("cat-file")
            .current_dir(&ws.path)
            .args(["cat-file", "blob", oid])
            .run()?
            .stdout)
    }

    /// Writes the tree of `sha` into `dest`, a directory this call creates (it must not exist):
    /// no `.git`, nothing ignored or excluded, only what the commit holds. A temporary index
    /// beside `dest` is used and removed; the agent's index is never read. `owner` chowns the
    /// result for the check container's user.
    pub fn checkout(
        &self,
        ws: &Workspace,
        sha: &str,
        dest: &Path,
        owner: Option<(u32, u32)>,
    ) -> Result<(), WorkspaceError> {
        check_oid("commit", sha)?;
        harden(ws)?;
        std::fs::create_dir(dest).map_err(io_err("create check directory", dest))?;
        let index = dest.with_extension("index");
        let _ = std::fs::remove_file(&index);
        let git = |op: &str| {
            Git::new(op)
                .current_dir(&ws.path)
                .env("GIT_INDEX_FILE", &index)
        };
        let result = (|| {
            git("read-tree")
                .args(["read-tree", "--end-of-options"])
                .arg(format!("{sha}^{{tree}}"))
                .run()?;
            let mut prefix = dest.as_os_str().to_owned();
            prefix.push("/");
            let mut arg = std::ffi::OsString::from("--prefix=");
            arg.push(prefix);
            git("checkout-index")
                .args(["checkout-index", "--all", "--force"])
                .arg(arg)
                .run()?;
            Ok(())
        })();
        let _ = std::fs::remove_file(&index);
        result?;
        if let Some((uid, gid)) = owner {
            chown_recursive(dest, uid, gid)?;
        }
        Ok(())
    }

    /// Pushes exactly `sha` to `refs/heads/{remote_branch}` at the upstream recorded at
    /// prepare time (a rejection is `PushRejected`). No force; a workspace with a `lease`
    /// (`rebase_onto_base`) replaces the branch only while it still names the leased sha.
    pub fn push_commit(
        &self,
        ws: &Workspace,
        sha: &str,
        remote_branch: &str,
        token: Option<&str>,
    ) -> Result<(), WorkspaceError> {
        check_oid("commit", sha)?;
        if let Some(lease) = &ws.lease {
            check_oid("leased commit", lease)?;
        }
        let refspec = format!("{sha}:refs/heads/{remote_branch}");
        self.push_refspec(
            ws,
            None,
            &refspec,
            remote_branch,
            ws.lease.as_deref(),
            token,
        )
    }

    /// The commit `refs/heads/{branch}` names at the upstream, `None` when it does not exist.
    pub fn remote_sha(
        &self,
        ws: &Workspace,
        branch: &str,
        token: Option<&str>,
    ) -> Result<Option<String>, WorkspaceError> {
        let target = resolve_upstream(&ws.upstream)?;
        let askpass = self.askpass()?;
        let full = format!("refs/heads/{branch}");
        let out = Git::new("ls-remote")
            .args(["ls-remote", "--refs", "--", &target, &full])
            .token(&askpass, token, &target)
            .run()
            .map_err(|e| match e {
                WorkspaceError::Git { op, code, stderr } => WorkspaceError::Git {
                    op,
                    code,
                    stderr: scrub(&stderr, token),
                },
                other => other,
            })?;
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .find(|(_, name)| *name == full)
            .map(|(oid, _)| oid.to_string()))
    }
}
