//! The operator's actions over HTTP — retry, run now, hold, release, cancel — shared by the API
//! (`POST /api/v1/tasks/{id}/{verb}`, bearer token) and the console's forms (session
//! cookie + CSRF value). Each goes through the library call the CLI uses
//! (`generation::retry`, `ops::actions`), is recorded in the task's action log with who
//! asked, and wakes the daemon.

use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use chrono::Utc;
use serde_json::json;

use super::api::ApiError;
use super::Shared;
use crate::ops::actions::{self, ActionError, ActionRecord};

/// Whether `cancel` can be sent from here (`orchestrator::cancel`, the `cancel TASK` verb).
pub const CANCEL_AVAILABLE: bool = true;

/// How long a cancel waits for a running attempt to stop before answering 202.
const CANCEL_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// An action's name in paths and the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Retry,
    RunNow,
    Hold,
    Release,
    Cancel,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Retry => "retry",
            Verb::RunNow => "run-now",
            Verb::Hold => "hold",
            Verb::Release => "release",
            Verb::Cancel => "cancel",
        }
    }
}

impl std::str::FromStr for Verb {
    type Err = ();
    fn from_str(s: &str) -> Result<Verb, ()> {
        [
            Verb::Retry,
            Verb::RunNow,
            Verb::Hold,
            Verb::Release,
            Verb::Cancel,
        ]
        .into_iter()
        .find(|v| v.as_str() == s)
        .ok_or(())
    }
}

/// Who asked, as recorded.
#[derive(Debug, Clone)]
pub struct Actor {
    pub by: String,
    pub via: &'static str,
    pub from: Option<String>,
}

/// What an action did: the JSON answer and one line for people.
#[derive(Debug, Clone)]
pub struct Done {
    pub json: serde_json::Value,
    pub message: String,
}

/// Why an action was not done.
#[derive(Debug)]
pub enum ActFailure {
    NotFound(String),
    /// The task's state forbids it (409).
    Refused(String),
    /// The store or the configuration cannot be read (503).
    Unavailable(String),
}

impl ActFailure {
    pub fn status_and_text(&self) -> (StatusCode, String) {
        match self {
            ActFailure::NotFound(id) => (StatusCode::NOT_FOUND, format!("no task `{id}`")),
            ActFailure::Refused(why) => (StatusCode::CONFLICT, why.clone()),
            ActFailure::Unavailable(why) => (StatusCode::SERVICE_UNAVAILABLE, why.clone()),
        }
    }
}

/// Does `verb` to task `id` for `actor`, records it, and wakes the daemon when it did.
pub async fn perform(s: &Shared, verb: Verb, id: &str, actor: &Actor) -> Result<Done, ActFailure> {
    let done = match verb {
        Verb::Retry => retry(s, id).await,
        Verb::Cancel => cancel(s, id, actor).await,
        other => {
            let (db, wanted) = (s.db.clone(), id.to_string());
            let home = s.home.clone();
            tokio::task::spawn_blocking(move || {
                let store = db.open().map_err(|e| ActFailure::Unavailable(e.to_string()))?;
                let now = Utc::now();
                let out = match other {
                    Verb::RunNow => actions::run_now(&store, &wanted, now).map(|r| Done {
                        message: format!(
                            "{} runs now (was waiting until {} UTC){}",
                            r.task,
                            r.was_waiting_until.format("%H:%M"),
                            if r.limits_cleared.is_empty() {
                                String::new()
                            } else {
                                "; the usage limit it waited for is taken as over".into()
                            }
                        ),
                        json: json!({
                            "task": r.task,
                            "was_waiting_until": r.was_waiting_until,
                            "limits_cleared": r.limits_cleared.iter().map(|(i, a)| json!({"identity": i, "agent": a})).collect::<Vec<_>>(),
                            "daemon_running": crate::home::DaemonLock::is_held(&home),
                        }),
                    }),
                    Verb::Hold => actions::hold(&store, &wanted).map(|()| Done {
                        message: format!("{wanted} is held: no attempt until it is released"),
                        json: json!({"task": wanted, "held": true}),
                    }),
                    Verb::Release => actions::release(&store, &wanted, now).map(|()| Done {
                        message: format!("{wanted} is released: its next attempt is due now"),
                        json: json!({"task": wanted, "held": false}),
                    }),
                    Verb::Retry | Verb::Cancel => unreachable!("handled above"),
                };
                out.map_err(|e| match e {
                    ActionError::NotFound(id) => ActFailure::NotFound(id),
                    ActionError::Refused(r) => ActFailure::Refused(r.0),
                    ActionError::Store(e) => ActFailure::Unavailable(e.to_string()),
                })
            })
            .await
            .unwrap_or_else(|e| Err(ActFailure::Unavailable(e.to_string())))
        }
    };
    // The log says what was asked and what came of it, done or refused.
    let outcome = match &done {
        Ok(_) => "ok".to_string(),
        Err(e) => e.status_and_text().1,
    };
    let found = !matches!(done, Err(ActFailure::NotFound(_)));
    if found {
        let (db, task, record) = (
            s.db.clone(),
            id.to_string(),
            ActionRecord {
                at: Utc::now(),
                action: verb.as_str().into(),
                by: actor.by.clone(),
                via: actor.via.into(),
                from: actor.from.clone(),
                outcome,
            },
        );
        let logged = tokio::task::spawn_blocking(move || {
            let store = db.open()?;
            actions::record(&store, &task, record)
        })
        .await;
        if let Ok(Err(e)) = logged {
            tracing::warn!(task = id, "the action was not recorded: {e}");
        }
    }
    if done.is_ok() {
        crate::orchestrator::daemon::wake(&s.home);
    }
    done
}

/// `orchestrator::cancel`, as `polyphony cancel` takes it: a waiting task is CANCELLED at
/// once (its issue told); a running attempt's owner is woken to stop it, and the answer
/// waits up to [`CANCEL_WAIT`] for that (`"pending": true` after, answered 202).
async fn cancel(s: &Shared, id: &str, actor: &Actor) -> Result<Done, ActFailure> {
    use crate::orchestrator::cancel::{self as cancelling, Begun, CancelAnswer, NotCancellable};
    let request = crate::store::CancelRequest {
        by: cancelling::by_whom(&actor.by, actor.via),
        at: Utc::now(),
    };
    // The task's source, as the daemon's configuration names it (a failure to load it
    // leaves the sources to refuse, and the source to be told at the next start).
    let sources = match crate::config::Config::load(&s.home) {
        Ok(config) => crate::sources::for_verb(&config),
        Err(e) => {
            let why = format!("{e:#}");
            crate::sources::Sources::new(move |_| anyhow::anyhow!("{why}"))
        }
    };
    let (db, wanted, req, of) = (
        s.db.clone(),
        id.to_string(),
        request.clone(),
        sources.clone(),
    );
    let begun = tokio::task::spawn_blocking(move || {
        let store = db.open()?;
        cancelling::begin(&store, &of, &wanted, &req)
    })
    .await
    .map_err(|e| ActFailure::Unavailable(e.to_string()))?
    .map_err(|e| ActFailure::Unavailable(format!("{e:#}")))?;
    let answer = |task: &str, state, was, pending| {
        let a = CancelAnswer {
            task: task.to_string(),
            state,
            was,
            by: request.by.clone(),
            pending,
        };
        let message = if pending {
            format!("{task}: cancel recorded; the daemon is stopping its attempt")
        } else {
            format!(
                "{task} is CANCELLED ({}); no failure counted",
                cancelling::reason(&request)
            )
        };
        Done {
            json: serde_json::to_value(&a).unwrap_or_default(),
            message,
        }
    };
    match begun {
        Err(NotCancellable::NotFound(id)) => Err(ActFailure::NotFound(id)),
        Err(why @ NotCancellable::Over { .. }) => {
            Err(ActFailure::Refused(format!("cannot cancel {id}: {why}")))
        }
        Ok(Begun::Settled { task, from }) => {
            // The source is told from here; a failure leaves it for the next start.
            let _ = cancelling::report(&s.db, &sources, &task, Utc::now()).await;
            Ok(answer(&task.id, task.state, from, false))
        }
        Ok(Begun::Requested { state: was }) => {
            crate::orchestrator::daemon::wake(&s.home);
            let ended = if cancelling::owner_runs(&s.home) {
                cancelling::wait_ended(&s.db, id, CANCEL_WAIT)
                    .await
                    .map_err(|e| ActFailure::Unavailable(format!("{e:#}")))?
            } else {
                // No owner: the daemon's next start applies the request.
                None
            };
            match ended {
                Some(t) if t.state == crate::domain::TaskState::Cancelled => {
                    Ok(answer(&t.id, t.state, was, false))
                }
                Some(t) if t.state.is_terminal() => Err(ActFailure::Refused(format!(
                    "{id} ended {} before the cancel took effect",
                    t.state
                ))),
                t => Ok(answer(id, t.map_or(was, |t| t.state), was, true)),
            }
        }
    }
}

/// `generation::retry`: a BLOCKED task comes back as its next generation.
async fn retry(s: &Shared, id: &str) -> Result<Done, ActFailure> {
    use crate::orchestrator::generation;
    let config = crate::config::Config::load(&s.home).map_err(|e| {
        ActFailure::Unavailable(format!(
            "the daemon's configuration does not load: {e} — run `polyphony config check` on the host"
        ))
    })?;
    // The store connection is not `Sync`: the retry runs on a blocking thread of its own,
    // driving its GitHub calls on this runtime.
    let (db, wanted) = (s.db.clone(), id.to_string());
    let handle = tokio::runtime::Handle::current();
    let outcome = tokio::task::spawn_blocking(move || {
        let store = db
            .open()
            .map_err(|e| ActFailure::Unavailable(e.to_string()))?;
        if !matches!(store.get_task(&wanted), Ok(Some(_))) {
            return Err(ActFailure::NotFound(wanted));
        }
        handle.block_on(async {
            let sources = crate::sources::for_verb(&config);
            match generation::retry(&store, &sources, &wanted, Utc::now()).await {
                Ok(Ok(done)) => Ok(done),
                Ok(Err(why)) => Err(ActFailure::Refused(format!(
                    "cannot retry {wanted}: {}",
                    why.0
                ))),
                Err(e) => Err(ActFailure::Unavailable(format!("{e:#}"))),
            }
        })
    })
    .await
    .unwrap_or_else(|e| Err(ActFailure::Unavailable(e.to_string())))?;
    Ok(Done {
        message: format!(
            "{} is back as {} (generation {}): the daemon takes it",
            outcome.from, outcome.task, outcome.generation
        ),
        json: serde_json::to_value(&outcome).unwrap_or_default(),
    })
}

/// The actor of an API request: `X-Polyphony-Actor` (a label), else `api`.
fn api_actor(headers: &HeaderMap, from: Option<String>) -> Actor {
    let by = headers
        .get("x-polyphony-actor")
        .and_then(|v| v.to_str().ok())
        .and_then(actions::clean_actor)
        .unwrap_or_else(|| "api".into());
    Actor {
        by,
        via: "api",
        from,
    }
}

/// `POST /api/v1/tasks/{id}/{retry,run-now,hold,release,cancel}`: `200` with what changed
/// (`202` for a cancel still being applied), `404`, `409` with why the task's state
/// forbids it.
pub async fn api_action(
    State(s): State<Shared>,
    Path((id, verb)): Path<(String, String)>,
    headers: HeaderMap,
    connect: Option<Extension<ConnectInfo<std::net::SocketAddr>>>,
) -> Response {
    let Ok(verb) = verb.parse::<Verb>() else {
        return ApiError::owned(
            StatusCode::NOT_FOUND,
            format!("no action `{verb}`"),
            "the actions are retry, run-now, hold, release and cancel (docs/api.md)",
        )
        .into_response();
    };
    let actor = api_actor(
        &headers,
        connect.map(|Extension(ConnectInfo(peer))| peer.ip().to_string()),
    );
    match perform(&s, verb, &id, &actor).await {
        // A cancel whose attempt is still being stopped (`CancelAnswer::pending`).
        Ok(done) if done.json["pending"] == serde_json::Value::Bool(true) => {
            (StatusCode::ACCEPTED, Json(done.json)).into_response()
        }
        Ok(done) => Json(done.json).into_response(),
        Err(ActFailure::NotFound(id)) => ApiError::owned(
            StatusCode::NOT_FOUND,
            format!("no task `{id}`"),
            "GET /api/v1/tasks lists task ids (encode `/` and `#` in an id as %2F and %23)",
        )
        .into_response(),
        Err(ActFailure::Refused(why)) => ApiError::owned(
            StatusCode::CONFLICT,
            why,
            "GET /api/v1/tasks/{id} shows its state and generations",
        )
        .into_response(),
        Err(ActFailure::Unavailable(why)) => ApiError::owned(
            StatusCode::SERVICE_UNAVAILABLE,
            why,
            "run `polyphony doctor` on the host",
        )
        .into_response(),
    }
}
