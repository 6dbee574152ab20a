//! From stored facts to what the console shows (pure: `now` is a parameter): the
//! attention list with each item's next step, the running attempts with their counters,
//! the usage-limit bars, the pictures' numbers, the queue rows.
//!
//! Times shown to people are clock times and countdowns ("resumes 08:19 UTC (in 52
//! min)"), never epoch seconds or RFC 3339; the RFC 3339 instant only goes into a
//! `data-until`/`data-since` attribute for the page's script to keep counting.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Duration, NaiveDate, Utc};

use super::live::Counters;
use super::svg::{self, BarChart, Row, Series};
use crate::domain::{AgentQuota, AttemptStatus, QuotaWait, TaskState};
use crate::store::{AttemptRecord, PullRecord, RunningAttempt, TransitionRecord};

// ---------------------------------------------------------------- time, said for people

/// `08:19 UTC` today, `Dec 2 08:19 UTC` on another day.
pub fn clock(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    if at.date_naive() == now.date_naive() {
        at.format("%H:%M UTC").to_string()
    } else {
        at.format("%b %-d %H:%M UTC").to_string()
    }
}

/// A span as people say it: `40 s`, `52 min`, `2 h 05 min`, `3 days`.
pub fn span(d: Duration) -> String {
    let s = d.num_seconds().max(0);
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min", (s + 30) / 60),
        3600..=172_799 => format!("{} h {:02} min", s / 3600, (s % 3600) / 60),
        _ => format!("{} days", s / 86_400),
    }
}

/// `in 52 min`, or `due now` once it has passed.
pub fn until(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    if at <= now {
        "due now".to_string()
    } else {
        format!("in {}", span(at - now))
    }
}

/// `12 s ago`.
pub fn ago(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    format!("{} ago", span(now - at))
}

/// An elapsed time as a stopwatch: `42s`, `4m 12s`, `1h 02m`.
pub fn stopwatch(d: Duration) -> String {
    let s = d.num_seconds().max(0);
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
    }
}

fn money(v: f64) -> String {
    format!("${v:.2}")
}

fn count(v: f64) -> String {
    format!("{}", v.round() as i64)
}

fn minutes(v: f64) -> String {
    if v < 1.0 && v > 0.0 {
        format!("{:.0}s", v * 60.0)
    } else {
        format!("{:.0}m", v)
    }
}

/// The first line of `text`, at most `max` characters.
pub fn one_line(text: &str, max: usize) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    if line.chars().count() > max {
        let cut: String = line.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    } else {
        line.to_string()
    }
}

// ---------------------------------------------------------------- facts (gathered by IO)

/// A BLOCKED task not retried yet.
#[derive(Debug, Clone)]
pub struct BlockedFact {
    pub id: String,
    pub title: String,
    /// The reason of its move to BLOCKED.
    pub reason: String,
    /// A gate of its last attempt that refused it: (gate, verdict).
    pub gate: Option<(String, String)>,
}

/// A FAILED task: waiting for its next attempt, or held.
#[derive(Debug, Clone)]
pub struct ParkedFact {
    pub id: String,
    pub title: String,
    pub failures: u32,
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// The reason of its move to FAILED.
    pub reason: String,
    pub quota_wait: Option<QuotaWait>,
    pub gate: Option<(String, String)>,
}

/// A pull request of a landed task.
#[derive(Debug, Clone)]
pub struct PullFact {
    pub pull: PullRecord,
    pub title: String,
    pub url: Option<String>,
}

/// A running attempt and its counters so far.
#[derive(Debug, Clone)]
pub struct RunningFact {
    pub attempt: RunningAttempt,
    pub counters: Counters,
}

/// Everything the console's front page is drawn from.
#[derive(Debug, Clone)]
pub struct Facts {
    pub now: DateTime<Utc>,
    /// This daemon's agent slots and machine.
    pub slots: u32,
    pub machine: String,
    /// The agent slots other machines' daemons recorded (issue 29), by machine: every
    /// machine whose heartbeat runs (issue 27), and those of running attempts.
    pub machine_slots: BTreeMap<String, u32>,
    pub counts: BTreeMap<TaskState, u64>,
    pub running: Vec<RunningFact>,
    pub blocked: Vec<BlockedFact>,
    pub parked: Vec<ParkedFact>,
    /// Pull requests (with the title of their task and the URL the landing recorded).
    pub pulls: Vec<PullFact>,
    pub quota: Vec<AgentQuota>,
    /// (identity, daily ceiling)
    pub identities: Vec<(String, Option<f64>)>,
    /// Attempts of the last 30 days.
    pub attempts: Vec<AttemptRecord>,
    /// Moves to LANDED and to BLOCKED in the last 30 days.
    pub landed: Vec<TransitionRecord>,
    pub blocked_moves: Vec<TransitionRecord>,
    /// (queued at, claimed at), last 30 days.
    pub queue_waits: Vec<(DateTime<Utc>, DateTime<Utc>)>,
}

// ---------------------------------------------------------------- what is shown

/// A form button: POST to `path`.
#[derive(Debug, Clone, PartialEq)]
pub struct Button {
    pub label: &'static str,
    pub path: String,
}

/// One thing that needs a person.
#[derive(Debug, Clone, PartialEq)]
pub struct Attention {
    /// `blocked`, `parked`, `held`, `pull`, `gate` (a CSS class and test hook).
    pub kind: &'static str,
    pub badge: String,
    pub task_id: String,
    pub href: String,
    pub title: String,
    /// The reason and the next step, one line.
    pub line: String,
    pub countdown: Option<Countdown>,
    pub actions: Vec<Button>,
    /// An outside link (the pull request), already checked to be http(s).
    pub link: Option<Link>,
}

/// A countdown: the RFC 3339 instant (for the script) and its text as of `now`.
#[derive(Debug, Clone, PartialEq)]
pub struct Countdown {
    pub until: String,
    pub text: String,
}

impl Countdown {
    fn to(at: DateTime<Utc>, now: DateTime<Utc>) -> Countdown {
        Countdown {
            until: at.to_rfc3339(),
            text: until(at, now),
        }
    }
}

/// A link to elsewhere (http(s) only) and its text.
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    pub href: String,
    pub text: String,
}

/// One agent slot.
#[derive(Debug, Clone, PartialEq)]
pub struct Slot {
    pub n: u32,
    pub running: Option<RunningView>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RunningView {
    pub task_id: String,
    pub href: String,
    pub title: String,
    pub state: String,
    pub attempt: u32,
    pub agent: String,
    pub identity: String,
    /// RFC 3339 start, for the script's stopwatch.
    pub since: String,
    pub elapsed: String,
    pub turns: u32,
    pub tokens: String,
    pub cost: String,
    pub tool_calls: u32,
    pub last: String,
    pub last_ago: String,
    /// Cancel (once the daemon can cancel an attempt from here).
    pub actions: Vec<Button>,
}

/// One machine's agent slots. A home with one machine has one, unnamed; a fleet (a running
/// attempt claimed by another machine) has one per machine, this one first.
#[derive(Debug, Clone, PartialEq)]
pub struct MachineSlots {
    pub name: Option<String>,
    /// `2 of 4 slots busy`, or `1 running` when the machine never said how many it runs.
    pub line: String,
    pub slots: Vec<Slot>,
}

/// A usage-limit window as a bar.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaBar {
    pub who: String,
    /// Percent of the window gone (0–100); 100 when available again.
    pub percent: u32,
    pub out: bool,
    pub text: String,
    pub until: Option<String>,
}

/// Spend today against the ceiling.
#[derive(Debug, Clone, PartialEq)]
pub struct SpendBar {
    pub identity: String,
    pub percent: u32,
    pub over: bool,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Picture {
    pub title: String,
    pub svg: String,
}

/// The front page.
#[derive(Debug, Clone, PartialEq)]
pub struct Home {
    pub summary: String,
    pub attention: Vec<Attention>,
    pub machines: Vec<MachineSlots>,
    pub quota: Vec<QuotaBar>,
    pub spend: Vec<SpendBar>,
    pub pictures: Vec<Picture>,
}

pub fn task_href(id: &str) -> String {
    format!("/tasks/{}", crate::http::encode_segment(id))
}

fn action(id: &str, verb: &str, label: &'static str) -> Button {
    Button {
        label,
        path: format!("/tasks/{}/{verb}", crate::http::encode_segment(id)),
    }
}

fn with_gate(line: String, gate: &Option<(String, String)>) -> (String, bool) {
    match gate {
        Some((name, verdict)) => (
            format!("refused by the {name} gate: {}", one_line(verdict, 160)),
            true,
        ),
        None => (line, false),
    }
}

/// The attention list: BLOCKED first, then waiting and held tasks (soonest first), then
/// pull requests with failing checks or changes requested.
pub fn attention(f: &Facts) -> Vec<Attention> {
    let now = f.now;
    let mut out = Vec::new();
    for b in &f.blocked {
        let (line, gated) = with_gate(one_line(&b.reason, 200), &b.gate);
        out.push(Attention {
            kind: if gated { "gate" } else { "blocked" },
            badge: "BLOCKED".into(),
            task_id: b.id.clone(),
            href: task_href(&b.id),
            title: b.title.clone(),
            line: format!("{line} — fix the cause, then retry"),
            countdown: None,
            actions: vec![action(&b.id, "retry", "Retry")],
            link: None,
        });
    }
    let mut parked: Vec<&ParkedFact> = f.parked.iter().collect();
    parked.sort_by_key(|p| (p.next_attempt_at.is_none(), p.next_attempt_at));
    for p in parked {
        let (why, gated) = with_gate(one_line(&p.reason, 160), &p.gate);
        match (p.next_attempt_at, &p.quota_wait) {
            (Some(_), Some(w)) => out.push(Attention {
                kind: "parked",
                badge: "waiting for a limit".into(),
                task_id: p.id.clone(),
                href: task_href(&p.id),
                title: p.title.clone(),
                line: format!(
                    "waits for {}@{}'s limit, resumes {}",
                    w.agent,
                    w.identity,
                    clock(w.until, now)
                ),
                countdown: Some(Countdown::to(w.until, now)),
                actions: vec![
                    action(&p.id, "run-now", "Run now"),
                    action(&p.id, "hold", "Hold"),
                ],
                link: None,
            }),
            (Some(at), None) => out.push(Attention {
                kind: if gated { "gate" } else { "parked" },
                badge: format!("FAILED {} time{}", p.failures, plural(p.failures)),
                task_id: p.id.clone(),
                href: task_href(&p.id),
                title: p.title.clone(),
                line: format!("{why}; next attempt {}", clock(at, now)),
                countdown: Some(Countdown::to(at, now)),
                actions: vec![
                    action(&p.id, "run-now", "Run now"),
                    action(&p.id, "hold", "Hold"),
                ],
                link: None,
            }),
            (None, _) => out.push(Attention {
                kind: "held",
                badge: "held".into(),
                task_id: p.id.clone(),
                href: task_href(&p.id),
                title: p.title.clone(),
                line: format!("{why}; no attempt is scheduled until it is released"),
                countdown: None,
                actions: vec![action(&p.id, "release", "Release")],
                link: None,
            }),
        }
    }
    for PullFact { pull, title, url } in &f.pulls {
        if pull.state != "open" {
            continue;
        }
        let failing = pull.checks.as_deref() == Some("failing");
        let changes = pull.review.as_deref() == Some("changes_requested");
        if !(failing || changes) {
            continue;
        }
        let mut what = Vec::new();
        if failing {
            what.push("checks failing");
        }
        if changes {
            what.push("changes requested");
        }
        let next = if pull.watching {
            "the shepherd is on it"
        } else {
            "nobody is watching it: look at it"
        };
        out.push(Attention {
            kind: "pull",
            badge: format!("PR #{}", pull.number),
            task_id: pull.task_id.clone(),
            href: task_href(&pull.task_id),
            title: title.clone(),
            line: format!(
                "{} ({} follow-ups); {next}",
                what.join(", "),
                pull.followups
            ),
            countdown: None,
            actions: vec![],
            link: url
                .as_deref()
                .and_then(crate::http::safe_url)
                .map(|href| Link {
                    href,
                    text: format!("#{}", pull.number),
                }),
        });
    }
    out
}

fn plural(n: u32) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// A token count for people: `950`, `16.7k`, `1.20M`.
pub fn tokens(n: u64) -> String {
    match n {
        0..=9_999 => n.to_string(),
        10_000..=999_999 => format!("{:.1}k", n as f64 / 1000.0),
        _ => format!("{:.2}M", n as f64 / 1e6),
    }
}

/// The agent slots per machine (issue 29): the machine of a running attempt is the one
/// whose daemon holds its claim (an unowned claim is this machine's), and every other
/// machine whose heartbeat runs has a group, idle or not (issue 27). Without another
/// machine, one unnamed group of this daemon's slots.
pub fn machines(f: &Facts) -> Vec<MachineSlots> {
    let mut by: BTreeMap<&str, Vec<&RunningFact>> = BTreeMap::new();
    let mut here: Vec<&RunningFact> = Vec::new();
    for r in &f.running {
        match r.attempt.machine.as_deref() {
            Some(m) if m != f.machine => by.entry(m).or_default().push(r),
            _ => here.push(r),
        }
    }
    // A live machine with nothing running is shown too, with its idle slots (issue 27).
    for name in f.machine_slots.keys().filter(|m| **m != f.machine) {
        by.entry(name.as_str()).or_default();
    }
    if by.is_empty() {
        return vec![MachineSlots {
            name: None,
            line: String::new(),
            slots: slots(f.slots, &here, f.now),
        }];
    }
    let group = |name: &str, known: Option<u32>, running: &[&RunningFact]| {
        let line = match known {
            Some(n) => format!(
                "{} of {} slots busy",
                running.len(),
                n.max(running.len() as u32)
            ),
            None => format!("{} running", running.len()),
        };
        MachineSlots {
            name: Some(name.to_string()),
            line,
            slots: slots(known.unwrap_or(0), running, f.now),
        }
    };
    let mut out = vec![group(&f.machine, Some(f.slots), &here)];
    for (name, running) in by {
        out.push(group(name, f.machine_slots.get(name).copied(), &running));
    }
    out
}

/// `n` slots (at least one per running attempt), busy ones first, each with its attempt's
/// counters.
fn slots(n: u32, running: &[&RunningFact], now: DateTime<Utc>) -> Vec<Slot> {
    let n = n.max(running.len() as u32);
    (0..n)
        .map(|i| Slot {
            n: i + 1,
            running: running.get(i as usize).map(|r| {
                let a = &r.attempt;
                let c = &r.counters;
                RunningView {
                    task_id: a.task_id.clone(),
                    href: task_href(&a.task_id),
                    title: a.title.clone(),
                    state: a.state.to_string(),
                    attempt: a.attempt,
                    agent: a.agent.clone(),
                    identity: a.identity.clone(),
                    since: a.started_at.to_rfc3339(),
                    elapsed: stopwatch(now - a.started_at),
                    turns: c.turns,
                    tokens: tokens(c.tokens),
                    cost: c.cost_usd.map_or("-".into(), money),
                    tool_calls: c.tool_calls,
                    last: c
                        .last
                        .as_ref()
                        .map_or("no output yet".into(), |(_, s)| one_line(s, 120)),
                    last_ago: c
                        .last
                        .as_ref()
                        .map_or(String::new(), |(at, _)| ago(*at, now)),
                    actions: vec![action(&a.task_id, "cancel", "Cancel")],
                }
            }),
        })
        .collect()
}

/// Each (identity, agent) limit met: out until its reset, or available again.
pub fn quota_bars(f: &Facts) -> Vec<QuotaBar> {
    let mut rows: Vec<&AgentQuota> = f.quota.iter().collect();
    rows.sort_by(|a, b| (&a.identity, &a.agent).cmp(&(&b.identity, &b.agent)));
    rows.into_iter()
        .map(|q| {
            let who = format!("{}@{}", q.agent, q.identity);
            if q.resets_at > f.now {
                let window = (q.resets_at - q.hit_at).num_seconds().max(1) as f64;
                let gone = (f.now - q.hit_at).num_seconds().max(0) as f64;
                QuotaBar {
                    who,
                    percent: ((gone / window) * 100.0).clamp(0.0, 100.0) as u32,
                    out: true,
                    text: format!(
                        "out since {}, resets {}",
                        clock(q.hit_at, f.now),
                        clock(q.resets_at, f.now)
                    ),
                    until: Some(q.resets_at.to_rfc3339()),
                }
            } else {
                QuotaBar {
                    who,
                    percent: 100,
                    out: false,
                    text: format!("available (limit reset {})", clock(q.resets_at, f.now)),
                    until: None,
                }
            }
        })
        .collect()
}

/// Cost today (UTC) per identity against its ceiling.
pub fn spend(f: &Facts) -> Vec<SpendBar> {
    let today = f.now.date_naive();
    f.identities
        .iter()
        .map(|(name, ceiling)| {
            let spent: f64 = f
                .attempts
                .iter()
                .filter(|a| &a.identity == name && a.started_at.date_naive() == today)
                .filter_map(|a| a.cost_usd)
                .sum();
            match ceiling {
                Some(c) if *c > 0.0 => SpendBar {
                    identity: name.clone(),
                    percent: ((spent / c) * 100.0).clamp(0.0, 100.0) as u32,
                    over: spent >= *c,
                    text: format!("{} of {} today", money(spent), money(*c)),
                },
                _ => SpendBar {
                    identity: name.clone(),
                    percent: 0,
                    over: false,
                    text: format!("{} today, no ceiling", money(spent)),
                },
            }
        })
        .collect()
}

/// The last `n` UTC days ending today, oldest first.
pub fn days(now: DateTime<Utc>, n: usize) -> Vec<NaiveDate> {
    let today = now.date_naive();
    (0..n)
        .rev()
        .map(|back| today - Duration::days(back as i64))
        .collect()
}

fn day_label(d: NaiveDate) -> String {
    d.format("%m-%d").to_string()
}

/// Cost per day of `identity` over the last `n` days (pure; the picture's numbers).
pub fn cost_per_day(attempts: &[AttemptRecord], identity: &str, days: &[NaiveDate]) -> Vec<f64> {
    days.iter()
        .map(|d| {
            attempts
                .iter()
                .filter(|a| a.identity == identity && a.started_at.date_naive() == *d)
                .filter_map(|a| a.cost_usd)
                .sum()
        })
        .collect()
}

/// Moves per day (landed, blocked), distinct tasks per day.
pub fn per_day(moves: &[TransitionRecord], days: &[NaiveDate]) -> Vec<f64> {
    days.iter()
        .map(|d| {
            moves
                .iter()
                .filter(|m| m.at.date_naive() == *d)
                .map(|m| m.task_id.as_str())
                .collect::<BTreeSet<_>>()
                .len() as f64
        })
        .collect()
}

/// The median of `values` (None when empty).
pub fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    let mid = values.len() / 2;
    Some(if values.len().is_multiple_of(2) {
        (values[mid - 1] + values[mid]) / 2.0
    } else {
        values[mid]
    })
}

/// Per agent: (finished attempts, succeeded, median duration in seconds).
pub fn per_agent(attempts: &[AttemptRecord]) -> BTreeMap<String, (u32, u32, Option<f64>)> {
    let mut by: BTreeMap<String, (u32, u32, Vec<f64>)> = BTreeMap::new();
    for a in attempts {
        let Some(status) = a.status else { continue };
        // A usage limit or a cancel says nothing of the agent's skill.
        if matches!(status, AttemptStatus::Quota | AttemptStatus::Cancelled) {
            continue;
        }
        let e = by.entry(a.agent.clone()).or_default();
        e.0 += 1;
        if status == AttemptStatus::Succeeded {
            e.1 += 1;
        }
        if let Some(d) = a.duration_seconds {
            e.2.push(d);
        }
    }
    by.into_iter()
        .map(|(k, (n, ok, mut d))| (k, (n, ok, median(&mut d))))
        .collect()
}

/// The pictures, drawn.
pub fn pictures(f: &Facts) -> Vec<Picture> {
    let mut out = Vec::new();
    for window in [7usize, 30] {
        let ds = days(f.now, window);
        let labels: Vec<String> = ds.iter().map(|d| day_label(*d)).collect();
        for (name, ceiling) in &f.identities {
            let id = format!("cost-{}-{window}", crate::http::encode_segment(name));
            let title = format!("{name}: cost per day, {window} days");
            out.push(Picture {
                title: title.clone(),
                svg: svg::bar_chart(&BarChart {
                    id,
                    title,
                    groups: labels.clone(),
                    series: vec![Series {
                        name: name.clone(),
                        colour: "#1a56db",
                        values: cost_per_day(&f.attempts, name, &ds),
                    }],
                    line: ceiling.map(|c| (c, format!("ceiling {}", money(c)))),
                    format: money,
                    label_every: if window <= 7 { 1 } else { 7 },
                    totals: true,
                }),
            });
        }
    }
    let ds = days(f.now, 14);
    out.push(Picture {
        title: "Tasks landed and blocked per day".into(),
        svg: svg::bar_chart(&BarChart {
            id: "throughput".into(),
            title: "Tasks landed and blocked per day, 14 days".into(),
            groups: ds.iter().map(|d| day_label(*d)).collect(),
            series: vec![
                Series {
                    name: "landed".into(),
                    colour: "#137333",
                    values: per_day(&f.landed, &ds),
                },
                Series {
                    name: "blocked".into(),
                    colour: "#b3261e",
                    values: per_day(&f.blocked_moves, &ds),
                },
            ],
            line: None,
            format: count,
            label_every: 3,
            totals: true,
        }),
    });
    let rows: Vec<Row> = per_agent(&f.attempts)
        .into_iter()
        .map(|(agent, (n, ok, med))| Row {
            label: agent,
            fraction: if n == 0 { 0.0 } else { ok as f64 / n as f64 },
            text: format!(
                "{}% of {n} · median {}",
                (ok * 100 + n / 2).checked_div(n).unwrap_or(0),
                med.map_or("-".into(), |s| stopwatch(Duration::seconds(
                    s.round() as i64
                )))
            ),
            colour: "#137333",
        })
        .collect();
    out.push(Picture {
        title: "Success rate and median attempt time per agent".into(),
        svg: svg::row_chart(
            "agents",
            "Success rate and median attempt time per agent, 30 days",
            &rows,
        ),
    });
    let waits: Vec<f64> = ds
        .iter()
        .map(|d| {
            let mut w: Vec<f64> = f
                .queue_waits
                .iter()
                .filter(|(_, claimed)| claimed.date_naive() == *d)
                .map(|(queued, claimed)| (*claimed - *queued).num_seconds().max(0) as f64 / 60.0)
                .collect();
            median(&mut w).unwrap_or(0.0)
        })
        .collect();
    out.push(Picture {
        title: "Queue wait".into(),
        svg: svg::bar_chart(&BarChart {
            id: "queue-wait".into(),
            title: "Median queue wait per day (minutes), 14 days".into(),
            groups: ds.iter().map(|d| day_label(*d)).collect(),
            series: vec![Series {
                name: "median wait".into(),
                colour: "#7a5af8",
                values: waits,
            }],
            line: None,
            format: minutes,
            label_every: 3,
            totals: false,
        }),
    });
    out
}

/// One queue row.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueRow {
    pub id: String,
    pub href: String,
    pub title: String,
    pub state: String,
    pub next: String,
    pub agent: String,
    pub attempts: u32,
    pub cost: String,
}

/// What comes next for a task in `state`, said for people (the queue's NEXT column).
pub fn next_text(state: TaskState, next: Option<DateTime<Utc>>, now: DateTime<Utc>) -> String {
    match (state, next) {
        (TaskState::Failed, Some(at)) => format!("retry {} ({})", clock(at, now), until(at, now)),
        (TaskState::Failed, None) => "held".into(),
        (TaskState::Discovered, _) => "waiting for a slot".into(),
        (TaskState::Blocked, _) => "blocked: retry once fixed".into(),
        (TaskState::Landed, _) => "landed".into(),
        _ => "in progress".into(),
    }
}

/// The front page (pure).
pub fn home(f: &Facts) -> Home {
    let attention = attention(f);
    let landed_today = f.counts.get(&TaskState::Landed).copied().unwrap_or(0);
    let machines = machines(f);
    let total: usize = machines.iter().map(|m| m.slots.len()).sum();
    let on = match machines.len() {
        1 => String::new(),
        n => format!(" on {n} machines"),
    };
    let summary = format!(
        "{} need{} attention · {} of {total} agent slots busy{on} · {} landed",
        attention.len(),
        if attention.len() == 1 { "s" } else { "" },
        f.running.len(),
        landed_today
    );
    Home {
        summary,
        attention,
        machines,
        quota: quota_bars(f),
        spend: spend(f),
        pictures: pictures(f),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::AgentReset;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn facts() -> Facts {
        Facts {
            now: at("2026-12-01T07:27:00Z"),
            slots: 2,
            machine: "here".into(),
            machine_slots: BTreeMap::new(),
            counts: BTreeMap::new(),
            running: vec![],
            blocked: vec![],
            parked: vec![],
            pulls: vec![],
            quota: vec![],
            identities: vec![("demo".into(), Some(5.0))],
            attempts: vec![],
            landed: vec![],
            blocked_moves: vec![],
            queue_waits: vec![],
        }
    }

    #[test]
    fn times_for_people() {
        let now = at("2026-12-01T07:27:00Z");
        assert_eq!(clock(at("2026-12-01T08:19:22Z"), now), "08:19 UTC");
        assert_eq!(clock(at("2026-12-02T08:19:22Z"), now), "Dec 2 08:19 UTC");
        assert_eq!(until(at("2026-12-01T08:19:22Z"), now), "in 52 min");
        assert_eq!(until(at("2026-12-01T07:27:40Z"), now), "in 40 s");
        assert_eq!(until(at("2026-12-01T10:32:00Z"), now), "in 3 h 05 min");
        assert_eq!(until(at("2026-12-01T07:00:00Z"), now), "due now");
        assert_eq!(ago(at("2026-12-01T07:26:48Z"), now), "12 s ago");
        assert_eq!(stopwatch(Duration::seconds(252)), "4m 12s");
        assert_eq!(stopwatch(Duration::seconds(3720)), "1h 02m");
        assert_eq!(one_line("\n  first line \nsecond", 100), "first line");
        assert_eq!(one_line("abcdef", 4), "abc…");
        assert_eq!(
            next_text(TaskState::Failed, Some(at("2026-12-01T08:19:22Z")), now),
            "retry 08:19 UTC (in 52 min)"
        );
        assert_eq!(
            next_text(TaskState::Blocked, None, now),
            "blocked: retry once fixed"
        );
    }

    #[test]
    fn attention_lists_blocked_then_parked_with_next_steps() {
        let mut f = facts();
        f.blocked.push(BlockedFact {
            id: "local-3".into(),
            title: "Fix parser".into(),
            reason: "verification failed 3 times: test exited 1\n(long log)".into(),
            gate: None,
        });
        let until_at = at("2026-12-01T08:19:22Z");
        f.parked.push(ParkedFact {
            id: "local-4".into(),
            title: "Add flag".into(),
            failures: 0,
            next_attempt_at: Some(until_at),
            reason: "usage limit".into(),
            quota_wait: Some(QuotaWait {
                task_id: "local-4".into(),
                until: until_at,
                agent: "claude".into(),
                identity: "demo".into(),
                resets: vec![AgentReset {
                    agent: "claude".into(),
                    identity: "demo".into(),
                    resets_at: until_at,
                }],
                parked_at: at("2026-12-01T07:00:00Z"),
            }),
            gate: None,
        });
        f.parked.push(ParkedFact {
            id: "local-5".into(),
            title: "Held one".into(),
            failures: 1,
            next_attempt_at: None,
            reason: "cancelled by ana".into(),
            quota_wait: None,
            gate: None,
        });
        let items = attention(&f);
        assert_eq!(items.len(), 3);
        assert_eq!(items[0].kind, "blocked");
        assert_eq!(
            items[0].line,
            "verification failed 3 times: test exited 1 — fix the cause, then retry"
        );
        assert_eq!(items[0].actions[0].path, "/tasks/local-3/retry");
        assert_eq!(items[1].kind, "parked");
        assert_eq!(
            items[1].line,
            "waits for claude@demo's limit, resumes 08:19 UTC"
        );
        assert_eq!(items[1].countdown.as_ref().unwrap().text, "in 52 min");
        assert_eq!(items[1].actions[0].label, "Run now");
        assert_eq!(items[1].actions[0].path, "/tasks/local-4/run-now");
        // No epoch seconds and no RFC 3339 in what people read.
        assert!(!items[1].line.contains("2026-12-01T"));
        assert_eq!(items[2].kind, "held");
        assert_eq!(items[2].actions[0].label, "Release");
    }

    #[test]
    fn a_gate_refusal_is_named() {
        let mut f = facts();
        f.blocked.push(BlockedFact {
            id: "local-9".into(),
            title: "t".into(),
            reason: "gate refused".into(),
            gate: Some((
                "diff-size".into(),
                "diff too large: 4000 lines > 1000".into(),
            )),
        });
        let items = attention(&f);
        assert_eq!(items[0].kind, "gate");
        assert!(items[0]
            .line
            .starts_with("refused by the diff-size gate: diff too large"));
    }

    fn attempt(
        agent: &str,
        identity: &str,
        day: &str,
        cost: f64,
        ok: bool,
        secs: f64,
    ) -> AttemptRecord {
        AttemptRecord {
            task_id: "t".into(),
            attempt: 1,
            agent: agent.into(),
            identity: identity.into(),
            run_spec: serde_json::Value::Null,
            container_id: None,
            workspace: "/w".into(),
            branch: "b".into(),
            status: Some(if ok {
                AttemptStatus::Succeeded
            } else {
                AttemptStatus::Failed
            }),
            turns: None,
            tokens: None,
            cost_usd: Some(cost),
            exit_code: None,
            duration_seconds: Some(secs),
            final_message: None,
            reason: None,
            evidence: vec![],
            commit_sha: None,
            pr_url: None,
            started_at: at(&format!("{day}T10:00:00Z")),
            finished_at: None,
        }
    }

    #[test]
    fn picture_numbers() {
        let mut f = facts();
        f.now = at("2026-12-01T12:00:00Z");
        f.attempts = vec![
            attempt("claude", "demo", "2026-12-01", 1.25, true, 100.0),
            attempt("claude", "demo", "2026-12-01", 0.5, false, 300.0),
            attempt("codex", "demo", "2026-11-29", 2.0, true, 60.0),
            attempt("claude", "other", "2026-11-29", 9.0, true, 200.0),
        ];
        let ds = days(f.now, 7);
        assert_eq!(ds.first().unwrap().to_string(), "2026-11-25");
        assert_eq!(
            cost_per_day(&f.attempts, "demo", &ds),
            vec![0.0, 0.0, 0.0, 0.0, 2.0, 0.0, 1.75]
        );
        let agents = per_agent(&f.attempts);
        assert_eq!(agents["claude"], (3, 2, Some(200.0)));
        assert_eq!(agents["codex"], (1, 1, Some(60.0)));
        let s = spend(&f);
        assert_eq!(s[0].text, "$1.75 of $5.00 today");
        assert_eq!(s[0].percent, 35);
        let pics = pictures(&f);
        let cost7 = &pics[0].svg;
        assert!(cost7.contains("id=\"cost-demo-7\""), "{cost7}");
        assert!(
            cost7.contains("data-group=\"12-01\" data-value=\"1.75\""),
            "{cost7}"
        );
        assert!(cost7.contains("class=\"ceiling\""));
        let agents_svg = &pics
            .iter()
            .find(|p| p.svg.contains("id=\"agents\""))
            .unwrap()
            .svg;
        assert!(
            agents_svg.contains(">67% of 3 · median 3m 20s<"),
            "{agents_svg}"
        );
        assert!(
            agents_svg.contains(">100% of 1 · median 1m 00s<"),
            "{agents_svg}"
        );
        assert_eq!(median(&mut [3.0, 1.0, 2.0, 10.0]), Some(2.5));
        assert_eq!(median(&mut []), None);
    }

    #[test]
    fn quota_bars_count_down_to_the_reset() {
        let mut f = facts();
        f.quota.push(AgentQuota {
            identity: "demo".into(),
            agent: "claude".into(),
            resets_at: at("2026-12-01T08:27:00Z"),
            reported: true,
            message: "limit".into(),
            task_id: None,
            attempt: None,
            hit_at: at("2026-12-01T06:27:00Z"),
        });
        let bars = quota_bars(&f);
        assert_eq!(bars[0].who, "claude@demo");
        assert!(bars[0].out);
        assert_eq!(bars[0].percent, 50);
        assert_eq!(bars[0].text, "out since 06:27 UTC, resets 08:27 UTC");
    }

    fn running(task: &str, machine: Option<&str>) -> RunningFact {
        RunningFact {
            attempt: RunningAttempt {
                task_id: task.into(),
                title: format!("Fix {task}"),
                state: TaskState::Running,
                attempt: 1,
                agent: "claude".into(),
                identity: "demo".into(),
                branch: format!("polyphony/{task}-a1"),
                started_at: at("2026-12-01T07:20:00Z"),
                machine: machine.map(String::from),
            },
            counters: Default::default(),
        }
    }

    #[test]
    fn a_live_machine_with_nothing_running_shows_its_idle_slots() {
        let mut f = facts();
        f.running = vec![running("local-1", None)];
        f.machine_slots.insert("idle-box".into(), 2);
        let page = home(&f);
        let names: Vec<Option<&str>> = page.machines.iter().map(|m| m.name.as_deref()).collect();
        assert_eq!(names, [Some(f.machine.as_str()), Some("idle-box")]);
        assert_eq!(page.machines[1].line, "0 of 2 slots busy");
        assert!(page.machines[1].slots.iter().all(|s| s.running.is_none()));
        assert!(page.summary.contains("on 2 machines"), "{}", page.summary);
    }

    #[test]
    fn slots_per_machine_once_there_is_a_fleet() {
        let mut f = facts();
        f.running = vec![running("local-1", Some("here")), running("local-2", None)];
        let one = home(&f);
        assert_eq!(one.machines.len(), 1, "one machine: no groups");
        assert_eq!(one.machines[0].name, None);
        assert_eq!(one.machines[0].slots.len(), 2);
        assert!(
            one.summary.contains("2 of 2 agent slots busy · "),
            "{}",
            one.summary
        );

        f.running.push(running("o/r#3", Some("far")));
        f.running.push(running("o/r#4", Some("other")));
        f.machine_slots.insert("far".into(), 3);
        let fleet = home(&f);
        let names: Vec<Option<&str>> = fleet.machines.iter().map(|m| m.name.as_deref()).collect();
        assert_eq!(
            names,
            [Some("here"), Some("far"), Some("other")],
            "this machine first"
        );
        let lines: Vec<&str> = fleet.machines.iter().map(|m| m.line.as_str()).collect();
        assert_eq!(
            lines,
            ["2 of 2 slots busy", "1 of 3 slots busy", "1 running"]
        );
        let busy = |m: &MachineSlots| -> Vec<String> {
            m.slots
                .iter()
                .filter_map(|s| s.running.as_ref().map(|r| r.task_id.clone()))
                .collect()
        };
        assert_eq!(busy(&fleet.machines[0]), ["local-1", "local-2"]);
        assert_eq!(busy(&fleet.machines[1]), ["o/r#3"]);
        assert_eq!(fleet.machines[1].slots.len(), 3, "far's idle slots too");
        assert_eq!(busy(&fleet.machines[2]), ["o/r#4"]);
        assert!(
            fleet
                .summary
                .contains("4 of 6 agent slots busy on 3 machines"),
            "{}",
            fleet.summary
        );
    }
}
