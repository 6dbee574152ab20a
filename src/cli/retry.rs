//! `polyphony retry TASK` / `polyphony retry --blocked`: bring BLOCKED tasks back, once
//! their cause is fixed, as a new generation linked to the old one
//! (`orchestrator::generation`). A running daemon is woken to take them.
//!
//! `polyphony retry --now TASK`: a FAILED task waiting for its next attempt (the backoff,
//! a usage limit's reset, a cost ceiling's midnight) runs at once, once the operator fixed
//! the cause; a usage limit it waits for is taken as over (issue 29). The running daemon
//! is woken to take it; without one, `spawn --task` runs it.
//!
//! Exit 0 when every named task was retried, 2 when TASK cannot be retried (with why).

use chrono::Utc;

use super::{block_on, print_json, Context, Outcome, UsageError};
use crate::config::Config;
use crate::domain::TaskState;
use crate::orchestrator::generation::{self, Retried};
use crate::store::Store;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The BLOCKED task to bring back (an older generation means its newest one).
    #[arg(
        value_name = "TASK",
        required_unless_present = "blocked",
        conflicts_with = "blocked"
    )]
    task: Option<String>,
    /// Every BLOCKED task not retried yet.
    #[arg(long)]
    blocked: bool,
    /// A FAILED task waiting for its next attempt (backoff, a usage limit, a cost
    /// ceiling) runs now, its usage-limit wait taken as over; a BLOCKED one is retried.
    #[arg(long, conflicts_with = "blocked", requires = "task")]
    now: bool,
    /// Print `{"retried": [{from, task, generation}], "skipped": [{task, reason}]}`
    /// (with --now: `{"task", "was_waiting_until", "limits_cleared": [{identity, agent}],
    /// "daemon_running"}`).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, serde::Serialize)]
struct Skipped {
    task: String,
    reason: String,
}

pub fn run(args: Args, ctx: &Context) -> anyhow::Result<Outcome> {
    let config = Config::load(&ctx.home)?;
    let db = crate::store::StoreHandle::for_config(&config, |n| std::env::var(n).ok())?;
    if !db.exists() {
        return Err(UsageError::new(
            format!("no queue at {db}: there are no tasks to retry"),
            "enqueue a task or run the daemon first",
        )
        .into());
    }
    let store = db.open()?;
    if args.now {
        if let Some(id) = &args.task {
            let task = store.get_task(id)?.ok_or_else(|| {
                UsageError::new(
                    format!("no task `{id}` in {db}"),
                    "list the tasks with `polyphony status`",
                )
            })?;
            if task.state != TaskState::Blocked {
                return run_now(&store, &config, task, args.json);
            }
        }
    }
    let ids: Vec<String> = match &args.task {
        Some(id) => vec![id.clone()],
        None => store
            .list_tasks(Some(TaskState::Blocked), None)?
            .into_iter()
            .rev()
            .filter(|t| {
                store
                    .generation_links(&t.id)
                    .map(|l| l.retried_as.is_none())
                    .unwrap_or(false)
            })
            .map(|t| t.id)
            .collect(),
    };
    // The GitHub client needs the runtime's reactor from its construction on.
    let (retried, skipped) = block_on(async {
        let sources = crate::sources::for_verb(&config);
        let mut retried: Vec<Retried> = Vec::new();
        let mut skipped: Vec<Skipped> = Vec::new();
        for id in &ids {
            let now = Utc::now();
            let outcome = match generation::retry(&store, &sources, id, now).await? {
                Ok(done) => {
                    let outcome = format!("ok: retried as {}", done.task);
                    retried.push(done);
                    outcome
                }
                Err(why) => {
                    let outcome = why.0.clone();
                    skipped.push(Skipped {
                        task: id.clone(),
                        reason: why.0,
                    });
                    outcome
                }
            };
            // Who retried it, in the old generation's action log (issue 29); a task
            // that does not exist has no log.
            if store.get_task(id)?.is_some() {
                crate::ops::actions::record(
                    &store,
                    id,
                    crate::ops::actions::ActionRecord::cli("retry", outcome, now),
                )?;
            }
        }
        anyhow::Ok((retried, skipped))
    })??;
    if !retried.is_empty() {
        crate::orchestrator::daemon::wake(config.home());
    }
    if args.json {
        print_json(&serde_json::json!({ "retried": retried, "skipped": skipped }))?;
    } else {
        for r in &retried {
            println!(
                "{} -> {} (generation {}): DISCOVERED; the daemon or `polyphony spawn --task {}` runs it",
                r.from, r.task, r.generation, r.task
            );
        }
        if args.task.is_none() {
            for s in &skipped {
                eprintln!("{}: not retried: {}", s.task, s.reason);
            }
        }
        if ids.is_empty() {
            println!("no BLOCKED tasks to retry");
        }
    }
    match (&args.task, skipped.first()) {
        (Some(_), Some(s)) => Err(UsageError::new(
            format!("cannot retry {}: {}", s.task, s.reason),
            "`polyphony status TASK` shows its state and generations",
        )
        .into()),
        _ => Ok(Outcome::Success),
    }
}

/// `retry --now` of a task that is not BLOCKED: only a FAILED task with a next attempt
/// scheduled can run now (`ops::actions::run_now`, shared with the API and the console).
fn run_now(
    store: &Store,
    config: &Config,
    task: crate::domain::Task,
    json: bool,
) -> anyhow::Result<Outcome> {
    use crate::ops::actions::{self, ActionError, ActionRecord};
    let now = Utc::now();
    let done = match actions::run_now(store, &task.id, now) {
        Ok(done) => done,
        Err(ActionError::Refused(why)) => {
            return Err(UsageError::new(
                why.0,
                "`polyphony retry --now` takes a FAILED task waiting for its next attempt (or a BLOCKED one); `polyphony status TASK` shows where it is",
            )
            .into())
        }
        Err(e) => return Err(e.into()),
    };
    actions::record(store, &task.id, ActionRecord::cli("run-now", "ok", now))?;
    let waiting_until = done.was_waiting_until;
    let cleared: Vec<serde_json::Value> = done
        .limits_cleared
        .iter()
        .map(|(identity, agent)| serde_json::json!({"identity": identity, "agent": agent}))
        .collect();
    let daemon_running = crate::home::DaemonLock::is_held(config.home());
    if daemon_running {
        crate::orchestrator::daemon::wake(config.home());
    }
    if json {
        print_json(&serde_json::json!({
            "task": task.id,
            "was_waiting_until": waiting_until,
            "limits_cleared": cleared,
            "daemon_running": daemon_running,
        }))?;
    } else {
        let limits = if cleared.is_empty() {
            String::new()
        } else {
            let names: Vec<String> = cleared
                .iter()
                .map(|c| {
                    format!(
                        "{}@{}",
                        c["agent"].as_str().unwrap_or(""),
                        c["identity"].as_str().unwrap_or("")
                    )
                })
                .collect();
            format!("; the usage limit of {} is taken as over", names.join(", "))
        };
        let who = if daemon_running {
            "the daemon takes it now".to_string()
        } else {
            format!(
                "no daemon runs on this home: `polyphony spawn --task {}` runs it",
                task.id
            )
        };
        println!(
            "{}: due now (was waiting until {}){limits}; {who}",
            task.id,
            crate::domain::when::human(waiting_until, now)
        );
    }
    Ok(Outcome::Success)
}
