//! What the gateway in an attempt's egress proxy is told (pure): [`GatewaySpec`], written
//! by the daemon into the proxy's JSON config, and the two files of its private directory.
//!
//! The real credential is never in the spec (the config is the proxy container's
//! environment, which `docker inspect` shows): the daemon writes it to [`CREDENTIAL_FILE`]
//! (0600, owned by the proxy's user) in a directory of its own home that is bind-mounted
//! read-only into the proxy only, at [`CONTAINER_DIR`]. The proxy reads it once, before it
//! says `ready`; the daemon then deletes the file, so afterwards the key lives only in the
//! proxy's memory. [`BUDGET_FILE`] in the same directory is rewritten by the daemon while
//! the attempt runs: what is left of the identity's daily budget, other running attempts'
//! metered spend subtracted (docs/SECURITY.md "Model-API gateway").

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::auth::Credential;
use super::pricing::{picos_of_usd, Price, PriceTable};
use super::proxy::GatewaySettings;
use super::Api;

/// Where the gateway's directory is mounted in the proxy container.
pub const CONTAINER_DIR: &str = "/run/polyphony-gateway";
/// The real credential, one line.
pub const CREDENTIAL_FILE: &str = "credential";
/// [`BudgetFile`] as JSON.
pub const BUDGET_FILE: &str = "budget.json";

/// How the real credential is presented upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CredentialKind {
    ApiKey,
    OauthToken,
}

impl CredentialKind {
    pub fn with(self, secret: String) -> Credential {
        match self {
            CredentialKind::ApiKey => Credential::ApiKey(secret),
            CredentialKind::OauthToken => Credential::OAuthToken(secret),
        }
    }
}

/// The gateway's settings without the secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewaySpec {
    pub api: Api,
    /// `scheme://host[:port][/prefix]`, the operator's (not checked against the allowlist).
    pub upstream: String,
    pub kind: CredentialKind,
    /// The attempt's placeholder (the agent holds it too; it is worth nothing elsewhere).
    pub placeholder: String,
    /// `gateway.prices` of config.yaml, laid over the shipped defaults.
    #[serde(default)]
    pub prices: BTreeMap<String, Price>,
    /// `max_cost_usd_per_attempt`.
    #[serde(default)]
    pub attempt_budget_usd: Option<f64>,
    /// The identity's daily remainder when the attempt started (used until the daemon
    /// writes [`BUDGET_FILE`]).
    #[serde(default)]
    pub daily_left_usd: Option<f64>,
    #[serde(default)]
    pub budget_resets_at: Option<DateTime<Utc>>,
    /// The directory holding [`CREDENTIAL_FILE`] and [`BUDGET_FILE`].
    #[serde(default = "default_dir")]
    pub dir: String,
}

fn default_dir() -> String {
    CONTAINER_DIR.to_string()
}

impl GatewaySpec {
    /// The settings the gateway runs with, given the secret read from its file.
    pub fn settings(&self, secret: String) -> GatewaySettings {
        GatewaySettings {
            api: self.api,
            upstream: self.upstream.clone(),
            credential: self.kind.with(secret),
            placeholder: self.placeholder.clone(),
            prices: PriceTable::with_overrides(&self.prices),
            attempt_budget: self.attempt_budget_usd.map(picos_of_usd),
            budget_resets_at: self.budget_resets_at,
        }
    }
}

/// What the daemon writes to [`BUDGET_FILE`]: the identity's daily remainder for this
/// attempt, every other running attempt's metered spend already subtracted (the gateway
/// subtracts its own). `None`: no ceiling.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BudgetFile {
    pub daily_left_usd: Option<f64>,
}

/// The secret in a credential file's text (trailing newline and spaces dropped); `None`
/// when empty.
pub fn secret_of(text: &str) -> Option<String> {
    let s = text.trim();
    (!s.is_empty()).then(|| s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_round_trips_and_makes_settings_without_holding_the_secret() {
        let spec = GatewaySpec {
            api: Api::Anthropic,
            upstream: "https://api.anthropic.com".into(),
            kind: CredentialKind::OauthToken,
            placeholder: "polyphony-gw-00".into(),
            prices: BTreeMap::new(),
            attempt_budget_usd: Some(2.0),
            daily_left_usd: Some(1.5),
            budget_resets_at: None,
            dir: CONTAINER_DIR.into(),
        };
        let json = serde_json::to_string(&spec).unwrap();
        assert!(!json.contains("sk-"), "{json}");
        let back: GatewaySpec = serde_json::from_str(&json).unwrap();
        assert_eq!(back, spec);
        let s = back.settings(secret_of("sk-real\n").unwrap());
        assert_eq!(s.credential, Credential::OAuthToken("sk-real".into()));
        assert_eq!(s.attempt_budget, Some(2_000_000_000_000));
        assert_eq!(secret_of(" \n"), None);
        let b: BudgetFile = serde_json::from_str(r#"{"daily_left_usd":null}"#).unwrap();
        assert_eq!(b.daily_left_usd, None);
    }
}
