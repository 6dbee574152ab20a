//! Finishing what a killed daemon left half-done at the source (issue 19): the daemon's
//! start-up reconciliation walks the store's pending intents and completes each one
//! idempotently, instead of inferring ownership or outcome from half-written labels.
//!
//! - `claim`: the claim of the attempt about to run again is redone with
//!   `resuming` (our own first marker proves ownership; the labels are finished, the
//!   claimed label added before the ready label goes); any other is over.
//! - `block`: the blocked comment and labels of a BLOCKED task are posted (found again by
//!   marker, never twice).
//! - `land`: a VERIFYING task is resumed by reconciliation (verification again, then the
//!   idempotent landing, which completes it with LANDED); otherwise it is over.
//! - `cancel`: the cancelled comment of a CANCELLED task is posted and its claim released
//!   (`orchestrator::cancel::report`).
//! - `container`: reconciliation has already removed any container that carries this
//!   home's and the attempt's labels but was never recorded; the intent is over.
//!
//! Must not: change task state (reconciliation and the pipeline do), or post anything
//! but through the task's `Source`, whose writes are idempotent (GitHub's look up their
//! marker first).

use crate::domain::{Task, TaskState};
use crate::sources::{Blocked, BlockedAttempt, ClaimError, ClaimInfo};
use crate::store::{AttemptRecord, IntentKind, Store};

use super::Orchestrator;

/// The blocked report of a task: the reasons of its last five attempts.
pub(crate) fn blocked_of(attempts: &[AttemptRecord]) -> Blocked {
    Blocked {
        attempts: attempts
            .iter()
            .rev()
            .take(5)
            .rev()
            .map(|a| BlockedAttempt {
                attempt: a.attempt,
                agent: a.agent.clone(),
                reason: a.reason.clone().unwrap_or_else(|| "unknown".into()),
            })
            .collect(),
    }
}

/// Posts the blocked report of a task at its source; `true` once the source has it.
pub(crate) async fn report_blocked(orch: &Orchestrator, task: &Task, blocked: &Blocked) -> bool {
    let Ok(source) = orch.sources.of(task) else {
        return false;
    };
    match source.block(task, blocked).await {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(task = %task.id, source = source.name(), error = %e, "cannot report the block at the source; the next start retries");
            false
        }
    }
}

/// Completes every pending intent it can (see the module docs); the rest stay pending
/// for the next start. Runs after the containers and stranded tasks were reconciled.
pub(crate) async fn finish_pending(orch: &Orchestrator, store: &Store) -> anyhow::Result<()> {
    for intent in store.pending_intents()? {
        let Some(task) = store.get_task(&intent.task_id)? else {
            continue;
        };
        // Issue 27: an active task another daemon of the fleet holds is that daemon's
        // (reconciliation took over every claim this one may act on before this runs).
        if task.state.is_active()
            && store
                .claim_of(&task.id)?
                .is_some_and(|c| c.owner != orch.leases.owner.key())
        {
            continue;
        }
        let done = match intent.kind {
            IntentKind::Container => true,
            IntentKind::Land => task.state != TaskState::Verifying,
            IntentKind::Claim => {
                if task.state.is_terminal() || intent.attempt != task.attempts + 1 {
                    true
                } else {
                    let claimant = orch.claimant(store)?;
                    finish_claim(orch, &task, &intent.payload, intent.attempt, claimant).await
                }
            }
            IntentKind::Cancel => {
                if task.state != TaskState::Cancelled {
                    true
                } else {
                    // `report` completes the intent itself once the source has it.
                    super::cancel::report(&orch.store, &orch.sources, &task, orch.now()).await?;
                    false
                }
            }
            IntentKind::Block => {
                if task.state != TaskState::Blocked {
                    true
                } else {
                    let blocked = blocked_of(&store.attempts(&task.id)?);
                    let reported = report_blocked(orch, &task, &blocked).await;
                    if reported {
                        store.mark_block_reported(&task.id, orch.now())?;
                        tracing::info!(task = %task.id, "finished the blocked report a crash interrupted");
                    }
                    reported
                }
            }
        };
        if done {
            store.complete_intent(&intent.task_id, intent.kind, intent.attempt, orch.now())?;
        }
    }
    Ok(())
}

/// Redoes an interrupted claim (comment found by its marker, labels finished).
async fn finish_claim(
    orch: &Orchestrator,
    task: &Task,
    payload: &serde_json::Value,
    attempt: u32,
    claimant: String,
) -> bool {
    let Ok(source) = orch.sources.of(task) else {
        return false;
    };
    let info = ClaimInfo {
        agent: payload["agent"].as_str().unwrap_or_default().to_string(),
        attempt,
        claimant,
    };
    match source.claim_resuming(task, &info, true).await {
        Ok(_) => {
            tracing::info!(task = %task.id, attempt, "finished the claim a crash interrupted");
            true
        }
        // Someone else's: the task's next attempt finds out again and releases it.
        Err(ClaimError::NoLongerReady { .. }) => true,
        Err(e) => {
            tracing::warn!(task = %task.id, error = %e, "cannot finish the interrupted claim");
            false
        }
    }
}
