//! Whether a failed attempt is worth another try (issue 12 "Permanent failures are not
//! retried"; DESIGN.md "Attempts").
//!
//! A *transient* failure (network, a 5xx, a timeout, an engine hiccup, an agent crash,
//! checks that failed) may pass on the next attempt, so it gets the retry policy's backoff.
//! A *permanent* one (the image is missing, the repository or base ref is gone, the path is
//! not a git repository, the agent CLI is not logged in, a configuration error, a secret in
//! the diff) fails the same way however often it runs: the task is BLOCKED at once with the
//! cause and the fix, and comes back with `polyphony retry` once a person fixed it.
//!
//! Pure: [`classify`] reads the stage the failure happened in, the attempt status and the
//! failure's message (our own typed errors' texts, git's stderr, the agent CLI's error) and
//! nothing else. Unknown messages are transient: a wrong "transient" costs a few retries, a
//! wrong "permanent" strands a task that would have passed.

use crate::domain::AttemptStatus;

/// Where in the attempt the failure happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Not recorded where the failure was made; only the message decides.
    Unknown,
    /// Mirror fetch and clone of the task's repository.
    Workspace,
    /// Resolving the configuration for the attempt: agent profile, identity, the base
    /// branch's `.polyphony.yaml`.
    Config,
    /// Claiming the task at its source (GitHub).
    Source,
    /// Creating and running the agent's container.
    Container,
    /// The agent ran and ended without success.
    Agent,
    /// Commit, gates and the project's checks.
    Verify,
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
    Config,
    SecretInDiff,
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

/// Classifies one failure. `agent` is the CLI that ran (for the login fix), `repo` the
/// task's repository (named in the fix).
pub fn classify(
    stage: Stage,
    status: AttemptStatus,
    message: &str,
    agent: &str,
    repo: &str,
) -> Class {
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
    let lower = message.to_ascii_lowercase();
    let has = |needle: &str| lower.contains(needle);
    let permanent = |cause: Cause, fix: String| Class::Permanent { cause, fix };
    // A network or engine hiccup can mention a missing thing on the way ("could not
    // resolve host ... repository"): it stays transient whatever else the text says.
    if is_transient_text(&lower) {
        return Class::Transient;
    }
    if let Some(image) = missing_image(message) {
        let fix = format!(
            "build the image: `docker build -t {image} images/worker` (or `docker pull {image}`), \
             or point `container.image` (or the agent's `image`) at an image the engine has; \
             then `polyphony retry TASK`"
        );
        return permanent(Cause::ImageMissing { image }, fix);
    }
    if has("base ref") && has("not found") {
        return permanent(
            Cause::BaseRefGone,
            format!(
                "push the base branch to {repo} or fix the task's `base_ref` (config.yaml \
                 `repos`); then `polyphony retry TASK`"
            ),
        );
    }
    if has("not a git repository") || has("does not appear to be a git repository") {
        return permanent(
            Cause::NotARepository,
            format!("{repo} is not a git repository: enqueue the task again on a repository"),
        );
    }
    if stage == Stage::Workspace
        && (has("repository not found")
            || (has("repository") && has("not found"))
            || has("does not exist")
            || has("no such file or directory"))
    {
        return permanent(
            Cause::RepositoryGone,
            format!(
                "{repo} is gone or unreadable: restore it (or give the token access), then \
                 `polyphony retry TASK`"
            ),
        );
    }
    if stage == Stage::Source && (has("rejected the token") || has("403 forbidden")) {
        return permanent(
            Cause::Config,
            "GitHub refused the token: export a valid token with `repo` scope (see \
             `polyphony doctor`), then `polyphony retry TASK`"
                .to_string(),
        );
    }
    // Only the agent's own output speaks for its login: a 401 elsewhere is another token's.
    if stage == Stage::Agent && is_auth_text(&lower) {
        return permanent(
            Cause::AgentAuth,
            format!(
                "run `{} login` on the host (or set the API key the identity names), check \
                 with `polyphony doctor`, then `polyphony retry TASK`",
                cli_of(agent)
            ),
        );
    }
    if matches!(stage, Stage::Verify | Stage::Unknown) && has("secret") && has("diff") {
        return permanent(
            Cause::SecretInDiff,
            "the agent's diff carries a secret: rotate it if it is real, remove it from the \
             repository or the issue text, then `polyphony retry TASK`"
                .to_string(),
        );
    }
    if stage == Stage::Config
        || (has("host variable") && has("is not set"))
        || has("is not in agents.yaml")
    {
        return permanent(
            Cause::Config,
            "fix the configuration the message names (`polyphony config check`), then \
             `polyphony retry TASK`"
                .to_string(),
        );
    }
    Class::Transient
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

/// The image named by our `ImageMissing` error or Docker's "No such image: X".
fn missing_image(message: &str) -> Option<String> {
    if let Some(start) = message.find("image `") {
        let rest = &message[start + "image `".len()..];
        if let Some(end) = rest.find('`') {
            if rest[end..].contains("is missing") {
                return Some(rest[..end].to_string());
            }
        }
    }
    let lower = message.to_ascii_lowercase();
    let start = lower.find("no such image: ")? + "no such image: ".len();
    let image: String = message[start..]
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != ')' && *c != ',')
        .collect();
    (!image.is_empty()).then_some(image)
}

/// The command that logs an agent's CLI in.
fn cli_of(agent: &str) -> &str {
    let lower = agent.to_ascii_lowercase();
    for cli in ["claude", "codex", "kimi", "gemini"] {
        if lower.contains(cli) {
            return cli;
        }
    }
    if agent.is_empty() {
        "claude"
    } else {
        agent
    }
}

/// The one-line reason a permanent failure is recorded and reported with.
pub fn permanent_reason(reason: &str, fix: &str) -> String {
    format!("{reason} — permanent, not retried; fix: {fix}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use AttemptStatus::*;
    use Stage::*;

    fn cause(stage: Stage, status: AttemptStatus, message: &str) -> Option<Cause> {
        match classify(stage, status, message, "claude", "/srv/repo.git") {
            Class::Transient => None,
            Class::Permanent { cause, fix } => {
                assert!(!fix.is_empty());
                Some(cause)
            }
        }
    }

    #[test]
    fn the_table() {
        let image = || Cause::ImageMissing {
            image: "polyphony-missing:nope".into(),
        };
        let cases: &[(Stage, AttemptStatus, &str, Option<Cause>)] = &[
            // Permanent.
            (Container, Crash, "the container failed: image `polyphony-missing:nope` is missing from the engine: build it first (see images/) or fix `container.image`", Some(image())),
            (Unknown, Crash, "cannot run check `test`: Docker engine error during create: No such image: polyphony-missing:nope", Some(image())),
            (Workspace, Crash, "cannot prepare the workspace: base ref \"release\" not found in /srv/repo.git: name an existing branch, tag or commit", Some(Cause::BaseRefGone)),
            (Workspace, Crash, "cannot prepare the workspace: git fetch failed (exit Some(128)): fatal: '/srv/gone.git' does not appear to be a git repository", Some(Cause::NotARepository)),
            (Workspace, Crash, "cannot prepare the workspace: git clone failed (exit Some(128)): fatal: not a git repository (or any of the parent directories): .git", Some(Cause::NotARepository)),
            (Workspace, Crash, "cannot prepare the workspace: git fetch failed (exit Some(128)): remote: Repository not found.", Some(Cause::RepositoryGone)),
            (Workspace, Crash, "cannot prepare the workspace: git clone failed: fatal: repository 'https://github.com/o/r.git/' not found", Some(Cause::RepositoryGone)),
            (Workspace, Crash, "cannot prepare the workspace: path /srv/repo.git does not exist", Some(Cause::RepositoryGone)),
            (Agent, Failed, "agent claude ended failed: Invalid API key · Please run /login", Some(Cause::AgentAuth)),
            (Agent, Failed, "agent claude ended failed: API Error: 401 {\"type\":\"error\",\"error\":{\"type\":\"authentication_error\"}}", Some(Cause::AgentAuth)),
            (Agent, Crash, "agent codex ended crash: unexpected status 401 Unauthorized", Some(Cause::AgentAuth)),
            (Agent, Failed, "agent kimi ended failed: Not logged in", Some(Cause::AgentAuth)),
            (Config, Crash, "identity `work` is not in identities.yaml", Some(Cause::Config)),
            (Config, Crash, "verify: unknown field `tset` (in the base branch)", Some(Cause::Config)),
            (Container, Crash, "the container failed: host variable `ANTHROPIC_API_KEY` (for container variable `ANTHROPIC_API_KEY`) is not set; export it or fix the identity's api_keys", Some(Cause::Config)),
            (Unknown, Crash, "agent `ghost` is not in agents.yaml", Some(Cause::Config)),
            (Verify, Failed, "the diff carries a secret (AWS access key) in config.py", Some(Cause::SecretInDiff)),
            // Transient.
            (Workspace, Crash, "cannot prepare the workspace: git fetch failed: fatal: unable to access 'https://github.com/o/r.git/': Could not resolve host: github.com", None),
            (Workspace, Crash, "cannot prepare the workspace: git fetch: The requested URL returned error: 502", None),
            (Workspace, Crash, "cannot prepare the workspace: early EOF, repository not found in pack", None),
            (Container, Crash, "the container failed: cannot reach the Docker engine (connection refused); is it running and is DOCKER_HOST right?", None),
            (Container, Crash, "the container failed: Docker engine error during start: container is restarting", None),
            (Agent, Failed, "agent claude ended failed: API Error: 529 Overloaded", None),
            (Agent, Failed, "agent claude ended failed: API Error: 500 Internal server error", None),
            (Agent, Crash, "agent claude ended crash: exit code 137", None),
            (Agent, Failed, "agent claude ended failed: error at line 4011: expected `;`", None),
            (Verify, Failed, "verification failed: test exited 1", None),
            (Verify, Failed, "verification failed: diff: the agent changed no file", None),
            (Unknown, Crash, "cannot record the run: database is locked", None),
            (Agent, Timeout, "agent claude ended timeout: not logged in", None),
            (Agent, Stalled, "no output for 60s", None),
            (Agent, Quota, "Claude AI usage limit reached|1767225600", None),
            (Agent, Cancelled, "cancelled", None),
            // Auth words only count from the agent; a workspace 401 is the token's.
            (Workspace, Crash, "cannot prepare the workspace: remote: Repository not found. (401 Unauthorized)", Some(Cause::RepositoryGone)),
            (Verify, Failed, "verification failed: test: HTTP 401 in fixture", None),
            (Unknown, Crash, "cannot record the run: 401 unauthorized", None),
            (Source, Crash, "cannot claim o/r#1 at GitHub: GitHub rejected the token from $GITHUB_TOKEN (401 Unauthorized at https://api.github.com): it is missing, expired or revoked", Some(Cause::Config)),
            (Source, Crash, "cannot claim o/r#1 at GitHub: GitHub answered 502 Bad Gateway while reading issue o/r#1 (after 3 tries)", None),
        ];
        for (stage, status, message, want) in cases {
            assert_eq!(
                &cause(*stage, *status, message),
                want,
                "{stage:?} {status} {message:?}"
            );
        }
    }

    #[test]
    fn the_fix_names_the_image_and_the_login() {
        let Class::Permanent { fix, .. } = classify(
            Container,
            Crash,
            "image `worker:1` is missing from the engine: build it",
            "claude",
            "r",
        ) else {
            panic!("permanent")
        };
        assert!(
            fix.starts_with("build the image: `docker build -t worker:1"),
            "{fix}"
        );
        let Class::Permanent { fix, .. } = classify(
            Agent,
            Failed,
            "agent codex-fast ended failed: 401 Unauthorized",
            "codex-fast",
            "r",
        ) else {
            panic!("permanent")
        };
        assert!(fix.starts_with("run `codex login` on the host"), "{fix}");
    }

    #[test]
    fn codes_stand_alone() {
        assert!(has_code("status 401 unauthorized", "401"));
        assert!(has_code("(401)", "401"));
        assert!(!has_code("line 4011", "401"));
        assert!(!has_code("a401b", "401"));
    }
}
