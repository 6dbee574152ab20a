//! `polyphony cancel TASK`: a person stops a task for good (issue 29). A running attempt's
//! container is killed by the process that runs it (the daemon, or a `spawn`, woken on
//! `daemon.sock`); with none running, this process takes the home's lock and removes the
//! task's containers itself. The task ends CANCELLED, no failure counted, its source (a
//! GitHub issue) told who cancelled it and its claim released. The steps are
//! `orchestrator::cancel`'s, shared with `POST /api/v1/tasks/{id}/cancel`.
//!
//! Exit 0 when the task is CANCELLED, 1 when it ended otherwise first (it landed) or is
//! still being stopped after `--wait`, 2 when it cannot be cancelled (unknown, or over).

use std::time::Duration;

use chrono::Utc;

use super::{block_on, print_json, Context, Outcome, UsageError};
use crate::config::Config;
use crate::domain::{Task, TaskState};
use crate::orchestrator::cancel::{self, Begun, CancelAnswer, NotCancellable};
use crate::sources::Sources;
use crate::store::CancelRequest;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The task to cancel (any state but LANDED, BLOCKED or CANCELLED).
    #[arg(value_name = "TASK")]
    task: String,
    /// Who cancels, as recorded with the task (default: $USER).
    #[arg(long, value_name = "NAME")]
    by: Option<String>,
    /// How long to wait for a running attempt to stop.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    wait: u64,
    /// Print `{"task", "state", "was", "by", "pending"}`.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args, ctx: &Context) -> anyhow::Result<Outcome> {
    let config = Config::load(&ctx.home)?;
    let db = crate::store::StoreHandle::for_config(&config, |n| std::env::var(n).ok())?;
    if !db.exists() {
        return Err(UsageError::new(
            format!("no queue at {db}: there are no tasks to cancel"),
            "`polyphony status` lists the tasks of this home",
        )
        .into());
    }
    let store = db.open()?;
    let who = args
        .by
        .clone()
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_default();
    let request = CancelRequest {
        by: cancel::by_whom(&who, "cli"),
        at: Utc::now(),
    };
    let refused = |why: NotCancellable| -> anyhow::Error {
        UsageError::new(
            format!("cannot cancel {}: {why}", args.task),
            "`polyphony status TASK` shows where it is",
        )
        .into()
    };
    let answer = block_on(async {
        // The sources are built inside the runtime (a tracker's client needs its reactor).
        let sources = crate::sources::for_verb(&config);
        let begun = cancel::begin(&store, &sources, &args.task, &request)?.map_err(refused)?;
        match begun {
            Begun::Settled { task, from } => {
                tell_source(&sources, &db, &task).await;
                if cancel::owner_runs(config.home()) {
                    // A `spawn` waiting out a backoff for it ends now.
                    crate::orchestrator::daemon::wake(config.home());
                }
                anyhow::Ok(answer(&task.id, task.state, from, &request, false))
            }
            Begun::Requested { state } => {
                stop_running(&config, &sources, &args, &request, state).await
            }
        }
    })??;
    // Who cancelled it, in the task's action log (issue 29).
    let outcome = if answer.state == TaskState::Cancelled {
        "ok".to_string()
    } else if answer.pending {
        format!("requested; still {} when the wait ended", answer.state)
    } else {
        format!("not cancelled: it ended {} first", answer.state)
    };
    crate::ops::actions::record(
        &store,
        &answer.task,
        crate::ops::actions::ActionRecord {
            by: crate::ops::actions::clean_actor(&who).unwrap_or_else(|| "cli".into()),
            ..crate::ops::actions::ActionRecord::cli("cancel", outcome, request.at)
        },
    )?;
    if args.json {
        print_json(&answer)?;
    } else if answer.state == TaskState::Cancelled {
        println!(
            "{}: CANCELLED (was {}; {}); no failure counted",
            answer.task,
            answer.was,
            cancel::reason(&request)
        );
    } else if answer.pending {
        println!(
            "{}: cancel recorded, still {} after {}s: its owner stops it (see `polyphony status {}`)",
            answer.task, answer.state, args.wait, answer.task
        );
    } else {
        println!(
            "{}: not cancelled: it ended {} first",
            answer.task, answer.state
        );
    }
    Ok(if answer.state == TaskState::Cancelled {
        Outcome::Success
    } else {
        Outcome::NotLanded
    })
}

fn answer(
    id: &str,
    state: TaskState,
    was: TaskState,
    request: &CancelRequest,
    pending: bool,
) -> CancelAnswer {
    CancelAnswer {
        task: id.to_string(),
        state,
        was,
        by: request.by.clone(),
        pending,
    }
}

/// A running attempt: through its owner when one runs, else here, under the home's lock.
async fn stop_running(
    config: &Config,
    sources: &Sources,
    args: &Args,
    request: &CancelRequest,
    was: TaskState,
) -> anyhow::Result<CancelAnswer> {
    let db = crate::store::StoreHandle::for_config(config, |n| std::env::var(n).ok())?;
    let lock = crate::home::DaemonLock::acquire(config.home());
    let Ok(_lock) = lock else {
        // A daemon or a `spawn` owns the home: it stops the attempt.
        crate::orchestrator::daemon::wake(config.home());
        let task = cancel::wait_ended(&db, &args.task, Duration::from_secs(args.wait)).await?;
        let state = task.map_or(was, |t| t.state);
        return Ok(answer(
            &args.task,
            state,
            was,
            request,
            !state.is_terminal(),
        ));
    };
    let orch = crate::orchestrator::Orchestrator::connect(config.clone()).await?;
    let store = db.open()?;
    let settled = cancel::cancel_unowned(
        &store,
        sources,
        orch.runtime.as_ref(),
        &orch.home_label,
        &args.task,
        request,
        Utc::now(),
    )
    .await?;
    match settled {
        Some((task, from)) => {
            tell_source(sources, &db, &task).await;
            Ok(answer(&task.id, task.state, from, request, false))
        }
        None => {
            let state = store.get_task(&args.task)?.map_or(was, |t| t.state);
            Ok(answer(&args.task, state, was, request, false))
        }
    }
}

/// Tells the task's source (when it reports back); a failure leaves it for the next start.
async fn tell_source(sources: &Sources, db: &crate::store::StoreHandle, task: &Task) {
    match cancel::report(db, sources, task, Utc::now()).await {
        Ok(true) => {}
        Ok(false) => eprintln!(
            "warning: {} was not told yet; the daemon's next start tells {}",
            task.source.title(),
            task.source_ref
        ),
        Err(e) => eprintln!("warning: cannot tell {}: {e:#}", task.source.title()),
    }
}
