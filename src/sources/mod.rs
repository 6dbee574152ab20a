//! Work sources (spec §2): where tasks come from and where their outcome is reported. The
//! pipeline's port to a tracker.
//!
//! A [`Source`] discovers tasks (`poll_each`), fetches one by reference (`fetch`), takes one
//! for an attempt (`claim_resuming`, which freezes the title and body the agent will be
//! told), reports how it ended (`land`: a landed branch or pull request; `block`: the
//! reasons it was blocked; `cancelled`: a person cancelled it, and its claim is released),
//! replies to review feedback on a follow-up's change request (`reply`), offers a blocked
//! task again (`offer_again`) and names the
//! credentials a push to its remotes needs (`push_token`). The orchestrator holds one per
//! [`SourceKind`] in [`Sources`] and asks the one of each task; it never names a tracker.
//!
//! Owns: the trait, its value types and its source-neutral errors; the implementations: the
//! local queue (`local`: tasks are rows of the store, claimed by the store and landed by the
//! push alone), GitHub (`github/`, which also holds the PR shepherd's GitHub calls) and an
//! in-memory tracker for tests (`memory`); intake of enqueued local tasks (`intake`).
//! A new tracker is one folder here (an implementation of [`Source`], its errors mapped to a
//! [`SourceFailure`]), a `SourceKind`, and its section of config.yaml.
//! Must not: decide state transitions (that is `domain::state`), write SQL (that is
//! `store/`), or dedupe tasks itself. Dedupe is the caller's job through the store: a source
//! only promises stable ids (`owner/repo#N` for GitHub), so `insert_task` can refuse an id it
//! already tracks.

pub mod github;
pub mod intake;
pub mod local;
pub mod memory;

use std::sync::Arc;

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

/// Where a reply to a piece of review feedback goes ([`Source::reply`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyPlace {
    /// In an inline comment's thread (the id of its first comment).
    Thread(u64),
    /// In the change request's conversation.
    Conversation,
}

/// What kind of failure a tracker's error is: what the callers branch on (the CLI's exit
/// code, the daemon's logging, the retry decision), whatever the tracker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceFailure {
    /// The source refused our credentials (401, 403): retrying with the same token fails
    /// the same way. The operator must fix it.
    RefusedCredentials,
    /// Only the operator can fix it (no token, an unknown repository, a bad API URL).
    Config,
    /// Passes by itself: the tracker unreachable, a 5xx, a rate limit that resets later.
    Transient,
    Other,
}

/// A tracker's own error with its [`SourceFailure`]. Displays as the tracker's error (the
/// words are the tracker's); [`SourceError::tracker`] gets the typed error back.
#[derive(Debug)]
pub struct TrackerError {
    pub failure: SourceFailure,
    error: Box<dyn std::error::Error + Send + Sync + 'static>,
}

impl TrackerError {
    pub fn new(
        failure: SourceFailure,
        error: impl std::error::Error + Send + Sync + 'static,
    ) -> TrackerError {
        TrackerError {
            failure,
            error: Box::new(error),
        }
    }
}

impl std::fmt::Display for TrackerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for TrackerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

/// Failure of a source operation.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The tracker failed (GitHub's `GithubError`, …).
    #[error(transparent)]
    Tracker(TrackerError),
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
    fn failure(&self) -> SourceFailure {
        match self {
            SourceError::Tracker(e) => e.failure,
            SourceError::WrongTask { .. } | SourceError::Other(_) => SourceFailure::Other,
        }
    }

    /// The tracker's own error, when it is an `E` (tests, and the tracker's own code).
    pub fn tracker<E: std::error::Error + 'static>(&self) -> Option<&E> {
        match self {
            SourceError::Tracker(e) => e.error.downcast_ref::<E>(),
            _ => None,
        }
    }

    /// `true` for failures only the operator can fix (bad token, unknown repository): the CLI
    /// exits 2 on these, the daemon logs them and keeps running.
    pub fn is_config_error(&self) -> bool {
        matches!(
            self.failure(),
            SourceFailure::Config | SourceFailure::RefusedCredentials
        )
    }

    /// `true` when the source refused our credentials (401, 403): retrying with the same
    /// token fails the same way.
    pub fn refused_credentials(&self) -> bool {
        self.failure() == SourceFailure::RefusedCredentials
    }

    /// `true` for failures that pass by themselves: the source unreachable, a 5xx, a rate
    /// limit that resets later.
    pub fn is_transient(&self) -> bool {
        self.failure() == SourceFailure::Transient
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

/// What one poll found: the tasks of every place that answered, and an error for each
/// place (a repository, a project) that did not.
#[derive(Debug, Default)]
pub struct Polled {
    pub tasks: Vec<Task>,
    pub errors: Vec<(String, SourceError)>,
    /// How many places were asked.
    pub places: usize,
}

/// A place tasks come from (spec §2): the pipeline's port to a tracker. Implementations
/// are cheap to share (`Arc<dyn Source>`). Every write is idempotent: a repeated call (after
/// a restart) finds what the first one made and makes nothing new.
#[async_trait]
pub trait Source: Send + Sync {
    fn kind(&self) -> SourceKind;

    /// The source as messages name it ("GitHub").
    fn name(&self) -> &'static str;

    /// Whether the source keeps a record of its own that claims and reports update (labels,
    /// comments, pull requests). `false` for the local queue, whose only record is the store:
    /// the pipeline then records no claim or block intent for its tasks.
    fn reports_back(&self) -> bool;

    /// Tasks currently offered, in state DISCOVERED, with stable ids, from every place this
    /// source reads. Partial: a place that failed does not hide the others' tasks. Returns
    /// every offered task, tracked or not: the caller dedupes through the store.
    async fn poll_each(&self) -> Polled;

    /// [`Source::poll_each`], failing only when nothing could be polled or on a config
    /// error (bad token, unknown repository) the operator must see; other failures of one
    /// place are logged.
    async fn poll(&self) -> Result<Vec<Task>, SourceError> {
        let polled = self.poll_each().await;
        let all_failed = !polled.errors.is_empty() && polled.errors.len() == polled.places;
        let mut first = None;
        for (place, error) in polled.errors {
            if error.is_config_error() || all_failed {
                first.get_or_insert(error);
            } else {
                tracing::warn!(source = self.name(), %place, %error, "poll failed for one place");
            }
        }
        match first {
            Some(error) => Err(error),
            None => Ok(polled.tasks),
        }
    }

    /// One task by its reference at the source (`owner/repo#N`), DISCOVERED, whatever its
    /// labels (`polyphony spawn`).
    async fn fetch(&self, reference: &str) -> Result<Task, SourceError>;

    /// Take `task` for one attempt. Idempotent: claiming the same attempt again changes
    /// nothing at the source and returns the same frozen title and body. `resuming`: the
    /// store says this home began this claim before a kill, so our own first marker proves
    /// ownership and the claim is finished rather than released.
    async fn claim_resuming(
        &self,
        task: &Task,
        info: &ClaimInfo,
        resuming: bool,
    ) -> Result<ClaimedTask, ClaimError>;

    /// [`Source::claim_resuming`] for a claim not begun before.
    async fn claim(&self, task: &Task, info: &ClaimInfo) -> Result<ClaimedTask, ClaimError> {
        self.claim_resuming(task, info, false).await
    }

    /// Report a verified, pushed branch (open or find the pull request, comment once).
    async fn land(&self, task: &Task, landed: &Landed) -> Result<Reported, SourceError>;

    /// Report the reasons a task is blocked (comment once, label it blocked).
    async fn block(&self, task: &Task, blocked: &Blocked) -> Result<Reported, SourceError>;

    /// Tell the source how the task ended ([`Source::land`] or [`Source::block`]).
    async fn report(&self, task: &Task, outcome: &Outcome) -> Result<Reported, SourceError> {
        match outcome {
            Outcome::Landed(landed) => self.land(task, landed).await,
            Outcome::Blocked(blocked) => self.block(task, blocked).await,
        }
    }

    /// Tell the source a person cancelled the task (`reason`, e.g. `cancelled by alice
    /// (cli)`) and release its claim, so no one takes it for running (issue 29). Safe to
    /// repeat: a repeated call finds what the first one made.
    async fn cancelled(&self, task: &Task, reason: &str) -> Result<Reported, SourceError>;

    /// Reply once to a piece of review feedback, in `place`, on the change request a
    /// follow-up task works on (its `source_ref`: on GitHub the pull request `owner/repo#N`);
    /// a reply carrying `marker` already there is found, not posted again. The reply's id.
    /// A source with no change requests refuses ([`SourceError::WrongTask`]).
    async fn reply(
        &self,
        task: &Task,
        place: ReplyPlace,
        marker: &str,
        body: &str,
    ) -> Result<u64, SourceError>;

    /// Offer a BLOCKED task again (`polyphony retry`), as a person re-labelling it would.
    /// Safe to repeat.
    async fn offer_again(&self, task: &Task) -> Result<(), SourceError>;

    /// The credential a git push to this source's remotes needs, if any (also scrubbed from
    /// everything an attempt stores).
    fn push_token(&self) -> Option<&str>;
}

/// The sources of one home, one per [`SourceKind`], as the orchestrator holds them.
#[derive(Clone)]
pub struct Sources {
    sources: Vec<Arc<dyn Source>>,
    /// What to say for a kind with no source (how to configure it).
    missing: Arc<dyn Fn(SourceKind) -> anyhow::Error + Send + Sync>,
    /// Credentials every attempt scrubs, whether or not their source could be built, by
    /// the name a refusal gives them ("the GitHub token").
    secrets: Vec<(String, String)>,
}

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kinds: Vec<SourceKind> = self.sources.iter().map(|s| s.kind()).collect();
        f.debug_struct("Sources")
            .field("kinds", &kinds)
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

impl Sources {
    /// Only the local queue; other kinds are refused with `missing(kind)`.
    pub fn new(missing: impl Fn(SourceKind) -> anyhow::Error + Send + Sync + 'static) -> Sources {
        Sources {
            sources: vec![Arc::new(local::LocalQueue)],
            missing: Arc::new(missing),
            secrets: Vec::new(),
        }
    }

    /// `source` serves its kind from now on (replacing any other of that kind).
    pub fn with(mut self, source: Arc<dyn Source>) -> Sources {
        self.sources.retain(|s| s.kind() != source.kind());
        if let Some(token) = source.push_token() {
            self.add_secret(format!("the {} token", source.name()), token.to_string());
        }
        self.sources.push(source);
        self
    }

    /// A credential to scrub from every attempt, and the name a refusal gives it.
    pub fn add_secret(&mut self, name: String, secret: String) {
        if !secret.is_empty() && !self.secrets.iter().any(|(_, s)| *s == secret) {
            self.secrets.push((name, secret));
        }
    }

    /// The source of `kind`, or why there is none (how to configure it).
    pub fn get(&self, kind: SourceKind) -> anyhow::Result<&dyn Source> {
        self.sources
            .iter()
            .find(|s| s.kind() == kind)
            .map(|s| s.as_ref())
            .ok_or_else(|| (self.missing)(kind))
    }

    /// The source `task` came from.
    pub fn of(&self, task: &Task) -> anyhow::Result<&dyn Source> {
        self.get(task.source)
    }

    /// Every configured source.
    pub fn all(&self) -> impl Iterator<Item = &Arc<dyn Source>> {
        self.sources.iter()
    }

    /// The credentials every attempt scrubs: (name, value).
    pub fn secrets(&self) -> &[(String, String)] {
        &self.secrets
    }
}

/// Looks up a host environment variable (injectable for tests).
pub type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The sources of a home: the local queue, and GitHub when it is configured (repos to poll)
/// or a token is available; the GitHub token is scrubbed from every attempt either way.
/// Also the GitHub source itself, for the PR shepherd (GitHub's alone).
pub fn for_home(
    config: &crate::config::Config,
    env: EnvLookup,
) -> anyhow::Result<(Sources, Option<Arc<github::GithubSource>>)> {
    let (github, token) = github::from_config(config, &*env)?;
    let github = github.map(Arc::new);
    let var = github::token_var(config);
    let mut sources = Sources::new(move |kind| match kind {
        SourceKind::Github => github::not_configured(var.as_deref(), &*env),
        SourceKind::Local => anyhow::anyhow!("the local queue is always there"),
    });
    if let Some(token) = &token {
        sources.add_secret("the GitHub token".into(), token.secret().to_string());
    }
    if let Some(source) = &github {
        sources = sources.with(source.clone());
    }
    Ok((sources, github))
}

/// The sources of a home for a verb that runs no attempt (`retry`, the API's retry): GitHub
/// when a client can be built from the configuration and the process environment, else its
/// tasks are refused with why. Build it inside the async runtime (the client needs its
/// reactor from its construction on).
pub fn for_verb(config: &crate::config::Config) -> Sources {
    match github::source_from_env(config) {
        Ok(source) => Sources::new(|_| anyhow::anyhow!("no such source")).with(Arc::new(source)),
        Err(e) => {
            let why = format!("{e:#}");
            Sources::new(move |_| anyhow::anyhow!("{why}"))
        }
    }
}
