//! A person's cancel of a task (issue 29, `orchestrator::cancel`): the request a running
//! attempt's owner (the daemon, a `spawn`) reads, and the one-transaction settlement
//! `-> CANCELLED`.
//!
//! The request is a `kv` row `cancel_request:<task>` holding who asked and when; the
//! settlement deletes it in the same transaction that moves the task, so a request is
//! pending exactly while the task it names has not ended.

use super::sql::params;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::intents::IntentKind;
use super::{get_task, ts, write_transition, Result, Store, StoreError};
use crate::domain::{Task, TaskState};

const REQUEST_PREFIX: &str = "cancel_request:";
/// The key right after every `cancel_request:` key (`;` follows `:` in ASCII): the range
/// `[REQUEST_PREFIX, REQUEST_END)` is an index scan of `kv`'s primary key.
const REQUEST_END: &str = "cancel_request;";

fn request_key(task_id: &str) -> String {
    format!("{REQUEST_PREFIX}{task_id}")
}

/// Who asked for a cancel, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelRequest {
    /// The person and the surface, e.g. `alice (cli)`, `console (api, 127.0.0.1)`.
    pub by: String,
    pub at: DateTime<Utc>,
}

impl Store {
    /// Records that `by` asked for `task_id` to be cancelled (again: the newest wins).
    pub fn request_cancel(&self, task_id: &str, request: &CancelRequest) -> Result<()> {
        let value = super::to_json("cancel request", request)?;
        self.atomic(|db| {
            self.kv_set(&request_key(task_id), &value, request.at)?;
            // The daemon running it may be on another machine (PostgreSQL; issue 27).
            super::wake::notify(db)
        })
    }

    /// The pending cancel request of `task_id`, if any.
    pub fn cancel_request(&self, task_id: &str) -> Result<Option<CancelRequest>> {
        Ok(self
            .kv_get(&request_key(task_id))?
            .and_then(|v| serde_json::from_str(&v).ok()))
    }

    /// Every pending cancel request, by task id.
    pub fn cancel_requests(&self) -> Result<Vec<(String, CancelRequest)>> {
        let rows = self.db.query_map(
            "SELECT key, value FROM kv WHERE key >= ?1 AND key < ?2",
            params![REQUEST_PREFIX, REQUEST_END],
            |r| Ok((r.get::<String>(0)?, r.get::<String>(1)?)),
        )?;
        let mut out = Vec::new();
        for (key, value) in rows {
            if let (Some(id), Ok(request)) = (
                key.strip_prefix(REQUEST_PREFIX),
                serde_json::from_str(&value),
            ) {
                out.push((id.to_string(), request));
            }
        }
        Ok(out)
    }

    /// Drops the request of a task that ended another way (it landed first).
    pub fn clear_cancel_request(&self, task_id: &str) -> Result<()> {
        self.db.execute(
            "DELETE FROM kv WHERE key = ?1",
            params![request_key(task_id)],
        )?;
        Ok(())
    }

    /// Settles a cancel in ONE transaction: `from -> CANCELLED` with `reason`, no retry
    /// scheduled, the failure count untouched (a cancel is never the agent's failure), any
    /// landing and usage-limit wait over, the request gone and, with `report`, a pending
    /// [`IntentKind::Cancel`] (the source is told and the claim released).
    pub fn settle_cancel(
        &self,
        task_id: &str,
        from: TaskState,
        reason: &str,
        report: bool,
        now: DateTime<Utc>,
    ) -> Result<Task> {
        self.immediate(|tx| {
            let actual = super::current_state(tx, task_id)?;
            if actual != from {
                return Err(StoreError::StaleState {
                    task_id: task_id.to_string(),
                    expected: from,
                    actual,
                });
            }
            tx.execute(
                "UPDATE tasks SET next_attempt_at = NULL WHERE id = ?1",
                params![task_id],
            )?;
            tx.execute(
                "DELETE FROM quota_waits WHERE task_id = ?1",
                params![task_id],
            )?;
            write_transition(tx, task_id, from, TaskState::Cancelled, reason, now)?;
            tx.execute(
                "UPDATE intents SET done_at = ?2 WHERE task_id = ?1 AND kind = 'land' AND done_at IS NULL",
                params![task_id, ts(now)],
            )?;
            tx.execute(
                "DELETE FROM kv WHERE key = ?1",
                params![request_key(task_id)],
            )?;
            if report {
                let attempt: u32 = tx
                    .query_opt(
                        "SELECT attempts FROM tasks WHERE id = ?1",
                        params![task_id],
                        |r| r.get(0),
                    )?
                    .unwrap_or(0);
                let payload = serde_json::json!({ "reason": reason }).to_string();
                tx.execute(
                    "INSERT INTO intents (task_id, kind, attempt, payload, created_at, done_at) \
                     VALUES (?1, ?2, ?3, ?4, ?5, NULL) \
                     ON CONFLICT (task_id, kind, attempt) DO UPDATE SET \
                     payload = excluded.payload, created_at = excluded.created_at, done_at = NULL",
                    params![task_id, IntentKind::Cancel.as_str(), attempt, payload, ts(now)],
                )?;
            }
            get_task(tx, task_id)?.ok_or_else(|| StoreError::NotFound(task_id.to_string()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap()
    }

    #[test]
    fn a_cancel_ends_the_task_without_a_failure_and_leaves_its_report_pending() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("queue.db")).unwrap();
        let task = Task::new(
            "o/r#1",
            crate::domain::SourceKind::Github,
            "o/r#1",
            "r",
            "T",
            t0(),
        );
        store.insert_task(&task).unwrap();
        store.claim("o/r#1", t0()).unwrap().unwrap();
        store
            .transition("o/r#1", TaskState::Claimed, TaskState::Failed, "x", t0())
            .unwrap();
        store.set_retry("o/r#1", 1, Some(t0())).unwrap();
        let request = CancelRequest {
            by: "alice (cli)".into(),
            at: t0(),
        };
        store.request_cancel("o/r#1", &request).unwrap();
        store
            .request_cancel(
                "other",
                &CancelRequest {
                    by: "b".into(),
                    at: t0(),
                },
            )
            .unwrap();
        assert_eq!(
            store.cancel_request("o/r#1").unwrap(),
            Some(request.clone())
        );
        assert_eq!(store.cancel_requests().unwrap().len(), 2);
        // A stale `from` writes nothing.
        let stale = store.settle_cancel("o/r#1", TaskState::Running, "x", true, t0());
        assert!(
            matches!(stale, Err(StoreError::StaleState { .. })),
            "{stale:?}"
        );
        assert_eq!(store.cancel_request("o/r#1").unwrap(), Some(request));
        let done = store
            .settle_cancel(
                "o/r#1",
                TaskState::Failed,
                "cancelled by alice (cli)",
                true,
                t0(),
            )
            .unwrap();
        assert_eq!(done.state, TaskState::Cancelled);
        assert_eq!((done.failures, done.next_attempt_at), (1, None));
        assert_eq!(store.cancel_request("o/r#1").unwrap(), None);
        assert_eq!(store.cancel_requests().unwrap().len(), 1);
        let last = store.transitions("o/r#1").unwrap().pop().unwrap();
        assert_eq!(
            (last.from, last.to, last.reason.as_str()),
            (
                TaskState::Failed,
                TaskState::Cancelled,
                "cancelled by alice (cli)"
            )
        );
        assert!(store
            .has_pending_intent("o/r#1", IntentKind::Cancel)
            .unwrap());
        // Terminal: nothing leaves CANCELLED.
        assert!(store
            .transition("o/r#1", TaskState::Cancelled, TaskState::Claimed, "x", t0())
            .is_err());
        assert_eq!(store.next_retry_at().unwrap(), None);
    }
}
