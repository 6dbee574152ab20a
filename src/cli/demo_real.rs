//! `polyphony demo --real-claude`: the demo's four tasks on the REAL Claude Code CLI (the
//! offline image `images/real`) against a SCRIPTED Anthropic Messages API
//! (`scripted_model`), served on the gateway of a Docker network the demo creates and
//! removes, so the containers reach it and nothing else of the host. No real model runs:
//! the model's moves are scripted; everything the CLI, Docker, git and Polyphony do is real.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use anyhow::Context as _;
use chrono::Utc;
use tokio::sync::watch;

use super::Outcome;
use crate::config::Config;
use crate::demo;
use crate::orchestrator::daemon::{self, DaemonOptions};
use crate::orchestrator::progress::LineProgress;
use crate::orchestrator::{EnvLookup, Orchestrator};
use crate::runtime::{daemon_user, home_label, DockerRuntime, WorkerRuntime as _};
use crate::scripted_model::ScriptedAnthropic;
use crate::store::Store;

/// The key the CLI sends to the scripted API (which accepts any).
const DEMO_KEY: &str = "sk-ant-demo-scripted-model";

pub fn run(dir: PathBuf, json: bool) -> anyhow::Result<Outcome> {
    eprintln!(
        "polyphony demo --real-claude in {}\n  REAL Claude Code CLI, SCRIPTED model API: no real model is involved",
        dir.display()
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("images/real/build.sh");
    anyhow::ensure!(
        script.is_file(),
        "demo --real-claude builds its image with {}, which is missing: run it from a Polyphony checkout (`cargo run -- demo --real-claude`)",
        script.display()
    );
    eprintln!("- building images/real (reused when unchanged; a first build downloads the claude-agent-sdk wheel from PyPI and Debian trixie, a few minutes)");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {}", script.display()))?;
    anyhow::ensure!(
        out.status.success(),
        "{} failed ({})",
        script.display(),
        out.status
    );
    let image = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .context("images/real/build.sh printed no image tag")?;
    eprintln!("  {image}");

    let home = dir.join("home");
    std::fs::create_dir_all(&home)?;
    let label = home_label(&home);
    let network = format!("polyphony-demo-{}", std::process::id());
    // Set up in a runtime of its own: the listeners' addresses must be in the environment
    // (the identities' api_keys read host variables) before the daemon's threads start.
    let gateway = tokio::runtime::Runtime::new()
        .context("cannot start the async runtime")?
        .block_on(async {
            let docker = DockerRuntime::connect().await?;
            docker.create_network(&network, &label).await
        })?;
    eprintln!(
        "- Docker network {network}; the scripted model API listens on its gateway {gateway}"
    );
    let bind = || -> anyhow::Result<std::net::TcpListener> {
        let l = std::net::TcpListener::bind((gateway, 0))
            .with_context(|| format!("cannot listen on {gateway}"))?;
        l.set_nonblocking(true)?;
        Ok(l)
    };
    let (limited, healthy) = (bind()?, bind()?);
    std::env::set_var(demo::REAL_KEY_VAR, DEMO_KEY);
    // Reached by name through each attempt's egress proxy (issue 25), never by address.
    let ports = [limited.local_addr()?.port(), healthy.local_addr()?.port()];
    std::env::set_var(
        demo::REAL_URL_VAR,
        format!("http://{}:{}", demo::SCRIPTED_MODEL_HOST, ports[0]),
    );
    std::env::set_var(
        demo::REAL_URL2_VAR,
        format!("http://{}:{}", demo::SCRIPTED_MODEL_HOST, ports[1]),
    );

    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let result = runtime.block_on(demo_in(
        &dir,
        &home,
        &image,
        (&network, gateway, &ports),
        limited,
        healthy,
        json,
    ));
    let removed = runtime.block_on(async {
        let docker = DockerRuntime::connect().await?;
        docker.remove_network(&network).await
    });
    if let Err(e) = removed {
        eprintln!("warning: could not remove the Docker network {network}: {e}");
    }
    result
}

async fn demo_in(
    dir: &Path,
    home: &Path,
    image: &str,
    (network, gateway, ports): (&str, std::net::IpAddr, &[u16]),
    limited: std::net::TcpListener,
    healthy: std::net::TcpListener,
    json: bool,
) -> anyhow::Result<Outcome> {
    let reset = Utc::now().timestamp() + 3600;
    let _limited =
        ScriptedAnthropic::serve(tokio::net::TcpListener::from_std(limited)?, move |t| {
            demo::real_claude_script(t, true, reset)
        })?;
    let _healthy =
        ScriptedAnthropic::serve(tokio::net::TcpListener::from_std(healthy)?, move |t| {
            demo::real_claude_script(t, false, reset)
        })?;
    let origin = demo::write_sample_repo(dir)?;
    eprintln!(
        "- sample repository {} (add() subtracts; `sh test.sh` fails)",
        origin.display()
    );
    // Claude Code refuses to run as root: a root daemon runs it as uid 1000.
    let user = daemon_user();
    let user = user.starts_with("0:").then_some("1000:1000");
    demo::write_real_home(home, dir, image, network, (gateway, ports), user)?;
    let config = Config::load(home)?;
    let store = Store::open(&config.db_path())?;
    let mut expected = Vec::new();
    for (id, t) in demo::enqueue(&store, &origin)? {
        let story = t
            .story
            .replace("codex", "claude-b (a second Claude identity)");
        eprintln!("- enqueued {id}: {} ({story})", t.title);
        expected.push((id, t.expect, story));
    }
    eprintln!("- running the daemon until every task is done (retries back off 10 s, 20 s)\n");
    let env: EnvLookup = Arc::new(|name: &str| std::env::var(name).ok());
    let docker = DockerRuntime::connect().await?;
    let orch = Arc::new(Orchestrator::with_runtime(config, Arc::new(docker), env)?);
    let (tx, rx) = watch::channel(0u32);
    tokio::spawn(super::daemon::count_signals(tx));
    let opts = DaemonOptions {
        drain: false,
        exit_when_idle: true,
        upkeep: None,
    };
    daemon::run(orch, opts, Arc::new(LineProgress::new()), rx).await?;
    let all_ok = super::demo_report::report(&store, &expected, home, &origin, json, "claude-b")?;
    if !json {
        println!("(REAL Claude Code CLI; the model's moves were scripted: src/demo.rs `real_claude_script`.)");
    }
    Ok(if all_ok {
        Outcome::Success
    } else {
        Outcome::NotLanded
    })
}
