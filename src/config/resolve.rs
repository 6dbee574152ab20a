//! `config.yaml` resolved: paths expanded, durations, sizes, memory and network modes
//! parsed, and the global limits checked, each error pointing at its line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use globset::Glob;

use super::locate::Seg;
use super::{values, ConfigError, ConfigErrorKind, Doc, GlobalConfig, Resolved};
use crate::domain::{NetworkMode, ResourceLimits};

/// `store.lease` and `store.heartbeat` when unset (docs/SCALING.md).
pub(super) const DEFAULT_LEASE: &str = "60s";
pub(super) const DEFAULT_HEARTBEAT: &str = "10s";

pub(super) fn duration_at(
    doc: &Doc<'_>,
    path: &[Seg<'_>],
    field: &str,
    text: &str,
) -> Result<Duration, ConfigError> {
    values::parse_duration(text).map_err(|e| {
        doc.error(
            ConfigErrorKind::InvalidValue,
            path,
            None,
            format!("`{field}` is not a valid duration: {e}"),
            "write a duration with a unit, like 30s, 5m or 1h30m",
        )
    })
}

pub(super) fn memory_at(
    doc: &Doc<'_>,
    path: &[Seg<'_>],
    field: &str,
    text: &str,
) -> Result<i64, ConfigError> {
    values::parse_memory(text).map_err(|e| {
        doc.error(
            ConfigErrorKind::InvalidValue,
            path,
            None,
            format!("`{field}` is not a valid memory size: {e}"),
            "write a size with a unit, like 512m or 4g",
        )
    })
}

pub(super) fn size_at(
    doc: &Doc<'_>,
    path: &[Seg<'_>],
    field: &str,
    text: &str,
) -> Result<u64, ConfigError> {
    values::parse_size(text).map_err(|e| {
        doc.error(
            ConfigErrorKind::InvalidValue,
            path,
            None,
            format!("`{field}` is not a valid size: {e}"),
            "write a size with a unit, like 64m or 10g",
        )
    })
}

/// Docker's rule for network names: `[a-zA-Z0-9][a-zA-Z0-9_.-]*`. The predefined modes
/// are refused here so `network:host` cannot bypass the explicit `host` spelling.
fn is_docker_network_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        && !matches!(name, "bridge" | "none" | "host" | "default")
}

pub(super) fn network_at(
    doc: &Doc<'_>,
    path: &[Seg<'_>],
    field: &str,
    text: &str,
) -> Result<NetworkMode, ConfigError> {
    match text.trim() {
        "bridge" => Ok(NetworkMode::Bridge),
        "none" => Ok(NetworkMode::None),
        "host" => Ok(NetworkMode::Host),
        other => match other.strip_prefix("network:") {
            Some(name) if is_docker_network_name(name) => Ok(NetworkMode::Named(name.to_string())),
            _ => Err(doc.error(
                ConfigErrorKind::InvalidValue,
                path,
                None,
                format!("`{field}` is `{other}`, not a network mode"),
                "use bridge, none, host or network:NAME (a user-defined Docker network)",
            )),
        },
    }
}

pub(super) fn path_at(
    doc: &Doc<'_>,
    path: &[Seg<'_>],
    field: &str,
    text: &str,
    home: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<PathBuf, ConfigError> {
    values::expand_path(text, home, env).map_err(|e| {
        doc.error(
            ConfigErrorKind::InvalidValue,
            path,
            None,
            format!("`{field}` cannot be expanded: {e}"),
            "export the variable, or write an absolute path",
        )
    })
}

pub(super) fn resolve_global(
    home: &Path,
    g: &GlobalConfig,
    doc: &Doc<'_>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Resolved, ConfigError> {
    use Seg::Key;
    let workspace_root = path_at(
        doc,
        &[Key("workspace_root")],
        "workspace_root",
        &g.workspace_root,
        home,
        env,
    )?;
    let mirror_root = path_at(
        doc,
        &[Key("mirror_root")],
        "mirror_root",
        &g.mirror_root,
        home,
        env,
    )?;
    let poll_interval = duration_at(
        doc,
        &[Key("poll_interval")],
        "poll_interval",
        &g.poll_interval,
    )?;
    let lease = duration_at(
        doc,
        &[Key("store"), Key("lease")],
        "store.lease",
        g.store.lease.as_deref().unwrap_or(DEFAULT_LEASE),
    )?;
    let heartbeat = duration_at(
        doc,
        &[Key("store"), Key("heartbeat")],
        "store.heartbeat",
        g.store.heartbeat.as_deref().unwrap_or(DEFAULT_HEARTBEAT),
    )?;
    let event_idle_timeout = duration_at(
        doc,
        &[Key("event_idle_timeout")],
        "event_idle_timeout",
        &g.event_idle_timeout,
    )?;
    let container_deadline = duration_at(
        doc,
        &[Key("container"), Key("deadline")],
        "container.deadline",
        &g.container.deadline,
    )?;
    let verify_timeout = duration_at(
        doc,
        &[Key("verify"), Key("timeout")],
        "verify.timeout",
        &g.verify.timeout,
    )?;
    let max_file_bytes = values::parse_size(&g.verify.max_file_size).map_err(|e| {
        doc.error(
            ConfigErrorKind::InvalidValue,
            &[Key("verify"), Key("max_file_size")],
            None,
            format!("`verify.max_file_size` is not a valid size: {e}"),
            "write a size with a unit, like 512k or 10m",
        )
    })?;
    if g.verify.max_changed_files == 0 {
        return Err(doc.error(
            ConfigErrorKind::InvalidValue,
            &[Key("verify"), Key("max_changed_files")],
            None,
            "`verify.max_changed_files` is 0, which refuses every attempt".to_string(),
            "write the most files one attempt may change, like 50000",
        ));
    }
    let prompt_template = g
        .prompt_template
        .as_deref()
        .map(|p| {
            path_at(
                doc,
                &[Key("prompt_template")],
                "prompt_template",
                p,
                home,
                env,
            )
        })
        .transpose()?;
    let memory_bytes = memory_at(
        doc,
        &[Key("container"), Key("memory")],
        "container.memory",
        &g.container.memory,
    )?;
    let network = network_at(
        doc,
        &[Key("container"), Key("network")],
        "container.network",
        &g.container.network,
    )?;
    let max_output_bytes = size_at(
        doc,
        &[Key("container"), Key("max_output")],
        "container.max_output",
        &g.container.max_output,
    )?;
    let max_workspace_bytes = size_at(
        doc,
        &[Key("container"), Key("max_workspace_size")],
        "container.max_workspace_size",
        &g.container.max_workspace_size,
    )?;
    let max_cost = g.container.max_cost_usd_per_attempt;
    if !(max_cost.is_finite() && max_cost > 0.0) {
        return Err(doc.error(
            ConfigErrorKind::InvalidValue,
            &[Key("container"), Key("max_cost_usd_per_attempt")],
            None,
            format!("`container.max_cost_usd_per_attempt` is {max_cost}, not a positive number of dollars"),
            "set it to the most one attempt may cost, e.g. 100",
        ));
    }
    for (model, price) in &g.gateway.prices {
        if !price.is_valid() {
            return Err(doc.error(
                ConfigErrorKind::InvalidValue,
                &[Key("gateway"), Key("prices"), Key(model)],
                None,
                format!("`gateway.prices.{model}` has a price that is negative or not a number"),
                "give input, output (and optionally cache_write, cache_read) as USD per million tokens, e.g. {input: 3, output: 15}",
            ));
        }
    }

    let positive = |ok: bool, path: &[Seg<'_>], field: &str, fix: &str| {
        if ok {
            Ok(())
        } else {
            Err(doc.error(
                ConfigErrorKind::InvalidValue,
                path,
                None,
                format!("`{field}` must be at least 1"),
                fix,
            ))
        }
    };
    positive(
        g.max_concurrent_agents >= 1,
        &[Key("max_concurrent_agents")],
        "max_concurrent_agents",
        "set it to 1 or more (default 8)",
    )?;
    positive(
        g.max_body_bytes >= 1,
        &[Key("max_body_bytes")],
        "max_body_bytes",
        "set it to 1 or more (default 262144, 256 KiB)",
    )?;
    positive(
        g.max_attempts >= 1,
        &[Key("max_attempts")],
        "max_attempts",
        "set it to 1 or more (default 3)",
    )?;
    check_cpus_pids(
        doc,
        &[Key("container")],
        "container",
        Some(g.container.cpus),
        Some(g.container.pids_limit),
    )?;
    if let Some(user) = &g.container.user {
        if let Err(why) = parse_user(user) {
            return Err(doc.error(
                ConfigErrorKind::InvalidValue,
                &[Key("container"), Key("user")],
                None,
                format!("`container.user` is `{user}`, not `uid` or `uid:gid`: {why}"),
                "use numeric ids like 1000:1000, or remove it to run as the daemon's own user",
            ));
        }
    }
    for (field, value) in [
        ("ready_label", &g.github.ready_label),
        ("claimed_label", &g.github.claimed_label),
        ("landed_label", &g.github.landed_label),
        ("blocked_label", &g.github.blocked_label),
    ] {
        if value.trim().is_empty() {
            return Err(doc.error(
                ConfigErrorKind::InvalidValue,
                &[Key("github"), Key(field)],
                None,
                format!("`github.{field}` is empty"),
                "give the label a name, or remove the line for the default",
            ));
        }
    }
    for (i, repo) in g.github.repos.iter().enumerate() {
        let parts: Vec<&str> = repo.split('/').collect();
        if parts.len() != 2 || parts.iter().any(|p| p.is_empty()) {
            return Err(doc.error(
                ConfigErrorKind::InvalidValue,
                &[Key("github"), Key("repos"), Seg::Item(i)],
                Some(repo),
                format!("`github.repos` entry `{repo}` is not `owner/name`"),
                "write it as owner/name, e.g. acme/widgets",
            ));
        }
    }

    let mut repo_globs = Vec::new();
    let mut repo_verify_timeouts = Vec::new();
    for (i, r) in g.repos.iter().enumerate() {
        let at = [Key("repos"), Seg::Item(i), Key("repo")];
        let glob = Glob::new(&r.repo).map_err(|e| {
            doc.error(
                ConfigErrorKind::InvalidValue,
                &at,
                None,
                format!("`repos[{i}].repo` is not a valid glob: {e}"),
                "use a glob like acme/* or **/widgets",
            )
        })?;
        repo_globs.push(glob.compile_matcher());
        let timeout = r
            .verify
            .as_ref()
            .and_then(|v| v.timeout.as_deref())
            .map(|t| {
                duration_at(
                    doc,
                    &[Key("repos"), Seg::Item(i), Key("verify"), Key("timeout")],
                    "verify.timeout",
                    t,
                )
            })
            .transpose()?;
        repo_verify_timeouts.push(timeout);
    }

    Ok(Resolved {
        workspace_root,
        mirror_root,
        poll_interval,
        lease,
        heartbeat,
        event_idle_timeout,
        container_deadline,
        verify_timeout,
        max_file_bytes,
        prompt_template,
        limits: ResourceLimits {
            memory_bytes,
            cpus: g.container.cpus,
            pids: g.container.pids_limit,
            cap_drop_all: true,
            no_new_privileges: true,
            init: true,
            user: g.container.user.clone(),
        },
        network,
        max_output_bytes,
        max_workspace_bytes,
        repo_globs,
        repo_verify_timeouts,
        files: BTreeMap::new(),
    })
}

/// The uid and optional gid of a `user: uid[:gid]` setting, each a number that fits a
/// 32-bit id (`00` and `000:0` are uid 0, root), or why not.
pub(crate) fn parse_user(user: &str) -> Result<(u32, Option<u32>), String> {
    let id = |part: &str, what: &str| -> Result<u32, String> {
        if part.is_empty() || !part.chars().all(|c| c.is_ascii_digit()) {
            return Err(format!("the {what} `{part}` is not a number"));
        }
        part.parse::<u32>()
            .map_err(|_| format!("the {what} `{part}` is above the largest id, 4294967295"))
    };
    let mut parts = user.split(':');
    let uid = id(parts.next().unwrap_or(""), "uid")?;
    let gid = parts.next().map(|g| id(g, "gid")).transpose()?;
    if parts.next().is_some() {
        return Err("it has more than one `:`".into());
    }
    Ok((uid, gid))
}

pub(super) fn check_cpus_pids(
    doc: &Doc<'_>,
    base: &[Seg<'_>],
    section: &str,
    cpus: Option<f64>,
    pids: Option<i64>,
) -> Result<(), ConfigError> {
    if let Some(c) = cpus {
        if !(c > 0.0 && c.is_finite()) {
            let path: Vec<Seg<'_>> = base.iter().copied().chain([Seg::Key("cpus")]).collect();
            let problem = if c.is_nan() {
                "is not a number".to_string()
            } else {
                format!("is {c}; it must be above 0")
            };
            return Err(doc.error(
                ConfigErrorKind::InvalidValue,
                &path,
                None,
                format!("`{section}.cpus` {problem}"),
                "set cpus to a positive number such as 2 or 0.5",
            ));
        }
    }
    if let Some(p) = pids {
        if p < 1 {
            let path: Vec<Seg<'_>> = base
                .iter()
                .copied()
                .chain([Seg::Key("pids_limit")])
                .collect();
            return Err(doc.error(
                ConfigErrorKind::InvalidValue,
                &path,
                None,
                format!("`{section}.pids_limit` is {p}; it must be at least 1"),
                "set pids_limit to a positive number such as 512",
            ));
        }
    }
    Ok(())
}
