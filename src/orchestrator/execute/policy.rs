//! The limits of one attempt, why we stopped its container, and how it ended ([`decide`],
//! pure). `follow` applies the limits while the agent runs.

use std::path::Path;
use std::time::Duration;

use crate::agents::AgentOutcome;
use crate::domain::AttemptStatus;

/// Time and size limits of one attempt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunLimits {
    /// Wall clock from container start; then kill -> `timeout`.
    pub deadline: Duration,
    /// No output on either stream for this long; then kill -> `stalled`.
    pub idle_timeout: Duration,
    /// Bytes of output (both streams) stored as events and transcript; past it the
    /// container is killed -> `failed`, and nothing more is stored.
    pub max_output_bytes: u64,
    /// Size of the workspace (checked every [`WORKSPACE_CHECK_EVERY`]); past it the
    /// container is killed -> `failed`. `None`: unchecked.
    pub max_workspace_bytes: Option<u64>,
    /// Largest cost one attempt may report; figures outside `0..=max` are clamped.
    pub max_cost_usd: f64,
}

impl RunLimits {
    /// 30 min, 5 min idle, 64 MiB of output, a 10 GiB workspace, $100.
    pub const DEFAULT: RunLimits = RunLimits {
        deadline: Duration::from_secs(30 * 60),
        idle_timeout: Duration::from_secs(5 * 60),
        max_output_bytes: 64 * 1024 * 1024,
        max_workspace_bytes: Some(10 * 1024 * 1024 * 1024),
        max_cost_usd: crate::agents::DEFAULT_MAX_COST_USD,
    };

    /// The default caps with these time limits.
    pub const fn new(deadline: Duration, idle_timeout: Duration) -> Self {
        RunLimits {
            deadline,
            idle_timeout,
            ..RunLimits::DEFAULT
        }
    }
}

/// How often the workspace size is measured while an agent runs.
pub const WORKSPACE_CHECK_EVERY: Duration = Duration::from_secs(5);

/// Why we killed the container ourselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Deadline,
    Idle,
    Cancel,
    /// More output than `max_output_bytes`.
    OutputCap,
    /// The workspace grew past `max_workspace_bytes` (the size measured).
    WorkspaceCap(u64),
    /// The agent's stream said the run cannot succeed (a refused API key).
    Hopeless,
}

/// Decides how an attempt ended. Pure; the order matters: our own kills first (we know
/// why), then a structured quota report (so the next agent gets the task), then the
/// engine's OOM flag, then the agent's own result and exit code.
pub fn decide(
    stop: Option<Stop>,
    limits: RunLimits,
    oom_killed: bool,
    exit_code: Option<i64>,
    outcome: &AgentOutcome,
) -> (AttemptStatus, Option<String>) {
    if stop == Some(Stop::Cancel) {
        return (
            AttemptStatus::Cancelled,
            Some("cancelled; container killed".into()),
        );
    }
    if let Some(q) = &outcome.quota {
        let resets = q
            .resets_at
            .as_deref()
            .map(|r| format!(" (resets {})", crate::domain::when::reset_absolute(r)))
            .unwrap_or_default();
        return (
            AttemptStatus::Quota,
            Some(format!(
                "usage limit: {}{resets}",
                crate::domain::when::without_epoch_tail(&q.message)
            )),
        );
    }
    match stop {
        Some(Stop::Hopeless) => {
            let why = outcome
                .error
                .clone()
                .unwrap_or_else(|| "the agent reported an unrecoverable error".into());
            return (
                AttemptStatus::Failed,
                Some(format!("{why}; container stopped")),
            );
        }
        Some(Stop::Idle) if outcome.api_retry.is_some() => {
            let r = outcome.api_retry.as_ref().map_or_else(String::new, |r| {
                let status = r.status.map_or_else(String::new, |s| format!("{s} "));
                format!(
                    "{status}{}, the CLI's retry {} of {}",
                    r.error, r.attempt, r.max_retries
                )
            });
            return (
                AttemptStatus::Stalled,
                Some(format!(
                    "the model API kept failing ({r}): no progress for {}s; container killed",
                    limits.idle_timeout.as_secs()
                )),
            );
        }
        Some(Stop::Deadline) => {
            return (
                AttemptStatus::Timeout,
                Some(format!(
                    "deadline of {}s passed; container killed",
                    limits.deadline.as_secs()
                )),
            )
        }
        Some(Stop::Idle) => {
            return (
                AttemptStatus::Stalled,
                Some(format!(
                    "no output for {}s; container killed",
                    limits.idle_timeout.as_secs()
                )),
            )
        }
        Some(Stop::OutputCap) => {
            return (
                AttemptStatus::Failed,
                Some(format!(
                    "the agent printed more than {} bytes (container.max_output); container killed",
                    limits.max_output_bytes
                )),
            )
        }
        Some(Stop::WorkspaceCap(size)) => {
            return (
                AttemptStatus::Failed,
                Some(format!(
                    "the workspace grew to {size} bytes, over {} (container.max_workspace_size); container killed",
                    limits.max_workspace_bytes.unwrap_or(0)
                )),
            )
        }
        _ => {}
    }
    if oom_killed {
        return (
            AttemptStatus::Crash,
            Some("out of memory: the container hit its memory limit and was OOM-killed".into()),
        );
    }
    let code = exit_code.unwrap_or(-1);
    if outcome.completed && outcome.succeeded && code == 0 {
        return (AttemptStatus::Succeeded, None);
    }
    if !outcome.completed && !(0..128).contains(&code) {
        let why = if code >= 128 {
            format!("killed by signal {} (exit code {code})", code - 128)
        } else {
            "no exit code".to_string()
        };
        return (
            AttemptStatus::Crash,
            Some(format!("the agent died without a result: {why}")),
        );
    }
    let reason = if outcome.completed && outcome.succeeded {
        format!("the agent reported success but exited with code {code}")
    } else if let Some(err) = &outcome.error {
        format!("{err} (exit code {code})")
    } else if outcome.completed {
        format!("the agent reported failure (exit code {code})")
    } else {
        format!("the agent exited with code {code} without a result")
    };
    (AttemptStatus::Failed, Some(reason))
}

/// Bytes of regular files below `path` (symlinks not followed, unreadable parts skipped).
/// Hard links count once per link: a cap is about what the agent made appear.
pub fn tree_size(path: &Path) -> u64 {
    let mut total = 0u64;
    let mut stack = vec![path.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if meta.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&p) {
                stack.extend(entries.flatten().map(|e| e.path()));
            }
        } else if meta.is_file() {
            // Allocated size: a sparse file of 1 TB holds no disk, a full one does.
            use std::os::unix::fs::MetadataExt;
            total = total.saturating_add(meta.blocks().saturating_mul(512));
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::QuotaHit;

    const LIMITS: RunLimits = RunLimits::new(Duration::from_secs(60), Duration::from_secs(10));

    fn outcome(completed: bool, succeeded: bool) -> AgentOutcome {
        AgentOutcome {
            completed,
            succeeded,
            ..Default::default()
        }
    }

    fn quota() -> AgentOutcome {
        AgentOutcome {
            completed: true,
            quota: Some(QuotaHit {
                message: "limit".into(),
                resets_at: Some("5am".into()),
                reset: None,
            }),
            ..Default::default()
        }
    }

    fn check(
        stop: Option<Stop>,
        oom: bool,
        code: Option<i64>,
        o: AgentOutcome,
        expected: AttemptStatus,
        reason_has: &str,
    ) {
        let (status, reason) = decide(stop, LIMITS, oom, code, &o);
        assert_eq!(status, expected, "{stop:?} oom={oom} code={code:?} {o:?}");
        let reason = reason.unwrap_or_default();
        assert!(
            reason.contains(reason_has),
            "reason {reason:?} lacks {reason_has:?}"
        );
    }

    #[test]
    fn success_needs_result_and_exit_zero() {
        check(
            None,
            false,
            Some(0),
            outcome(true, true),
            AttemptStatus::Succeeded,
            "",
        );
        check(
            None,
            false,
            Some(1),
            outcome(true, true),
            AttemptStatus::Failed,
            "exited with code 1",
        );
        check(
            None,
            false,
            Some(0),
            outcome(true, false),
            AttemptStatus::Failed,
            "reported failure",
        );
        check(
            None,
            false,
            Some(0),
            outcome(false, false),
            AttemptStatus::Failed,
            "without a result",
        );
    }

    #[test]
    fn a_refused_key_stops_the_attempt_as_an_auth_failure() {
        let o = AgentOutcome {
            error: Some("authentication failed: the model API answered 401".into()),
            failure_kind: Some(crate::agents::FailureKind::Auth),
            hopeless: true,
            ..Default::default()
        };
        check(
            Some(Stop::Hopeless),
            false,
            Some(137),
            o,
            AttemptStatus::Failed,
            "authentication failed: the model API answered 401",
        );
    }

    #[test]
    fn idle_while_the_cli_retries_names_the_api_failure() {
        let o = AgentOutcome {
            api_retry: Some(crate::agents::ApiRetry {
                attempt: 4,
                max_retries: 10,
                status: Some(500),
                error: "server_error".into(),
            }),
            ..Default::default()
        };
        check(
            Some(Stop::Idle),
            false,
            Some(137),
            o,
            AttemptStatus::Stalled,
            "the model API kept failing (500 server_error, the CLI's retry 4 of 10): no progress for 10s",
        );
    }

    #[test]
    fn kills_win() {
        check(
            Some(Stop::Cancel),
            false,
            Some(137),
            quota(),
            AttemptStatus::Cancelled,
            "cancelled",
        );
        check(
            Some(Stop::Deadline),
            false,
            Some(137),
            outcome(false, false),
            AttemptStatus::Timeout,
            "60s",
        );
        check(
            Some(Stop::Idle),
            false,
            Some(137),
            outcome(false, false),
            AttemptStatus::Stalled,
            "10s",
        );
    }

    #[test]
    fn quota_beats_timeouts_and_failures() {
        check(
            None,
            false,
            Some(1),
            quota(),
            AttemptStatus::Quota,
            "resets 5am",
        );
        check(
            Some(Stop::Idle),
            false,
            Some(137),
            quota(),
            AttemptStatus::Quota,
            "limit",
        );
    }

    #[test]
    fn oom_and_signals_are_crashes() {
        check(
            None,
            true,
            Some(137),
            outcome(false, false),
            AttemptStatus::Crash,
            "out of memory",
        );
        check(
            None,
            false,
            Some(137),
            outcome(false, false),
            AttemptStatus::Crash,
            "signal 9",
        );
        check(
            None,
            false,
            None,
            outcome(false, false),
            AttemptStatus::Crash,
            "no exit code",
        );
        check(
            None,
            false,
            Some(137),
            outcome(true, false),
            AttemptStatus::Failed,
            "137",
        );
    }

    #[test]
    fn adapter_error_is_the_reason() {
        let o = AgentOutcome {
            completed: true,
            error: Some("max turns".into()),
            ..Default::default()
        };
        check(
            None,
            false,
            Some(1),
            o,
            AttemptStatus::Failed,
            "max turns (exit code 1)",
        );
    }
}
