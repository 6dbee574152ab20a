//! `polyphony doctor`: is this machine and home ready to run agents? One [`Check`] per
//! fact (engine, images, git, config, credential paths, API-key variables, GitHub token,
//! daemon, disk), each with a fix when it fails (issue 7 item 5).
//!
//! The check builders and [`render`] are pure and table-tested; [`run`] is the thin IO
//! shell that gathers the facts (Docker, `git --version`, the filesystem, the environment,
//! one GitHub call per token and repository).
//!
//! Architecture Invariant: secret values never appear in a check: tokens and API keys are
//! named by their variable, never shown, not even in part.
//! Must not: create anything in the home (the queue is opened only when it exists), or stop
//! at the first problem (every check runs so one run lists everything to fix).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::config::Config;
use crate::domain::AgentType;
use crate::runtime::test_image::TEST_IMAGE_REPO;
use crate::runtime::{DockerRuntime, EngineVersion};
use crate::sources::github::client::{resolve_api_url, resolve_token, FaultPolicy, GithubClient};
use crate::sources::github::RepoSlug;

/// Free space under which a disk check fails: one clone plus its build does not fit.
pub const DISK_FAIL_BYTES: u64 = 1024 * 1024 * 1024;
/// Free space under which a disk check warns.
pub const DISK_WARN_BYTES: u64 = 5 * 1024 * 1024 * 1024;

/// How a check came out. Only `Fail` makes `doctor` exit 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Pass,
    Warn,
    Fail,
}

impl Level {
    pub fn mark(self) -> &'static str {
        match self {
            Level::Pass => "✓",
            Level::Warn => "!",
            Level::Fail => "✗",
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// What was checked: `docker`, `image polyphony-worker:latest`, `git`, …
    pub name: String,
    pub level: Level,
    /// What was found.
    pub detail: String,
    /// What to do about it (always set for a warning or failure).
    pub fix: Option<String>,
}

impl Check {
    pub fn pass(name: impl Into<String>, detail: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            level: Level::Pass,
            detail: detail.into(),
            fix: None,
        }
    }

    pub fn warn(
        name: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Check {
        Check {
            name: name.into(),
            level: Level::Warn,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    pub fn fail(
        name: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Check {
        Check {
            name: name.into(),
            level: Level::Fail,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}

/// `✓ name: detail` per check, `    fix: …` under each warning or failure, then a summary.
pub fn render(checks: &[Check]) -> String {
    let mut out = String::new();
    for c in checks {
        out.push_str(&format!("{} {}: {}\n", c.level.mark(), c.name, c.detail));
        if let Some(fix) = &c.fix {
            out.push_str(&format!("    fix: {fix}\n"));
        }
    }
    let count = |l: Level| checks.iter().filter(|c| c.level == l).count();
    let (fail, warn) = (count(Level::Fail), count(Level::Warn));
    if fail == 0 {
        out.push_str(&format!(
            "ready: {} checks passed, {warn} warning(s)\n",
            count(Level::Pass)
        ));
    } else {
        out.push_str(&format!(
            "not ready: {fail} check(s) failed, {warn} warning(s)\n"
        ));
    }
    out
}

/// True when no check failed (warnings do not count).
pub fn passed(checks: &[Check]) -> bool {
    checks.iter().all(|c| c.level != Level::Fail)
}

// ---------------------------------------------------------------------------- builders

pub fn docker_check(engine: Result<&EngineVersion, &str>) -> Check {
    match engine {
        Ok(v) => Check::pass(
            "docker",
            format!(
                "engine {} (API {}, spoken {})",
                v.version, v.api_version, v.negotiated_api
            ),
        ),
        Err(e) => Check::fail(
            "docker",
            format!("engine unreachable: {e}"),
            "start the Docker engine (`systemctl start docker`) and check DOCKER_HOST and that \
             you may use its socket (group `docker`)",
        ),
    }
}

/// `present`: `Ok(true)` found, `Ok(false)` missing, `Err` the engine's answer.
pub fn image_check(image: &str, used_by: &str, present: Result<bool, &str>) -> Check {
    let name = format!("image {image}");
    match present {
        Ok(true) => Check::pass(name, format!("present ({used_by})")),
        Ok(false) if image.starts_with(TEST_IMAGE_REPO) => Check::fail(
            name,
            format!("missing ({used_by})"),
            "`polyphony demo` builds the offline test image (it needs /bin/busybox from \
             busybox-static)",
        ),
        Ok(false) => Check::fail(
            name,
            format!("missing ({used_by}); nothing can be pulled automatically"),
            format!(
                "build it from a Polyphony checkout: `docker build -t {image} images/worker`, or \
                 name an image you have in config.yaml (`container.image`) or agents.yaml; \
                 `polyphony demo` builds the offline test image {TEST_IMAGE_REPO}:latest"
            ),
        ),
        Err(e) => Check::fail(
            name,
            format!("cannot ask the engine: {e}"),
            "fix the docker check first",
        ),
    }
}

pub fn git_check(version: Result<&str, &str>) -> Check {
    match version {
        Ok(v) => Check::pass("git", v.trim().to_string()),
        Err(e) => Check::fail(
            "git",
            format!("not usable: {e}"),
            "install git (`apt-get install git`) and make sure it is on PATH",
        ),
    }
}

/// `free`: bytes available to this user on the filesystem of `path`, or why unknown.
pub fn disk_check(what: &str, path: &Path, free: Result<u64, &str>) -> Check {
    let name = format!("disk ({what})");
    let free = match free {
        Ok(f) => f,
        Err(e) => {
            return Check::warn(
                name,
                format!("cannot measure {}: {e}", path.display()),
                "check that the path is readable",
            )
        }
    };
    let detail = format!(
        "{} free at {}",
        crate::report::human_bytes(free),
        path.display()
    );
    let fix = "free space (`polyphony cleanup` removes finished workspaces) or move the root";
    if free < DISK_FAIL_BYTES {
        Check::fail(name, detail, fix)
    } else if free < DISK_WARN_BYTES {
        Check::warn(name, detail, fix)
    } else {
        Check::pass(name, detail)
    }
}

/// A setting `allow_unsafe: true` accepted: a warning naming where it is and the fix.
pub fn unsafe_check(item: &crate::config::ConfigError) -> Check {
    let at = if item.line > 0 {
        format!("{}:{}", item.file.display(), item.line)
    } else {
        item.file.display().to_string()
    };
    Check::warn(
        "unsafe setting (allow_unsafe)",
        format!("{} ({at})", item.message),
        item.fix.clone(),
    )
}

/// A credential directory of an identity, which is bind-mounted read-only: Docker refuses
/// to create a container whose mount source is missing.
pub fn volume_check(identity: &str, agent_type: &str, path: &Path, exists: bool) -> Check {
    let name = format!("identity {identity}: {agent_type} credentials");
    if exists {
        Check::pass(name, path.display().to_string())
    } else {
        Check::fail(
            name,
            format!("{} does not exist", path.display()),
            format!(
                "log in with the {agent_type} CLI so it writes {}, or remove the `{agent_type}` \
                 volume from identity `{identity}` in identities.yaml",
                path.display()
            ),
        )
    }
}

/// Which of an agent type's credential files (`identity::credential_files`) exist: the
/// containers get only those. None at all means the agent runs logged out.
pub fn staged_files_check(identity: &str, agent_type: &str, files: &[(String, bool)]) -> Check {
    let name = format!("identity {identity}: {agent_type} files staged");
    let present: Vec<&str> = files
        .iter()
        .filter(|(_, e)| *e)
        .map(|(f, _)| f.as_str())
        .collect();
    if present.is_empty() {
        let expected: Vec<&str> = files.iter().map(|(f, _)| f.as_str()).collect();
        return Check::warn(
            name,
            format!("none of {} exists", expected.join(", ")),
            format!(
                "log in with the {agent_type} CLI (or give an API key), or list {agent_type} \
                 under `whole_directory` of identity `{identity}` if its login lives elsewhere"
            ),
        );
    }
    Check::pass(name, present.join(", "))
}

/// An API-key variable an identity passes into containers. Only whether it is set.
pub fn api_key_check(identity: &str, container_var: &str, host_var: &str, set: bool) -> Check {
    let name = format!("identity {identity}: {container_var}");
    if set {
        Check::pass(name, format!("from ${host_var} (set)"))
    } else {
        Check::fail(
            name,
            format!("host variable ${host_var} is not set"),
            format!("export {host_var}=… in the daemon's environment, or remove it from api_keys"),
        )
    }
}

/// `token_var`: where the token was found, or the resolver's message (it names the
/// variables tried). `repos_configured`: whether GitHub intake needs it.
pub fn token_presence_check(
    identities: &str,
    token_var: Result<&str, &str>,
    repos_configured: bool,
) -> Check {
    let name = format!("GitHub token ({identities})");
    match token_var {
        Ok(var) if repos_configured => Check::pass(name, format!("${var} is set")),
        Ok(var) => Check::pass(
            name,
            format!("${var} is set (not validated: no github.repos configured)"),
        ),
        Err(e) if repos_configured => Check::fail(
            name,
            e.to_string(),
            "export a token with `repo` scope as GITHUB_TOKEN (or the identity's github_token_env)",
        ),
        Err(e) => Check::warn(
            name,
            e.to_string(),
            "only needed for GitHub issues and pushing to GitHub remotes",
        ),
    }
}

/// The answer to `GET /repos/{repo}` with the token from `$token_var`.
pub fn token_api_check(
    token_var: &str,
    repo: &str,
    api_url: &str,
    answer: Result<(), &str>,
) -> Check {
    let name = format!("GitHub ${token_var} → {repo}");
    match answer {
        Ok(()) => Check::pass(
            name,
            format!("valid; the repository is readable at {api_url}"),
        ),
        Err(e) => Check::fail(
            name,
            e.to_string(),
            format!(
                "export a valid token with `repo` scope as {token_var} and check `github.repos`"
            ),
        ),
    }
}

/// One (identity, agent)'s usage limit: out until its reset (a warning: tasks take the
/// next agent of their chain or wait), or available again.
pub fn quota_check(q: &crate::domain::AgentQuota, now: chrono::DateTime<chrono::Utc>) -> Check {
    let name = format!("quota {}@{}", q.agent, q.identity);
    let at = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%d %H:%M UTC").to_string();
    if q.is_out(now) {
        Check::warn(
            name,
            format!(
                "out until {} ({}): {}",
                at(q.resets_at),
                if q.reported {
                    "the CLI's reset time"
                } else {
                    "no reset time given: quota_default_cooldown"
                },
                q.message
            ),
            "nothing to do: tasks skip it (next agent of their chain, or they wait) and use it again after the reset",
        )
    } else {
        Check::pass(
            name,
            format!("available (last limit ended {})", at(q.resets_at)),
        )
    }
}

pub fn daemon_check(running: bool, pid: Option<&str>) -> Check {
    if running {
        let pid = pid.map_or(String::new(), |p| format!(" (pid {p})"));
        Check::pass("daemon", format!("running{pid}"))
    } else {
        Check::warn(
            "daemon",
            "not running",
            "start it with `polyphony daemon` (or run one task with `polyphony spawn`)",
        )
    }
}

/// `(major, minor, patch)`.
pub type Version = (u64, u64, u64);

/// The real CLI versions the adapters were run or recorded against (docs/agents.md), as
/// inclusive `(major, minor, patch)` ranges. Only Claude Code runs for real here.
pub const TESTED_VERSIONS: [(AgentType, Version, Version); 2] = [
    (AgentType::Claude, (2, 1, 59), (2, 1, 332)),
    (AgentType::Gemini, (0, 31, 0), (0, 31, u64::MAX)),
];

/// `probe`: `Ok((exit code, output))` of `CLI --version` in `image`, or why it could not run.
pub fn cli_version_check(
    image: &str,
    agent: AgentType,
    cli: &str,
    probe: Result<(Option<i64>, String), String>,
) -> Check {
    let name = format!("{agent} CLI in {image}");
    let install = format!(
        "put the {agent} CLI on PATH as `{cli}` in {image} (images/worker/Dockerfile; \
         images/real/build.sh has the real Claude Code offline), set the profile's \
         `cli_command`, or route no task to {agent}"
    );
    let (code, output) = match probe {
        Ok(p) => p,
        Err(e) => return Check::warn(name, format!("cannot run `{cli} --version`: {e}"), install),
    };
    let line = output
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .to_string();
    if output.contains("no longer maintained") {
        return Check::warn(
            name,
            format!("{line}: a deprecation stub that runs no task"),
            "use an image with a working Kimi CLI (docs/agents.md: kimi-cli 1.52.0 on PyPI is a stub)",
        );
    }
    if code != Some(0) {
        let code = code.map_or_else(|| "no exit code".to_string(), |c| format!("exit {c}"));
        // A warning: the default profiles name all four CLIs, and an image rarely has them all.
        return Check::warn(
            name,
            format!("`{cli} --version`: {code}: {line}; attempts routed to it will fail"),
            install,
        );
    }
    let Some(version) = parse_version(&line) else {
        return Check::warn(
            name,
            format!("`{cli} --version` printed no version: {line}"),
            install,
        );
    };
    let shown = format!("{}.{}.{}", version.0, version.1, version.2);
    match TESTED_VERSIONS.iter().find(|(a, _, _)| *a == agent) {
        Some((_, low, high)) if (low..=high).contains(&&version) => {
            Check::pass(name, format!("{shown} (tested range {} to {})", show(*low), show(*high)))
        }
        Some((_, low, high)) => Check::warn(
            name,
            format!("{shown} is outside the tested range ({} to {}): its stream format may differ", show(*low), show(*high)),
            "try one attempt and `polyphony replay --agent AGENT` its transcript, or pin a tested version in the image",
        ),
        None => Check::pass(
            name,
            format!("{shown} (never run for real here; the adapter follows recorded streams, docs/agents.md)"),
        ),
    }
}

/// `X.Y.Z`, with an open-ended patch shown as `x`.
fn show((a, b, c): (u64, u64, u64)) -> String {
    if c == u64::MAX {
        format!("{a}.{b}.x")
    } else {
        format!("{a}.{b}.{c}")
    }
}

/// The first `X.Y.Z` in `text`.
fn parse_version(text: &str) -> Option<(u64, u64, u64)> {
    text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .find_map(|word| {
            let mut parts = word.split('.').map(|p| p.parse::<u64>().ok());
            match (parts.next()?, parts.next()?, parts.next()?) {
                (Some(a), Some(b), Some(c)) => Some((a, b, c)),
                _ => None,
            }
        })
}

/// For each image the agents run in, the agent types and commands that run there.
fn clis_of(config: &Config) -> BTreeMap<String, BTreeSet<(AgentType, String)>> {
    let mut out: BTreeMap<String, BTreeSet<(AgentType, String)>> = BTreeMap::new();
    for agent in &config.agents {
        let image = agent
            .image
            .clone()
            .unwrap_or_else(|| config.global.container.image.clone());
        out.entry(image)
            .or_default()
            .insert((agent.agent_type, agent.cli_command.clone()));
    }
    out
}

/// Runs `CLI --version` in `image`: no network, no credentials, removed afterwards.
async fn probe_cli(
    rt: &DockerRuntime,
    home: &Path,
    image: &str,
    cli: &str,
    user: &str,
    n: usize,
) -> Result<(Option<i64>, String), String> {
    use crate::runtime::{run_check, ContainerSpec, Role};
    let spec = ContainerSpec::new(
        format!("polyphony-doctor-{}-{n}", std::process::id()),
        image,
        vec![cli.to_string(), "--version".to_string()],
    )
    .labels_for("doctor", 0, &crate::runtime::home_label(home), Role::Verify)
    .network(crate::domain::NetworkMode::None)
    .limits(crate::domain::ResourceLimits::default(), user);
    let no_scrub = |s: &str| s.to_string();
    run_check(rt, &spec, Duration::from_secs(60), &no_scrub)
        .await
        .map(|r| (r.exit_code, r.output_tail))
        .map_err(|e| e.to_string())
}

// ---------------------------------------------------------------------------- run (IO)

/// Runs every check against `home`. `lookup` reads environment variables (values are only
/// tested for presence and handed to the GitHub client, never returned).
pub async fn run(home: &Path, lookup: &(dyn Fn(&str) -> Option<String> + Sync)) -> Vec<Check> {
    let mut checks = Vec::new();

    let config = match Config::load(home) {
        Ok(c) => {
            let read: Vec<&str> = c
                .files()
                .iter()
                .filter(|(_, read)| **read)
                .map(|(f, _)| *f)
                .collect();
            if read.is_empty() {
                checks.push(Check::warn(
                    "config",
                    format!("no config files in {} (defaults in use)", home.display()),
                    "run `polyphony init` to write the commented templates",
                ));
            } else {
                checks.push(Check::pass(
                    "config",
                    format!("{} loads ({})", home.display(), read.join(", ")),
                ));
            }
            Some(c)
        }
        Err(e) => {
            // The error already names file, line, column and the fix.
            checks.push(Check::fail(
                "config",
                e.to_string(),
                "edit the file as the message says, then `polyphony config check`",
            ));
            None
        }
    };

    match std::process::Command::new("git").arg("--version").output() {
        Ok(out) if out.status.success() => {
            checks.push(git_check(Ok(&String::from_utf8_lossy(&out.stdout))))
        }
        Ok(out) => checks.push(git_check(Err(&format!(
            "`git --version` exited with {}",
            out.status
        )))),
        Err(e) => checks.push(git_check(Err(&format!("cannot run git: {e}")))),
    }

    let engine = DockerRuntime::connect().await;
    let runtime = match engine {
        Ok(rt) => match rt.engine_version().await {
            Ok(v) => {
                checks.push(docker_check(Ok(&v)));
                Some(rt)
            }
            Err(e) => {
                checks.push(docker_check(Err(&e.to_string())));
                None
            }
        },
        Err(e) => {
            checks.push(docker_check(Err(&e.to_string())));
            None
        }
    };

    if let Some(config) = &config {
        for (image, used_by) in images_of(config) {
            let present = match &runtime {
                Some(rt) => rt.image_present(&image).await.map_err(|e| e.to_string()),
                None => Err("the engine is unreachable".to_string()),
            };
            checks.push(image_check(
                &image,
                &used_by,
                present.as_ref().map(|b| *b).map_err(String::as_str),
            ));
        }
        for item in config.unsafe_settings() {
            checks.push(unsafe_check(item));
        }
        // The CLI versions inside each present image (the offline test image holds fakes).
        if let Some(rt) = &runtime {
            let user = config
                .global
                .container
                .user
                .clone()
                .unwrap_or_else(crate::runtime::daemon_user);
            let mut n = 0;
            for (image, clis) in clis_of(config) {
                if image.starts_with(TEST_IMAGE_REPO)
                    || !rt.image_present(&image).await.unwrap_or(false)
                {
                    continue;
                }
                for (agent, cli) in clis {
                    n += 1;
                    let probe = probe_cli(rt, home, &image, &cli, &user, n).await;
                    checks.push(cli_version_check(&image, agent, &cli, probe));
                }
            }
        }
        credential_checks(config, lookup, &mut checks);
        github_checks(config, lookup, &mut checks).await;
    } else {
        checks.push(Check::warn(
            "images, identities, GitHub",
            "not checked: the config does not load",
            "fix the config check above",
        ));
    }

    if !crate::runtime::test_image::host_busybox_present() {
        checks.push(Check::warn(
            "busybox",
            format!("{} missing", crate::runtime::test_image::HOST_BUSYBOX),
            "`apt-get install busybox-static`: `polyphony demo` and the Docker tests build the \
             offline test image from it",
        ));
    }

    let db = crate::config::db_path(home);
    if db.exists() {
        // `integrity_check` reads every page (issue 12: a damaged file looked healthy).
        let checked = crate::store::Store::open(&db).and_then(|s| {
            let problems = s.check_integrity(true)?;
            Ok((s.count_by_state()?, problems))
        });
        let recover = format!(
            "stop the daemon; restore a backup (`cp BACKUP {0}` after moving {0} and its -wal/-shm aside) or salvage it with `sqlite3 {0} .recover | sqlite3 {0}.recovered`",
            db.display()
        );
        match checked {
            Ok((counts, problems)) if problems.is_empty() => checks.push(Check::pass(
                "queue",
                format!(
                    "{} ({} task(s), integrity_check ok)",
                    db.display(),
                    counts.values().sum::<u64>()
                ),
            )),
            Ok((_, problems)) => checks.push(Check::fail(
                "queue",
                format!(
                    "{} fails integrity_check: {}",
                    db.display(),
                    problems
                        .iter()
                        .flat_map(|p| p.lines())
                        .find(|l| !l.starts_with("*** in database"))
                        .unwrap_or("damaged")
                ),
                recover,
            )),
            Err(e) if e.is_damage() => checks.push(Check::fail(
                "queue",
                format!("{} is damaged: {e}", db.display()),
                recover,
            )),
            Err(e) => checks.push(Check::fail(
                "queue",
                e.to_string(),
                "use the polyphony that wrote it, or check the file's permissions",
            )),
        }
    }

    // Usage limits per identity and agent (issue 14).
    if db.exists() {
        if let Ok(rows) = crate::store::Store::open(&db).and_then(|s| s.quota_rows()) {
            let now = chrono::Utc::now();
            checks.extend(rows.iter().map(|q| quota_check(q, now)));
        }
    }

    let running = crate::orchestrator::lock::DaemonLock::is_held(home);
    let pid = std::fs::read_to_string(home.join("daemon.lock")).ok();
    checks.push(daemon_check(
        running,
        pid.as_deref().map(str::trim).filter(|p| !p.is_empty()),
    ));

    checks.push(disk_check(
        "home",
        home,
        free_bytes(home)
            .as_ref()
            .map(|b| *b)
            .map_err(String::as_str),
    ));
    if let Some(config) = &config {
        let root = config.workspace_root();
        if !root.starts_with(home) {
            checks.push(disk_check(
                "workspace_root",
                root,
                free_bytes(root)
                    .as_ref()
                    .map(|b| *b)
                    .map_err(String::as_str),
            ));
        }
    }
    checks
}

/// Every image the config names, with who names it.
fn images_of(config: &Config) -> BTreeMap<String, String> {
    let mut images: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut add = |image: &str, by: String| {
        images.entry(image.to_string()).or_default().insert(by);
    };
    for agent in &config.agents {
        match &agent.image {
            Some(i) => add(i, format!("agent {}", agent.name)),
            None => add(
                &config.global.container.image,
                format!("agent {}", agent.name),
            ),
        }
    }
    if let Some(i) = &config.global.verify.image {
        add(i, "verify".into());
    }
    for r in &config.global.repos {
        if let Some(i) = &r.image {
            add(i, format!("repo {}", r.repo));
        }
        if let Some(i) = r.verify.as_ref().and_then(|v| v.image.as_ref()) {
            add(i, format!("verify of repo {}", r.repo));
        }
    }
    images
        .into_iter()
        .map(|(image, by)| (image, by.into_iter().collect::<Vec<_>>().join(", ")))
        .collect()
}

fn credential_checks(
    config: &Config,
    lookup: &(dyn Fn(&str) -> Option<String> + Sync),
    checks: &mut Vec<Check>,
) {
    for identity in &config.identities {
        for (agent_type, path) in &identity.volumes {
            checks.push(volume_check(
                &identity.name,
                agent_type,
                path,
                path.exists(),
            ));
            let Ok(t) = agent_type.parse::<crate::domain::AgentType>() else {
                continue;
            };
            if path.exists() {
                let staged: Vec<(String, bool)> = crate::identity::volume_mounts(identity, t)
                    .into_iter()
                    .map(|m| (m.host_path.display().to_string(), m.host_path.exists()))
                    .collect();
                checks.push(staged_files_check(&identity.name, agent_type, &staged));
            }
        }
        for (container_var, host_var) in &identity.api_keys {
            let set = lookup(host_var).is_some_and(|v| !v.is_empty());
            checks.push(api_key_check(&identity.name, container_var, host_var, set));
        }
    }
}

async fn github_checks(
    config: &Config,
    lookup: &(dyn Fn(&str) -> Option<String> + Sync),
    checks: &mut Vec<Check>,
) {
    let repos = &config.global.github.repos;
    // Identities sharing a token variable are checked once.
    let mut by_var: BTreeMap<Option<String>, Vec<String>> = BTreeMap::new();
    for identity in &config.identities {
        by_var
            .entry(identity.github_token_env.clone())
            .or_default()
            .push(identity.name.clone());
    }
    if by_var.is_empty() {
        by_var.insert(None, vec!["default".into()]);
    }
    let api_url = resolve_api_url(lookup);
    if let Err(e) = crate::sources::github::client::parse_api_url(&api_url) {
        checks.push(Check::fail(
            "GITHUB_API_URL",
            e.to_string(),
            "export GITHUB_API_URL=https://api.github.com (GitHub Enterprise: https://HOST/api/v3), or unset it",
        ));
        return;
    }
    let policy = FaultPolicy {
        max_rate_limit_wait: Duration::ZERO,
        max_rate_limit_retries: 0,
        max_server_retries: 1,
        request_timeout: Duration::from_secs(10),
        ..FaultPolicy::default()
    };
    let mut validated = BTreeSet::new();
    for (var, names) in by_var {
        let who = format!("identity {}", names.join(", "));
        let token = resolve_token(var.as_deref(), lookup);
        let found = token
            .as_ref()
            .map(|t| t.var.as_str())
            .map_err(|e| e.to_string());
        checks.push(token_presence_check(
            &who,
            found.as_deref().map_err(String::as_str),
            !repos.is_empty(),
        ));
        let Ok(token) = token else { continue };
        if repos.is_empty() || !validated.insert(token.var.clone()) {
            continue;
        }
        let var_name = token.var.clone();
        let client = match GithubClient::new(&api_url, token, policy.clone()) {
            Ok(c) => c,
            Err(e) => {
                checks.push(token_api_check(
                    &var_name,
                    "-",
                    &api_url,
                    Err(&e.to_string()),
                ));
                continue;
            }
        };
        for repo in repos {
            let answer = match RepoSlug::parse(repo) {
                Ok(slug) => client
                    .get_json::<serde_json::Value>(&format!("reading {slug}"), &slug.api_path())
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            checks.push(token_api_check(
                &var_name,
                repo,
                &api_url,
                answer.as_ref().map(|_| ()).map_err(String::as_str),
            ));
        }
    }
}

/// Bytes available to this user on the filesystem holding `path` (or its nearest existing
/// ancestor: a root that is not created yet lands there).
fn free_bytes(path: &Path) -> Result<u64, String> {
    let mut probe: PathBuf = path.to_path_buf();
    while !probe.exists() {
        match probe.parent() {
            Some(p) => probe = p.to_path_buf(),
            None => return Err(format!("no existing ancestor of {}", path.display())),
        }
    }
    let c = std::ffi::CString::new(probe.as_os_str().as_encoded_bytes())
        .map_err(|_| "path contains a NUL byte".to_string())?;
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `stat` a valid out-pointer.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut stat) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    Ok(stat.f_bavail as u64 * stat.f_frsize as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_checks() {
        use chrono::TimeZone;
        let now = chrono::Utc
            .with_ymd_and_hms(2026, 11, 30, 13, 0, 0)
            .unwrap();
        let mut q = crate::domain::AgentQuota {
            identity: "personal".into(),
            agent: "claude".into(),
            resets_at: now + chrono::Duration::minutes(65),
            reported: true,
            message: "usage limit: Claude AI usage limit reached|1796054700".into(),
            task_id: Some("local-1".into()),
            attempt: Some(1),
            hit_at: now,
        };
        let c = quota_check(&q, now);
        assert_eq!(
            (c.name.as_str(), c.level),
            ("quota claude@personal", Level::Warn)
        );
        assert_eq!(
            c.detail,
            "out until 2026-11-30 14:05 UTC (the CLI's reset time): usage limit: Claude AI usage limit reached|1796054700"
        );
        q.reported = false;
        assert!(quota_check(&q, now)
            .detail
            .contains("quota_default_cooldown"));
        q.resets_at = now;
        let c = quota_check(&q, now);
        assert_eq!(c.level, Level::Pass);
        assert_eq!(
            c.detail,
            "available (last limit ended 2026-11-30 13:00 UTC)"
        );
    }

    #[test]
    fn cli_versions() {
        let ok = |out: &str| Ok((Some(0), out.to_string()));
        let c = cli_version_check(
            "r:1",
            AgentType::Claude,
            "claude",
            ok("2.1.332 (Claude Code)\n"),
        );
        assert_eq!(c.level, Level::Pass, "{c:?}");
        assert!(c.detail.starts_with("2.1.332"), "{c:?}");
        let c = cli_version_check(
            "r:1",
            AgentType::Claude,
            "claude",
            ok("2.3.0 (Claude Code)"),
        );
        assert_eq!(c.level, Level::Warn, "{c:?}");
        assert!(c.detail.contains("outside the tested range"), "{c:?}");
        let c = cli_version_check(
            "r:1",
            AgentType::Claude,
            "claude",
            ok("1.0.3 (Claude Code)"),
        );
        assert_eq!(c.level, Level::Warn, "{c:?}");
        let c = cli_version_check("r:1", AgentType::Codex, "codex", ok("codex-cli 0.98.0"));
        assert_eq!(c.level, Level::Pass, "{c:?}");
        assert!(c.detail.contains("never run for real"), "{c:?}");
        let c = cli_version_check(
            "r:1",
            AgentType::Kimi,
            "kimi",
            ok("kimi, version 1.52.0\nkimi-cli is no longer maintained. Please use the new Kimi Code CLI."),
        );
        assert_eq!(c.level, Level::Warn, "{c:?}");
        let c = cli_version_check(
            "r:1",
            AgentType::Codex,
            "codex",
            Ok((Some(127), "exec: codex: not found".into())),
        );
        assert_eq!(c.level, Level::Warn, "{c:?}");
        assert!(
            c.fix.as_deref().is_some_and(|f| f.contains("codex")),
            "{c:?}"
        );
        let c = cli_version_check(
            "r:1",
            AgentType::Gemini,
            "gemini",
            Err("engine gone".into()),
        );
        assert_eq!(c.level, Level::Warn, "{c:?}");
    }

    fn check(c: Check, level: Level, detail_has: &str, fix_has: Option<&str>) {
        assert_eq!(c.level, level, "{c:?}");
        assert!(
            c.detail.contains(detail_has),
            "detail {:?} lacks {detail_has:?}",
            c.detail
        );
        match fix_has {
            Some(f) => assert!(
                c.fix.as_deref().is_some_and(|x| x.contains(f)),
                "fix of {c:?} lacks {f:?}"
            ),
            None => assert_eq!(c.fix, None),
        }
    }

    #[test]
    fn docker() {
        let v = EngineVersion {
            version: "20.10.24".into(),
            api_version: "1.41".into(),
            negotiated_api: "1.41".into(),
        };
        check(
            docker_check(Ok(&v)),
            Level::Pass,
            "engine 20.10.24 (API 1.41",
            None,
        );
        check(
            docker_check(Err("no socket")),
            Level::Fail,
            "no socket",
            Some("DOCKER_HOST"),
        );
    }

    #[test]
    fn images() {
        check(
            image_check("w:1", "agent claude", Ok(true)),
            Level::Pass,
            "agent claude",
            None,
        );
        check(
            image_check("w:1", "agent claude", Ok(false)),
            Level::Fail,
            "missing",
            Some("docker build -t w:1 images/worker"),
        );
        check(
            image_check("polyphony-test:latest", "x", Ok(false)),
            Level::Fail,
            "missing",
            Some("polyphony demo"),
        );
        check(
            image_check("w:1", "x", Err("down")),
            Level::Fail,
            "down",
            Some("docker check"),
        );
    }

    #[test]
    fn git_and_daemon() {
        check(
            git_check(Ok("git version 2.47.2\n")),
            Level::Pass,
            "git version 2.47.2",
            None,
        );
        check(
            git_check(Err("not found")),
            Level::Fail,
            "not found",
            Some("install git"),
        );
        check(
            daemon_check(true, Some("42")),
            Level::Pass,
            "running (pid 42)",
            None,
        );
        check(
            daemon_check(false, None),
            Level::Warn,
            "not running",
            Some("polyphony daemon"),
        );
    }

    #[test]
    fn disk_thresholds() {
        let p = Path::new("/h");
        check(
            disk_check("home", p, Ok(DISK_WARN_BYTES)),
            Level::Pass,
            "5.0 GiB free at /h",
            None,
        );
        check(
            disk_check("home", p, Ok(DISK_WARN_BYTES - 1)),
            Level::Warn,
            "free",
            Some("cleanup"),
        );
        check(
            disk_check("home", p, Ok(10)),
            Level::Fail,
            "10 B free",
            Some("cleanup"),
        );
        check(
            disk_check("home", p, Err("EACCES")),
            Level::Warn,
            "EACCES",
            Some("readable"),
        );
    }

    #[test]
    fn staged_files_are_named_and_none_is_a_warning() {
        let files = |present: bool| {
            vec![
                ("/h/.claude/.credentials.json".to_string(), present),
                ("/h/.claude.json".to_string(), false),
            ]
        };
        let ok = staged_files_check("me", "claude", &files(true));
        assert_eq!(ok.level, Level::Pass);
        assert_eq!(ok.detail, "/h/.claude/.credentials.json");
        let none = staged_files_check("me", "claude", &files(false));
        assert_eq!(none.level, Level::Warn);
        assert!(none
            .detail
            .contains("none of /h/.claude/.credentials.json, /h/.claude.json"));
        assert!(none.fix.unwrap().contains("whole_directory"));
    }

    #[test]
    fn credentials_never_show_values() {
        check(
            volume_check("personal", "claude", Path::new("/c"), true),
            Level::Pass,
            "/c",
            None,
        );
        check(
            volume_check("personal", "codex", Path::new("/x"), false),
            Level::Fail,
            "/x does not exist",
            Some("identities.yaml"),
        );
        check(
            api_key_check("work", "OPENAI_API_KEY", "WORK_KEY", true),
            Level::Pass,
            "$WORK_KEY (set)",
            None,
        );
        check(
            api_key_check("work", "OPENAI_API_KEY", "WORK_KEY", false),
            Level::Fail,
            "$WORK_KEY is not set",
            Some("export WORK_KEY"),
        );
    }

    #[test]
    fn token_checks() {
        check(
            token_presence_check("identity a", Ok("GH_TOKEN"), true),
            Level::Pass,
            "$GH_TOKEN is set",
            None,
        );
        check(
            token_presence_check("identity a", Ok("GH_TOKEN"), false),
            Level::Pass,
            "not validated",
            None,
        );
        check(
            token_presence_check("identity a", Err("no GitHub token found"), true),
            Level::Fail,
            "no GitHub token",
            Some("GITHUB_TOKEN"),
        );
        check(
            token_presence_check("identity a", Err("no GitHub token found"), false),
            Level::Warn,
            "no GitHub token",
            Some("only needed"),
        );
        check(
            token_api_check("GITHUB_TOKEN", "o/r", "http://x", Ok(())),
            Level::Pass,
            "valid",
            None,
        );
        check(
            token_api_check("GITHUB_TOKEN", "o/r", "http://x", Err("401")),
            Level::Fail,
            "401",
            Some("GITHUB_TOKEN"),
        );
    }

    #[test]
    fn render_and_verdict() {
        let ok = vec![
            Check::pass("git", "git version 2"),
            Check::warn("daemon", "not running", "start it"),
        ];
        assert_eq!(
            render(&ok),
            "✓ git: git version 2\n! daemon: not running\n    fix: start it\nready: 1 checks passed, 1 warning(s)\n"
        );
        assert!(passed(&ok));
        let bad = vec![Check::fail("docker", "down", "start it")];
        assert!(render(&bad).ends_with("not ready: 1 check(s) failed, 0 warning(s)\n"));
        assert!(!passed(&bad));
    }
}
