//! git for test fixtures: a hermetic author (no system or global config, `main` as the
//! default branch, no signing, no prompts), success asserted, stdout returned trimmed.

use std::path::Path;
use std::process::Command;

/// The author of test commits unless a test names another.
pub const AUTHOR: (&str, &str) = ("t", "t@example.com");

/// Runs `git ARGS` in `dir` as [`AUTHOR`]; panics with git's stderr when it fails.
pub fn git(dir: &Path, args: &[&str]) -> String {
    git_as(AUTHOR, dir, args)
}

/// [`git`] as the author `(name, email)`.
pub fn git_as((name, email): (&str, &str), dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args([
            "-c",
            "init.defaultBranch=main",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", name)
        .env("GIT_AUTHOR_EMAIL", email)
        .env("GIT_COMMITTER_NAME", name)
        .env("GIT_COMMITTER_EMAIL", email)
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Writes `text` to `root/rel`, creating the parent directories.
pub fn write(root: &Path, rel: &str, text: &str) {
    write_file(&root.join(rel), text);
}

/// Writes `text` to `path`, creating the parent directories.
pub fn write_file(path: &Path, text: &str) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("mkdir -p");
    }
    std::fs::write(path, text).expect("write");
}

/// A new repository in `dir` (created if missing) with every file in it committed as
/// `message` on `main`.
pub fn commit_all(dir: &Path, message: &str) {
    std::fs::create_dir_all(dir).expect("mkdir -p");
    git(dir, &["init", "-q"]);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-qm", message]);
}

/// The short names of the branches under `polyphony/` in `repo`.
pub fn polyphony_branches(repo: &Path) -> Vec<String> {
    git(
        repo,
        &[
            "branch",
            "--list",
            "polyphony/*",
            "--format=%(refname:short)",
        ],
    )
    .lines()
    .map(str::to_string)
    .collect()
}
