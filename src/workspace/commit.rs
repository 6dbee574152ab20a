//! `commit_all`: stage everything the agent changed, commit as the configured author, and report
//! the paths changed since the base commit (agent commits included) for the protected-path
//! check. Also `harden`, run before any git command in a workspace an agent has touched.
//!
//! Must not trust anything inside the workspace's `.git`: the config is rewritten from values
//! recorded at prepare time, symlinks are refused, alternates are dropped or re-written from the
//! value recorded at prepare time.

use super::git::Git;
use super::{io_err, Author, CommitOutcome, Workspace, WorkspaceError, WorkspaceManager};
use std::path::Path;

impl WorkspaceManager {
    /// Stages all changes (deletions included, `.gitignore` respected), commits them if any,
    /// points `ws.branch` at the result and lists the paths changed since `ws.base_sha`.
    pub fn commit_all(
        &self,
        ws: &Workspace,
        author: &Author,
        message: &str,
    ) -> Result<CommitOutcome, WorkspaceError> {
        check_author(author)?;
        check_message(message)?;
        harden(ws)?;
        let git = |op: &str| Git::new(op).current_dir(&ws.path);
        git("add").args(["add", "--all", "--", "."]).run()?;
        let (probe, op, _) = git("diff --cached")
            .args(["diff", "--cached", "--quiet", "--no-ext-diff"])
            .output()?;
        let staged = match probe.status.code() {
            Some(0) => false,
            Some(1) => true,
            _ => return Err(super::git::git_error(&op, &probe, None)),
        };
        if staged {
            git("commit")
                .env("GIT_AUTHOR_NAME", &author.name)
                .env("GIT_AUTHOR_EMAIL", &author.email)
                .env("GIT_COMMITTER_NAME", &author.name)
                .env("GIT_COMMITTER_EMAIL", &author.email)
                .args([
                    "commit",
                    "--quiet",
                    "--no-verify",
                    "--no-gpg-sign",
                    "-m",
                    message,
                ])
                .run()?;
        }
        let head = git("rev-parse")
            .args(["rev-parse", "--verify", "HEAD^{commit}"])
            .stdout()?;
        // The agent may have switched or created branches: the attempt branch is what we push,
        // so it must name the commit we just made.
        let branch_ref = format!("refs/heads/{}", ws.branch);
        let on_branch = git("symbolic-ref")
            .args(["symbolic-ref", "--quiet", "HEAD"])
            .stdout()
            .is_ok_and(|r| r == branch_ref);
        if !on_branch {
            tracing::warn!(path = %ws.path.display(), branch = %ws.branch, "HEAD left the attempt branch; moving the branch to HEAD");
            git("update-ref")
                .args(["update-ref", &branch_ref, &head])
                .run()?;
        }
        let out = git("diff --name-only")
            .args([
                "diff",
                "--name-only",
                "-z",
                "--no-renames",
                "--no-ext-diff",
                "--no-textconv",
                "--end-of-options",
                &ws.base_sha,
                &head,
                "--",
            ])
            .run()?;
        let changed_paths: Vec<String> = out
            .stdout
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect();
        let empty = changed_paths.is_empty();
        Ok(CommitOutcome {
            sha: (!empty).then_some(head),
            created_commit: staged,
            changed_paths,
            empty,
        })
    }
}

pub(super) fn check_message(message: &str) -> Result<(), WorkspaceError> {
    if message.trim().is_empty() || message.contains('\0') {
        return Err(WorkspaceError::InvalidInput {
            what: "commit message",
            value: message.to_string(),
            reason: "it must be non-empty text without NUL".into(),
        });
    }
    Ok(())
}

pub(super) fn check_author(author: &Author) -> Result<(), WorkspaceError> {
    for (what, v) in [
        ("author name", &author.name),
        ("author email", &author.email),
    ] {
        if v.trim().is_empty() || v.contains(['<', '>', '\n', '\r', '\0']) {
            return Err(WorkspaceError::InvalidInput {
                what,
                value: v.to_string(),
                reason: "set git.author_name / git.author_email in config.yaml to plain text without <, > or newlines".into(),
            });
        }
    }
    Ok(())
}

/// Makes the workspace's `.git` safe for host-side git: `.git` must be a real directory with no
/// symlink anywhere inside (a symlinked `objects/xx` would make us write or read host files),
/// alternates and grafts are dropped (a shared clone's alternates entry is re-written from
/// `ws.mirror_objects`), and the config is rewritten from `ws`.
pub(crate) fn harden(ws: &Workspace) -> Result<(), WorkspaceError> {
    let dot_git = ws.path.join(".git");
    let untrusted = |reason: String| WorkspaceError::InvalidInput {
        what: "workspace",
        value: ws.path.display().to_string(),
        reason,
    };
    let meta = std::fs::symlink_metadata(&dot_git).map_err(io_err("inspect", &dot_git))?;
    if !meta.is_dir() {
        return Err(untrusted(
            ".git is not a directory (the agent replaced it); discard this attempt".into(),
        ));
    }
    if let Some((path, kind)) = find_special_file(&ws.path)? {
        return Err(untrusted(format!(
            "{} is a {kind}, not a regular file; git would block or misread it, so this attempt is refused",
            path.display()
        )));
    }
    if let Some(link) = find_symlink(&dot_git)? {
        return Err(untrusted(format!(
            "{} is a symlink inside .git; discard this attempt",
            link.display()
        )));
    }
    for rel in [
        "objects/info/alternates",
        "objects/info/http-alternates",
        "info/grafts",
        // Attributes here outrank the commit's own `.gitattributes` when the clean checkout
        // for the checks is written: the checked copy must be what a clone of the sha gives.
        "info/attributes",
        "commondir",
        "shallow",
    ] {
        let p = dot_git.join(rel);
        if p.exists() {
            std::fs::remove_file(&p).map_err(io_err("remove", &p))?;
        }
    }
    // A shared clone borrows the mirror's objects: the one entry recorded at prepare, never
    // what the agent left in the file.
    if let Some(objects) = &ws.mirror_objects {
        super::shared::write_alternates(&dot_git, objects)?;
    }
    let config = render_config(&ws.upstream, ws.base_sha.len() == 64);
    let path = dot_git.join("config");
    std::fs::write(&path, config).map_err(io_err("rewrite", &path))?;
    Ok(())
}

/// The first FIFO, socket or device anywhere under `dir` (symlinks are not followed; git
/// stores them as links). Git opens every path it reads with a blocking `open`, so a FIFO at
/// `.git/index` or in the work tree would hang the host-side command.
pub(crate) fn find_special_file(
    dir: &Path,
) -> Result<Option<(std::path::PathBuf, &'static str)>, WorkspaceError> {
    use std::os::unix::fs::FileTypeExt;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).map_err(io_err("read", &d))? {
            let entry = entry.map_err(io_err("read", &d))?;
            let ft = entry
                .file_type()
                .map_err(io_err("inspect", &entry.path()))?;
            let kind = if ft.is_fifo() {
                "FIFO"
            } else if ft.is_socket() {
                "socket"
            } else if ft.is_char_device() {
                "character device"
            } else if ft.is_block_device() {
                "block device"
            } else {
                if ft.is_dir() {
                    stack.push(entry.path());
                }
                continue;
            };
            return Ok(Some((entry.path(), kind)));
        }
    }
    Ok(None)
}

fn find_symlink(dir: &Path) -> Result<Option<std::path::PathBuf>, WorkspaceError> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).map_err(io_err("read", &d))? {
            let entry = entry.map_err(io_err("read", &d))?;
            let ft = entry
                .file_type()
                .map_err(io_err("inspect", &entry.path()))?;
            if ft.is_symlink() {
                return Ok(Some(entry.path()));
            }
            if ft.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    Ok(None)
}

/// The repository config as `prepare` left it; the object format is inferred from the base
/// commit id we recorded (64 hex digits = sha256), never read from the workspace.
fn render_config(upstream: &str, sha256: bool) -> String {
    let quoted = upstream.replace('\\', "\\\\").replace('"', "\\\"");
    let (version, extensions) = if sha256 {
        (1, "[extensions]\n\tobjectformat = sha256\n")
    } else {
        (0, "")
    };
    format!(
        "[core]\n\trepositoryformatversion = {version}\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n{extensions}[remote \"origin\"]\n\turl = \"{quoted}\"\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n"
    )
}
