//! Claims: taking a task atomically across processes. `BEGIN IMMEDIATE` takes the write
//! lock before the candidate is read, so two daemons never claim one task.

use chrono::{DateTime, Utc};

use super::sql::{params, Db};
use super::tasks::claim_transition;
use super::{current_state, ts, Result, Store};
use crate::domain::{Task, TaskState};

impl Store {
    /// Atomically claims the oldest claimable task: DISCOVERED, or FAILED with a retry
    /// time at or before `now`. Returns it in CLAIMED, or `None` when nothing is ready.
    pub fn claim_next(&self, now: DateTime<Utc>) -> Result<Option<Task>> {
        self.immediate(|tx| {
            // Two probes keep each one on an index; the older candidate wins.
            let discovered: Option<(i64, String)> = tx.query_opt(
                "SELECT rowid, id FROM tasks WHERE state = 'DISCOVERED' ORDER BY rowid LIMIT 1",
                params![],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            let retry: Option<(i64, String)> = tx.query_opt(
                "SELECT rowid, id FROM tasks WHERE state = 'FAILED' \
                 AND next_attempt_at IS NOT NULL AND next_attempt_at <= ?1 \
                 ORDER BY rowid LIMIT 1",
                params![ts(now)],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            let pick = match (discovered, retry) {
                (Some(d), Some(r)) => Some(if d.0 <= r.0 { d } else { r }),
                (d, r) => d.or(r),
            };
            match pick {
                Some((_, id)) => claim_in(tx, &id, now).map(Some),
                None => Ok(None),
            }
        })
    }

    /// Atomically claims one task if it is claimable (see [`Store::claim_next`]);
    /// `Ok(None)` when it exists but is not, `NotFound` when it does not exist.
    pub fn claim(&self, task_id: &str, now: DateTime<Utc>) -> Result<Option<Task>> {
        self.immediate(|tx| {
            let state = current_state(tx, task_id)?;
            let next: Option<String> = tx.query_row(
                "SELECT next_attempt_at FROM tasks WHERE id = ?1",
                params![task_id],
                |r| r.get(0),
            )?;
            let ready = match state {
                TaskState::Discovered => true,
                TaskState::Failed => next.is_some_and(|n| n <= ts(now)),
                _ => false,
            };
            if ready {
                claim_in(tx, task_id, now).map(Some)
            } else {
                Ok(None)
            }
        })
    }
}

/// Moves a task to CLAIMED inside an IMMEDIATE transaction the caller holds.
fn claim_in(tx: &Db, task_id: &str, now: DateTime<Utc>) -> Result<Task> {
    let from = current_state(tx, task_id)?;
    claim_transition(tx, task_id, from, now)
}
