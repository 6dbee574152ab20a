//! What happens to a task after an attempt ends: retry after backoff, move to the next
//! agent on quota, hold, or block (DESIGN.md "Attempts", spec §4).
//!
//! Pure: the caller passes `now` and the task's counters.

use chrono::{DateTime, Utc};
use std::collections::BTreeSet;
use std::time::Duration;

use super::failure::{Cause, Class};
use crate::domain::AttemptStatus;

/// Backoff and attempt limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Failed attempts (quota fallbacks excluded) after which the task is BLOCKED.
    pub max_attempts: u32,
    /// Delay before the first retry; doubles with each failure.
    pub base: Duration,
    pub cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            base: Duration::from_secs(10),
            cap: Duration::from_secs(300),
        }
    }
}

impl RetryPolicy {
    /// `base · 2^(failures−1)`, capped: 10 s, 20 s, 40 s, … 5 min.
    pub fn backoff(&self, failures: u32) -> Duration {
        let exponent = failures.saturating_sub(1).min(20);
        let delay = self.base.saturating_mul(1u32 << exponent);
        delay.min(self.cap)
    }
}

/// The decision after one attempt that did not land.
#[derive(Debug, Clone, PartialEq)]
pub enum AfterAttempt {
    /// Retry at `at`; `failures` is the new failure count.
    Retry { at: DateTime<Utc>, failures: u32 },
    /// The agent is out of quota: retry now with the next agent of the chain, without
    /// counting a failure.
    Fallback { next_agent: String },
    /// No retry is scheduled (the user cancelled); `spawn --task` can pick it up again.
    Hold,
    /// Give up: FAILED -> BLOCKED, reported where the task came from.
    Block { reason: String },
}

/// Decides what follows an attempt that ended with `status` (anything but a landing).
///
/// `chain` is the routed agent followed by its fallbacks; `exhausted` holds the agents
/// already out of quota for this task, including `agent` when `status` is `Quota`.
pub fn after_attempt(
    policy: &RetryPolicy,
    status: AttemptStatus,
    failures_before: u32,
    chain: &[String],
    exhausted: &BTreeSet<String>,
    now: DateTime<Utc>,
) -> AfterAttempt {
    match status {
        // A budget refusal carries its wait (`wait_until`) and never gets here; held if so.
        AttemptStatus::Cancelled | AttemptStatus::Budget => AfterAttempt::Hold,
        AttemptStatus::Quota => match next_agent(chain, exhausted) {
            Some(next) => AfterAttempt::Fallback {
                next_agent: next.to_string(),
            },
            None => AfterAttempt::Block {
                reason: format!(
                    "every agent in the chain ({}) is out of quota",
                    chain.join(", ")
                ),
            },
        },
        _ => {
            let failures = failures_before + 1;
            if failures >= policy.max_attempts {
                AfterAttempt::Block {
                    reason: format!(
                        "{failures} failed attempt(s), the limit is max_attempts = {}",
                        policy.max_attempts
                    ),
                }
            } else {
                let delay = chrono::Duration::from_std(policy.backoff(failures))
                    .unwrap_or_else(|_| chrono::Duration::seconds(300));
                AfterAttempt::Retry {
                    at: now + delay,
                    failures,
                }
            }
        }
    }
}

/// Decides what follows a permanent failure (see [`super::failure`]): never a backoff.
///
/// An agent that is not logged in (or whose key the API refused) cannot work on any task,
/// but another agent of the chain may: the task falls back to it at once, without counting
/// a failure, as on quota; `exhausted` must already hold `agent`. Every other permanent
/// cause blocks the task now, whatever attempts are left.
pub fn after_permanent(
    cause: &Cause,
    fix: &str,
    chain: &[String],
    exhausted: &BTreeSet<String>,
) -> AfterAttempt {
    if *cause == Cause::AgentAuth {
        if let Some(next) = next_agent(chain, exhausted) {
            return AfterAttempt::Fallback {
                next_agent: next.to_string(),
            };
        }
    }
    AfterAttempt::Block {
        reason: format!("permanent failure, not retried; fix: {fix}"),
    }
}

/// What is known about an attempt that did not land, for [`after_failure`].
#[derive(Debug, Clone)]
pub struct FailedAttempt<'a> {
    pub status: AttemptStatus,
    /// The failure's reason as recorded (scrubbed, with its fix when permanent).
    pub reason: &'a str,
    pub class: &'a Class,
    /// Not a failure of the work: wait until then without counting (the cost ceiling).
    pub wait_until: Option<DateTime<Utc>>,
    /// A cancellation is a daemon shutdown, not a person's decision.
    pub cancel_means_retry: bool,
    /// Failures counted before this attempt.
    pub failures: u32,
    /// The routed agent then its fallbacks (never empty: the agent that ran at least).
    pub chain: &'a [String],
    /// Agents out of quota (or not logged in) for this task, this attempt's included.
    pub exhausted: &'a BTreeSet<String>,
}

/// What the store records with FAILED, and how the attempt ended for the task.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// FAILED with the next attempt due at `at`; `failures` is the new count.
    Retry { at: DateTime<Utc>, failures: u32 },
    /// FAILED, the next agent of the chain takes over at once (due now).
    Fallback { next_agent: String, failures: u32 },
    /// FAILED with no retry time: a person runs it again (`spawn --task`).
    Hold { failures: u32 },
    /// FAILED then BLOCKED with `reason` (reported at the source).
    Block { reason: String, failures: u32 },
}

/// Decides what follows an attempt that did not land, with its counters: a wait (cost
/// ceiling) or a shutdown's cancellation retries without counting; a cancellation by a
/// person holds; a permanent failure blocks (or falls back, for a login); anything else
/// goes through [`after_attempt`]'s backoff and limit. A block counts the failure, except
/// on quota (quota never counts).
pub fn after_failure(policy: &RetryPolicy, f: &FailedAttempt<'_>, now: DateTime<Utc>) -> Next {
    if let Some(at) = f.wait_until {
        return Next::Retry {
            at,
            failures: f.failures,
        };
    }
    if f.status == AttemptStatus::Cancelled && f.cancel_means_retry {
        return Next::Retry {
            at: now,
            failures: f.failures,
        };
    }
    let decision = match f.class {
        Class::Permanent { cause, fix } => after_permanent(cause, fix, f.chain, f.exhausted),
        Class::Transient => after_attempt(policy, f.status, f.failures, f.chain, f.exhausted, now),
    };
    match decision {
        AfterAttempt::Retry { at, failures } => Next::Retry { at, failures },
        AfterAttempt::Fallback { next_agent } => Next::Fallback {
            next_agent,
            failures: f.failures,
        },
        AfterAttempt::Hold => Next::Hold {
            failures: f.failures,
        },
        AfterAttempt::Block { reason: why } => Next::Block {
            reason: if f.class.is_permanent() {
                f.reason.to_string()
            } else {
                format!("{why}; last: {}", f.reason)
            },
            failures: if f.status == AttemptStatus::Quota {
                f.failures
            } else {
                f.failures + 1
            },
        },
    }
}

/// Whether this failure puts the agent out for the task (quota, or a login the agent does
/// not have): the next attempt skips it.
pub fn exhausts_agent(status: AttemptStatus, class: &Class) -> bool {
    status == AttemptStatus::Quota
        || matches!(
            class,
            Class::Permanent {
                cause: Cause::AgentAuth | Cause::AgentModel,
                ..
            }
        )
}

/// The first agent of the chain that still has quota.
pub fn next_agent<'a>(chain: &'a [String], exhausted: &BTreeSet<String>) -> Option<&'a str> {
    chain
        .iter()
        .find(|agent| !exhausted.contains(agent.as_str()))
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap()
    }

    fn chain() -> Vec<String> {
        vec!["claude".into(), "codex".into(), "kimi".into()]
    }

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let p = RetryPolicy::default();
        let secs: Vec<u64> = (1..=8).map(|n| p.backoff(n).as_secs()).collect();
        assert_eq!(secs, vec![10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(p.backoff(0).as_secs(), 10);
        assert_eq!(p.backoff(u32::MAX).as_secs(), 300);
    }

    #[test]
    fn failure_schedules_a_retry_with_backoff() {
        let p = RetryPolicy::default();
        let got = after_attempt(&p, AttemptStatus::Failed, 0, &chain(), &set(&[]), now());
        assert_eq!(
            got,
            AfterAttempt::Retry {
                at: now() + chrono::Duration::seconds(10),
                failures: 1
            }
        );
        let got = after_attempt(&p, AttemptStatus::Timeout, 1, &chain(), &set(&[]), now());
        assert_eq!(
            got,
            AfterAttempt::Retry {
                at: now() + chrono::Duration::seconds(20),
                failures: 2
            }
        );
    }

    #[test]
    fn third_failure_blocks() {
        let p = RetryPolicy::default();
        for status in [
            AttemptStatus::Failed,
            AttemptStatus::Timeout,
            AttemptStatus::Stalled,
            AttemptStatus::Crash,
        ] {
            match after_attempt(&p, status, 2, &chain(), &set(&[]), now()) {
                AfterAttempt::Block { reason } => assert!(reason.contains("max_attempts = 3")),
                other => panic!("{status}: {other:?}"),
            }
        }
    }

    #[test]
    fn quota_moves_down_the_chain_without_a_failure() {
        let p = RetryPolicy::default();
        let got = after_attempt(
            &p,
            AttemptStatus::Quota,
            2,
            &chain(),
            &set(&["claude"]),
            now(),
        );
        assert_eq!(
            got,
            AfterAttempt::Fallback {
                next_agent: "codex".into()
            }
        );
        let got = after_attempt(
            &p,
            AttemptStatus::Quota,
            0,
            &chain(),
            &set(&["claude", "codex", "kimi"]),
            now(),
        );
        assert!(matches!(got, AfterAttempt::Block { .. }));
    }

    #[test]
    fn cancelled_holds() {
        let p = RetryPolicy::default();
        let got = after_attempt(&p, AttemptStatus::Cancelled, 0, &chain(), &set(&[]), now());
        assert_eq!(got, AfterAttempt::Hold);
    }

    fn failed<'a>(
        status: AttemptStatus,
        class: &'a Class,
        failures: u32,
        chain: &'a [String],
        exhausted: &'a BTreeSet<String>,
    ) -> FailedAttempt<'a> {
        FailedAttempt {
            status,
            reason: "why",
            class,
            wait_until: None,
            cancel_means_retry: false,
            failures,
            chain,
            exhausted,
        }
    }

    #[test]
    fn after_failure_table() {
        let p = RetryPolicy::default();
        let chain = chain();
        let none = set(&[]);
        let claude_out = set(&["claude"]);
        let all_out = set(&["claude", "codex", "kimi"]);
        let t = Class::Transient;
        let login = Class::Permanent {
            cause: Cause::AgentAuth,
            fix: "log in".into(),
        };
        let image = Class::Permanent {
            cause: Cause::ImageMissing { image: "x".into() },
            fix: "build it".into(),
        };
        let tomorrow = now() + chrono::Duration::hours(12);
        let ceiling = FailedAttempt {
            wait_until: Some(tomorrow),
            ..failed(AttemptStatus::Cancelled, &t, 1, &chain, &none)
        };
        let shutdown = FailedAttempt {
            cancel_means_retry: true,
            ..failed(AttemptStatus::Cancelled, &t, 2, &chain, &none)
        };
        let cases: Vec<(&str, FailedAttempt<'_>, Next)> = vec![
            (
                "the cost ceiling waits without counting",
                ceiling,
                Next::Retry {
                    at: tomorrow,
                    failures: 1,
                },
            ),
            (
                "a shutdown retries now without counting",
                shutdown,
                Next::Retry {
                    at: now(),
                    failures: 2,
                },
            ),
            (
                "a person's cancel holds",
                failed(AttemptStatus::Cancelled, &t, 1, &chain, &none),
                Next::Hold { failures: 1 },
            ),
            (
                "checks failed: backoff",
                failed(AttemptStatus::Failed, &t, 0, &chain, &none),
                Next::Retry {
                    at: now() + chrono::Duration::seconds(10),
                    failures: 1,
                },
            ),
            (
                "third failure blocks and counts",
                failed(AttemptStatus::Crash, &t, 2, &chain, &none),
                Next::Block {
                    reason: "3 failed attempt(s), the limit is max_attempts = 3; last: why".into(),
                    failures: 3,
                },
            ),
            (
                "quota falls back without counting",
                failed(AttemptStatus::Quota, &t, 1, &chain, &claude_out),
                Next::Fallback {
                    next_agent: "codex".into(),
                    failures: 1,
                },
            ),
            (
                "quota on every agent blocks without counting",
                failed(AttemptStatus::Quota, &t, 1, &chain, &all_out),
                Next::Block {
                    reason:
                        "every agent in the chain (claude, codex, kimi) is out of quota; last: why"
                            .into(),
                    failures: 1,
                },
            ),
            (
                "no login falls back",
                failed(AttemptStatus::Failed, &login, 0, &chain, &claude_out),
                Next::Fallback {
                    next_agent: "codex".into(),
                    failures: 0,
                },
            ),
            (
                "a permanent failure blocks with its own reason",
                failed(AttemptStatus::Crash, &image, 0, &chain, &none),
                Next::Block {
                    reason: "why".into(),
                    failures: 1,
                },
            ),
        ];
        for (name, f, want) in cases {
            assert_eq!(after_failure(&p, &f, now()), want, "{name}");
        }
    }

    #[test]
    fn exhausting_failures() {
        let login = Class::Permanent {
            cause: Cause::AgentAuth,
            fix: String::new(),
        };
        assert!(exhausts_agent(AttemptStatus::Quota, &Class::Transient));
        assert!(exhausts_agent(AttemptStatus::Failed, &login));
        assert!(!exhausts_agent(AttemptStatus::Failed, &Class::Transient));
        assert!(!exhausts_agent(AttemptStatus::Cancelled, &Class::Transient));
    }

    #[test]
    fn next_agent_skips_exhausted() {
        assert_eq!(next_agent(&chain(), &set(&[])), Some("claude"));
        assert_eq!(
            next_agent(&chain(), &set(&["claude", "kimi"])),
            Some("codex")
        );
        assert_eq!(
            next_agent(&chain(), &set(&["claude", "codex", "kimi"])),
            None
        );
    }

    #[test]
    fn permanent_blocks_at_once_and_auth_falls_back() {
        let image = Cause::ImageMissing { image: "x".into() };
        for exhausted in [set(&[]), set(&["claude"])] {
            match after_permanent(&image, "build the image", &chain(), &exhausted) {
                AfterAttempt::Block { reason } => {
                    assert!(reason.contains("fix: build the image"), "{reason}")
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            after_permanent(&Cause::AgentAuth, "login", &chain(), &set(&["claude"])),
            AfterAttempt::Fallback {
                next_agent: "codex".into()
            }
        );
        assert!(matches!(
            after_permanent(
                &Cause::AgentAuth,
                "login",
                &chain(),
                &set(&["claude", "codex", "kimi"])
            ),
            AfterAttempt::Block { .. }
        ));
    }
}
