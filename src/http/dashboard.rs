//! The dashboard: server-rendered HTML, readable without JavaScript; a few lines of plain
//! script refresh the page's `<main>` every few seconds and tail a running attempt's
//! events through the SSE stream. No build step, no external assets.
//!
//! Every piece of task, issue or agent text goes through [`esc`] (and links through
//! [`safe_href`]); the script only ever sets `textContent` or swaps in `<main>` from this
//! same server's escaped HTML, so an agent printing `<script>` renders as text.

use std::fmt::Write as _;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};

use super::{encode_segment, Shared};
use crate::domain::TaskState;
use crate::ops::report;
use crate::store::{AttemptRecord, Landing, RunningAttempt, StoreError, TransitionRecord};

/// Tasks the queue page lists (newest first).
const QUEUE_ROWS: usize = 200;

/// HTML-escapes text for element content and quoted attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A link target only when it is an http(s) URL (a PR URL comes from the source API, but
/// a `javascript:` URL must never become clickable).
pub fn safe_href(url: &str) -> Option<String> {
    let lower = url.trim().to_ascii_lowercase();
    (lower.starts_with("https://") || lower.starts_with("http://")).then(|| esc(url.trim()))
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1b1b1b}\
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{padding:.25em .7em;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}\
th{background:#f3f3f3}.LANDED{color:#137333}.BLOCKED,.FAILED{color:#b3261e}.RUNNING,.VERIFYING,.PROVISIONED{color:#1a56db}\
pre{background:#f6f6f6;padding:.6em;overflow:auto;max-height:30em;white-space:pre-wrap}\
.muted{color:#666}h1 a{color:inherit;text-decoration:none}";

const REFRESH: &str = "<script>\
setInterval(function(){fetch(location.href).then(function(r){return r.text()}).then(function(t){\
var d=new DOMParser().parseFromString(t,'text/html');var m=d.querySelector('main');\
if(m){document.querySelector('main').replaceWith(m)}}).catch(function(){})},3000);\
</script>";

fn page(title: &str, main: &str, script: &str) -> Response {
    let html = format!(
        "<!doctype html><html lang=en><head><meta charset=utf-8>\
         <meta name=viewport content=\"width=device-width\"><title>{} · Polyphony</title>\
         <style>{STYLE}</style></head><body><h1><a href=\"/\">Polyphony</a></h1>\
         <main>{main}</main>{REFRESH}{script}</body></html>",
        esc(title)
    );
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; script-src 'unsafe-inline' 'self'; style-src 'unsafe-inline'; img-src 'self'",
            ),
        ],
        html,
    )
        .into_response()
}

fn failure_page(status: StatusCode, message: &str) -> Response {
    let mut r = page(
        "error",
        &format!("<p class=FAILED>{}</p>", esc(message)),
        "",
    );
    *r.status_mut() = status;
    r
}

fn task_link(id: &str) -> String {
    format!(
        "<a href=\"/tasks/{}\">{}</a>",
        esc(&encode_segment(id)),
        esc(id)
    )
}

/// One queue row as the page shows it.
pub struct QueueRow {
    pub id: String,
    pub title: String,
    pub source_ref: String,
    pub state: TaskState,
    pub agent: Option<String>,
    pub attempts: u32,
    pub cost: Option<f64>,
    pub next_attempt_at: Option<String>,
}

/// What the queue page shows.
pub struct QueueView {
    pub counts: std::collections::BTreeMap<TaskState, u64>,
    pub running: Vec<RunningAttempt>,
    pub rows: Vec<QueueRow>,
    /// (identity, cost today, ceiling)
    pub spend: Vec<(String, f64, Option<f64>)>,
    pub slots: u32,
}

/// The queue page's `<main>` (pure).
pub fn render_queue(v: &QueueView) -> String {
    let mut out = String::new();
    let counts: Vec<String> = v
        .counts
        .iter()
        .map(|(s, n)| format!("<span class={s}>{n} {s}</span>"))
        .collect();
    let _ = write!(
        out,
        "<p>{} · {} of {} agent slots busy</p>",
        if counts.is_empty() {
            "no tasks".to_string()
        } else {
            counts.join(", ")
        },
        v.running.len(),
        v.slots
    );
    out.push_str("<h2>Running</h2>");
    if v.running.is_empty() {
        out.push_str("<p class=muted>nothing running</p>");
    } else {
        out.push_str("<table id=running><tr><th>task</th><th>title</th><th>state</th><th>attempt</th><th>agent</th><th>identity</th><th>started</th></tr>");
        for r in &v.running {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td class={}>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                task_link(&r.task_id),
                esc(&r.title),
                r.state,
                r.state,
                r.attempt,
                esc(&r.agent),
                esc(&r.identity),
                r.started_at.format("%H:%M:%S UTC")
            );
        }
        out.push_str("</table>");
    }
    out.push_str("<h2>Cost today</h2><table id=cost><tr><th>identity</th><th>spent</th><th>ceiling</th></tr>");
    for (name, spent, ceiling) in &v.spend {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>${spent:.2}</td><td>{}</td></tr>",
            esc(name),
            ceiling.map_or("none".to_string(), |c| format!("${c:.2}"))
        );
    }
    out.push_str("</table><h2>Queue</h2><table id=queue><tr><th>id</th><th>title</th><th>source</th><th>state</th><th>agent</th><th>attempts</th><th>cost</th><th>next</th></tr>");
    for r in &v.rows {
        let next = match (r.state, &r.next_attempt_at) {
            (TaskState::Failed, Some(at)) => format!("retry at {}", esc(at)),
            (TaskState::Failed, None) => "held".to_string(),
            (TaskState::Discovered, _) => "waiting for a slot".to_string(),
            (s, _) if s.is_active() => "in progress".to_string(),
            _ => "-".to_string(),
        };
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class={}>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{next}</td></tr>",
            task_link(&r.id),
            esc(&r.title),
            esc(&r.source_ref),
            r.state,
            r.state,
            esc(r.agent.as_deref().unwrap_or("-")),
            r.attempts,
            r.cost.map_or("-".to_string(), |c| format!("${c:.2}")),
        );
    }
    out.push_str("</table>");
    out
}

pub async fn queue_page(State(s): State<Shared>) -> Response {
    let db = s.db.clone();
    let identities = s.identities.clone();
    let slots = s.slots;
    let read = tokio::task::spawn_blocking(move || -> Result<QueueView, StoreError> {
        let store = db.open()?;
        let counts = store.count_by_state()?;
        let running = store.running_attempts()?;
        let mut rows = Vec::new();
        store.for_each_task_summary(None, Some(QUEUE_ROWS), |t| -> Result<(), StoreError> {
            let (agent, cost) = store.attempt_brief(t.id)?;
            rows.push(QueueRow {
                id: t.id.to_string(),
                title: t.title.to_string(),
                source_ref: t.source_ref.to_string(),
                state: t.state,
                agent,
                attempts: t.attempts,
                cost,
                next_attempt_at: t.next_attempt_at.map(str::to_string),
            });
            Ok(())
        })?;
        let midnight = midnight(Utc::now());
        let mut spend = Vec::new();
        for (name, ceiling) in identities {
            let spent = store.cost_spent_since(&name, midnight)?;
            spend.push((name, spent, ceiling));
        }
        Ok(QueueView {
            counts,
            running,
            rows,
            spend,
            slots,
        })
    })
    .await;
    match read {
        Ok(Ok(view)) => page("queue", &render_queue(&view), ""),
        Ok(Err(e)) => failure_page(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
        Err(e) => failure_page(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}

fn midnight(now: DateTime<Utc>) -> DateTime<Utc> {
    now.date_naive()
        .and_hms_opt(0, 0, 0)
        .map_or(now, |m| m.and_utc())
}

/// What the task page shows.
pub struct TaskView {
    pub task: crate::domain::Task,
    pub transitions: Vec<TransitionRecord>,
    pub attempts: Vec<AttemptRecord>,
    pub landing: Option<Landing>,
}

/// The task page's `<main>` (pure).
pub fn render_task(v: &TaskView) -> String {
    let t = &v.task;
    let mut out = String::new();
    let _ = write!(
        out,
        "<h2>{} <span class=muted>{}</span></h2><table id=task>\
         <tr><th>state</th><td class={} id=state>{}</td></tr>\
         <tr><th>source</th><td>{} ({})</td></tr><tr><th>repository</th><td>{}{}</td></tr>\
         <tr><th>type</th><td>{} · risk {} · scope {}</td></tr>\
         <tr><th>attempts</th><td>{} ({} failed)</td></tr>",
        esc(&t.id),
        esc(&t.title),
        t.state,
        t.state,
        esc(&t.source_ref),
        t.source,
        esc(&t.repo),
        t.base_ref
            .as_deref()
            .map_or(String::new(), |b| format!(" @ {}", esc(b))),
        t.task_type,
        t.risk,
        t.scope,
        t.attempts,
        t.failures
    );
    if let Some(next) = t.next_attempt_at {
        let _ = write!(
            out,
            "<tr><th>next attempt</th><td>{}</td></tr>",
            next.format("%Y-%m-%d %H:%M:%S UTC")
        );
    }
    out.push_str("</table>");
    if let Some(l) = &v.landing {
        let pr = l
            .pr_url
            .as_deref()
            .map(|u| match safe_href(u) {
                Some(href) => format!(" · <a id=pr href=\"{href}\">{}</a>", esc(u)),
                None => format!(" · {}", esc(u)),
            })
            .unwrap_or_default();
        let _ = write!(
            out,
            "<p id=landing>landed: branch <code>{}</code> at <code>{}</code>{pr}</p>",
            esc(&l.branch),
            esc(&l.commit_sha)
        );
    }
    out.push_str("<h2>Attempts</h2>");
    if v.attempts.is_empty() {
        out.push_str("<p class=muted>none yet</p>");
    }
    for a in &v.attempts {
        let status = a.status.map_or("running".to_string(), |s| s.to_string());
        let _ = write!(
            out,
            "<h3>#{} {} via {} <span class=muted>(identity {}, branch <code>{}</code>)</span></h3>",
            a.attempt,
            esc(&status),
            esc(&a.agent),
            esc(&a.identity),
            esc(&a.branch)
        );
        if let Some(footer) = report::attempt_footer(a) {
            let _ = write!(out, "<p>{}</p>", esc(&footer));
        }
        if !a.evidence.is_empty() {
            out.push_str("<table class=evidence><tr><th>check</th><th>command</th><th>result</th><th>exit</th><th>duration</th></tr>");
            for e in &a.evidence {
                // A gate has no command: its one-line verdict stands in the command cell.
                let gate = e.command.is_empty();
                let what = if gate {
                    esc(e.output_tail.lines().next().unwrap_or("").trim())
                } else {
                    format!("<code>{}</code>", esc(&e.command))
                };
                let _ = write!(
                    out,
                    "<tr><td>{}</td><td>{what}</td><td class={}>{}</td><td>{}</td><td>{:.1}s</td></tr>",
                    esc(&e.name),
                    if e.passed { "LANDED" } else { "FAILED" },
                    if e.passed { "pass" } else { "FAIL" },
                    e.exit_code.map_or("-".to_string(), |c| c.to_string()),
                    e.duration_ms as f64 / 1000.0
                );
                if !gate && !e.output_tail.trim().is_empty() {
                    let _ = write!(
                        out,
                        "<tr><td colspan=5><pre>{}</pre></td></tr>",
                        esc(&e.output_tail)
                    );
                }
            }
            out.push_str("</table>");
        }
    }
    out.push_str("<h2>Transitions</h2><table id=transitions><tr><th>at</th><th>from</th><th>to</th><th>reason</th></tr>");
    for tr in &v.transitions {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td class={}>{}</td><td>{}</td></tr>",
            tr.at.format("%Y-%m-%d %H:%M:%S"),
            tr.from,
            tr.to,
            tr.to,
            esc(&tr.reason)
        );
    }
    out.push_str("</table>");
    out
}

/// The live tail: outside `<main>`, so the refresh never resets it.
fn tail_script(id: &str, attempt: Option<u32>) -> String {
    let Some(attempt) = attempt else {
        return String::new();
    };
    // The URL is built from the percent-encoded id, which is plain ASCII without quotes.
    let url = format!(
        "/api/v1/tasks/{}/events?attempt={attempt}",
        encode_segment(id)
    );
    format!(
        "<h2>Transcript of attempt {attempt} <span class=muted id=tail-state>live</span></h2>\
         <pre id=tail></pre><script>(function(){{\
         var pre=document.getElementById('tail'),st=document.getElementById('tail-state');\
         var es=new EventSource('{url}');\
         es.addEventListener('event',function(m){{var e;try{{e=JSON.parse(m.data)}}catch(x){{return}}\
         var line=document.createElement('div');\
         line.textContent=(e.at||'').slice(11,19)+'  '+(e.kind||'')+'  '+(e.summary||'');\
         pre.appendChild(line);while(pre.childNodes.length>500){{pre.removeChild(pre.firstChild)}}\
         pre.scrollTop=pre.scrollHeight}});\
         es.addEventListener('end',function(){{st.textContent='ended';es.close()}});\
         es.onerror=function(){{st.textContent='reconnecting'}};\
         }})();</script>"
    )
}

pub async fn task_page(State(s): State<Shared>, Path(id): Path<String>) -> Response {
    let db = s.db.clone();
    let wanted = id.clone();
    let read = tokio::task::spawn_blocking(move || -> Result<Option<TaskView>, StoreError> {
        let store = db.open()?;
        let Some(task) = store.get_task(&wanted)? else {
            return Ok(None);
        };
        Ok(Some(TaskView {
            transitions: store.transitions(&wanted)?,
            attempts: store.attempts(&wanted)?,
            landing: store.landing(&wanted)?,
            task,
        }))
    })
    .await;
    match read {
        Ok(Ok(Some(view))) => {
            let latest = view.attempts.iter().map(|a| a.attempt).max();
            page(&id, &render_task(&view), &tail_script(&id, latest))
        }
        Ok(Ok(None)) => failure_page(StatusCode::NOT_FOUND, &format!("no task `{id}`")),
        Ok(Err(e)) => failure_page(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
        Err(e) => failure_page(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_makes_markup_inert() {
        assert_eq!(
            esc("<script>alert('x')</script> & \"q\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
        assert_eq!(safe_href("javascript:alert(1)"), None);
        assert_eq!(
            safe_href("https://github.com/o/r/pull/1?a=1&b=2").as_deref(),
            Some("https://github.com/o/r/pull/1?a=1&amp;b=2")
        );
    }
}
