//! `GET /api/v1/tasks/{id}/events[?attempt=N]`: an attempt's events as Server-Sent Events,
//! live as the pipeline stores them.
//!
//! Each event's `id` is its `seq` and its `data` the `logs --json` object, so a client that
//! reconnects with `Last-Event-ID: N` (browsers do it themselves) resumes after `seq` N
//! with nothing lost or repeated. The stream ends once the attempt has ended and every
//! stored event was sent; it reads the store (not the pipeline's memory), so it works for
//! attempts run by any process sharing the home.
//!
//! The [`Hub`] shares one reader per attempt (issue 24: 300 streams each opening SQLite
//! every 200 ms took a core): the reader keeps one connection, polls it, turns each event
//! into its JSON once and keeps the latest [`RECENT`] in memory; every stream of that
//! attempt is woken by it and sends from that buffer. Only a client resuming from before
//! the buffer reads the store itself, until it has caught up. Streams are capped in total
//! and per client address (`http.max_streams`, `http.max_streams_per_client`): one over
//! the cap is `429 {"error", "fix"}` with `Retry-After`.

use crate::store::StoreHandle;
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use axum::extract::{ConnectInfo, Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use serde::Deserialize;
use tokio::sync::watch;

use super::api::{error_response, parse_query, ApiError};
use super::Shared;
use crate::ops::report::EventJson;
use crate::store::Store;

/// How often a live attempt's new events are looked for.
const POLL: Duration = Duration::from_millis(200);
/// Events read per store query.
const BATCH: usize = 500;
/// Events an attempt's reader keeps for its streams.
pub const RECENT: usize = 2_000;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    attempt: Option<u32>,
}

/// How many event streams may be open (`http.max_streams`, `http.max_streams_per_client`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    pub total: u32,
    pub per_client: u32,
}

impl Default for StreamLimits {
    fn default() -> Self {
        let http = crate::config::model::HttpConfig::default();
        StreamLimits {
            total: http.max_streams,
            per_client: http.max_streams_per_client,
        }
    }
}

/// Which cap refused a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Total,
    PerClient,
}

#[derive(Debug, Default)]
struct Open {
    total: u32,
    /// `None`: a client whose address is unknown (a router served without connect info).
    per_client: HashMap<Option<IpAddr>, u32>,
}

/// The event streams of one server: the open-stream counts and one feed per attempt.
pub struct Hub {
    limits: StreamLimits,
    open: Arc<Mutex<Open>>,
    feeds: Mutex<HashMap<(String, u32), Weak<Feed>>>,
}

/// One open stream's place under the caps; dropping it (the client went away, the stream
/// ended) gives the place back.
pub struct Permit {
    open: Arc<Mutex<Open>>,
    client: Option<IpAddr>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut open = lock(&self.open);
        open.total = open.total.saturating_sub(1);
        if let Some(n) = open.per_client.get_mut(&self.client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.per_client.remove(&self.client);
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Hub {
    pub fn new(limits: StreamLimits) -> Hub {
        Hub {
            limits,
            open: Arc::default(),
            feeds: Mutex::default(),
        }
    }

    /// A place for one more stream of `client`, unless a cap is reached.
    pub fn admit(&self, client: Option<IpAddr>) -> Result<Permit, Refusal> {
        let mut open = lock(&self.open);
        if open.total >= self.limits.total {
            return Err(Refusal::Total);
        }
        let mine = open.per_client.get(&client).copied().unwrap_or(0);
        if mine >= self.limits.per_client {
            return Err(Refusal::PerClient);
        }
        open.total += 1;
        *open.per_client.entry(client).or_insert(0) += 1;
        Ok(Permit {
            open: self.open.clone(),
            client,
        })
    }

    /// Streams open now.
    pub fn open_streams(&self) -> u32 {
        lock(&self.open).total
    }

    /// The feed of `(task, attempt)`, started if no stream is following it.
    fn feed(&self, db: &StoreHandle, task: &str, attempt: u32) -> Arc<Feed> {
        let mut feeds = lock(&self.feeds);
        feeds.retain(|_, f| f.strong_count() > 0);
        let key = (task.to_string(), attempt);
        if let Some(feed) = feeds.get(&key).and_then(Weak::upgrade) {
            return feed;
        }
        let (changed, _) = watch::channel(0u64);
        let feed = Arc::new(Feed {
            state: Mutex::default(),
            changed,
        });
        feeds.insert(key, Arc::downgrade(&feed));
        tokio::spawn(run_feed(
            db.clone(),
            task.to_string(),
            attempt,
            Arc::downgrade(&feed),
        ));
        feed
    }
}

/// What an attempt's reader has read, shared by its streams.
struct Feed {
    state: Mutex<FeedState>,
    /// Bumped after every read that changed `state`.
    changed: watch::Sender<u64>,
}

#[derive(Default)]
struct FeedState {
    /// Every event with a seq above `floor` is in `recent` (`None`: since the first).
    floor: Option<u64>,
    recent: VecDeque<(u64, Arc<str>)>,
    /// The attempt has ended and every event it stored is in `recent` (or below `floor`).
    ended: bool,
    error: Option<String>,
}

impl FeedState {
    /// Whether a stream that has sent everything up to `after` can be served from here.
    fn covers(&self, after: Option<u64>) -> bool {
        match (self.floor, after) {
            (None, _) => true,
            (Some(floor), Some(after)) => after >= floor,
            (Some(_), None) => false,
        }
    }

    /// Up to `BATCH` events after `after`.
    fn after(&self, after: Option<u64>) -> Vec<(u64, Arc<str>)> {
        let from = match after {
            None => 0,
            Some(a) => self.recent.partition_point(|(seq, _)| *seq <= a),
        };
        self.recent
            .iter()
            .skip(from)
            .take(BATCH)
            .map(|(seq, json)| (*seq, json.clone()))
            .collect()
    }
}

/// One read: the next events after `after` and whether the attempt has ended.
fn read(
    store: &Store,
    task: &str,
    attempt: u32,
    after: Option<u64>,
) -> Result<(Vec<(u64, String)>, bool), String> {
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

/// A read on the blocking pool with `store` (opened on first use), handed back after.
async fn read_blocking(
    store: Option<Store>,
    db: StoreHandle,
    task: String,
    attempt: u32,
    after: Option<u64>,
) -> (Option<Store>, Result<(Vec<(u64, String)>, bool), String>) {
    let joined = tokio::task::spawn_blocking(move || {
        let store = match store {
            Some(s) => s,
            None => match db.open() {
                Ok(s) => s,
                Err(e) => return (None, Err(e.to_string())),
            },
        };
        let read = read(&store, &task, attempt, after);
        (Some(store), read)
    })
    .await;
    joined.unwrap_or_else(|e| (None, Err(e.to_string())))
}

/// The reader of one attempt: polls the store with one connection while any stream holds
/// the feed, until the attempt has ended and all of it was read.
async fn run_feed(db: StoreHandle, task: String, attempt: u32, feed: Weak<Feed>) {
    let mut store = None;
    let mut after = None;
    loop {
        if feed.strong_count() == 0 {
            return;
        }
        let (kept, read) = read_blocking(store, db.clone(), task.clone(), attempt, after).await;
        store = kept;
        let Some(f) = feed.upgrade() else { return };
        let (got, finished) = {
            let mut state = lock(&f.state);
            match read {
                Ok((lines, ended)) => {
                    let got = lines.len();
                    for (seq, json) in lines {
                        after = Some(seq);
                        state.recent.push_back((seq, Arc::from(json)));
                        if state.recent.len() > RECENT {
                            if let Some((seq, _)) = state.recent.pop_front() {
                                state.floor = Some(seq);
                            }
                        }
                    }
                    state.ended = ended && got < BATCH;
                    (got, state.ended)
                }
                Err(e) => {
                    state.error = Some(e);
                    (0, true)
                }
            }
        };
        if got > 0 || finished {
            f.changed.send_modify(|v| *v += 1);
        }
        drop(f);
        if finished {
            return;
        }
        if got < BATCH {
            tokio::time::sleep(POLL).await;
        }
    }
}

/// Where one stream stands.
struct Client {
    feed: Arc<Feed>,
    changed: watch::Receiver<u64>,
    db: StoreHandle,
    task: String,
    attempt: u32,
    after: Option<u64>,
    /// A client behind the feed's buffer reads the store itself until it catches up.
    own_store: Option<Store>,
    pending: VecDeque<Event>,
    done: bool,
    _permit: Permit,
}

/// What a stream does next.
enum Step {
    Send(Vec<(u64, Arc<str>)>),
    End,
    Fail(String),
    CatchUp,
    Wait,
}

impl Client {
    fn queue(&mut self, events: impl IntoIterator<Item = (u64, Arc<str>)>) {
        for (seq, json) in events {
            self.after = Some(seq);
            self.pending.push_back(
                Event::default()
                    .id(seq.to_string())
                    .event("event")
                    .data(&*json),
            );
        }
    }

    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(event);
            }
            if self.done {
                return None;
            }
            // Seen before the state is read: a change after this read wakes the wait.
            self.changed.borrow_and_update();
            let step = {
                let state = lock(&self.feed.state);
                if !state.covers(self.after) {
                    Step::CatchUp
                } else {
                    let events = state.after(self.after);
                    if !events.is_empty() {
                        Step::Send(events)
                    } else if let Some(e) = &state.error {
                        Step::Fail(e.clone())
                    } else if state.ended {
                        Step::End
                    } else {
                        Step::Wait
                    }
                }
            };
            match step {
                Step::Send(events) => self.queue(events),
                Step::End => {
                    // Everything stored before the end is queued: say so, then stop.
                    self.pending
                        .push_back(Event::default().event("end").data("{\"ended\":true}"));
                    self.done = true;
                }
                Step::Fail(e) => {
                    self.pending
                        .push_back(Event::default().event("error").data(e));
                    self.done = true;
                }
                Step::CatchUp => {
                    let (kept, read) = read_blocking(
                        self.own_store.take(),
                        self.db.clone(),
                        self.task.clone(),
                        self.attempt,
                        self.after,
                    )
                    .await;
                    self.own_store = kept;
                    match read {
                        Ok((lines, _)) if !lines.is_empty() => {
                            self.queue(lines.into_iter().map(|(seq, json)| (seq, Arc::from(json))))
                        }
                        // Nothing older is left: the buffer covers the rest.
                        Ok(_) => self.after = self.after.max(lock(&self.feed.state).floor),
                        Err(e) => {
                            self.pending
                                .push_back(Event::default().event("error").data(e));
                            self.done = true;
                        }
                    }
                }
                Step::Wait => {
                    self.own_store = None;
                    if self.changed.changed().await.is_err() {
                        self.done = true;
                    }
                }
            }
        }
    }
}

pub async fn stream(
    State(s): State<Shared>,
    Path(id): Path<String>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
    connect: Option<Extension<ConnectInfo<SocketAddr>>>,
) -> Response {
    let q: EventsQuery = match parse_query(raw.as_deref()) {
        Ok(q) => q,
        Err(error) => {
            return ApiError::owned(
                StatusCode::BAD_REQUEST,
                error,
                "the only parameter is attempt=N",
            )
            .into_response()
        }
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
    // The caps first: a refused client costs no store read.
    let permit = match s
        .hub
        .admit(connect.map(|Extension(ConnectInfo(peer))| peer.ip()))
    {
        Ok(p) => p,
        Err(refusal) => {
            let (error, fix) = match refusal {
                Refusal::Total => (
                    format!(
                        "too many event streams: {} open, at most {} (`http.max_streams`)",
                        s.hub.open_streams(),
                        s.streams.total
                    ),
                    "close other event streams, retry later, or raise `http.max_streams` in config.yaml",
                ),
                Refusal::PerClient => (
                    format!(
                        "too many event streams from this address: at most {} (`http.max_streams_per_client`)",
                        s.streams.per_client
                    ),
                    "close this client's other event streams, or raise `http.max_streams_per_client` in config.yaml",
                ),
            };
            let mut response =
                ApiError::owned(StatusCode::TOO_MANY_REQUESTS, error, fix).into_response();
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            return response;
        }
    };
    let db = s.db.clone();
    let task = id.clone();
    let found = tokio::task::spawn_blocking(move || -> Result<_, String> {
        let store = db.open().map_err(|e| e.to_string())?;
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
    let feed = s.hub.feed(&s.db, &id, attempt);
    let client = Client {
        changed: feed.changed.subscribe(),
        feed,
        db: s.db.clone(),
        task: id,
        attempt,
        after,
        own_store: None,
        pending: VecDeque::new(),
        done: false,
        _permit: permit,
    };
    let events = futures_util::stream::unfold(client, |mut c| async move {
        let event = c.next().await?;
        Some((Ok::<_, std::convert::Infallible>(event), c))
    });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_count_streams_in_total_and_per_client_and_give_places_back() {
        let hub = Hub::new(StreamLimits {
            total: 3,
            per_client: 2,
        });
        let a: Option<IpAddr> = Some("10.0.0.1".parse().unwrap());
        let b: Option<IpAddr> = Some("10.0.0.2".parse().unwrap());
        let a1 = hub.admit(a).unwrap();
        let _a2 = hub.admit(a).unwrap();
        assert_eq!(hub.admit(a).err(), Some(Refusal::PerClient));
        let _b1 = hub.admit(b).unwrap();
        assert_eq!(hub.admit(b).err(), Some(Refusal::Total));
        drop(a1);
        assert_eq!(hub.open_streams(), 2);
        assert!(hub.admit(b).is_ok());
    }

    #[test]
    fn a_feed_serves_a_stream_only_from_where_its_buffer_starts() {
        let mut state = FeedState::default();
        for seq in 5..10 {
            state.recent.push_back((seq, Arc::from(seq.to_string())));
        }
        assert!(state.covers(None));
        assert_eq!(state.after(Some(7)).len(), 2);
        state.floor = Some(4);
        assert!(!state.covers(None));
        assert!(!state.covers(Some(3)));
        assert!(state.covers(Some(4)));
        assert_eq!(state.after(Some(4)).first().map(|e| e.0), Some(5));
    }
}
