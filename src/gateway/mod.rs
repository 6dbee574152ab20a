//! The model-API gateway (issue 26): a reverse proxy per attempt between the agent's CLI and
//! its provider, so the container never holds the real credential and cost and limits are
//! read from the provider's own answers, not from what the agent prints.
//!
//! The CLI is pointed at the gateway (Claude Code: `ANTHROPIC_BASE_URL`; Codex: a model
//! provider's `base_url`; Gemini CLI: `GOOGLE_GEMINI_BASE_URL`; Kimi CLI: `KIMI_BASE_URL`)
//! and given the attempt's placeholder where its key would go. For each request the gateway:
//! 1. accepts only that attempt's placeholder ([`auth`]);
//! 2. estimates the worst case the request can cost and refuses it, with an answer the CLI
//!    shows as a limit, when the attempt's or the identity's remaining budget cannot cover
//!    it ([`budget`]);
//! 3. swaps in the identity's real key or OAuth token and forwards to the real host over TLS
//!    (rustls), streaming the answer back byte for byte, never buffered;
//! 4. reads tokens from the answer as it passes ([`usage`]), prices them ([`pricing`]) and
//!    takes a refused answer's reset instant from its headers ([`limits`]);
//! 5. reports each request (method, path, model, status, tokens, cost, duration; never a
//!    header value or a body) to its [`Hooks`].
//!
//! Where it runs: inside the attempt's egress proxy container (`egress::proxy`, port 3129
//! on the attempt's internal network), configured by a [`GatewaySpec`]; the container
//! outlives the daemon, so a re-attached attempt keeps its gateway. Under `egress: open`
//! or `none` there is no proxy and the daemon hosts it (`orchestrator::gateway`).
//!
//! Pure: `auth`, `usage`, `pricing`, `budget`, `limits`, `spec`. IO: `proxy` (axum in,
//! hyper + rustls out).

pub mod auth;
pub mod budget;
pub mod limits;
pub mod pricing;
pub mod proxy;
pub mod spec;
pub mod usage;

use crate::domain::AgentType;

pub use auth::{new_placeholder, Credential};
pub use pricing::{Picos, Price, PriceTable};
pub use proxy::{start, GatewayHandle, GatewaySettings, Hooks, Meter, NoHooks, RequestRecord};
pub use spec::{BudgetFile, CredentialKind, GatewaySpec};
pub use usage::Usage;

/// The wire protocol of a provider's API (each CLI's descriptor names the one it speaks).
pub use crate::agents::WireApi as Api;

impl Api {
    /// The API `agent`'s CLI speaks when it uses an API key; `None` when the gateway cannot
    /// stand in for it (its descriptor has no `gateway`).
    pub fn of(agent: AgentType) -> Option<Api> {
        crate::agents::descriptor(agent).gateway.map(|g| g.api)
    }

    /// The real host, when the config names no other. A request's path is appended to it
    /// unchanged.
    pub fn default_upstream(self) -> &'static str {
        match self {
            Api::Anthropic => "https://api.anthropic.com",
            Api::OpenAiResponses => "https://api.openai.com",
            Api::OpenAiChat => "https://api.moonshot.ai",
            Api::Gemini => "https://generativelanguage.googleapis.com",
        }
    }

    /// What follows the gateway's address in the base URL the CLI is given (the CLIs that
    /// take an OpenAI-style base URL expect its `/v1`).
    pub fn cli_base_suffix(self) -> &'static str {
        match self {
            Api::Anthropic | Api::Gemini => "",
            Api::OpenAiResponses | Api::OpenAiChat => "/v1",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Api::Anthropic => "anthropic",
            Api::OpenAiResponses => "openai_responses",
            Api::OpenAiChat => "openai_chat",
            Api::Gemini => "gemini",
        }
    }
}
