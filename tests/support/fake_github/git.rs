//! Real git over the fake's bare repositories (`file://` clone URLs): branch tips,
//! mergeability, merge commits, the diff hunk above an inline comment, and a test-side push.
//! A repository whose clone URL is not a local bare one has no git data: callers fall back
//! to what the fake stored.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The bare repository behind `clone_url`, if it is a local one that exists.
pub(super) fn bare_dir(clone_url: &str) -> Option<PathBuf> {
    let path = clone_url.strip_prefix("file://")?;
    Path::new(path).exists().then(|| PathBuf::from(path))
}

fn git(dir: &Path, args: &[&str]) -> Option<Output> {
    Command::new("git")
        .arg("--git-dir")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "GitHub")
        .env("GIT_AUTHOR_EMAIL", "noreply@github.com")
        .env("GIT_COMMITTER_NAME", "GitHub")
        .env("GIT_COMMITTER_EMAIL", "noreply@github.com")
        .output()
        .ok()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The sha of `branch` in a `file://` bare repo; `None` when it is missing (or the clone
/// URL is not a local repo, then the caller does not check).
pub(super) fn branch_sha(clone_url: &str, branch: &str) -> Option<Option<String>> {
    let dir = bare_dir(clone_url)?;
    let out = git(
        &dir,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("refs/heads/{branch}"),
        ],
    )?;
    Some(out.status.success().then(|| stdout(&out)))
}

/// A branch name or a sha as a commit sha (`None` when the repository has no such commit).
pub(super) fn resolve_commit(clone_url: &str, rev: &str) -> Option<String> {
    let dir = bare_dir(clone_url)?;
    for candidate in [format!("refs/heads/{rev}"), format!("{rev}^{{commit}}")] {
        let out = git(&dir, &["rev-parse", "--verify", "--quiet", &candidate])?;
        if out.status.success() {
            return Some(stdout(&out));
        }
    }
    None
}

/// `(conflicts, up_to_date)` of merging `head` into `base`; `None` without git data.
pub(super) fn merge_check(clone_url: &str, base: &str, head: &str) -> Option<(bool, bool)> {
    let dir = bare_dir(clone_url)?;
    let merge = git(
        &dir,
        &["merge-tree", "--write-tree", "--no-messages", base, head],
    )?;
    // 0: clean, 1: conflicts, anything else: git could not tell (missing commit).
    let conflicts = match merge.status.code() {
        Some(0) => false,
        Some(1) => true,
        _ => return None,
    };
    let up_to_date = git(&dir, &["merge-base", "--is-ancestor", base, head])?
        .status
        .success();
    Some((conflicts, up_to_date))
}

/// Merge `head` into the branch `base` (at `base_sha`) as GitHub's merge button does:
/// a merge commit (`squash`: one commit with the base as only parent). Returns the new
/// base sha; `None` on conflicts or when the base moved meanwhile.
pub(super) fn merge_into(
    clone_url: &str,
    base: &str,
    base_sha: &str,
    head_sha: &str,
    squash: bool,
    message: &str,
) -> Option<String> {
    let dir = bare_dir(clone_url)?;
    let merge = git(
        &dir,
        &[
            "merge-tree",
            "--write-tree",
            "--no-messages",
            base_sha,
            head_sha,
        ],
    )?;
    if !merge.status.success() {
        return None;
    }
    let tree = stdout(&merge);
    let mut args = vec!["commit-tree", tree.as_str(), "-p", base_sha];
    if !squash {
        args.extend(["-p", head_sha]);
    }
    args.extend(["-m", message]);
    let commit = git(&dir, &args)?;
    if !commit.status.success() {
        return None;
    }
    let sha = stdout(&commit);
    let moved = git(
        &dir,
        &["update-ref", &format!("refs/heads/{base}"), &sha, base_sha],
    )?;
    moved.status.success().then_some(sha)
}

/// The diff hunk GitHub shows above an inline comment on `line` of `path` (`left`: the
/// base side): the pull request's diff (merge base to head), from the hunk's `@@` header
/// down to that line. `None` when the line is not part of the diff.
pub(super) fn diff_hunk(
    clone_url: &str,
    base_sha: &str,
    head_sha: &str,
    path: &str,
    line: u64,
    left: bool,
) -> Option<String> {
    let dir = bare_dir(clone_url)?;
    let range = format!("{base_sha}...{head_sha}");
    let out = git(
        &dir,
        &[
            "diff",
            "--no-color",
            "--no-ext-diff",
            "--unified=3",
            &range,
            "--",
            path,
        ],
    )?;
    if !out.status.success() {
        return None;
    }
    hunk_up_to(&String::from_utf8_lossy(&out.stdout), line, left)
}

/// The hunk of a unified diff holding `line` (of the new file, or the old one when `left`),
/// cut after that line. Pure.
pub(super) fn hunk_up_to(diff: &str, line: u64, left: bool) -> Option<String> {
    let mut hunk: Vec<&str> = Vec::new();
    let (mut old, mut new) = (0u64, 0u64);
    for text in diff.lines() {
        if let Some(header) = text.strip_prefix("@@ -") {
            let (ranges, _) = header.split_once(" @@")?;
            let (old_range, new_range) = ranges.split_once(" +")?;
            let start = |r: &str| r.split(',').next().and_then(|n| n.parse::<u64>().ok());
            old = start(old_range)?;
            new = start(new_range)?;
            hunk = vec![text];
            continue;
        }
        if hunk.is_empty() {
            continue; // the file header
        }
        let (here, old_step, new_step) = match text.chars().next() {
            Some('+') => (if left { None } else { Some(new) }, 0, 1),
            Some('-') => (if left { Some(old) } else { None }, 1, 0),
            Some(' ') | None => (Some(if left { old } else { new }), 1, 1),
            _ => (None, 0, 0), // "\ No newline at end of file"
        };
        hunk.push(text);
        if here == Some(line) {
            return Some(hunk.join("\n"));
        }
        old += old_step;
        new += new_step;
    }
    None
}

/// See [`super::push_to_branch`].
pub(super) fn push_to_branch(
    clone_url: &str,
    branch: &str,
    files: &[(&str, &str)],
    message: &str,
) -> String {
    let work = tempfile::tempdir().expect("tempdir");
    let run = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(work.path())
            .env("GIT_AUTHOR_NAME", "a person")
            .env("GIT_AUTHOR_EMAIL", "person@example.com")
            .env("GIT_COMMITTER_NAME", "a person")
            .env("GIT_COMMITTER_EMAIL", "person@example.com")
            .output()
            .expect("run git");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    run(&["clone", "-q", clone_url, "."]);
    let exists = !run(&["ls-remote", "--heads", "origin", branch]).is_empty();
    if exists {
        run(&["checkout", "-q", "-B", branch, &format!("origin/{branch}")]);
    } else {
        run(&["checkout", "-q", "-b", branch]);
    }
    for (path, content) in files {
        let file = work.path().join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&file, content).expect("write");
    }
    run(&["add", "-A"]);
    run(&["commit", "-q", "-m", message]);
    run(&["push", "-q", "origin", &format!("HEAD:refs/heads/{branch}")]);
    run(&["rev-parse", "HEAD"])
}
