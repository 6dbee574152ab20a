//! Configuration: the four YAML files under `$POLYPHONY_HOME` (spec §11) loaded into a
//! validated, resolved [`Config`].
//!
//! Owns: home resolution (`--home`, then `POLYPHONY_HOME`, then `~/.polyphony`), reading
//! the files, `~`/`$VAR` expansion, duration and memory parsing, cross-file validation
//! (every agent, identity and predicate a file names must exist and parse) and the
//! embedded templates `init` writes. Every error is a [`ConfigError`] naming file, line,
//! column and a one-line fix.
//!
//! Missing files mean defaults: `config.yaml` -> [`GlobalConfig::default`],
//! `identities.yaml` -> no identities, `agents.yaml` -> one default profile per agent
//! type (claude, codex, kimi, gemini), `routing.yaml` -> no rules and a default rule to
//! the first agent with the others as fallback. A file that exists but lists no agents
//! is an error, since nothing could run.
//!
//! Must not: touch the store, the network or Docker; decide routing (that is `routing/`).
//! API Boundary: [`Config`] and its accessors.

pub mod bounds;
mod checks;
mod consent;
mod doc;
mod egress;
pub mod error;
mod load;
pub mod locate;
pub mod model;
mod profiles;
pub mod quota;
mod resolve;
pub mod retention;
mod rules;
pub mod shepherd;
pub mod templates;
pub mod values;
mod yaml;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use globset::GlobMatcher;
use serde::Serialize;

use crate::agents::prompt::PromptTemplate;
use crate::domain::{
    AgentProfile, AgentType, Identity, NetworkMode, ResourceLimits, VerifyCommand,
};
pub use checks::{check_branch_prefix, check_image_ref};
use doc::{Doc, Docs};
pub use error::{ConfigError, ConfigErrorKind};
pub use load::{home_from_env, resolve_home, ConfigSources};
pub use model::{GlobalConfig, HttpConfig, RepoConfig, RoutingFile};

/// The config files, in the order they are loaded.
pub const CONFIG_FILE: &str = "config.yaml";
pub const IDENTITIES_FILE: &str = "identities.yaml";
pub const AGENTS_FILE: &str = "agents.yaml";
pub const ROUTING_FILE: &str = "routing.yaml";
pub const FILES: [&str; 4] = [CONFIG_FILE, IDENTITIES_FILE, AGENTS_FILE, ROUTING_FILE];

/// Proof-of-work settings for one repository: the global `verify` section with the
/// first matching `repos` entry laid over it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifySettings {
    pub test: Option<String>,
    pub lint: Option<String>,
    pub typecheck: Option<String>,
    #[serde(with = "secs")]
    pub timeout: Duration,
    pub image: Option<String>,
    pub protected_paths: Vec<String>,
    /// `verify.max_file_size` in bytes.
    pub max_file_bytes: u64,
    pub protect_check_scripts: bool,
    pub allow_submodules: bool,
    pub allow_attribute_filters: bool,
    /// `verify.max_changed_files`.
    pub max_changed_files: usize,
}

impl VerifySettings {
    /// The configured checks in a fixed order (test, lint, typecheck).
    pub fn commands(&self) -> Vec<VerifyCommand> {
        [
            ("test", &self.test),
            ("lint", &self.lint),
            ("typecheck", &self.typecheck),
        ]
        .into_iter()
        .filter_map(|(name, cmd)| {
            cmd.as_ref().map(|c| VerifyCommand {
                name: name.to_string(),
                command: c.clone(),
                timeout_seconds: self.timeout.as_secs(),
            })
        })
        .collect()
    }
}

mod secs {
    pub fn serialize<S: serde::Serializer>(
        d: &std::time::Duration,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_secs())
    }
}

/// Validated configuration with every path, duration and size resolved.
///
/// Invariant: only built by [`Config::load`] / [`Config::from_sources`], so every agent
/// and identity any rule, profile or default names exists, and every predicate value
/// parses with the domain's `FromStr`.
#[derive(Debug, Clone)]
///
/// The fields are private so nothing outside `config` can change a `Config` after it was
/// validated; read them through the accessors.
pub struct Config {
    home: PathBuf,
    global: GlobalConfig,
    identities: Vec<Identity>,
    agents: Vec<AgentProfile>,
    routing: RoutingFile,
    /// The prompt template, parsed once at load (the built-in one when none is set).
    prompt: PromptTemplate,
    resolved: Resolved,
    /// Unsafe settings accepted by `allow_unsafe: true` (empty otherwise: without consent
    /// they fail the load). `doctor` and `config check` print one warning per item.
    unsafe_settings: Vec<ConfigError>,
}

#[derive(Debug, Clone)]
struct Resolved {
    workspace_root: PathBuf,
    mirror_root: PathBuf,
    poll_interval: Duration,
    /// `store.lease` and `store.heartbeat`, parsed (defaults filled in).
    lease: Duration,
    heartbeat: Duration,
    event_idle_timeout: Duration,
    container_deadline: Duration,
    verify_timeout: Duration,
    /// `verify.max_file_size`, parsed.
    max_file_bytes: u64,
    prompt_template: Option<PathBuf>,
    limits: ResourceLimits,
    network: NetworkMode,
    /// `container.max_output` and `container.max_workspace_size`, in bytes.
    max_output_bytes: u64,
    max_workspace_bytes: u64,
    /// Parallel to `global.repos`.
    repo_globs: Vec<GlobMatcher>,
    /// Parallel to `global.repos`: each entry's `verify.timeout`, parsed.
    repo_verify_timeouts: Vec<Option<Duration>>,
    /// Which files existed (`true`) or were defaulted (`false`).
    files: BTreeMap<&'static str, bool>,
}

impl Config {
    /// The Polyphony home these files were read from.
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// `config.yaml` as written (defaults filled in); resolved values have accessors.
    pub fn global(&self) -> &GlobalConfig {
        &self.global
    }

    /// `identities.yaml`, validated, in file order.
    pub fn identities(&self) -> &[Identity] {
        &self.identities
    }

    /// `agents.yaml` (or the default profiles), validated, in file order.
    pub fn agents(&self) -> &[AgentProfile] {
        &self.agents
    }

    /// `routing.yaml` (or the default rule), validated.
    pub fn routing(&self) -> &RoutingFile {
        &self.routing
    }

    /// The prompt template agents are given, parsed at load.
    pub fn prompt(&self) -> &PromptTemplate {
        &self.prompt
    }

    /// The unsafe settings `allow_unsafe: true` accepted, one warning each (file:line,
    /// what, fix).
    pub fn unsafe_settings(&self) -> &[ConfigError] {
        &self.unsafe_settings
    }

    pub fn workspace_root(&self) -> &Path {
        &self.resolved.workspace_root
    }

    pub fn mirror_root(&self) -> &Path {
        &self.resolved.mirror_root
    }

    pub fn poll_interval(&self) -> Duration {
        self.resolved.poll_interval
    }

    /// `store.lease`: how long a claim stays this daemon's without a renewal.
    pub fn store_lease(&self) -> Duration {
        self.resolved.lease
    }

    /// `store.heartbeat`: how often the daemon renews its leases.
    pub fn store_heartbeat(&self) -> Duration {
        self.resolved.heartbeat
    }

    /// `store.machine`: this daemon's machine id, when set.
    pub fn store_machine(&self) -> Option<&str> {
        self.global().store.machine.as_deref()
    }

    pub fn event_idle_timeout(&self) -> Duration {
        self.resolved.event_idle_timeout
    }

    /// Default wall-clock limit of one agent attempt (`container.deadline`).
    pub fn container_deadline(&self) -> Duration {
        self.resolved.container_deadline
    }

    pub fn max_attempts(&self) -> u32 {
        self.global.max_attempts
    }

    pub fn max_concurrent_agents(&self) -> u32 {
        self.global.max_concurrent_agents
    }

    /// The prompt template file, expanded; `None` means the built-in template.
    pub fn prompt_template(&self) -> Option<&Path> {
        self.resolved.prompt_template.as_deref()
    }

    /// Limits and hardening from `container` (profiles carry their own merged copy).
    pub fn default_limits(&self) -> &ResourceLimits {
        &self.resolved.limits
    }

    pub fn default_network(&self) -> &NetworkMode {
        &self.resolved.network
    }

    /// `container.max_output` in bytes.
    pub fn max_output_bytes(&self) -> u64 {
        self.resolved.max_output_bytes
    }

    /// `container.max_workspace_size` in bytes.
    pub fn max_workspace_bytes(&self) -> u64 {
        self.resolved.max_workspace_bytes
    }

    /// `gateway:` (issue 26).
    pub fn gateway(&self) -> &model::GatewayConfig {
        &self.global.gateway
    }

    /// The model price table: shipped defaults under `gateway.prices`.
    pub fn prices(&self) -> crate::gateway::PriceTable {
        crate::gateway::PriceTable::with_overrides(&self.global.gateway.prices)
    }

    /// `container.max_cost_usd_per_attempt`.
    pub fn max_cost_usd_per_attempt(&self) -> f64 {
        self.global.container.max_cost_usd_per_attempt
    }

    /// `$POLYPHONY_HOME/queue.db`.
    pub fn db_path(&self) -> PathBuf {
        db_path(&self.home)
    }

    /// `$POLYPHONY_HOME/transcripts`.
    pub fn transcripts_dir(&self) -> PathBuf {
        self.home.join("transcripts")
    }

    pub fn agent(&self, name: &str) -> Option<&AgentProfile> {
        self.agents.iter().find(|a| a.name == name)
    }

    pub fn identity(&self, name: &str) -> Option<&Identity> {
        self.identities.iter().find(|i| i.name == name)
    }

    /// The first `repos` entry whose glob matches `repo` (`owner/name`, URL or path).
    pub fn repo_config(&self, repo: &str) -> Option<&RepoConfig> {
        self.repo_index(repo).map(|i| &self.global.repos[i])
    }

    fn repo_index(&self, repo: &str) -> Option<usize> {
        self.resolved
            .repo_globs
            .iter()
            .position(|g| g.is_match(repo))
    }

    /// The base ref for `repo` from its `repos` entry, if it sets one.
    pub fn base_ref_for(&self, repo: &str) -> Option<&str> {
        self.repo_config(repo).and_then(|r| r.base_ref.as_deref())
    }

    /// Verification settings for `repo`: global `verify` overlaid with the repo entry.
    /// (`.polyphony.yaml` on the base branch is applied later, by the orchestrator.)
    pub fn verify_for(&self, repo: &str) -> VerifySettings {
        let g = &self.global.verify;
        let mut settings = VerifySettings {
            test: g.test.clone(),
            lint: g.lint.clone(),
            typecheck: g.typecheck.clone(),
            timeout: self.resolved.verify_timeout,
            image: g.image.clone(),
            protected_paths: g.protected_paths.clone(),
            max_file_bytes: self.resolved.max_file_bytes,
            protect_check_scripts: g.protect_check_scripts,
            allow_submodules: g.allow_submodules,
            allow_attribute_filters: g.allow_attribute_filters,
            max_changed_files: g.max_changed_files,
        };
        if let Some(i) = self.repo_index(repo) {
            if let Some(o) = &self.global.repos[i].verify {
                let or = |over: &Option<String>, base: &mut Option<String>| {
                    if over.is_some() {
                        *base = over.clone();
                    }
                };
                or(&o.test, &mut settings.test);
                or(&o.lint, &mut settings.lint);
                or(&o.typecheck, &mut settings.typecheck);
                or(&o.image, &mut settings.image);
                if let Some(paths) = &o.protected_paths {
                    settings.protected_paths = paths.clone();
                }
                if let Some(t) = self.resolved.repo_verify_timeouts[i] {
                    settings.timeout = t;
                }
            }
        }
        settings
    }

    /// Image agents run in for `repo` with `agent`: the repo's image, else the profile's,
    /// else `container.image`.
    pub fn image_for(&self, repo: &str, agent: &AgentProfile) -> String {
        self.repo_config(repo)
            .and_then(|r| r.image.clone())
            .or_else(|| agent.image.clone())
            .unwrap_or_else(|| self.global.container.image.clone())
    }

    /// Whether each file was read (`true`) or defaulted because it is absent (`false`).
    pub fn files(&self) -> &BTreeMap<&'static str, bool> {
        &self.resolved.files
    }

    /// The effective configuration (`config check`), in file order. Holds names of
    /// environment variables, never their values.
    pub fn effective(&self) -> EffectiveConfig<'_> {
        EffectiveConfig {
            home: &self.home,
            files: &self.resolved.files,
            resolved: EffectiveResolved {
                workspace_root: self.workspace_root(),
                mirror_root: self.mirror_root(),
                db_path: self.db_path(),
                transcripts_dir: self.transcripts_dir(),
                poll_interval_seconds: self.poll_interval().as_secs(),
                event_idle_timeout_seconds: self.event_idle_timeout().as_secs(),
                container_deadline_seconds: self.container_deadline().as_secs(),
                verify_timeout_seconds: self.resolved.verify_timeout.as_secs(),
                prompt_template: self.prompt_template(),
                limits: self.default_limits(),
                network: self.default_network(),
            },
            global: &self.global,
            identities: &self.identities,
            agents: &self.agents,
            routing: &self.routing,
        }
    }
}

/// What `config check` prints (see [`Config::effective`]).
#[derive(Debug, Serialize)]
pub struct EffectiveConfig<'a> {
    pub home: &'a Path,
    /// File name -> whether it was read (`false`: absent, defaults used).
    pub files: &'a BTreeMap<&'static str, bool>,
    pub resolved: EffectiveResolved<'a>,
    pub global: &'a GlobalConfig,
    pub identities: &'a [Identity],
    pub agents: &'a [AgentProfile],
    pub routing: &'a RoutingFile,
}

/// Paths, durations and limits after expansion and parsing.
#[derive(Debug, Serialize)]
pub struct EffectiveResolved<'a> {
    pub workspace_root: &'a Path,
    pub mirror_root: &'a Path,
    pub db_path: PathBuf,
    pub transcripts_dir: PathBuf,
    pub poll_interval_seconds: u64,
    pub event_idle_timeout_seconds: u64,
    pub container_deadline_seconds: u64,
    pub verify_timeout_seconds: u64,
    pub prompt_template: Option<&'a Path>,
    pub limits: &'a ResourceLimits,
    pub network: &'a NetworkMode,
}

/// `$POLYPHONY_HOME/queue.db`, without loading the config (enqueue and status work on a
/// home whose YAML is broken).
pub fn db_path(home: &Path) -> PathBuf {
    home.join("queue.db")
}

/// The stream format an adapter parses for each agent type (its descriptor).
pub fn default_event_protocol(t: AgentType) -> &'static str {
    crate::agents::descriptor(t).event_protocol
}

/// Context window of each CLI's default model (its descriptor).
pub fn default_context_window(t: AgentType) -> u64 {
    crate::agents::descriptor(t).default_context_window
}

#[cfg(test)]
mod tests;
