//! RunSpec building (spec §3.4): task + decision + identity + profile + config -> the
//! immutable specification of one attempt.
//!
//! Precedence, one place: image = repo override > profile > `container.image`;
//! verify image = repo `verify.image` > `verify.image` > the agent image; deadline and idle
//! timeout = profile > global; limits = profile > `container`; verification commands =
//! `.polyphony.yaml` on the base ref > repo override > global `verify`, field by field.
//! Repo overrides are the first `repos:` entry whose glob matches the task's repo.
//!
//! Pure: the caller reads `.polyphony.yaml` from the BASE ref (never the agent's branch)
//! and passes its text through [`verification_from_polyphony_yaml`]. A RunSpec carries no
//! secret values: the env overlay names host variables.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

use super::rules::{repo_globset, repo_keys, RouteDecision};
use crate::config::model::{GlobalConfig, RepoConfig, VerifyConfig};
use crate::domain::{AgentProfile, EgressSpec, ResourceLimits, RunSpec, Task, VerifyCommand};
use crate::identity::Brokered;

/// Everything a RunSpec is built from.
#[derive(Debug, Clone)]
pub struct RunSpecInputs<'a> {
    pub task: &'a Task,
    pub decision: &'a RouteDecision,
    /// The profile of the agent this attempt runs (the decision's agent or a fallback).
    pub profile: &'a AgentProfile,
    pub identity: &'a Brokered,
    pub global: &'a GlobalConfig,
    /// 1-based.
    pub attempt: u32,
    pub workspace: PathBuf,
    pub branch: String,
    /// `.polyphony.yaml` from the base ref, already parsed.
    pub project_verify: Option<&'a ProjectVerify>,
}

/// `.polyphony.yaml`: the project's own verification commands.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProjectVerify {
    pub test: Option<String>,
    pub lint: Option<String>,
    pub typecheck: Option<String>,
    /// Per-check limit, e.g. `15m`.
    pub timeout: Option<String>,
}

/// A RunSpec that cannot be built from the configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunSpecError {
    #[error("{field}: `{value}` is not a duration (use e.g. `30s`, `10m`, `1h30m`)")]
    BadDuration { field: String, value: String },
    #[error("{field}: `{value}` is not a memory size (use e.g. `512m`, `4g`)")]
    BadMemory { field: String, value: String },
    #[error("{field}: must be greater than zero")]
    Zero { field: String },
    #[error(".polyphony.yaml: {0}")]
    ProjectFile(String),
}

/// Parses `.polyphony.yaml` (keys `test`, `lint`, `typecheck`, `timeout`).
pub fn verification_from_polyphony_yaml(text: &str) -> Result<ProjectVerify, RunSpecError> {
    if text.trim().is_empty() {
        return Ok(ProjectVerify::default());
    }
    let v: ProjectVerify = serde_yaml::from_str(text).map_err(|e| {
        let at = e
            .location()
            .map(|l| format!("line {}: ", l.line()))
            .unwrap_or_default();
        RunSpecError::ProjectFile(format!(
            "{at}{e} (expected keys: test, lint, typecheck, timeout)"
        ))
    })?;
    if let Some(t) = &v.timeout {
        parse_duration(".polyphony.yaml timeout", t)?;
    }
    Ok(v)
}

/// Parses a humantime duration (`30s`, `5m`, `1h30m`) into whole seconds (> 0).
pub fn parse_duration(field: &str, value: &str) -> Result<u64, RunSpecError> {
    let d: Duration =
        humantime::parse_duration(value.trim()).map_err(|_| RunSpecError::BadDuration {
            field: field.into(),
            value: value.into(),
        })?;
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    if secs == 0 {
        return Err(RunSpecError::Zero {
            field: field.into(),
        });
    }
    Ok(secs)
}

/// Parses a Docker-style memory size into bytes: a number with an optional unit
/// `b`, `k`, `m`, `g`, `t` (also `kb`/`kib`…, case-insensitive), binary multiples
/// (`4g` = 4 GiB, as `docker run -m`). Fractions are allowed (`1.5g`).
pub fn parse_memory(field: &str, value: &str) -> Result<i64, RunSpecError> {
    let bad = || RunSpecError::BadMemory {
        field: field.into(),
        value: value.into(),
    };
    let v = value.trim().to_ascii_lowercase();
    let split = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let num: f64 = num.parse().map_err(|_| bad())?;
    let mult: f64 = match unit.trim() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return Err(bad()),
    };
    let bytes = (num * mult).round();
    if !bytes.is_finite() || bytes < 1.0 || bytes > i64::MAX as f64 {
        return Err(bad());
    }
    Ok(bytes as i64)
}

/// The first `repos:` entry whose glob matches `repo`.
pub fn repo_override<'a>(repos: &'a [RepoConfig], repo: &str) -> Option<&'a RepoConfig> {
    let keys = repo_keys(repo);
    repos.iter().find(|r| {
        repo_globset(std::slice::from_ref(&r.repo))
            .map(|set| keys.iter().any(|k| set.is_match(k)))
            .unwrap_or(false)
    })
}

/// Verification commands: project file > repo override > global, field by field; the
/// timeout likewise. Checks with no command are left out.
pub fn verification_commands(
    global: &VerifyConfig,
    repo: Option<&RepoConfig>,
    project: Option<&ProjectVerify>,
) -> Result<Vec<VerifyCommand>, RunSpecError> {
    let ov = repo.and_then(|r| r.verify.as_ref());
    let pick = |p: Option<&Option<String>>, r: Option<&Option<String>>, g: &Option<String>| {
        p.and_then(|v| v.clone())
            .or_else(|| r.and_then(|v| v.clone()))
            .or_else(|| g.clone())
            .filter(|c| !c.trim().is_empty())
    };
    let (timeout, field) = match (
        project.and_then(|p| p.timeout.as_ref()),
        ov.and_then(|o| o.timeout.as_ref()),
    ) {
        (Some(t), _) => (t.clone(), ".polyphony.yaml timeout"),
        (None, Some(t)) => (t.clone(), "repos[].verify.timeout"),
        (None, None) => (global.timeout.clone(), "verify.timeout"),
    };
    let timeout_seconds = parse_duration(field, &timeout)?;
    let checks = [
        (
            "test",
            pick(project.map(|p| &p.test), ov.map(|o| &o.test), &global.test),
        ),
        (
            "lint",
            pick(project.map(|p| &p.lint), ov.map(|o| &o.lint), &global.lint),
        ),
        (
            "typecheck",
            pick(
                project.map(|p| &p.typecheck),
                ov.map(|o| &o.typecheck),
                &global.typecheck,
            ),
        ),
    ];
    Ok(checks
        .into_iter()
        .filter_map(|(name, cmd)| {
            cmd.map(|command| VerifyCommand {
                name: name.into(),
                command,
                timeout_seconds,
            })
        })
        .collect())
}

/// Resource limits from the global `container` section (hardening on).
pub fn container_limits(global: &GlobalConfig) -> Result<ResourceLimits, RunSpecError> {
    let c = &global.container;
    Ok(ResourceLimits {
        memory_bytes: parse_memory("container.memory", &c.memory)?,
        cpus: c.cpus,
        pids: c.pids_limit,
        cap_drop_all: true,
        no_new_privileges: true,
        init: true,
        user: c.user.clone(),
    })
}

/// The attempt's egress: the profile's mode and the whole allowlist — the agent type's
/// model API hosts, then config.yaml's `egress.allow`, the profile's and the repository's,
/// each entry once — with config.yaml's pins, outbound network and caps. The entries were
/// checked when the config loaded.
pub fn egress_spec(
    global: &GlobalConfig,
    profile: &AgentProfile,
    repo: Option<&RepoConfig>,
) -> Result<EgressSpec, RunSpecError> {
    let g = &global.egress;
    let mut allow: Vec<String> = Vec::new();
    let defaults = crate::agents::descriptor(profile.agent_type)
        .api_hosts
        .iter()
        .map(|e| e.to_string());
    let repo_allow = repo
        .and_then(|r| r.egress.as_ref())
        .map(|e| e.allow.clone())
        .unwrap_or_default();
    for entry in defaults
        .chain(g.allow.iter().cloned())
        .chain(profile.egress.allow.iter().cloned())
        .chain(repo_allow)
    {
        if !allow.contains(&entry) {
            allow.push(entry);
        }
    }
    let outbound = g.outbound_network.trim();
    let max_bytes =
        crate::config::values::parse_size(&g.max_bytes).map_err(|_| RunSpecError::BadMemory {
            field: "egress.max_bytes".into(),
            value: g.max_bytes.clone(),
        })?;
    Ok(EgressSpec {
        mode: profile.egress.mode,
        allow,
        pins: g.hosts.clone(),
        outbound_network: outbound
            .strip_prefix("network:")
            .unwrap_or(outbound)
            .to_string(),
        max_connections: g.max_connections,
        max_bytes,
        profile: profile.name.clone(),
    })
}

/// Builds the RunSpec of one attempt.
pub fn build_run_spec(inputs: RunSpecInputs<'_>) -> Result<RunSpec, RunSpecError> {
    let RunSpecInputs {
        task,
        decision,
        profile,
        identity,
        global,
        attempt,
        workspace,
        branch,
        project_verify,
    } = inputs;
    let repo = repo_override(&global.repos, &task.repo);
    let image = repo
        .and_then(|r| r.image.clone())
        .or_else(|| profile.image.clone())
        .unwrap_or_else(|| global.container.image.clone());
    let verify_image = repo
        .and_then(|r| r.verify.as_ref())
        .and_then(|v| v.image.clone())
        .or_else(|| global.verify.image.clone())
        .unwrap_or_else(|| image.clone());
    let deadline_seconds = match profile.deadline_seconds {
        Some(s) => s,
        None => parse_duration("container.deadline", &global.container.deadline)?,
    };
    let idle_timeout_seconds = match profile.idle_timeout_seconds {
        Some(s) => s,
        None => parse_duration("event_idle_timeout", &global.event_idle_timeout)?,
    };
    let limits = match &profile.limits {
        Some(l) => l.clone(),
        None => container_limits(global)?,
    };
    // On a fallback attempt the chain continues after the agent being run.
    let chain = decision.chain();
    let fallback = match chain.iter().position(|a| *a == profile.name) {
        Some(i) => chain[i + 1..].iter().map(|s| s.to_string()).collect(),
        None => decision.fallback.clone(),
    };
    Ok(RunSpec {
        task_id: task.id.clone(),
        attempt,
        agent: profile.name.clone(),
        agent_type: profile.agent_type,
        cli_command: profile.cli_command.clone(),
        fallback,
        identity: identity.identity.clone(),
        workspace,
        branch,
        base_ref: task
            .base_ref
            .clone()
            .or_else(|| repo.and_then(|r| r.base_ref.clone())),
        image,
        model: profile.model.clone(),
        max_turns: profile.max_turns,
        args: profile.args.clone(),
        env_overlay: identity.env_overlay.clone(),
        volume_mounts: identity.volume_mounts.clone(),
        deadline_seconds,
        idle_timeout_seconds,
        network: profile.network.clone(),
        egress: egress_spec(global, profile, repo)?,
        limits,
        verification: verification_commands(&global.verify, repo, project_verify)?,
        verify_image,
        rule: decision.rule.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::model::VerifyOverride;
    use crate::domain::{AgentType, EnvVar, NetworkMode, SourceKind, VolumeMount};
    use chrono::TimeZone;

    fn task() -> Task {
        let now = chrono::Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        Task::new(
            "acme/api#7",
            SourceKind::Github,
            "acme/api#7",
            "https://github.com/acme/api.git",
            "Fix it",
            now,
        )
    }

    fn decision() -> RouteDecision {
        RouteDecision {
            rule: "bugfix-small".into(),
            agent: "codex".into(),
            fallback: vec!["claude".into(), "kimi".into()],
            identity: None,
            skipped: vec![],
            context: None,
        }
    }

    fn profile(name: &str) -> AgentProfile {
        AgentProfile {
            name: name.into(),
            agent_type: AgentType::Codex,
            cli_command: "codex".into(),
            context_window_tokens: 200_000,
            strengths: vec![],
            event_protocol: "codex-json".into(),
            auth_path: ".codex".into(),
            model: Some("gpt-5-codex".into()),
            max_turns: Some(40),
            args: Vec::new(),
            image: None,
            identity: None,
            network: NetworkMode::Bridge,
            egress: Default::default(),
            deadline_seconds: None,
            idle_timeout_seconds: None,
            limits: None,
        }
    }

    fn brokered() -> Brokered {
        Brokered {
            identity: "work".into(),
            volume_mounts: vec![VolumeMount {
                host_path: "/home/me/.codex".into(),
                container_path: "/polyphony/credentials/.codex".into(),
                read_only: true,
            }],
            env_overlay: vec![EnvVar {
                name: "OPENAI_API_KEY".into(),
                from_host: "WORK_OPENAI".into(),
            }],
            cost_ceiling_usd_per_day: None,
        }
    }

    fn build(global: &GlobalConfig, p: &AgentProfile, project: Option<&ProjectVerify>) -> RunSpec {
        let (t, d, b) = (task(), decision(), brokered());
        build_run_spec(RunSpecInputs {
            task: &t,
            decision: &d,
            profile: p,
            identity: &b,
            global,
            attempt: 2,
            workspace: "/ws/acme_api_7/2".into(),
            branch: "polyphony/acme_api_7-a2".into(),
            project_verify: project,
        })
        .unwrap()
    }

    #[test]
    fn defaults_come_from_the_global_config() {
        let mut g = GlobalConfig::default();
        g.verify.test = Some("cargo test".into());
        let s = build(&g, &profile("codex"), None);
        assert_eq!(s.image, "polyphony-worker:latest");
        assert_eq!(s.verify_image, "polyphony-worker:latest");
        assert_eq!(s.deadline_seconds, 30 * 60);
        assert_eq!(s.idle_timeout_seconds, 5 * 60);
        assert_eq!(s.limits.memory_bytes, 4 * 1024 * 1024 * 1024);
        assert_eq!(s.limits.pids, 512);
        assert!(s.limits.cap_drop_all && s.limits.no_new_privileges && s.limits.init);
        assert_eq!(s.fallback, vec!["claude", "kimi"]);
        assert_eq!(
            (s.agent.as_str(), s.rule.as_str(), s.identity.as_str()),
            ("codex", "bugfix-small", "work")
        );
        assert_eq!(
            (s.model.as_deref(), s.max_turns),
            (Some("gpt-5-codex"), Some(40))
        );
        assert_eq!(
            s.verification,
            vec![VerifyCommand {
                name: "test".into(),
                command: "cargo test".into(),
                timeout_seconds: 600
            }]
        );
        assert_eq!(s.attempt, 2);
        assert_eq!(s.volume_mounts, brokered().volume_mounts);
    }

    #[test]
    fn overrides_take_precedence() {
        let mut g = GlobalConfig {
            verify: VerifyConfig {
                test: Some("make test".into()),
                lint: Some("make lint".into()),
                typecheck: None,
                image: Some("verify:global".into()),
                ..VerifyConfig::default()
            },
            ..GlobalConfig::default()
        };
        g.repos = vec![
            RepoConfig {
                repo: "other/*".into(),
                base_ref: None,
                verify: None,
                image: Some("wrong".into()),
                egress: None,
            },
            RepoConfig {
                repo: "acme/*".into(),
                base_ref: Some("develop".into()),
                verify: Some(VerifyOverride {
                    lint: Some("cargo clippy".into()),
                    typecheck: Some("cargo check".into()),
                    timeout: Some("20m".into()),
                    image: Some("verify:acme".into()),
                    ..VerifyOverride::default()
                }),
                image: Some("acme-toolchain:1".into()),
                egress: None,
            },
        ];
        let mut p = profile("codex");
        p.image = Some("profile-image".into());
        p.deadline_seconds = Some(99);
        p.idle_timeout_seconds = Some(33);
        p.limits = Some(ResourceLimits {
            memory_bytes: 1,
            ..ResourceLimits::default()
        });
        let s = build(&g, &p, None);
        assert_eq!(s.image, "acme-toolchain:1");
        assert_eq!(s.verify_image, "verify:acme");
        assert_eq!(s.base_ref.as_deref(), Some("develop"));
        assert_eq!(
            (
                s.deadline_seconds,
                s.idle_timeout_seconds,
                s.limits.memory_bytes
            ),
            (99, 33, 1)
        );
        let cmds: Vec<(&str, &str, u64)> = s
            .verification
            .iter()
            .map(|v| (v.name.as_str(), v.command.as_str(), v.timeout_seconds))
            .collect();
        assert_eq!(
            cmds,
            vec![
                ("test", "make test", 1200),
                ("lint", "cargo clippy", 1200),
                ("typecheck", "cargo check", 1200)
            ]
        );

        // The project's .polyphony.yaml on the base ref wins, field by field.
        let project =
            verification_from_polyphony_yaml("test: cargo nextest run\ntimeout: 5m\n").unwrap();
        let s = build(&g, &p, Some(&project));
        let cmds: Vec<(&str, &str, u64)> = s
            .verification
            .iter()
            .map(|v| (v.name.as_str(), v.command.as_str(), v.timeout_seconds))
            .collect();
        assert_eq!(
            cmds,
            vec![
                ("test", "cargo nextest run", 300),
                ("lint", "cargo clippy", 300),
                ("typecheck", "cargo check", 300)
            ]
        );

        // Without a repo override the profile image is used, and verification defaults to it.
        g.repos.clear();
        g.verify.image = None;
        let s = build(&g, &p, None);
        assert_eq!(
            (s.image.as_str(), s.verify_image.as_str()),
            ("profile-image", "profile-image")
        );
    }

    #[test]
    fn a_fallback_attempt_continues_the_chain() {
        let g = GlobalConfig::default();
        assert_eq!(build(&g, &profile("claude"), None).fallback, vec!["kimi"]);
        assert!(build(&g, &profile("kimi"), None).fallback.is_empty());
        assert_eq!(
            build(&g, &profile("elsewhere"), None).fallback,
            vec!["claude", "kimi"]
        );
    }

    #[test]
    fn the_spec_serialises_without_secret_values() {
        let s = build(&GlobalConfig::default(), &profile("codex"), None);
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains("\"from_host\":\"WORK_OPENAI\""));
        let back: RunSpec = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn memory_sizes() {
        fn check(v: &str, expect: Option<i64>) {
            assert_eq!(parse_memory("m", v).ok(), expect, "{v}");
        }
        check("4g", Some(4 << 30));
        check("4G", Some(4 << 30));
        check("512m", Some(512 << 20));
        check("512MiB", Some(512 << 20));
        check("1.5g", Some(3 << 29));
        check("1024k", Some(1 << 20));
        check("123", Some(123));
        check("0", None);
        check("", None);
        check("lots", None);
        check("4x", None);
        check("-1g", None);
        assert_eq!(
            parse_memory("container.memory", "4gigs")
                .unwrap_err()
                .to_string(),
            "container.memory: `4gigs` is not a memory size (use e.g. `512m`, `4g`)"
        );
    }

    #[test]
    fn durations_and_project_file_errors() {
        assert_eq!(parse_duration("d", "1h30m"), Ok(5400));
        assert_eq!(
            parse_duration("d", "soon").unwrap_err().to_string(),
            "d: `soon` is not a duration (use e.g. `30s`, `10m`, `1h30m`)"
        );
        assert_eq!(
            parse_duration("d", "0s").unwrap_err().to_string(),
            "d: must be greater than zero"
        );
        assert_eq!(
            verification_from_polyphony_yaml(""),
            Ok(ProjectVerify::default())
        );
        let e = verification_from_polyphony_yaml("test: x\ntests: y\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(".polyphony.yaml: line 2: unknown field `tests`"),
            "{e}"
        );
        let e = verification_from_polyphony_yaml("timeout: forever\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            ".polyphony.yaml timeout: `forever` is not a duration (use e.g. `30s`, `10m`, `1h30m`)"
        );
    }
}
