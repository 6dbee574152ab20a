//! `GET /api/v1/tasks/{id}/events[?attempt=N]`: an attempt's events as Server-Sent Events,
//! live as the pipeline stores them.
//!
//! Each event's `id` is its `seq` and its `data` the `logs --json` object, so a client that
//! reconnects with `Last-Event-ID: N` (browsers do it themselves) resumes after `seq` N
//! with nothing lost or repeated. The stream ends once the attempt has ended and every
//! stored event was sent; it reads the store (not the pipeline's memory), so it works for
//! attempts run by any process sharing the home.

use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::api::error_response;
use super::Shared;
use crate::ops::report::EventJson;
use crate::store::Store;

/// How often a live attempt's new events are looked for.
const POLL: Duration = Duration::from_millis(200);
/// Events read per store query.
const BATCH: usize = 500;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    attempt: Option<u32>,
}

/// Where a stream stands between two reads.
struct Cursor {
    db: std::path::PathBuf,
    task: String,
    attempt: u32,
    after: Option<u64>,
    pending: std::collections::VecDeque<Event>,
    done: bool,
}

/// One read: the next events after the cursor and whether the attempt has ended.
fn read(
    db: &std::path::Path,
    task: &str,
    attempt: u32,
    after: Option<u64>,
) -> Result<(Vec<(u64, String)>, bool), String> {
    let store = Store::open(db).map_err(|e| e.to_string())?;
    // Ended is read first: events stored before the end are then all in this read or the
    // next, never skipped.
    let ended = store
        .attempt(task, attempt)
        .map_err(|e| e.to_string())?
        .is_none_or(|a| a.status.is_some());
    let events = store
        .events(task, attempt, after, BATCH)
        .map_err(|e| e.to_string())?;
    let lines = events
        .iter()
        .map(|e| {
            let json = serde_json::to_string(&EventJson {
                task,
                attempt,
                event: e,
            })
            .unwrap_or_default();
            (e.seq, json)
        })
        .collect();
    Ok((lines, ended))
}

pub async fn stream(
    State(s): State<Shared>,
    Path(id): Path<String>,
    headers: HeaderMap,
    query: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(q)) = query else {
        return error_response(
            StatusCode::BAD_REQUEST,
            "unknown or malformed query parameter",
            "the only parameter is attempt=N",
        );
    };
    let after = match headers.get("last-event-id").map(|v| v.to_str()) {
        None => None,
        Some(Ok(v)) => match v.trim().parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => {
                return error_response(
                    StatusCode::BAD_REQUEST,
                    &format!("`Last-Event-ID: {v}` is not an event id"),
                    "send the `id` of the last event received (a whole number)",
                )
            }
        },
        Some(Err(_)) => None,
    };
    let db = s.db.clone();
    let task = id.clone();
    let found = tokio::task::spawn_blocking(move || -> Result<_, String> {
        let store = Store::open(&db).map_err(|e| e.to_string())?;
        if store.get_task(&task).map_err(|e| e.to_string())?.is_none() {
            return Ok(None);
        }
        store.latest_attempt(&task).map_err(|e| e.to_string())
    })
    .await;
    let latest = match found {
        Ok(Ok(latest)) => latest,
        Ok(Err(e)) => {
            return error_response(
                StatusCode::SERVICE_UNAVAILABLE,
                &e,
                "run `polyphony doctor`",
            )
        }
        Err(e) => {
            return error_response(
                StatusCode::SERVICE_UNAVAILABLE,
                &e.to_string(),
                "run `polyphony doctor`",
            )
        }
    };
    let Some(attempt) = q.attempt.or(latest) else {
        return error_response(
            StatusCode::NOT_FOUND,
            &format!("task `{id}` has no attempt yet"),
            "retry once the task has started (GET /api/v1/tasks/{id} shows its state)",
        );
    };
    let cursor = Cursor {
        db: s.db.clone(),
        task: id,
        attempt,
        after,
        pending: Default::default(),
        done: false,
    };
    let events = futures_util::stream::unfold(cursor, |mut c| async move {
        loop {
            if let Some(event) = c.pending.pop_front() {
                return Some((Ok::<_, std::convert::Infallible>(event), c));
            }
            if c.done {
                return None;
            }
            let (db, task, attempt, after) = (c.db.clone(), c.task.clone(), c.attempt, c.after);
            let read = tokio::task::spawn_blocking(move || read(&db, &task, attempt, after)).await;
            match read {
                Ok(Ok((lines, ended))) => {
                    let got = lines.len();
                    for (seq, json) in lines {
                        c.after = Some(seq);
                        c.pending.push_back(
                            Event::default()
                                .id(seq.to_string())
                                .event("event")
                                .data(json),
                        );
                    }
                    if ended && got < BATCH {
                        // Everything stored before the end is queued: say so, then stop.
                        c.pending
                            .push_back(Event::default().event("end").data("{\"ended\":true}"));
                        c.done = true;
                    } else if got == 0 {
                        tokio::time::sleep(POLL).await;
                    }
                }
                Ok(Err(e)) => {
                    c.pending.push_back(Event::default().event("error").data(e));
                    c.done = true;
                }
                Err(e) => {
                    c.pending
                        .push_back(Event::default().event("error").data(e.to_string()));
                    c.done = true;
                }
            }
        }
    });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}
