//! The pure check builders of `doctor`: one fact in, one [`Check`] out (table-tested in
//! `doctor`'s tests).

use std::path::Path;

use super::{Check, DISK_FAIL_BYTES, DISK_WARN_BYTES};
use crate::domain::AgentType;
use crate::runtime::test_image::TEST_IMAGE_REPO;
use crate::runtime::EngineVersion;

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

/// Proxy images of other binaries past which `doctor` suggests `cleanup --images`.
pub const PROXY_IMAGES_WARN: usize = 3;

/// The egress proxy images on the engine (`runtime::proxy_image`): one per polyphony
/// binary that ran an `allowlist` attempt, so each upgrade leaves one behind. Warns once
/// [`PROXY_IMAGES_WARN`] or more are other binaries' (`current` is this binary's tag).
pub fn proxy_images_check(
    images: &[crate::runtime::proxy_image::ImageFact],
    current: Option<&str>,
) -> Check {
    let name = "egress proxy images";
    let others: Vec<_> = images.iter().filter(|i| !i.is(current)).collect();
    let bytes: u64 = others.iter().map(|i| i.bytes).sum();
    let ours = if images.len() > others.len() {
        "this binary's is built"
    } else {
        "this binary's is built at its first `allowlist` attempt"
    };
    if others.len() >= PROXY_IMAGES_WARN {
        Check::warn(
            name,
            format!(
                "{} image(s) of other polyphony binaries take {} ({ours})",
                others.len(),
                crate::ops::report::human_bytes(bytes)
            ),
            "`polyphony cleanup --images` removes them (one a container uses is kept)",
        )
    } else {
        Check::pass(
            name,
            format!(
                "{} image(s) of other polyphony binaries ({ours})",
                others.len()
            ),
        )
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

/// A Docker network the config names (`network:NAME`), and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkUse {
    /// The network's name in the engine.
    pub network: String,
    /// Who names it: file, entry and field (`agents.yaml: agent `claude`, field `network``).
    pub named_by: String,
    /// The other way out when the network should not exist (`remove `network:` …`).
    pub instead: String,
}

/// `present`: `Ok(true)` found, `Ok(false)` missing, `Err` the engine's answer. A missing
/// network fails every attempt that uses it when its container is created.
pub fn network_check(used: &NetworkUse, present: Result<bool, &str>) -> Check {
    let name = format!("network {}", used.network);
    match present {
        Ok(true) => Check::pass(name, format!("present ({})", used.named_by)),
        Ok(false) => Check::fail(
            name,
            format!(
                "{}: Docker network `{}` does not exist, so every attempt that uses it fails \
                 when its container is created",
                used.named_by, used.network
            ),
            format!(
                "`docker network create {}`, or {}",
                used.network, used.instead
            ),
        ),
        Err(e) => Check::fail(
            name,
            format!("cannot ask the engine ({}): {e}", used.named_by),
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
        crate::ops::report::human_bytes(free),
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

/// The disk the home uses and the retention that bounds it (issue 24): a warning when
/// finished workspaces are kept forever.
pub fn disk_used_check(
    used: &crate::store::DiskUsage,
    retention: &crate::config::retention::RetentionSettings,
) -> Check {
    let name = "disk used";
    let keep = |d: Option<std::time::Duration>| {
        d.map_or("never".to_string(), |d| {
            humantime::format_duration(d).to_string()
        })
    };
    let detail = format!(
        "{}; finished workspaces removed after: {}, events and transcripts after: {}",
        crate::ops::retention::disk_line(used),
        keep(retention.workspaces.filter(|_| retention.every.is_some())),
        keep(retention.events.filter(|_| retention.every.is_some())),
    );
    if retention.every.is_none() || retention.workspaces.is_none() {
        Check::warn(
            name,
            detail,
            "finished workspaces stay until `polyphony cleanup`: set `retention.workspaces` \
             (e.g. 24h) and `retention.every` (e.g. 1h) in config.yaml",
        )
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

/// Whether an identity's model credential for `agent_type` goes through the model-API
/// gateway (issue 26): `Err(why)` names what keeps the real credential in the container.
pub fn gateway_check(identity: &str, agent_type: &str, protected: Result<String, String>) -> Check {
    let name = format!("identity {identity}: {agent_type} gateway");
    match protected {
        Ok(var) => Check::pass(
            name,
            format!("{var} goes through the model-API gateway; the container holds a placeholder"),
        ),
        Err(why) => Check::warn(
            name,
            format!("identity `{identity}` is not gateway-protected for {agent_type}: {why}"),
            "docs/agents.md \"The model-API gateway\" lists what each CLI needs",
        ),
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

/// One (identity, agent)'s usage limit: out until its reset (a warning: tasks take the
/// next agent of their chain or wait), or available again.
pub fn quota_check(q: &crate::domain::AgentQuota, now: chrono::DateTime<chrono::Utc>) -> Check {
    let name = format!("quota {}@{}", q.agent, q.identity);
    use crate::domain::when;
    if q.is_out(now) {
        Check::warn(
            name,
            format!(
                "out until {} ({}; {}): {}",
                when::clock(q.resets_at, now),
                when::relative(q.resets_at, now),
                if q.reported {
                    "the CLI's reset time"
                } else {
                    "no reset time given: quota_default_cooldown"
                },
                when::message_text(&q.message, now)
            ),
            "nothing to do: tasks skip it (next agent of their chain, or they wait) and use it again after the reset",
        )
    } else {
        Check::pass(
            name,
            format!(
                "available (last limit ended {})",
                when::human(q.resets_at, now)
            ),
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
         images/real/build.sh has the real Claude Code and Codex offline), set the profile's \
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
    if let Some((marker, fix)) = crate::agents::descriptor(agent).version_stub {
        if output.contains(marker) {
            return Check::warn(
                name,
                format!("{line}: a deprecation stub that runs no task"),
                fix,
            );
        }
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
    match crate::agents::descriptor(agent).tested_versions {
        Some((low, high)) if (low..=high).contains(&version) => {
            Check::pass(name, format!("{shown} (tested range {} to {})", show(low), show(high)))
        }
        Some((low, high)) => Check::warn(
            name,
            format!("{shown} is outside the tested range ({} to {}): its stream format may differ", show(low), show(high)),
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

#[cfg(test)]
mod gateway_tests {
    use super::*;
    use crate::ops::doctor::Level;

    #[test]
    fn gateway_protection_is_a_pass_or_a_warning_naming_why() {
        let c = gateway_check("work", "claude", Ok("ANTHROPIC_API_KEY".into()));
        assert_eq!(c.level, Level::Pass);
        assert!(c.detail.contains("placeholder"), "{}", c.detail);
        let why = crate::orchestrator::gateway_plan::Unprotected::LoginFilesOnly
            .explain(crate::domain::AgentType::Claude);
        let c = gateway_check("sub", "claude", Err(why));
        assert_eq!(c.level, Level::Warn);
        assert!(
            c.detail.contains("not gateway-protected") && c.detail.contains("claude setup-token"),
            "{}",
            c.detail
        );
    }
}
