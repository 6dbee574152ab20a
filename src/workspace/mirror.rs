//! The bare mirror cache: one per upstream under `mirror_root`, created on first use, fetched
//! with prune before each attempt, guarded by a per-repo lock file.
//!
//! Locking: `flock` on `<mirror>.lock`. Creating, fetching and gc take it exclusive; cloning
//! from the mirror and reading a file take it shared, so a concurrent prune or auto-gc can never
//! pull objects from under a running clone (and gc never prunes while a workspace borrows the
//! mirror's objects: shared.rs), and two daemons sharing a home serialize on the
//! same file. Must not touch attempt workspaces.
//!
//! Not `git clone --mirror`: on GitHub that also copies every `refs/pull/*` ref (and the fork
//! objects behind them), which dwarfs the branches on busy repositories. The mirror fetches
//! `refs/heads/*` and `refs/tags/*` only, which is all an attempt can start from.

use super::git::Git;
use super::{io_err, WorkspaceError, WorkspaceManager};
use std::fs::File;
use std::path::{Path, PathBuf};

/// An open lock file; the lock is released when this is dropped (the fd closes).
pub(crate) struct MirrorLock {
    file: File,
    path: PathBuf,
}

impl MirrorLock {
    pub(crate) fn open(mirror: &Path) -> Result<MirrorLock, WorkspaceError> {
        let mut name = mirror.as_os_str().to_owned();
        name.push(".lock");
        let path = PathBuf::from(name);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io_err("open mirror lock", &path))?;
        Ok(MirrorLock { file, path })
    }

    pub(crate) fn exclusive(&self) -> Result<(), WorkspaceError> {
        self.file
            .lock()
            .map_err(io_err("lock (exclusive)", &self.path))
    }

    /// Converts to (or takes) a shared lock. flock converts non-atomically: another fetcher may
    /// run in between, which only adds objects, so the caller's base commit stays valid.
    pub(crate) fn shared(&self) -> Result<(), WorkspaceError> {
        self.file
            .lock_shared()
            .map_err(io_err("lock (shared)", &self.path))
    }
}

impl WorkspaceManager {
    /// Creates the mirror of `upstream` (already resolved) or fetches it, under an exclusive
    /// lock. Returns the mirror path and the lock, still held exclusive.
    pub(crate) fn sync_mirror(
        &self,
        upstream: &str,
        token: Option<&str>,
        fetch_existing: bool,
    ) -> Result<(PathBuf, MirrorLock, Result<(), WorkspaceError>), WorkspaceError> {
        super::marker::ensure_root(&self.mirror_root)?;
        let askpass = self.askpass()?;
        let mirror = self.mirror_root.join(super::key::mirror_dir_name(upstream));
        let lock = MirrorLock::open(&mirror)?;
        lock.exclusive()?;
        let result = if is_bare_repo(&mirror) {
            // Under the exclusive lock: a lock file in the mirror is a dead run's.
            super::stale_locks::clear(&mirror);
            if fetch_existing {
                let fetched = fetch(&mirror, upstream, &askpass, token);
                if fetched.is_ok() {
                    self.auto_gc(&mirror);
                }
                fetched
            } else {
                Ok(())
            }
        } else {
            create(&mirror, upstream, &askpass, token)
        };
        Ok((mirror, lock, result))
    }

    /// Content of `path` at `base_ref` (`None` = the mirror's HEAD) read from the mirror, so a
    /// file like `.polyphony.yaml` comes from the base and never from the agent's branch. Pass
    /// `Workspace::base_sha` to read exactly what the attempt started from. Creates the mirror
    /// if missing; does not fetch an existing one. `Ok(None)` when the file does not exist.
    pub fn read_at_base(
        &self,
        repo: &str,
        base_ref: Option<&str>,
        path: &str,
        token: Option<&str>,
    ) -> Result<Option<String>, WorkspaceError> {
        let upstream = super::upstream::resolve_upstream(repo)?;
        let mirror = self
            .mirror_root
            .join(super::key::mirror_dir_name(&upstream));
        // Readers of an existing mirror share the lock; only creating it needs exclusivity.
        let _lock = if is_bare_repo(&mirror) {
            let lock = MirrorLock::open(&mirror)?;
            lock.shared()?;
            lock
        } else {
            let (_, lock, created) = self.sync_mirror(&upstream, token, false)?;
            created?;
            lock.shared()?;
            lock
        };
        let spec = base_ref.unwrap_or("HEAD");
        let fail = |reason: String| WorkspaceError::Read {
            mirror: mirror.clone(),
            base_ref: spec.to_string(),
            path: path.to_string(),
            reason,
        };
        let rel = Path::new(path);
        if path.is_empty() || rel.is_absolute() || path.contains('\0') {
            return Err(fail(
                "the path must be relative to the repository root".into(),
            ));
        }
        let repo = git2::Repository::open_bare(&mirror).map_err(|e| fail(e.message().into()))?;
        let commit = repo
            .revparse_single(spec)
            .and_then(|o| o.peel_to_commit())
            .map_err(|_| WorkspaceError::BaseRefNotFound {
                repo: upstream.clone(),
                base_ref: spec.to_string(),
            })?;
        let tree = commit.tree().map_err(|e| fail(e.message().into()))?;
        let entry = match tree.get_path(rel) {
            Ok(e) => e,
            Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(None),
            Err(e) => return Err(fail(e.message().into())),
        };
        let object = entry
            .to_object(&repo)
            .map_err(|e| fail(e.message().into()))?;
        let blob = object
            .peel_to_blob()
            .map_err(|_| fail("it is not a regular file".into()))?;
        let text = std::str::from_utf8(blob.content())
            .map_err(|_| fail("it is not valid UTF-8".into()))?;
        Ok(Some(text.to_string()))
    }
}

fn is_bare_repo(dir: &Path) -> bool {
    dir.join("HEAD").is_file() && dir.join("objects").is_dir()
}

fn fetch(
    mirror: &Path,
    upstream: &str,
    askpass: &Path,
    token: Option<&str>,
) -> Result<(), WorkspaceError> {
    // No auto-gc here: it could prune objects a shared workspace borrows. `auto_gc` runs it
    // after the fetch, still under our exclusive lock, with the prune policy of shared.rs.
    Git::new("fetch (mirror)")
        .args(["-c", "gc.auto=0", "-c", "maintenance.auto=false"])
        .arg("--git-dir")
        .arg(mirror)
        .args(["fetch", "--prune", "--quiet", "origin"])
        .token(askpass, token, upstream)
        .run()?;
    Ok(())
}

fn create(
    mirror: &Path,
    upstream: &str,
    askpass: &Path,
    token: Option<&str>,
) -> Result<(), WorkspaceError> {
    // Built beside the final path and renamed, so a crash never leaves a half mirror that
    // looks valid. We hold the exclusive lock, so a leftover tmp is a dead run's.
    let mut tmp_name = mirror.as_os_str().to_owned();
    tmp_name.push(".tmp");
    let tmp = PathBuf::from(tmp_name);
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(io_err("remove stale mirror", &tmp))?;
    }
    let result = (|| {
        Git::new("init (mirror)")
            .args(["-c", "init.defaultBranch=main", "init", "--bare", "--quiet"])
            // Shared clones read the objects as the container's uid, whatever our umask.
            .arg("--shared=0644")
            .arg(&tmp)
            .run()?;
        let config = |args: &[&str]| {
            Git::new("config (mirror)")
                .arg("--git-dir")
                .arg(&tmp)
                .arg("config")
                .args(args)
                .run()
        };
        config(&["remote.origin.url", upstream])?;
        config(&["remote.origin.fetch", "+refs/heads/*:refs/heads/*"])?;
        config(&["--add", "remote.origin.fetch", "+refs/tags/*:refs/tags/*"])?;
        fetch(&tmp, upstream, askpass, token)?;
        // Point HEAD at the upstream's default branch (for read_at_base without a ref).
        let head = Git::new("ls-remote (mirror)")
            .arg("--git-dir")
            .arg(&tmp)
            .args(["ls-remote", "--symref", "origin", "HEAD"])
            .token(askpass, token, upstream)
            .stdout()?;
        if let Some(target) = head
            .lines()
            .find_map(|l| l.strip_prefix("ref: "))
            .and_then(|l| l.split('\t').next())
        {
            Git::new("symbolic-ref (mirror)")
                .arg("--git-dir")
                .arg(&tmp)
                .args(["symbolic-ref", "HEAD", target])
                .run()?;
        }
        std::fs::rename(&tmp, mirror).map_err(io_err("install mirror", mirror))
    })();
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    result
}
