//! The patch of one commit against its first parent, read from a local clone (the
//! console's "diff that landed", issue 29).

use std::path::Path;

/// The patch of `sha` in the repository at `repo`, at most `max_bytes` (then cut, and
/// `true`); `None` when the repository or the commit is not there (the workspace was
/// cleaned up).
pub fn commit_patch(repo: &Path, sha: &str, max_bytes: usize) -> Option<(String, bool)> {
    let repo = git2::Repository::open(repo).ok()?;
    let oid = git2::Oid::from_str(sha).ok()?;
    let commit = repo.find_commit(oid).ok()?;
    let tree = commit.tree().ok()?;
    let parent = commit.parent(0).ok().and_then(|p| p.tree().ok());
    let diff = repo
        .diff_tree_to_tree(parent.as_ref(), Some(&tree), None)
        .ok()?;
    let mut out = String::new();
    let mut cut = false;
    let _ = diff.print(git2::DiffFormat::Patch, |_, _, line| {
        if out.len() >= max_bytes {
            cut = true;
            return false;
        }
        let text = String::from_utf8_lossy(line.content());
        match line.origin() {
            c @ ('+' | '-' | ' ') => {
                out.push(c);
                out.push_str(&text);
            }
            _ => out.push_str(&text),
        }
        true
    });
    Some((out, cut))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_patch_against_its_parent() {
        let dir = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(dir.path()).unwrap();
        let sig = git2::Signature::now("t", "t@example.com").unwrap();
        let write = |text: &str| {
            std::fs::write(dir.path().join("a.txt"), text).unwrap();
            let mut index = repo.index().unwrap();
            index.add_path(Path::new("a.txt")).unwrap();
            index.write().unwrap();
            repo.find_tree(index.write_tree().unwrap()).unwrap()
        };
        let t1 = write("one\n");
        let c1 = repo
            .commit(Some("HEAD"), &sig, &sig, "first", &t1, &[])
            .unwrap();
        let t2 = write("one\ntwo\n");
        let parent = repo.find_commit(c1).unwrap();
        let c2 = repo
            .commit(Some("HEAD"), &sig, &sig, "second", &t2, &[&parent])
            .unwrap();
        let (patch, cut) = commit_patch(dir.path(), &c2.to_string(), 10_000).unwrap();
        assert!(!cut);
        assert!(patch.contains("+++ b/a.txt"), "{patch}");
        assert!(patch.contains("+two"), "{patch}");
        assert!(!patch.contains("+one"), "{patch}");
        let (short, cut) = commit_patch(dir.path(), &c2.to_string(), 10).unwrap();
        assert!(cut && short.len() < 200, "{short}");
        assert!(commit_patch(dir.path(), "0000000000000000000000000000000000000000", 10).is_none());
        assert!(commit_patch(&dir.path().join("nope"), &c2.to_string(), 10).is_none());
    }
}
