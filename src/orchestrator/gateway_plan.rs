//! Which credential of an attempt goes through the gateway, and what the container gets
//! instead (pure).
//!
//! A CLI is **protected** when its identity hands it an API key or token through
//! `api_keys` under one of the names the CLI reads ([`credential_vars`]) and its login
//! directory is not staged whole (`whole_directory`). Then:
//! - the container gets the attempt's placeholder under that same name, and the CLI's
//!   base-URL variable (its descriptor's `gateway.base_url_var`) pointing at the gateway;
//! - the identity's own value of the base-URL variable, if it names one, becomes the
//!   gateway's upstream (else the provider's real host);
//! - every model credential of the overlay (any agent type's names) is removed from the
//!   container, and the CLI's login files ([`crate::identity::credential_files`]) are not
//!   staged; what sits beside them (`~/.claude.json`, account state, no token) still is.
//!
//! Not protected (the real credential is staged as before and `doctor` says so): a CLI
//! logged in through its login files only (Claude's `.credentials.json` subscription login,
//! Codex's ChatGPT `auth.json`, Gemini's Google OAuth, Kimi's OAuth), or a login directory
//! staged whole. A Claude subscription goes through the gateway as an OAuth token:
//! `claude setup-token` prints one; give it as `CLAUDE_CODE_OAUTH_TOKEN`.

use crate::domain::{AgentType, EnvVar, VolumeMount};

use crate::gateway::Api;

/// Credential kinds of a variable (each CLI's descriptor says which its variables hold).
pub use crate::agents::CredentialKind as Kind;

/// The variables each CLI reads its model credential from, in the order they are tried
/// (its descriptor's `gateway`; none when the gateway cannot stand in for its API).
pub fn credential_vars(agent: AgentType) -> &'static [(&'static str, Kind)] {
    crate::agents::descriptor(agent)
        .gateway
        .map_or(&[], |g| g.credential_vars)
}

/// Every model-credential variable name any CLI reads (removed from a protected container).
fn all_credential_vars() -> impl Iterator<Item = &'static str> {
    AgentType::ALL
        .iter()
        .flat_map(|a| credential_vars(*a).iter().map(|(n, _)| *n))
        .chain(["ANTHROPIC_AUTH_TOKEN"])
}

/// How one attempt's model API goes through the gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The CLI the plan is for.
    pub agent: AgentType,
    pub api: Api,
    /// The container variable the CLI reads its credential from (gets the placeholder).
    pub credential_var: String,
    /// The host variable holding the real credential.
    pub credential_from_host: String,
    pub kind: Kind,
    /// The host variable holding the upstream base URL, when the identity names one.
    pub upstream_from_host: Option<String>,
    /// The container variable the gateway's URL goes in.
    pub base_url_var: &'static str,
    /// Overlay entries the container keeps (no model credential, no base URL).
    pub env_overlay: Vec<EnvVar>,
    /// Mounts the container keeps (no login file of the CLI).
    pub volume_mounts: Vec<VolumeMount>,
}

/// Why an attempt's CLI is not gateway-protected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unprotected {
    /// No `api_keys` entry under a name the CLI reads: it logs in with its files.
    LoginFilesOnly,
    /// The login directory is staged whole (`whole_directory`).
    WholeDirectory,
    /// The gateway cannot stand in for the CLI's model API (its descriptor has no
    /// `gateway`).
    NotSupported,
}

impl Unprotected {
    pub fn explain(&self, agent: AgentType) -> String {
        let names: Vec<&str> = credential_vars(agent).iter().map(|(n, _)| *n).collect();
        match self {
            Unprotected::LoginFilesOnly => format!(
                "{agent} logs in with its login files, which are staged in the container: not gateway-protected (give the identity an api_keys entry {}{})",
                names.join(" or "),
                crate::agents::descriptor(agent)
                    .gateway
                    .map_or("", |g| g.login_files_hint)
            ),
            Unprotected::WholeDirectory => format!(
                "{agent}'s login directory is staged whole (whole_directory): not gateway-protected"
            ),
            Unprotected::NotSupported => format!(
                "the gateway cannot stand in for {agent}'s model API: not gateway-protected (its key goes into the container)"
            ),
        }
    }
}

/// Decides the plan for `agent` from the identity's overlay and mounts.
pub fn plan(
    agent: AgentType,
    overlay: &[EnvVar],
    mounts: &[VolumeMount],
) -> Result<Plan, Unprotected> {
    let gateway = crate::agents::descriptor(agent)
        .gateway
        .ok_or(Unprotected::NotSupported)?;
    let staging = crate::identity::staging_path(agent);
    if mounts.iter().any(|m| m.container_path == staging) {
        return Err(Unprotected::WholeDirectory);
    }
    let (var, kind) = gateway
        .credential_vars
        .iter()
        .find_map(|(name, kind)| overlay.iter().find(|v| v.name == *name).map(|v| (v, *kind)))
        .ok_or(Unprotected::LoginFilesOnly)?;
    let base_var = gateway.base_url_var;
    let upstream_from_host = overlay
        .iter()
        .find(|v| v.name == base_var)
        .map(|v| v.from_host.clone());
    let env_overlay = overlay
        .iter()
        .filter(|v| v.name != base_var && !all_credential_vars().any(|n| n == v.name))
        .cloned()
        .collect();
    let login_files: Vec<String> = crate::identity::credential_files(agent)
        .iter()
        .map(|f| format!("{staging}/{f}"))
        .collect();
    let volume_mounts = mounts
        .iter()
        .filter(|m| !login_files.contains(&m.container_path))
        .cloned()
        .collect();
    Ok(Plan {
        agent,
        api: gateway.api,
        credential_var: var.name.clone(),
        credential_from_host: var.from_host.clone(),
        kind,
        upstream_from_host,
        base_url_var: base_var,
        env_overlay,
        volume_mounts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn var(name: &str, from: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            from_host: from.into(),
        }
    }

    fn mount(container: &str) -> VolumeMount {
        VolumeMount {
            host_path: "/h/x".into(),
            container_path: container.into(),
            read_only: true,
        }
    }

    #[test]
    fn a_claude_key_goes_through_and_every_model_credential_leaves_the_container() {
        let overlay = vec![
            var("ANTHROPIC_API_KEY", "WORK_ANTHROPIC"),
            var("ANTHROPIC_BASE_URL", "WORK_URL"),
            var("OPENAI_API_KEY", "WORK_OPENAI"),
            var("ANTHROPIC_AUTH_TOKEN", "T"),
            var("NPM_TOKEN", "WORK_NPM"),
        ];
        let mounts = vec![
            mount("/polyphony/credentials/.claude/.credentials.json"),
            mount("/polyphony/credentials/.claude.json"),
            mount("/mirror/objects"),
        ];
        let p = plan(AgentType::Claude, &overlay, &mounts).unwrap();
        assert_eq!(p.api, Api::Anthropic);
        assert_eq!(p.credential_var, "ANTHROPIC_API_KEY");
        assert_eq!(p.credential_from_host, "WORK_ANTHROPIC");
        assert_eq!(p.kind, Kind::ApiKey);
        assert_eq!(p.upstream_from_host.as_deref(), Some("WORK_URL"));
        assert_eq!(p.base_url_var, "ANTHROPIC_BASE_URL");
        // Only what is no model credential stays (the operator's own names).
        assert_eq!(p.env_overlay, vec![var("NPM_TOKEN", "WORK_NPM")]);
        assert_eq!(
            p.volume_mounts,
            vec![
                mount("/polyphony/credentials/.claude.json"),
                mount("/mirror/objects")
            ]
        );
    }

    #[test]
    fn oauth_tokens_logins_and_whole_directories() {
        let p = plan(
            AgentType::Claude,
            &[var("CLAUDE_CODE_OAUTH_TOKEN", "SUB")],
            &[],
        )
        .unwrap();
        assert_eq!(p.kind, Kind::OAuthToken);
        assert_eq!(p.upstream_from_host, None);
        // A key for another CLI does not protect this one.
        assert_eq!(
            plan(AgentType::Codex, &[var("ANTHROPIC_API_KEY", "K")], &[]),
            Err(Unprotected::LoginFilesOnly)
        );
        assert_eq!(
            plan(
                AgentType::Claude,
                &[var("ANTHROPIC_API_KEY", "K")],
                &[mount("/polyphony/credentials/.claude")]
            ),
            Err(Unprotected::WholeDirectory)
        );
        let p = plan(
            AgentType::Codex,
            &[var("OPENAI_API_KEY", "O")],
            &[
                mount("/polyphony/credentials/.codex/auth.json"),
                mount("/polyphony/credentials/.codex/config.toml"),
            ],
        )
        .unwrap();
        assert_eq!(p.api, Api::OpenAiResponses);
        assert!(p.volume_mounts.is_empty());
        for (agent, name, api) in [
            (AgentType::Gemini, "GEMINI_API_KEY", Api::Gemini),
            (AgentType::Kimi, "KIMI_API_KEY", Api::OpenAiChat),
        ] {
            let p = plan(agent, &[var(name, "H")], &[]).unwrap();
            assert_eq!(p.api, api);
        }
        assert!(Unprotected::LoginFilesOnly
            .explain(AgentType::Claude)
            .contains("claude setup-token"));
    }
}
