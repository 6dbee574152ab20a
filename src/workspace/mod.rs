//! Workspace manager (spec §6): one bare mirror per repository, one clone per attempt at
//! `{workspace_root}/{task_key}/{attempt}/` (borrowing the mirror's objects read-only, or fully
//! independent with `CloneMode::Dissociate`), the attempt branch, commit, push and safe cleanup.
//!
//! Owns every git operation on host repositories. Must not know about tasks' states, the
//! store, Docker or GitHub's API: callers pass plain values and record what comes back.
//! Everything is synchronous (the orchestrator calls it from `spawn_blocking`).
//!
//! Network operations (mirror clone/fetch, per-attempt clone, push) use the git CLI: libgit2 is
//! several times slower and has no `--reference`/`--dissociate` (NOTES-crates.md). Reading a
//! file at the base ref uses git2 on our own mirror.
//!
//! Trust (issue 23, landing by construction): after an agent ran, its workspace is untrusted
//! data and only its working tree's files are input. Nothing in the agent's `.git` is read
//! (refs, objects, packs, index, config, hooks, replace refs, commit-graph, alternates): the
//! landing commit is made from the files (`worktree.rs`) in the orchestrator's own
//! repository beside the workspace (`own.rs`), and the gates, the clean checkout for the
//! checks, the push and the read-back all run there. Every git command runs without hooks,
//! fsmonitor, credential helpers, replace objects, system or global config (`git.rs`); push
//! goes to the upstream recorded at prepare time, never to a URL read from the workspace.

mod cleanup;
mod clone;
mod commit;
pub mod diff;
pub mod disk;
mod git;
mod handoff;
pub mod key;
pub mod marker;
mod merge;
mod mirror;
mod own;
pub mod probe;
mod push;
mod rebase;
pub mod repo_read;
mod seed;
mod shared;
mod snapshot;
mod stale_locks;
mod upstream;
mod worktree;

pub use cleanup::disk_usage;
pub use commit::DEFAULT_MAX_CHANGED_FILES;
pub use handoff::Handoff;
pub use key::{branch_name, parse_owner, task_key};
pub use merge::BaseMerge;
pub use own::own_repo_path;
pub use rebase::{foreign_commits, BaseRebase};
pub use repo_read::RepoSnapshot;
pub use seed::seed_bare_repo;
pub use shared::MirrorGc;
pub use snapshot::TreeChange;

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Errors a caller can branch on. Messages name the value and, where there is one, the fix.
/// No variant ever carries a token: git output passes through `key::scrub` first.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkspaceError {
    #[error("invalid task id {id:?}: {reason}; task ids must be non-empty single-line text")]
    InvalidTaskId { id: String, reason: &'static str },
    #[error("invalid {what} {value:?}: {reason}")]
    InvalidInput {
        what: &'static str,
        value: String,
        reason: String,
    },
    #[error("workspace {} already exists: attempts never reuse a directory; use the next attempt number or remove it", path.display())]
    AlreadyExists { path: PathBuf },
    #[error("path {} resolves outside the workspace root {}; refusing to touch it", path.display(), root.display())]
    OutsideRoot { path: PathBuf, root: PathBuf },
    #[error("base ref {base_ref:?} not found in {repo}: name an existing branch, tag or commit")]
    BaseRefNotFound { repo: String, base_ref: String },
    #[error("push of {branch} to {remote} was rejected: {reason}")]
    PushRejected {
        branch: String,
        remote: String,
        reason: String,
    },
    #[error("git {op} failed ({}): {stderr}", exit_text(*code))]
    Git {
        op: String,
        code: Option<i32>,
        stderr: String,
    },
    #[error("the attempt adds, changes or deletes {count} files, more than verify.max_changed_files ({limit}); raise verify.max_changed_files in config.yaml or split the task")]
    TooManyChanges { count: usize, limit: usize },
    #[error("cannot run git: {reason}; install git (>= 2.32) and put it on PATH")]
    GitUnavailable { reason: String },
    #[error("reading {path} at {base_ref} in mirror {}: {reason}", mirror.display())]
    Read {
        mirror: PathBuf,
        base_ref: String,
        path: String,
        reason: String,
    },
    /// The filesystem of `path` is full (issue 24): nothing built on it is trusted.
    #[error("no room on the filesystem of {} ({} free): {what}; free space there", path.display(), free.map(disk::human).unwrap_or_else(|| "unknown".into()))]
    DiskFull {
        path: PathBuf,
        free: Option<u64>,
        what: String,
    },
    /// Tracked files are missing from a checkout with room on the disk.
    #[error("incomplete checkout in {}: {what}", path.display())]
    IncompleteCheckout { path: PathBuf, what: String },
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What `prepare` needs for one attempt.
#[derive(Debug, Clone)]
pub struct PrepareRequest {
    /// Upstream: an https URL, a `file://` URL or a local path (made absolute).
    pub repo: String,
    pub task_id: String,
    /// 1-based attempt number.
    pub attempt: u32,
    /// Branch, tag or commit to start from; `None` = the upstream's default branch.
    pub base_ref: Option<String>,
    /// Branch to create, usually `branch_name(prefix, &task_key(id)?, attempt)`.
    pub branch: String,
    /// Token for https upstreams (user `x-access-token`). Never written to disk.
    pub token: Option<String>,
    /// `(uid, gid)` to chown the workspace to; `None` keeps the daemon's.
    pub owner: Option<(u32, u32)>,
}

/// A prepared attempt clone. Serializable so a restarted daemon can resume verification.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Workspace {
    /// `{workspace_root}/{key}/{attempt}` (canonical).
    pub path: PathBuf,
    pub branch: String,
    /// The ref asked for, or the upstream's default branch name when none was.
    pub base_ref: String,
    /// Commit the branch was created at; diffs and the base config are taken against it.
    pub base_sha: String,
    /// The upstream as `origin` was set (absolute for local paths); push goes here.
    pub upstream: String,
    /// False when the mirror could not be created or fetched and the clone came straight from
    /// upstream; `mirror_note` says why.
    pub used_mirror: bool,
    pub mirror_note: Option<String>,
    /// The mirror's object directory this clone borrows from (its only alternates entry,
    /// canonical), or `None` for an independent clone. The agent container must see it
    /// read-only at this same path (`CloneMode::Shared`).
    #[serde(default)]
    pub mirror_objects: Option<PathBuf>,
    /// Further parents of the landing commit: the base commit merged in by a follow-up on a
    /// pull request (`merge_base`), so the landing commit is a merge.
    #[serde(default)]
    pub merge_parents: Vec<String>,
    /// The remote branch head this workspace replaces (`shepherd.conflicts: rebase`): the
    /// push is `--force-with-lease` to exactly this sha; `None` = a fast-forward push.
    #[serde(default)]
    pub lease: Option<String>,
}

/// How an attempt's clone gets its objects (config.yaml `git.clone_mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CloneMode {
    /// Borrow the mirror's objects through `objects/info/alternates`: no object copy, only
    /// the checkout and the branch; new objects go to the clone's own object directory.
    #[default]
    Shared,
    /// `git clone --reference MIRROR --dissociate` (spec §6): a fully independent copy.
    Dissociate,
}

/// Commit author (config.yaml `git.author_name` / `git.author_email`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Author {
    pub name: String,
    pub email: String,
}

/// Result of `commit_once`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitOutcome {
    /// Branch tip to push when the diff against the base is non-empty.
    pub sha: Option<String>,
    /// Whether a commit was made (false exactly when `empty`).
    pub created_commit: bool,
    /// Paths changed between `base_sha` and the landing commit, relative to the repository
    /// root; a rename lists both sides.
    pub changed_paths: Vec<String>,
    /// No difference from the base at all.
    pub empty: bool,
}

/// Owns the two roots; cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct WorkspaceManager {
    workspace_root: PathBuf,
    mirror_root: PathBuf,
    clone_mode: CloneMode,
    /// Path of the askpass script, written once under `mirror_root`.
    askpass: Mutex<Option<PathBuf>>,
}

impl WorkspaceManager {
    /// Both roots are created on first use.
    pub fn new(workspace_root: impl Into<PathBuf>, mirror_root: impl Into<PathBuf>) -> Self {
        WorkspaceManager {
            workspace_root: workspace_root.into(),
            mirror_root: mirror_root.into(),
            clone_mode: CloneMode::default(),
            askpass: Mutex::new(None),
        }
    }

    /// Sets how later `prepare` calls clone (default `CloneMode::Shared`).
    pub fn with_clone_mode(mut self, mode: CloneMode) -> Self {
        self.clone_mode = mode;
        self
    }

    pub fn clone_mode(&self) -> CloneMode {
        self.clone_mode
    }

    pub fn workspace_root(&self) -> &Path {
        &self.workspace_root
    }

    pub fn mirror_root(&self) -> &Path {
        &self.mirror_root
    }

    /// Where the mirror of `repo` lives (it may not exist yet).
    pub fn mirror_path(&self, repo: &str) -> Result<PathBuf, WorkspaceError> {
        let upstream = upstream::resolve_upstream(repo)?;
        Ok(self.mirror_root.join(key::mirror_dir_name(&upstream)))
    }

    fn askpass(&self) -> Result<PathBuf, WorkspaceError> {
        let mut guard = self.askpass.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = guard.as_ref() {
            return Ok(p.clone());
        }
        marker::ensure_root(&self.mirror_root)?;
        let p = git::ensure_askpass(&self.mirror_root)?;
        *guard = Some(p.clone());
        Ok(p)
    }
}

/// `exit 128`, or `killed by a signal` (never Rust's `Some(128)`).
fn exit_text(code: Option<i32>) -> String {
    match code {
        Some(c) => format!("exit {c}"),
        None => "killed by a signal".into(),
    }
}

fn create_dir_all(p: &Path) -> Result<(), WorkspaceError> {
    std::fs::create_dir_all(p).map_err(io_err("create directory", p))
}

fn io_err(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> WorkspaceError {
    let path = path.to_path_buf();
    move |source| {
        let at = path.clone();
        disk::explain(WorkspaceError::Io { op, path, source }, &at)
    }
}
