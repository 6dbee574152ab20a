//! Identity broker (spec §3.2, §7): named credential bundles -> mounts and env overlay.
//!
//! Resolves which identity an attempt runs as, validates identities, and turns one into
//! what the runtime needs: read-only mounts of the running agent's login directory at a
//! staging path (the container entrypoint copies them into a per-attempt writable HOME, so
//! an agent never writes the host's files) and an env overlay of variable NAMES.
//!
//! Architecture Invariant: pure, and it handles variable names only: the env overlay
//! names host variables, and their values are read by the runtime at container creation
//! (`runtime::docker`), never here. Unique identity names are checked by `config` at load.
//! The GitHub token is not resolved here: its one rule is
//! `sources::github::environment::resolve_token` (docs/ARCHITECTURE.md, `src/sources/`).

use std::path::PathBuf;

use crate::domain::{AgentProfile, AgentType, EnvVar, Identity, VolumeMount};

/// Where an identity's login directories are mounted (read-only) in the container:
/// `{AUTH_STAGING_ROOT}/{auth dir}` (e.g. `/polyphony/credentials/.claude`). The image's
/// entrypoint copies everything below it into the per-attempt writable HOME, so the CLI
/// finds `~/.claude` and may rewrite its token files without touching the host's.
pub const AUTH_STAGING_ROOT: &str = crate::domain::CREDENTIAL_STAGING_DIR;

/// An identity that cannot be resolved or used. Messages never carry secret values.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum IdentityError {
    #[error("an identity has an empty `name`: every identity in identities.yaml needs one")]
    MissingName,
    #[error("identity `{0}` has no volumes: give it at least one `volumes:` entry (agent type -> login directory, e.g. `claude: ~/.claude`) (spec §7)")]
    NoVolumes(String),
    #[error(
        "identity `{identity}`: volume key `{key}` is not an agent type (expected {})",
        AgentType::names()
    )]
    UnknownAgentType { identity: String, key: String },
    #[error("identity `{identity}`: volume `{agent_type}` has an empty path")]
    EmptyVolumePath {
        identity: String,
        agent_type: String,
    },
    #[error("identity `{identity}`: volume `{agent_type}` path `{path}` must be absolute after `~`/`$VAR` expansion")]
    RelativeVolumePath {
        identity: String,
        agent_type: String,
        path: String,
    },
    #[error("identity `{identity}`: api_keys entry `{container_var}: {host_var}` is not a valid pair of variable names")]
    BadApiKey {
        identity: String,
        container_var: String,
        host_var: String,
    },
    #[error(
        "identity `{identity}`: cost_ceiling_usd_per_day must be a positive number, got {value}"
    )]
    BadCostCeiling { identity: String, value: f64 },
    #[error("identity `{identity}`: github_token_env `{var}` is not a valid variable name")]
    BadGithubTokenEnv { identity: String, var: String },
    #[error("no identity for agent `{agent}`: name one on the routing rule, on the agent profile, or as `default_identity` in config.yaml (identities defined: {defined})")]
    NoneConfigured { agent: String, defined: String },
    #[error("identity `{name}` (named by {named_by}) is not defined in identities.yaml{hint}")]
    Unknown {
        name: String,
        named_by: String,
        hint: String,
    },
    #[error("identity `{identity}` has no login for {agent_type} (no `volumes.{agent_type}`) and no api_keys: add a volume for {agent_type} or an API key")]
    NoCredentialsFor {
        identity: String,
        agent_type: AgentType,
    },
}

/// What the runtime needs from an identity for one agent. Holds no secret values.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Brokered {
    pub identity: String,
    pub volume_mounts: Vec<VolumeMount>,
    pub env_overlay: Vec<EnvVar>,
    /// For the scheduler: hold this identity's tasks once the day's spend reaches it.
    pub cost_ceiling_usd_per_day: Option<f64>,
}

fn valid_var_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Spec §7: a name and at least one volume; plus volume keys are agent types, paths are
/// absolute, variable names are valid and the cost ceiling is positive.
pub fn validate(identity: &Identity) -> Result<(), IdentityError> {
    let name = identity.name.trim();
    if name.is_empty() {
        return Err(IdentityError::MissingName);
    }
    if identity.volumes.is_empty() {
        return Err(IdentityError::NoVolumes(name.into()));
    }
    for (key, path) in &identity.volumes {
        if key.parse::<AgentType>().is_err() {
            return Err(IdentityError::UnknownAgentType {
                identity: name.into(),
                key: key.clone(),
            });
        }
        if path.as_os_str().is_empty() {
            return Err(IdentityError::EmptyVolumePath {
                identity: name.into(),
                agent_type: key.clone(),
            });
        }
        if !path.is_absolute() {
            return Err(IdentityError::RelativeVolumePath {
                identity: name.into(),
                agent_type: key.clone(),
                path: path.display().to_string(),
            });
        }
    }
    for (container_var, host_var) in &identity.api_keys {
        if !valid_var_name(container_var) || !valid_var_name(host_var) {
            return Err(IdentityError::BadApiKey {
                identity: name.into(),
                container_var: container_var.clone(),
                host_var: host_var.clone(),
            });
        }
    }
    if let Some(var) = &identity.github_token_env {
        if !valid_var_name(var) {
            return Err(IdentityError::BadGithubTokenEnv {
                identity: name.into(),
                var: var.clone(),
            });
        }
    }
    if let Some(c) = identity.cost_ceiling_usd_per_day {
        if !(c.is_finite() && c > 0.0) {
            return Err(IdentityError::BadCostCeiling {
                identity: name.into(),
                value: c,
            });
        }
    }
    Ok(())
}

/// Picks the identity for an attempt: the rule's, else the agent profile's, else the
/// global `default_identity`, else the only identity when exactly one is defined.
pub fn resolve<'a>(
    rule_identity: Option<&str>,
    profile: &AgentProfile,
    default_identity: Option<&str>,
    identities: &'a [Identity],
) -> Result<&'a Identity, IdentityError> {
    let named = [
        (rule_identity, "the routing rule"),
        (profile.identity.as_deref(), "the agent profile"),
        (default_identity, "default_identity in config.yaml"),
    ]
    .into_iter()
    .find_map(|(n, by)| n.map(|n| (n.trim(), by)).filter(|(n, _)| !n.is_empty()));
    let names: Vec<&str> = identities.iter().map(|i| i.name.as_str()).collect();
    match named {
        Some((name, by)) => identities.iter().find(|i| i.name == name).ok_or_else(|| {
            let best = names
                .iter()
                .map(|k| (strsim::jaro_winkler(name, k), *k))
                .filter(|(s, _)| *s > 0.8)
                .max_by(|a, b| a.0.total_cmp(&b.0));
            IdentityError::Unknown {
                name: name.into(),
                named_by: if by == "the agent profile" {
                    format!("agent profile `{}`", profile.name)
                } else {
                    by.to_string()
                },
                hint: match best {
                    Some((_, k)) => format!(" (did you mean `{k}`?)"),
                    None if names.is_empty() => " (no identities are defined)".into(),
                    None => format!(" (defined: {})", names.join(", ")),
                },
            }
        }),
        None if identities.len() == 1 => Ok(&identities[0]),
        None => Err(IdentityError::NoneConfigured {
            agent: profile.name.clone(),
            defined: if names.is_empty() {
                "none".into()
            } else {
                names.join(", ")
            },
        }),
    }
}

/// The container path an agent type's login directory is staged at.
pub fn staging_path(agent_type: AgentType) -> String {
    format!(
        "{AUTH_STAGING_ROOT}/{}",
        crate::agents::descriptor(agent_type).auth_dir
    )
}

/// The files each CLI authenticates with, relative to its login directory (the identity's
/// volume), from the CLIs' own layouts:
/// - Claude Code: `~/.claude/.credentials.json` (OAuth tokens on Linux); its account
///   state `~/.claude.json` sits BESIDE the directory (see [`sibling_files`]).
/// - Codex: `~/.codex/auth.json` (ChatGPT login or API key) and `config.toml`.
/// - Kimi: `~/.kimi/config.toml` (providers and their keys), the OAuth token
///   `credentials/kimi-code.json` and the `device_id` its OAuth flow is bound to.
/// - Gemini: `~/.gemini/oauth_creds.json`, `settings.json` (the selected auth type) and
///   `google_accounts.json` (the active account).
///
/// History, sessions, logs and projects are never staged unless the identity lists the
/// agent type under `whole_directory`.
pub fn credential_files(agent_type: AgentType) -> &'static [&'static str] {
    crate::agents::descriptor(agent_type).credential_files
}

/// Files next to the login directory, as (suffix appended to the directory's path, name
/// in HOME): Claude Code keeps `~/.claude.json` beside `~/.claude` (the descriptor's).
pub fn sibling_files(agent_type: AgentType) -> &'static [(&'static str, &'static str)] {
    crate::agents::descriptor(agent_type).sibling_files
}

/// Read-only mounts for the agent being run: only its own login, and of that only the
/// [`credential_files`] (plus [`sibling_files`]) unless the identity names the agent type
/// in `whole_directory`. Files that do not exist on the host are left to the caller to
/// drop (the list is pure).
pub fn volume_mounts(identity: &Identity, agent_type: AgentType) -> Vec<VolumeMount> {
    let whole = identity
        .whole_directory
        .iter()
        .any(|t| t.parse::<AgentType>().ok() == Some(agent_type));
    let mut out = Vec::new();
    for (_, host) in identity
        .volumes
        .iter()
        .filter(|(k, _)| k.parse::<AgentType>().ok() == Some(agent_type))
    {
        if whole {
            out.push(VolumeMount {
                host_path: host.clone(),
                container_path: staging_path(agent_type),
                read_only: true,
            });
        } else {
            for file in credential_files(agent_type) {
                out.push(VolumeMount {
                    host_path: host.join(file),
                    container_path: format!("{}/{file}", staging_path(agent_type)),
                    read_only: true,
                });
            }
        }
        for (suffix, name) in sibling_files(agent_type) {
            let mut path = host.clone().into_os_string();
            path.push(suffix);
            out.push(VolumeMount {
                host_path: PathBuf::from(path),
                container_path: format!("{AUTH_STAGING_ROOT}/{name}"),
                read_only: true,
            });
        }
    }
    out
}

/// The env overlay: container variable <- host variable, names only, sorted.
pub fn env_overlay(identity: &Identity) -> Vec<EnvVar> {
    identity
        .api_keys
        .iter()
        .map(|(name, from_host)| EnvVar {
            name: name.clone(),
            from_host: from_host.clone(),
        })
        .collect()
}

/// Everything the runtime needs from `identity` to run `agent_type`. An identity with
/// neither a login for that agent nor any API key cannot run it.
pub fn broker(identity: &Identity, agent_type: AgentType) -> Result<Brokered, IdentityError> {
    validate(identity)?;
    let mounts = volume_mounts(identity, agent_type);
    if mounts.is_empty() && identity.api_keys.is_empty() {
        return Err(IdentityError::NoCredentialsFor {
            identity: identity.name.clone(),
            agent_type,
        });
    }
    Ok(Brokered {
        identity: identity.name.clone(),
        volume_mounts: mounts,
        env_overlay: env_overlay(identity),
        cost_ceiling_usd_per_day: identity.cost_ceiling_usd_per_day,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::NetworkMode;

    fn ident(name: &str, volumes: &[(&str, &str)], keys: &[(&str, &str)]) -> Identity {
        Identity {
            name: name.into(),
            volumes: volumes
                .iter()
                .map(|(k, v)| (k.to_string(), PathBuf::from(v)))
                .collect(),
            api_keys: keys
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            github_token_env: None,
            cost_ceiling_usd_per_day: None,
            whole_directory: vec![],
        }
    }

    fn profile(name: &str, identity: Option<&str>) -> AgentProfile {
        AgentProfile {
            name: name.into(),
            agent_type: AgentType::Claude,
            cli_command: "claude".into(),
            context_window_tokens: 200_000,
            strengths: vec![],
            event_protocol: "claude-stream-json".into(),
            auth_path: ".claude".into(),
            model: None,
            max_turns: None,
            args: Vec::new(),
            image: None,
            identity: identity.map(String::from),
            network: NetworkMode::Bridge,
            egress: Default::default(),
            deadline_seconds: None,
            idle_timeout_seconds: None,
            limits: None,
        }
    }

    #[test]
    fn validation_per_spec_7() {
        fn check(i: Identity, expect: &str) {
            assert_eq!(validate(&i).unwrap_err().to_string(), expect);
        }
        check(
            ident(" ", &[("claude", "/a")], &[]),
            "an identity has an empty `name`: every identity in identities.yaml needs one",
        );
        check(ident("w", &[], &[]), "identity `w` has no volumes: give it at least one `volumes:` entry (agent type -> login directory, e.g. `claude: ~/.claude`) (spec §7)");
        check(ident("w", &[("cursor", "/a")], &[]), "identity `w`: volume key `cursor` is not an agent type (expected claude, codex, kimi, gemini or opencode)");
        check(ident("w", &[("claude", "rel/dir")], &[]), "identity `w`: volume `claude` path `rel/dir` must be absolute after `~`/`$VAR` expansion");
        check(
            ident("w", &[("claude", "/a")], &[("KEY", "bad-name")]),
            "identity `w`: api_keys entry `KEY: bad-name` is not a valid pair of variable names",
        );
        let mut i = ident("w", &[("claude", "/a")], &[]);
        i.cost_ceiling_usd_per_day = Some(0.0);
        check(
            i,
            "identity `w`: cost_ceiling_usd_per_day must be a positive number, got 0",
        );
        assert!(validate(&ident("w", &[("claude", "/a")], &[("K", "H")])).is_ok());
    }

    #[test]
    fn resolution_order() {
        let ids = vec![
            ident("rule-id", &[("claude", "/a")], &[]),
            ident("profile-id", &[("claude", "/b")], &[]),
            ident("global-id", &[("claude", "/c")], &[]),
        ];
        fn check(
            rule: Option<&str>,
            prof: Option<&str>,
            global: Option<&str>,
            ids: &[Identity],
            expect: Result<&str, &str>,
        ) {
            let got = resolve(rule, &profile("claude-opus", prof), global, ids)
                .map(|i| i.name.as_str())
                .map_err(|e| e.to_string());
            assert_eq!(
                got,
                expect.map_err(String::from),
                "{rule:?} {prof:?} {global:?}"
            );
        }
        check(
            Some("rule-id"),
            Some("profile-id"),
            Some("global-id"),
            &ids,
            Ok("rule-id"),
        );
        check(
            None,
            Some("profile-id"),
            Some("global-id"),
            &ids,
            Ok("profile-id"),
        );
        check(None, None, Some("global-id"), &ids, Ok("global-id"));
        check(None, None, None, &ids[..1], Ok("rule-id"));
        check(
            None,
            None,
            None,
            &ids,
            Err("no identity for agent `claude-opus`: name one on the routing rule, on the agent profile, or as `default_identity` in config.yaml (identities defined: rule-id, profile-id, global-id)"),
        );
        check(
            None,
            Some("profile-idd"),
            None,
            &ids,
            Err("identity `profile-idd` (named by agent profile `claude-opus`) is not defined in identities.yaml (did you mean `profile-id`?)"),
        );
        check(
            Some("nobody"),
            None,
            None,
            &ids,
            Err("identity `nobody` (named by the routing rule) is not defined in identities.yaml (defined: rule-id, profile-id, global-id)"),
        );
    }

    #[test]
    fn brokering_mounts_only_the_running_agents_login() {
        let mut i = ident(
            "work",
            &[("claude", "/home/me/.claude"), ("codex", "/home/me/.codex")],
            &[("ANTHROPIC_API_KEY", "WORK_ANTHROPIC_KEY")],
        );
        i.cost_ceiling_usd_per_day = Some(40.0);
        let b = broker(&i, AgentType::Codex).unwrap();
        let mount = |host: &str, container: &str| VolumeMount {
            host_path: host.into(),
            container_path: container.into(),
            read_only: true,
        };
        assert_eq!(
            b.volume_mounts,
            vec![
                mount(
                    "/home/me/.codex/auth.json",
                    "/polyphony/credentials/.codex/auth.json"
                ),
                mount(
                    "/home/me/.codex/config.toml",
                    "/polyphony/credentials/.codex/config.toml"
                ),
            ]
        );
        assert_eq!(
            broker(&i, AgentType::Claude).unwrap().volume_mounts,
            vec![
                mount(
                    "/home/me/.claude/.credentials.json",
                    "/polyphony/credentials/.claude/.credentials.json"
                ),
                mount(
                    "/home/me/.claude.json",
                    "/polyphony/credentials/.claude.json"
                ),
            ]
        );
        // Only when the identity says so is the whole directory staged.
        i.whole_directory = vec!["codex".into()];
        assert_eq!(
            broker(&i, AgentType::Codex).unwrap().volume_mounts,
            vec![mount("/home/me/.codex", "/polyphony/credentials/.codex")]
        );
        assert_eq!(
            b.env_overlay,
            vec![EnvVar {
                name: "ANTHROPIC_API_KEY".into(),
                from_host: "WORK_ANTHROPIC_KEY".into()
            }]
        );
        assert_eq!(b.cost_ceiling_usd_per_day, Some(40.0));
        // Kimi: no volume, but an API key may serve it.
        assert!(broker(&i, AgentType::Kimi)
            .unwrap()
            .volume_mounts
            .is_empty());
        let no_keys = ident("sub", &[("claude", "/home/me/.claude")], &[]);
        assert_eq!(
            broker(&no_keys, AgentType::Gemini).unwrap_err().to_string(),
            "identity `sub` has no login for gemini (no `volumes.gemini`) and no api_keys: add a volume for gemini or an API key"
        );
    }
}
