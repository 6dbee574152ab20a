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
