//! The IO shell of `doctor`: reads the config, asks Docker, git, the filesystem, the
//! environment and GitHub, and hands each fact to a pure builder in `checks.rs`.
//! Must not: create anything in the home, or stop at the first problem.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use super::checks::*;
use super::Check;
use crate::config::Config;
use crate::domain::AgentType;
use crate::runtime::test_image::TEST_IMAGE_REPO;
use crate::runtime::DockerRuntime;
use crate::sources::github::client::{resolve_api_url, resolve_token, FaultPolicy, GithubClient};
use crate::sources::github::RepoSlug;
/// For each image the agents run in, the agent types and commands that run there.
fn clis_of(config: &Config) -> BTreeMap<String, BTreeSet<(AgentType, String)>> {
    let mut out: BTreeMap<String, BTreeSet<(AgentType, String)>> = BTreeMap::new();
    for agent in config.agents() {
        let image = agent
            .image
            .clone()
            .unwrap_or_else(|| config.global().container.image.clone());
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
    use crate::orchestrator::execute::run_check;
    use crate::runtime::{ContainerSpec, Role};
    let spec = ContainerSpec::new(
        format!("polyphony-doctor-{}-{n}", std::process::id()),
        image,
        vec![cli.to_string(), "--version".to_string()],
    )
    .labels_for("doctor", 0, &crate::runtime::home_label(home), Role::Verify)
    .network(crate::domain::NetworkMode::None)
    .limits(crate::domain::ResourceLimits::default(), user);
    let no_scrub = |s: &str| s.to_string();
    run_check(
        rt,
        &spec,
        Duration::from_secs(60),
        &no_scrub,
        chrono::Utc::now(),
    )
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

    match crate::workspace::probe::git_version() {
        Ok(version) => checks.push(git_check(Ok(&version))),
        Err(e) => checks.push(git_check(Err(&e))),
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

    if let Some(rt) = &runtime {
        if let Ok(images) = rt.proxy_images().await {
            let current = crate::runtime::proxy_image::current_tag();
            checks.push(proxy_images_check(&images, current.as_deref()));
        }
    }
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
        for used in networks_of(config) {
            let present = match &runtime {
                Some(rt) => rt
                    .network_present(&used.network)
                    .await
                    .map_err(|e| e.to_string()),
                None => Err("the engine is unreachable".to_string()),
            };
            checks.push(network_check(
                &used,
                present.as_ref().map(|b| *b).map_err(String::as_str),
            ));
        }
        for item in config.unsafe_settings() {
            checks.push(unsafe_check(item));
        }
        // The CLI versions inside each present image (the offline test image holds fakes).
        if let Some(rt) = &runtime {
            let user = config
                .global()
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

    // Where the queue lives (issue 27); the file checks below are SQLite's.
    let handle = match crate::store::StoreHandle::for_home(home) {
        Ok(h) => h,
        Err(e) => {
            checks.push(Check::fail(
                "queue",
                e.to_string(),
                "fix `store.url` in config.yaml or POLYPHONY_STORE_URL",
            ));
            crate::store::StoreHandle::sqlite(crate::config::db_path(home))
        }
    };
    if handle.sqlite_path().is_none() {
        checks.extend(postgres_checks(&handle));
    }
    let db = handle
        .sqlite_path()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    if handle.sqlite_path().is_some() && db.exists() {
        // `integrity_check` reads every page (issue 12: a damaged file looked healthy).
        let checked = handle.open().and_then(|s| {
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
    if handle.exists() {
        if let Ok(rows) = handle.open().and_then(|s| s.quota_rows()) {
            let now = chrono::Utc::now();
            checks.extend(rows.iter().map(|q| quota_check(q, now)));
        }
    }

    let running = crate::home::DaemonLock::is_held(home);
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
    if let Some(config) = &config {
        // What the home takes (issue 24), measured now, beside the retention that bounds it.
        let used = crate::ops::retention::measure(config, chrono::Utc::now());
        checks.push(disk_used_check(&used, &config.retention()));
    }
    checks
}

/// Every Docker network the config names (`network:NAME`) where it is used: an agent
/// profile's `network` (it applies only under `egress: open`; `config` refuses it under
/// the other modes), the `container.network` such a profile inherits, and
/// `egress.outbound_network` (the proxies' way out, under `allowlist`).
pub fn networks_of(config: &Config) -> Vec<NetworkUse> {
    use crate::domain::{EgressMode, NetworkMode};
    let mut out: Vec<NetworkUse> = Vec::new();
    let default = config.default_network();
    for a in config.agents() {
        let NetworkMode::Named(name) = &a.network else {
            continue;
        };
        if a.egress.mode != EgressMode::Open {
            continue;
        }
        let inherited = a.network == *default;
        out.push(NetworkUse {
            network: name.clone(),
            named_by: if inherited {
                format!(
                    "agents.yaml: agent `{}` (egress open), field `network`, or config.yaml \
                     `container.network` it defaults to",
                    a.name
                )
            } else {
                format!(
                    "agents.yaml: agent `{}` (egress open), field `network`",
                    a.name
                )
            },
            instead: format!(
                "remove `network: network:{name}` (a profile's `network` applies only under \
                 `egress: open`; without it the agent gets Docker's bridge, or set its `egress` \
                 to allowlist for a network and proxy of its own)"
            ),
        });
    }
    let outbound = config.global().egress.outbound_network.trim();
    if let Some(name) = outbound.strip_prefix("network:") {
        let used = config
            .agents()
            .iter()
            .any(|a| a.egress.mode == EgressMode::Allowlist);
        if used {
            out.push(NetworkUse {
                network: name.trim().to_string(),
                named_by: "config.yaml: field `egress.outbound_network` (the egress proxies' way \
                           out)"
                    .into(),
                instead: "set `egress.outbound_network: bridge`".into(),
            });
        }
    }
    out
}

/// A PostgreSQL store (issue 27): the server answers and is a version this store supports,
/// its durability settings, and every table of the store reads back.
fn postgres_checks(handle: &crate::store::StoreHandle) -> Vec<Check> {
    let fix_connect = "check `store.url` / POLYPHONY_STORE_URL (host, port, user, database), \
                       PGPASSWORD, and that the server accepts this machine (pg_hba.conf)";
    let store = match handle.open() {
        Ok(s) => s,
        Err(e) => return vec![Check::fail("queue", e.to_string(), fix_connect)],
    };
    let mut checks = Vec::new();
    match store.server_version() {
        Ok(Some((version, true))) => checks.push(Check::pass(
            "postgresql",
            format!("{handle}: PostgreSQL {version}"),
        )),
        Ok(Some((version, false))) => checks.push(Check::fail(
            "postgresql",
            format!("{handle}: PostgreSQL {version} is older than 12"),
            "upgrade the server to PostgreSQL 12 or newer",
        )),
        Ok(None) => {}
        Err(e) => checks.push(Check::fail("postgresql", e.to_string(), fix_connect)),
    }
    if let Ok(settings) = store.server_settings() {
        let off: Vec<&str> = settings
            .iter()
            .filter(|(name, value)| {
                matches!(
                    name.as_str(),
                    "fsync" | "full_page_writes" | "synchronous_commit"
                ) && value == "off"
            })
            .map(|(name, _)| name.as_str())
            .collect();
        let shown: Vec<String> = settings.iter().map(|(n, v)| format!("{n}={v}")).collect();
        if off.is_empty() {
            checks.push(Check::pass("postgresql settings", shown.join(", ")));
        } else {
            checks.push(Check::warn(
                "postgresql settings",
                format!("{} (off: {})", shown.join(", "), off.join(", ")),
                "with these off a server crash can lose committed claims and landings: turn them on \
                 in postgresql.conf for a fleet's queue",
            ));
        }
    }
    let checked = store
        .check_integrity(true)
        .and_then(|problems| Ok((store.count_by_state()?, store.schema_version()?, problems)));
    match checked {
        Ok((counts, version, problems)) if problems.is_empty() => checks.push(Check::pass(
            "queue",
            format!(
                "{handle} (schema {version}, {} task(s), every table reads)",
                counts.values().sum::<u64>()
            ),
        )),
        Ok((_, _, problems)) => checks.push(Check::fail(
            "queue",
            format!("{handle}: {}", problems.join("; ")),
            "restore the database from its pg_dump, or drop it and let polyphony create it again",
        )),
        Err(e) => checks.push(Check::fail("queue", e.to_string(), fix_connect)),
    }
    checks
}

/// Every image the config names, with who names it.
fn images_of(config: &Config) -> BTreeMap<String, String> {
    let mut images: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut add = |image: &str, by: String| {
        images.entry(image.to_string()).or_default().insert(by);
    };
    for agent in config.agents() {
        match &agent.image {
            Some(i) => add(i, format!("agent {}", agent.name)),
            None => add(
                &config.global().container.image,
                format!("agent {}", agent.name),
            ),
        }
    }
    if let Some(i) = &config.global().verify.image {
        add(i, "verify".into());
    }
    for r in &config.global().repos {
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
    for identity in config.identities() {
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
        // Issue 26: which of its CLIs keep their real credential out of the container.
        let overlay = crate::identity::env_overlay(identity);
        for t in crate::domain::AgentType::ALL {
            let has_key = crate::orchestrator::gateway_plan::credential_vars(t)
                .iter()
                .any(|(n, _)| identity.api_keys.contains_key(*n));
            if !has_key && !identity.volumes.contains_key(t.as_str()) {
                continue;
            }
            let mounts = crate::identity::volume_mounts(identity, t);
            let protected = if !config.gateway().enabled {
                Err(
                    "gateway.enabled is false in config.yaml: its key goes into the container"
                        .to_string(),
                )
            } else {
                crate::orchestrator::gateway_plan::plan(t, &overlay, &mounts)
                    .map(|p| p.credential_var)
                    .map_err(|u| u.explain(t))
            };
            checks.push(gateway_check(&identity.name, t.as_str(), protected));
        }
    }
}

async fn github_checks(
    config: &Config,
    lookup: &(dyn Fn(&str) -> Option<String> + Sync),
    checks: &mut Vec<Check>,
) {
    let repos = &config.global().github.repos;
    // Identities sharing a token variable are checked once.
    let mut by_var: BTreeMap<Option<String>, Vec<String>> = BTreeMap::new();
    for identity in config.identities() {
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

/// Bytes available where `path` lives (`workspace::disk`, the figure attempts are held to).
fn free_bytes(path: &Path) -> Result<u64, String> {
    crate::workspace::disk::free_space(path).map_err(|e| e.to_string())
}
