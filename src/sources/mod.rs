//! Work sources (spec §2): where tasks come from and where their outcome is reported.
//!
//! A [`Source`] discovers tasks (`poll`), takes one for an attempt (`claim`, which freezes
//! the title and body the agent will be told) and reports how it ended (`report`: a landed
//! branch or pull request, or the reasons it was blocked).
//!
//! Owns: the trait, its value types and errors; the GitHub implementation (`github/`);
//! intake of enqueued local tasks (`intake`). The local queue has no `Source` impl: its
//! tasks are rows of the store, claimed by the store and landed by the push alone, so the
//! pipeline branches on `SourceKind` for the one remote side there is (docs/ARCHITECTURE.md
//! "Sources").
//! Must not: decide state transitions (that is `domain::state`), write SQL (that is
//! `store/`), or dedupe tasks itself. Dedupe is the caller's job through the store: a source
//! only promises stable ids (`owner/repo#N` for GitHub), so `insert_task` can refuse an id it
//! already tracks.

pub mod github;
pub mod intake;

use async_trait::async_trait;

use crate::domain::{CheckEvidence, SourceKind, Task, TokenUsage};

pub use github::GithubError;

/// Who takes the task and for which attempt (written into the claim comment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimInfo {
    pub agent: String,
    /// 1-based attempt number.
    pub attempt: u32,
    /// Who claims: a stable id of the claiming Polyphony home (`runtime::home_label`).
    /// Two daemons with separate homes on one repository decide ownership by it: the
    /// claimant of the earliest claim comment owns the issue.
    pub claimant: String,
}

/// What a claim froze: the caller stores `title` and `body` on the task, and the agent is
/// told exactly these, whatever later edits happen at the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedTask {
    pub task_id: String,
    pub title: String,
    pub body: String,
    /// Id of the claim comment at the source (GitHub issue comment id), when there is one.
    pub comment_id: Option<u64>,
}

/// How a task ended, as reported back to its source.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Landed(Landed),
    Blocked(Blocked),
}

/// A verified branch that was pushed.
#[derive(Debug, Clone, PartialEq)]
pub struct Landed {
    /// The pushed branch, e.g. `polyphony/owner-repo-42-a1`.
    pub branch: String,
    /// Branch the pull request targets; `None` means the task's `base_ref`, then the
    /// repository's default branch.
    pub base_ref: Option<String>,
    /// Pull request title; empty means the task title.
    pub title: String,
    /// One paragraph on what changed (the agent's final message, trimmed by the caller).
    pub summary: String,
    pub agent: String,
    pub attempt: u32,
    /// Verification checks, rendered as the evidence table (spec §10).
    pub evidence: Vec<CheckEvidence>,
    pub turns: u32,
    pub tokens: TokenUsage,
    pub cost_usd: Option<f64>,
}

/// A task that ran out of attempts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    /// The last attempts, oldest first.
    pub attempts: Vec<BlockedAttempt>,
}

/// Why one attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockedAttempt {
    pub attempt: u32,
    pub agent: String,
    /// One line, e.g. `verification failed: test exited 1`.
    pub reason: String,
}

/// What reporting did at the source: the caller records these (a restart must find them
/// again rather than post twice, and the sources look them up by marker before posting).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reported {
    pub pr_url: Option<String>,
    pub pr_number: Option<u64>,
    /// Ids of the comments posted or found (GitHub issue comment ids).
    pub comment_ids: Vec<u64>,
    /// `false` when everything was already in place (a repeated report).
    pub created: bool,
}

/// Failure of a source operation.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error(transparent)]
    Github(#[from] GithubError),
    /// The task does not belong to this source (wrong kind, malformed `source_ref`).
    #[error("task {task_id} cannot be handled by the {source_kind} source: {reason}")]
    WrongTask {
        task_id: String,
        source_kind: SourceKind,
        reason: String,
    },
    /// A failure inside another source implementation (the local queue's store).
    #[error("{0}")]
    Other(Box<dyn std::error::Error + Send + Sync>),
}

impl SourceError {
    /// `true` for failures only the operator can fix (bad token, unknown repository): the CLI
    /// exits 2 on these, the daemon logs them and keeps running.
    pub fn is_config_error(&self) -> bool {
        match self {
            SourceError::Github(e) => e.is_config_error(),
            SourceError::WrongTask { .. } | SourceError::Other(_) => false,
        }
    }

    /// `true` when the source refused our credentials (401, 403): retrying with the same
    /// token fails the same way.
    pub fn refused_credentials(&self) -> bool {
        matches!(
            self,
            SourceError::Github(GithubError::Unauthorized { .. } | GithubError::Forbidden { .. })
        )
    }

    /// `true` for failures that pass by themselves: the source unreachable, a 5xx, a rate
    /// limit that resets later.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            SourceError::Github(
                GithubError::Server { .. }
                    | GithubError::Transport { .. }
                    | GithubError::RateLimited { .. }
            )
        )
    }
}

/// Why a claim did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// The work is no longer offered (issue closed, ready label removed, queue entry gone):
    /// the caller drops the task rather than retrying.
    #[error("task {task_id} is no longer ready: {reason}")]
    NoLongerReady { task_id: String, reason: String },
    #[error(transparent)]
    Source(#[from] SourceError),
}

impl From<GithubError> for ClaimError {
    fn from(e: GithubError) -> Self {
        ClaimError::Source(SourceError::Github(e))
    }
}

/// A place tasks come from (spec §2). Implementations are cheap to share (`Arc<dyn Source>`).
#[async_trait]
pub trait Source: Send + Sync {
    fn kind(&self) -> SourceKind;

    /// Tasks currently offered, in state DISCOVERED, with stable ids. Returns every offered
    /// task, tracked or not: the caller dedupes through the store.
    async fn poll(&self) -> Result<Vec<Task>, SourceError>;

    /// Take `task` for one attempt. Idempotent: claiming the same attempt again changes
    /// nothing at the source and returns the same frozen title and body.
    async fn claim(&self, task: &Task, info: &ClaimInfo) -> Result<ClaimedTask, ClaimError>;

    /// Tell the source how the task ended. Idempotent: a repeated report (after a restart)
    /// finds what the first one created and posts nothing new.
    async fn report(&self, task: &Task, outcome: &Outcome) -> Result<Reported, SourceError>;
}
