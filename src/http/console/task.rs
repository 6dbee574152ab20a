//! The task page: what happened to one task and what can be done about it — the timeline
//! of its attempts (agent, duration, outcome), each check's evidence, the diff that
//! landed, a transcript, its pull request with checks, review and mergeable, links both
//! ways to follow-ups and generations, the egress summary when the task has one, the
//! action log and the transitions.

use askama::Template;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use chrono::{DateTime, Duration, Utc};

use super::view::{self, clock, one_line, stopwatch, task_href, until, Button, Link};
use super::{message, page_with, render, Viewer};
use crate::domain::{Task, TaskState};
use crate::http::Shared;
use crate::ops::actions::ActionRecord;
use crate::store::{AttemptRecord, Landing, PullRecord, Store, StoreError, TransitionRecord};

/// Events of one attempt shown in its transcript.
const TRANSCRIPT_EVENTS: usize = 2_000;
/// The longest diff shown.
const DIFF_BYTES: usize = 200_000;

/// Everything the page is drawn from.
pub struct TaskFacts {
    pub now: DateTime<Utc>,
    pub task: Task,
    pub transitions: Vec<TransitionRecord>,
    pub attempts: Vec<AttemptRecord>,
    pub landing: Option<Landing>,
    pub pull: Option<PullRecord>,
    /// (follow-up task id, its state)
    pub followups: Vec<(String, TaskState)>,
    /// The pull request's task this one follows up, and its number.
    pub followup_of: Option<(String, Option<u64>)>,
    pub generation: u32,
    pub retry_of: Option<String>,
    pub retried_as: Option<String>,
    pub actions: Vec<ActionRecord>,
    /// The attempt whose transcript is shown, and its lines.
    pub transcript: Option<(u32, Vec<String>, bool)>,
    /// The patch that landed (cut when too long), or why it is not shown.
    pub diff: Option<Result<(String, bool), String>>,
    /// The task JSON's `egress` summary, when present (issue 25/26).
    pub egress: Option<String>,
    /// Each attempt's egress lines (the proxy's refusals and its summary), by attempt.
    pub egress_lines: std::collections::BTreeMap<u32, Vec<String>>,
}

pub struct Fact {
    pub key: &'static str,
    pub value: String,
}

pub struct AttemptView {
    pub n: u32,
    pub agent: String,
    pub identity: String,
    pub branch: String,
    pub started: String,
    pub duration: String,
    pub outcome: String,
    pub outcome_class: &'static str,
    pub turns: String,
    pub tokens: String,
    pub cost: String,
    pub reason: String,
    /// Position and width of its bar on the timeline, percent.
    pub left: u32,
    pub width: u32,
    pub evidence: Vec<EvidenceView>,
    /// What its egress proxy allowed and refused (one line each).
    pub egress: Vec<String>,
}

pub struct EvidenceView {
    pub name: String,
    pub what: String,
    pub gate: bool,
    pub passed: bool,
    pub exit: String,
    pub duration: String,
    pub output: String,
}

pub struct LinkedTask {
    pub href: String,
    pub id: String,
    pub note: String,
}

pub struct PullView {
    pub number: u64,
    pub state: String,
    pub checks: String,
    pub review: String,
    pub mergeable: String,
    pub link: Option<Link>,
    pub watching: bool,
}

pub struct TransitionView {
    pub at: String,
    pub from: String,
    pub to: String,
    pub reason: String,
}

#[derive(Template)]
#[template(path = "console/task.html")]
pub struct TaskT<'a> {
    pub id: &'a str,
    pub title: String,
    pub state: String,
    pub next: String,
    pub facts: Vec<Fact>,
    pub actions: Vec<Button>,
    pub csrf: &'a str,
    pub back: String,
    pub can_act: bool,
    pub attempts: Vec<AttemptView>,
    pub landing: Option<Fact>,
    pub pr_link: Option<Link>,
    pub pull: Option<PullView>,
    pub generations: Vec<LinkedTask>,
    pub followups: Vec<LinkedTask>,
    pub log: Vec<ActionRecordView>,
    pub transcript_attempt: u32,
    pub transcript: Vec<String>,
    pub transcript_cut: bool,
    pub other_attempts: Vec<LinkedTask>,
    pub diff: Option<String>,
    pub diff_cut: bool,
    pub diff_missing: Option<String>,
    pub egress: Option<String>,
    pub transitions: Vec<TransitionView>,
    pub live_attempt: Option<u32>,
    pub events_url: String,
}

/// The live tail, outside `<main>` so the refresh never resets it.
#[derive(Template)]
#[template(path = "console/tail.html")]
struct TailT<'a> {
    url: &'a str,
    attempt: u32,
}

pub struct ActionRecordView {
    pub at: String,
    pub action: String,
    pub by: String,
    pub outcome: String,
}

fn secs(s: f64) -> String {
    stopwatch(Duration::seconds(s.round() as i64))
}

/// The page's values (pure).
pub fn build<'a>(f: &TaskFacts, viewer: &'a Viewer) -> TaskT<'a> {
    let t = &f.task;
    let now = f.now;
    let mut facts = vec![
        Fact {
            key: "source",
            value: format!("{} ({})", t.source_ref, t.source),
        },
        Fact {
            key: "repository",
            value: match &t.base_ref {
                Some(b) => format!("{} @ {b}", t.repo),
                None => t.repo.clone(),
            },
        },
        Fact {
            key: "type",
            value: format!("{} · risk {} · scope {}", t.task_type, t.risk, t.scope),
        },
        Fact {
            key: "attempts",
            value: format!(
                "{} ({} failed) · generation {}",
                t.attempts, t.failures, f.generation
            ),
        },
        Fact {
            key: "queued",
            value: format!(
                "{} ({})",
                clock(t.created_at, now),
                view::ago(t.created_at, now)
            ),
        },
    ];
    if !t.labels.is_empty() {
        facts.push(Fact {
            key: "labels",
            value: t.labels.join(", "),
        });
    }
    let mut actions = Vec::new();
    let verb = |v: &str, label: &'static str| Button {
        label,
        path: format!("{}/{v}", task_href(&t.id)),
    };
    match (t.state, t.next_attempt_at) {
        (TaskState::Blocked, _) if f.retried_as.is_none() => actions.push(verb("retry", "Retry")),
        (TaskState::Failed, Some(_)) => {
            actions.push(verb("run-now", "Run now"));
            actions.push(verb("hold", "Hold"));
        }
        (TaskState::Failed, None) => actions.push(verb("release", "Release")),
        _ => {}
    }
    let next = match (t.state, t.next_attempt_at) {
        (TaskState::Failed, Some(at)) => {
            format!("next attempt {} ({})", clock(at, now), until(at, now))
        }
        (TaskState::Blocked, _) => match &f.retried_as {
            Some(n) => format!("retried as {n}"),
            None => format!(
                "blocked: {} — fix the cause, then retry",
                one_line(
                    &f.transitions
                        .iter()
                        .rev()
                        .find(|tr| tr.to == TaskState::Blocked)
                        .map(|tr| tr.reason.clone())
                        .unwrap_or_default(),
                    200
                )
            ),
        },
        (s, n) => view::next_text(s, n, now),
    };
    // The timeline: each attempt as a bar from its start to its end (or now).
    let start = f.attempts.iter().map(|a| a.started_at).min();
    let end = f
        .attempts
        .iter()
        .map(|a| a.finished_at.unwrap_or(now))
        .max();
    let span = match (start, end) {
        (Some(s), Some(e)) => (e - s).num_milliseconds().max(1) as f64,
        _ => 1.0,
    };
    let attempts = f
        .attempts
        .iter()
        .map(|a| {
            let ends = a.finished_at.unwrap_or(now);
            let left = start.map_or(0.0, |s| (a.started_at - s).num_milliseconds() as f64 / span);
            let width = ((ends - a.started_at).num_milliseconds() as f64 / span).max(0.01);
            let (outcome, class) = match a.status {
                None => ("running".to_string(), "RUNNING"),
                Some(s) if s == crate::domain::AttemptStatus::Succeeded => {
                    (s.to_string(), "LANDED")
                }
                Some(s) => (s.to_string(), "FAILED"),
            };
            AttemptView {
                n: a.attempt,
                agent: a.agent.clone(),
                identity: a.identity.clone(),
                branch: a.branch.clone(),
                started: clock(a.started_at, now),
                duration: a
                    .duration_seconds
                    .map(secs)
                    .unwrap_or_else(|| stopwatch(ends - a.started_at)),
                outcome,
                outcome_class: class,
                turns: a.turns.map_or("-".into(), |n| n.to_string()),
                tokens: a.tokens.map_or("-".into(), |t| view::tokens(t.total())),
                cost: a.cost_usd.map_or("-".into(), |c| format!("${c:.4}")),
                reason: a
                    .reason
                    .as_deref()
                    .map(|r| one_line(r, 300))
                    .unwrap_or_default(),
                egress: f.egress_lines.get(&a.attempt).cloned().unwrap_or_default(),
                left: (left * 100.0).round().clamp(0.0, 99.0) as u32,
                width: (width * 100.0).round().clamp(1.0, 100.0) as u32,
                evidence: a
                    .evidence
                    .iter()
                    .map(|e| {
                        let gate = e.command.is_empty();
                        EvidenceView {
                            name: e.name.clone(),
                            what: if gate {
                                one_line(&e.output_tail, 300)
                            } else {
                                e.command.clone()
                            },
                            gate,
                            passed: e.passed,
                            exit: e.exit_code.map_or("-".into(), |c| c.to_string()),
                            duration: format!("{:.1}s", e.duration_ms as f64 / 1000.0),
                            output: if gate {
                                String::new()
                            } else {
                                e.output_tail.clone()
                            },
                        }
                    })
                    .collect(),
            }
        })
        .collect();
    let landing = f.landing.as_ref().map(|l| Fact {
        key: "landed",
        value: format!("branch {} at {}", l.branch, l.commit_sha),
    });
    let pr_link = f
        .landing
        .as_ref()
        .and_then(|l| l.pr_url.as_deref())
        .and_then(crate::http::safe_url)
        .map(|href| Link {
            text: href.clone(),
            href,
        });
    let pull = f.pull.as_ref().map(|p| PullView {
        number: p.number,
        state: p.state.clone(),
        checks: p.checks.clone().unwrap_or_else(|| "unknown".into()),
        review: p.review.clone().unwrap_or_else(|| "none".into()),
        mergeable: p.mergeable.clone().unwrap_or_else(|| "unknown".into()),
        link: pr_link.as_ref().map(|l| Link {
            href: l.href.clone(),
            text: format!("#{}", p.number),
        }),
        watching: p.watching,
    });
    let mut generations = Vec::new();
    if let Some(prev) = &f.retry_of {
        generations.push(LinkedTask {
            href: task_href(prev),
            id: prev.clone(),
            note: "the BLOCKED generation this one retries".into(),
        });
    }
    if let Some(next) = &f.retried_as {
        generations.push(LinkedTask {
            href: task_href(next),
            id: next.clone(),
            note: "the next generation, retrying this one".into(),
        });
    }
    let mut followups: Vec<LinkedTask> = f
        .followups
        .iter()
        .map(|(id, state)| LinkedTask {
            href: task_href(id),
            id: id.clone(),
            note: format!("follow-up ({state})"),
        })
        .collect();
    if let Some((of, number)) = &f.followup_of {
        followups.push(LinkedTask {
            href: task_href(of),
            id: of.clone(),
            note: match number {
                Some(n) => format!("the task whose pull request #{n} this follows up"),
                None => "the task whose pull request this follows up".into(),
            },
        });
    }
    let (transcript_attempt, transcript, transcript_cut) = match &f.transcript {
        Some((n, lines, cut)) => (*n, lines.clone(), *cut),
        None => (0, vec![], false),
    };
    let other_attempts = f
        .attempts
        .iter()
        .filter(|a| a.attempt != transcript_attempt)
        .map(|a| LinkedTask {
            href: format!("{}?attempt={}", task_href(&t.id), a.attempt),
            id: format!("attempt {}", a.attempt),
            note: String::new(),
        })
        .collect();
    let (diff, diff_cut, diff_missing) = match &f.diff {
        Some(Ok((d, cut))) => (Some(d.clone()), *cut, None),
        Some(Err(why)) => (None, false, Some(why.clone())),
        None => (None, false, None),
    };
    let live_attempt = f
        .attempts
        .iter()
        .filter(|a| a.status.is_none())
        .map(|a| a.attempt)
        .max()
        .or_else(|| f.attempts.iter().map(|a| a.attempt).max());
    TaskT {
        id: "",
        title: t.title.clone(),
        state: t.state.to_string(),
        next,
        facts,
        actions,
        csrf: &viewer.csrf,
        back: task_href(&t.id),
        can_act: viewer.signed_in,
        attempts,
        landing,
        pr_link,
        pull,
        generations,
        followups,
        log: f
            .actions
            .iter()
            .rev()
            .map(|a| ActionRecordView {
                at: clock(a.at, now),
                action: a.action.clone(),
                by: match &a.from {
                    Some(from) => format!("{} via {} from {from}", a.by, a.via),
                    None => format!("{} via {}", a.by, a.via),
                },
                outcome: a.outcome.clone(),
            })
            .collect(),
        transcript_attempt,
        transcript,
        transcript_cut,
        other_attempts,
        diff,
        diff_cut,
        diff_missing,
        egress: f.egress.clone(),
        transitions: f
            .transitions
            .iter()
            .map(|tr| TransitionView {
                at: tr.at.format("%Y-%m-%d %H:%M:%S").to_string(),
                from: tr.from.to_string(),
                to: tr.to.to_string(),
                reason: tr.reason.clone(),
            })
            .collect(),
        live_attempt,
        events_url: live_attempt.map_or(String::new(), |n| {
            format!(
                "/api/v1/tasks/{}/events?attempt={n}",
                crate::http::encode_segment(&t.id)
            )
        }),
    }
}

fn read(
    store: &Store,
    id: &str,
    wanted_attempt: Option<u32>,
) -> Result<Option<TaskFacts>, StoreError> {
    let Some(task) = store.get_task(id)? else {
        return Ok(None);
    };
    let attempts = store.attempts(id)?;
    let landing = store.landing(id)?;
    let links = store.generation_links(id)?;
    let followups = store
        .followups_of(id)?
        .into_iter()
        .map(|f| (f.task_id, f.state))
        .collect();
    let followup_of = match store.followup(id)? {
        Some(f) => {
            let number = store.pull(&f.pull_task_id)?.map(|p| p.number);
            Some((f.pull_task_id, number))
        }
        None => None,
    };
    let shown = wanted_attempt
        .filter(|n| attempts.iter().any(|a| a.attempt == *n))
        .or_else(|| attempts.iter().map(|a| a.attempt).max());
    let transcript = match shown {
        Some(n) => {
            let mut events = store.events(id, n, None, TRANSCRIPT_EVENTS + 1)?;
            let cut = events.len() > TRANSCRIPT_EVENTS;
            events.truncate(TRANSCRIPT_EVENTS);
            // Issue 25: the proxy's refusals and summary, stored apart as it logs them,
            // among the stream's events by time (a stable sort: each keeps its order).
            events.extend(
                store
                    .egress_rows_after(id, n, None)?
                    .into_iter()
                    .map(|(_, e)| e),
            );
            events.sort_by_key(|e| e.at);
            Some((
                n,
                events.iter().map(crate::ops::report::event_line).collect(),
                cut,
            ))
        }
        None => None,
    };
    let diff = landing.as_ref().map(|l| {
        let ws = attempts
            .iter()
            .find(|a| a.attempt == l.attempt)
            .map(|a| a.workspace.clone());
        match ws.and_then(|w| crate::workspace::diff::commit_patch(&w, &l.commit_sha, DIFF_BYTES)) {
            Some(p) => Ok(p),
            None => Err(format!(
                "the attempt's workspace is gone (cleaned up): the diff is commit {} on branch {}",
                l.commit_sha, l.branch
            )),
        }
    });
    let egress = store
        .task_detail_json(id)?
        .and_then(|d| d.get("egress").filter(|e| !e.is_null()).cloned())
        .map(|e| match e {
            serde_json::Value::String(s) => s,
            other => serde_json::to_string_pretty(&other).unwrap_or_default(),
        });
    let mut egress_lines = std::collections::BTreeMap::new();
    for a in &attempts {
        let lines: Vec<String> = store
            .egress_events(id, a.attempt)?
            .iter()
            .map(|e| one_line(&e.summary, 300))
            .collect();
        if !lines.is_empty() {
            egress_lines.insert(a.attempt, lines);
        }
    }
    Ok(Some(TaskFacts {
        egress_lines,
        now: Utc::now(),
        generation: crate::domain::generation::number(&task),
        transitions: store.transitions(id)?,
        pull: store.pull(id)?,
        actions: crate::ops::actions::actions(store, id)?,
        task,
        attempts,
        landing,
        followups,
        followup_of,
        retry_of: links.retry_of,
        retried_as: links.retried_as,
        transcript,
        diff,
        egress,
    }))
}

/// `GET /tasks/{id}[?attempt=N]`.
pub async fn task_page(
    State(s): State<Shared>,
    Path(id): Path<String>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    let viewer = Viewer::of(&s, &headers);
    let q = super::query_of(raw.as_deref());
    let (db, wanted) = (s.db.clone(), id.clone());
    let got = tokio::task::spawn_blocking(move || {
        let store = db.open()?;
        read(&store, &wanted, q.attempt)
    })
    .await;
    let facts = match got {
        Ok(Ok(Some(f))) => f,
        Ok(Ok(None)) => {
            return message(
                &viewer,
                StatusCode::NOT_FOUND,
                "No such task",
                &format!("no task `{id}`"),
                "/",
            )
        }
        Ok(Err(e)) => return super::unavailable(&viewer, &e.to_string()),
        Err(e) => return super::unavailable(&viewer, &e.to_string()),
    };
    let mut t = build(&facts, &viewer);
    t.id = &id;
    let main = render(&t);
    let after = match t.live_attempt {
        Some(attempt) => render(&TailT {
            url: &t.events_url,
            attempt,
        }),
        None => String::new(),
    };
    let back = t.back.clone();
    page_with(
        &id,
        &viewer,
        &back,
        q.notice.as_deref(),
        &back,
        &main,
        &after,
        StatusCode::OK,
    )
}
