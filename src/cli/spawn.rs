//! `polyphony spawn owner/repo#N` and `polyphony spawn --task ID`: one task through the
//! whole pipeline in the foreground, retries included, with live progress on stderr.
//! Exit 0 when it lands, 1 when it does not. The attempts and waits between them are
//! `orchestrator::drive`; this prints what it reports.

use std::sync::Arc;

use anyhow::Context as _;
use tokio::sync::watch;

use super::{print_json, Context, Outcome, UsageError};
use crate::config::Config;
use crate::domain::{SourceKind, Task};
use crate::home::DaemonLock;
use crate::orchestrator::drive::{drive, NotDriven};
use crate::orchestrator::pipeline::{describe, AttemptEnd, RunOptions};
use crate::orchestrator::progress::{QuietProgress, TerminalProgress};
use crate::orchestrator::Orchestrator;
use crate::sources::github::IssueRef;
use crate::store::Store;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The GitHub issue to take, as `owner/repo#N`.
    #[arg(
        value_name = "OWNER/REPO#N",
        required_unless_present = "task",
        conflicts_with = "task"
    )]
    issue: Option<String>,
    /// Run a task already in the queue (e.g. one made with `enqueue`) instead.
    #[arg(long, value_name = "ID")]
    task: Option<String>,
    /// Take the issue even if it does not carry the ready label.
    #[arg(long)]
    force: bool,
    /// Print the final result as JSON on stdout.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args, ctx: &Context) -> anyhow::Result<Outcome> {
    let config = Config::load(&ctx.home)?;
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime.block_on(spawn(args, config, ctx.quiet))
}

async fn spawn(args: Args, config: Config, quiet: bool) -> anyhow::Result<Outcome> {
    let home = config.home().to_path_buf();
    crate::private::create_dir(&home)?;
    // spawn and a daemon on one home would both drive the same tasks.
    let _lock = DaemonLock::acquire(&home).map_err(|e| {
        UsageError::new(
            e.to_string(),
            "let the daemon run it (`polyphony enqueue` or label the issue), or stop the daemon",
        )
    })?;
    let orch = Arc::new(Orchestrator::connect(config).await?);
    let store = orch.store.open()?;
    let task = match (&args.issue, &args.task) {
        (Some(issue), _) => issue_task(&orch, &store, issue, args.force).await?,
        (None, Some(id)) => store.get_task(id)?.ok_or_else(|| {
            UsageError::new(
                format!("no task `{id}` in {}", orch.store),
                "list the tasks with `polyphony status`",
            )
        })?,
        (None, None) => unreachable!("clap requires one of them"),
    };
    let task = match args.task {
        Some(_) => run_now_if_waiting(&store, task)?,
        None => task,
    };
    let (cancel_tx, cancel_rx) = watch::channel(false);
    let cancel_tx = Arc::new(cancel_tx);
    {
        let cancel_tx = cancel_tx.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!(
                    "\ninterrupted: stopping the attempt (container removed, cancellation recorded)"
                );
                let _ = cancel_tx.send(true);
            }
        });
    }
    // `polyphony cancel` (issue 29) pokes the socket a daemon would listen on: this
    // process owns the home's lock, so it is the one to stop its attempt.
    let _socket = listen_for_cancel(&home, orch.store.clone(), &task.id, cancel_tx)?;
    let opts = RunOptions {
        progress: if quiet {
            Arc::new(QuietProgress)
        } else {
            Arc::new(TerminalProgress::new())
        },
        cancel: cancel_rx.clone(),
        cancel_means_retry: false,
    };
    let id = task.id.clone();
    let say = |line: &str| eprintln!("{line}");
    // The one refusal `drive` returns is a task another process runs.
    let end = drive(&orch, &store, task, &opts, cancel_rx, &say)
        .await
        .map_err(|e| match e.downcast::<NotDriven>() {
            Ok(busy) => UsageError::new(
                busy.to_string(),
                "wait for it, or run `polyphony daemon` to recover it after a crash",
            )
            .into(),
            Err(e) => e,
        })?;
    let task = store.get_task(&id)?;
    let landing = store.landing(&id)?;
    if args.json {
        print_json(&serde_json::json!({
            "task": id,
            "state": task.as_ref().map(|t| t.state),
            "landed": end.as_ref().is_some_and(AttemptEnd::is_landed),
            "result": end.as_ref().map(describe),
            "branch": landing.as_ref().map(|l| l.branch.clone()),
            "pr_url": landing.as_ref().and_then(|l| l.pr_url.clone()),
            "attempts": task.as_ref().map(|t| t.attempts),
        }))?;
    } else if let Some(end) = &end {
        println!("{id}: {}", describe(end));
    }
    Ok(match end {
        Some(end) if end.is_landed() => Outcome::Success,
        _ => Outcome::NotLanded,
    })
}

/// `spawn --task` of a FAILED task waiting for its next attempt (a backoff, a usage
/// limit's reset, a cost ceiling's midnight) runs it now, as `retry --now` does: the
/// person asked for it (issue 29; it used to wait the hour out). The action is recorded.
fn run_now_if_waiting(store: &Store, task: Task) -> anyhow::Result<Task> {
    use crate::ops::actions::{self, ActionRecord};
    let now = chrono::Utc::now();
    let waiting = matches!(
        (task.state, task.next_attempt_at),
        (crate::domain::TaskState::Failed, Some(at)) if at > now
    );
    if !waiting {
        return Ok(task);
    }
    let done = actions::run_now(store, &task.id, now)?;
    actions::record(
        store,
        &task.id,
        ActionRecord::cli("run-now", "ok (spawn --task)", now),
    )?;
    let limits: Vec<String> = done
        .limits_cleared
        .iter()
        .map(|(identity, agent)| format!("{agent}@{identity}"))
        .collect();
    eprintln!(
        "{}: running now (it was waiting until {}){}",
        task.id,
        crate::domain::when::human(done.was_waiting_until, now),
        if limits.is_empty() {
            String::new()
        } else {
            format!(
                "; the usage limit of {} is taken as over",
                limits.join(", ")
            )
        }
    );
    Ok(store.get_task(&task.id)?.unwrap_or(task))
}

/// Removes the socket file when `spawn` ends.
struct Socket(std::path::PathBuf);

impl Drop for Socket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Listens on `daemon.sock`; on each poke, a pending cancel request for `task` stops it.
fn listen_for_cancel(
    home: &std::path::Path,
    store: crate::store::StoreHandle,
    task: &str,
    cancel: Arc<watch::Sender<bool>>,
) -> anyhow::Result<Socket> {
    let path = crate::orchestrator::daemon::wake_socket(home);
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path)
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", path.display()))?;
    let task = task.to_string();
    tokio::spawn(async move {
        while listener.accept().await.is_ok() {
            let store = store.clone();
            let task = task.clone();
            // The store is blocking (and PostgreSQL's client runs its own runtime).
            let requested =
                tokio::task::spawn_blocking(move || store.open()?.cancel_request(&task))
                    .await
                    .ok()
                    .and_then(|r| r.ok())
                    .flatten();
            if requested.is_some() {
                let _ = cancel.send(true);
            }
        }
    });
    Ok(Socket(path))
}

/// Fetches the issue and records it as a task (or finds the one already tracked).
async fn issue_task(
    orch: &Orchestrator,
    store: &Store,
    issue: &str,
    force: bool,
) -> anyhow::Result<Task> {
    let issue_ref = IssueRef::parse(issue).map_err(|e| {
        UsageError::new(
            e.to_string(),
            "name the issue as owner/repo#N, e.g. octo/widgets#42",
        )
    })?;
    let source = orch.sources.get(SourceKind::Github)?;
    let fetched = source.fetch(&issue_ref.to_string()).await?;
    // A retried issue is its newest generation (`polyphony retry`).
    if let Some(existing) = store.newest_generation(&fetched.id)? {
        return Ok(existing);
    }
    let ready = &orch.config.global().github.ready_label;
    if !force && !fetched.labels.iter().any(|l| l.eq_ignore_ascii_case(ready)) {
        return Err(UsageError::new(
            format!("{issue} does not carry the `{ready}` label"),
            format!("label it `{ready}`, or pass --force to take it anyway"),
        )
        .into());
    }
    store.insert_task(&fetched)?;
    Ok(fetched)
}
