//! The console (issue 29): the daemon's web pages, server-rendered from askama templates
//! (`templates/console/`, every value HTML-escaped unless a template says `|safe`, which
//! only the pictures' SVG — escaped by [`svg`] — and the page's own constant style and
//! script use), readable without JavaScript and at phone width.
//!
//! - `/`: *Needs attention* (blocked tasks with their reason and Retry, parked tasks with
//!   the limit they wait for and a countdown, held tasks, pull requests with failing
//!   checks or changes requested, gate refusals), *Now* (agent slots, per machine in a
//!   fleet, with each running attempt's counters, usage-limit windows, cost today),
//!   *Pictures* (inline SVG) and the queue (agent and cost from the stored summaries).
//! - `/tasks/{id}`: the task page (attempts, evidence, the diff that landed, transcript,
//!   pull request, generations and follow-ups, the action log).
//! - `/login`, `/logout`, and the forms `POST /tasks/{id}/{retry,run-now,hold,release}`
//!   ([`session`] says who may send them).
//! - `/live`: Server-Sent Events saying "something changed"; the page's script then
//!   fetches itself again and swaps its `<main>`; between changes it counts elapsed times
//!   and countdowns down itself.
//!
//! Layout: [`view`] turns stored facts into what is shown (pure), [`svg`] draws, [`live`]
//! folds a running attempt's events into its counters, [`session`] decides access; this
//! file reads the store (on the blocking pool) and renders.
//!
//! Must not: write to the store except through `ops::actions` and `generation::retry`
//! (the library calls the CLI uses), or put unescaped text of a task, agent or issue into a
//! page.

pub mod live;
pub mod session;
pub mod svg;
pub mod task;
pub mod view;

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::time::Duration;

use askama::Template;
use axum::extract::{ConnectInfo, Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use chrono::{DateTime, Duration as ChronoDuration, Utc};
use serde::Deserialize;

use super::act::{self, Actor, Verb};
use super::Shared;
use crate::domain::{AgentType, TaskState};
use crate::store::{DiskUsage, Store, StoreError};

/// Tasks the queue table lists (newest first).
const QUEUE_ROWS: usize = 200;
/// Tasks of each attention kind read (the oldest beyond are still in the queue table).
const ATTENTION_ROWS: usize = 200;
/// Events of a running attempt folded into its counters.
const LIVE_EVENTS: usize = 20_000;

pub const STYLE: &str = include_str!("../../../templates/console/style.css");
pub const SCRIPT: &str = include_str!("../../../templates/console/script.js");

#[derive(Template)]
#[template(path = "console/page.html")]
struct PageT<'a> {
    title: &'a str,
    style: &'a str,
    signed_in: bool,
    who: &'a str,
    csrf: &'a str,
    back: &'a str,
    notice: Option<&'a str>,
    live: &'a str,
    main: &'a str,
    after: &'a str,
    version: &'a str,
    script: &'a str,
}

#[derive(Template)]
#[template(path = "console/home.html")]
struct HomeT<'a> {
    home: &'a view::Home,
    queue: &'a [view::QueueRow],
    counts: String,
    /// The disk the home used at the daemon's last retention sweep (`status`'s `disk:`).
    disk: Option<String>,
    csrf: &'a str,
    back: &'a str,
    can_act: bool,
    cancel_available: bool,
}

#[derive(Template)]
#[template(path = "console/login.html")]
struct LoginT<'a> {
    next: &'a str,
    error: Option<&'a str>,
    has_token: bool,
    token_env: &'a str,
}

#[derive(Template)]
#[template(path = "console/message.html")]
struct MessageT<'a> {
    heading: &'a str,
    text: &'a str,
    back: &'a str,
}

/// Who is looking: signed in (with the session cookie) or not.
pub struct Viewer {
    pub signed_in: bool,
    pub who: String,
    /// The CSRF value for forms (empty when not signed in).
    pub csrf: String,
}

impl Viewer {
    pub fn of(s: &Shared, headers: &HeaderMap) -> Viewer {
        let signed_in = match (session::cookie(headers, session::SESSION), &s.token) {
            (Some(c), Some(t)) => session::same_secret(c, &session::session_value(t)),
            _ => false,
        };
        let who = session::cookie(headers, session::WHO)
            .map(|w| {
                percent_encoding::percent_decode_str(w)
                    .decode_utf8_lossy()
                    .into_owned()
            })
            .and_then(|w| crate::ops::actions::clean_actor(&w))
            .unwrap_or_else(|| "operator".into());
        Viewer {
            signed_in,
            who,
            csrf: match (&s.token, signed_in) {
                (Some(t), true) => session::csrf_value(t),
                _ => String::new(),
            },
        }
    }
}

/// A whole page around `main` (already rendered).
pub fn page(
    title: &str,
    viewer: &Viewer,
    back: &str,
    notice: Option<&str>,
    live: &str,
    main: &str,
    status: StatusCode,
) -> Response {
    page_with(title, viewer, back, notice, live, main, "", status)
}

/// [`page`] with `after`: HTML outside `<main>`, which the live refresh leaves alone.
#[allow(clippy::too_many_arguments)]
pub fn page_with(
    title: &str,
    viewer: &Viewer,
    back: &str,
    notice: Option<&str>,
    live: &str,
    main: &str,
    after: &str,
    status: StatusCode,
) -> Response {
    let html = PageT {
        title,
        style: STYLE,
        signed_in: viewer.signed_in,
        who: &viewer.who,
        csrf: &viewer.csrf,
        back,
        notice,
        live,
        main,
        after,
        version: env!("CARGO_PKG_VERSION"),
        script: SCRIPT,
    }
    .render();
    let html = match html {
        Ok(h) => h,
        Err(e) => {
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the page did not render: {e}"),
            )
                .into_response()
        }
    };
    let mut r = (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; script-src 'unsafe-inline' 'self'; style-src 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
            ),
        ],
        html,
    )
        .into_response();
    r.headers_mut().insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    r.headers_mut()
        .insert("x-frame-options", HeaderValue::from_static("DENY"));
    r
}

fn render<T: Template>(t: &T) -> String {
    t.render()
        .unwrap_or_else(|e| format!("<p class=\"FAILED\">the page did not render: {e}</p>"))
}

/// A page saying something went wrong (or was refused), with a way back.
pub fn message(
    viewer: &Viewer,
    status: StatusCode,
    heading: &str,
    text: &str,
    back: &str,
) -> Response {
    let main = render(&MessageT {
        heading,
        text,
        back,
    });
    page(heading, viewer, back, None, "", &main, status)
}

#[derive(Debug, Default, Deserialize)]
pub struct PageQuery {
    pub notice: Option<String>,
    pub attempt: Option<u32>,
}

fn query_of(raw: Option<&str>) -> PageQuery {
    super::api::parse_query(raw).unwrap_or_default()
}

/// Reads what the front page shows.
fn gather(
    store: &Store,
    now: DateTime<Utc>,
    (slots, machine): (u32, String),
    identities: Vec<(String, Option<f64>)>,
) -> Result<(view::Facts, Vec<view::QueueRow>, Option<DiskUsage>), StoreError> {
    let counts = store.count_by_state()?;
    let mut running = Vec::new();
    // Every other machine whose heartbeat runs, idle or not (issue 27).
    let mut machine_slots = store.live_machines(now)?;
    machine_slots.remove(&machine);
    for a in store.running_attempts()? {
        if let Some(m) = a.machine.as_deref().filter(|m| *m != machine) {
            if !machine_slots.contains_key(m) {
                if let Some(n) = store.machine_slots(m)? {
                    machine_slots.insert(m.to_string(), n);
                }
            }
        }
        let agent = store
            .attempt(&a.task_id, a.attempt)?
            .and_then(|r| r.spec().ok())
            .map(|spec| spec.agent_type);
        let events = store.events(&a.task_id, a.attempt, None, LIVE_EVENTS)?;
        let counters = match agent {
            Some(t) => live::counters(t, &events),
            None => live::counters(AgentType::Claude, &[]),
        };
        running.push(view::RunningFact {
            attempt: a,
            counters,
        });
    }
    let gate_of = |id: &str| -> Result<Option<(String, String)>, StoreError> {
        let Some(n) = store.latest_attempt(id)? else {
            return Ok(None);
        };
        Ok(store.attempt(id, n)?.and_then(|a| {
            a.evidence
                .iter()
                .find(|e| e.command.is_empty() && !e.passed)
                .map(|e| (e.name.clone(), e.output_tail.clone()))
        }))
    };
    let last_reason = |id: &str, to: TaskState| -> Result<String, StoreError> {
        Ok(store
            .transitions(id)?
            .into_iter()
            .rev()
            .find(|t| t.to == to)
            .map(|t| t.reason)
            .unwrap_or_default())
    };
    let mut blocked = Vec::new();
    for t in store.list_tasks(Some(TaskState::Blocked), Some(ATTENTION_ROWS))? {
        if store.generation_links(&t.id)?.retried_as.is_some() {
            continue;
        }
        blocked.push(view::BlockedFact {
            reason: last_reason(&t.id, TaskState::Blocked)?,
            gate: gate_of(&t.id)?,
            id: t.id,
            title: t.title,
        });
    }
    let waits = store.quota_waits()?;
    let mut parked = Vec::new();
    for t in store.list_tasks(Some(TaskState::Failed), Some(ATTENTION_ROWS))? {
        parked.push(view::ParkedFact {
            reason: last_reason(&t.id, TaskState::Failed)?,
            gate: gate_of(&t.id)?,
            quota_wait: waits.get(&t.id).cloned(),
            failures: t.failures,
            next_attempt_at: t.next_attempt_at,
            id: t.id,
            title: t.title,
        });
    }
    let mut pulls = Vec::new();
    for p in store.pulls()? {
        if p.state != "open" {
            continue;
        }
        let title = store
            .get_task(&p.task_id)?
            .map(|t| t.title)
            .unwrap_or_default();
        let url = store.landing(&p.task_id)?.and_then(|l| l.pr_url);
        pulls.push(view::PullFact {
            pull: p,
            title,
            url,
        });
    }
    let month = now - ChronoDuration::days(31);
    let facts = view::Facts {
        now,
        slots,
        machine,
        machine_slots,
        counts,
        running,
        blocked,
        parked,
        pulls,
        quota: store.quota_rows()?,
        identities,
        attempts: store.attempts_since(month)?,
        landed: store.transitions_into_since(TaskState::Landed, month)?,
        blocked_moves: store.transitions_into_since(TaskState::Blocked, month)?,
        queue_waits: store.queue_waits_since(month)?,
    };
    let mut rows = Vec::new();
    store.for_each_task_summary(None, Some(QUEUE_ROWS), |t| -> Result<(), StoreError> {
        let next = t
            .next_attempt_at
            .and_then(|n| DateTime::parse_from_rfc3339(n).ok())
            .map(|n| n.with_timezone(&Utc));
        rows.push(view::QueueRow {
            id: t.id.to_string(),
            href: view::task_href(t.id),
            title: t.title.to_string(),
            state: t.state.to_string(),
            next: view::next_text(t.state, next, now),
            agent: t.agent.unwrap_or("-").to_string(),
            attempts: t.attempts,
            cost: t.cost_usd.map_or("-".into(), |c| format!("${c:.2}")),
        });
        Ok(())
    })?;
    Ok((facts, rows, store.disk_usage()?))
}

/// `GET /`: the front page.
pub async fn home(
    State(s): State<Shared>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    let viewer = Viewer::of(&s, &headers);
    let q = query_of(raw.as_deref());
    let (db, slots, identities) = (
        s.db.clone(),
        (s.slots, s.machine.clone()),
        s.identities.clone(),
    );
    let read = tokio::task::spawn_blocking(move || {
        let store = db.open()?;
        gather(&store, Utc::now(), slots, identities)
    })
    .await;
    let (facts, queue, disk) = match read {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => return unavailable(&viewer, &e.to_string()),
        Err(e) => return unavailable(&viewer, &e.to_string()),
    };
    let home = view::home(&facts);
    let counts = if facts.counts.is_empty() {
        "no tasks".to_string()
    } else {
        facts
            .counts
            .iter()
            .map(|(s, n)| format!("{n} {s}"))
            .collect::<Vec<_>>()
            .join(" · ")
    };
    let main = render(&HomeT {
        home: &home,
        queue: &queue,
        counts,
        disk: disk.map(|d| {
            format!(
                "disk: {} (measured {})",
                crate::ops::retention::disk_line(&d),
                d.measured_at.format("%Y-%m-%d %H:%M UTC")
            )
        }),
        csrf: &viewer.csrf,
        back: "/",
        can_act: viewer.signed_in,
        cancel_available: act::CANCEL_AVAILABLE,
    });
    page(
        "console",
        &viewer,
        "/",
        q.notice.as_deref(),
        "/",
        &main,
        StatusCode::OK,
    )
}

fn unavailable(viewer: &Viewer, e: &str) -> Response {
    message(
        viewer,
        StatusCode::SERVICE_UNAVAILABLE,
        "The queue cannot be read",
        &format!("{e} — run `polyphony doctor` on the host"),
        "/",
    )
}

#[derive(Debug, Default, Deserialize)]
pub struct LoginQuery {
    next: Option<String>,
}

/// `GET /login`: the sign-in form.
pub async fn login_form(
    State(s): State<Shared>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    let viewer = Viewer::of(&s, &headers);
    let q: LoginQuery = super::api::parse_query(raw.as_deref()).unwrap_or_default();
    let next = session::back_path(q.next.as_deref());
    login_page(&s, &viewer, &next, None, StatusCode::OK)
}

fn login_page(
    s: &Shared,
    viewer: &Viewer,
    next: &str,
    error: Option<&str>,
    status: StatusCode,
) -> Response {
    let env = crate::config::model::HttpConfig::default().token_env;
    let main = render(&LoginT {
        next,
        error,
        has_token: s.token.is_some(),
        token_env: &env,
    });
    page("sign in", viewer, next, None, "", &main, status)
}

#[derive(Debug, Deserialize)]
pub struct LoginForm {
    token: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    next: Option<String>,
}

/// How long a sign-in lasts.
const SESSION_DAYS: i64 = 7;

/// `POST /login`: the token right sets the session cookie and the name.
pub async fn login(
    State(s): State<Shared>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let viewer = Viewer::of(&s, &headers);
    let next = session::back_path(form.next.as_deref());
    let ok = s
        .token
        .as_deref()
        .is_some_and(|t| session::same_secret(form.token.trim(), t));
    let Some(token) = s.token.as_deref().filter(|_| ok) else {
        return login_page(
            &s,
            &viewer,
            &next,
            Some("That is not the daemon's token."),
            StatusCode::UNAUTHORIZED,
        );
    };
    let name = crate::ops::actions::clean_actor(&form.name).unwrap_or_else(|| "operator".into());
    let age = SESSION_DAYS * 86_400;
    let session_cookie = format!(
        "{}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age={age}",
        session::SESSION,
        session::session_value(token)
    );
    let who_cookie = format!(
        "{}={}; Path=/; SameSite=Strict; Max-Age={age}",
        session::WHO,
        super::encode_segment(&name)
    );
    let mut r = Redirect::to(&next).into_response();
    for c in [session_cookie, who_cookie] {
        if let Ok(v) = HeaderValue::from_str(&c) {
            r.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    r
}

/// `POST /logout`: forgets the session.
pub async fn logout() -> Response {
    let mut r = Redirect::to("/").into_response();
    for name in [session::SESSION, session::WHO] {
        if let Ok(v) =
            HeaderValue::from_str(&format!("{name}=; Path=/; Max-Age=0; SameSite=Strict"))
        {
            r.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    r
}

#[derive(Debug, Deserialize)]
pub struct ActionForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    back: Option<String>,
}

/// `POST /tasks/{id}/{verb}`: a console form. The middleware let it through on the
/// session cookie from a page of this server; the CSRF value is checked here.
pub async fn form_action(
    State(s): State<Shared>,
    Path((id, verb)): Path<(String, String)>,
    headers: HeaderMap,
    connect: Option<Extension<ConnectInfo<SocketAddr>>>,
    Form(form): Form<ActionForm>,
) -> Response {
    let viewer = Viewer::of(&s, &headers);
    let back = session::back_path(form.back.as_deref());
    let Ok(verb) = verb.parse::<Verb>() else {
        return message(
            &viewer,
            StatusCode::NOT_FOUND,
            "No such action",
            &format!("`{verb}` is not an action: retry, run-now, hold or release"),
            &back,
        );
    };
    let csrf_ok = s
        .token
        .as_deref()
        .is_some_and(|t| session::same_secret(&form.csrf, &session::csrf_value(t)));
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(super::guard::bearer_token)
        .is_some();
    if !csrf_ok && !bearer {
        return message(
            &viewer,
            StatusCode::FORBIDDEN,
            "Refused",
            "the form's CSRF value is missing or wrong: reload the page and try again",
            &back,
        );
    }
    let actor = Actor {
        by: viewer.who.clone(),
        via: "console",
        from: connect.map(|Extension(ConnectInfo(peer))| peer.ip().to_string()),
    };
    match act::perform(&s, verb, &id, &actor).await {
        Ok(done) => {
            let sep = if back.contains('?') { '&' } else { '?' };
            let notice = super::encode_segment(&done.message);
            Redirect::to(&format!("{back}{sep}notice={notice}")).into_response()
        }
        Err(e) => {
            let (status, text) = e.status_and_text();
            message(&viewer, status, "Not done", &text, &back)
        }
    }
}

/// What changes when anything the pages show changes (cheap reads only).
fn fingerprint(store: &Store) -> Result<u64, StoreError> {
    let mut h = DefaultHasher::new();
    store.count_by_state()?.hash(&mut h);
    for a in store.running_attempts()? {
        (&a.task_id, a.attempt, a.state.as_str()).hash(&mut h);
        store.event_count(&a.task_id, a.attempt)?.hash(&mut h);
    }
    store.next_retry_at()?.map(|t| t.timestamp()).hash(&mut h);
    for q in store.quota_rows()? {
        (q.identity, q.agent, q.resets_at.timestamp()).hash(&mut h);
    }
    Ok(h.finish())
}

/// How often `/live` looks for a change.
const LIVE_POLL: Duration = Duration::from_millis(700);

/// `GET /live`: `event: change` whenever the pages' facts change.
pub async fn live_stream(
    State(s): State<Shared>,
    connect: Option<Extension<ConnectInfo<SocketAddr>>>,
) -> Response {
    let permit = match s
        .hub
        .admit(connect.map(|Extension(ConnectInfo(peer))| peer.ip()))
    {
        Ok(p) => p,
        Err(_) => return super::api::error_response(
            StatusCode::TOO_MANY_REQUESTS,
            "too many event streams are open",
            "close other console tabs or event streams, or raise `http.max_streams` in config.yaml",
        ),
    };
    let db = s.db.clone();
    let stream = futures_util::stream::unfold(
        (None::<u64>, None::<Store>, permit, db),
        |(mut last, mut store, permit, db)| async move {
            loop {
                let taken = store.take();
                let path = db.clone();
                let (kept, print) = tokio::task::spawn_blocking(move || {
                    let store = match taken {
                        Some(s) => s,
                        None => match path.open() {
                            Ok(s) => s,
                            Err(e) => return (None, Err(e.to_string())),
                        },
                    };
                    let print = fingerprint(&store).map_err(|e| e.to_string());
                    (Some(store), print)
                })
                .await
                .unwrap_or_else(|e| (None, Err(e.to_string())));
                // The connection is kept between polls (dropped after an error).
                store = kept;
                match print {
                    Ok(p) if Some(p) != last => {
                        last = Some(p);
                        let event = Event::default().event("change").data(p.to_string());
                        return Some((
                            Ok::<Event, std::convert::Infallible>(event),
                            (last, store, permit, db),
                        ));
                    }
                    Ok(_) => tokio::time::sleep(LIVE_POLL).await,
                    Err(e) => {
                        tokio::time::sleep(LIVE_POLL * 5).await;
                        let event = Event::default().event("error").data(e);
                        return Some((Ok(event), (last, None, permit, db)));
                    }
                }
            }
        },
    );
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}
