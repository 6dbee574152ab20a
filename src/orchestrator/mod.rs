//! The supervisor: the attempt pipeline with proof of work and retries, landing, the
//! daemon loop and reconciliation after a crash (spec §2–§12, DESIGN.md).
//!
//! [`Orchestrator`] holds what every attempt shares (config with its parsed prompt
//! template, Docker, workspaces, router, GitHub source). [`pipeline`] takes one claimed task through one
//! attempt; [`daemon`] runs many of them and recovers after a restart, finishing the
//! side effects a kill left half-done through `intents` (issue 19).
//!
//! Architecture Invariant: the orchestrator decides *what happens next* only through the
//! pure modules ([`retry`], [`proof`], `domain::state`, `routing`); it changes task state
//! only through `Store::transition` / claims, so every change has its transition row.
//! Architecture Invariant: landing is idempotent: a restart finds the pushed branch, the
//! open PR and the comments again instead of creating new ones.

pub mod cancel;
pub mod clock;
pub mod daemon;
pub mod drive;
pub mod execute;
pub mod facts;
pub mod failure;
pub mod gateway;
pub mod gateway_plan;
pub mod generation;
mod intents;
pub mod land;
pub mod pipeline;
pub mod progress;
pub mod proof;
pub mod quota;
pub mod restarts;
pub mod retry;
pub mod secrets;
pub mod shepherd;
mod sink;
pub mod verify;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use chrono::{DateTime, Utc};

use crate::config::Config;
use crate::routing::Router;
use crate::runtime::{DockerRuntime, WorkerRuntime};
use crate::sources::github::{
    resolve_token, FaultPolicy, GithubClient, GithubSettings, GithubSource, ResolvedToken,
};
use crate::workspace::WorkspaceManager;

pub use pipeline::AttemptEnd;
pub use progress::{Progress, QuietProgress, RecordingProgress};
pub use retry::RetryPolicy;

/// Looks up a host environment variable (injectable for tests).
pub type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

pub use clock::Clock;

/// What every attempt shares.
pub struct Orchestrator {
    pub config: Arc<Config>,
    pub runtime: Arc<dyn WorkerRuntime>,
    pub workspaces: Arc<WorkspaceManager>,
    pub router: Router,
    /// Present when GitHub is configured (repos to poll) or a token is available.
    pub github: Option<Arc<GithubSource>>,
    /// The GitHub token (for pushes to GitHub remotes and for scrubbing).
    pub github_token: Option<ResolvedToken>,
    /// `polyphony.home` label value of this home.
    pub home_label: String,
    /// `uid:gid` containers run as unless a profile says otherwise.
    pub default_user: String,
    pub policy: RetryPolicy,
    pub env: EnvLookup,
    pub clock: Clock,
    /// What running attempts' model-API gateways metered so far (budgets across attempts).
    pub(crate) spend: Arc<gateway::LiveSpend>,
}

impl Orchestrator {
    /// Now, by the orchestrator's clock ([`clock`]).
    pub fn now(&self) -> DateTime<Utc> {
        (self.clock)()
    }

    /// Connects to Docker and prepares everything from the loaded config.
    pub async fn connect(config: Config) -> anyhow::Result<Orchestrator> {
        let runtime = DockerRuntime::connect()
            .await
            .context("cannot start attempts without a Docker engine")?;
        let env: EnvLookup = Arc::new(|name: &str| std::env::var(name).ok());
        Orchestrator::with_runtime(config, Arc::new(runtime), env)
    }

    /// Builds the orchestrator over a given runtime and environment.
    pub fn with_runtime(
        config: Config,
        runtime: Arc<dyn WorkerRuntime>,
        env: EnvLookup,
    ) -> anyhow::Result<Orchestrator> {
        let agent_names: Vec<&str> = config.agents().iter().map(|a| a.name.as_str()).collect();
        let router = Router::compile(config.routing(), &agent_names)
            .map_err(|e| anyhow::anyhow!("routing.yaml: {e}"))?;
        let workspaces = WorkspaceManager::new(config.workspace_root(), config.mirror_root())
            .with_clone_mode(config.global().git.clone_mode);
        let token_var = github_token_var(&config);
        let github_token = resolve_token(token_var.as_deref(), |n| env(n)).ok();
        let github = if config.global().github.repos.is_empty() && github_token.is_none() {
            None
        } else {
            let lookup = |n: &str| env(n);
            let client =
                GithubClient::from_env(token_var.as_deref(), lookup, FaultPolicy::default());
            match client {
                Ok(client) => {
                    let settings = GithubSettings::from_config(
                        &config.global().github,
                        &config.global().repos,
                    )?;
                    Some(Arc::new(GithubSource::new(client, settings)))
                }
                // Without repos to poll a missing token only matters for GitHub tasks,
                // which then fail with this error.
                Err(e) if config.global().github.repos.is_empty() => {
                    tracing::debug!(error = %e, "no GitHub client");
                    None
                }
                Err(e) => return Err(e.into()),
            }
        };
        let home_label = crate::runtime::home_label(config.home());
        let default_user = crate::runtime::default_container_user();
        let policy = RetryPolicy {
            max_attempts: config.max_attempts(),
            ..RetryPolicy::default()
        };
        Ok(Orchestrator {
            config: Arc::new(config),
            runtime,
            workspaces: Arc::new(workspaces),
            router,
            github,
            github_token,
            home_label,
            default_user,
            policy,
            env,
            clock: clock::system(),
            spend: Arc::default(),
        })
    }

    pub fn home(&self) -> &Path {
        self.config.home()
    }

    pub fn db_path(&self) -> PathBuf {
        self.config.db_path()
    }

    /// The GitHub source, or an error that says how to configure it.
    pub fn github(&self) -> anyhow::Result<&GithubSource> {
        self.github.as_deref().ok_or_else(|| {
            // Say what is actually wrong (a bad GITHUB_API_URL, an unusable token, the unset
            // variable a named identity needs) when building the client again shows it
            // (issues 11, 12).
            let var = github_token_var(&self.config);
            let lookup = |n: &str| (self.env)(n);
            if let Err(e) = GithubClient::from_env(var.as_deref(), lookup, FaultPolicy::default()) {
                if !matches!(e, crate::sources::GithubError::MissingToken { .. }) {
                    return anyhow::Error::new(e);
                }
            }
            anyhow::Error::new(crate::error::UsageError::new(
                "GitHub is not configured: no token was found",
                "export GITHUB_TOKEN (or GH_TOKEN, or the variable your identity's \
                 github_token_env names); set GITHUB_API_URL for GitHub Enterprise",
            ))
        })
    }
}

/// The variable the default identity names for its GitHub token, if any.
fn github_token_var(config: &Config) -> Option<String> {
    let identity = match config.global().default_identity.as_deref() {
        Some(name) => config.identity(name),
        None if config.identities().len() == 1 => config.identities().first(),
        None => None,
    };
    identity.and_then(|i| i.github_token_env.clone())
}
