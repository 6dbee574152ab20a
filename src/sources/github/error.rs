//! The error of every GitHub call, typed so callers can branch on it.
//!
//! Owns: `GithubError` and its two questions (config error → exit 2; outcome unknown →
//! look before posting again). Must not: carry the token's value in any variant.

/// Failure of a GitHub call.
#[derive(Debug, thiserror::Error)]
pub enum GithubError {
    #[error("no GitHub token found: tried {}; export a token with `repo` scope in one of them (or set `github_token_env` on the identity)", tried.join(", "))]
    MissingToken { tried: Vec<String> },
    #[error("the identity's `github_token_env` names ${var}, which is unset or empty: export the token as {var} (Polyphony never falls back to GITHUB_TOKEN for a named account)")]
    IdentityTokenUnset { var: String },
    #[error("the GitHub token in ${var} contains characters an HTTP header cannot carry (a newline or a control character?); re-export it without them")]
    InvalidToken { var: String },
    #[error("invalid GitHub API URL `{url}` (from GITHUB_API_URL): {reason}; export GITHUB_API_URL as an absolute URL such as https://api.github.com, or unset it")]
    InvalidApiUrl { url: String, reason: String },
    #[error("invalid repository `{value}`: {reason} (expected owner/name, e.g. octo-org/widgets)")]
    InvalidRepo { value: String, reason: String },
    #[error("GitHub rejected the token from ${token_var} (401 Unauthorized at {api_url}): it is missing, expired or revoked; create a new token with `repo` scope and export it as {token_var}")]
    Unauthorized { token_var: String, api_url: String },
    #[error("GitHub refused {what} (403 Forbidden): {message}; check that the token in ${token_var} has `repo` scope and write access")]
    Forbidden {
        what: String,
        token_var: String,
        message: String,
    },
    #[error("{what}: not found (404); check the name in `github.repos` and that the token in ${token_var} can see it")]
    NotFound { what: String, token_var: String },
    #[error("GitHub rate limit while {what}: it resets in {wait_secs}s, longer than the {max_wait_secs}s this client waits; the next poll tries again")]
    RateLimited {
        what: String,
        wait_secs: u64,
        max_wait_secs: u64,
    },
    #[error("GitHub answered {status} while {what} (after {attempts} tries)")]
    Server {
        what: String,
        status: u16,
        attempts: u32,
    },
    #[error("could not reach GitHub while {what}: {message}")]
    Transport { what: String, message: String },
    #[error("GitHub answered {status} while {what}: {message}")]
    Api {
        what: String,
        status: u16,
        message: String,
    },
    #[error("unexpected GitHub answer while {what}: {message}")]
    Decode { what: String, message: String },
    #[error("GitHub's next-page link while {what} points to `{link}`, outside the API at {api_url}; refusing to send the token there")]
    ForeignLink {
        what: String,
        link: String,
        api_url: String,
    },
}

impl GithubError {
    /// `true` for failures only the operator can fix (token, repository name, URL): the CLI
    /// maps these to exit code 2.
    pub fn is_config_error(&self) -> bool {
        matches!(
            self,
            GithubError::MissingToken { .. }
                | GithubError::IdentityTokenUnset { .. }
                | GithubError::InvalidToken { .. }
                | GithubError::InvalidApiUrl { .. }
                | GithubError::InvalidRepo { .. }
                | GithubError::Unauthorized { .. }
                | GithubError::Forbidden { .. }
                | GithubError::NotFound { .. }
        )
    }

    /// `true` when the request may have taken effect (a POST answered by 5xx or lost in
    /// transit): the caller must look before posting again.
    pub fn outcome_unknown(&self) -> bool {
        matches!(
            self,
            GithubError::Server { .. } | GithubError::Transport { .. }
        )
    }
}

impl GithubError {
    /// What kind of source failure this is, for callers that do not name GitHub.
    pub fn failure(&self) -> crate::sources::SourceFailure {
        use crate::sources::SourceFailure;
        match self {
            GithubError::Unauthorized { .. } | GithubError::Forbidden { .. } => {
                SourceFailure::RefusedCredentials
            }
            e if e.is_config_error() => SourceFailure::Config,
            GithubError::Server { .. }
            | GithubError::Transport { .. }
            | GithubError::RateLimited { .. } => SourceFailure::Transient,
            _ => SourceFailure::Other,
        }
    }
}

impl From<GithubError> for crate::sources::SourceError {
    fn from(e: GithubError) -> Self {
        crate::sources::SourceError::Tracker(crate::sources::TrackerError::new(e.failure(), e))
    }
}

impl From<GithubError> for crate::sources::ClaimError {
    fn from(e: GithubError) -> Self {
        crate::sources::ClaimError::Source(e.into())
    }
}
