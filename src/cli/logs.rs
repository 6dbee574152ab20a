//! `polyphony logs TASK`: an attempt's transcript from the store's events, readable
//! (`report::event_line`), raw (`--raw`, the stored lines) or as NDJSON (`--json`);
//! `--follow` polls the store until the attempt has ended and nothing new arrives.

use std::io::Write as _;
use std::time::Duration;

use super::{Context, Outcome, UsageError};
use crate::ops::report;
use crate::store::{AttemptRecord, Store};

/// How often `--follow` asks the store for new events.
const POLL: Duration = Duration::from_millis(300);
/// Events read per query: a long transcript is printed in pages, never all in memory.
const PAGE: usize = 1000;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The task id (as `polyphony status` lists it).
    task: String,
    /// Which attempt (default: the latest).
    #[arg(long, value_name = "N")]
    attempt: Option<u32>,
    /// Keep printing new events until the attempt has ended (Ctrl-C stops).
    #[arg(short, long)]
    follow: bool,
    /// One JSON object per event (NDJSON): task, attempt, seq, kind, stream, summary, data, at.
    #[arg(long, conflicts_with = "raw")]
    json: bool,
    /// The stored lines as the agent printed them (scrubbed), one per line.
    #[arg(long)]
    raw: bool,
}

#[derive(Debug, Clone, Copy)]
enum Format {
    Readable,
    Raw,
    Json,
}

pub fn run(args: Args, ctx: &Context) -> anyhow::Result<Outcome> {
    let not_found = || {
        UsageError::new(
            format!("no task `{}`", args.task),
            "run `polyphony status` to list task ids",
        )
    };
    let db = crate::store::StoreHandle::for_home(&ctx.home)?;
    if !db.exists() {
        return Err(not_found().into());
    }
    let store = db.open()?;
    let task = store.get_task(&args.task)?.ok_or_else(not_found)?;
    let format = match (args.json, args.raw) {
        (true, _) => Format::Json,
        (_, true) => Format::Raw,
        _ => Format::Readable,
    };
    let readable = matches!(format, Format::Readable);

    let daemon_running = || crate::home::DaemonLock::is_held(&ctx.home);
    let mut told_no_daemon = false;
    let mut no_daemon_note = |what: &str| {
        // Issue 12: --follow waited silently for a daemon that was not there.
        if !told_no_daemon && !daemon_running() {
            eprintln!(
                "no daemon is running in {}: {what} once `polyphony daemon` starts",
                ctx.home.display()
            );
            told_no_daemon = true;
        }
    };
    let attempt = loop {
        let attempts = store.attempts(&task.id)?;
        match pick(&attempts, args.attempt, &task.id)? {
            Some(a) => break a,
            // A task that ended without an attempt never gets one: nothing to wait for.
            None if args.follow && !current_state(&store, &task.id)?.is_terminal() => {
                no_daemon_note("waiting; the first attempt starts");
                std::thread::sleep(POLL)
            }
            None => {
                // Nothing to show is not an error: the task may simply not have started.
                let state = current_state(&store, &task.id)?;
                if state.is_terminal() {
                    eprintln!(
                        "task {} ended without an attempt (state {state}): there are no logs",
                        task.id
                    );
                } else {
                    eprintln!(
                        "task {} has no attempts yet (state {state}); `polyphony logs {} --follow` waits for the first",
                        task.id, task.id
                    );
                }
                return Ok(Outcome::Success);
            }
        }
    };
    if readable {
        println!("{}", report::printable(&report::attempt_header(&attempt)));
    }

    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut after: Option<u64> = None;
    let mut egress_after: Option<u64> = None;
    let mut ended_seen = false;
    loop {
        let printed = print_new(&store, &attempt, &mut after, format, &mut out)?
            + print_egress(&store, &attempt, &mut egress_after, format, &mut out)?;
        out.flush()?;
        if !args.follow {
            break;
        }
        let current = store.attempt(&task.id, attempt.attempt)?;
        let ended = current.as_ref().is_some_and(|a| a.status.is_some());
        // One more quiet poll after the end is seen: the last events may be stored after
        // the status.
        if ended && ended_seen && printed == 0 {
            break;
        }
        ended_seen = ended;
        if !ended {
            no_daemon_note("waiting; this attempt resumes");
        }
        std::thread::sleep(POLL);
    }
    if readable {
        let last = store.attempt(&task.id, attempt.attempt)?.unwrap_or(attempt);
        match report::attempt_footer(&last) {
            Some(footer) => writeln!(out, "{}", report::printable(&footer))?,
            None if daemon_running() => {
                writeln!(out, "attempt {} is still running", last.attempt)?
            }
            None => writeln!(
                out,
                "attempt {} has not finished and no daemon is running: it resumes when `polyphony daemon` starts",
                last.attempt
            )?,
        }
    }
    out.flush()?;
    Ok(Outcome::Success)
}

fn current_state(store: &Store, id: &str) -> anyhow::Result<crate::domain::TaskState> {
    Ok(store
        .get_task(id)?
        .map_or(crate::domain::TaskState::Discovered, |t| t.state))
}

/// The requested attempt, the latest when none is named, or `None` when there is none yet.
fn pick(
    attempts: &[AttemptRecord],
    wanted: Option<u32>,
    task: &str,
) -> anyhow::Result<Option<AttemptRecord>> {
    let Some(n) = wanted else {
        return Ok(attempts.iter().max_by_key(|a| a.attempt).cloned());
    };
    match attempts.iter().find(|a| a.attempt == n) {
        Some(a) => Ok(Some(a.clone())),
        None if attempts.is_empty() => Ok(None),
        None => {
            let have: Vec<String> = attempts.iter().map(|a| a.attempt.to_string()).collect();
            Err(UsageError::new(
                format!("task {task} has no attempt {n}"),
                format!("use --attempt with one of {}", have.join(", ")),
            )
            .into())
        }
    }
}

/// Prints the attempt's `egress` events (issue 25: stored as its proxy logs them, with a
/// sequence of their own) after the stored seq `after`; returns how many.
fn print_egress(
    store: &Store,
    attempt: &AttemptRecord,
    after: &mut Option<u64>,
    format: Format,
    out: &mut impl std::io::Write,
) -> anyhow::Result<usize> {
    let rows = store.egress_rows_after(&attempt.task_id, attempt.attempt, *after)?;
    for (seq, e) in &rows {
        print_event(attempt, e, format, out)?;
        *after = Some(*seq);
    }
    Ok(rows.len())
}

fn print_event(
    attempt: &AttemptRecord,
    e: &crate::domain::TaskEvent,
    format: Format,
    out: &mut impl std::io::Write,
) -> anyhow::Result<()> {
    match format {
        Format::Readable => writeln!(out, "{}", report::printable(&report::event_line(e)))?,
        Format::Raw => writeln!(out, "{}", report::printable(&report::raw_line(e)))?,
        Format::Json => {
            serde_json::to_writer(
                &mut *out,
                &report::EventJson {
                    task: &attempt.task_id,
                    attempt: attempt.attempt,
                    event: e,
                },
            )?;
            writeln!(out)?;
        }
    }
    Ok(())
}

/// Prints every stored event after `after`, page by page; returns how many.
fn print_new(
    store: &Store,
    attempt: &AttemptRecord,
    after: &mut Option<u64>,
    format: Format,
    out: &mut impl std::io::Write,
) -> anyhow::Result<usize> {
    let mut total = 0;
    loop {
        let page = store.events(&attempt.task_id, attempt.attempt, *after, PAGE)?;
        for e in &page {
            print_event(attempt, e, format, out)?;
            *after = Some(e.seq);
        }
        total += page.len();
        if page.len() < PAGE {
            return Ok(total);
        }
    }
}
