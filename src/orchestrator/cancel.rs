//! A person's cancel of a task (issue 29): `polyphony cancel TASK` and its API twin
//! `POST /api/v1/tasks/{id}/cancel` take the same steps, here.
//!
//! - A task no attempt runs for (DISCOVERED, or FAILED waiting for its next attempt) is
//!   moved to CANCELLED at once, in the store's one transaction that also checks it is
//!   still in that state ([`Store::settle_cancel`]); a claim racing it makes that fail and
//!   the cancel goes the running way instead.
//! - A running attempt is stopped by its owner: the request is recorded
//!   ([`Store::request_cancel`]) and the owner (the daemon, or a `spawn` in the
//!   foreground, both listening on `daemon.sock`) is woken. The owner stops the attempt
//!   (its container is killed as a deadline would kill it) and the pipeline's conclusion,
//!   reading the request, settles CANCELLED instead of a failure.
//! - With no owner (no daemon runs; the task was left mid-attempt by a stopped daemon),
//!   the caller takes the home's daemon lock and does it itself ([`cancel_unowned`]): the
//!   task's containers and networks removed, its attempt closed, CANCELLED.
//!
//! A cancel never counts a failure. A task whose source reports back (a GitHub issue) is
//! told who cancelled it and its claim released ([`Source::cancelled`]: on GitHub the
//! claimed and ready labels off), through a pending [`IntentKind::Cancel`] that the next
//! start finishes when the source did not answer.
//! `polyphony retry` brings a CANCELLED task back as its next generation.
//!
//! Must not: name a tracker (the task's source is asked through [`Sources`]), decide
//! transitions (the store checks the state machine), or kill anything of another task or
//! home (containers are found by this home's and this task's labels).
//!
//! [`Source::cancelled`]: crate::sources::Source::cancelled

use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::domain::{AttemptStatus, RunResult, Task, TaskState};
use crate::runtime::{WorkerRuntime, LABEL_HOME, LABEL_TASK};
use crate::sources::Sources;
use crate::store::{CancelRequest, IntentKind, Store, StoreError};

/// Why a task cannot be cancelled (exit 2, HTTP 404/409).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotCancellable {
    #[error("no task `{0}`")]
    NotFound(String),
    /// LANDED, BLOCKED or CANCELLED already: nothing runs.
    #[error("{id} is already {state}: there is nothing to cancel")]
    Over { id: String, state: TaskState },
}

/// What [`begin`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Begun {
    /// CANCELLED now (no attempt was running); the source is still to be told
    /// ([`report`]).
    Settled { task: Box<Task>, from: TaskState },
    /// An attempt runs (state `state`): the request is recorded for its owner.
    Requested { state: TaskState },
}

/// The answer of `cancel --json` and of the API (fields only added).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CancelAnswer {
    pub task: String,
    /// The state now: CANCELLED, or where it still is (`pending`) or ended otherwise.
    pub state: TaskState,
    /// The state it was cancelled from (or was in when asked).
    pub was: TaskState,
    pub by: String,
    /// The cancel is recorded but the task has not ended yet (its owner is stopping it).
    pub pending: bool,
}

/// Who cancels, as recorded: the name a person gave (one printable line, at most 64
/// characters; "someone" when empty) and the surface, e.g. `alice (cli)`.
pub fn by_whom(name: &str, surface: &str) -> String {
    let line = name.lines().next().unwrap_or("");
    let clean = crate::domain::terminal::printable(line);
    let name: String = clean.trim().chars().take(64).collect();
    match name.as_str() {
        "" => format!("someone ({surface})"),
        // The surface's own default actor (`api`): said once.
        same if same == surface => surface.to_string(),
        name => format!("{name} ({surface})"),
    }
}

/// The transition reason and attempt reason a cancel records.
pub fn reason(request: &CancelRequest) -> String {
    format!("cancelled by {}", request.by)
}

/// Whether the task's source wants to be told ([`Source::reports_back`]; a source not
/// configured here is told at a later start; a follow-up's pull request is the shepherd's).
///
/// [`Source::reports_back`]: crate::sources::Source::reports_back
fn reports(store: &Store, sources: &Sources, task: &Task) -> Result<bool, StoreError> {
    let reports_back = sources.of(task).map_or(true, |s| s.reports_back());
    Ok(reports_back && store.followup(&task.id)?.is_none())
}

/// The first step, for every surface: settles a task no attempt runs for, or records the
/// request for the running attempt's owner.
pub fn begin(
    store: &Store,
    sources: &Sources,
    id: &str,
    request: &CancelRequest,
) -> anyhow::Result<Result<Begun, NotCancellable>> {
    let Some(task) = store.get_task(id)? else {
        return Ok(Err(NotCancellable::NotFound(id.to_string())));
    };
    if task.state.is_terminal() {
        return Ok(Err(NotCancellable::Over {
            id: task.id,
            state: task.state,
        }));
    }
    if !task.state.is_active() {
        let report = reports(store, sources, &task)?;
        match store.settle_cancel(&task.id, task.state, &reason(request), report, request.at) {
            Ok(settled) => {
                tracing::info!(task = %task.id, from = %task.state, by = %request.by, "cancelled");
                return Ok(Ok(Begun::Settled {
                    task: Box::new(settled),
                    from: task.state,
                }));
            }
            // Claimed meanwhile: it runs now, so its owner stops it.
            Err(StoreError::StaleState { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    store.request_cancel(&task.id, request)?;
    let state = store.get_task(&task.id)?.map_or(task.state, |t| t.state);
    if state.is_terminal() {
        // It ended between the two reads: the request is moot.
        store.clear_cancel_request(&task.id)?;
        return Ok(Err(NotCancellable::Over { id: task.id, state }));
    }
    Ok(Ok(Begun::Requested { state }))
}

/// Whether a process owns the home's tasks (a daemon or a `spawn`): it applies requests.
pub fn owner_runs(home: &Path) -> bool {
    crate::home::DaemonLock::is_held(home)
}

/// Waits until `id` has ended (any terminal state) or `timeout` passed; the task as it is
/// then.
pub async fn wait_ended(
    db: &crate::store::StoreHandle,
    id: &str,
    timeout: Duration,
) -> anyhow::Result<Option<Task>> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let task = db.open()?.get_task(id)?;
        let ended = task.as_ref().is_none_or(|t| t.state.is_terminal());
        if ended || tokio::time::Instant::now() >= deadline {
            return Ok(task);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Tells the source a CANCELLED task was cancelled and releases its claim
/// ([`Source::cancelled`]), when its [`IntentKind::Cancel`] is pending; `true` once done
/// (or nothing to do). When the task's source is not configured here, or does not answer,
/// the intent stays for the next start.
///
/// Takes the store's handle, not a [`Store`]: no connection is held across the source's
/// calls (the attempt futures that call this must be `Send`).
///
/// [`Source::cancelled`]: crate::sources::Source::cancelled
pub async fn report(
    db: &crate::store::StoreHandle,
    sources: &Sources,
    task: &Task,
    now: DateTime<Utc>,
) -> anyhow::Result<bool> {
    let pending = db
        .open()?
        .pending_intent(&task.id, IntentKind::Cancel, task.attempts)?;
    let Some(intent) = pending else {
        return Ok(true);
    };
    let reason = intent.payload["reason"]
        .as_str()
        .unwrap_or("cancelled")
        .to_string();
    let source = match sources.of(task) {
        Ok(source) => source,
        Err(why) => {
            tracing::warn!(task = %task.id, source = task.source.title(), "cannot tell the source about the cancel now ({why:#}); the next start does");
            return Ok(false);
        }
    };
    match source.cancelled(task, &reason).await {
        Ok(_) => {
            // The ready label is off by us from now on: a person putting it back brings the
            // task back (`orchestrator::generation::reopen_if_relabelled`).
            let store = db.open()?;
            store.mark_block_reported(&task.id, now)?;
            store.complete_intent(&task.id, IntentKind::Cancel, intent.attempt, now)?;
            Ok(true)
        }
        Err(e) => {
            tracing::warn!(task = %task.id, source = source.name(), error = %e, "cannot tell the source about the cancel; the next start retries");
            Ok(false)
        }
    }
}

/// Cancels a task whose attempt no process runs (no daemon, no `spawn`): call with the
/// home's daemon lock held. Removes every container and network of the task in this
/// home, closes its open attempt as cancelled, and settles CANCELLED from where it is.
/// Returns the task and the state it was in, or `None` when it had ended meanwhile.
pub async fn cancel_unowned(
    store: &Store,
    sources: &Sources,
    runtime: &dyn WorkerRuntime,
    home_label: &str,
    id: &str,
    request: &CancelRequest,
    now: DateTime<Utc>,
) -> anyhow::Result<Option<(Task, TaskState)>> {
    let Some(task) = store.get_task(id)? else {
        return Ok(None);
    };
    if task.state.is_terminal() {
        store.clear_cancel_request(id)?;
        return Ok(None);
    }
    stop_containers(runtime, home_label, id).await?;
    let why = reason(request);
    if let Some(r) = store
        .attempt(id, task.attempts)?
        .filter(|r| r.status.is_none())
    {
        let result = RunResult {
            duration_seconds: (now - r.started_at).num_milliseconds().max(0) as f64 / 1000.0,
            reason: Some(why.clone()),
            events: store.event_count(id, r.attempt)?,
            ..RunResult::new(id, r.attempt, &r.agent, AttemptStatus::Cancelled)
        };
        let gate = super::proof::result_gate(AttemptStatus::Cancelled, result.reason.as_deref());
        store.finish_attempt(&result, &[gate], now)?;
    }
    let report = reports(store, sources, &task)?;
    let settled = store.settle_cancel(id, task.state, &why, report, now)?;
    tracing::info!(task = %id, from = %task.state, by = %request.by, "cancelled");
    Ok(Some((settled, task.state)))
}

/// Kills and removes every container (agent, egress proxy, checks) and network of `task`
/// in this home.
pub async fn stop_containers(
    runtime: &dyn WorkerRuntime,
    home_label: &str,
    task: &str,
) -> anyhow::Result<usize> {
    let labels = vec![
        (LABEL_HOME.to_string(), home_label.to_string()),
        (LABEL_TASK.to_string(), task.to_string()),
    ];
    let containers = runtime.list_by_labels(&labels).await?;
    for c in &containers {
        let _ = runtime.kill(&c.id).await;
        runtime.remove(&c.id).await?;
    }
    for n in runtime.list_networks(&labels).await.unwrap_or_default() {
        if let Err(e) = runtime.remove_network(&n.name).await {
            tracing::warn!(network = %n.name, error = %e, "cannot remove a cancelled task's network");
        }
    }
    Ok(containers.len())
}
