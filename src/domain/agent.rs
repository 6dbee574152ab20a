//! Agent profiles: how to run one coding-agent CLI (spec §3.3).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The CLI families Polyphony has adapters for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentType {
    Claude,
    Codex,
    Kimi,
    Gemini,
}

impl AgentType {
    pub const ALL: [AgentType; 4] = [
        AgentType::Claude,
        AgentType::Codex,
        AgentType::Kimi,
        AgentType::Gemini,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AgentType::Claude => "claude",
            AgentType::Codex => "codex",
            AgentType::Kimi => "kimi",
            AgentType::Gemini => "gemini",
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
            .ok_or_else(|| {
                format!("unknown agent type `{s}` (expected claude, codex, kimi or gemini)")
            })
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
    /// Image the agent runs in; `None` means the global `container.image`.
    pub image: Option<String>,
    /// Identity to use when the routing rule names none.
    pub identity: Option<String>,
    pub network: NetworkMode,
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
