//! Bounds on config.yaml and agents.yaml values (issue 24): a value far outside any sane
//! range is a typo, refused at load with the bound and the fix rather than accepted
//! silently. The bounds are generous and listed in config-examples/config.yaml.
//!
//! Architecture Invariant: pure over the parsed and resolved values.

use std::time::Duration;

use super::locate::Seg::{self, Key};
use super::model::{GlobalConfig, MAX_STREAMS_LIMIT};
use super::{ConfigError, ConfigErrorKind, Doc, Resolved};

/// `max_concurrent_agents` at most.
pub const MAX_CONCURRENT_AGENTS: u32 = 1024;
/// Deadlines, timeouts and the poll interval at most: 30 days.
pub const MAX_DEADLINE: Duration = Duration::from_secs(30 * 24 * 3600);
/// `quota_default_cooldown` at most: 31 days (the longest monthly reset).
pub const MAX_COOLDOWN: Duration = Duration::from_secs(31 * 24 * 3600);
/// `max_body_bytes` at most: 16 MiB.
pub const MAX_BODY_BYTES: u64 = 16 * 1024 * 1024;
/// `container.max_workspace_size` at least: 1 MiB (a clone needs room).
pub const MIN_WORKSPACE_BYTES: u64 = 1024 * 1024;
/// `retention.workspaces` and `retention.events` at most: 10 years (`never` keeps forever).
pub const MAX_RETENTION: Duration = Duration::from_secs(3650 * 24 * 3600);
/// `retention.events` at least a day: a transcript goes by its last write, and a silent
/// agent's may not have been written for hours.
pub const MIN_RETENTION_EVENTS: Duration = Duration::from_secs(24 * 3600);
/// `retention.every` at least 10 s (each sweep walks the workspace root) and at most a day.
pub const MIN_RETENTION_EVERY: Duration = Duration::from_secs(10);
pub const MAX_RETENTION_EVERY: Duration = Duration::from_secs(24 * 3600);
/// GitHub's repository permissions, lowest first.
/// Bounds of `store.lease` and the smallest `store.heartbeat`.
pub const MIN_LEASE: Duration = Duration::from_secs(10);
pub const MAX_LEASE: Duration = Duration::from_secs(3600);
pub const MIN_HEARTBEAT: Duration = Duration::from_secs(1);
pub const PERMISSIONS: [&str; 5] = ["read", "triage", "write", "maintain", "admin"];

fn err(doc: &Doc<'_>, path: &[Seg<'_>], message: String, fix: String) -> ConfigError {
    doc.error(ConfigErrorKind::InvalidValue, path, None, message, fix)
}

/// Refuses a duration above `max`.
pub(super) fn duration_max(
    doc: &Doc<'_>,
    path: &[Seg<'_>],
    field: &str,
    value: Duration,
    max: Duration,
) -> Result<(), ConfigError> {
    if value <= max {
        return Ok(());
    }
    let days = max.as_secs() / 86_400;
    Err(err(
        doc,
        path,
        format!(
            "`{field}` is {}, above the bound of {days} days",
            humantime::format_duration(value)
        ),
        format!("set it to at most {days}d, e.g. 30m or 2h"),
    ))
}

/// Refuses a duration outside `min..=max`.
pub(super) fn duration_between(
    doc: &Doc<'_>,
    path: &[Seg<'_>],
    field: &str,
    value: Duration,
    min: Duration,
    max: Duration,
) -> Result<(), ConfigError> {
    if value < min {
        return Err(err(
            doc,
            path,
            format!(
                "`{field}` is {}, below the bound of {}",
                humantime::format_duration(value),
                humantime::format_duration(min)
            ),
            format!("set it to at least {}", humantime::format_duration(min)),
        ));
    }
    duration_max(doc, path, field, value, max)
}

/// Whether `name` can be an environment variable name.
fn env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The bounds over config.yaml, after `resolve_global` parsed its durations and sizes.
pub(super) fn check_global(
    g: &GlobalConfig,
    r: &Resolved,
    doc: &Doc<'_>,
) -> Result<(), ConfigError> {
    if g.max_concurrent_agents > MAX_CONCURRENT_AGENTS {
        return Err(err(
            doc,
            &[Key("max_concurrent_agents")],
            format!(
                "`max_concurrent_agents` is {}, above the bound of {MAX_CONCURRENT_AGENTS}",
                g.max_concurrent_agents
            ),
            format!(
                "set it to at most {MAX_CONCURRENT_AGENTS} (default 8; each agent is a container)"
            ),
        ));
    }
    if g.max_body_bytes > MAX_BODY_BYTES {
        return Err(err(
            doc,
            &[Key("max_body_bytes")],
            format!(
                "`max_body_bytes` is {}, above the bound of {MAX_BODY_BYTES} (16 MiB)",
                g.max_body_bytes
            ),
            format!("set it to at most {MAX_BODY_BYTES} (default 262144, 256 KiB)"),
        ));
    }
    for (path, field, value) in [
        (
            &[Key("poll_interval")][..],
            "poll_interval",
            r.poll_interval,
        ),
        (
            &[Key("event_idle_timeout")][..],
            "event_idle_timeout",
            r.event_idle_timeout,
        ),
        (
            &[Key("container"), Key("deadline")][..],
            "container.deadline",
            r.container_deadline,
        ),
        (
            &[Key("verify"), Key("timeout")][..],
            "verify.timeout",
            r.verify_timeout,
        ),
    ] {
        duration_max(doc, path, field, value, MAX_DEADLINE)?;
    }
    for (i, t) in r.repo_verify_timeouts.iter().enumerate() {
        if let Some(t) = t {
            duration_max(
                doc,
                &[Key("repos"), Seg::Item(i), Key("verify"), Key("timeout")],
                &format!("repos[{i}].verify.timeout"),
                *t,
                MAX_DEADLINE,
            )?;
        }
    }
    if let Some(machine) = g.store.machine.as_deref() {
        let ok = !machine.is_empty()
            && machine.len() <= 64
            && machine
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !ok {
            return Err(err(
                doc,
                &[Key("store"), Key("machine")],
                format!("`store.machine` is `{machine}`: not a machine id"),
                "use 1 to 64 letters, digits, `.`, `_` or `-` (e.g. build-3); unset, the host name is used"
                    .to_string(),
            ));
        }
    }
    // Leases (issue 27, docs/SCALING.md): long enough to ride out a slow store, short
    // enough that a lost machine's tasks move on; renewed at least three times a lease.
    let lease_path = &[Key("store"), Key("lease")][..];
    if r.lease < MIN_LEASE || r.lease > MAX_LEASE {
        return Err(err(
            doc,
            lease_path,
            format!(
                "`store.lease` is {}, outside the bounds of 10s to 1h",
                humantime::format_duration(r.lease)
            ),
            "set it between 10s and 1h (default 60s)".to_string(),
        ));
    }
    if r.heartbeat < MIN_HEARTBEAT || r.heartbeat * 3 > r.lease {
        return Err(err(
            doc,
            &[Key("store"), Key("heartbeat")],
            format!(
                "`store.heartbeat` is {}, outside 1s to a third of `store.lease` ({})",
                humantime::format_duration(r.heartbeat),
                humantime::format_duration(r.lease)
            ),
            "set it to at least 1s and at most a third of the lease (default 10s for the 60s lease)"
                .to_string(),
        ));
    }
    if let Ok(c) = super::values::parse_duration(&g.quota_default_cooldown) {
        duration_max(
            doc,
            &[Key("quota_default_cooldown")],
            "quota_default_cooldown",
            c,
            MAX_COOLDOWN,
        )?;
    }
    if r.max_workspace_bytes < MIN_WORKSPACE_BYTES {
        return Err(err(
            doc,
            &[Key("container"), Key("max_workspace_size")],
            format!(
                "`container.max_workspace_size` is {}, below the bound of 1m: no clone fits",
                g.container.max_workspace_size
            ),
            "set it to at least 1m (default 10g)".into(),
        ));
    }
    let mut commands = vec![
        (
            vec![Key("verify"), Key("test")],
            "verify.test".to_string(),
            g.verify.test.as_deref(),
        ),
        (
            vec![Key("verify"), Key("lint")],
            "verify.lint".into(),
            g.verify.lint.as_deref(),
        ),
        (
            vec![Key("verify"), Key("typecheck")],
            "verify.typecheck".into(),
            g.verify.typecheck.as_deref(),
        ),
    ];
    for (i, repo) in g.repos.iter().enumerate() {
        if let Some(v) = &repo.verify {
            for (name, value) in [
                ("test", &v.test),
                ("lint", &v.lint),
                ("typecheck", &v.typecheck),
            ] {
                commands.push((
                    vec![Key("repos"), Seg::Item(i), Key("verify"), Key(name)],
                    format!("repos[{i}].verify.{name}"),
                    value.as_deref(),
                ));
            }
        }
    }
    for (path, field, value) in &commands {
        if value.is_some_and(|v| v.trim().is_empty()) {
            return Err(err(
                doc,
                path,
                format!("`{field}` is empty: there is no command to run"),
                "give the command (e.g. `cargo test`), or remove the line to use the repository's .polyphony.yaml or none".into(),
            ));
        }
    }
    let s = &g.shepherd;
    if !PERMISSIONS.contains(&s.trusted_permission.to_ascii_lowercase().as_str()) {
        return Err(err(
            doc,
            &[Key("shepherd"), Key("trusted_permission")],
            format!(
                "`shepherd.trusted_permission` is `{}`, not a GitHub permission",
                s.trusted_permission
            ),
            format!("use one of {} (default write)", PERMISSIONS.join(", ")),
        ));
    }
    if s.trigger.trim().is_empty() || s.trigger.chars().any(char::is_control) {
        let why = if s.trigger.trim().is_empty() {
            "is empty: every comment would trigger"
        } else {
            "holds a newline or another control character"
        };
        return Err(err(
            doc,
            &[Key("shepherd"), Key("trigger")],
            format!("`shepherd.trigger` {why}"),
            "set it to one word on one line (default `/polyphony`)".into(),
        ));
    }
    if s.hold_label.trim().is_empty() || s.hold_label.chars().any(char::is_control) {
        return Err(err(
            doc,
            &[Key("shepherd"), Key("hold_label")],
            "`shepherd.hold_label` is empty or holds a newline".into(),
            "name the label on one line (default `polyphony-hold`), or remove the line".into(),
        ));
    }
    if !env_name(&g.http.token_env) {
        return Err(err(
            doc,
            &[Key("http"), Key("token_env")],
            format!("`http.token_env` `{}` is not an environment variable name", g.http.token_env),
            "name the variable holding the API token with letters, digits and `_`, e.g. POLYPHONY_HTTP_TOKEN (never the token itself)".into(),
        ));
    }
    for (field, value) in [
        ("max_streams", g.http.max_streams),
        ("max_streams_per_client", g.http.max_streams_per_client),
    ] {
        if !(1..=MAX_STREAMS_LIMIT).contains(&value) {
            return Err(err(
                doc,
                &[Key("http"), Key(field)],
                format!("`http.{field}` is {value}, outside 1..={MAX_STREAMS_LIMIT}"),
                format!(
                    "set it between 1 and {MAX_STREAMS_LIMIT} (defaults 128 and 16 per client)"
                ),
            ));
        }
    }
    Ok(())
}
