//! The lock files a git killed with the daemon leaves behind (issue 24 makes every git child
//! die with the daemon, by SIGKILL, which runs none of git's cleanup; a power loss does the
//! same): `HEAD.lock`, `packed-refs.lock`, `refs/heads/<b>.lock`, an index's `.lock`. Git
//! refuses to touch a file whose lock exists ("Another git process seems to be running"), so
//! one would fail every later fetch of the mirror or the resumed attempt's commit.
//!
//! Removed only where no live git can hold them: in the mirror under its exclusive `flock`
//! (every writer of a mirror takes it, and it goes with its holder's death), and in the
//! orchestrator's repository or a check's index of an attempt this process runs (nothing
//! else writes them). Never in the agent's workspace.

use std::path::Path;

/// Removes the `*.lock` files at the top of git directory `git_dir` and below its `refs/`
/// (regular files only, no link followed). Returns how many went.
pub(crate) fn clear(git_dir: &Path) -> usize {
    let mut removed = clear_in(git_dir, false);
    removed += clear_in(&git_dir.join("refs"), true);
    if removed > 0 {
        tracing::info!(repo = %git_dir.display(), removed, "removed lock files a killed git left");
    }
    removed
}

fn clear_in(dir: &Path, deep: bool) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        if kind.is_dir() && deep {
            removed += clear_in(&path, true);
        } else if kind.is_file()
            && path.extension().is_some_and(|e| e == "lock")
            && std::fs::remove_file(&path).is_ok()
        {
            removed += 1;
        }
    }
    removed
}

/// Removes the lock file of index file `index` (`<index>.lock`), if there is one.
pub(crate) fn clear_index(index: &Path) {
    let mut lock = index.as_os_str().to_owned();
    lock.push(".lock");
    let lock = Path::new(&lock);
    if lock.symlink_metadata().is_ok_and(|m| m.is_file()) && std::fs::remove_file(lock).is_ok() {
        tracing::info!(index = %index.display(), "removed an index lock a killed git left");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_lock_files_go_and_links_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let git = dir.path();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("keep.lock"), "").unwrap();
        std::fs::create_dir_all(git.join("refs/heads/feature")).unwrap();
        std::fs::create_dir_all(git.join("objects")).unwrap();
        for f in [
            "HEAD.lock",
            "packed-refs.lock",
            "refs/heads/main.lock",
            "refs/heads/feature/x.lock",
        ] {
            std::fs::write(git.join(f), "").unwrap();
        }
        for f in ["HEAD", "refs/heads/main", "objects/pack.lock"] {
            std::fs::write(git.join(f), "").unwrap();
        }
        std::os::unix::fs::symlink(outside.path(), git.join("refs/out")).unwrap();
        assert_eq!(clear(git), 4);
        assert!(git.join("HEAD").exists() && git.join("refs/heads/main").exists());
        // Objects are not refs: a pack's lock is not ours to judge.
        assert!(git.join("objects/pack.lock").exists());
        assert!(outside.path().join("keep.lock").exists());
        assert_eq!(clear(git), 0);

        let index = git.join("1.index");
        std::fs::write(git.join("1.index.lock"), "").unwrap();
        clear_index(&index);
        assert!(!git.join("1.index.lock").exists());
    }
}
