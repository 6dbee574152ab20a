//! Agent profiles: how to run one coding-agent CLI (spec §3.3).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// Declares [`AgentType`]: each CLI's id, once. Everything else about a CLI is its
/// adapter's descriptor (`agents::descriptor`); `agents::adapter_for` is the registry.
macro_rules! agent_ids {
    ($($variant:ident = $id:literal),+ $(,)?) => {
        /// The id of an agent CLI: what profiles (`agent_type`), identities' `volumes` and
        /// stored RunSpecs name it by. Only the ids live here (the stored form, read without
        /// the adapters); `agents::adapter_for` maps each to its adapter, and its match is
        /// the only one on this enum, so an id without an adapter does not compile.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum AgentType {
            $(#[serde(rename = $id)] $variant,)+
        }

        impl AgentType {
            pub const ALL: [AgentType; [$($id),+].len()] = [$(AgentType::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $(AgentType::$variant => $id,)+
                }
            }
        }
    };
}

agent_ids! {
    Claude = "claude",
    Codex = "codex",
    Kimi = "kimi",
    Gemini = "gemini",
    OpenCode = "opencode",
}

impl AgentType {
    /// Every id, in registry order, for "expected …" messages: `claude, codex, kimi or
    /// gemini`.
    pub fn names() -> String {
        let ids: Vec<&str> = AgentType::ALL.iter().map(|t| t.as_str()).collect();
        match ids.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => ids.join(""),
        }
    }
}

impl fmt::Display for AgentType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AgentType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let lower = s.trim().to_ascii_lowercase();
        AgentType::ALL
            .into_iter()
            .find(|t| t.as_str() == lower)
            .ok_or_else(|| format!("unknown agent type `{s}` (expected {})", AgentType::names()))
    }
}

/// Container network for a run. Agents need their API; verification gets `None`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    /// Docker's default bridge network.
    #[default]
    Bridge,
    /// No network at all.
    None,
    /// The host's network stack.
    Host,
    /// A user-defined Docker network by name (`network:NAME` in config): e.g. one a test
    /// creates so agents reach a scripted model server on its gateway and nothing else.
    Named(String),
}

impl NetworkMode {
    pub fn as_docker(&self) -> &str {
        match self {
            NetworkMode::Bridge => "bridge",
            NetworkMode::None => "none",
            NetworkMode::Host => "host",
            NetworkMode::Named(name) => name,
        }
    }
}

/// Where an agent's container may connect (issue 25).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EgressMode {
    /// An internal network of its own whose one exit is an allowlisting proxy (default).
    Allowlist,
    /// No network at all (offline fake agents, tests).
    None,
    /// The profile's `network` as is (Docker's bridge by default): needs `allow_unsafe`.
    Open,
}

impl EgressMode {
    pub fn as_str(self) -> &'static str {
        match self {
            EgressMode::Allowlist => "allowlist",
            EgressMode::None => "none",
            EgressMode::Open => "open",
        }
    }

    pub fn parse(text: &str) -> Option<EgressMode> {
        match text.trim() {
            "allowlist" => Some(EgressMode::Allowlist),
            "none" => Some(EgressMode::None),
            "open" => Some(EgressMode::Open),
            _ => None,
        }
    }
}

impl fmt::Display for EgressMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A profile's egress: its mode and the `host:port` entries it adds to the defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressProfile {
    pub mode: EgressMode,
    pub allow: Vec<String>,
}

impl Default for EgressProfile {
    fn default() -> Self {
        EgressProfile {
            mode: EgressMode::Allowlist,
            allow: Vec::new(),
        }
    }
}

/// One attempt's egress, decided with its RunSpec: the mode, the whole allowlist (the
/// agent type's model API hosts, config.yaml's, the profile's and the repository's), the
/// operator's pinned addresses, the proxy's outbound network and caps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct EgressSpec {
    pub mode: EgressMode,
    pub allow: Vec<String>,
    /// Name -> address (config.yaml `egress.hosts`), trusted as written.
    pub pins: BTreeMap<String, String>,
    pub outbound_network: String,
    pub max_connections: u64,
    pub max_bytes: u64,
    /// The profile the allowlist belongs to (a refusal names it).
    pub profile: String,
}

impl Default for EgressSpec {
    /// `open`: a RunSpec recorded before egress existed ran on its `network` as is.
    fn default() -> Self {
        EgressSpec {
            mode: EgressMode::Open,
            allow: Vec::new(),
            pins: BTreeMap::new(),
            outbound_network: "bridge".into(),
            max_connections: 10_000,
            max_bytes: 4 * 1024 * 1024 * 1024,
            profile: String::new(),
        }
    }
}

/// Container limits and hardening. Everything is on by default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceLimits {
    /// Memory limit in bytes.
    pub memory_bytes: i64,
    /// CPUs (fractional allowed).
    pub cpus: f64,
    pub pids: i64,
    /// Drop every Linux capability.
    pub cap_drop_all: bool,
    pub no_new_privileges: bool,
    /// Run an init process (reaps zombies, forwards signals).
    pub init: bool,
    /// `uid:gid` the container runs as; `None` means the daemon's own uid:gid.
    pub user: Option<String>,
}

impl Default for ResourceLimits {
    fn default() -> Self {
        ResourceLimits {
            memory_bytes: 4 * 1024 * 1024 * 1024,
            cpus: 2.0,
            pids: 512,
            cap_drop_all: true,
            no_new_privileges: true,
            init: true,
            user: None,
        }
    }
}

/// How to run one agent harness (spec §3.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentProfile {
    pub name: String,
    pub agent_type: AgentType,
    /// Executable inside the image (default: the CLI's own name).
    pub cli_command: String,
    pub context_window_tokens: u64,
    /// Free-form tags the routing comments and `route --explain` show.
    pub strengths: Vec<String>,
    /// Stream format the adapter parses, e.g. `claude-stream-json`.
    pub event_protocol: String,
    /// Credential directory below the container user's HOME (e.g. `.claude`).
    pub auth_path: String,
    pub model: Option<String>,
    pub max_turns: Option<u32>,
    /// Extra CLI flags from the profile (checked against the descriptor's
    /// `profile_flags` when the config is loaded).
    #[serde(default)]
    pub args: Vec<String>,
    /// Image the agent runs in; `None` means the global `container.image`.
    pub image: Option<String>,
    /// Identity to use when the routing rule names none.
    pub identity: Option<String>,
    pub network: NetworkMode,
    /// Where the agent may connect (issue 25); `network` applies only under `open`.
    pub egress: EgressProfile,
    /// Wall-clock limit for one attempt, in seconds.
    pub deadline_seconds: Option<u64>,
    /// Kill the attempt after this many seconds without output.
    pub idle_timeout_seconds: Option<u64>,
    pub limits: Option<ResourceLimits>,
}

/// How to start the CLI: an argv (never a shell string) and optional stdin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Invocation {
    pub argv: Vec<String>,
    /// Fed to the process's stdin when set (the prompt, for CLIs that read it there).
    pub stdin: Option<String>,
}
