//! `polyphony demo`: the whole product on a fresh machine with a Docker engine and no
//! registry. Builds the offline test image, makes a sample repository with a failing
//! test, enqueues four tasks and runs the daemon until they are done, then prints the
//! outcome. Exit 0 when every task ended as the demo promises.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use tokio::sync::watch;

use super::{print_json, Context, Outcome};
use crate::config::Config;
use crate::demo;
use crate::orchestrator::daemon::{self, DaemonOptions};
use crate::orchestrator::progress::LineProgress;
use crate::orchestrator::{EnvLookup, Orchestrator};
use crate::runtime::{ensure_test_image, DockerRuntime};
use crate::store::{Store, StoreHandle};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory for the sample repository and the demo's own Polyphony home (default: a
    /// new directory under the system temp dir, kept for inspection). Your own home is
    /// not touched.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Print the final task list as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Run the same four tasks on the REAL Claude Code CLI (offline image built by
    /// images/real/build.sh from PyPI and Debian packages) against a SCRIPTED model API on
    /// a Docker network of its own: no real model is involved. Needs a Polyphony checkout.
    #[arg(long)]
    real_claude: bool,
}

pub fn run(args: Args, _ctx: &Context) -> anyhow::Result<Outcome> {
    let dir = match args.dir {
        Some(dir) => {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            std::fs::canonicalize(&dir)?
        }
        None => tempfile::Builder::new()
            .prefix("polyphony-demo-")
            .tempdir()
            .context("cannot create a temp dir")?
            .keep(),
    };
    if args.real_claude {
        return super::demo_real::run(dir, args.json);
    }
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime.block_on(demo_in(dir, args.json))
}

async fn demo_in(dir: PathBuf, json: bool) -> anyhow::Result<Outcome> {
    let home = dir.join("home");
    eprintln!("polyphony demo in {}", dir.display());
    eprintln!("- building the offline test image (FROM scratch, static busybox, fake agent CLIs)");
    let docker = DockerRuntime::connect().await?;
    let image = ensure_test_image(docker.client()).await?;
    eprintln!("  {image}");
    let origin = demo::write_sample_repo(&dir)?;
    eprintln!(
        "- sample repository {} (add() subtracts; `sh test.sh` fails)",
        origin.display()
    );
    demo::write_home(&home, &dir, &image)?;
    let config = Config::load(&home)?;
    let store = StoreHandle::for_config(&config, |n| std::env::var(n).ok())?.open()?;
    let mut expected = Vec::new();
    for (id, t) in demo::enqueue(&store, &origin)? {
        eprintln!("- enqueued {id}: {} ({})", t.title, t.story);
        expected.push((id, t.expect, t.story.to_string()));
    }
    eprintln!("- running the daemon until every task is done (retries back off 10 s, 20 s)\n");
    let env: EnvLookup = Arc::new(|name: &str| std::env::var(name).ok());
    let orch = Arc::new(Orchestrator::with_runtime(config, Arc::new(docker), env)?);
    let (tx, rx) = watch::channel(0u32);
    tokio::spawn(super::daemon::count_signals(tx));
    let opts = DaemonOptions {
        drain: false,
        exit_when_idle: true,
    };
    daemon::run(orch, opts, Arc::new(LineProgress::new()), rx).await?;

    let all_ok = report(&store, &expected, &home, &origin, json, "codex")?;
    Ok(if all_ok {
        Outcome::Success
    } else {
        Outcome::NotLanded
    })
}

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
