//! Checks `enqueue` runs before it stores a task (issue 12): a local repository exists and
//! is a git repository, the base ref resolves in it, and a URL answers `git ls-remote` with
//! the base ref. Read-only: nothing is cloned or written.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::git::Git;
use super::WorkspaceError;

/// Why a source cannot be worked on, for the caller to show with a fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    #[error("{path} is not a git repository")]
    NotARepository { path: String },
    #[error("{path} belongs to another user, and git refuses to read it (safe.directory)")]
    OtherOwner { path: String },
    #[error("{path} has no commits to start from (its HEAD does not resolve)")]
    NoCommits { path: String },
    #[error("base ref `{base}` does not resolve in {repo}")]
    BaseNotFound { repo: String, base: String },
    #[error("{repo} did not answer `git ls-remote`: {reason}")]
    Unreachable { repo: String, reason: String },
    #[error("{0}")]
    Git(String),
}

impl From<WorkspaceError> for ProbeError {
    fn from(e: WorkspaceError) -> ProbeError {
        ProbeError::Git(e.to_string())
    }
}

/// A local path: a git repository (work tree or bare) where `base` (or HEAD) names a
/// commit.
pub fn check_local(path: &Path, base: Option<&str>) -> Result<(), ProbeError> {
    let shown = path.display().to_string();
    // A bare repository answers `true` and git dir `.`; a work tree must have its top
    // here. Anything else means git found a repository further up, not the one named.
    let (out, _, _) = Git::new("rev-parse")
        .current_dir(path)
        .args(["rev-parse", "--is-bare-repository", "--git-dir"])
        .output()?;
    if !out.status.success() {
        // A repository owned by another user is refused by git itself (safe.directory):
        // say that rather than "not a git repository".
        let stderr = String::from_utf8_lossy(&out.stderr);
        if stderr.contains("dubious ownership") {
            return Err(ProbeError::OtherOwner { path: shown });
        }
        return Err(ProbeError::NotARepository { path: shown });
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let bare_here = text.lines().eq(["true", "."]);
    if !bare_here {
        let (out, _, _) = Git::new("rev-parse")
            .current_dir(path)
            .args(["rev-parse", "--show-toplevel"])
            .output()?;
        let top = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let at_top =
            out.status.success() && Path::new(&top).canonicalize().ok() == path.canonicalize().ok();
        if !at_top {
            return Err(ProbeError::NotARepository { path: shown });
        }
    }
    let rev = base.unwrap_or("HEAD");
    let (out, _, _) = Git::new("rev-parse")
        .current_dir(path)
        .args(["rev-parse", "--verify", "--quiet", "--end-of-options"])
        .arg(format!("{rev}^{{commit}}"))
        .output()?;
    if out.status.success() {
        return Ok(());
    }
    Err(match base {
        Some(b) => ProbeError::BaseNotFound {
            repo: shown,
            base: b.to_string(),
        },
        None => ProbeError::NoCommits { path: shown },
    })
}

/// A URL: `git ls-remote` answers within `timeout`, and lists `base` as a branch or tag
/// (a commit id cannot be asked for remotely and is taken on trust).
pub fn check_remote(url: &str, base: Option<&str>, timeout: Duration) -> Result<(), ProbeError> {
    let is_commit_id = |b: &str| b.len() >= 7 && b.chars().all(|c| c.is_ascii_hexdigit());
    let patterns: Vec<String> = match base {
        Some(b) if is_commit_id(b) => vec!["HEAD".into()],
        Some(b) if b.starts_with("refs/") => vec![b.to_string()],
        Some(b) => vec![format!("refs/heads/{b}"), format!("refs/tags/{b}")],
        None => vec!["HEAD".into()],
    };
    let mut child = Git::new("ls-remote")
        .args(["ls-remote", "--exit-code", "--"])
        .arg(url)
        .args(&patterns)
        .command()
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| ProbeError::Git(format!("cannot run git: {e}")))?;
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() >= timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ProbeError::Unreachable {
                    repo: super::key::scrub(url, None),
                    reason: format!("no answer within {}s", timeout.as_secs()),
                });
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(ProbeError::Git(format!("waiting for git: {e}"))),
        }
    };
    let stderr = child
        .stderr
        .take()
        .map(|mut s| {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut s, &mut text);
            text
        })
        .unwrap_or_default();
    match status.code() {
        Some(0) => Ok(()),
        // --exit-code: the repository answered but no ref matched.
        Some(2) => Err(match base {
            Some(b) => ProbeError::BaseNotFound {
                repo: super::key::scrub(url, None),
                base: b.to_string(),
            },
            None => ProbeError::NoCommits {
                path: super::key::scrub(url, None),
            },
        }),
        _ => Err(ProbeError::Unreachable {
            repo: super::key::scrub(url, None),
            reason: super::key::scrub(stderr.lines().last().unwrap_or("git failed").trim(), None),
        }),
    }
}
/// `git --version`'s output (for `doctor`), or why git cannot run.
pub fn git_version() -> Result<String, String> {
    match Git::new("version").arg("--version").output() {
        Ok((out, _, _)) if out.status.success() => {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        }
        Ok((out, _, _)) => Err(format!("`git --version` exited with {}", out.status)),
        Err(WorkspaceError::GitUnavailable { reason }) => Err(format!("cannot run git: {reason}")),
        Err(e) => Err(e.to_string()),
    }
}
