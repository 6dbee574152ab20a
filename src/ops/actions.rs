//! What an operator does to one task, from any surface (the CLI, the API, the console):
//! run a waiting task now, hold it, release it — and the record of who did each action
//! (issue 29).
//!
//! Each function checks the task's state, changes it through the store's ordinary calls
//! and returns what changed; the caller wakes the daemon and prints. Every action a
//! surface performs is appended to the task's action log with the actor ([`record`]),
//! so the task page and `status TASK --json` can say who retried or held it.
//!
//! Must not: decide transitions (the store and `domain` do), or take an actor's word for
//! more than a label: the surface authenticated the request before calling.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::{Task, TaskState};
use crate::store::{Store, StoreError};

/// Why an action does not apply to the task as it is (the caller answers 409 / exit 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// An action failed: the task's state forbids it, or the store failed.
#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    #[error("no task `{0}`")]
    NotFound(String),
    #[error(transparent)]
    Refused(#[from] Refused),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What `run_now` changed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RanNow {
    pub task: String,
    pub was_waiting_until: DateTime<Utc>,
    /// (identity, agent) usage limits taken as over.
    pub limits_cleared: Vec<(String, String)>,
}

fn task_of(store: &Store, id: &str) -> Result<Task, ActionError> {
    store
        .get_task(id)?
        .ok_or_else(|| ActionError::NotFound(id.to_string()))
}

/// `retry --now`: a FAILED task waiting for its next attempt (the backoff, a usage limit's
/// reset, a cost ceiling's midnight) is due at once; a usage limit it waits for is taken
/// as over (the operator says the cause is fixed).
pub fn run_now(store: &Store, id: &str, now: DateTime<Utc>) -> Result<RanNow, ActionError> {
    let task = task_of(store, id)?;
    let waiting_until = match (task.state, task.next_attempt_at) {
        (TaskState::Failed, Some(at)) => at,
        (state, _) => {
            return Err(Refused(format!(
                "cannot run {} now: it is {state}{}",
                task.id,
                match state {
                    TaskState::Failed => " with no attempt scheduled (held: release it)",
                    _ => ", not waiting for an attempt",
                }
            ))
            .into())
        }
    };
    let mut cleared = Vec::new();
    if let Some(wait) = store.quota_wait(&task.id)? {
        for reset in &wait.resets {
            store.update_quota(&reset.identity, &reset.agent, |stored| {
                let mut row = stored.unwrap_or_else(|| crate::domain::AgentQuota {
                    identity: reset.identity.clone(),
                    agent: reset.agent.clone(),
                    resets_at: now,
                    reported: false,
                    message: String::new(),
                    task_id: None,
                    attempt: None,
                    hit_at: now,
                });
                row.resets_at = row.resets_at.min(now);
                row
            })?;
            cleared.push((reset.identity.clone(), reset.agent.clone()));
        }
        store.clear_quota_wait(&task.id)?;
    }
    store.set_retry(&task.id, task.failures, Some(now))?;
    Ok(RanNow {
        task: task.id,
        was_waiting_until: waiting_until,
        limits_cleared: cleared,
    })
}

/// Holds a FAILED task waiting for a retry: no attempt is scheduled until it is released
/// (its usage-limit wait, if any, is kept for the record).
pub fn hold(store: &Store, id: &str) -> Result<(), ActionError> {
    let task = task_of(store, id)?;
    match (task.state, task.next_attempt_at) {
        (TaskState::Failed, Some(_)) => Ok(store.set_retry(&task.id, task.failures, None)?),
        (TaskState::Failed, None) => Err(Refused(format!("{} is already held", task.id)).into()),
        (state, _) => Err(Refused(format!(
            "cannot hold {}: it is {state}; only a FAILED task waiting for its next attempt can be held",
            task.id
        ))
        .into()),
    }
}

/// Releases a held FAILED task: its next attempt is due now.
pub fn release(store: &Store, id: &str, now: DateTime<Utc>) -> Result<(), ActionError> {
    let task = task_of(store, id)?;
    match (task.state, task.next_attempt_at) {
        (TaskState::Failed, None) => Ok(store.set_retry(&task.id, task.failures, Some(now))?),
        (state, _) => Err(Refused(format!(
            "cannot release {}: it is {state}{}",
            task.id,
            if state == TaskState::Failed {
                " and not held (it has an attempt scheduled: run it now instead)"
            } else {
                ", not held"
            }
        ))
        .into()),
    }
}

/// One recorded action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionRecord {
    pub at: DateTime<Utc>,
    /// `retry`, `run-now`, `hold`, `release`, `cancel`.
    pub action: String,
    /// Who: the name given at sign-in or in `X-Polyphony-Actor`, and the surface.
    pub by: String,
    /// `console`, `api` or `cli`.
    pub via: String,
    /// The client address, when over HTTP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// What came of it (`ok`, or why it was refused).
    pub outcome: String,
}

impl ActionRecord {
    /// An action taken with the CLI by the user it runs as (`$USER`, else `cli`).
    pub fn cli(action: &str, outcome: impl Into<String>, at: DateTime<Utc>) -> ActionRecord {
        ActionRecord {
            at,
            action: action.into(),
            by: std::env::var("USER")
                .ok()
                .and_then(|u| clean_actor(&u))
                .unwrap_or_else(|| "cli".into()),
            via: "cli".into(),
            from: None,
            outcome: outcome.into(),
        }
    }
}

/// `status TASK --json` and `GET /api/v1/tasks/{id}`: the task in full
/// ([`Store::task_detail_json`]) with each attempt's egress (issue 25) and the task's action
/// log as `actions` (issue 29: who retried, ran, held, released or cancelled it, when, from
/// which surface and what came of it, oldest first).
pub fn task_detail(store: &Store, id: &str) -> Result<Option<serde_json::Value>, StoreError> {
    let Some(mut detail) = store.task_detail_json(id)? else {
        return Ok(None);
    };
    crate::ops::report::add_egress(&mut detail, |n| store.egress_events(id, n))?;
    let log = actions(store, id)?;
    // The task's state as the detail itself read it: no second read of the task.
    let state = detail["task"]["state"]
        .as_str()
        .and_then(|s| s.parse::<TaskState>().ok());
    let claim = match state {
        Some(state) => running_claim(store, id, state)?,
        None => None,
    };
    if let Some(obj) = detail.as_object_mut() {
        obj.insert(
            "actions".into(),
            serde_json::to_value(log).unwrap_or_default(),
        );
        // Issue 27: which machine's daemon holds an active task, from any daemon of the fleet.
        obj.insert(
            "claim".into(),
            claim.map_or(serde_json::Value::Null, |c| {
                serde_json::json!({
                    "machine": c.machine,
                    "owner": c.owner,
                    "lease_until": c.lease_until,
                })
            }),
        );
    }
    Ok(Some(detail))
}

/// The claim of a task with an attempt in flight (CLAIMED … VERIFYING): the machine and
/// daemon that hold it, and its lease. `None` for a task at rest, whose last claim row only
/// says who ran it last, and for a claim written without an owner (`spawn`).
/// `state` is the task's, as the caller already read it.
pub fn running_claim(
    store: &Store,
    id: &str,
    state: TaskState,
) -> Result<Option<crate::store::Claim>, StoreError> {
    if !state.is_active() {
        return Ok(None);
    }
    store.claim_of(id)
}

/// Actions kept per task (the oldest go first).
pub const KEPT: usize = 50;

fn log_key(task_id: &str) -> String {
    format!("actions:{task_id}")
}

/// The task's action log, oldest first.
pub fn actions(store: &Store, task_id: &str) -> Result<Vec<ActionRecord>, StoreError> {
    Ok(store
        .kv_get(&log_key(task_id))?
        .and_then(|v| serde_json::from_str(&v).ok())
        .unwrap_or_default())
}

/// Appends `record` to the task's action log (and the daemon log).
pub fn record(store: &Store, task_id: &str, record: ActionRecord) -> Result<(), StoreError> {
    tracing::info!(
        target: "polyphony::actions",
        task = task_id,
        action = %record.action,
        by = %record.by,
        via = %record.via,
        from = record.from.as_deref().unwrap_or("-"),
        outcome = %record.outcome,
        "operator action"
    );
    let mut log = actions(store, task_id)?;
    let at = record.at;
    log.push(record);
    if log.len() > KEPT {
        log.drain(..log.len() - KEPT);
    }
    let text = serde_json::to_string(&log).unwrap_or_else(|_| "[]".into());
    store.kv_set(&log_key(task_id), &text, at)
}

/// An actor name as given by a person: printable, one line, at most 64 characters
/// (`None` when nothing is left).
pub fn clean_actor(raw: &str) -> Option<String> {
    let name: String = raw
        .chars()
        .filter(|c| !c.is_control())
        .take(64)
        .collect::<String>()
        .trim()
        .to_string();
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::SourceKind;

    fn store_with(state: TaskState, next: Option<DateTime<Utc>>) -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("q.db")).unwrap();
        let now = Utc::now();
        store
            .insert_task(&Task::new(
                "local-1",
                SourceKind::Local,
                "local:local-1",
                "/r",
                "t",
                now,
            ))
            .unwrap();
        let path: &[TaskState] = match state {
            TaskState::Discovered => &[],
            TaskState::Failed => &[TaskState::Claimed, TaskState::Failed],
            _ => unreachable!(),
        };
        let mut from = TaskState::Discovered;
        for s in path {
            store.transition("local-1", from, *s, "test", now).unwrap();
            from = *s;
        }
        store.set_retry("local-1", 1, next).unwrap();
        (dir, store)
    }

    #[test]
    fn run_now_takes_a_waiting_failed_task_only() {
        use chrono::SubsecRound;
        // The store keeps microseconds.
        let later = (Utc::now() + chrono::Duration::minutes(50)).trunc_subsecs(6);
        let (_d, store) = store_with(TaskState::Failed, Some(later));
        let now = Utc::now();
        let done = run_now(&store, "local-1", now).unwrap();
        assert_eq!(done.was_waiting_until, later);
        let t = store.get_task("local-1").unwrap().unwrap();
        assert!(t.next_attempt_at.unwrap() <= now + chrono::Duration::seconds(1));

        let (_d, store) = store_with(TaskState::Discovered, None);
        let e = run_now(&store, "local-1", now).unwrap_err();
        assert!(matches!(e, ActionError::Refused(_)), "{e}");
        assert!(matches!(
            run_now(&store, "nope", now).unwrap_err(),
            ActionError::NotFound(_)
        ));
    }

    #[test]
    fn hold_then_release() {
        let later = Utc::now() + chrono::Duration::minutes(5);
        let (_d, store) = store_with(TaskState::Failed, Some(later));
        // Not held yet: release refuses, hold takes it.
        assert!(matches!(
            release(&store, "local-1", Utc::now()).unwrap_err(),
            ActionError::Refused(_)
        ));
        hold(&store, "local-1").unwrap();
        let t = store.get_task("local-1").unwrap().unwrap();
        assert_eq!(t.next_attempt_at, None);
        assert!(matches!(
            hold(&store, "local-1").unwrap_err(),
            ActionError::Refused(_)
        ));
        // A held task cannot be "run now" (nothing is scheduled), only released.
        assert!(matches!(
            run_now(&store, "local-1", Utc::now()).unwrap_err(),
            ActionError::Refused(_)
        ));
        let now = Utc::now();
        release(&store, "local-1", now).unwrap();
        let t = store.get_task("local-1").unwrap().unwrap();
        assert!(t.next_attempt_at.is_some());
    }

    #[test]
    fn actions_are_recorded_with_the_actor_and_bounded() {
        let (_d, store) = store_with(TaskState::Discovered, None);
        for i in 0..(KEPT + 3) {
            record(
                &store,
                "local-1",
                ActionRecord {
                    at: Utc::now(),
                    action: "hold".into(),
                    by: format!("ana {i}"),
                    via: "console".into(),
                    from: Some("127.0.0.1".into()),
                    outcome: "ok".into(),
                },
            )
            .unwrap();
        }
        let log = actions(&store, "local-1").unwrap();
        assert_eq!(log.len(), KEPT);
        assert_eq!(log.last().unwrap().by, format!("ana {}", KEPT + 2));
        assert!(actions(&store, "other").unwrap().is_empty());
    }

    #[test]
    fn actor_names_are_one_printable_line() {
        assert_eq!(clean_actor("  ana\n\u{7}  ").as_deref(), Some("ana"));
        assert_eq!(clean_actor(" \n "), None);
        assert_eq!(clean_actor(&"x".repeat(100)).unwrap().len(), 64);
    }
}
