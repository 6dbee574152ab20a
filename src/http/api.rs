//! `/api/v1/…` and `/metrics`: JSON with the CLI's shapes (docs/api.md).
//!
//! `GET /tasks` objects are the stored `status --json` summaries, streamed in 64 KiB
//! chunks like the CLI writes them; `GET /tasks/{id}` is `status TASK --json`.

use std::collections::BTreeMap;

use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{Duration as ChronoDuration, Utc};
use serde::Deserialize;
use serde_json::json;

use super::Shared;
use crate::domain::{SourceKind, TaskState};
use crate::store::{Store, StoreError, TaskFilter};

/// Rows `GET /tasks` returns unless `limit` says otherwise (`limit=0`: all).
pub const DEFAULT_PAGE: usize = 100;

/// `{"error": …, "fix": …}` with `status`.
pub fn error_response(status: StatusCode, error: &str, fix: &'static str) -> Response {
    ApiError::new(status, error, fix).into_response()
}

/// A refused or failed request: its status and the `{"error", "fix"}` body.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    error: String,
    fix: &'static str,
}

impl ApiError {
    pub fn new(status: StatusCode, error: &str, fix: &'static str) -> ApiError {
        ApiError::owned(status, error.to_string(), fix)
    }

    pub fn owned(status: StatusCode, error: String, fix: &'static str) -> ApiError {
        ApiError { status, error, fix }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(json!({ "error": self.error, "fix": self.fix })),
        )
            .into_response()
    }
}

/// A query string as `T`, or the `error` naming the parameter that is wrong (an unknown
/// one, or the one whose value does not parse).
pub fn parse_query<T: serde::de::DeserializeOwned>(raw: Option<&str>) -> Result<T, String> {
    let raw = raw.unwrap_or("");
    let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(raw.as_bytes()));
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        if path == "." || path.is_empty() {
            format!("bad query parameter: {}", e.inner())
        } else {
            format!("bad query parameter `{path}`: {}", e.inner())
        }
    })
}

fn store_failure(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        &format!("the queue cannot be read: {e}"),
        "run `polyphony doctor` on the host",
    )
}

/// Runs `f` with a fresh store connection on the blocking pool.
async fn with_store<T: Send + 'static>(
    db: crate::store::StoreHandle,
    f: impl FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, ApiError> {
    let joined = tokio::task::spawn_blocking(move || {
        let store = db.open()?;
        f(&store)
    })
    .await;
    match joined {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(store_failure(e)),
        Err(e) => Err(store_failure(e)),
    }
}

pub async fn health(State(s): State<Shared>) -> Response {
    match with_store(s.db.clone(), |store| store.schema_version()).await {
        Ok(schema) => Json(json!({
            "status": "ok",
            "version": env!("CARGO_PKG_VERSION"),
            "schema_version": schema,
        }))
        .into_response(),
        Err(r) => r.into_response(),
    }
}

pub async fn metrics(State(s): State<Shared>) -> Response {
    match with_store(s.db.clone(), |store| store.count_by_state()).await {
        Ok(counts) => (
            [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
            crate::metrics::render(&counts),
        )
            .into_response(),
        Err(r) => r.into_response(),
    }
}

/// Query of `GET /tasks`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    state: Option<String>,
    source: Option<String>,
    agent: Option<String>,
    limit: Option<usize>,
    offset: Option<usize>,
}

/// The filter a query asks for, or the 400 naming the bad parameter.
fn filter_of(q: &ListQuery) -> Result<TaskFilter, ApiError> {
    let state = match &q.state {
        Some(s) => Some(s.to_ascii_uppercase().parse::<TaskState>().map_err(|_| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                &format!("`state={s}` is not a task state"),
                "use one of DISCOVERED, CLAIMED, ROUTED, PROVISIONED, RUNNING, VERIFYING, LANDED, FAILED, BLOCKED",
            )
        })?),
        None => None,
    };
    let source = match q.source.as_deref() {
        Some("local") => Some(SourceKind::Local),
        Some("github") => Some(SourceKind::Github),
        Some(other) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                &format!("`source={other}` is not a source"),
                "use `local` or `github`",
            ))
        }
        None => None,
    };
    Ok(TaskFilter {
        state,
        source,
        agent: q.agent.clone(),
    })
}

/// Why a streamed listing stopped early.
enum Stop {
    Store(StoreError),
    /// The client went away.
    Closed,
}

impl From<StoreError> for Stop {
    fn from(e: StoreError) -> Stop {
        Stop::Store(e)
    }
}

pub async fn list_tasks(State(s): State<Shared>, RawQuery(raw): RawQuery) -> Response {
    let q: ListQuery = match parse_query(raw.as_deref()) {
        Ok(q) => q,
        Err(error) => {
            return ApiError::owned(
                StatusCode::BAD_REQUEST,
                error,
                "use state, source, agent, limit and offset (e.g. ?state=RUNNING&limit=50)",
            )
            .into_response()
        }
    };
    let filter = match filter_of(&q) {
        Ok(f) => f,
        Err(r) => return r.into_response(),
    };
    let limit = match q.limit.unwrap_or(DEFAULT_PAGE) {
        0 => None,
        n => Some(n),
    };
    let offset = q.offset.unwrap_or(0);
    // Open (and fail) before the status line is sent; then stream.
    let db = s.db.clone();
    let store = match tokio::task::spawn_blocking(move || db.open()).await {
        Ok(Ok(store)) => store,
        Ok(Err(e)) => return store_failure(e).into_response(),
        Err(e) => return store_failure(e).into_response(),
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    tokio::task::spawn_blocking(move || {
        const CHUNK: usize = 1 << 16;
        let mut buf = Vec::with_capacity(CHUNK + 1024);
        buf.push(b'[');
        let mut first = true;
        let send = |buf: &mut Vec<u8>| -> Result<(), Stop> {
            let chunk = Bytes::from(std::mem::replace(buf, Vec::with_capacity(CHUNK + 1024)));
            tx.blocking_send(Ok(chunk)).map_err(|_| Stop::Closed)
        };
        let walked = store.for_each_summary_json_page(&filter, limit, offset, |json| {
            if !first {
                buf.push(b',');
            }
            first = false;
            buf.extend_from_slice(json);
            if buf.len() >= CHUNK {
                send(&mut buf)?;
            }
            Ok::<(), Stop>(())
        });
        match walked {
            Ok(()) => {
                buf.extend_from_slice(b"]\n");
                let _ = send(&mut buf);
            }
            Err(Stop::Closed) => {}
            Err(Stop::Store(e)) => {
                // The status line is gone: cut the body so the client sees an error.
                let _ = tx.blocking_send(Err(std::io::Error::other(e.to_string())));
            }
        }
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(body),
    )
        .into_response()
}

fn not_found(id: &str) -> Response {
    error_response(
        StatusCode::NOT_FOUND,
        &format!("no task `{id}`"),
        "GET /api/v1/tasks lists task ids (encode `/` and `#` in an id as %2F and %23)",
    )
}

pub async fn show_task(State(s): State<Shared>, Path(id): Path<String>) -> Response {
    let wanted = id.clone();
    let read = move |store: &Store| -> Result<Option<serde_json::Value>, StoreError> {
        // Issue 25: each attempt's egress (`attempts[].egress`); issue 29: `actions`.
        crate::ops::actions::task_detail(store, &wanted)
    };
    match with_store(s.db.clone(), read).await {
        Ok(Some(detail)) => Json(detail).into_response(),
        Ok(None) => not_found(&id),
        Err(r) => r.into_response(),
    }
}

/// `GET /state`: the daemon's slots, running attempts, tasks waiting on a retry or held,
/// counts by state, each identity's cost today against its ceiling, the (identity,
/// agent) pairs out of quota (issue 14), and the disk the home used at the daemon's last
/// retention sweep (issue 24; `null` before the first).
pub async fn daemon_state(State(s): State<Shared>) -> Response {
    let identities = s.identities.clone();
    let slots = s.slots;
    let read = with_store(s.db.clone(), move |store| {
        let running = store.running_attempts()?;
        let counts = store.count_by_state()?;
        let failed = store.list_tasks(Some(TaskState::Failed), Some(1000))?;
        let midnight = Utc::now()
            .date_naive()
            .and_hms_opt(0, 0, 0)
            .map(|m| m.and_utc())
            .unwrap_or_else(|| Utc::now() - ChronoDuration::days(1));
        let mut spend = Vec::new();
        for (name, ceiling) in &identities {
            spend.push(json!({
                "identity": name,
                "cost_today_usd": store.cost_spent_since(name, midnight)?,
                "cost_ceiling_usd_per_day": ceiling,
            }));
        }
        let quota = store.quota_out(Utc::now())?;
        let waits = store.quota_waits()?;
        let disk = store.disk_usage()?;
        Ok((running, counts, failed, spend, quota, waits, disk))
    })
    .await;
    let (running, counts, failed, spend, quota, waits, disk) = match read {
        Ok(v) => v,
        Err(r) => return r.into_response(),
    };
    let parked: Vec<_> = failed
        .iter()
        .map(|t| {
            json!({
                "task_id": t.id,
                "title": t.title,
                "failures": t.failures,
                "next_attempt_at": t.next_attempt_at,
                "held": t.next_attempt_at.is_none(),
                "quota_wait": waits.get(&t.id),
            })
        })
        .collect();
    let counts: BTreeMap<&str, u64> = counts.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    Json(json!({
        "slots": { "max": slots, "busy": running.len() },
        "running": running,
        "parked": parked,
        "counts": counts,
        "identities": spend,
        "quota": quota,
        "disk": disk,
        "now": Utc::now(),
    }))
    .into_response()
}

/// `POST /api/v1/tasks`: `polyphony enqueue` over HTTP. The body is a JSON object
/// (`repo`, `title`, optional `base`, `type`, `risk`, `scope`, `labels`, `body`,
/// `requires_web`, `no_check`), checked exactly as the CLI checks its flags; `201
/// {"id": …}` when stored, `400 {"error", "fix"}` naming the field otherwise.
pub async fn enqueue(State(s): State<Shared>, body: Bytes) -> Response {
    use crate::sources::intake::{self, NewTask, Surface};
    let new: NewTask = match serde_json::from_slice(&body) {
        Ok(new) => new,
        Err(e) => {
            return ApiError::new(
                StatusCode::BAD_REQUEST,
                &format!("the body is not a task: {e}"),
                "send a JSON object with at least `repo` and `title` (docs/api.md)",
            )
            .into_response()
        }
    };
    let (db, limit, machine) = (s.db.clone(), s.body_limit, s.machine.clone());
    let stored = tokio::task::spawn_blocking(move || {
        let new = intake::check(new, limit, Surface::Api)
            .map_err(|r| (StatusCode::BAD_REQUEST, r.message, r.fix))?;
        let store = db.open().map_err(|e| {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                e.to_string(),
                "run `polyphony doctor` on the host".to_string(),
            )
        })?;
        intake::store(&store, new, &machine, Utc::now()).map_err(|e| {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                e.to_string(),
                "run `polyphony doctor` on the host".to_string(),
            )
        })
    })
    .await;
    match stored {
        Ok(Ok(task)) => {
            crate::orchestrator::daemon::wake(&s.home);
            (StatusCode::CREATED, Json(json!({ "id": task.id }))).into_response()
        }
        Ok(Err((status, error, fix))) => {
            (status, Json(json!({ "error": error, "fix": fix }))).into_response()
        }
        Err(e) => store_failure(e).into_response(),
    }
}
