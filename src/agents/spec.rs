//! One descriptor per agent CLI: the facts about a CLI that are not its stream parsing,
//! kept as a static [`AgentSpec`] next to its adapter (each adapter file's `SPEC`) and
//! reached only through [`crate::agents::descriptor`] / [`crate::agents::AgentAdapter::spec`].
//! Config defaults, the identity broker, `doctor`, the failure classifier, the egress
//! allowlist and the model gateway read them from here; nobody else lists the CLIs.
//!
//! Architecture Invariant: plain data; no IO.

use crate::domain::AgentType;

/// `(major, minor, patch)`.
pub type Version = (u64, u64, u64);

/// How the CLI is pointed at a non-default model endpoint (a gateway, a scripted model).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BaseUrl {
    /// An environment variable holding the base URL (`ANTHROPIC_BASE_URL`).
    Env(&'static str),
    /// Codex: a configured model provider. `codex -c model_provider=NAME -c
    /// 'model_providers.NAME={name="NAME", base_url="URL", env_key="KEY_VAR",
    /// wire_api="responses"}'` (codex-rs `docs/config.md`, model providers); the URL ends in
    /// `/v1` and Codex POSTs `{base_url}/responses`.
    CodexProvider,
    /// The CLI keeps its endpoint in its own config file only (Kimi's `config.toml`).
    ConfigFile(&'static str),
}

/// Words in the CLI's OWN error texts (structured error events, never agent text) that say
/// which kind of failure it reported. Lower-case; matched as substrings of the lowered text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureText {
    pub auth: &'static [&'static str],
    pub quota: &'static [&'static str],
    pub model: &'static [&'static str],
    pub transient: &'static [&'static str],
}

/// Everything Polyphony knows about one CLI besides its stream format.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AgentSpec {
    pub agent_type: AgentType,
    /// The executable the CLI installs as (the profile's default `cli_command`).
    pub command: &'static str,
    /// `event_protocol` of its profiles.
    pub event_protocol: &'static str,
    /// The headless invocation the adapter builds, for people (docs, doctor).
    pub invocation: &'static str,
    /// Context window of the CLI's default model, in tokens.
    pub default_context_window: u64,
    /// Where the CLI keeps its login below `$HOME`.
    pub auth_dir: &'static str,
    /// The files it authenticates with, relative to `auth_dir`.
    pub credential_files: &'static [&'static str],
    /// Files beside `auth_dir`, as (suffix appended to the directory's path, name in HOME).
    pub sibling_files: &'static [(&'static str, &'static str)],
    /// Environment variables that hold an API key it reads.
    pub api_key_env: &'static [&'static str],
    /// How its model endpoint is overridden.
    pub base_url: BaseUrl,
    /// Hosts its default model API lives on (the egress allowlist of its profiles).
    pub api_hosts: &'static [&'static str],
    /// Prints the version: `[command] + version_args`.
    pub version_args: &'static [&'static str],
    /// Real CLI versions the adapter was run or recorded against (docs/agents.md), as an
    /// inclusive `(major, minor, patch)` range; `None`: never against the real binary.
    pub tested_versions: Option<(Version, Version)>,
    /// How a person logs the CLI in on the host.
    pub login_hint: &'static str,
    pub failure_text: FailureText,
}

impl AgentSpec {
    /// Which kind of failure `text` (the CLI's own error text) names, by this CLI's words.
    /// Quota first (a usage-limit text may mention the plan's login), then model, auth and
    /// transient.
    pub fn kind_of_text(&self, text: &str) -> Option<super::FailureKind> {
        use super::FailureKind::*;
        let lower = text.to_lowercase();
        let any = |needles: &[&str]| needles.iter().any(|n| lower.contains(n));
        let t = &self.failure_text;
        if any(t.quota) {
            Some(Quota)
        } else if any(t.model) {
            Some(Model)
        } else if any(t.auth) {
            Some(Auth)
        } else if any(t.transient) {
            Some(Transient)
        } else {
            None
        }
    }
}
