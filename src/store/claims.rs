//! Claims: taking a task atomically across processes. `BEGIN IMMEDIATE` takes the write
//! lock before the candidate is read, so two daemons never claim one task.

use chrono::{DateTime, Utc};

use super::sql::{params, Row};
use super::tasks::claim_transition;
use super::{parse_col, ts, Result, Store, StoreError};
use crate::domain::{Task, TaskState};

/// A claimable task as a probe reads it: rowid, id and stored summary.
type Candidate = (i64, String, Option<String>);

impl Store {
    /// Atomically claims the oldest claimable task: DISCOVERED, or FAILED with a retry
    /// time at or before `now`. Returns it in CLAIMED, or `None` when nothing is ready.
    pub fn claim_next(&self, now: DateTime<Utc>) -> Result<Option<Task>> {
        self.immediate(|tx| {
            // Two probes keep each one on an index; the older candidate wins.
            let candidate = |r: &Row<'_>| Ok((r.get(0)?, r.get(1)?, r.get(2)?));
            let discovered: Option<Candidate> = tx.query_opt(
                "SELECT rowid, id, summary FROM tasks WHERE state = 'DISCOVERED' \
                 ORDER BY rowid LIMIT 1",
                params![],
                candidate,
            )?;
            let retry: Option<Candidate> = tx.query_opt(
                "SELECT rowid, id, summary FROM tasks WHERE state = 'FAILED' \
                 AND next_attempt_at IS NOT NULL AND next_attempt_at <= ?1 \
                 ORDER BY rowid LIMIT 1",
                params![ts(now)],
                candidate,
            )?;
            let pick = match (discovered, retry) {
                (Some(d), Some(r)) if r.0 < d.0 => Some((r, TaskState::Failed)),
                (Some(d), _) => Some((d, TaskState::Discovered)),
                (None, r) => r.map(|r| (r, TaskState::Failed)),
            };
            match pick {
                Some(((seq, id, summary), from)) => {
                    claim_transition(tx, seq, &id, from, summary.as_deref(), None, now).map(Some)
                }
                None => Ok(None),
            }
        })
    }

    /// Atomically claims one task if it is claimable (see [`Store::claim_next`]);
    /// `Ok(None)` when it exists but is not, `NotFound` when it does not exist.
    pub fn claim(&self, task_id: &str, now: DateTime<Utc>) -> Result<Option<Task>> {
        self.immediate(|tx| {
            type Probe = (i64, TaskState, Option<String>, Option<String>);
            let (seq, state, next, summary): Probe = tx
                .query_opt(
                    "SELECT rowid, state, next_attempt_at, summary FROM tasks WHERE id = ?1",
                    params![task_id],
                    |r| {
                        let state = parse_col::<TaskState>(r, 1)?;
                        Ok((r.get(0)?, state, r.get(2)?, r.get(3)?))
                    },
                )?
                .ok_or_else(|| StoreError::NotFound(task_id.to_string()))?;
            let ready = match state {
                TaskState::Discovered => true,
                TaskState::Failed => next.is_some_and(|n| n <= ts(now)),
                _ => false,
            };
            if ready {
                claim_transition(tx, seq, task_id, state, summary.as_deref(), None, now).map(Some)
            } else {
                Ok(None)
            }
        })
    }
}
