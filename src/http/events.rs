//! `GET /api/v1/tasks/{id}/events[?attempt=N]`: an attempt's events as Server-Sent Events,
//! live as the pipeline stores them.
//!
//! Each event's `id` is its `seq` and its `data` the `logs --json` object, so a client that
//! reconnects with `Last-Event-ID: N` (browsers do it themselves) resumes after `seq` N
//! with nothing lost or repeated. The attempt's egress proxy's refusals and summary (issue
//! 25, stored as the proxy logs them, with a sequence of their own) come as `egress`
//! events; once one was sent the ids name both places (`N~E`, [`Cursor`]), so a resumed
//! stream repeats neither. The stream ends once the attempt has ended and every
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

/// Where a stream stands: the last of the attempt's stream events sent (its `seq`) and
/// the last `egress` row sent (its stored seq, `Store::egress_rows_after`). Its SSE id is
/// `N`, `N~E` or `~E`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cursor {
    pub seq: Option<u64>,
    pub egress: Option<u64>,
}

impl Cursor {
    pub fn id(&self) -> String {
        let seq = self.seq.map(|n| n.to_string()).unwrap_or_default();
        match self.egress {
            None => seq,
            Some(e) => format!("{seq}~{e}"),
        }
    }

    pub fn parse(id: &str) -> Option<Cursor> {
        let num = |t: &str| -> Option<Option<u64>> {
            if t.is_empty() {
                Some(None)
            } else {
                t.parse().ok().map(Some)
            }
        };
        let (seq, egress) = match id.split_once('~') {
            Some((s, e)) if !e.is_empty() => (num(s)?, num(e)?),
            Some(_) => return None,
            None if id.is_empty() => return None,
            None => (num(id)?, None),
        };
        Some(Cursor { seq, egress })
    }

    /// Whether a stream at `self` has had everything up to `other`.
    fn covers(&self, other: &Cursor) -> bool {
        self.seq >= other.seq && self.egress >= other.egress
    }

    fn join(self, other: Cursor) -> Cursor {
        Cursor {
            seq: self.seq.max(other.seq),
            egress: self.egress.max(other.egress),
        }
    }
}

/// Which of an attempt's sequences an event is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lane {
    Stream,
    Egress,
}

/// One event ready to send: its lane, the place a stream is at once it sent it, its JSON.
#[derive(Debug, Clone)]
struct Entry {
    lane: Lane,
    cursor: Cursor,
    json: Arc<str>,
}

impl Entry {
    /// Whether a stream at `after` has not had it.
    fn is_new(&self, after: &Cursor) -> bool {
        match self.lane {
            Lane::Stream => self.cursor.seq > after.seq,
            Lane::Egress => self.cursor.egress > after.egress,
        }
    }
}

#[derive(Default)]
struct FeedState {
    /// Every event after `floor` is in `recent` (`None`: since the first).
    floor: Option<Cursor>,
    recent: VecDeque<Entry>,
    /// The attempt has ended and every event it stored is in `recent` (or below `floor`).
    ended: bool,
    error: Option<String>,
}

impl FeedState {
    /// Whether a stream that has sent everything up to `after` can be served from here.
    fn covers(&self, after: &Cursor) -> bool {
        self.floor.is_none_or(|floor| after.covers(&floor))
    }

    /// Up to `BATCH` events a stream at `after` has not had.
    fn after(&self, after: &Cursor) -> Vec<Entry> {
        // Places only grow along `recent`: the ones `after` covers are a prefix.
        let from = self.recent.partition_point(|e| after.covers(&e.cursor));
        self.recent
            .iter()
            .skip(from)
            .filter(|e| e.is_new(after))
            .take(BATCH)
            .cloned()
            .collect()
    }
}

/// One read: the next events after `after` (the stream's, then the egress rows), whether
/// the attempt has ended and all of it was read, and whether more stream events wait.
fn read(store: &Store, task: &str, attempt: u32, after: Cursor) -> Result<Read, String> {
    // Ended is read first: events stored before the end are then all in this read or the
    // next, never skipped.
    let ended = store
        .attempt(task, attempt)
        .map_err(|e| e.to_string())?
        .is_none_or(|a| a.status.is_some());
    let events = store
        .events(task, attempt, after.seq, BATCH)
        .map_err(|e| e.to_string())?;
    let egress = store
        .egress_rows_after(task, attempt, after.egress)
        .map_err(|e| e.to_string())?;
    let json = |event: &crate::domain::TaskEvent| -> Arc<str> {
        Arc::from(
            serde_json::to_string(&EventJson {
                task,
                attempt,
                event,
            })
            .unwrap_or_default(),
        )
    };
    let more = events.len() >= BATCH;
    let mut at = after;
    let mut entries = Vec::with_capacity(events.len() + egress.len());
    for e in &events {
        at.seq = Some(e.seq);
        entries.push(Entry {
            lane: Lane::Stream,
            cursor: at,
            json: json(e),
        });
    }
    for (seq, e) in &egress {
        at.egress = Some(*seq);
        entries.push(Entry {
            lane: Lane::Egress,
            cursor: at,
            json: json(e),
        });
    }
    Ok(Read {
        entries,
        ended: ended && !more,
        more,
    })
}

/// What one [`read`] found.
struct Read {
    entries: Vec<Entry>,
    ended: bool,
    more: bool,
}

/// A read on the blocking pool with `store` (opened on first use), handed back after.
async fn read_blocking(
    store: Option<Store>,
    db: StoreHandle,
    task: String,
    attempt: u32,
    after: Cursor,
) -> (Option<Store>, Result<Read, String>) {
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
    let mut after = Cursor::default();
    loop {
        if feed.strong_count() == 0 {
            return;
        }
        let (kept, read) = read_blocking(store, db.clone(), task.clone(), attempt, after).await;
        store = kept;
        let Some(f) = feed.upgrade() else { return };
        let (got, more, finished) = {
            let mut state = lock(&f.state);
            match read {
                Ok(read) => {
                    let got = read.entries.len();
                    for entry in read.entries {
                        after = entry.cursor;
                        state.recent.push_back(entry);
                        if state.recent.len() > RECENT {
                            if let Some(gone) = state.recent.pop_front() {
                                state.floor = Some(gone.cursor);
                            }
                        }
                    }
                    state.ended = read.ended;
                    (got, read.more, state.ended)
                }
                Err(e) => {
                    state.error = Some(e);
                    (0, false, true)
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
        if !more {
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
    after: Cursor,
    /// A client behind the feed's buffer reads the store itself until it catches up.
    own_store: Option<Store>,
    pending: VecDeque<Event>,
    done: bool,
    _permit: Permit,
}

/// What a stream does next.
enum Step {
    Send(Vec<Entry>),
    End,
    Fail(String),
    CatchUp,
    Wait,
}

impl Client {
    fn queue(&mut self, entries: impl IntoIterator<Item = Entry>) {
        for entry in entries {
            if !entry.is_new(&self.after) {
                continue;
            }
            match entry.lane {
                Lane::Stream => self.after.seq = entry.cursor.seq,
                Lane::Egress => self.after.egress = entry.cursor.egress,
            }
            let name = match entry.lane {
                Lane::Stream => "event",
                Lane::Egress => "egress",
            };
            self.pending.push_back(
                Event::default()
                    .id(self.after.id())
                    .event(name)
                    .data(&*entry.json),
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
                if !state.covers(&self.after) {
                    Step::CatchUp
                } else {
                    let events = state.after(&self.after);
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
                        Ok(read) if !read.entries.is_empty() => self.queue(read.entries),
                        // Nothing older is left: the buffer covers the rest.
                        Ok(_) => {
                            let floor = lock(&self.feed.state).floor.unwrap_or_default();
                            self.after = self.after.join(floor);
                        }
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
        None => Cursor::default(),
        Some(Ok(v)) => match Cursor::parse(v.trim()) {
            Some(c) => c,
            None => {
                return error_response(
                    StatusCode::BAD_REQUEST,
                    &format!("`Last-Event-ID: {v}` is not an event id"),
                    "send the `id` of the last event received (a whole number, or N~E)",
                )
            }
        },
        Some(Err(_)) => Cursor::default(),
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

    fn at(seq: Option<u64>, egress: Option<u64>) -> Cursor {
        Cursor { seq, egress }
    }

    fn stream(n: u64) -> Cursor {
        at(Some(n), None)
    }

    #[test]
    fn a_feed_serves_a_stream_only_from_where_its_buffer_starts() {
        let mut state = FeedState::default();
        for seq in 5..10 {
            state.recent.push_back(Entry {
                lane: Lane::Stream,
                cursor: stream(seq),
                json: Arc::from(seq.to_string()),
            });
        }
        assert!(state.covers(&Cursor::default()));
        assert_eq!(state.after(&stream(7)).len(), 2);
        state.floor = Some(stream(4));
        assert!(!state.covers(&Cursor::default()));
        assert!(!state.covers(&stream(3)));
        assert!(state.covers(&stream(4)));
        assert_eq!(
            state.after(&stream(4)).first().map(|e| e.cursor),
            Some(stream(5))
        );
    }

    #[test]
    fn ids_name_both_places_and_a_stream_gets_only_what_it_has_not_had() {
        assert_eq!(stream(41).id(), "41");
        assert_eq!(at(Some(41), Some(6)).id(), "41~6");
        assert_eq!(at(None, Some(6)).id(), "~6");
        for c in [stream(41), at(Some(41), Some(6)), at(None, Some(6))] {
            assert_eq!(Cursor::parse(&c.id()), Some(c));
        }
        for bad in ["", "~", "x", "1~", "1~x", "-1"] {
            assert_eq!(Cursor::parse(bad), None, "{bad}");
        }
        // Stream 1, egress row 6, stream 2, egress row 14: a client that had stream 1 and
        // row 6 gets stream 2 and row 14; one that had stream 2 only gets both rows.
        let mut state = FeedState::default();
        for (lane, cursor) in [
            (Lane::Stream, stream(1)),
            (Lane::Egress, at(Some(1), Some(6))),
            (Lane::Stream, at(Some(2), Some(6))),
            (Lane::Egress, at(Some(2), Some(14))),
        ] {
            state.recent.push_back(Entry {
                lane,
                cursor,
                json: Arc::from(cursor.id()),
            });
        }
        let ids = |after: Cursor| -> Vec<String> {
            state
                .after(&after)
                .iter()
                .map(|e| e.json.to_string())
                .collect()
        };
        assert_eq!(ids(at(Some(1), Some(6))), ["2~6", "2~14"]);
        assert_eq!(ids(stream(2)), ["1~6", "2~14"]);
        assert_eq!(ids(at(Some(2), Some(14))), Vec::<String>::new());
    }
}
