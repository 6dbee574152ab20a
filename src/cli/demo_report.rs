//! What the demos (`polyphony demo`, `--real-claude`, `--real-codex`) share: the daemon run
//! over their queue, and the closing table, each task's state against what the demo
//! promised, as text or `--json`.

use std::sync::Arc;

use tokio::sync::watch;

use super::print_json;
use crate::config::Config;
use crate::orchestrator::daemon::{self, DaemonOptions};
use crate::orchestrator::progress::LineProgress;
use crate::orchestrator::{EnvLookup, Orchestrator};
use crate::runtime::DockerRuntime;
use crate::store::Store;

/// Prints the outcome of the demo's tasks; whether every one ended as promised.
/// `fallback`: the agent that lands the quota task.
pub(super) fn report(
    store: &Store,
    expected: &[(String, crate::domain::TaskState, String)],
    home: &std::path::Path,
    origin: &std::path::Path,
    json: bool,
    fallback: &str,
) -> anyhow::Result<bool> {
    let mut all_ok = true;
    let mut rows = Vec::new();
    for (id, expect, story) in expected {
        let task = store
            .get_task(id)?
            .ok_or_else(|| anyhow::anyhow!("task {id} vanished"))?;
        let landing = store.landing(id)?;
        let attempts = store.attempts(id)?;
        let agents: Vec<String> = attempts.iter().map(|a| a.agent.clone()).collect();
        let ok = task.state == *expect;
        all_ok &= ok;
        rows.push(serde_json::json!({
            "id": id,
            "state": task.state,
            "expected": expect,
            "as_promised": ok,
            "story": story,
            "attempts": task.attempts,
            "agents": agents,
            "branch": landing.as_ref().map(|l| l.branch.clone()),
        }));
    }
    if json {
        print_json(&rows)?;
    } else {
        println!();
        println!(
            "{:<9} {:<8} {:<9} {:<22} STORY",
            "TASK", "STATE", "ATTEMPTS", "AGENTS"
        );
        for row in &rows {
            println!(
                "{:<9} {:<8} {:<9} {:<22} {}{}",
                row["id"].as_str().unwrap_or(""),
                row["state"].as_str().unwrap_or(""),
                row["attempts"].to_string(),
                row["agents"]
                    .as_array()
                    .map(|a| a
                        .iter()
                        .filter_map(|v| v.as_str())
                        .collect::<Vec<_>>()
                        .join(","))
                    .unwrap_or_default(),
                row["story"].as_str().unwrap_or(""),
                if row["as_promised"] == true {
                    ""
                } else {
                    "  <- NOT as promised"
                }
            );
        }
        println!();
        let h = home.display();
        println!("Inspect it:");
        println!("  polyphony --home {h} status");
        println!("  polyphony --home {h} status local-2   # the repair round, with evidence");
        println!(
            "  polyphony --home {h} logs local-3     # {fallback}; --attempt 1 shows claude's quota hit"
        );
        println!("Branches landed in {}", origin.display());
    }
    Ok(all_ok)
}

/// Runs the daemon over the demo's queue until every task is done (`--exit-when-idle`),
/// with progress lines, a signal stopping it as it stops `polyphony daemon`.
pub(super) async fn run_daemon_until_idle(
    config: Config,
    docker: DockerRuntime,
    env: EnvLookup,
) -> anyhow::Result<()> {
    let orch = Arc::new(Orchestrator::with_runtime(config, Arc::new(docker), env)?);
    let (tx, rx) = watch::channel(0u32);
    tokio::spawn(super::daemon::count_signals(tx));
    let opts = DaemonOptions {
        drain: false,
        exit_when_idle: true,
        upkeep: None,
    };
    daemon::run(orch, opts, Arc::new(LineProgress::new()), rx).await?;
    Ok(())
}
