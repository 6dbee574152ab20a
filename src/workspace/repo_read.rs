//! Reading a task's repository for routing's facts (spec §5.1 inputs): a plain directory
//! (walked on disk, `.git`, `target` and `node_modules` skipped) or a bare mirror at a ref
//! (`git ls-tree`, `cat-file`, `grep` through the hermetic runner in `git.rs`, argv only, no
//! shell). Only reads: which paths a task mentions and what a file counts for are
//! `routing::facts`' decisions, and `orchestrator::facts` puts the two together (this
//! module does not import `routing`: `config` uses `workspace`, `routing` uses `config`).

use std::path::{Path, PathBuf};

use super::git::Git;
use super::WorkspaceError;

/// Files larger than this are counted but not read (LOC 0, no keywords).
pub const MAX_FILE_BYTES: u64 = 2 * 1024 * 1024;

/// Where to look things up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepoSnapshot {
    /// A checked-out directory, read as it is on disk.
    Dir(PathBuf),
    /// A bare repository (mirror) at a ref.
    Git { git_dir: PathBuf, rev: String },
}

impl RepoSnapshot {
    /// A bare repository becomes `Git` at `rev` (default `HEAD`); anything else `Dir`.
    pub fn detect(path: &Path, rev: Option<&str>) -> RepoSnapshot {
        let bare = path.join("HEAD").is_file()
            && path.join("objects").is_dir()
            && path.join("refs").is_dir()
            && !path.join(".git").exists();
        if bare {
            RepoSnapshot::Git {
                git_dir: path.to_path_buf(),
                rev: rev.unwrap_or("HEAD").to_string(),
            }
        } else {
            RepoSnapshot::Dir(path.to_path_buf())
        }
    }

    /// The repository as a warning names it.
    pub fn describe(&self) -> String {
        match self {
            RepoSnapshot::Dir(d) => d.display().to_string(),
            RepoSnapshot::Git { git_dir, rev } => format!("{} at {rev}", git_dir.display()),
        }
    }

    /// Every file, repository-relative, `/`-separated, sorted.
    pub fn list_files(&self) -> Result<Vec<String>, String> {
        match self {
            RepoSnapshot::Dir(root) => {
                let mut out = Vec::new();
                walk(root, root, &mut out)?;
                out.sort();
                Ok(out)
            }
            RepoSnapshot::Git { git_dir, rev } => {
                let tree = format!("{rev}^{{tree}}");
                let out = git(git_dir, &["ls-tree", "-r", "-z", "--name-only", &tree])?;
                let mut files: Vec<String> = out
                    .split(|b| *b == 0)
                    .filter(|s| !s.is_empty())
                    .map(|s| String::from_utf8_lossy(s).into_owned())
                    .collect();
                files.sort();
                Ok(files)
            }
        }
    }

    /// Size and (when small enough) contents of a file.
    pub fn read(&self, path: &str) -> Result<(u64, Option<Vec<u8>>), String> {
        match self {
            RepoSnapshot::Dir(root) => {
                let p = root.join(path);
                let len = std::fs::metadata(&p)
                    .map_err(|e| format!("cannot stat {}: {e}", p.display()))?
                    .len();
                if len > MAX_FILE_BYTES {
                    return Ok((len, None));
                }
                let bytes =
                    std::fs::read(&p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
                Ok((len, Some(bytes)))
            }
            RepoSnapshot::Git { git_dir, rev } => {
                let object = format!("{rev}:{path}");
                let size = git(git_dir, &["cat-file", "-s", &object])?;
                let len: u64 = String::from_utf8_lossy(&size)
                    .trim()
                    .parse()
                    .map_err(|_| format!("git cat-file -s {object} printed no size"))?;
                if len > MAX_FILE_BYTES {
                    return Ok((len, None));
                }
                Ok((len, Some(git(git_dir, &["cat-file", "blob", &object])?)))
            }
        }
    }

    /// For each identifier, the files containing it as a whole word, sorted.
    pub fn references(
        &self,
        idents: &[String],
        all: &[String],
    ) -> Result<Vec<Vec<String>>, String> {
        let RepoSnapshot::Dir(root) = self else {
            return idents
                .iter()
                .map(|i| self.files_referencing(i, all))
                .collect();
        };
        let words = idents
            .iter()
            .map(|i| {
                regex::bytes::Regex::new(&format!(r"(?-u)\b{}\b", regex::escape(i)))
                    .map_err(|e| format!("identifier `{i}`: {e}"))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let mut out = vec![Vec::new(); idents.len()];
        if idents.is_empty() {
            return Ok(out);
        }
        // One read per file, every identifier tested against it.
        for f in all {
            let p = root.join(f);
            let Ok(meta) = std::fs::metadata(&p) else {
                continue;
            };
            if meta.len() > MAX_FILE_BYTES {
                continue;
            }
            let Ok(bytes) = std::fs::read(&p) else {
                continue;
            };
            if is_binary(&bytes) {
                continue;
            }
            for (word, files) in words.iter().zip(out.iter_mut()) {
                if word.is_match(&bytes) {
                    files.push(f.clone());
                }
            }
        }
        Ok(out)
    }

    /// Files containing `ident` as a whole word at the ref, sorted (git grep -w).
    fn files_referencing(&self, ident: &str, all: &[String]) -> Result<Vec<String>, String> {
        match self {
            RepoSnapshot::Dir(_) => self
                .references(&[ident.to_string()], all)
                .map(|mut v| v.pop().unwrap_or_default()),
            RepoSnapshot::Git { git_dir, rev } => {
                // Exit status 1 means "no match", not failure.
                let (out, _, _) = Git::new("grep")
                    .arg("--git-dir")
                    .arg(git_dir)
                    .args(["grep", "-l", "-w", "-F", "-I", "-z", "-e", ident, rev, "--"])
                    .output()
                    .map_err(spawn_error)?;
                match out.status.code() {
                    Some(0) => {}
                    Some(1) => return Ok(Vec::new()),
                    _ => {
                        return Err(format!(
                            "git grep {ident} in {} failed: {}",
                            git_dir.display(),
                            String::from_utf8_lossy(&out.stderr).trim()
                        ))
                    }
                }
                let prefix = format!("{rev}:");
                let mut files: Vec<String> = out
                    .stdout
                    .split(|b| *b == 0)
                    .filter(|s| !s.is_empty())
                    .map(|s| {
                        let s = String::from_utf8_lossy(s);
                        s.strip_prefix(&prefix).unwrap_or(&s).to_string()
                    })
                    .collect();
                files.sort();
                Ok(files)
            }
        }
    }
}

/// Why a git child gave no output: git missing, or killed at its deadline.
fn spawn_error(e: WorkspaceError) -> String {
    match e {
        WorkspaceError::GitUnavailable { reason } => format!("cannot run git: {reason}"),
        other => other.to_string(),
    }
}

fn git(git_dir: &Path, args: &[&str]) -> Result<Vec<u8>, String> {
    let (out, _, _) = Git::new(args.first().copied().unwrap_or("git"))
        .arg("--git-dir")
        .arg(git_dir)
        .args(args)
        .output()
        .map_err(spawn_error)?;
    if !out.status.success() {
        return Err(format!(
            "git {} in {} failed: {}",
            args.join(" "),
            git_dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(out.stdout)
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) -> Result<(), String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
        let name = entry.file_name();
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            if matches!(name.to_str(), Some(".git" | "target" | "node_modules")) {
                continue;
            }
            walk(root, &path, out)?;
        } else if kind.is_file() {
            if let Ok(rel) = path.strip_prefix(root) {
                let parts: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                out.push(parts.join("/"));
            }
        }
    }
    Ok(())
}

/// Whether a file's first 8 KiB hold a NUL byte: binary files reference nothing. The same
/// rule as `routing::facts::is_binary`.
fn is_binary(bytes: &[u8]) -> bool {
    bytes.iter().take(8192).any(|b| *b == 0)
}
