//! `polyphony daemon`: the supervisor loop in the foreground (logs on stderr).
//!
//! SIGTERM/SIGINT: stop claiming; without `--drain` leave at once, running attempts left
//! running for the next start to re-attach; with `--drain` they finish, and a second signal
//! stops them.

use std::sync::Arc;

use anyhow::Context as _;
use tokio::sync::watch;

use super::{print_json, Context, Outcome, UsageError};
use crate::config::Config;
use crate::orchestrator::daemon::{self, DaemonOptions};
use crate::orchestrator::progress::{LineProgress, LogProgress, QuietProgress};
use crate::orchestrator::{Orchestrator, Progress};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// On the first signal let running attempts finish (a second signal stops them).
    #[arg(long)]
    drain: bool,
    /// Exit once nothing is running, claimable or scheduled for a retry.
    #[arg(long)]
    exit_when_idle: bool,
    /// Print a JSON summary (attempts, landed, blocked, resumed) on exit.
    #[arg(long)]
    json: bool,
    /// Serve the JSON API, the dashboard and /metrics on this address (e.g.
    /// 127.0.0.1:8787; overrides `http.listen`). A non-loopback address needs the token
    /// variable (`http.token_env`, default POLYPHONY_HTTP_TOKEN) set. See docs/api.md.
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
}

pub fn run(args: Args, ctx: &Context) -> anyhow::Result<Outcome> {
    let config = Config::load(&ctx.home)?;
    // Every documented series exists from the first scrape (docs/metrics.md).
    {
        let agents: Vec<&str> = config.agents().iter().map(|a| a.name.as_str()).collect();
        let identities: Vec<&str> = config
            .identities()
            .iter()
            .map(|i| i.name.as_str())
            .collect();
        crate::metrics::prime(&agents, &identities);
    }
    let log_json = ctx.log_json;
    let quiet = ctx.quiet;
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    // Checked before anything starts: a bad address or a missing token is exit 2.
    let listen = args
        .listen
        .clone()
        .or_else(|| config.global().http.listen.clone());
    let http = match &listen {
        Some(addr) => {
            let token = std::env::var(&config.global().http.token_env).ok();
            Some(
                crate::http::settings(&config, addr, token)
                    .map_err(|e| UsageError::new(e.to_string(), "see docs/api.md"))?,
            )
        }
        None => None,
    };
    runtime.block_on(async move {
        let (http_stop, http_task) = match http {
            Some((addr, settings)) => {
                let listener = crate::http::bind(addr)
                    .await
                    .map_err(|e| UsageError::new(e.to_string(), "see docs/api.md"))?;
                let bound = listener.local_addr().unwrap_or(addr);
                if !quiet {
                    eprintln!("serving the dashboard and API on http://{bound}/");
                }
                tracing::info!(%bound, "http server listening");
                let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
                let task = tokio::spawn(crate::http::serve(listener, settings, async move {
                    let _ = stopped.await;
                }));
                (Some(stop), Some(task))
            }
            None => (None, None),
        };
        let upkeep = config.retention().every.map(crate::ops::retention::upkeep);
        let orch = Arc::new(Orchestrator::connect(config).await?);
        let (tx, rx) = watch::channel(0u32);
        tokio::spawn(count_signals(tx));
        let opts = DaemonOptions {
            drain: args.drain,
            exit_when_idle: args.exit_when_idle,
            upkeep,
        };
        // A person reads one line per state change; a log collector gets JSON events.
        let progress: Arc<dyn Progress> = if quiet {
            Arc::new(QuietProgress)
        } else if log_json {
            Arc::new(LogProgress)
        } else {
            Arc::new(LineProgress::new())
        };
        let summary = daemon::run(orch, opts, progress, rx).await;
        if let (Some(stop), Some(task)) = (http_stop, http_task) {
            let _ = stop.send(());
            // Open event streams end with the server; do not wait on a stuck client.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), task).await;
        }
        let summary = summary?;
        if args.json {
            print_json(&serde_json::json!({
                "attempts": summary.attempts,
                "landed": summary.landed,
                "blocked": summary.blocked,
                "resumed": summary.resumed,
                "left_running": summary.left_running,
            }))?;
        } else {
            eprintln!(
                "daemon stopped: {} attempt(s) started, {} resumed, {} landed, {} blocked{}",
                summary.attempts,
                summary.resumed,
                summary.landed,
                summary.blocked,
                match summary.left_running {
                    0 => String::new(),
                    n => format!("; {n} left running for the next start to re-attach"),
                }
            );
        }
        Ok(Outcome::Success)
    })
}

/// Counts SIGINT and SIGTERM into `tx`.
pub(crate) async fn count_signals(tx: watch::Sender<u32>) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::warn!("cannot install signal handlers");
        return;
    };
    loop {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tx.send_modify(|n| *n += 1);
    }
}
