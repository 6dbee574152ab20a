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

/// The model API a CLI speaks with an API key (what the model gateway forwards, issue 26).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireApi {
    /// Anthropic Messages (`POST /v1/messages`, SSE).
    Anthropic,
    /// OpenAI Responses (`POST /v1/responses`, SSE).
    OpenAiResponses,
    /// OpenAI-compatible Chat Completions (Moonshot/Kimi).
    OpenAiChat,
    /// Google Generative Language (`…:streamGenerateContent?alt=sse`).
    Gemini,
}

/// What kind of credential a variable holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialKind {
    ApiKey,
    OAuthToken,
}

/// How the model gateway stands in for the CLI's model API (issue 26): the API, the
/// variables the CLI reads its credential from (in the order they are tried) and the one
/// it takes the API's base URL from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GatewaySpec {
    pub api: WireApi,
    pub credential_vars: &'static [(&'static str, CredentialKind)],
    pub base_url_var: &'static str,
    /// Said after "give the identity an api_keys entry …" when the CLI logs in with files
    /// (Claude: how a subscription gets a token instead); may be empty.
    pub login_files_hint: &'static str,
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
    /// `host:port` entries its default model API lives on: the egress allowlist of its
    /// profiles (docs/SECURITY.md "Egress").
    pub api_hosts: &'static [&'static str],
    /// How the model gateway stands in for its API; `None`: the gateway cannot protect
    /// its key (the key the identity names goes into the container).
    pub gateway: Option<GatewaySpec>,
    /// Whether a home without `agents.yaml` gets a profile for it (and puts it in the
    /// default fallback chain). Off for a CLI never run against its real binary.
    pub default_profile: bool,
    /// Prints the version: `[command] + version_args`.
    pub version_args: &'static [&'static str],
    /// A package that installs a stub under the CLI's name: (words its version output
    /// holds, the fix `doctor` gives).
    pub version_stub: Option<(&'static str, &'static str)>,
    /// Real CLI versions the adapter was run or recorded against (docs/agents.md), as an
    /// inclusive `(major, minor, patch)` range; `None`: never against the real binary.
    pub tested_versions: Option<(Version, Version)>,
    /// How a person logs the CLI in on the host.
    pub login_hint: &'static str,
    pub failure_text: FailureText,
    /// The CLI's own flags a profile may pass through `args` (none: `args` is refused).
    pub profile_flags: &'static [ProfileFlag],
}

/// A flag of the CLI a profile may pass (its documented name, never a shell string).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProfileFlag {
    pub flag: &'static str,
    /// Takes a value: the next entry of `args`, or `--flag=value`.
    pub value: bool,
}

impl AgentSpec {
    /// Whether `args` (a profile's) are flags this CLI takes through a profile, each with
    /// its value where it needs one; the error says which entry is wrong and what is
    /// allowed.
    pub fn check_profile_args(&self, args: &[String]) -> Result<(), String> {
        let allowed = || {
            if self.profile_flags.is_empty() {
                format!("{} takes no extra flags from a profile", self.command)
            } else {
                let each: Vec<String> = self
                    .profile_flags
                    .iter()
                    .map(|f| {
                        if f.value {
                            format!("{} VALUE", f.flag)
                        } else {
                            f.flag.to_string()
                        }
                    })
                    .collect();
                format!("{} takes {}", self.command, each.join(", "))
            }
        };
        let mut rest = args.iter();
        while let Some(arg) = rest.next() {
            let (name, inline) = match arg.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (arg.as_str(), None),
            };
            let Some(flag) = self.profile_flags.iter().find(|f| f.flag == name) else {
                return Err(format!(
                    "`{arg}` is not a flag Polyphony passes: {}",
                    allowed()
                ));
            };
            match (flag.value, inline) {
                (false, Some(_)) => {
                    return Err(format!("`{name}` takes no value: {}", allowed()));
                }
                (true, None) => {
                    let value = rest.next().filter(|v| !v.starts_with('-'));
                    if value.is_none_or(|v| v.is_empty()) {
                        return Err(format!("`{name}` needs a value: {}", allowed()));
                    }
                }
                (true, Some("")) => return Err(format!("`{name}` needs a value: {}", allowed())),
                _ => {}
            }
        }
        Ok(())
    }

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
