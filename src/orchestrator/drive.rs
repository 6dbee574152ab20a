//! One task driven in the foreground until it settles (`polyphony spawn`): attempts one
//! after another, waiting out each retry's backoff, until the task lands, blocks or is
//! held. The CLI is a thin shell over [`drive`]: it prints what this reports.
//!
//! Must not: print (the caller is told through `say`), or decide what follows an attempt
//! (that is the pipeline and `retry`).

use chrono::{DateTime, Utc};
use tokio::sync::watch;

use super::pipeline::{describe, AttemptEnd, RunOptions};
use super::Orchestrator;
use crate::domain::{Task, TaskState};
use crate::store::Store;

/// Why a task is not driven at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotDriven {
    /// Already LANDED (nothing to do; not an error for the caller).
    #[error("{0} is already LANDED")]
    Landed(String),
    /// Already BLOCKED: `polyphony retry` brings it back.
    #[error(
        "{0} is already BLOCKED: fix the cause (`polyphony status {0}`), then \
         `polyphony retry {0}` brings it back"
    )]
    Blocked(String),
    /// Cancelled by a person: `polyphony retry` brings it back.
    #[error("{0} was CANCELLED: `polyphony retry {0}` brings it back as a new generation")]
    Cancelled(String),
    /// Another process is running it.
    #[error("{id} is {state}: another process is running it")]
    Busy { id: String, state: TaskState },
}

/// How long to wait before the next attempt, rounded up to whole seconds (a 10 s backoff
/// read a few milliseconds later is still "10s"); `None` when it is due.
pub fn wait_before(
    next_attempt_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Option<std::time::Duration> {
    let wait = (next_attempt_at - now).to_std().unwrap_or_default();
    (!wait.is_zero()).then_some(wait)
}

/// Whole seconds of `wait`, rounded up.
pub fn whole_seconds(wait: std::time::Duration) -> u64 {
    wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
}

/// Runs attempts of `task` until it lands, blocks or is held; waits out retry backoffs.
/// `Ok(None)` when the task was already settled ([`NotDriven::Landed`] / `Blocked` are
/// told through `say`). `say` receives one line per thing a person should know.
pub async fn drive(
    orch: &Orchestrator,
    store: &Store,
    task: Task,
    opts: &RunOptions,
    mut cancel: watch::Receiver<bool>,
    say: &(dyn Fn(&str) + Send + Sync),
) -> anyhow::Result<Option<AttemptEnd>> {
    let id = task.id.clone();
    match task.state {
        TaskState::Landed => {
            say(&NotDriven::Landed(id).to_string());
            return Ok(None);
        }
        TaskState::Blocked => {
            say(&NotDriven::Blocked(id).to_string());
            return Ok(None);
        }
        TaskState::Cancelled => {
            say(&NotDriven::Cancelled(id).to_string());
            return Ok(None);
        }
        TaskState::Failed if task.next_attempt_at.is_none() => {
            // Held (cancelled earlier): a person asked to run it again.
            store.set_retry(&id, task.failures, Some((orch.clock)()))?;
        }
        state if state.is_active() => {
            return Err(NotDriven::Busy { id, state }.into());
        }
        _ => {}
    }
    loop {
        let current = store
            .get_task(&id)?
            .ok_or_else(|| anyhow::anyhow!("task {id} disappeared from the store"))?;
        if let Some(end) = cancelled_end(store, &current)? {
            return Ok(Some(end));
        }
        if let (TaskState::Failed, Some(at)) = (current.state, current.next_attempt_at) {
            if let Some(wait) = wait_before(at, (orch.clock)()) {
                // Parked for a usage limit (issue 14): no failure is counted for the wait.
                let parked = store.quota_wait(&id)?;
                say(&match parked {
                    Some(parked) => format!(
                        "waiting for a usage limit: {}; no failure counted",
                        super::quota::reset_words(&parked.agent, parked.until, (orch.clock)())
                    ),
                    // Counted in failures, not attempt numbers: a failure before the
                    // container existed reuses its attempt number.
                    None => format!(
                        "waiting {} (until {}) before trying again ({} of {} allowed failures so far)",
                        crate::domain::when::span(whole_seconds(wait)),
                        crate::domain::when::clock(at, (orch.clock)()),
                        current.failures,
                        orch.policy.max_attempts
                    ),
                });
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = cancel.changed() => {
                        // `polyphony cancel` (it settled the waiting task already), or Ctrl-C.
                        let now = store.get_task(&id)?.unwrap_or(current.clone());
                        if let Some(end) = cancelled_end(store, &now)? {
                            return Ok(Some(end));
                        }
                        store.set_retry(&id, current.failures, None)?;
                        return Ok(Some(AttemptEnd::Held { reason: "cancelled while waiting for a retry".into() }));
                    }
                }
            }
        }
        let Some(claimed) = store.claim(&id, orch.now())? else {
            anyhow::bail!("task {id} cannot be claimed now (state {})", current.state);
        };
        opts.progress
            .state(&id, TaskState::Claimed, "claimed for this spawn");
        let end = orch.run_claimed(claimed, opts).await?;
        if end.is_final() || *cancel.borrow() {
            return Ok(Some(end));
        }
        say(&describe(&end));
    }
}

/// The end of a task a person cancelled while it waited (`orchestrator::cancel`).
fn cancelled_end(store: &Store, task: &Task) -> anyhow::Result<Option<AttemptEnd>> {
    if task.state != TaskState::Cancelled {
        return Ok(None);
    }
    let reason = store
        .transitions(&task.id)?
        .pop()
        .map(|t| t.reason)
        .unwrap_or_else(|| "cancelled".into());
    Ok(Some(AttemptEnd::Cancelled { reason }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().expect("a timestamp")
    }

    #[test]
    fn waits_round_up_and_due_times_do_not_wait() {
        let now = at("2026-11-30T12:00:00Z");
        assert_eq!(wait_before(now, now), None);
        assert_eq!(wait_before(at("2026-11-30T11:59:00Z"), now), None);
        let wait = wait_before(at("2026-11-30T12:00:10Z"), now).expect("a wait");
        assert_eq!(whole_seconds(wait), 10);
        let wait = wait_before(at("2026-11-30T12:00:09.990Z"), now).expect("a wait");
        assert_eq!(whole_seconds(wait), 10);
    }
}
