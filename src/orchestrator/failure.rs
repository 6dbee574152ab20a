//! Whether a failed attempt is worth another try (issue 12 "Permanent failures are not
//! retried"; DESIGN.md "Attempts").
//!
//! A *transient* failure (network, a 5xx, a timeout, an engine hiccup, an agent crash,
//! checks that failed) may pass on the next attempt, so it gets the retry policy's backoff.
//! A *permanent* one (the image is missing, the repository or base ref is gone, the path is
//! not a git repository, the agent CLI is not logged in, a configuration error, a secret in
//! the diff, a full disk) fails the same way however often it runs: the task is BLOCKED at once with the
//! cause and the fix, and comes back with `polyphony retry` once a person fixed it.
//!
//! Typed (issue 30): every failure carries a [`FailureKind`], built by `From` impls from the
//! layer's own error (workspace, runtime, source, config, store); [`classify`] matches
//! kinds and never reads our own messages, so rewording one changes no decision. Text is
//! read only where it is foreign: git's stderr ([`FailureKind::of_git`]), the Docker
//! engine's message ([`FailureKind::of_engine`]) and the agent CLI's output
//! ([`FailureKind::of_agent_output`]), each table-tested on recorded samples. An unknown
//! text is transient: a wrong "transient" costs a few retries, a wrong "permanent" strands
//! a task that would have passed.

use crate::agents::{self, FailureKind as AgentKind};
use crate::domain::{AgentType, AttemptStatus};
use crate::runtime::RuntimeError;
use crate::sources::{ClaimError, SourceError};
use crate::store::StoreError;
use crate::workspace::WorkspaceError;

/// What failed, as the layer that failed typed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailureKind {
    /// Our own error with no bearing on a retry (a store write, a join, an unexpected
    /// state): transient.
    Other,
    /// A hiccup that passes by itself: the network, the engine unreachable, a 5xx.
    Transient,
    /// The image is missing from the engine.
    ImageMissing { image: String },
    /// The task's base branch, tag or commit is not in its repository.
    BaseRefGone,
    /// The task's repository is not a git repository.
    NotARepository,
    /// The task's repository is gone or unreadable.
    RepositoryGone,
    /// The task's source refused our credentials (401, 403).
    SourceRefused,
    /// The agent's CLI is not logged in, or the model API refused its key.
    AgentAuth,
    /// The agent profile names a model (or endpoint) the model API does not serve (a 404
    /// "model not found"): every attempt fails the same way until the profile is fixed.
    AgentModel,
    /// A configuration error: agent profile, identity, `.polyphony.yaml`, a host variable.
    Config,
    /// The agent's diff carries a known secret.
    SecretInDiff,
    /// A check's command is not in the check image: the shell said "not found" (exit
    /// 127) or "permission denied" (126) for the command itself (issue 29: three attempts
    /// and 35 s spent on `python3: not found`). No agent can fix the image.
    CheckCommandMissing { check: String, command: String },
    /// The filesystem holding the workspace (or a check's checkout) is full (ENOSPC, or a
    /// checkout that lost files on a disk under the floor; issue 24). Not the agent's doing,
    /// and the next attempt on the same disk fails the same way: permanent until a person
    /// frees space (the retention policy and `cleanup` free finished workspaces).
    DiskFull { path: String },
}

impl FailureKind {
    /// Reads git's stderr (foreign text: a fetch, clone, push or read).
    pub fn of_git(stderr: &str) -> FailureKind {
        let lower = stderr.to_ascii_lowercase();
        let has = |needle: &str| lower.contains(needle);
        if is_transient_text(&lower) {
            // A network hiccup can mention a missing thing on the way ("could not resolve
            // host ... repository"): it stays transient whatever else the text says.
            FailureKind::Transient
        } else if has("not a git repository") || has("does not appear to be a git repository") {
            FailureKind::NotARepository
        } else if has("repository not found")
            || (has("repository") && has("not found"))
            || has("does not exist")
            || has("no such file or directory")
        {
            FailureKind::RepositoryGone
        } else {
            FailureKind::Other
        }
    }

    /// Reads the Docker engine's message (foreign text).
    pub fn of_engine(message: &str) -> FailureKind {
        let lower = message.to_ascii_lowercase();
        if let Some(image) = no_such_image(message) {
            FailureKind::ImageMissing { image }
        } else if is_transient_text(&lower) {
            FailureKind::Transient
        } else {
            FailureKind::Other
        }
    }

    /// What the agent adapter read from the CLI's structured lines
    /// (`AgentOutcome::failure_kind`, issue 28) decides; without one, the CLI's own failure
    /// words in its descriptor, then the shared table of [`FailureKind::of_agent_output`].
    pub fn of_agent(read: Option<AgentKind>, agent_type: AgentType, output: &str) -> FailureKind {
        match read.or_else(|| agents::descriptor(agent_type).kind_of_text(output)) {
            Some(AgentKind::Auth) => FailureKind::AgentAuth,
            Some(AgentKind::Model) => FailureKind::AgentModel,
            Some(AgentKind::Transient) => FailureKind::Transient,
            Some(AgentKind::Quota) | None => FailureKind::of_agent_output(output),
        }
    }

    /// The kind of an agent's failed run, from the CLI alone: what its adapter read from the
    /// structured lines, else the error text the CLI reported ([`AgentOutcome::error`]).
    /// Never the attempt's reason, which is ours (`the workspace grew to … bytes`, `exit
    /// code …`) with the CLI's words inside.
    ///
    /// [`AgentOutcome::error`]: crate::agents::AgentOutcome::error
    pub fn of_agent_outcome(outcome: &agents::AgentOutcome, agent_type: AgentType) -> FailureKind {
        FailureKind::of_agent(
            outcome.failure_kind,
            agent_type,
            outcome.error.as_deref().unwrap_or(""),
        )
    }

    /// Reads the agent CLI's own output (its final error or result text). Only the agent's
    /// words speak for its login: a 401 elsewhere is another token's.
    pub fn of_agent_output(output: &str) -> FailureKind {
        let lower = output.to_ascii_lowercase();
        if is_transient_text(&lower) {
            FailureKind::Transient
        } else if is_auth_text(&lower) {
            FailureKind::AgentAuth
        } else {
            FailureKind::Other
        }
    }
}

impl From<&WorkspaceError> for FailureKind {
    fn from(e: &WorkspaceError) -> FailureKind {
        match e {
            WorkspaceError::BaseRefNotFound { .. } => FailureKind::BaseRefGone,
            WorkspaceError::Git { stderr, .. } => FailureKind::of_git(stderr),
            WorkspaceError::PushRejected { reason, .. } => FailureKind::of_git(reason),
            WorkspaceError::Read { reason, .. } => FailureKind::of_git(reason),
            // `resolve_upstream`: neither a URL nor an existing local path.
            WorkspaceError::InvalidInput {
                what: "repository", ..
            } => FailureKind::RepositoryGone,
            WorkspaceError::DiskFull { path, .. } => FailureKind::DiskFull {
                path: path.display().to_string(),
            },
            WorkspaceError::InvalidTaskId { .. }
            | WorkspaceError::IncompleteCheckout { .. }
            | WorkspaceError::InvalidInput { .. }
            | WorkspaceError::AlreadyExists { .. }
            | WorkspaceError::OutsideRoot { .. }
            | WorkspaceError::TooManyChanges { .. }
            | WorkspaceError::GitUnavailable { .. }
            | WorkspaceError::Io { .. } => FailureKind::Other,
        }
    }
}

impl From<&RuntimeError> for FailureKind {
    fn from(e: &RuntimeError) -> FailureKind {
        match e {
            RuntimeError::Connect(_) => FailureKind::Transient,
            RuntimeError::ImageMissing { image, .. } => FailureKind::ImageMissing {
                image: image.clone(),
            },
            RuntimeError::MissingHostEnv { .. } => FailureKind::Config,
            RuntimeError::Engine { message, .. } => FailureKind::of_engine(message),
            RuntimeError::PermissionDenied { .. }
            | RuntimeError::NotFound(_)
            | RuntimeError::NameTakenByOtherHome { .. }
            | RuntimeError::Build(_)
            | RuntimeError::Io(_) => FailureKind::Other,
        }
    }
}

impl From<&SourceError> for FailureKind {
    fn from(e: &SourceError) -> FailureKind {
        if e.refused_credentials() {
            FailureKind::SourceRefused
        } else if e.is_transient() {
            FailureKind::Transient
        } else {
            FailureKind::Other
        }
    }
}

impl From<&ClaimError> for FailureKind {
    fn from(e: &ClaimError) -> FailureKind {
        match e {
            ClaimError::Source(e) => e.into(),
            ClaimError::NoLongerReady { .. } => FailureKind::Other,
        }
    }
}

impl From<&StoreError> for FailureKind {
    fn from(_: &StoreError) -> FailureKind {
        // A busy or failing database passes or damages the home (`store::damaged`, which
        // the pipeline checks before anything else); it says nothing about the task.
        FailureKind::Other
    }
}

impl From<&crate::identity::IdentityError> for FailureKind {
    fn from(_: &crate::identity::IdentityError) -> FailureKind {
        FailureKind::Config
    }
}

impl From<&crate::routing::run_spec::RunSpecError> for FailureKind {
    fn from(_: &crate::routing::run_spec::RunSpecError) -> FailureKind {
        FailureKind::Config
    }
}

/// Why a permanent failure is permanent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    ImageMissing {
        image: String,
    },
    RepositoryGone,
    BaseRefGone,
    NotARepository,
    /// The agent's CLI is not logged in, or the model API refused its key (401).
    AgentAuth,
    /// The agent profile's model (or endpoint) is not served (404 model not found).
    AgentModel,
    Config,
    SecretInDiff,
    /// A check command the check image does not have.
    CheckCommandMissing {
        check: String,
    },
    /// The workspace's filesystem is full.
    DiskFull,
}

/// The verdict on one failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Class {
    Transient,
    Permanent { cause: Cause, fix: String },
}

impl Class {
    pub fn is_permanent(&self) -> bool {
        matches!(self, Class::Permanent { .. })
    }
}

/// Classifies one failure from its kind and the attempt's status. `agent` is the CLI that
/// ran (for the login fix), `repo` the task's repository (named in the fix).
pub fn classify(kind: &FailureKind, status: AttemptStatus, agent: &str, repo: &str) -> Class {
    // Not failures of the work: the retry policy has its own edges for them.
    if matches!(
        status,
        AttemptStatus::Quota
            | AttemptStatus::Cancelled
            | AttemptStatus::Budget
            | AttemptStatus::Timeout
            | AttemptStatus::Stalled
            | AttemptStatus::Succeeded
    ) {
        return Class::Transient;
    }
    let permanent = |cause: Cause, fix: String| Class::Permanent { cause, fix };
    match kind {
        FailureKind::Other | FailureKind::Transient => Class::Transient,
        FailureKind::ImageMissing { image } => permanent(
            Cause::ImageMissing {
                image: image.clone(),
            },
            format!(
                "build the image: `docker build -t {image} images/worker` (or `docker pull {image}`), \
                 or point `container.image` (or the agent's `image`) at an image the engine has; \
                 then `polyphony retry TASK`"
            ),
        ),
        FailureKind::BaseRefGone => permanent(
            Cause::BaseRefGone,
            format!(
                "push the base branch to {repo} or fix the task's `base_ref` (config.yaml \
                 `repos`); then `polyphony retry TASK`"
            ),
        ),
        FailureKind::NotARepository => permanent(
            Cause::NotARepository,
            format!("{repo} is not a git repository: enqueue the task again on a repository"),
        ),
        FailureKind::RepositoryGone => permanent(
            Cause::RepositoryGone,
            format!(
                "{repo} is gone or unreadable: restore it (or give the token access), then \
                 `polyphony retry TASK`"
            ),
        ),
        FailureKind::SourceRefused => permanent(
            Cause::Config,
            "GitHub refused the token: export a valid token with `repo` scope (see \
             `polyphony doctor`), then `polyphony retry TASK`"
                .to_string(),
        ),
        FailureKind::AgentAuth => permanent(
            Cause::AgentAuth,
            format!(
                "{}, check with `polyphony doctor`, then `polyphony retry TASK`",
                agents::descriptor(cli_of(agent)).login_hint
            ),
        ),
        FailureKind::AgentModel => permanent(
            Cause::AgentModel,
            format!(
                "agent profile `{}` (agents.yaml) names a model or endpoint the model API does \
                 not serve: fix its `model` (or the identity's base URL), check with `polyphony \
                 doctor`, then `polyphony retry TASK`",
                if agent.is_empty() { "?" } else { agent }
            ),
        ),
        FailureKind::SecretInDiff => permanent(
            Cause::SecretInDiff,
            "the agent's diff carries a secret: rotate it if it is real, remove it from the \
             repository or the issue text, then `polyphony retry TASK`"
                .to_string(),
        ),
        FailureKind::CheckCommandMissing { check, command } => permanent(
            Cause::CheckCommandMissing {
                check: check.clone(),
            },
            format!(
                "the check image cannot run `{command}` (verify.{check}): install it in the \
                 image `verify.image` names (the agent's image when unset), or change \
                 `verify.{check}` in config.yaml (or the base branch's .polyphony.yaml); \
                 then `polyphony retry TASK`"
            ),
        ),
        FailureKind::DiskFull { path } => permanent(
            Cause::DiskFull,
            format!(
                "the filesystem of {path} is full: free space there (`polyphony cleanup` \
                 removes finished workspaces) or move `workspace_root` (config.yaml) to a larger \
                 disk, then `polyphony retry TASK`"
            ),
        ),
        FailureKind::Config => permanent(
            Cause::Config,
            "fix the configuration the message names (`polyphony config check`), then \
             `polyphony retry TASK`"
                .to_string(),
        ),
    }
}

/// Whether a check's exit and output say its command is missing from the check image:
/// exit 127 (not found) or 126 (not executable) with the shell (or the engine) naming the
/// command's own program, not something the command ran (a test script of the repository
/// that calls a missing tool is the agent's to fix). Foreign text: the shell's words.
pub fn check_command_missing(command: &str, exit_code: Option<i64>, output: &str) -> bool {
    if !matches!(exit_code, Some(126 | 127)) {
        return false;
    }
    let Some(program) = command.split_whitespace().find(|w| !w.contains('=')) else {
        return false;
    };
    let lower = output.to_ascii_lowercase();
    let program = program.to_ascii_lowercase();
    [
        format!("{program}: not found"),
        format!("{program}: command not found"),
        format!("{program}: permission denied"),
        format!("\"{program}\": executable file not found"),
        format!("can't open '{program}'"),
    ]
    .iter()
    .any(|needle| lower.contains(needle.as_str()))
}

/// Texts of failures that pass by themselves: the network, the engine, a 5xx.
fn is_transient_text(lower: &str) -> bool {
    const NEEDLES: &[&str] = &[
        "could not resolve host",
        "connection refused",
        "connection reset",
        "connection timed out",
        "operation timed out",
        "network is unreachable",
        "temporary failure in name resolution",
        "cannot reach the docker engine",
        "internal server error",
        "bad gateway",
        "service unavailable",
        "gateway timeout",
        "overloaded",
        "early eof",
        "the remote end hung up",
    ];
    NEEDLES.iter().any(|n| lower.contains(n))
        || [" 500", " 502", " 503", " 504", " 529"]
            .iter()
            .any(|code| lower.contains(code))
}

/// The agent CLI's words for "not logged in" and the model API's 401.
fn is_auth_text(lower: &str) -> bool {
    const NEEDLES: &[&str] = &[
        "not logged in",
        "please run /login",
        "run `claude login`",
        "login required",
        "authentication_error",
        "authentication failed",
        "invalid api key",
        "invalid x-api-key",
        "invalid_api_key",
        "incorrect api key",
        "unauthorized",
        "oauth token has expired",
        "api key not valid",
    ];
    NEEDLES.iter().any(|n| lower.contains(n)) || has_code(lower, "401")
}

/// Whether `code` stands alone in `lower` (not part of a longer number or word).
fn has_code(lower: &str, code: &str) -> bool {
    lower.match_indices(code).any(|(i, _)| {
        let before = lower[..i].chars().next_back();
        let after = lower[i + code.len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_alphanumeric())
            && !after.is_some_and(|c| c.is_ascii_alphanumeric())
    })
}

/// The image Docker names in "No such image: X".
fn no_such_image(message: &str) -> Option<String> {
    let lower = message.to_ascii_lowercase();
    let start = lower.find("no such image: ")? + "no such image: ".len();
    let image: String = message[start..]
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != ')' && *c != ',')
        .collect();
    (!image.is_empty()).then_some(image)
}

/// The CLI an agent profile runs, by its name (profiles are usually named after it).
fn cli_of(agent: &str) -> AgentType {
    let lower = agent.to_ascii_lowercase();
    AgentType::ALL
        .into_iter()
        .find(|t| lower.contains(agents::descriptor(*t).command))
        .unwrap_or(AgentType::Claude)
}

/// The one-line reason a permanent failure is recorded and reported with.
pub fn permanent_reason(reason: &str, fix: &str) -> String {
    format!("{reason} — permanent, not retried; fix: {fix}")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use chrono::TimeZone;

    use super::*;
    use crate::orchestrator::retry::{self, FailedAttempt, Next, RetryPolicy};
    use AttemptStatus::*;

    /// Every kind, so a new one cannot skip [`each_kind_decides_the_retry`].
    fn every_kind() -> Vec<FailureKind> {
        let all = vec![
            FailureKind::Other,
            FailureKind::Transient,
            FailureKind::ImageMissing {
                image: "w:1".into(),
            },
            FailureKind::BaseRefGone,
            FailureKind::NotARepository,
            FailureKind::RepositoryGone,
            FailureKind::SourceRefused,
            FailureKind::AgentAuth,
            FailureKind::AgentModel,
            FailureKind::Config,
            FailureKind::SecretInDiff,
            FailureKind::CheckCommandMissing {
                check: "test".into(),
                command: "python3 -m pytest".into(),
            },
            FailureKind::DiskFull {
                path: "/srv/ws/k/1".into(),
            },
        ];
        for kind in &all {
            // Exhaustive: adding a kind fails to compile until it is listed above.
            match kind {
                FailureKind::Other
                | FailureKind::Transient
                | FailureKind::ImageMissing { .. }
                | FailureKind::BaseRefGone
                | FailureKind::NotARepository
                | FailureKind::RepositoryGone
                | FailureKind::SourceRefused
                | FailureKind::AgentAuth
                | FailureKind::AgentModel
                | FailureKind::Config
                | FailureKind::SecretInDiff
                | FailureKind::CheckCommandMissing { .. }
                | FailureKind::DiskFull { .. } => {}
            }
        }
        all
    }

    /// The retry decision for a first failure of `kind` with `status`, the message made up
    /// (the decision must not depend on it).
    fn decide(kind: &FailureKind, status: AttemptStatus, message: &str) -> Next {
        let class = classify(kind, status, "claude", "/srv/repo.git");
        let chain = vec!["claude".to_string()];
        let mut exhausted = BTreeSet::new();
        if retry::exhausts_agent(status, &class) {
            exhausted.insert("claude".to_string());
        }
        let now = chrono::Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
        retry::after_failure(
            &RetryPolicy::default(),
            &FailedAttempt {
                status,
                reason: message,
                class: &class,
                wait_until: None,
                cancel_means_retry: false,
                failures: 0,
                chain: &chain,
                exhausted: &exhausted,
            },
            now,
        )
    }

    #[test]
    fn each_kind_decides_the_retry() {
        for kind in every_kind() {
            let permanent = !matches!(kind, FailureKind::Other | FailureKind::Transient);
            for status in [Crash, Failed] {
                // Two wordings of the same failure: the decision is the kind's alone.
                let a = decide(&kind, status, "one wording");
                let b = decide(
                    &kind,
                    status,
                    "a wholly different text: 401 not found secret",
                );
                let strip = |n: Next| match n {
                    Next::Block { failures, .. } => format!("block {failures}"),
                    Next::Retry { failures, .. } => format!("retry {failures}"),
                    other => format!("{other:?}"),
                };
                assert_eq!(strip(a.clone()), strip(b), "{kind:?} {status}");
                match (&kind, a) {
                    // One agent in the chain: a refused login blocks at once.
                    (_, Next::Block { failures: 1, .. }) if permanent => {}
                    (_, Next::Retry { failures: 1, .. }) if !permanent => {}
                    (kind, next) => panic!("{kind:?} {status}: {next:?}"),
                }
            }
            // A timeout, stall, quota or cancel is never permanent, whatever the kind.
            for status in [Timeout, Stalled, Quota, Cancelled] {
                assert_eq!(
                    classify(&kind, status, "claude", "r"),
                    Class::Transient,
                    "{kind:?} {status}"
                );
            }
        }
    }

    #[test]
    fn a_refused_login_falls_back_to_the_next_agent() {
        let class = classify(&FailureKind::AgentAuth, Failed, "claude", "r");
        let chain = vec!["claude".to_string(), "codex".to_string()];
        let exhausted = BTreeSet::from(["claude".to_string()]);
        let now = chrono::Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
        let next = retry::after_failure(
            &RetryPolicy::default(),
            &FailedAttempt {
                status: Failed,
                reason: "x",
                class: &class,
                wait_until: None,
                cancel_means_retry: false,
                failures: 0,
                chain: &chain,
                exhausted: &exhausted,
            },
            now,
        );
        assert_eq!(
            next,
            Next::Fallback {
                next_agent: "codex".into(),
                failures: 0
            }
        );
    }

    fn check(read: fn(&str) -> FailureKind, cases: &[(&str, FailureKind)]) {
        for (text, want) in cases {
            assert_eq!(&read(text), want, "{text:?}");
        }
    }

    /// git's stderr as git 2.43 prints it (recorded on this machine and from GitHub).
    #[test]
    fn git_stderr() {
        use FailureKind::*;
        check(FailureKind::of_git, &[
            ("fatal: '/srv/gone.git' does not appear to be a git repository\nfatal: Could not read from remote repository.\n\nPlease make sure you have the correct access rights\nand the repository exists.", NotARepository),
            ("fatal: not a git repository (or any of the parent directories): .git", NotARepository),
            ("fatal: repository '/srv/gone.git' does not exist", RepositoryGone),
            ("remote: Repository not found.\nfatal: repository 'https://github.com/o/r.git/' not found", RepositoryGone),
            ("remote: Repository not found. (401 Unauthorized)", RepositoryGone),
            ("fatal: unable to access 'https://github.com/o/r.git/': Could not resolve host: github.com", Transient),
            ("fatal: unable to access 'https://github.com/o/r.git/': The requested URL returned error: 502", Transient),
            ("error: RPC failed; curl 56 Recv failure: Connection reset by peer\nfatal: early EOF", Transient),
            ("fatal: early EOF, repository not found in pack", Transient),
            ("fatal: the remote end hung up unexpectedly", Transient),
            ("ssh: connect to host github.com port 22: Connection timed out", Transient),
            (" ! [rejected]        b -> b (non-fast-forward)", Other),
            ("fatal: couldn't find remote ref refs/heads/nope", Other),
        ]);
    }

    /// The Docker engine's messages (bollard's `DockerResponseServerError` texts).
    #[test]
    fn engine_messages() {
        use FailureKind::*;
        check(FailureKind::of_engine, &[
            ("No such image: polyphony-missing:nope", ImageMissing { image: "polyphony-missing:nope".into() }),
            ("pull access denied for nope, repository does not exist or may require 'docker login' (No such image: nope:latest)", ImageMissing { image: "nope:latest".into() }),
            ("container is restarting, wait until the container is running", Other),
            ("Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running? (connection refused)", Transient),
            ("error from registry: 503 Service Unavailable", Transient),
        ]);
    }

    /// The agent CLIs' own failure lines: Claude Code's result text, Codex's error event,
    /// Kimi's and Gemini's messages.
    #[test]
    fn agent_output() {
        use FailureKind::*;
        check(FailureKind::of_agent_output, &[
            ("Invalid API key · Please run /login", AgentAuth),
            ("API Error: 401 {\"type\":\"error\",\"error\":{\"type\":\"authentication_error\",\"message\":\"invalid x-api-key\"}}", AgentAuth),
            ("OAuth token has expired. Please obtain a new token or refresh your existing token.", AgentAuth),
            ("unexpected status 401 Unauthorized: Missing bearer or basic authentication in header", AgentAuth),
            ("Not logged in", AgentAuth),
            ("API key not valid. Please pass a valid API key.", AgentAuth),
            ("API Error: 529 {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}", Transient),
            ("API Error: 500 {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"Internal server error\"}}", Transient),
            ("stream error: stream disconnected before completion: error sending request: connection reset", Transient),
            ("exit code 137", Other),
            ("error at line 4011: expected `;`", Other),
            ("", Other),
        ]);
    }

    #[test]
    fn typed_errors_make_kinds() {
        use crate::sources::github::GithubError;
        let kind = |e: &WorkspaceError| FailureKind::from(e);
        assert_eq!(
            kind(&WorkspaceError::BaseRefNotFound {
                repo: "r".into(),
                base_ref: "release".into()
            }),
            FailureKind::BaseRefGone
        );
        assert_eq!(
            kind(&WorkspaceError::Git {
                op: "fetch".into(),
                code: Some(128),
                stderr: "fatal: '/srv/x' does not appear to be a git repository".into()
            }),
            FailureKind::NotARepository
        );
        assert_eq!(
            kind(&WorkspaceError::InvalidInput {
                what: "repository",
                value: "/srv/gone".into(),
                reason: "not a URL and not an existing local path (No such file or directory (os error 2))".into()
            }),
            FailureKind::RepositoryGone
        );
        assert_eq!(
            kind(&WorkspaceError::InvalidInput {
                what: "branch",
                value: "-x".into(),
                reason: "repository not found".into()
            }),
            FailureKind::Other
        );
        let runtime = |e: &RuntimeError| FailureKind::from(e);
        assert_eq!(
            runtime(&RuntimeError::ImageMissing {
                image: "w:1".into(),
                hint: "build it".into()
            }),
            FailureKind::ImageMissing {
                image: "w:1".into()
            }
        );
        assert_eq!(
            runtime(&RuntimeError::MissingHostEnv {
                name: "K".into(),
                host_var: "K".into()
            }),
            FailureKind::Config
        );
        assert_eq!(
            runtime(&RuntimeError::Connect("refused".into())),
            FailureKind::Transient
        );
        assert_eq!(
            runtime(&RuntimeError::Engine {
                op: "create",
                message: "No such image: w:2".into()
            }),
            FailureKind::ImageMissing {
                image: "w:2".into()
            }
        );
        let source = |e: GithubError| FailureKind::from(&SourceError::from(e));
        assert_eq!(
            source(GithubError::Unauthorized {
                token_var: "GITHUB_TOKEN".into(),
                api_url: "https://api.github.com".into()
            }),
            FailureKind::SourceRefused
        );
        assert_eq!(
            source(GithubError::Server {
                what: "reading".into(),
                status: 502,
                attempts: 3
            }),
            FailureKind::Transient
        );
        assert_eq!(
            FailureKind::from(&StoreError::NotFound("t".into())),
            FailureKind::Other
        );
        assert_eq!(
            FailureKind::from(&crate::routing::run_spec::RunSpecError::Zero {
                field: "timeout".into()
            }),
            FailureKind::Config
        );
    }

    #[test]
    fn the_fix_names_the_image_and_the_login() {
        let image = FailureKind::ImageMissing {
            image: "worker:1".into(),
        };
        let Class::Permanent { fix, .. } = classify(&image, Crash, "claude", "r") else {
            panic!("permanent")
        };
        assert!(
            fix.starts_with("build the image: `docker build -t worker:1"),
            "{fix}"
        );
        let Class::Permanent { fix, .. } =
            classify(&FailureKind::AgentAuth, Failed, "codex-fast", "r")
        else {
            panic!("permanent")
        };
        assert!(fix.starts_with("run `codex login` on the host"), "{fix}");
        let Class::Permanent { cause, fix } =
            classify(&FailureKind::AgentModel, Failed, "codex-fast", "r")
        else {
            panic!("permanent")
        };
        assert_eq!(cause, Cause::AgentModel);
        assert!(fix.contains("agent profile `codex-fast`"), "{fix}");
    }

    #[test]
    fn the_adapter_reading_decides_the_agent_kind() {
        use crate::agents::FailureKind as K;
        // Structured readings win over any words.
        assert_eq!(
            FailureKind::of_agent(Some(K::Model), AgentType::Codex, "stopped"),
            FailureKind::AgentModel
        );
        assert_eq!(
            FailureKind::of_agent(Some(K::Auth), AgentType::Codex, "stopped"),
            FailureKind::AgentAuth
        );
        assert_eq!(
            FailureKind::of_agent(Some(K::Transient), AgentType::Claude, "not logged in"),
            FailureKind::Transient
        );
        // Without one, the CLI's own words (its descriptor), then the shared table.
        assert_eq!(
            FailureKind::of_agent(
                None,
                AgentType::Claude,
                "There's an issue with the selected model (x). It may not exist"
            ),
            FailureKind::AgentModel
        );
        assert_eq!(
            FailureKind::of_agent(None, AgentType::Kimi, "Error code: 401 - invalid"),
            FailureKind::AgentAuth
        );
        assert_eq!(
            FailureKind::of_agent(None, AgentType::Codex, "fixed the parser (exit code 1)"),
            FailureKind::Other
        );
    }

    /// The agent's kind is read from what the CLI said, never from our reason around it:
    /// a reason of ours naming a "401" (a size, an exit code) or "timed out" changes nothing.
    #[test]
    fn an_agent_failure_is_read_from_the_clis_words_alone() {
        use crate::agents::{AgentOutcome, FailureKind as K};
        let said = |error: Option<&str>, read: Option<K>| AgentOutcome {
            completed: true,
            error: error.map(str::to_string),
            failure_kind: read,
            ..AgentOutcome::default()
        };
        // Nothing from the CLI: whatever we wrote about the run, nothing permanent.
        assert_eq!(
            FailureKind::of_agent_outcome(&said(None, None), AgentType::Claude),
            FailureKind::Other
        );
        assert_eq!(
            FailureKind::of_agent_outcome(
                &said(Some("Invalid API key · Please run /login"), None),
                AgentType::Claude
            ),
            FailureKind::AgentAuth
        );
        assert_eq!(
            FailureKind::of_agent_outcome(
                &said(Some("stream disconnected"), Some(K::Model)),
                AgentType::Codex
            ),
            FailureKind::AgentModel
        );
        assert_eq!(
            FailureKind::of_agent_outcome(
                &said(Some("upstream connect error: 503"), None),
                AgentType::Gemini
            ),
            FailureKind::Transient
        );
    }

    #[test]
    fn codes_stand_alone() {
        assert!(has_code("status 401 unauthorized", "401"));
        assert!(has_code("(401)", "401"));
        assert!(!has_code("line 4011", "401"));
        assert!(!has_code("a401b", "401"));
    }

    /// Issue 29: the shells' own words for a check command missing from the check image
    /// (busybox sh, dash, bash, the engine), and what is not that.
    #[test]
    fn a_missing_check_command_is_read_from_the_shells_words() {
        let cases: &[(&str, Option<i64>, &str, bool)] = &[
            (
                "python3 -m pytest",
                Some(127),
                "sh: python3: not found",
                true,
            ),
            (
                "python3 -m pytest",
                Some(127),
                "sh: 1: python3: not found",
                true,
            ),
            (
                "cargo test",
                Some(127),
                "bash: line 1: cargo: command not found",
                true,
            ),
            ("./ci.sh", Some(126), "sh: ./ci.sh: Permission denied", true),
            ("CI=1 make test", Some(127), "sh: make: not found", true),
            (
                "npm test",
                Some(127),
                "exec: \"npm\": executable file not found in $PATH",
                true,
            ),
            // The command ran and something it called is missing: the agent's to fix.
            (
                "sh test.sh",
                Some(127),
                "test.sh: line 3: jq: not found",
                false,
            ),
            // Not 126/127: a failing test that prints "not found".
            ("sh test.sh", Some(1), "sh: sh: not found", false),
            ("python3 -m pytest", None, "sh: python3: not found", false),
        ];
        for (command, code, output, missing) in cases {
            assert_eq!(
                check_command_missing(command, *code, output),
                *missing,
                "{command} {code:?} {output}"
            );
        }
        let class = classify(
            &FailureKind::CheckCommandMissing {
                check: "test".into(),
                command: "python3 -m pytest".into(),
            },
            AttemptStatus::Failed,
            "claude",
            "/r",
        );
        assert!(class.is_permanent(), "{class:?}");
    }
}
