//! Reading the agent's working tree as plain files (issue 23): the only input an attempt
//! gives the orchestrator. The walk never opens the agent's `.git` (the top-level `.git` is
//! skipped unread, whatever it is), never follows a symlink, and opens every file it reads
//! with `O_NOFOLLOW | O_NONBLOCK` after checking it is a regular file, so a FIFO cannot hang it.
//!
//! What is taken (documented in docs/SECURITY.md):
//! - every path the base commit tracks, as it now is (a tracked file that is gone is a
//!   deletion), even when a `.gitignore` matches it, as `git add --all` does;
//! - every other regular file and symlink unless the working tree's own `.gitignore` files
//!   ignore it (git's rules: deeper files win, `!` re-includes, nothing below an ignored
//!   directory comes back). `.git/info/exclude`, `core.excludesFile` and any config are
//!   never read: they live in the agent's `.git` or the host's home;
//! - submodules (gitlinks) of the base are kept as the base has them: a submodule's pointer
//!   lives in its `.git`, which is never read.
//!
//! Refused (the attempt fails with the path and the reason): FIFOs, sockets and devices;
//! a nested repository (a `.git` below the top, which git would record as a submodule); a
//! path component spelt like `.git`; a name that is not UTF-8; a new or changed symlink
//! whose target leaves the repository.

use super::{io_err, WorkspaceError};
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What the base commit (and a follow-up's merged parents) track: blob paths with their
/// `(mode, oid)` in the base, directories that hold tracked paths, and gitlinks.
#[derive(Debug, Default)]
pub(crate) struct Tracked {
    /// Path -> (octal mode, oid) in the base commit; gitlinks excluded.
    pub base: HashMap<String, (String, String)>,
    /// Paths tracked by a merged parent only (ignored or not, they are taken).
    pub also: HashSet<String>,
    /// Directories holding a tracked path (walked even when ignored).
    pub dirs: HashSet<String>,
    /// Gitlink paths of the base: kept as they are, never walked.
    pub gitlinks: HashSet<String>,
}

impl Tracked {
    /// Adds one `ls-tree -r` entry; `in_base` is false for a merged parent's.
    pub(crate) fn add(&mut self, mode: &str, oid: &str, path: &str, in_base: bool) {
        let mut dir = path;
        while let Some(i) = dir.rfind('/') {
            dir = &dir[..i];
            if !self.dirs.insert(dir.to_string()) {
                break;
            }
        }
        match (mode, in_base) {
            ("160000", true) => {
                self.gitlinks.insert(path.to_string());
            }
            ("160000", false) => {}
            (_, true) => {
                self.base
                    .insert(path.to_string(), (mode.to_string(), oid.to_string()));
            }
            (_, false) => {
                self.also.insert(path.to_string());
            }
        }
    }

    fn is_tracked(&self, path: &str) -> bool {
        self.base.contains_key(path) || self.also.contains(path)
    }
}

/// One file or symlink taken from the working tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Taken {
    /// Relative, `/`-separated.
    pub path: String,
    pub abs: PathBuf,
    /// `100644`, `100755` or `120000`.
    pub mode: &'static str,
}

impl Taken {
    pub(crate) fn is_link(&self) -> bool {
        self.mode == "120000"
    }
}

fn refuse(path: &Path, reason: impl Into<String>) -> WorkspaceError {
    WorkspaceError::InvalidInput {
        what: "workspace file",
        value: path.display().to_string(),
        reason: reason.into(),
    }
}

/// Walks `root` (the working tree) and returns what the landing commit is made of, sorted.
pub(crate) fn walk(root: &Path, tracked: &Tracked) -> Result<Vec<Taken>, WorkspaceError> {
    struct Frame {
        abs: PathBuf,
        rel: String,
        /// The directory itself is ignored: only tracked paths below it are taken.
        ignored: bool,
        rules: Vec<Arc<Gitignore>>,
    }
    let mut out = Vec::new();
    let mut stack = vec![Frame {
        abs: root.to_path_buf(),
        rel: String::new(),
        ignored: false,
        rules: Vec::new(),
    }];
    while let Some(frame) = stack.pop() {
        let mut rules = frame.rules.clone();
        if !frame.ignored {
            if let Some(g) = gitignore_of(&frame.abs)? {
                rules.push(Arc::new(g));
            }
        }
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&frame.abs).map_err(io_err("read", &frame.abs))? {
            let entry = entry.map_err(io_err("read", &frame.abs))?;
            names.push(entry);
        }
        for entry in names {
            let abs = entry.path();
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                return Err(refuse(
                    &abs,
                    "its name is not valid UTF-8; rename it (git paths here must be UTF-8)",
                ));
            };
            let rel = if frame.rel.is_empty() {
                name.to_string()
            } else {
                format!("{}/{name}", frame.rel)
            };
            let ft = entry.file_type().map_err(io_err("inspect", &abs))?;
            if name == ".git" && frame.rel.is_empty() {
                // The agent's repository: never read, whatever it holds.
                continue;
            }
            if name.eq_ignore_ascii_case(".git") {
                if ft.is_dir() || ft.is_file() {
                    return Err(refuse(
                        &abs,
                        format!(
                            "{} holds a nested repository, which git would record as a submodule; remove its .git (or the directory) from the working tree",
                            if frame.rel.is_empty() { "." } else { frame.rel.as_str() }
                        ),
                    ));
                }
                return Err(refuse(&abs, "a path named like .git cannot be committed"));
            }
            if tracked.gitlinks.contains(&rel) {
                continue;
            }
            let is_tracked = tracked.is_tracked(&rel);
            let ignored = frame.ignored || (!is_tracked && is_ignored(&rules, &abs, ft.is_dir()));
            if ft.is_dir() {
                if ignored && !tracked.dirs.contains(&rel) {
                    continue;
                }
                stack.push(Frame {
                    abs,
                    rel,
                    ignored,
                    rules: rules.clone(),
                });
                continue;
            }
            if ignored && !is_tracked {
                continue;
            }
            let mode = if ft.is_symlink() {
                "120000"
            } else if ft.is_file() {
                let meta = entry.metadata().map_err(io_err("inspect", &abs))?;
                if meta.permissions().mode() & 0o100 != 0 {
                    "100755"
                } else {
                    "100644"
                }
            } else {
                let kind = if ft.is_fifo() {
                    "FIFO"
                } else if ft.is_socket() {
                    "socket"
                } else if ft.is_char_device() {
                    "character device"
                } else {
                    "block device"
                };
                return Err(refuse(
                    &abs,
                    format!("it is a {kind}, not a regular file; remove it from the working tree"),
                ));
            };
            out.push(Taken {
                path: rel,
                abs,
                mode,
            });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

fn is_ignored(rules: &[Arc<Gitignore>], abs: &Path, is_dir: bool) -> bool {
    // The deepest `.gitignore` with an opinion decides (git's precedence).
    for g in rules.iter().rev() {
        let m = g.matched(abs, is_dir);
        if m.is_ignore() {
            return true;
        }
        if m.is_whitelist() {
            return false;
        }
    }
    false
}

/// The rules of `dir/.gitignore` when it is a regular file (a symlinked one is not read,
/// as git does not since 2.32).
fn gitignore_of(dir: &Path) -> Result<Option<Gitignore>, WorkspaceError> {
    let path = dir.join(".gitignore");
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_file() => {}
        _ => return Ok(None),
    }
    let bytes = read_regular(&path)?;
    let text = String::from_utf8_lossy(&bytes);
    let mut builder = GitignoreBuilder::new(dir);
    for line in text.lines() {
        // A line git would not parse either is skipped, never an error of the attempt.
        let _ = builder.add_line(None, line);
    }
    Ok(builder.build().ok())
}

/// Opens `path` without following a symlink and without blocking on a FIFO, and refuses
/// anything but a regular file.
pub(crate) fn open_regular(path: &Path) -> Result<(std::fs::File, u64), WorkspaceError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(io_err("open", path))?;
    let meta = file.metadata().map_err(io_err("inspect", path))?;
    if !meta.is_file() {
        return Err(refuse(path, "it is not a regular file"));
    }
    Ok((file, meta.len()))
}

/// The content of a regular file (see `open_regular`).
pub(crate) fn read_regular(path: &Path) -> Result<Vec<u8>, WorkspaceError> {
    let (mut file, len) = open_regular(path)?;
    let mut buf = Vec::with_capacity(len as usize);
    file.read_to_end(&mut buf).map_err(io_err("read", path))?;
    Ok(buf)
}

/// The bytes git stores for `t`: the file's content, or the link's target.
pub(crate) fn content(t: &Taken) -> Result<Vec<u8>, WorkspaceError> {
    if t.is_link() {
        let target = std::fs::read_link(&t.abs).map_err(io_err("read link", &t.abs))?;
        Ok(target.into_os_string().into_encoded_bytes())
    } else {
        read_regular(&t.abs)
    }
}

/// The object id git gives `bytes` as a blob, in the repository's format.
pub(crate) fn blob_id(bytes: &[u8], sha256: bool) -> String {
    if sha256 {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        h.update(format!("blob {}\0", bytes.len()).as_bytes());
        h.update(bytes);
        hex::encode(h.finalize())
    } else {
        git2::Oid::hash_object(git2::ObjectType::Blob, bytes)
            .map(|o| o.to_string())
            .unwrap_or_default()
    }
}

/// Refuses a symlink at `path` (relative) whose `target` leaves the repository: absolute,
/// or climbing above the top with `..`.
pub(crate) fn check_link(abs: &Path, path: &str, target: &[u8]) -> Result<(), WorkspaceError> {
    let target = String::from_utf8_lossy(target);
    let escape = || {
        refuse(
            abs,
            format!("it is a symlink to {target:?}, outside the repository; make it relative and inside, or copy the file"),
        )
    };
    if target.starts_with('/') {
        return Err(escape());
    }
    let mut depth: i64 = path.matches('/').count() as i64;
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return Err(escape());
                }
            }
            _ => depth += 1,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracked(paths: &[&str]) -> Tracked {
        let mut t = Tracked::default();
        for p in paths {
            t.add("100644", "0000", p, true);
        }
        t
    }

    fn names(root: &Path, t: &Tracked) -> Vec<String> {
        walk(root, t)
            .expect("walk")
            .into_iter()
            .map(|e| e.path)
            .collect()
    }

    #[test]
    fn gitignore_rules_apply_to_untracked_files_only() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        for (p, text) in [
            (".gitignore", "target/\n*.log\n!keep.log\n"),
            ("src/a.rs", "a"),
            ("src/.gitignore", "gen.rs\n"),
            ("src/gen.rs", "g"),
            ("target/debug/big", "x"),
            ("target/tracked.txt", "t"),
            ("x.log", "l"),
            ("keep.log", "k"),
            (".git/config", "[core]"),
            (".git/index", "garbage"),
        ] {
            let p = r.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        let t = tracked(&["target/tracked.txt", "src/a.rs"]);
        assert_eq!(
            names(r, &t),
            [
                ".gitignore",
                "keep.log",
                "src/.gitignore",
                "src/a.rs",
                "target/tracked.txt"
            ]
        );
    }

    #[test]
    fn special_files_nested_repositories_and_dotgit_names_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        std::fs::create_dir_all(r.join("vendor/lib/.git")).unwrap();
        let err = walk(r, &Tracked::default()).unwrap_err().to_string();
        assert!(
            err.contains("vendor/lib holds a nested repository"),
            "{err}"
        );
        std::fs::remove_dir_all(r.join("vendor")).unwrap();

        std::fs::write(r.join(".GIT"), "x").unwrap();
        assert!(walk(r, &Tracked::default()).is_err());
        std::fs::remove_file(r.join(".GIT")).unwrap();

        let fifo = r.join("pipe");
        let c = std::ffi::CString::new(fifo.display().to_string()).unwrap();
        // SAFETY: mkfifo(3) on a NUL-terminated path in our temp dir.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = walk(r, &Tracked::default()).unwrap_err().to_string();
        assert!(err.contains("is a FIFO"), "{err}");
        // Ignored, it is never opened: harmless.
        std::fs::write(r.join(".gitignore"), "pipe\n").unwrap();
        assert_eq!(names(r, &Tracked::default()), [".gitignore"]);
    }

    #[test]
    fn links_are_taken_as_links_and_must_stay_inside() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        std::fs::create_dir_all(r.join("a")).unwrap();
        std::os::unix::fs::symlink("/etc", r.join("a/etc")).unwrap();
        let all = walk(r, &Tracked::default()).unwrap();
        assert_eq!(all.len(), 1);
        assert!(all[0].is_link());
        assert!(check_link(&all[0].abs, "a/etc", b"/etc").is_err());
        assert!(check_link(&all[0].abs, "a/up", b"../../x").is_err());
        assert!(check_link(&all[0].abs, "a/ok", b"../b/c").is_ok());
        assert!(check_link(&all[0].abs, "a/ok", b"./x/../y").is_ok());
    }

    #[test]
    fn blob_ids_match_git() {
        // `printf 'hello\n' | git hash-object --stdin`
        assert_eq!(
            blob_id(b"hello\n", false),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
        // `git hash-object --object-format=sha256` of the same
        assert_eq!(
            blob_id(b"hello\n", true),
            "2cf8d83d9ee29543b34a87727421fdecb7e3f3a183d337639025de576db9ebb4"
        );
    }
}
