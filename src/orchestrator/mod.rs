//! The supervisor: the attempt pipeline with proof of work and retries, landing, the
//! daemon loop and reconciliation after a crash (spec §2–§12, DESIGN.md).
//!
//! [`Orchestrator`] holds what every attempt shares (config with its parsed prompt
//! template, Docker, workspaces, router, the sources behind the `sources::Source` port,
//! the clock). [`pipeline`] takes one claimed task through one attempt; [`daemon`] runs
//! many of them and recovers after a restart, finishing the side effects a kill left
//! half-done through `intents` (issue 19).
//!
//! Architecture Invariant: the orchestrator decides *what happens next* only through the
//! pure modules ([`retry`], [`proof`], [`failure`], `domain::state`, `routing`); it
//! changes task state only through `Store::transition`, `settle_failure`,
//! `transition_completing` and claims, so every change has its transition row, and every
//! reason it writes passes the scrubber first.
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
pub mod lease;
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
use crate::sources::github::GithubSource;
use crate::sources::{Source, Sources};
use crate::store::{StoreError, StoreHandle};
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
    /// Where the queue lives, built once from the config (issue 27): every store
    /// connection of the daemon and its attempts is opened through it.
    pub store: StoreHandle,
    /// Where tasks come from and are reported to, one per `SourceKind`: the pipeline
    /// asks the source of each task (`sources.of(&task)`).
    pub sources: Sources,
    /// The GitHub source, for the PR shepherd (GitHub's alone); present when GitHub is
    /// configured (repos to poll) or a token is available.
    pub github: Option<Arc<GithubSource>>,
    /// `polyphony.home` label value of this home.
    pub home_label: String,
    /// `uid:gid` containers run as unless a profile says otherwise.
    pub default_user: String,
    pub policy: RetryPolicy,
    pub env: EnvLookup,
    pub clock: Clock,
    /// What running attempts' model-API gateways metered so far (budgets across attempts).
    pub(crate) spend: Arc<gateway::LiveSpend>,
    /// This process as the owner of its claims in a fleet, its lease settings and its last
    /// renewal (issue 27, [`lease`]).
    pub leases: Arc<lease::Leases>,
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
        let store = StoreHandle::for_config(&config, |n| env(n))?;
        let (sources, github) = crate::sources::for_home(&config, env.clone())?;
        let home_label = crate::runtime::home_label(config.home());
        let default_user = crate::runtime::default_container_user();
        let policy = RetryPolicy {
            max_attempts: config.max_attempts(),
            ..RetryPolicy::default()
        };
        let machine = lease::machine_id(&config);
        let leases = Arc::new(lease::Leases::new(
            crate::store::Owner::this_process(machine),
            config.store_lease(),
            config.store_heartbeat(),
        ));
        Ok(Orchestrator {
            config: Arc::new(config),
            runtime,
            workspaces: Arc::new(workspaces),
            router,
            store,
            sources,
            github,
            home_label,
            default_user,
            policy,
            env,
            clock: clock::system(),
            spend: Arc::default(),
            leases,
        })
    }

    /// Who this daemon claims tasks as at their source (the GitHub claim comment's `by=`):
    /// the fleet's one id on a shared store (issue 27: a task another daemon of the fleet
    /// claimed and this one took over is still ours), else this home's label.
    pub(crate) fn claimant(&self, store: &crate::store::Store) -> Result<String, StoreError> {
        let candidate = format!("fleet-{}", self.leases.owner.nonce);
        Ok(store
            .fleet_claimant(&candidate, self.now())?
            .unwrap_or_else(|| self.home_label.clone()))
    }

    pub fn home(&self) -> &Path {
        self.config.home()
    }

    pub fn db_path(&self) -> PathBuf {
        self.config.db_path()
    }

    /// `source` serves the tasks of its kind from now on (tests: `sources::memory`).
    pub fn with_source(mut self, source: Arc<dyn Source>) -> Orchestrator {
        self.sources = self.sources.clone().with(source);
        self
    }

    /// The GitHub source (for the PR shepherd), or an error that says how to configure it.
    pub fn github(&self) -> anyhow::Result<&GithubSource> {
        self.github.as_deref().ok_or_else(|| {
            let var = crate::sources::github::token_var(&self.config);
            crate::sources::github::not_configured(var.as_deref(), &*self.env)
        })
    }
}
