//! `polyphony status`: the queue as a table or JSON, or one task in detail.

use chrono::{DateTime, Utc};

use super::{print_json, Context, Outcome, UsageError};
use crate::domain::{Task, TaskState};
use crate::store::Store;

/// Rows the table shows unless `--limit` says otherwise.
const DEFAULT_TABLE_ROWS: usize = 50;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Show this task with its transitions and attempts.
    task: Option<String>,
    /// Only tasks in this state (DISCOVERED, CLAIMED, …, LANDED, FAILED, BLOCKED).
    #[arg(long, value_name = "STATE")]
    state: Option<TaskState>,
    /// At most this many tasks, newest first; 0 means all. Default: 50 in the table,
    /// all with --json.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// Print JSON: an array of task summaries (id, title, source_ref, state, task_type,
    /// risk, labels, attempts, failures, created_at, updated_at, next_attempt_at,
    /// quota_wait, pull {number, state, checks, review, mergeable, followups, watching},
    /// followup_of {task_id, number}, agent, cost_usd), or, for one TASK, {task,
    /// transitions, attempts, landing, quota, pull, followups, followup_of, actions} in
    /// full. The
    /// table cuts titles to the terminal's width (or `COLUMNS`).
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args, ctx: &Context) -> anyhow::Result<Outcome> {
    let db = crate::store::StoreHandle::for_home(&ctx.home)?;
    // Looking must not create anything: a home without a queue has no tasks.
    let store = if db.exists() {
        Some(ctx.open_store(&db)?)
    } else {
        None
    };
    match &args.task {
        Some(id) => show_task(store.as_ref(), id, args.json),
        None => list(store.as_ref(), &args, &ctx.home),
    }
}

fn list(store: Option<&Store>, args: &Args, home: &std::path::Path) -> anyhow::Result<Outcome> {
    let limit = match (args.limit, args.json) {
        (Some(0), _) | (None, true) => None,
        (Some(n), _) => Some(n),
        (None, false) => Some(DEFAULT_TABLE_ROWS),
    };
    if args.json {
        return list_json(store, args.state, limit);
    }
    let counts = match store {
        Some(s) => s.count_by_state()?,
        None => Default::default(),
    };
    let now = Utc::now();
    let daemon_running = crate::home::DaemonLock::is_held(home);
    let mut rows: Vec<[String; COLUMNS]> = Vec::new();
    if let Some(s) = store {
        // The table is for people: say so when the file is damaged instead of printing
        // whatever rows still read (issue 12). `--json` streams for scripts; `doctor`
        // checks there.
        let sound = s.ensure_sound()?;
        s.for_each_task_summary(args.state, limit, |t| -> anyhow::Result<()> {
            let created = DateTime::parse_from_rfc3339(t.created_at)
                .map(|c| age(c.with_timezone(&Utc), now))
                .unwrap_or_else(|_| "?".to_string());
            let next = t
                .next_attempt_at
                .and_then(|n| DateTime::parse_from_rfc3339(n).ok())
                .map(|n| n.with_timezone(&Utc));
            // Only BLOCKED rows look their link up: the listing stays one read per row.
            let retried_as = if t.state == TaskState::Blocked {
                s.generation_links(t.id)?.retried_as
            } else {
                None
            };
            rows.push([
                t.id.to_string(),
                t.title.to_string(),
                t.source_ref.to_string(),
                t.state.to_string(),
                t.agent.unwrap_or("-").to_string(),
                t.attempts.to_string(),
                created,
                t.cost_usd
                    .map_or_else(|| "-".into(), |c| format!("${c:.2}")),
                match (t.state, retried_as) {
                    (TaskState::Blocked, Some(new)) => format!("retried as {new}"),
                    (TaskState::Blocked, None) => format!("polyphony retry {}", t.id),
                    _ => {
                        let step = t
                            .quota_wait
                            .as_ref()
                            .and_then(|w| quota_step(w, now))
                            .unwrap_or_else(|| next_step(t.state, next, now));
                        without_daemon(daemon_running, t.state, step)
                    }
                },
            ]);
            Ok(())
        })?;
        // Every row read: the next look skips the whole-file check until a write.
        sound.remember();
    }
    fit_titles(&mut rows, table_width());
    print_table(&HEADER, &rows);
    if let Some(s) = store.filter(|_| args.state.is_none()) {
        let pulls: Vec<_> = s.pulls()?.into_iter().filter(|p| p.watching).collect();
        if !pulls.is_empty() {
            crate::println_printable!("\nwatched pull requests:");
            for p in &pulls {
                crate::println_printable!("  {}  {}", p.task_id, pull_line(p));
            }
            crate::println_printable!("");
        }
    }
    let total: u64 = match args.state {
        Some(s) => counts.get(&s).copied().unwrap_or(0),
        None => counts.values().sum(),
    };
    let summary: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
    let shown = rows.len() as u64;
    if total == 0 {
        crate::println_printable!("no tasks");
    } else if shown < total {
        crate::println_printable!(
            "{shown} of {total} shown (--limit 0 for all); {}",
            summary.join(", ")
        );
    } else {
        crate::println_printable!("{total} task(s): {}", summary.join(", "));
    }
    if let Some(s) = store {
        for line in quota_lines(&s.quota_out(now)?, now) {
            crate::println_printable!("{line}");
        }
        // What the home takes on disk, as the daemon's last retention sweep measured it
        // (issue 24; walking the workspaces here would make `status` slow).
        if let Some(d) = s.disk_usage()? {
            crate::println_printable!(
                "disk: {} (measured {} ago by the daemon)",
                crate::ops::retention::disk_line(&d),
                age(d.measured_at, now)
            );
        }
    }
    Ok(Outcome::Success)
}

/// NEXT of a task parked on a usage limit: `quota: claude resets 14:05 UTC (in 52 min)`.
fn quota_step(wait: &crate::store::QuotaWaitBrief<'_>, now: DateTime<Utc>) -> Option<String> {
    let until = DateTime::parse_from_rfc3339(wait.until)
        .ok()?
        .with_timezone(&Utc);
    Some(format!(
        "quota: {}",
        crate::orchestrator::quota::reset_words(wait.agent, until, now)
    ))
}

/// One line per (identity, agent) out of quota at `now`, for the listing and `doctor`.
fn quota_lines(out: &[crate::domain::AgentQuota], now: DateTime<Utc>) -> Vec<String> {
    out.iter()
        .filter(|q| q.is_out(now))
        .map(|q| {
            format!(
                "quota: {}@{} out until {} ({}; {})",
                q.agent,
                q.identity,
                crate::domain::when::clock(q.resets_at, now),
                crate::domain::when::relative(q.resets_at, now),
                if q.reported {
                    "the CLI's reset time"
                } else {
                    "no reset time given: default cool-down"
                }
            )
        })
        .collect()
}

/// `status --json`: a JSON array of [`crate::store::TaskSummary`] (id, title, source_ref,
/// state, task_type, risk, labels, attempts, failures, created/updated/next_attempt_at,
/// quota_wait, pull, followup_of, agent, cost_usd;
/// `status TASK --json` has the full task). The store keeps each summary's JSON as text,
/// so listing copies stored bytes into a buffered stdout: 100k tasks must list in under
/// 100 ms (docs/benchmarks.md "Status: profile and fix").
fn list_json(
    store: Option<&Store>,
    state: Option<TaskState>,
    limit: Option<usize>,
) -> anyhow::Result<Outcome> {
    use std::io::Write as _;
    use std::os::fd::AsFd as _;
    // A duplicate of fd 1 rather than `Stdout`: `Stdout` is line-buffered and scanned each
    // 64 KiB chunk for a newline (`memrchr`, 11% of the listing in perf); stdout is not
    // used otherwise while this runs.
    let fd = std::io::stdout().as_fd().try_clone_to_owned()?;
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::fs::File::from(fd));
    out.write_all(b"[")?;
    if let Some(s) = store {
        let mut first = true;
        s.for_each_summary_json(state, limit, |json| -> anyhow::Result<()> {
            if !first {
                out.write_all(b",")?;
            }
            first = false;
            out.write_all(json)?;
            Ok(())
        })?;
    }
    out.write_all(b"]\n")?;
    out.flush()?;
    Ok(Outcome::Success)
}

fn show_task(store: Option<&Store>, id: &str, json: bool) -> anyhow::Result<Outcome> {
    let not_found = || {
        UsageError::new(
            format!("no task `{id}`"),
            "run `polyphony status` to list task ids",
        )
    };
    let store = store.ok_or_else(not_found)?;
    let sound = store.ensure_sound()?;
    if json {
        // Issue 25: each attempt's egress summary and refusals; issue 29: the action log
        // (fields added).
        let detail = crate::ops::actions::task_detail(store, id)?.ok_or_else(not_found)?;
        // Remembered only for a task that exists: a refusal leaves the home as it was.
        sound.remember();
        print_json(&detail)?;
        return Ok(Outcome::Success);
    }
    let task = store.get_task(id)?.ok_or_else(not_found)?;
    sound.remember();
    let transitions = store.transitions(id)?;
    let attempts = store.attempts(id)?;
    let landing = store.landing(id)?;
    let links = store.generation_links(id)?;
    let generation = crate::domain::generation::number(&task);
    print_task(&task);
    if let Some(c) = crate::ops::actions::running_claim(store, id, task.state)? {
        crate::println_printable!(
            "  machine:  {} (daemon {}, lease until {})",
            c.machine,
            c.owner,
            crate::domain::when::human(c.lease_until, store.lease_clock(Utc::now())?)
        );
    }
    print_generation(&task, generation, &links);
    print_quota(&store.quota_detail_json(id)?, Utc::now());
    crate::println_printable!("\ntransitions:");
    if transitions.is_empty() {
        crate::println_printable!("  (none)");
    }
    for t in &transitions {
        crate::println_printable!(
            "  {}  {} -> {}  {}",
            t.at.format("%Y-%m-%d %H:%M:%S UTC"),
            t.from,
            t.to,
            t.reason
        );
    }
    crate::println_printable!("\nattempts:");
    if attempts.is_empty() {
        crate::println_printable!("  (none)");
    }
    for a in &attempts {
        let status = a.status.map_or("running".to_string(), |s| s.to_string());
        let cost = a.cost_usd.map_or(String::new(), |c| format!(" ${c:.2}"));
        let reason = a
            .reason
            .as_deref()
            .map_or(String::new(), |r| format!(" — {r}"));
        crate::println_printable!(
            "  #{} {} via {} ({}){cost}{reason}",
            a.attempt,
            status,
            a.agent,
            a.branch
        );
        // Issue 25: where the attempt connected, and what its proxy refused.
        for e in store.egress_events(id, a.attempt)? {
            crate::println_printable!("     {}", e.summary);
        }
        for e in &a.evidence {
            crate::println_printable!("     {}", evidence_line(e));
            if !e.passed {
                for line in tail_lines(&e.output_tail, 8) {
                    crate::println_printable!("       | {line}");
                }
            }
        }
    }
    if let Some(l) = landing {
        crate::println_printable!(
            "\nlanded: {} @ {}{}",
            l.branch,
            l.commit_sha,
            l.pr_url.map_or(String::new(), |u| format!(" {u}"))
        );
    }
    if let Some(pull) = store.pull(id)? {
        crate::println_printable!("\npull request:\n  {}", pull_line(&pull));
        for f in store.followups_of(id)? {
            crate::println_printable!("  follow-up {}  {}", f.task_id, f.state);
        }
    }
    if let Some(f) = store.followup(id)? {
        crate::println_printable!("\nfollow-up #{} of {}", f.seq, f.pull_task_id);
    }
    Ok(Outcome::Success)
}

/// `o/r#5 open · checks failing · review changes_requested · mergeable no · 2 follow-up(s)`
fn pull_line(p: &crate::store::PullRecord) -> String {
    let mut parts = vec![format!("{}#{} {}", p.repo, p.number, p.state)];
    for (what, value) in [
        ("checks", &p.checks),
        ("review", &p.review),
        ("mergeable", &p.mergeable),
    ] {
        if let Some(v) = value {
            parts.push(format!("{what} {v}"));
        }
    }
    parts.push(format!("{} follow-up(s)", p.followups));
    if !p.watching {
        parts.push("not watched".into());
    }
    parts.join(" · ")
}

/// `pass test: sh test.sh (exit 0, 1.2s)`, or a gate with its detail.
fn evidence_line(e: &crate::domain::CheckEvidence) -> String {
    let verdict = if e.passed { "pass" } else { "FAIL" };
    if e.command.is_empty() {
        let detail = e.output_tail.lines().next().unwrap_or("").trim();
        return format!("{verdict} {}: {detail}", e.name);
    }
    let exit = e
        .exit_code
        .map_or_else(|| "timed out".to_string(), |c| format!("exit {c}"));
    format!(
        "{verdict} {}: {} ({exit}, {:.1}s)",
        e.name,
        e.command,
        e.duration_ms as f64 / 1000.0
    )
}

/// The last `n` non-empty lines of an output tail.
fn tail_lines(text: &str, n: usize) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].to_vec()
}

fn print_task(t: &Task) {
    crate::println_printable!("{}  {}", t.id, t.title);
    crate::println_printable!("  state:    {}", t.state);
    crate::println_printable!("  source:   {} ({})", t.source_ref, t.source);
    crate::println_printable!(
        "  repo:     {}{}",
        t.repo,
        t.base_ref
            .as_deref()
            .map_or(String::new(), |b| format!(" @ {b}"))
    );
    crate::println_printable!(
        "  type:     {}  risk: {}  scope: {}  web: {}",
        t.task_type,
        t.risk,
        t.scope,
        t.requires_web
    );
    if !t.labels.is_empty() {
        crate::println_printable!("  labels:   {}", t.labels.join(", "));
    }
    crate::println_printable!("  attempts: {}  failures: {}", t.attempts, t.failures);
    match (t.state, t.next_attempt_at) {
        (TaskState::Failed, Some(next)) => {
            crate::println_printable!(
                "  retry at: {}",
                crate::domain::when::human(next, Utc::now())
            )
        }
        (TaskState::Failed, None) => {
            crate::println_printable!(
                "  held:     `polyphony spawn --task {}` runs it again",
                t.id
            )
        }
        _ => {}
    }
    crate::println_printable!(
        "  created:  {}",
        crate::domain::when::human(t.created_at, Utc::now())
    );
}

/// The task's usage limits (issue 14): its wait, each agent of its chain that is out, the
/// fallback it runs on meanwhile. Nothing when no limit ever touched it.
fn print_quota(detail: &serde_json::Value, now: DateTime<Utc>) {
    let time = |v: &serde_json::Value| {
        v.as_str()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&Utc))
    };
    let str_of = |v: &serde_json::Value, k: &str| {
        v.get(k).and_then(|s| s.as_str()).unwrap_or("?").to_string()
    };
    if let Some(wait) = detail.get("wait").filter(|w| !w.is_null()) {
        if let Some(until) = wait.get("until").and_then(time) {
            crate::println_printable!(
                "  quota:    waiting for {}; no attempt is counted for the wait",
                crate::orchestrator::quota::reset_words(&str_of(wait, "agent"), until, now)
            );
        }
    }
    let agents = detail
        .get("agents")
        .and_then(|a| a.as_array())
        .cloned()
        .unwrap_or_default();
    for a in &agents {
        let Some(until) = a.get("resets_at").and_then(time).filter(|u| *u > now) else {
            continue;
        };
        let how = if a.get("reported").and_then(|r| r.as_bool()) == Some(true) {
            "the CLI's reset time"
        } else {
            "default cool-down"
        };
        crate::println_printable!(
            "  out:      {}@{} until {} ({}; {how})",
            str_of(a, "agent"),
            str_of(a, "identity"),
            crate::domain::when::clock(until, now),
            crate::domain::when::relative(until, now)
        );
    }
    if let Some(f) = detail.get("fallback").filter(|f| !f.is_null()) {
        crate::println_printable!(
            "  fallback: {} while {} is out (since {}){}",
            str_of(f, "agent"),
            str_of(f, "preferred"),
            f.get("since")
                .and_then(time)
                .map_or("?".to_string(), |t| { crate::domain::when::human(t, now) }),
            match agents
                .first()
                .and_then(|a| a.get("resets_at"))
                .and_then(time)
            {
                Some(back) if back > now => format!(
                    "; {}",
                    crate::orchestrator::quota::reset_words(&str_of(f, "preferred"), back, now)
                ),
                _ => String::new(),
            }
        );
    }
}

/// The task's place among its generations (`polyphony retry`).
fn print_generation(t: &Task, generation: u32, links: &crate::store::GenerationLinks) {
    if let Some(old) = &links.retry_of {
        crate::println_printable!("  retry of: {old} (this is generation {generation})");
    }
    match (&links.retried_as, t.state) {
        (Some(new), _) => crate::println_printable!("  retried:  as {new}"),
        (None, TaskState::Blocked) => crate::println_printable!(
            "  blocked:  fix the cause the BLOCKED transition names, then `polyphony retry {}`",
            t.id
        ),
        _ => {}
    }
}

/// Columns of the `status` table.
const COLUMNS: usize = 9;

/// The header of the `status` table.
const HEADER: [&str; COLUMNS] = [
    "ID", "TITLE", "SOURCE", "STATE", "AGENT", "ATTEMPT", "AGE", "COST", "NEXT",
];

/// The TITLE column of the `status` table.
const TITLE: usize = 1;

/// The width a title keeps however narrow the table must be, and the most it takes when
/// the width is unknown (output not on a terminal and no `COLUMNS`).
const TITLE_MIN: usize = 12;
const TITLE_UNBOUNDED: usize = 48;

/// The width the table must fit: `COLUMNS` when set (shells export it to scripts only if
/// asked; tests set it), else the terminal's, else unknown.
fn table_width() -> Option<usize> {
    if let Some(n) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|n| *n > 0)
    {
        return Some(n);
    }
    use std::io::IsTerminal as _;
    if !std::io::stdout().is_terminal() {
        return None;
    }
    // SAFETY: TIOCGWINSZ writes one `winsize` into the struct it is given; fd 1 is open.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
    (ok && size.ws_col > 0).then_some(size.ws_col as usize)
}

/// Cuts the TITLE cells so the table fits `width` (every other column whole: they are
/// short, and NEXT is the step to take), never below [`TITLE_MIN`] characters; a cut title
/// ends in `…`. With no width known, titles longer than [`TITLE_UNBOUNDED`] are cut.
fn fit_titles(rows: &mut [[String; COLUMNS]], width: Option<usize>) {
    let others: usize = (0..COLUMNS)
        .filter(|c| *c != TITLE)
        .map(|c| {
            rows.iter()
                .map(|r| r[c].chars().count())
                .chain([HEADER[c].len()])
                .max()
                .unwrap_or(0)
        })
        .sum::<usize>()
        + 2 * (COLUMNS - 1);
    let room = match width {
        Some(w) => w.saturating_sub(others).max(TITLE_MIN),
        None => TITLE_UNBOUNDED,
    };
    for row in rows {
        row[TITLE] = cut(&row[TITLE], room);
    }
}

/// `text` in at most `max` characters: whole, or its first `max - 1` and `…`. Measured as
/// printed: a title is user text, so terminal controls are stripped first (issue 11) and
/// any control character left becomes a space, keeping the row one line.
fn cut(text: &str, max: usize) -> String {
    let clean: String = crate::domain::terminal::printable(text)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if clean.chars().count() <= max {
        return clean;
    }
    let mut out: String = clean.chars().take(max.saturating_sub(1)).collect();
    out.truncate(out.trim_end().len());
    out.push('…');
    out
}

/// What happens next to a task, in a few words.
fn next_step(state: TaskState, next: Option<DateTime<Utc>>, now: DateTime<Utc>) -> String {
    match (state, next) {
        (TaskState::Failed, Some(at)) if at > now => format!("retry in {}", age(now, at)),
        (TaskState::Failed, Some(_)) => "retry now".into(),
        (TaskState::Failed, None) => "held: spawn --task to retry".into(),
        (TaskState::Discovered, _) => "waiting for a slot".into(),
        (s, _) if s.is_active() => "in progress".into(),
        _ => "-".into(),
    }
}

/// What NEXT says when no daemon holds this home's lock: nothing moves until one starts
/// (issue 12: "waiting for a slot" promised progress that would never come).
fn without_daemon(daemon_running: bool, state: TaskState, step: String) -> String {
    if daemon_running {
        return step;
    }
    match state {
        TaskState::Discovered => "no daemon: run `polyphony daemon`".into(),
        TaskState::Failed if step.starts_with("retry") || step.starts_with("quota") => {
            format!("{step} once a daemon runs")
        }
        s if s.is_active() => "stopped: no daemon (it resumes on start)".into(),
        _ => step,
    }
}

fn print_table(header: &[&str; COLUMNS], rows: &[[String; COLUMNS]]) {
    let mut widths = header.map(str::len);
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; COLUMNS]| {
        let parts: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        crate::println_printable!("{}", parts.join("  ").trim_end());
    };
    line(*header);
    for row in rows {
        line(row.each_ref().map(String::as_str));
    }
}

/// `42s`, `5m`, `3h`, `2d`.
fn age(then: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let secs = (now - then).num_seconds().max(0);
    match secs {
        0..=59 => format!("{secs}s"),
        60..=3599 => format!("{}m", secs / 60),
        3600..=86_399 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    /// Every stored summary against `serde_json` of the same task's [`TaskSummary`], for
    /// the whole list and per state.
    fn check_stored_json(store: &Store) {
        use crate::store::StoreError;
        for state in std::iter::once(None).chain(TaskState::ALL.iter().copied().map(Some)) {
            let mut stored = Vec::new();
            store
                .for_each_summary_json(state, None, |j| -> Result<(), StoreError> {
                    stored.push(String::from_utf8(j.to_vec()).unwrap());
                    Ok(())
                })
                .unwrap();
            let mut serde = Vec::new();
            store
                .for_each_task_summary(state, None, |t| -> Result<(), StoreError> {
                    serde.push(serde_json::to_string(t).unwrap());
                    Ok(())
                })
                .unwrap();
            assert_eq!(stored, serde, "state filter {state:?}");
        }
    }

    const TRICKY: &str = "quote \" backslash \\ tab \t newline \n cr \r bs \u{8} ff \u{c} \
        nul \u{0} us \u{1f} del \u{7f} é 🎻 \u{2028} </script> slash /";

    #[test]
    fn stored_summaries_are_what_serde_writes() {
        use crate::domain::{Risk, Scope, SourceKind, TaskType};
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::StoreHandle::sqlite(dir.path().join("queue.db"))
            .open()
            .unwrap();
        let now = Utc.with_ymd_and_hms(2026, 11, 30, 1, 2, 3).unwrap();
        let mut t = Task::new(
            "local-1",
            SourceKind::Local,
            "local:local-1",
            "/r",
            TRICKY,
            now,
        );
        t.labels = vec!["a".into(), "b\"c".into(), "\u{1f}".into(), "é/\\x".into()];
        store.insert_task(&t).unwrap();
        for (i, task_type) in TaskType::ALL.iter().enumerate() {
            let id = format!("owner/repo#{i}");
            let mut t = Task::new(
                &id,
                SourceKind::Github,
                &id,
                "https://x/r.git",
                "Plain",
                now,
            );
            t.task_type = *task_type;
            t.risk = [Risk::Low, Risk::Medium, Risk::High][i % 3];
            t.state = TaskState::ALL[i % TaskState::ALL.len()];
            t.attempts = i as u32;
            store.insert_task(&t).unwrap();
        }
        check_stored_json(&store);
        // Every write path that changes a summary field.
        store.claim("local-1", now).unwrap().unwrap();
        check_stored_json(&store);
        store
            .set_task_facts("local-1", TaskType::Refactor, Scope::Large, Risk::High, 7)
            .unwrap();
        check_stored_json(&store);
        store
            .freeze_text("local-1", "frozen \"title\"\n", "body")
            .unwrap();
        check_stored_json(&store);
        store
            .transition("local-1", TaskState::Claimed, TaskState::Failed, "x", now)
            .unwrap();
        store.set_retry("local-1", 2, Some(now)).unwrap();
        check_stored_json(&store);
        store.set_retry("local-1", 2, None).unwrap();
        check_stored_json(&store);
        // Issue 14: a parked task's summary names its wait, only while it is FAILED.
        let reset = crate::domain::AgentReset {
            agent: "claude".into(),
            identity: "personal \"p\"".into(),
            resets_at: now,
        };
        store
            .set_quota_wait(&crate::domain::QuotaWait {
                task_id: "local-1".into(),
                until: now,
                agent: reset.agent.clone(),
                identity: reset.identity.clone(),
                resets: vec![reset],
                parked_at: now,
            })
            .unwrap();
        check_stored_json(&store);
        let mut found = 0;
        store
            .for_each_task_summary(None, None, |t| -> Result<(), crate::store::StoreError> {
                if let Some(w) = &t.quota_wait {
                    assert_eq!((t.id, w.agent), ("local-1", "claude"));
                    found += 1;
                }
                Ok(())
            })
            .unwrap();
        assert_eq!(found, 1);
        // Claimed for retry: the wait leaves the summary with the FAILED state.
        store.set_retry("local-1", 2, Some(now)).unwrap();
        check_stored_json(&store);
        let claimed = store
            .claim("local-1", now)
            .unwrap()
            .expect("the retry is due");
        assert_eq!(claimed.state, TaskState::Claimed);
        check_stored_json(&store);
        store.clear_quota_wait("local-1").unwrap();
        check_stored_json(&store);
        // Issue 15: a landed task's summary carries its pull request as the shepherd last
        // saw it, a follow-up's the pull request it works on; each write to the pull or
        // follow-up rows refreshes the stored summary in the same statement.
        let landed = "owner/repo#0";
        store
            .record_pull(&crate::store::PullRecord::opened(
                landed,
                "owner/repo",
                17,
                "polyphony/owner_repo_0-a1",
                "main",
                &"a".repeat(40),
                now,
            ))
            .unwrap();
        check_stored_json(&store);
        store
            .update_pull(
                landed,
                &crate::store::PullLook {
                    head_sha: "b".repeat(40),
                    state: "open".into(),
                    checks: Some("failing".into()),
                    review: Some("changes_requested".into()),
                    mergeable: Some("no".into()),
                    watching: true,
                },
                now,
            )
            .unwrap();
        check_stored_json(&store);
        let followup = Task::new(
            "owner/repo#0-f1",
            SourceKind::Github,
            landed,
            "https://x/r.git",
            "Follow-up",
            now,
        );
        let keys = vec!["check:ci:failure".to_string()];
        assert!(store
            .insert_followup(landed, &followup, &serde_json::json!({}), &keys, now)
            .unwrap());
        check_stored_json(&store);
        let mut seen = Vec::new();
        store
            .for_each_task_summary(None, None, |t| -> Result<(), crate::store::StoreError> {
                if let Some(p) = &t.pull {
                    seen.push(format!(
                        "{} pull #{} {} {:?} {:?} {:?} {} {}",
                        t.id,
                        p.number,
                        p.state,
                        p.checks,
                        p.review,
                        p.mergeable,
                        p.followups,
                        p.watching
                    ));
                }
                if let Some(f) = &t.followup_of {
                    seen.push(format!("{} follows {} #{}", t.id, f.task_id, f.number));
                }
                Ok(())
            })
            .unwrap();
        assert_eq!(
            seen,
            [
                "owner/repo#0-f1 follows owner/repo#0 #17",
                "owner/repo#0 pull #17 open Some(\"failing\") Some(\"changes_requested\") \
                 Some(\"no\") 1 true",
            ]
        );
        // The stored object itself, as a script reads it.
        let mut objects = Vec::new();
        store
            .for_each_summary_json(None, None, |j| -> Result<(), crate::store::StoreError> {
                objects.push(serde_json::from_slice::<serde_json::Value>(j).unwrap());
                Ok(())
            })
            .unwrap();
        let by_id = |id: &str| objects.iter().find(|o| o["id"] == id).unwrap().clone();
        assert_eq!(
            by_id(landed)["pull"],
            serde_json::json!({"number": 17, "state": "open", "checks": "failing",
                "review": "changes_requested", "mergeable": "no", "followups": 1,
                "watching": true})
        );
        assert_eq!(by_id(landed)["followup_of"], serde_json::Value::Null);
        assert_eq!(
            by_id("owner/repo#0-f1")["followup_of"],
            serde_json::json!({"task_id": landed, "number": 17})
        );
        assert_eq!(by_id("local-1")["pull"], serde_json::Value::Null);
        store
            .update_pull(
                landed,
                &crate::store::PullLook {
                    head_sha: "c".repeat(40),
                    state: "merged".into(),
                    checks: Some("passing".into()),
                    review: Some("approved".into()),
                    mergeable: None,
                    watching: false,
                },
                now,
            )
            .unwrap();
        check_stored_json(&store);
    }

    #[test]
    fn migration_backfills_summaries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("queue.db");
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch(crate::store::schema::MIGRATIONS[0])
                .unwrap();
            conn.pragma_update(None, "user_version", 1).unwrap();
            let labels = serde_json::to_string(&["x\"y", "\u{1}", "z"]).unwrap();
            for (id, next) in [
                ("local-1", None),
                ("local-2", Some("2026-11-30T02:00:00.000000Z")),
            ] {
                conn.execute(
                    "INSERT INTO tasks VALUES (?1, ?2, 'body', 'local', ?1, '/r', NULL, 'FAILED', \
                     'bugfix', 'small', 'medium', 3, 0, ?3, '{}', 1, 1, \
                     '2026-11-30T01:00:00.000000Z', '2026-11-30T01:30:00.000000Z', ?4)",
                    rusqlite::params![id, TRICKY, labels, next],
                )
                .unwrap();
            }
        }
        let store = crate::store::StoreHandle::sqlite(&path).open().unwrap();
        assert_eq!(
            store.schema_version().unwrap(),
            crate::store::schema::latest()
        );
        check_stored_json(&store);
    }

    /// Migration 6 rebuilds the summaries of a home that already has pull requests and
    /// follow-ups (written at version 5) with `pull` and `followup_of`.
    #[test]
    fn migration_6_backfills_pulls_and_followups() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("queue.db");
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            for sql in &crate::store::schema::MIGRATIONS[..5] {
                conn.execute_batch(sql).unwrap();
            }
            conn.pragma_update(None, "user_version", 5).unwrap();
            for (id, state) in [("o/r#1", "LANDED"), ("o/r#1-f1", "DISCOVERED")] {
                conn.execute(
                    "INSERT INTO tasks VALUES (?1, 't', 'b', 'github', 'o/r#1', '/r', NULL, ?2, \
                     'bugfix', 'small', 'medium', 3, 0, '[]', '{}', 1, 0, \
                     '2026-11-30T01:00:00.000000Z', '2026-11-30T01:30:00.000000Z', NULL)",
                    rusqlite::params![id, state],
                )
                .unwrap();
            }
            conn.execute(
                "INSERT INTO pulls VALUES ('o/r#1', 'o/r', 5, 'b', 'main', 'sha', 'open', \
                 'pending', NULL, 'yes', 1, 1, '2026-11-30T01:30:00.000000Z')",
                [],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO followups VALUES ('o/r#1-f1', 'o/r#1', 1, '{}', \
                 '2026-11-30T01:30:00.000000Z')",
                [],
            )
            .unwrap();
        }
        let store = crate::store::StoreHandle::sqlite(&path).open().unwrap();
        check_stored_json(&store);
        let mut objects = Vec::new();
        store
            .for_each_summary_json(None, None, |j| -> Result<(), crate::store::StoreError> {
                objects.push(serde_json::from_slice::<serde_json::Value>(j).unwrap());
                Ok(())
            })
            .unwrap();
        assert_eq!(
            objects[1]["pull"],
            serde_json::json!({"number": 5, "state": "open", "checks": "pending",
                "review": null, "mergeable": "yes", "followups": 1, "watching": true})
        );
        assert_eq!(
            objects[0]["followup_of"],
            serde_json::json!({"task_id": "o/r#1", "number": 5})
        );
    }

    #[test]
    fn quota_in_the_listing() {
        let now = Utc.with_ymd_and_hms(2026, 11, 30, 13, 0, 0).unwrap();
        let wait = crate::store::QuotaWaitBrief {
            until: "2026-11-30T14:05:00.000000Z",
            agent: "claude",
            identity: "personal",
        };
        assert_eq!(
            quota_step(&wait, now).as_deref(),
            Some("quota: claude resets 14:05 UTC (in 1 h 5 min)")
        );
        let wait = crate::store::QuotaWaitBrief {
            until: "2026-12-01T09:00:00.000000Z",
            ..wait
        };
        assert_eq!(
            quota_step(&wait, now).as_deref(),
            Some("quota: claude resets Dec 01 09:00 UTC (in 20 h)")
        );
        assert_eq!(
            without_daemon(
                false,
                TaskState::Failed,
                "quota: claude resets 14:05".into()
            ),
            "quota: claude resets 14:05 once a daemon runs"
        );
        let row = |agent: &str, minutes: i64, reported: bool| crate::domain::AgentQuota {
            identity: "personal".into(),
            agent: agent.into(),
            resets_at: now + chrono::Duration::minutes(minutes),
            reported,
            message: "limit".into(),
            task_id: None,
            attempt: None,
            hit_at: now,
        };
        assert_eq!(
            quota_lines(&[row("claude", 65, true), row("codex", 15, false), row("kimi", -1, true)], now),
            vec![
                "quota: claude@personal out until 14:05 UTC (in 1 h 5 min; the CLI's reset time)".to_string(),
                "quota: codex@personal out until 13:15 UTC (in 15 min; no reset time given: default cool-down)".to_string(),
            ]
        );
    }

    #[test]
    fn next_steps() {
        let now = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
        let later = now + chrono::Duration::seconds(20);
        assert_eq!(
            next_step(TaskState::Failed, Some(later), now),
            "retry in 20s"
        );
        assert_eq!(next_step(TaskState::Failed, Some(now), now), "retry now");
        assert_eq!(
            next_step(TaskState::Failed, None, now),
            "held: spawn --task to retry"
        );
        assert_eq!(next_step(TaskState::Running, None, now), "in progress");
        assert_eq!(next_step(TaskState::Landed, None, now), "-");
    }

    #[test]
    fn next_steps_without_a_daemon() {
        let step = |state, text: &str| without_daemon(false, state, text.to_string());
        assert_eq!(
            step(TaskState::Discovered, "waiting for a slot"),
            "no daemon: run `polyphony daemon`"
        );
        assert_eq!(
            step(TaskState::Failed, "retry in 20s"),
            "retry in 20s once a daemon runs"
        );
        assert!(step(TaskState::Running, "in progress").contains("no daemon"));
        assert_eq!(step(TaskState::Landed, "-"), "-");
        assert_eq!(
            without_daemon(true, TaskState::Discovered, "waiting for a slot".into()),
            "waiting for a slot"
        );
    }

    #[test]
    fn evidence_lines() {
        let mut e = crate::domain::CheckEvidence {
            name: "test".into(),
            command: "sh test.sh".into(),
            exit_code: Some(1),
            duration_ms: 1234,
            passed: false,
            output_tail: "a\n\nFAIL: add 2 3 gave -1\n".into(),
        };
        assert_eq!(evidence_line(&e), "FAIL test: sh test.sh (exit 1, 1.2s)");
        assert_eq!(tail_lines(&e.output_tail, 1), vec!["FAIL: add 2 3 gave -1"]);
        e.exit_code = None;
        assert_eq!(evidence_line(&e), "FAIL test: sh test.sh (timed out, 1.2s)");
        let gate = crate::orchestrator::proof::diff_gate(&[]);
        assert_eq!(evidence_line(&gate), "FAIL diff: the agent changed no file");
    }

    #[test]
    fn ages() {
        let now = Utc.with_ymd_and_hms(2026, 1, 2, 0, 0, 0).unwrap();
        let check = |secs: i64, want: &str| {
            assert_eq!(age(now - chrono::Duration::seconds(secs), now), want)
        };
        check(0, "0s");
        check(59, "59s");
        check(60, "1m");
        check(3599, "59m");
        check(7200, "2h");
        check(86_400 * 3, "3d");
        check(-5, "0s");
    }
}
