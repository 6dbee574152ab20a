//! Intents (issue 19): every side effect outside the store — a claim comment and its
//! labels, a container being created, a landing, a blocked report — is written here
//! *before* it is attempted, and marked done once it has happened. Whoever runs next (the
//! daemon's start-up reconciliation, or the task's next attempt) finishes a pending one
//! idempotently instead of guessing from half-written labels or unrecorded containers.
//!
//! Also the one-transaction settlement of an attempt that did not land: FAILED, the
//! failure count, the retry time and, when it gives up, BLOCKED with its pending report,
//! so no kill can leave a task FAILED without a retry time or BLOCKED without a report.
//!
//! Must not: perform the side effect (that is `sources/` and `runtime/`), or decide what
//! follows a failure (that is `orchestrator::retry`).

use super::sql::{params, Db};
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{current_state, get_task, time_col, to_json, ts, write_transition, Result, Store};
use crate::domain::{Task, TaskState};
use crate::store::StoreError;

/// What an intent is about to do at the source or the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IntentKind {
    /// The claim comment and the label swap ready -> claimed of one attempt.
    Claim,
    /// `docker create` of an attempt's agent container (done once its id is recorded).
    Container,
    /// Push, pull request, landed comment and labels of one attempt (done with LANDED).
    Land,
    /// The blocked comment and labels (recorded with BLOCKED, done once reported).
    Block,
    /// The cancelled comment and the claim released (recorded with CANCELLED, done once
    /// the source has it).
    Cancel,
}

impl IntentKind {
    pub const ALL: [IntentKind; 5] = [
        IntentKind::Claim,
        IntentKind::Container,
        IntentKind::Land,
        IntentKind::Block,
        IntentKind::Cancel,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            IntentKind::Claim => "claim",
            IntentKind::Container => "container",
            IntentKind::Land => "land",
            IntentKind::Block => "block",
            IntentKind::Cancel => "cancel",
        }
    }

    fn parse(text: &str) -> Option<IntentKind> {
        IntentKind::ALL.into_iter().find(|k| k.as_str() == text)
    }
}

/// One pending intent.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Intent {
    pub task_id: String,
    pub kind: IntentKind,
    pub attempt: u32,
    /// What the side effect needs to be redone (JSON; secrets never go here).
    pub payload: serde_json::Value,
    pub created_at: DateTime<Utc>,
}

/// What follows an attempt that did not land, written together with FAILED.
#[derive(Debug, Clone, PartialEq)]
pub struct Settlement {
    pub failures: u32,
    /// `None`: no retry is scheduled (held, or blocked).
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub block: Option<BlockSettlement>,
}

/// FAILED -> BLOCKED in the same transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockSettlement {
    pub reason: String,
    /// Record a pending [`IntentKind::Block`] (the task's source wants a report).
    pub report: bool,
    /// The task was released to another Polyphony instance that owns it at the source
    /// (issue 30: recorded as data, read by [`Store::released_at`], never parsed from the
    /// reason).
    pub released: bool,
}

impl Store {
    /// Records that a side effect is about to be attempted. Recording it again (the same
    /// task, kind and attempt) makes it pending again with the new payload.
    pub fn record_intent(
        &self,
        task_id: &str,
        kind: IntentKind,
        attempt: u32,
        payload: &serde_json::Value,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let payload = to_json("intent payload", payload)?;
        self.db.execute(
            "INSERT INTO intents (task_id, kind, attempt, payload, created_at, done_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, NULL) \
             ON CONFLICT (task_id, kind, attempt) DO UPDATE SET payload = excluded.payload, \
             created_at = excluded.created_at, done_at = NULL",
            params![task_id, kind.as_str(), attempt, payload, ts(now)],
        )?;
        Ok(())
    }

    /// Marks an intent done. Returns `false` when none was pending.
    pub fn complete_intent(
        &self,
        task_id: &str,
        kind: IntentKind,
        attempt: u32,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        complete_in(&self.db, task_id, kind, attempt, now)
    }

    /// Whether the task has a pending intent of `kind` (any attempt).
    pub fn has_pending_intent(&self, task_id: &str, kind: IntentKind) -> Result<bool> {
        self.db.query_row(
            "SELECT EXISTS (SELECT 1 FROM intents WHERE task_id = ?1 AND kind = ?2 AND done_at IS NULL)",
            params![task_id, kind.as_str()],
            |r| r.get(0),
        )
    }

    /// The pending intent of `kind` for one attempt, if any (its payload says how to
    /// finish it).
    pub fn pending_intent(
        &self,
        task_id: &str,
        kind: IntentKind,
        attempt: u32,
    ) -> Result<Option<Intent>> {
        Ok(self
            .pending_intents()?
            .into_iter()
            .find(|i| i.task_id == task_id && i.kind == kind && i.attempt == attempt))
    }

    /// Every pending intent, oldest first.
    pub fn pending_intents(&self) -> Result<Vec<Intent>> {
        let rows = self.db.query_map(
            "SELECT task_id, kind, attempt, payload, created_at FROM intents \
             WHERE done_at IS NULL ORDER BY created_at, task_id",
            params![],
            |r| {
                let kind: String = r.get(1)?;
                let payload: String = r.get(3)?;
                Ok((
                    r.get::<String>(0)?,
                    kind,
                    r.get::<u32>(2)?,
                    payload,
                    time_col(r, 4)?,
                ))
            },
        )?;
        let mut out = Vec::new();
        for row in rows {
            let (task_id, kind, attempt, payload, created_at) = row;
            let kind = IntentKind::parse(&kind)
                .ok_or_else(|| StoreError::Corrupt(format!("intent kind `{kind}`")))?;
            let payload = serde_json::from_str(&payload)
                .map_err(|e| StoreError::Corrupt(format!("intent payload: {e}")))?;
            out.push(Intent {
                task_id,
                kind,
                attempt,
                payload,
                created_at,
            });
        }
        Ok(out)
    }

    /// Records the container running an attempt (so recovery can find it) and, in the
    /// same transaction, completes the attempt's [`IntentKind::Container`].
    pub fn set_container(&self, task_id: &str, attempt: u32, container_id: &str) -> Result<()> {
        self.immediate(|tx| {
            let changed = tx.execute(
                "UPDATE attempts SET container_id = ?3 WHERE task_id = ?1 AND attempt = ?2",
                params![task_id, attempt, container_id],
            )?;
            if changed == 0 {
                return Err(StoreError::AttemptNotFound {
                    task_id: task_id.to_string(),
                    attempt,
                });
            }
            complete_in(tx, task_id, IntentKind::Container, attempt, Utc::now())?;
            Ok(())
        })
    }

    /// `expected_from -> to` and, in the same transaction, the completion of an intent
    /// (LANDED completes the landing: a LANDED task never has a pending land intent).
    pub fn transition_completing(
        &self,
        task_id: &str,
        expected_from: TaskState,
        to: TaskState,
        reason: &str,
        intent: (IntentKind, u32),
        now: DateTime<Utc>,
    ) -> Result<Task> {
        self.immediate(|tx| {
            check_state(tx, task_id, expected_from)?;
            write_transition(tx, task_id, expected_from, to, reason, now)?;
            complete_in(tx, task_id, intent.0, intent.1, now)?;
            get_task(tx, task_id)?.ok_or_else(|| StoreError::NotFound(task_id.to_string()))
        })
    }

    /// [`Store::settle_failure`] with the attempt's result (`finish_attempt`) in the same
    /// transaction: a kill between the two can no longer leave an attempt recorded as failed
    /// on a task whose failure was never counted (the next daemon then took it for an
    /// interruption and gave the task one attempt more than `max_attempts`).
    pub fn settle_attempt_failure(
        &self,
        attempt: (&crate::domain::RunResult, &[crate::domain::CheckEvidence]),
        from: TaskState,
        reason: &str,
        settlement: &Settlement,
        now: DateTime<Utc>,
    ) -> Result<Task> {
        let (result, evidence) = attempt;
        self.immediate(|_| {
            self.finish_attempt(result, evidence, now)?;
            self.settle_failure(&result.task_id, from, reason, settlement, now)
        })
    }

    /// Settles an attempt that did not land, in ONE transaction: `from -> FAILED` (unless
    /// the task is FAILED already), the failure count and retry time, and with `block`
    /// FAILED -> BLOCKED plus the pending blocked report. A kill can never leave a task
    /// FAILED without its retry time, or BLOCKED without a report to finish.
    pub fn settle_failure(
        &self,
        task_id: &str,
        from: TaskState,
        reason: &str,
        settlement: &Settlement,
        now: DateTime<Utc>,
    ) -> Result<Task> {
        self.atomic(|tx| {
            check_state(tx, task_id, from)?;
            if from != TaskState::Failed {
                write_transition(tx, task_id, from, TaskState::Failed, reason, now)?;
            }
            let next = match settlement.block {
                Some(_) => None,
                None => settlement.next_attempt_at.map(ts),
            };
            tx.execute(
                "UPDATE tasks SET failures = ?2, next_attempt_at = ?3 WHERE id = ?1",
                params![task_id, settlement.failures, next],
            )?;
            super::refresh_summary(tx, task_id)?;
            // A failed attempt lands nothing more: its landing is over.
            tx.execute(
                "UPDATE intents SET done_at = ?2 WHERE task_id = ?1 AND kind = 'land' AND done_at IS NULL",
                params![task_id, ts(now)],
            )?;
            if let Some(block) = &settlement.block {
                write_transition(
                    tx,
                    task_id,
                    TaskState::Failed,
                    TaskState::Blocked,
                    &block.reason,
                    now,
                )?;
                if block.released {
                    tx.execute(
                        "INSERT INTO kv (key, value, updated_at) VALUES (?1, ?2, ?2) \
                         ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
                        params![super::generations::released_key(task_id), ts(now)],
                    )?;
                }
                if block.report {
                    let attempt: u32 = tx.query_row(
                        "SELECT attempts FROM tasks WHERE id = ?1",
                        params![task_id],
                        |r| r.get(0),
                    )?;
                    tx.execute(
                        "INSERT INTO intents (task_id, kind, attempt, payload, created_at, done_at) \
                         VALUES (?1, ?2, ?3, '{}', ?4, NULL) \
                         ON CONFLICT (task_id, kind, attempt) DO UPDATE SET \
                         created_at = excluded.created_at, done_at = NULL",
                        params![task_id, IntentKind::Block.as_str(), attempt, ts(now)],
                    )?;
                }
            }
            get_task(tx, task_id)?.ok_or_else(|| StoreError::NotFound(task_id.to_string()))
        })
    }
}

fn check_state(conn: &Db, task_id: &str, expected: TaskState) -> Result<()> {
    let actual = current_state(conn, task_id)?;
    if actual != expected {
        return Err(StoreError::StaleState {
            task_id: task_id.to_string(),
            expected,
            actual,
        });
    }
    Ok(())
}

fn complete_in(
    conn: &Db,
    task_id: &str,
    kind: IntentKind,
    attempt: u32,
    now: DateTime<Utc>,
) -> Result<bool> {
    let n = conn.execute(
        "UPDATE intents SET done_at = ?4 WHERE task_id = ?1 AND kind = ?2 AND attempt = ?3 \
         AND done_at IS NULL",
        params![task_id, kind.as_str(), attempt, ts(now)],
    )?;
    Ok(n == 1)
}
