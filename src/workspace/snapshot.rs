//! The landing commit and what is judged about it (issue 11, "the pushed commit is the
//! verified commit"; issue 23, "landing by construction"): `commit_once` takes the agent's
//! working tree as plain files (`worktree.rs`; nothing of its `.git` is read) into the
//! orchestrator's own repository (`own.rs`) as ONE commit on the base recorded at prepare,
//! and returns its sha; `changes`, `read_blobs` and `checkout` read that repository only,
//! and `push_commit` / `remote_sha` send exactly that sha from it and read back what the
//! remote holds.
//!
//! Cost grows with the change, not with the tree: one `ls-tree` of the base, one walk of the
//! working tree hashing only files the base tracks (in-process), one `fast-import` writing
//! every new blob and the commit, one `diff-tree`, and one `cat-file --batch` for all the
//! blobs the gates read. `max_changed_files` bounds an attempt's change (issue 23).

use super::cleanup::chown_recursive;
use super::commit::{check_author, check_message};
use super::key::scrub;
use super::own::OwnRepo;
use super::upstream::resolve_upstream;
use super::worktree::{self, Taken, Tracked};
use super::{io_err, Author, CommitOutcome, Workspace, WorkspaceError, WorkspaceManager};
use std::io::{BufRead, Read, Write};
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
    /// Takes the agent's working tree (`.gitignore` respected for untracked files,
    /// deletions of tracked files included; see `worktree.rs`) into the orchestrator's own
    /// repository as ONE commit whose parents are `ws.base_sha` and `ws.merge_parents`:
    /// whatever the agent committed, wrote into its `.git` or left as HEAD never lands, and
    /// is never read. More than `max_changed_files` added, changed or deleted files is
    /// `TooManyChanges`. The attempt branch of the orchestrator's repository names the
    /// commit; callers use the returned sha.
    pub fn commit_once(
        &self,
        ws: &Workspace,
        author: &Author,
        message: &str,
        max_changed_files: usize,
    ) -> Result<CommitOutcome, WorkspaceError> {
        check_author(author)?;
        check_message(message)?;
        check_oid("base commit", &ws.base_sha)?;
        for parent in &ws.merge_parents {
            check_oid("merged commit", parent)?;
        }
        // Issue 24: a filesystem the agent's run filled may have lost its writes (a file cut
        // short, one never written): nothing is committed from it.
        super::disk::ensure_room(
            &ws.path,
            super::disk::FULL_BYTES,
            "committing the agent's working tree (a disk this full may have lost its writes)",
        )?;
        let repo = self.own_repo(ws)?;
        let sha256 = ws.base_sha.len() == 64;
        let mut tracked = Tracked::default();
        list_tree(&repo, &ws.base_sha, &mut |mode, oid, path| {
            tracked.add(mode, oid, path, true)
        })?;
        for parent in &ws.merge_parents {
            list_tree(&repo, parent, &mut |mode, oid, path| {
                tracked.add(mode, oid, path, false)
            })?;
        }
        let taken = worktree::walk(&ws.path, &tracked)?;
        let present: std::collections::HashSet<&str> =
            taken.iter().map(|t| t.path.as_str()).collect();
        let mut deleted: Vec<String> = tracked
            .base
            .keys()
            .filter(|p| !present.contains(p.as_str()))
            .cloned()
            .collect();
        deleted.sort();
        drop(present);
        // Refused before reading a byte when the added and deleted files alone are too many.
        let added = taken
            .iter()
            .filter(|t| !tracked.base.contains_key(&t.path))
            .count();
        let too_many = |count: usize| WorkspaceError::TooManyChanges {
            count,
            limit: max_changed_files,
        };
        if added + deleted.len() > max_changed_files {
            return Err(too_many(added + deleted.len()));
        }
        let mut writes: Vec<Taken> = Vec::new();
        for t in taken {
            let changed = match tracked.base.get(&t.path) {
                None => true,
                Some((mode, oid)) => {
                    mode != t.mode || worktree::blob_id(&worktree::content(&t)?, sha256) != *oid
                }
            };
            if changed {
                if t.is_link() {
                    worktree::check_link(&t.abs, &t.path, &worktree::content(&t)?)?;
                }
                writes.push(t);
            }
        }
        let count = writes.len() + deleted.len();
        if count > max_changed_files {
            return Err(too_many(count));
        }
        if count == 0 {
            return Ok(CommitOutcome {
                sha: None,
                created_commit: false,
                changed_paths: Vec::new(),
                empty: true,
            });
        }
        let branch = format!("refs/heads/{}", ws.branch);
        // The attempt's own repository: only this process writes it, so a lock file there
        // is a dead run's (the daemon killed in an earlier try of this commit).
        super::stale_locks::clear(repo.dir());
        let stream = CommitStream {
            branch: branch.clone(),
            author: author.clone(),
            message: message.to_string(),
            base: ws.base_sha.clone(),
            merges: ws.merge_parents.clone(),
            writes,
            deleted,
        };
        repo.git("fast-import")
            .args([
                "fast-import",
                "--quiet",
                "--force",
                "--done",
                "--date-format=raw",
            ])
            .stream(move |w| stream.write(w), |r| drain(r))?;
        let sha = repo
            .git("rev-parse")
            .args(["rev-parse", "--verify", "--end-of-options"])
            .arg(format!("{branch}^{{commit}}"))
            .stdout()?;
        check_oid("commit", &sha)?;
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

    /// Every path that differs between `ws.base_sha` and `sha`, with modes and blob sizes,
    /// read from the orchestrator's repository (one `diff-tree`, one `cat-file`).
    pub fn changes(&self, ws: &Workspace, sha: &str) -> Result<Vec<TreeChange>, WorkspaceError> {
        check_oid("commit", sha)?;
        check_oid("base commit", &ws.base_sha)?;
        let repo = self.own_repo(ws)?;
        let raw = repo
            .git("diff-tree")
            .args([
                "diff-tree",
                "-r",
                "-z",
                "--raw",
                "--no-renames",
                "--no-abbrev",
                "--end-of-options",
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
        let wanted: Vec<String> = changes
            .iter()
            .filter(|c| c.has_blob())
            .map(|c| c.new_oid.clone())
            .collect();
        if !wanted.is_empty() {
            let sizes = blob_sizes(&repo, wanted)?;
            for c in changes.iter_mut().filter(|c| c.has_blob()) {
                c.size = sizes.get(&c.new_oid).copied();
            }
        }
        Ok(changes)
    }

    /// The content of blob `oid`, from the orchestrator's repository.
    pub fn blob(&self, ws: &Workspace, oid: &str) -> Result<Vec<u8>, WorkspaceError> {
        let mut out = None;
        self.read_blobs(ws, vec![oid.to_string()], &mut |_, bytes| {
            out = Some(bytes.to_vec());
            false
        })?;
        out.ok_or_else(|| WorkspaceError::InvalidInput {
            what: "blob",
            value: oid.to_string(),
            reason: "not in the orchestrator's repository".into(),
        })
    }

    /// Reads the blobs `oids` in order through ONE `git cat-file --batch`, handing each to
    /// `each(index, bytes)`, which returns whether to go on. A missing object is an error.
    pub fn read_blobs(
        &self,
        ws: &Workspace,
        oids: Vec<String>,
        each: &mut dyn FnMut(usize, &[u8]) -> bool,
    ) -> Result<(), WorkspaceError> {
        for oid in &oids {
            check_oid("blob", oid)?;
        }
        let repo = self.own_repo(ws)?;
        let n = oids.len();
        repo.git("cat-file --batch")
            .args(["cat-file", "--batch"])
            .stream(
                move |w| {
                    for oid in &oids {
                        writeln!(w, "{oid}").map_err(pipe_err)?;
                    }
                    Ok(())
                },
                |r| {
                    let mut buf = Vec::new();
                    for i in 0..n {
                        let (oid, size) = batch_header(r)?;
                        let size = size.ok_or_else(|| WorkspaceError::InvalidInput {
                            what: "blob",
                            value: oid.clone(),
                            reason: "not in the orchestrator's repository".into(),
                        })?;
                        buf.clear();
                        r.take(size + 1).read_to_end(&mut buf).map_err(pipe_err)?;
                        buf.truncate(size as usize);
                        if !each(i, &buf) {
                            break;
                        }
                    }
                    Ok(())
                },
            )
    }

    /// Writes the tree of `sha` into `dest`, a directory this call creates (it must not exist):
    /// no `.git`, nothing ignored or excluded, only what the commit holds, read from the
    /// orchestrator's repository with a temporary index beside `dest`. `owner` chowns the
    /// result for the check container's user.
    pub fn checkout(
        &self,
        ws: &Workspace,
        sha: &str,
        dest: &Path,
        owner: Option<(u32, u32)>,
    ) -> Result<(), WorkspaceError> {
        check_oid("commit", sha)?;
        let repo = self.own_repo(ws)?;
        std::fs::create_dir(dest).map_err(io_err("create check directory", dest))?;
        let index = dest.with_extension("index");
        let _ = std::fs::remove_file(&index);
        super::stale_locks::clear_index(&index);
        let result = (|| {
            repo.git("read-tree")
                .env("GIT_INDEX_FILE", &index)
                .args(["read-tree", "--end-of-options"])
                .arg(format!("{sha}^{{tree}}"))
                .run()?;
            let mut work_tree = std::ffi::OsString::from("--work-tree=");
            work_tree.push(dest);
            repo.git("checkout-index")
                .env("GIT_INDEX_FILE", &index)
                .arg(&work_tree)
                .current_dir(dest)
                .args(["checkout-index", "--all", "--force", "-u"])
                .run()?;
            // Issue 24: what a full disk lost is never checked as if it were the commit.
            let listing = repo
                .git("ls-files")
                .env("GIT_INDEX_FILE", &index)
                .arg(&work_tree)
                .current_dir(dest)
                .args(super::disk::LIST_LOST)
                .run()?;
            super::disk::verify_checkout(&listing.stdout, dest)
        })()
        .map_err(|e| super::disk::explain(e, dest));
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

    /// The commit `refs/heads/{branch}` names at `upstream`, asked without any workspace
    /// (run in the mirror root): what a daemon taking over a lost machine's landing asks
    /// first, so a push that machine made is found and not made again (issue 27).
    pub fn upstream_branch_sha(
        &self,
        upstream: &str,
        branch: &str,
        token: Option<&str>,
    ) -> Result<Option<String>, WorkspaceError> {
        let target = resolve_upstream(upstream)?;
        let askpass = self.askpass()?;
        let full = format!("refs/heads/{branch}");
        let out = super::git::Git::new("ls-remote")
            .args(["ls-remote", "--refs", "--", &target, &full])
            .current_dir(&self.mirror_root)
            .token(&askpass, token, &target)
            .run();
        ls_remote_sha(out, &full, token)
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
        let out = self
            .own_repo(ws)?
            .git("ls-remote")
            .args(["ls-remote", "--refs", "--", &target, &full])
            .token(&askpass, token, &target)
            .run();
        ls_remote_sha(out, &full, token)
    }
}

/// Calls `each(mode, oid, path)` for every entry of `commit`'s tree, recursively (one
/// `ls-tree` in the orchestrator's repository).
fn list_tree(
    repo: &OwnRepo,
    commit: &str,
    each: &mut dyn FnMut(&str, &str, &str),
) -> Result<(), WorkspaceError> {
    let out = repo
        .git("ls-tree")
        .args(["ls-tree", "-r", "-z", "--full-tree", "--end-of-options"])
        .arg(format!("{commit}^{{tree}}"))
        .run()?
        .stdout;
    for entry in out.split(|b| *b == 0).filter(|e| !e.is_empty()) {
        let Some(tab) = entry.iter().position(|b| *b == b'\t') else {
            continue;
        };
        let head = String::from_utf8_lossy(&entry[..tab]);
        let path = String::from_utf8_lossy(&entry[tab + 1..]);
        let mut parts = head.split(' ');
        let (Some(mode), Some(_), Some(oid)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        each(mode, oid, &path);
    }
    Ok(())
}

/// Sizes of `oids` (one `cat-file --batch-check`); missing objects are left out.
fn blob_sizes(
    repo: &OwnRepo,
    oids: Vec<String>,
) -> Result<std::collections::HashMap<String, u64>, WorkspaceError> {
    let n = oids.len();
    repo.git("cat-file --batch-check")
        .args(["cat-file", "--batch-check"])
        .stream(
            move |w| {
                for oid in &oids {
                    writeln!(w, "{oid}").map_err(pipe_err)?;
                }
                Ok(())
            },
            |r| {
                let mut sizes = std::collections::HashMap::with_capacity(n);
                for _ in 0..n {
                    let (oid, size) = batch_header(r)?;
                    if let Some(size) = size {
                        sizes.insert(oid, size);
                    }
                }
                Ok(sizes)
            },
        )
}

/// One `cat-file --batch[-check]` header: `<oid> <type> <size>` or `<oid> missing`.
fn batch_header(r: &mut dyn BufRead) -> Result<(String, Option<u64>), WorkspaceError> {
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line).map_err(pipe_err)?;
    let line = String::from_utf8_lossy(&line);
    let mut parts = line.split_whitespace();
    let oid = parts.next().unwrap_or("").to_string();
    let size = match (parts.next(), parts.next()) {
        (Some(_), Some(size)) => size.parse().ok(),
        _ => None,
    };
    if oid.is_empty() {
        return Err(WorkspaceError::Git {
            op: "cat-file --batch".into(),
            code: None,
            stderr: "git stopped answering before every object was read".into(),
        });
    }
    Ok((oid, size))
}

fn pipe_err(source: std::io::Error) -> WorkspaceError {
    WorkspaceError::Io {
        op: "talk to git over a pipe",
        path: "git".into(),
        source,
    }
}

fn drain(r: &mut dyn BufRead) -> Result<(), WorkspaceError> {
    std::io::copy(r, &mut std::io::sink()).map_err(pipe_err)?;
    Ok(())
}

/// The `git fast-import` stream of one landing commit: every new blob (read from the
/// working tree as it is streamed), then the commit on the base with its changes.
struct CommitStream {
    branch: String,
    author: Author,
    message: String,
    base: String,
    merges: Vec<String>,
    writes: Vec<Taken>,
    deleted: Vec<String>,
}

impl CommitStream {
    fn write(&self, w: &mut dyn Write) -> Result<(), WorkspaceError> {
        let io = pipe_err;
        w.write_all(b"feature done\n").map_err(io)?;
        for (i, t) in self.writes.iter().enumerate() {
            write!(w, "blob\nmark :{}\n", i + 1).map_err(io)?;
            if t.is_link() {
                let target = worktree::content(t)?;
                writeln!(w, "data {}", target.len()).map_err(io)?;
                w.write_all(&target).map_err(io)?;
            } else {
                let (file, len) = worktree::open_regular(&t.abs)?;
                writeln!(w, "data {len}").map_err(io)?;
                let copied = std::io::copy(&mut file.take(len), w).map_err(io)?;
                if copied != len {
                    return Err(WorkspaceError::InvalidInput {
                        what: "workspace file",
                        value: t.abs.display().to_string(),
                        reason: "it changed size while being read".into(),
                    });
                }
            }
            w.write_all(b"\n").map_err(io)?;
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let who = format!("{} <{}> {now} +0000", self.author.name, self.author.email);
        write!(
            w,
            "commit {}\nauthor {who}\ncommitter {who}\ndata {}\n{}\nfrom {}\n",
            self.branch,
            self.message.len(),
            self.message,
            self.base
        )
        .map_err(io)?;
        for m in &self.merges {
            writeln!(w, "merge {m}").map_err(io)?;
        }
        for path in &self.deleted {
            writeln!(w, "D {}", quote(path)).map_err(io)?;
        }
        for (i, t) in self.writes.iter().enumerate() {
            writeln!(w, "M {} :{} {}", t.mode, i + 1, quote(&t.path)).map_err(io)?;
        }
        w.write_all(b"\ndone\n").map_err(io)?;
        Ok(())
    }
}

/// A path as fast-import's C-style quoted string (any byte is safe inside).
fn quote(path: &str) -> String {
    let mut out = String::with_capacity(path.len() + 2);
    out.push('"');
    for b in path.bytes() {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\{b:03o}")),
        }
    }
    out.push('"');
    out
}

/// The commit `full` (a whole ref name) names in `git ls-remote`'s answer, `None` when it is
/// not there; a failure's stderr has `token` scrubbed out.
fn ls_remote_sha(
    out: Result<std::process::Output, WorkspaceError>,
    full: &str,
    token: Option<&str>,
) -> Result<Option<String>, WorkspaceError> {
    let out = out.map_err(|e| match e {
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

#[cfg(test)]
mod tests {
    #[test]
    fn fast_import_paths_are_quoted() {
        assert_eq!(super::quote("a b/c.txt"), "\"a b/c.txt\"");
        assert_eq!(super::quote("q\"\\\n"), "\"q\\\"\\\\\\n\"");
        assert_eq!(super::quote("é"), "\"\\303\\251\"");
    }
}
