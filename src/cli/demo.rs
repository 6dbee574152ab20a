//! `polyphony demo`: the whole product on a fresh machine with a Docker engine and no
//! registry. Builds the offline test image, makes a sample repository with a failing
//! test, enqueues four tasks and runs the daemon until they are done, then prints the
//! outcome. Exit 0 when every task ended as the demo promises.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;

use super::{Context, Outcome};
use crate::config::Config;
use crate::demo;
use crate::orchestrator::EnvLookup;
use crate::runtime::{ensure_test_image, DockerRuntime};
use crate::store::StoreHandle;

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
    #[arg(long, conflicts_with = "real_codex")]
    real_claude: bool,
    /// Run the first task on the REAL Codex CLI (the same offline image) against a
    /// SCRIPTED OpenAI Responses API on a Docker network of its own: no real model is
    /// involved. Needs a Polyphony checkout.
    #[arg(long)]
    real_codex: bool,
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
    if args.real_codex {
        return super::demo_real::run_codex(dir, args.json);
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
    super::demo_report::run_daemon_until_idle(config, docker, env).await?;

    let all_ok = super::demo_report::report(&store, &expected, &home, &origin, json, "codex")?;
    Ok(if all_ok {
        Outcome::Success
    } else {
        Outcome::NotLanded
    })
}
