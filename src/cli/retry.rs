//! `polyphony retry TASK` / `polyphony retry --blocked`: bring BLOCKED tasks back, once
//! their cause is fixed, as a new generation linked to the old one
//! (`orchestrator::generation`). A running daemon is woken to take them.
//!
//! Exit 0 when every named task was retried, 2 when TASK cannot be retried (with why).

use chrono::Utc;

use super::{block_on, print_json, Context, Outcome, UsageError};
use crate::config::Config;
use crate::domain::{SourceKind, TaskState};
use crate::orchestrator::generation::{self, Retried};
use crate::sources::github::GithubSource;
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
    /// Print `{"retried": [{from, task, generation}], "skipped": [{task, reason}]}`.
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
    let db = config.db_path();
    if !db.exists() {
        return Err(UsageError::new(
            format!("no queue at {}: there are no tasks to retry", db.display()),
            "enqueue a task or run the daemon first",
        )
        .into());
    }
    let store = Store::open(&db)?;
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
    let needs_github = ids.iter().any(|id| {
        store
            .newest_generation(id)
            .ok()
            .flatten()
            .is_some_and(|t| t.source == SourceKind::Github)
    });
    // The GitHub client needs the runtime's reactor from its construction on.
    let (retried, skipped) = block_on(async {
        let github: Result<GithubSource, String> = if needs_github {
            generation::github_source(&config).map_err(|e| format!("{e:#}"))
        } else {
            Err("no GitHub task among them".into())
        };
        let mut retried: Vec<Retried> = Vec::new();
        let mut skipped: Vec<Skipped> = Vec::new();
        for id in &ids {
            let github = github.as_ref().map_err(String::as_str);
            match generation::retry(&store, github, id, Utc::now()).await? {
                Ok(done) => retried.push(done),
                Err(why) => skipped.push(Skipped {
                    task: id.clone(),
                    reason: why.0,
                }),
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
