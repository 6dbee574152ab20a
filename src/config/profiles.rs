//! `identities.yaml` and `agents.yaml` validated into the domain's [`Identity`] and
//! [`AgentProfile`], with every default filled in from `config.yaml`.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use super::locate::Seg;
use super::model::{AgentsFile, IdentitiesFile};
use super::resolve::{check_cpus_pids, duration_at, memory_at, network_at, parse_user, path_at};
use super::{
    default_context_window, default_event_protocol, ConfigError, ConfigErrorKind, Doc,
    GlobalConfig, Resolved,
};
use crate::domain::{AgentProfile, AgentType, Identity, ResourceLimits};

fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

pub(super) fn build_identities(
    home: &Path,
    file: &IdentitiesFile,
    doc: &Doc<'_>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Identity>, ConfigError> {
    use Seg::{Item, Key};
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (i, id) in file.identities.iter().enumerate() {
        let item = [Key("identities"), Item(i)];
        let at = |k: &'static str| [Key("identities"), Item(i), Key(k)];
        if id.name.trim().is_empty() {
            return Err(doc.error(
                ConfigErrorKind::InvalidValue,
                &at("name"),
                None,
                format!("identity #{} has an empty name", i + 1),
                "give the identity a name such as `personal` (spec §7: name required)",
            ));
        }
        if !seen.insert(id.name.as_str()) {
            return Err(doc.error(
                ConfigErrorKind::Duplicate,
                &at("name"),
                None,
                format!("identity `{}` is defined twice", id.name),
                "rename or remove one of them: identity names must be unique",
            ));
        }
        if id.volumes.is_empty() {
            return Err(doc.error(
                ConfigErrorKind::InvalidValue,
                &item,
                None,
                format!("identity `{}` has no volumes", id.name),
                "add `volumes:` with at least one `<agent type>: <host dir>`, e.g. `claude: ~/.claude` (spec §7)",
            ));
        }
        let mut volumes = BTreeMap::new();
        for (agent_type, host) in &id.volumes {
            let vol_at = [
                Key("identities"),
                Item(i),
                Key("volumes"),
                Key(agent_type.as_str()),
            ];
            if agent_type.parse::<AgentType>().is_err() {
                return Err(doc.error(
                    ConfigErrorKind::InvalidValue,
                    &[Key("identities"), Item(i), Key("volumes")],
                    Some(agent_type),
                    format!(
                        "identity `{}` has a volume for unknown agent type `{agent_type}`",
                        id.name
                    ),
                    format!("key volumes by agent type: {}", AgentType::names()),
                ));
            }
            if host.chars().any(char::is_control) {
                return Err(doc.error(
                    ConfigErrorKind::InvalidValue,
                    &vol_at,
                    None,
                    format!(
                        "identity `{}` volume `{agent_type}` holds a newline or another control character",
                        id.name
                    ),
                    "write the host directory on one line, e.g. `claude: ~/.claude`",
                ));
            }
            let path = path_at(
                doc,
                &vol_at,
                &format!("volumes.{agent_type}"),
                host,
                home,
                env,
            )?;
            volumes.insert(agent_type.clone(), path);
        }
        for agent_type in &id.whole_directory {
            if agent_type.parse::<AgentType>().is_err() {
                return Err(doc.error(
                    ConfigErrorKind::InvalidValue,
                    &at("whole_directory"),
                    Some(agent_type),
                    format!(
                        "identity `{}` lists unknown agent type `{agent_type}` in whole_directory",
                        id.name
                    ),
                    format!("list agent types ({}) whose whole login directory may be staged, or remove the line", AgentType::names()),
                ));
            }
        }
        for (container_var, host_var) in &id.api_keys {
            if !is_env_name(container_var) || !is_env_name(host_var) {
                return Err(doc.error(
                    ConfigErrorKind::InvalidValue,
                    &[Key("identities"), Item(i), Key("api_keys")],
                    Some(if is_env_name(container_var) { host_var } else { container_var }),
                    // A value that is not a variable name may be the key itself: never echo it.
                    format!(
                        "identity `{}` api_keys entry `{}: {}` is not a pair of variable names",
                        id.name,
                        if is_env_name(container_var) { container_var.as_str() } else { "***" },
                        if is_env_name(host_var) { host_var.as_str() } else { "***" },
                    ),
                    "map a container variable to the HOST variable holding the key, e.g. `ANTHROPIC_API_KEY: WORK_ANTHROPIC_KEY` (never the key itself)",
                ));
            }
        }
        if let Some(var) = &id.github_token_env {
            if !is_env_name(var) {
                return Err(doc.error(
                    ConfigErrorKind::InvalidValue,
                    &at("github_token_env"),
                    None,
                    format!("identity `{}` github_token_env `{var}` is not a variable name", id.name),
                    "name the HOST variable that holds the token, e.g. WORK_GITHUB_TOKEN (never the token itself)",
                ));
            }
        }
        if let Some(c) = id.cost_ceiling_usd_per_day {
            if !(c >= 0.0 && c.is_finite()) {
                return Err(doc.error(
                    ConfigErrorKind::InvalidValue,
                    &at("cost_ceiling_usd_per_day"),
                    None,
                    format!("identity `{}` has a negative cost ceiling", id.name),
                    "use a positive number of dollars per day, or remove the line for no ceiling",
                ));
            }
        }
        out.push(Identity {
            name: id.name.clone(),
            volumes,
            api_keys: id.api_keys.clone(),
            github_token_env: id.github_token_env.clone(),
            cost_ceiling_usd_per_day: id.cost_ceiling_usd_per_day,
            whole_directory: id.whole_directory.clone(),
        });
    }
    Ok(out)
}

pub(super) fn check_identity_ref(
    doc: &Doc<'_>,
    known: &[&str],
    name: &str,
    path: &[Seg<'_>],
    who: &str,
) -> Result<(), ConfigError> {
    if known.contains(&name) {
        return Ok(());
    }
    let fix = if known.is_empty() {
        format!("define identity `{name}` in identities.yaml")
    } else {
        format!(
            "use one of {} (or add `{name}` to identities.yaml)",
            known.join(", ")
        )
    };
    Err(doc.error(
        ConfigErrorKind::UnknownReference,
        path,
        Some(name),
        format!("{who} names unknown identity `{name}`"),
        fix,
    ))
}

pub(super) fn build_agents(
    g: &GlobalConfig,
    resolved: &Resolved,
    file: &AgentsFile,
    doc: &Doc<'_>,
    identities: &[&str],
) -> Result<Vec<AgentProfile>, ConfigError> {
    use Seg::{Item, Key};
    if file.agents.is_empty() {
        return Err(doc.error(
            ConfigErrorKind::InvalidValue,
            &[Key("agents")],
            None,
            "no agents are defined",
            "add at least one agent (`polyphony init --force` writes a template with claude, codex, kimi and gemini)",
        ));
    }
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (i, a) in file.agents.iter().enumerate() {
        let at = |k: &'static str| [Key("agents"), Item(i), Key(k)];
        if a.name.trim().is_empty() {
            return Err(doc.error(
                ConfigErrorKind::InvalidValue,
                &at("name"),
                None,
                format!("agent #{} has an empty name", i + 1),
                "give the agent a name such as `claude`",
            ));
        }
        if !seen.insert(a.name.as_str()) {
            return Err(doc.error(
                ConfigErrorKind::Duplicate,
                &at("name"),
                None,
                format!("agent `{}` is defined twice", a.name),
                "rename or remove one of them: agent names must be unique",
            ));
        }
        let agent_type: AgentType = a.agent_type.parse().map_err(|e: String| {
            doc.error(
                ConfigErrorKind::InvalidValue,
                &at("agent_type"),
                None,
                format!("agent `{}`: {e}", a.name),
                format!("set agent_type to {}", AgentType::names()),
            )
        })?;
        if let Some(id) = &a.identity {
            check_identity_ref(
                doc,
                identities,
                id,
                &at("identity"),
                &format!("agent `{}`", a.name),
            )?;
        }
        let deadline = match &a.deadline {
            Some(d) => {
                let v = duration_at(doc, &at("deadline"), "deadline", d)?;
                super::bounds::duration_max(
                    doc,
                    &at("deadline"),
                    "deadline",
                    v,
                    super::bounds::MAX_DEADLINE,
                )?;
                v
            }
            None => resolved.container_deadline,
        };
        let idle = match &a.idle_timeout {
            Some(d) => {
                let v = duration_at(doc, &at("idle_timeout"), "idle_timeout", d)?;
                super::bounds::duration_max(
                    doc,
                    &at("idle_timeout"),
                    "idle_timeout",
                    v,
                    super::bounds::MAX_DEADLINE,
                )?;
                v
            }
            None => resolved.event_idle_timeout,
        };
        let egress = super::egress::profile(g, a, i, doc)?;
        let network = match &a.network {
            Some(n) => network_at(doc, &at("network"), "network", n)?,
            None => resolved.network.clone(),
        };
        let memory_bytes = match &a.memory {
            Some(m) => memory_at(doc, &at("memory"), "memory", m)?,
            None => resolved.limits.memory_bytes,
        };
        check_cpus_pids(
            doc,
            &[Key("agents"), Item(i)],
            &format!("agents[{i}]"),
            a.cpus,
            a.pids_limit,
        )?;
        if a.max_turns == Some(0) {
            return Err(doc.error(
                ConfigErrorKind::InvalidValue,
                &at("max_turns"),
                None,
                format!("agent `{}` has max_turns 0", a.name),
                "set max_turns to 1 or more, or remove it for the CLI's default",
            ));
        }
        if let Some(user) = &a.user {
            if let Err(why) = parse_user(user) {
                return Err(doc.error(
                    ConfigErrorKind::InvalidValue,
                    &at("user"),
                    None,
                    format!(
                        "agent `{}` has user `{user}`, not `uid` or `uid:gid`: {why}",
                        a.name
                    ),
                    "use numeric ids like 1000:1000, or remove it for `container.user`",
                ));
            }
        }
        let args = a.args.clone();
        if let Err(why) = crate::agents::descriptor(agent_type).check_profile_args(&args) {
            return Err(doc.error(
                ConfigErrorKind::InvalidValue,
                &at("args"),
                None,
                format!("agent `{}` has args {args:?}: {why}", a.name),
                "remove the entry, or use one of the flags named (docs/agents.md)",
            ));
        }
        let hardening = a.hardening.clone().unwrap_or_default();
        out.push(AgentProfile {
            name: a.name.clone(),
            agent_type,
            cli_command: a
                .cli_command
                .clone()
                .unwrap_or_else(|| crate::agents::descriptor(agent_type).command.to_string()),
            context_window_tokens: a
                .context_window_tokens
                .unwrap_or_else(|| default_context_window(agent_type)),
            strengths: a.strengths.clone(),
            event_protocol: default_event_protocol(agent_type).to_string(),
            auth_path: a
                .auth_path
                .clone()
                .unwrap_or_else(|| crate::agents::descriptor(agent_type).auth_dir.to_string()),
            model: a.model.clone(),
            max_turns: a.max_turns,
            args,
            image: a.image.clone(),
            identity: a.identity.clone(),
            network,
            egress,
            deadline_seconds: Some(deadline.as_secs()),
            idle_timeout_seconds: Some(idle.as_secs()),
            limits: Some(ResourceLimits {
                memory_bytes,
                cpus: a.cpus.unwrap_or(g.container.cpus),
                pids: a.pids_limit.unwrap_or(g.container.pids_limit),
                cap_drop_all: hardening.cap_drop_all,
                no_new_privileges: hardening.no_new_privileges,
                init: hardening.init,
                user: a.user.clone().or_else(|| g.container.user.clone()),
            }),
        });
    }
    Ok(out)
}
