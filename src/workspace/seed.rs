//! A new repository from files on disk: the demo's sample project (`polyphony demo` and the
//! end-to-end tests). One commit on `main` by a fixed author, then a bare clone as the
//! origin tasks are enqueued against. Every git child runs through the hermetic runner.

use std::path::Path;

use super::git::Git;
use super::WorkspaceError;

/// The author of a seeded repository's one commit.
const SEED_AUTHOR: [&str; 4] = [
    "user.name=Polyphony Demo",
    "user.email=demo@polyphony.invalid",
    "init.defaultBranch=main",
    "commit.gpgsign=false",
];

/// Commits everything under `work` (a plain directory) as one commit with `message` on
/// `main`, then clones it bare to `origin`. `work` is left as it is.
pub fn seed_bare_repo(work: &Path, origin: &Path, message: &str) -> Result<(), WorkspaceError> {
    let cwd = origin.parent().unwrap_or(work);
    let work_arg = work.display().to_string();
    let origin_arg = origin.display().to_string();
    let steps: [(&Path, Vec<&str>); 4] = [
        (work, vec!["init", "-q"]),
        (work, vec!["add", "-A"]),
        (work, vec!["commit", "-qm", message]),
        (cwd, vec!["clone", "-q", "--bare", &work_arg, &origin_arg]),
    ];
    for (dir, args) in steps {
        let mut git = Git::new(args[0]);
        for kv in SEED_AUTHOR {
            git = git.arg("-c").arg(kv);
        }
        git.args(&args).current_dir(dir).run()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seeded_origin_holds_one_commit_on_main() {
        let dir = tempfile::tempdir().expect("tempdir");
        let work = dir.path().join("src");
        std::fs::create_dir_all(&work).expect("mkdir");
        std::fs::write(work.join("a.txt"), "a\n").expect("write");
        let origin = dir.path().join("o.git");
        seed_bare_repo(&work, &origin, "first").expect("seed");
        let log = Git::new("log")
            .arg("--git-dir")
            .arg(&origin)
            .args(["log", "--format=%an <%ae> %s", "main"])
            .stdout()
            .expect("log");
        assert_eq!(log, "Polyphony Demo <demo@polyphony.invalid> first");
        assert!(origin.join("HEAD").is_file() && !origin.join(".git").exists());
    }
}
