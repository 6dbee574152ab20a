//! The immutable specification of one attempt (spec §3.4).

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

use super::agent::{AgentType, EgressSpec, NetworkMode, ResourceLimits};

/// A container variable and the HOST variable its value is read from at creation time.
/// Only names are kept, so a RunSpec can be stored and shown without leaking secrets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvVar {
    pub name: String,
    pub from_host: String,
}

/// Identity credential directories are mounted read-only below this path, one per
/// agent auth path (`/polyphony/credentials/.claude`); the entrypoint copies them into HOME
/// because agents rewrite their token files and must never get the host's file. The identity
/// broker names mounts below it and the runtime stages them, so both read it from here.
pub const CREDENTIAL_STAGING_DIR: &str = "/polyphony/credentials";

/// A bind mount into the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeMount {
    pub host_path: PathBuf,
    pub container_path: String,
    pub read_only: bool,
}

/// One proof-of-work check (spec §10): `test`, `lint` or `typecheck`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyCommand {
    /// `test`, `lint` or `typecheck`.
    pub name: String,
    /// Run by `/bin/sh -c` inside the verification container.
    pub command: String,
    pub timeout_seconds: u64,
}

/// Everything one attempt needs, decided before it starts and never changed after.
/// It carries no secret values: `env_overlay` names host variables.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSpec {
    pub task_id: String,
    pub attempt: u32,
    /// Agent profile name.
    pub agent: String,
    pub agent_type: AgentType,
    /// Executable inside the image.
    pub cli_command: String,
    /// Agents to try next when this one is out of quota, in order.
    pub fallback: Vec<String>,
    pub identity: String,
    /// Host path of the attempt's clone, mounted at `/workspace`.
    pub workspace: PathBuf,
    pub branch: String,
    pub base_ref: Option<String>,
    pub image: String,
    pub model: Option<String>,
    pub max_turns: Option<u32>,
    /// The profile's extra CLI flags (the adapter places them).
    #[serde(default)]
    pub args: Vec<String>,
    pub env_overlay: Vec<EnvVar>,
    pub volume_mounts: Vec<VolumeMount>,
    pub deadline_seconds: u64,
    pub idle_timeout_seconds: u64,
    pub network: NetworkMode,
    /// Where the agent may connect (issue 25). A RunSpec stored before it existed reads
    /// as `open` (its `network` as is).
    #[serde(default)]
    pub egress: EgressSpec,
    pub limits: ResourceLimits,
    pub verification: Vec<VerifyCommand>,
    /// Image verification runs in (the repo's verify image, else the agent image).
    pub verify_image: String,
    /// Name of the rule that routed this attempt (for the record).
    pub rule: String,
}
