//! The typed shape of the four YAML files under `$POLYPHONY_HOME` (spec §11).
//!
//! Every struct denies unknown fields so a typo is an error that names the field.
//! Durations are strings like `30s`, `5m`, `1h30m` (humantime); paths may use `~` and `$VAR`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

// ---------------------------------------------------------------- config.yaml

/// Default of `max_body_bytes`: 256 KiB.
pub const DEFAULT_MAX_BODY_BYTES: u64 = 256 * 1024;

/// `config.yaml`: global settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GlobalConfig {
    /// Root of per-attempt clones: `{workspace_root}/{task_key}/{attempt}/`.
    pub workspace_root: String,
    /// Root of the bare mirror cache, one per repository.
    pub mirror_root: String,
    /// How often the daemon polls its sources.
    pub poll_interval: String,
    pub max_concurrent_agents: u32,
    /// Kill an agent that prints nothing for this long.
    pub event_idle_timeout: String,
    /// Attempts (not counting quota fallbacks) before a task is BLOCKED.
    pub max_attempts: u32,
    /// How long an agent counts as out of quota when its CLI names no reset time (issue 14).
    pub quota_default_cooldown: String,
    /// What the next agent starts from after an attempt hit a usage limit mid-run:
    /// `fresh` or `continue` ([`QuotaHandoff`], checked at load).
    pub quota_handoff: String,
    /// After the reset, a task whose preferred agent was out goes back to it (`false`: it
    /// stays with the fallback that took over).
    pub quota_return_to_preferred: bool,
    /// Largest task body `enqueue` accepts, in bytes (issue 12).
    pub max_body_bytes: u64,
    /// Identity used when neither the rule nor the agent profile names one.
    pub default_identity: Option<String>,
    /// Prompt template file (placeholders like `{title}`); built-in default when unset.
    pub prompt_template: Option<String>,
    pub container: ContainerConfig,
    pub git: GitConfig,
    pub github: GithubConfig,
    pub verify: VerifyConfig,
    /// Per-repository overrides, first matching entry wins.
    pub repos: Vec<RepoConfig>,
    /// Consent to settings that weaken isolation (hardening off, `network: host`, user 0,
    /// a dangerous credential volume, the GitHub token in `api_keys`, empty
    /// `protected_paths`). Without it they fail the load; with it each one is a warning.
    pub allow_unsafe: bool,
    /// The daemon's HTTP API, dashboard and metrics (off unless `listen` is set).
    pub http: HttpConfig,
    /// Keeping landed pull requests moving (issue 15).
    pub shepherd: super::shepherd::ShepherdConfig,
    /// Where agents may connect (issue 25): the default mode and what every profile allows.
    pub egress: EgressConfig,
    /// The model-API gateway (issue 26): real credentials stay out of the container.
    pub gateway: GatewayConfig,
    /// Where the queue lives (issue 27): the home's `queue.db` unless `url` is set.
    pub store: StoreConfig,
    /// What the daemon removes of finished tasks, and when (issue 24).
    pub retention: RetentionConfig,
}

impl Default for GlobalConfig {
    fn default() -> Self {
        GlobalConfig {
            workspace_root: "$POLYPHONY_HOME/workspaces".into(),
            mirror_root: "$POLYPHONY_HOME/mirrors".into(),
            poll_interval: "30s".into(),
            max_concurrent_agents: 8,
            event_idle_timeout: "5m".into(),
            max_attempts: 3,
            quota_default_cooldown: "15m".into(),
            quota_handoff: "fresh".into(),
            quota_return_to_preferred: true,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            default_identity: None,
            prompt_template: None,
            container: ContainerConfig::default(),
            git: GitConfig::default(),
            github: GithubConfig::default(),
            verify: VerifyConfig::default(),
            repos: Vec::new(),
            allow_unsafe: false,
            http: HttpConfig::default(),
            shepherd: super::shepherd::ShepherdConfig::default(),
            egress: EgressConfig::default(),
            gateway: GatewayConfig::default(),
            store: StoreConfig::default(),
            retention: RetentionConfig::default(),
        }
    }
}

/// `retention:` in config.yaml (issue 24; parsed and checked in `config::retention`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// Grace after a task ended LANDED, BLOCKED or CANCELLED before its workspaces (the
    /// attempt clones, their check checkouts and `N.land.git` repositories) and its notes
    /// in the store are removed; `never` keeps them.
    pub workspaces: String,
    /// Events and transcripts of attempts that ended longer ago than this are removed;
    /// `never` keeps them.
    pub events: String,
    /// How often the daemon applies the policy (and measures the disk it uses); `never`
    /// turns it off.
    pub every: String,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            workspaces: "24h".into(),
            events: "30d".into(),
            every: "1h".into(),
        }
    }
}

/// `store:` in config.yaml (issue 27, `store::StoreHandle`, docs/SCALING.md).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `postgres://user@host:port/db` for a fleet's shared store; unset: `$POLYPHONY_STORE_URL`,
    /// else `$POLYPHONY_HOME/queue.db`. Keep the password out of it: `PGPASSWORD` is read when
    /// connecting.
    pub url: Option<String>,
    /// This daemon's machine id in a fleet (the owner of its claims); unset: the host name.
    pub machine: Option<String>,
    /// How long a claim stays this daemon's without a renewal (default 60s; 10s to 1h):
    /// another machine may take a task over only after its lease expired.
    pub lease: Option<String>,
    /// How often the daemon renews its leases (default 10s; at least 1s, at most a third
    /// of `lease`).
    pub heartbeat: Option<String>,
}

/// `gateway:` in config.yaml (issue 26, src/gateway/).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GatewayConfig {
    /// Route each protected CLI's model API through a per-attempt gateway holding the real
    /// key (`false`: the key goes into the container's environment, as before).
    pub enabled: bool,
    /// Model id (or id prefix) -> prices in USD per million tokens (`input`, `output`,
    /// optional `cache_write`, `cache_read`), laid over the shipped defaults.
    pub prices: BTreeMap<String, crate::gateway::Price>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            enabled: true,
            prices: BTreeMap::new(),
        }
    }
}

/// `egress:` in config.yaml (issue 25, docs/SECURITY.md "Egress").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EgressConfig {
    /// Mode of every agent profile that names none: `allowlist`, `none` or `open`.
    pub mode: String,
    /// `host:port` entries (globs like `*.crates.io:443`) every profile allows, on top of
    /// its agent type's model API hosts.
    pub allow: Vec<String>,
    /// Name -> address the proxy uses instead of resolving the name (an internal model
    /// gateway, a test server): trusted as written, so a private address is accepted.
    pub hosts: BTreeMap<String, String>,
    /// The network the proxy reaches the outside through: `bridge` or `network:NAME`.
    pub outbound_network: String,
    /// Connections one attempt may open through its proxy.
    pub max_connections: u64,
    /// Bytes (both directions) one attempt may move through its proxy, like `4g`.
    pub max_bytes: String,
}

impl Default for EgressConfig {
    fn default() -> Self {
        EgressConfig {
            mode: "allowlist".into(),
            allow: Vec::new(),
            hosts: BTreeMap::new(),
            outbound_network: "bridge".into(),
            max_connections: 10_000,
            max_bytes: "4g".into(),
        }
    }
}

/// `egress:` of an agent profile or a repository: a mode alone (`egress: none`) or a
/// mapping with `mode` and `allow`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EgressField {
    Mode(String),
    Full(EgressOverride),
}

impl EgressField {
    pub fn mode(&self) -> Option<&str> {
        match self {
            EgressField::Mode(m) => Some(m),
            EgressField::Full(o) => o.mode.as_deref(),
        }
    }

    pub fn allow(&self) -> &[String] {
        match self {
            EgressField::Mode(_) => &[],
            EgressField::Full(o) => &o.allow,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EgressOverride {
    pub mode: Option<String>,
    pub allow: Vec<String>,
}

/// `quota_handoff:` in config.yaml (issue 14).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuotaHandoff {
    /// The next agent starts from a fresh clone of the base, as any attempt does.
    #[default]
    Fresh,
    /// The next agent starts from the limited attempt's workspace (its changes so far),
    /// and its prompt names that diff.
    Continue,
}

impl QuotaHandoff {
    /// `fresh` or `continue`.
    pub fn parse(text: &str) -> Option<QuotaHandoff> {
        match text.trim() {
            "fresh" => Some(QuotaHandoff::Fresh),
            "continue" => Some(QuotaHandoff::Continue),
            _ => None,
        }
    }
}

/// `http:` in config.yaml: what `polyphony daemon` serves (docs/api.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Address to serve on, e.g. `127.0.0.1:8787`; unset: no server (`--listen` wins).
    pub listen: Option<String>,
    /// Environment variable holding the bearer token. Required for a non-loopback
    /// address and for every mutating request.
    pub token_env: String,
    /// Whether read-only requests on a loopback address need the token too.
    pub token_for_reads: bool,
    /// Host names requests may carry besides the loopback names and the listen address
    /// (DNS rebinding: a foreign `Host` is refused with 421), e.g. a reverse proxy's name.
    pub allowed_hosts: Vec<String>,
    /// Event streams (SSE) open at once, over all clients.
    pub max_streams: u32,
    /// Event streams one client address may hold open at once.
    pub max_streams_per_client: u32,
}

/// Bounds on the `http.max_streams*` settings.
pub const MAX_STREAMS_LIMIT: u32 = 10_000;

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            listen: None,
            token_env: "POLYPHONY_HTTP_TOKEN".into(),
            token_for_reads: false,
            allowed_hosts: Vec::new(),
            max_streams: 128,
            max_streams_per_client: 16,
        }
    }
}

/// Defaults for every worker container.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContainerConfig {
    /// Image agents run in unless their profile names another.
    pub image: String,
    /// Wall-clock limit for one agent attempt.
    pub deadline: String,
    /// Memory limit, e.g. `4g`, `512m`.
    pub memory: String,
    pub cpus: f64,
    pub pids_limit: i64,
    /// `uid:gid` inside the container; unset means the daemon's own uid:gid.
    pub user: Option<String>,
    /// Default network for agent containers: `bridge`, `none`, `host` or `network:NAME`.
    pub network: String,
    /// Output (both streams) stored per attempt, e.g. `64m`; past it the container is
    /// killed and the attempt fails.
    pub max_output: String,
    /// Largest workspace an attempt may grow, e.g. `10g`; past it the container is killed
    /// and the attempt fails.
    pub max_workspace_size: String,
    /// Largest cost (dollars) one attempt may report; other figures are clamped to
    /// `0..=max` with a warning on the attempt.
    pub max_cost_usd_per_attempt: f64,
}

impl Default for ContainerConfig {
    fn default() -> Self {
        ContainerConfig {
            image: "polyphony-worker:latest".into(),
            deadline: "30m".into(),
            memory: "4g".into(),
            cpus: 2.0,
            pids_limit: 512,
            user: None,
            network: "bridge".into(),
            max_output: "64m".into(),
            max_workspace_size: "10g".into(),
            max_cost_usd_per_attempt: crate::agents::DEFAULT_MAX_COST_USD,
        }
    }
}

/// Commit author for the orchestrator's commits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GitConfig {
    pub author_name: String,
    pub author_email: String,
    /// Branch name prefix: branches are `{prefix}{task_key}-a{attempt}`.
    pub branch_prefix: String,
    /// `shared` (default): attempt clones borrow the mirror's objects read-only;
    /// `dissociate`: each attempt gets an independent copy (spec §6).
    pub clone_mode: crate::workspace::CloneMode,
}

impl Default for GitConfig {
    fn default() -> Self {
        GitConfig {
            author_name: "Polyphony".into(),
            author_email: "polyphony@localhost".into(),
            branch_prefix: "polyphony/".into(),
            clone_mode: crate::workspace::CloneMode::default(),
        }
    }
}

/// GitHub intake and landing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GithubConfig {
    /// Repositories (`owner/name`) the daemon polls for labelled issues.
    pub repos: Vec<String>,
    pub ready_label: String,
    pub claimed_label: String,
    pub landed_label: String,
    pub blocked_label: String,
    /// Take an issue only if its ready label was applied by a user with write access.
    pub trusted_only: bool,
    /// Open pull requests as drafts.
    pub draft_prs: bool,
}

impl Default for GithubConfig {
    fn default() -> Self {
        GithubConfig {
            repos: Vec::new(),
            ready_label: "agent-ready".into(),
            claimed_label: "agent-claimed".into(),
            landed_label: "agent-landed".into(),
            blocked_label: "agent-blocked".into(),
            trusted_only: false,
            draft_prs: false,
        }
    }
}

/// Proof-of-work checks (spec §10). Overridable per repo and by `.polyphony.yaml`
/// on the BASE branch, never by the agent's branch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VerifyConfig {
    pub test: Option<String>,
    pub lint: Option<String>,
    pub typecheck: Option<String>,
    /// Limit for each check.
    pub timeout: String,
    /// Image checks run in; unset means the agent's image.
    pub image: Option<String>,
    /// Globs the agent may not touch.
    pub protected_paths: Vec<String>,
    /// Largest file (blob) the landing commit may add or change, like `10m` (issue 11).
    pub max_file_size: String,
    /// Also protect the repository files the verify commands run (`sh test.sh` protects
    /// `test.sh`), so the agent cannot rewrite the check that judges it.
    pub protect_check_scripts: bool,
    /// Let the agent add or change submodules (gitlinks, `.gitmodules`); refused by default.
    pub allow_submodules: bool,
    /// Let the agent add `filter=` lines to `.gitattributes`; refused by default (a filter
    /// runs a configured program on checkout).
    pub allow_attribute_filters: bool,
    /// Most files one attempt may add, change or delete (issue 23): past it the attempt
    /// is refused before its files are read, naming the count and this setting.
    pub max_changed_files: usize,
}

impl Default for VerifyConfig {
    fn default() -> Self {
        VerifyConfig {
            test: None,
            lint: None,
            typecheck: None,
            timeout: "10m".into(),
            image: None,
            protected_paths: vec![".github/**".into(), ".polyphony.yaml".into()],
            max_file_size: "10m".into(),
            protect_check_scripts: false,
            allow_submodules: false,
            allow_attribute_filters: false,
            max_changed_files: crate::workspace::DEFAULT_MAX_CHANGED_FILES,
        }
    }
}

/// Settings for repositories whose name or path matches `repo` (a glob).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepoConfig {
    /// Glob over `owner/name` or the repository URL/path.
    pub repo: String,
    #[serde(default)]
    pub base_ref: Option<String>,
    #[serde(default)]
    pub verify: Option<VerifyOverride>,
    /// Image for agents on this repo (its toolchain must be in it).
    #[serde(default)]
    pub image: Option<String>,
    /// `egress.allow` entries agents on this repo may reach too (its package registry).
    #[serde(default)]
    pub egress: Option<RepoEgress>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RepoEgress {
    pub allow: Vec<String>,
}

/// Per-repo verification; unset fields fall back to the global `verify`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VerifyOverride {
    pub test: Option<String>,
    pub lint: Option<String>,
    pub typecheck: Option<String>,
    pub timeout: Option<String>,
    pub image: Option<String>,
    pub protected_paths: Option<Vec<String>>,
}

// ---------------------------------------------------------------- identities.yaml

/// `identities.yaml`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IdentitiesFile {
    pub identities: Vec<IdentityConfig>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentityConfig {
    pub name: String,
    /// Agent type -> host directory with that CLI's login (`~` allowed).
    #[serde(default)]
    pub volumes: BTreeMap<String, String>,
    /// Container variable -> host variable its value is read from.
    #[serde(default)]
    pub api_keys: BTreeMap<String, String>,
    /// Host variable with this identity's GitHub token (default GITHUB_TOKEN, then GH_TOKEN).
    #[serde(default)]
    pub github_token_env: Option<String>,
    #[serde(default)]
    pub cost_ceiling_usd_per_day: Option<f64>,
    /// Agent types whose whole login directory is staged (history, sessions and all);
    /// by default only the files the CLI authenticates with are.
    #[serde(default)]
    pub whole_directory: Vec<String>,
}

// ---------------------------------------------------------------- agents.yaml

/// `agents.yaml`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentsFile {
    pub agents: Vec<AgentConfig>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    pub name: String,
    /// `claude`, `codex`, `kimi` or `gemini`.
    pub agent_type: String,
    #[serde(default)]
    pub cli_command: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub context_window_tokens: Option<u64>,
    #[serde(default)]
    pub strengths: Vec<String>,
    #[serde(default)]
    pub max_turns: Option<u32>,
    /// Extra flags for the CLI, after Polyphony's own and before the prompt; only the
    /// flags its descriptor lists (`AgentSpec::profile_flags`, e.g. OpenCode's `--auto`).
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub image: Option<String>,
    #[serde(default)]
    pub identity: Option<String>,
    /// `bridge`, `none`, `host` or `network:NAME`; default from `container.network`.
    /// Only under `egress: open`.
    #[serde(default)]
    pub network: Option<String>,
    /// `allowlist` (default from config.yaml `egress.mode`), `none`, `open`, or a mapping
    /// with `mode` and `allow` (`host:port` entries this profile adds).
    #[serde(default)]
    pub egress: Option<EgressField>,
    #[serde(default)]
    pub deadline: Option<String>,
    #[serde(default)]
    pub idle_timeout: Option<String>,
    #[serde(default)]
    pub auth_path: Option<String>,
    #[serde(default)]
    pub memory: Option<String>,
    #[serde(default)]
    pub cpus: Option<f64>,
    #[serde(default)]
    pub pids_limit: Option<i64>,
    /// Turn hardening off for this profile (all on by default).
    #[serde(default)]
    pub hardening: Option<HardeningConfig>,
    /// `uid:gid` this agent's containers run as; default `container.user`.
    #[serde(default)]
    pub user: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HardeningConfig {
    pub cap_drop_all: bool,
    pub no_new_privileges: bool,
    pub init: bool,
}

impl Default for HardeningConfig {
    fn default() -> Self {
        HardeningConfig {
            cap_drop_all: true,
            no_new_privileges: true,
            init: true,
        }
    }
}

// ---------------------------------------------------------------- routing.yaml

/// `routing.yaml`: rules evaluated top-down, first match wins (spec §5.2–5.6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoutingFile {
    #[serde(default)]
    pub rules: Vec<RuleConfig>,
    pub default: DefaultRuleConfig,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    pub name: String,
    /// Predicates, all of which must hold.
    #[serde(default, rename = "match")]
    pub match_: MatchConfig,
    pub agent: String,
    #[serde(default)]
    pub fallback: Vec<String>,
    #[serde(default)]
    pub identity: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DefaultRuleConfig {
    pub agent: String,
    #[serde(default)]
    pub fallback: Vec<String>,
    #[serde(default)]
    pub identity: Option<String>,
}

/// One value or a list of accepted values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany<T> {
    One(T),
    Many(Vec<T>),
}

impl<T> OneOrMany<T> {
    pub fn as_slice(&self) -> &[T] {
        match self {
            OneOrMany::One(v) => std::slice::from_ref(v),
            OneOrMany::Many(v) => v,
        }
    }
}

/// Inclusive range; either end may be open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RangeConfig {
    #[serde(default)]
    pub min: Option<u32>,
    #[serde(default)]
    pub max: Option<u32>,
}

/// Rule predicates. Unset means "any".
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MatchConfig {
    pub task_type: Option<OneOrMany<String>>,
    pub risk: Option<OneOrMany<String>>,
    pub scope: Option<OneOrMany<String>>,
    pub requires_web: Option<bool>,
    /// Holds when the task carries at least one of these labels.
    pub labels: Option<OneOrMany<String>>,
    /// `github` or `local`.
    pub source: Option<OneOrMany<String>>,
    /// Glob(s) over `owner/name` or the repo URL/path.
    pub repo: Option<OneOrMany<String>>,
    /// Total complexity score range (0–10).
    pub complexity: Option<RangeConfig>,
}
