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

mod checks;
mod consent;
pub mod error;
pub mod locate;
pub mod model;
pub mod quota;
pub mod templates;
pub mod values;
mod yaml;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use globset::{Glob, GlobMatcher};
use serde::Serialize;

use crate::domain::{
    AgentProfile, AgentType, Identity, NetworkMode, ResourceLimits, Risk, Scope, SourceKind,
    TaskType, VerifyCommand,
};
pub use checks::{check_branch_prefix, check_image_ref};
pub use error::{ConfigError, ConfigErrorKind};
use locate::{Locator, Seg};
use model::{AgentConfig, AgentsFile, DefaultRuleConfig, IdentitiesFile, RuleConfig};
pub use model::{GlobalConfig, HttpConfig, RepoConfig, RoutingFile};

/// The config files, in the order they are loaded.
pub const CONFIG_FILE: &str = "config.yaml";
pub const IDENTITIES_FILE: &str = "identities.yaml";
pub const AGENTS_FILE: &str = "agents.yaml";
pub const ROUTING_FILE: &str = "routing.yaml";
pub const FILES: [&str; 4] = [CONFIG_FILE, IDENTITIES_FILE, AGENTS_FILE, ROUTING_FILE];

/// Resolves the home: `flag` (`--home`), then `POLYPHONY_HOME`, then `$HOME/.polyphony`.
/// `~` and `$VAR` expand in both explicit forms. Relative paths are kept relative to the
/// current directory by the caller (`std::path::absolute`).
pub fn resolve_home(
    flag: Option<&Path>,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<PathBuf, ConfigError> {
    let explicit = flag
        .map(|p| p.to_string_lossy().into_owned())
        .or_else(|| lookup("POLYPHONY_HOME").filter(|v| !v.trim().is_empty()));
    let no_home = || {
        ConfigError::new(
            ConfigErrorKind::Io,
            Path::new("$POLYPHONY_HOME"),
            (0, 0),
            "cannot find the Polyphony home: neither --home, POLYPHONY_HOME nor HOME is set",
            "pass --home PATH or export POLYPHONY_HOME",
        )
    };
    let text = match explicit {
        Some(text) => text,
        None => {
            let home = lookup("HOME")
                .filter(|h| !h.trim().is_empty())
                .ok_or_else(no_home)?;
            return Ok(PathBuf::from(home).join(".polyphony"));
        }
    };
    let cwd = PathBuf::from(".");
    let path = values::expand_path(&text, &cwd, lookup).map_err(|e| {
        ConfigError::new(
            ConfigErrorKind::Io,
            Path::new(&text),
            (0, 0),
            format!("cannot resolve the Polyphony home: {e}"),
            "pass an absolute --home PATH or export POLYPHONY_HOME",
        )
    })?;
    Ok(path
        .strip_prefix("./")
        .map(Path::to_path_buf)
        .unwrap_or(path))
}

/// [`resolve_home`] against the process environment, made absolute.
pub fn home_from_env(flag: Option<&Path>) -> Result<PathBuf, ConfigError> {
    let home = resolve_home(flag, &|v| std::env::var(v).ok())?;
    let home = std::path::absolute(&home).map_err(|e| {
        ConfigError::new(
            ConfigErrorKind::Io,
            &home,
            (0, 0),
            format!("cannot make the home path absolute: {e}"),
            "pass an absolute --home PATH",
        )
    })?;
    // Issue 12: a home that is a file failed later as "cannot read config.yaml: Not a
    // directory".
    if home.exists() && !home.is_dir() {
        let from = if flag.is_some() {
            "--home"
        } else if std::env::var_os("POLYPHONY_HOME").is_some_and(|v| !v.is_empty()) {
            "POLYPHONY_HOME"
        } else {
            "the default home ~/.polyphony"
        };
        return Err(ConfigError::new(
            ConfigErrorKind::Io,
            &home,
            (0, 0),
            format!("{from} points at a file, not a directory"),
            "point it at a directory (it is created when missing), or move the file away",
        ));
    }
    Ok(home)
}

/// The raw text of the four files; `None` for a file that does not exist.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigSources {
    pub config: Option<String>,
    pub identities: Option<String>,
    pub agents: Option<String>,
    pub routing: Option<String>,
}

impl ConfigSources {
    /// Reads whichever of the four files exist in `home`.
    pub fn read(home: &Path) -> Result<ConfigSources, ConfigError> {
        let read = |name: &str| -> Result<Option<String>, ConfigError> {
            let path = home.join(name);
            match std::fs::read_to_string(&path) {
                Ok(text) => Ok(Some(text)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(ConfigError::new(
                    ConfigErrorKind::Io,
                    &path,
                    (0, 0),
                    format!("cannot read: {e}"),
                    "check the file's permissions (it must be readable UTF-8 text)",
                )),
            }
        };
        Ok(ConfigSources {
            config: read(CONFIG_FILE)?,
            identities: read(IDENTITIES_FILE)?,
            agents: read(AGENTS_FILE)?,
            routing: read(ROUTING_FILE)?,
        })
    }

    /// The embedded templates `init` writes, as if they had been read from disk.
    pub fn templates() -> ConfigSources {
        ConfigSources {
            config: Some(templates::CONFIG.to_string()),
            identities: Some(templates::IDENTITIES.to_string()),
            agents: Some(templates::AGENTS.to_string()),
            routing: Some(templates::ROUTING.to_string()),
        }
    }
}

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
pub struct Config {
    pub home: PathBuf,
    pub global: GlobalConfig,
    pub identities: Vec<Identity>,
    pub agents: Vec<AgentProfile>,
    pub routing: RoutingFile,
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
    /// Reads and validates the four files under `home`.
    pub fn load(home: &Path) -> Result<Config, ConfigError> {
        let sources = ConfigSources::read(home)?;
        let config = Config::from_sources(home, &sources, &|v| std::env::var(v).ok())?;
        // The checks that read the disk (issue 12): a root holding someone else's files,
        // a prompt template that is missing or does not parse.
        let doc = Doc::new(home, CONFIG_FILE, &sources.config);
        checks::check_roots_on_disk(
            [
                ("workspace_root", config.workspace_root()),
                ("mirror_root", config.mirror_root()),
            ],
            home,
            &doc,
        )?;
        if let Some(path) = config.prompt_template() {
            checks::check_prompt_template(path, &doc)?;
        }
        Ok(config)
    }

    /// Validates already-read file contents. `lookup` answers environment variables for
    /// `$VAR` expansion (`POLYPHONY_HOME` always resolves to `home`).
    pub fn from_sources(
        home: &Path,
        sources: &ConfigSources,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let home_text = home.to_string_lossy().into_owned();
        let env = move |var: &str| -> Option<String> {
            if var == "POLYPHONY_HOME" {
                Some(home_text.clone())
            } else {
                lookup(var)
            }
        };
        let docs = Docs {
            config: Doc::new(home, CONFIG_FILE, &sources.config),
            identities: Doc::new(home, IDENTITIES_FILE, &sources.identities),
            agents: Doc::new(home, AGENTS_FILE, &sources.agents),
            routing: Doc::new(home, ROUTING_FILE, &sources.routing),
        };

        let global: GlobalConfig = docs.config.parse()?;
        let identities_file: IdentitiesFile = docs.identities.parse()?;
        let agents_file: AgentsFile = match &sources.agents {
            Some(_) => docs.agents.parse()?,
            None => AgentsFile {
                agents: AgentType::ALL
                    .iter()
                    .map(|t| default_agent_config(*t))
                    .collect(),
            },
        };
        let routing: RoutingFile = match &sources.routing {
            Some(_) => docs.routing.parse()?,
            None => default_routing(&agents_file),
        };

        checks::check_values(&global, &agents_file, &docs.config, &docs.agents)?;
        quota::check(&global, &docs.config)?;
        let resolved = resolve_global(home, &global, &docs.config, &env)?;
        let user_home = env("HOME")
            .filter(|h| !h.trim().is_empty())
            .map(PathBuf::from);
        for (field, root) in [
            ("workspace_root", &resolved.workspace_root),
            ("mirror_root", &resolved.mirror_root),
        ] {
            checks::check_root_identity(field, root, home, user_home.as_deref(), &docs.config)?;
        }
        let identities = build_identities(home, &identities_file, &docs.identities, &env)?;
        let identity_names: Vec<&str> = identities.iter().map(|i| i.name.as_str()).collect();
        if let Some(name) = &global.default_identity {
            check_identity_ref(
                &docs.config,
                &identity_names,
                name,
                &[Seg::Key("default_identity")],
                "`default_identity`",
            )?;
        }
        let agents = build_agents(
            &global,
            &resolved,
            &agents_file,
            &docs.agents,
            &identity_names,
        )?;
        let agent_names: Vec<&str> = agents.iter().map(|a| a.name.as_str()).collect();
        validate_routing(&routing, &docs.routing, &agent_names, &identity_names)?;

        let unsafe_settings = consent::unsafe_settings(&global, &identities, &agents_file, &docs);
        if !global.allow_unsafe {
            if let Some(first) = unsafe_settings.first() {
                let mut e = first.clone();
                if unsafe_settings.len() > 1 {
                    e.message.push_str(&format!(
                        " (and {} more unsafe setting(s); `allow_unsafe: true` lists them in `config check`)",
                        unsafe_settings.len() - 1
                    ));
                }
                return Err(e);
            }
        }
        let mut resolved = resolved;
        resolved.files = FILES
            .iter()
            .zip([
                &sources.config,
                &sources.identities,
                &sources.agents,
                &sources.routing,
            ])
            .map(|(name, src)| (*name, src.is_some()))
            .collect();
        Ok(Config {
            home: home.to_path_buf(),
            global,
            identities,
            agents,
            routing,
            resolved,
            unsafe_settings,
        })
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

/// The stream format an adapter parses for each agent type.
pub fn default_event_protocol(t: AgentType) -> &'static str {
    match t {
        AgentType::Claude => "claude-stream-json",
        AgentType::Codex => "codex-exec-json",
        AgentType::Kimi => "kimi-stream-json",
        AgentType::Gemini => "gemini-stream-json",
    }
}

/// Context window of each CLI's default model.
pub fn default_context_window(t: AgentType) -> u64 {
    match t {
        AgentType::Claude => 200_000,
        AgentType::Codex => 272_000,
        AgentType::Kimi => 256_000,
        AgentType::Gemini => 1_048_576,
    }
}

// ---------------------------------------------------------------- loading internals

struct Doc<'s> {
    path: PathBuf,
    text: &'s str,
}

struct Docs<'s> {
    config: Doc<'s>,
    identities: Doc<'s>,
    agents: Doc<'s>,
    routing: Doc<'s>,
}

impl<'s> Doc<'s> {
    fn new(home: &Path, name: &str, text: &'s Option<String>) -> Doc<'s> {
        Doc {
            path: home.join(name),
            text: text.as_deref().unwrap_or(""),
        }
    }

    fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T, ConfigError> {
        yaml::parse(&self.path, self.text)
    }

    fn error(
        &self,
        kind: ConfigErrorKind,
        path: &[Seg<'_>],
        needle: Option<&str>,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) -> ConfigError {
        let pos = if self.text.is_empty() {
            (0, 0)
        } else {
            Locator::new(self.text).find(path, needle)
        };
        ConfigError::new(kind, &self.path, pos, message, fix)
    }
}

fn default_agent_config(t: AgentType) -> AgentConfig {
    AgentConfig {
        name: t.as_str().to_string(),
        agent_type: t.as_str().to_string(),
        cli_command: None,
        model: None,
        context_window_tokens: None,
        strengths: Vec::new(),
        max_turns: None,
        image: None,
        identity: None,
        network: None,
        deadline: None,
        idle_timeout: None,
        auth_path: None,
        memory: None,
        cpus: None,
        pids_limit: None,
        hardening: None,
        user: None,
    }
}

fn default_routing(agents: &AgentsFile) -> RoutingFile {
    let mut names = agents.agents.iter().map(|a| a.name.clone());
    RoutingFile {
        rules: Vec::new(),
        default: DefaultRuleConfig {
            agent: names.next().unwrap_or_default(),
            fallback: names.collect(),
            identity: None,
        },
    }
}

fn duration_at(
    doc: &Doc<'_>,
    path: &[Seg<'_>],
    field: &str,
    text: &str,
) -> Result<Duration, ConfigError> {
    values::parse_duration(text).map_err(|e| {
        doc.error(
            ConfigErrorKind::InvalidValue,
            path,
            None,
            format!("`{field}` is not a valid duration: {e}"),
            "write a duration with a unit, like 30s, 5m or 1h30m",
        )
    })
}

fn memory_at(doc: &Doc<'_>, path: &[Seg<'_>], field: &str, text: &str) -> Result<i64, ConfigError> {
    values::parse_memory(text).map_err(|e| {
        doc.error(
            ConfigErrorKind::InvalidValue,
            path,
            None,
            format!("`{field}` is not a valid memory size: {e}"),
            "write a size with a unit, like 512m or 4g",
        )
    })
}

fn size_at(doc: &Doc<'_>, path: &[Seg<'_>], field: &str, text: &str) -> Result<u64, ConfigError> {
    values::parse_size(text).map_err(|e| {
        doc.error(
            ConfigErrorKind::InvalidValue,
            path,
            None,
            format!("`{field}` is not a valid size: {e}"),
            "write a size with a unit, like 64m or 10g",
        )
    })
}

/// Docker's rule for network names: `[a-zA-Z0-9][a-zA-Z0-9_.-]*`. The predefined modes
/// are refused here so `network:host` cannot bypass the explicit `host` spelling.
fn is_docker_network_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        && !matches!(name, "bridge" | "none" | "host" | "default")
}

fn network_at(
    doc: &Doc<'_>,
    path: &[Seg<'_>],
    field: &str,
    text: &str,
) -> Result<NetworkMode, ConfigError> {
    match text.trim() {
        "bridge" => Ok(NetworkMode::Bridge),
        "none" => Ok(NetworkMode::None),
        "host" => Ok(NetworkMode::Host),
        other => match other.strip_prefix("network:") {
            Some(name) if is_docker_network_name(name) => Ok(NetworkMode::Named(name.to_string())),
            _ => Err(doc.error(
                ConfigErrorKind::InvalidValue,
                path,
                None,
                format!("`{field}` is `{other}`, not a network mode"),
                "use bridge, none, host or network:NAME (a user-defined Docker network)",
            )),
        },
    }
}

fn path_at(
    doc: &Doc<'_>,
    path: &[Seg<'_>],
    field: &str,
    text: &str,
    home: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<PathBuf, ConfigError> {
    values::expand_path(text, home, env).map_err(|e| {
        doc.error(
            ConfigErrorKind::InvalidValue,
            path,
            None,
            format!("`{field}` cannot be expanded: {e}"),
            "export the variable, or write an absolute path",
        )
    })
}

fn resolve_global(
    home: &Path,
    g: &GlobalConfig,
    doc: &Doc<'_>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Resolved, ConfigError> {
    use Seg::Key;
    let workspace_root = path_at(
        doc,
        &[Key("workspace_root")],
        "workspace_root",
        &g.workspace_root,
        home,
        env,
    )?;
    let mirror_root = path_at(
        doc,
        &[Key("mirror_root")],
        "mirror_root",
        &g.mirror_root,
        home,
        env,
    )?;
    let poll_interval = duration_at(
        doc,
        &[Key("poll_interval")],
        "poll_interval",
        &g.poll_interval,
    )?;
    let event_idle_timeout = duration_at(
        doc,
        &[Key("event_idle_timeout")],
        "event_idle_timeout",
        &g.event_idle_timeout,
    )?;
    let container_deadline = duration_at(
        doc,
        &[Key("container"), Key("deadline")],
        "container.deadline",
        &g.container.deadline,
    )?;
    let verify_timeout = duration_at(
        doc,
        &[Key("verify"), Key("timeout")],
        "verify.timeout",
        &g.verify.timeout,
    )?;
    let max_file_bytes = values::parse_size(&g.verify.max_file_size).map_err(|e| {
        doc.error(
            ConfigErrorKind::InvalidValue,
            &[Key("verify"), Key("max_file_size")],
            None,
            format!("`verify.max_file_size` is not a valid size: {e}"),
            "write a size with a unit, like 512k or 10m",
        )
    })?;
    let prompt_template = g
        .prompt_template
        .as_deref()
        .map(|p| {
            path_at(
                doc,
                &[Key("prompt_template")],
                "prompt_template",
                p,
                home,
                env,
            )
        })
        .transpose()?;
    let memory_bytes = memory_at(
        doc,
        &[Key("container"), Key("memory")],
        "container.memory",
        &g.container.memory,
    )?;
    let network = network_at(
        doc,
        &[Key("container"), Key("network")],
        "container.network",
        &g.container.network,
    )?;
    let max_output_bytes = size_at(
        doc,
        &[Key("container"), Key("max_output")],
        "container.max_output",
        &g.container.max_output,
    )?;
    let max_workspace_bytes = size_at(
        doc,
        &[Key("container"), Key("max_workspace_size")],
        "container.max_workspace_size",
        &g.container.max_workspace_size,
    )?;
    let max_cost = g.container.max_cost_usd_per_attempt;
    if !(max_cost.is_finite() && max_cost > 0.0) {
        return Err(doc.error(
            ConfigErrorKind::InvalidValue,
            &[Key("container"), Key("max_cost_usd_per_attempt")],
            None,
            format!("`container.max_cost_usd_per_attempt` is {max_cost}, not a positive number of dollars"),
            "set it to the most one attempt may cost, e.g. 100",
        ));
    }

    let positive = |ok: bool, path: &[Seg<'_>], field: &str, fix: &str| {
        if ok {
            Ok(())
        } else {
            Err(doc.error(
                ConfigErrorKind::InvalidValue,
                path,
                None,
                format!("`{field}` must be at least 1"),
                fix,
            ))
        }
    };
    positive(
        g.max_concurrent_agents >= 1,
        &[Key("max_concurrent_agents")],
        "max_concurrent_agents",
        "set it to 1 or more (default 8)",
    )?;
    positive(
        g.max_body_bytes >= 1,
        &[Key("max_body_bytes")],
        "max_body_bytes",
        "set it to 1 or more (default 262144, 256 KiB)",
    )?;
    positive(
        g.max_attempts >= 1,
        &[Key("max_attempts")],
        "max_attempts",
        "set it to 1 or more (default 3)",
    )?;
    check_cpus_pids(
        doc,
        &[Key("container")],
        "container",
        Some(g.container.cpus),
        Some(g.container.pids_limit),
    )?;
    if let Some(user) = &g.container.user {
        if !valid_user(user) {
            return Err(doc.error(
                ConfigErrorKind::InvalidValue,
                &[Key("container"), Key("user")],
                None,
                format!("`container.user` is `{user}`, not `uid` or `uid:gid`"),
                "use numeric ids like 1000:1000, or remove it to run as the daemon's own user",
            ));
        }
    }
    for (field, value) in [
        ("ready_label", &g.github.ready_label),
        ("claimed_label", &g.github.claimed_label),
        ("landed_label", &g.github.landed_label),
        ("blocked_label", &g.github.blocked_label),
    ] {
        if value.trim().is_empty() {
            return Err(doc.error(
                ConfigErrorKind::InvalidValue,
                &[Key("github"), Key(field)],
                None,
                format!("`github.{field}` is empty"),
                "give the label a name, or remove the line for the default",
            ));
        }
    }
    for (i, repo) in g.github.repos.iter().enumerate() {
        let parts: Vec<&str> = repo.split('/').collect();
        if parts.len() != 2 || parts.iter().any(|p| p.is_empty()) {
            return Err(doc.error(
                ConfigErrorKind::InvalidValue,
                &[Key("github"), Key("repos"), Seg::Item(i)],
                Some(repo),
                format!("`github.repos` entry `{repo}` is not `owner/name`"),
                "write it as owner/name, e.g. acme/widgets",
            ));
        }
    }

    let mut repo_globs = Vec::new();
    let mut repo_verify_timeouts = Vec::new();
    for (i, r) in g.repos.iter().enumerate() {
        let at = [Key("repos"), Seg::Item(i), Key("repo")];
        let glob = Glob::new(&r.repo).map_err(|e| {
            doc.error(
                ConfigErrorKind::InvalidValue,
                &at,
                None,
                format!("`repos[{i}].repo` is not a valid glob: {e}"),
                "use a glob like acme/* or **/widgets",
            )
        })?;
        repo_globs.push(glob.compile_matcher());
        let timeout = r
            .verify
            .as_ref()
            .and_then(|v| v.timeout.as_deref())
            .map(|t| {
                duration_at(
                    doc,
                    &[Key("repos"), Seg::Item(i), Key("verify"), Key("timeout")],
                    "verify.timeout",
                    t,
                )
            })
            .transpose()?;
        repo_verify_timeouts.push(timeout);
    }

    Ok(Resolved {
        workspace_root,
        mirror_root,
        poll_interval,
        event_idle_timeout,
        container_deadline,
        verify_timeout,
        max_file_bytes,
        prompt_template,
        limits: ResourceLimits {
            memory_bytes,
            cpus: g.container.cpus,
            pids: g.container.pids_limit,
            cap_drop_all: true,
            no_new_privileges: true,
            init: true,
            user: g.container.user.clone(),
        },
        network,
        max_output_bytes,
        max_workspace_bytes,
        repo_globs,
        repo_verify_timeouts,
        files: BTreeMap::new(),
    })
}

fn valid_user(user: &str) -> bool {
    let mut parts = user.split(':');
    let uid_ok = parts
        .next()
        .is_some_and(|u| !u.is_empty() && u.chars().all(|c| c.is_ascii_digit()));
    let gid_ok = parts
        .next()
        .is_none_or(|g| !g.is_empty() && g.chars().all(|c| c.is_ascii_digit()));
    uid_ok && gid_ok && parts.next().is_none()
}

fn check_cpus_pids(
    doc: &Doc<'_>,
    base: &[Seg<'_>],
    section: &str,
    cpus: Option<f64>,
    pids: Option<i64>,
) -> Result<(), ConfigError> {
    if let Some(c) = cpus {
        if !(c > 0.0 && c.is_finite()) {
            let path: Vec<Seg<'_>> = base.iter().copied().chain([Seg::Key("cpus")]).collect();
            let problem = if c.is_nan() {
                "is not a number".to_string()
            } else {
                format!("is {c}; it must be above 0")
            };
            return Err(doc.error(
                ConfigErrorKind::InvalidValue,
                &path,
                None,
                format!("`{section}.cpus` {problem}"),
                "set cpus to a positive number such as 2 or 0.5",
            ));
        }
    }
    if let Some(p) = pids {
        if p < 1 {
            let path: Vec<Seg<'_>> = base
                .iter()
                .copied()
                .chain([Seg::Key("pids_limit")])
                .collect();
            return Err(doc.error(
                ConfigErrorKind::InvalidValue,
                &path,
                None,
                format!("`{section}.pids_limit` is {p}; it must be at least 1"),
                "set pids_limit to a positive number such as 512",
            ));
        }
    }
    Ok(())
}

fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn build_identities(
    home: &Path,
    file: &IdentitiesFile,
    doc: &Doc<'_>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Identity>, ConfigError> {
    use Seg::{Item, Key};
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (i, id) in file.identities.iter().enumerate() {
        let item = [Key("identities"), Item(i)];
        let at = |k: &'static str| [Key("identities"), Item(i), Key(k)];
        if id.name.trim().is_empty() {
            return Err(doc.error(
                ConfigErrorKind::InvalidValue,
                &at("name"),
                None,
                format!("identity #{} has an empty name", i + 1),
                "give the identity a name such as `personal` (spec §7: name required)",
            ));
        }
        if !seen.insert(id.name.as_str()) {
            return Err(doc.error(
                ConfigErrorKind::Duplicate,
                &at("name"),
                None,
                format!("identity `{}` is defined twice", id.name),
                "rename or remove one of them: identity names must be unique",
            ));
        }
        if id.volumes.is_empty() {
            return Err(doc.error(
                ConfigErrorKind::InvalidValue,
                &item,
                None,
                format!("identity `{}` has no volumes", id.name),
                "add `volumes:` with at least one `<agent type>: <host dir>`, e.g. `claude: ~/.claude` (spec §7)",
            ));
        }
        let mut volumes = BTreeMap::new();
        for (agent_type, host) in &id.volumes {
            let vol_at = [
                Key("identities"),
                Item(i),
                Key("volumes"),
                Key(agent_type.as_str()),
            ];
            if agent_type.parse::<AgentType>().is_err() {
                return Err(doc.error(
                    ConfigErrorKind::InvalidValue,
                    &[Key("identities"), Item(i), Key("volumes")],
                    Some(agent_type),
                    format!(
                        "identity `{}` has a volume for unknown agent type `{agent_type}`",
                        id.name
                    ),
                    "key volumes by agent type: claude, codex, kimi or gemini",
                ));
            }
            let path = path_at(
                doc,
                &vol_at,
                &format!("volumes.{agent_type}"),
                host,
                home,
                env,
            )?;
            volumes.insert(agent_type.clone(), path);
        }
        for agent_type in &id.whole_directory {
            if agent_type.parse::<AgentType>().is_err() {
                return Err(doc.error(
                    ConfigErrorKind::InvalidValue,
                    &at("whole_directory"),
                    Some(agent_type),
                    format!(
                        "identity `{}` lists unknown agent type `{agent_type}` in whole_directory",
                        id.name
                    ),
                    "list agent types (claude, codex, kimi or gemini) whose whole login directory may be staged, or remove the line",
                ));
            }
        }
        for (container_var, host_var) in &id.api_keys {
            if !is_env_name(container_var) || !is_env_name(host_var) {
                return Err(doc.error(
                    ConfigErrorKind::InvalidValue,
                    &[Key("identities"), Item(i), Key("api_keys")],
                    Some(if is_env_name(container_var) { host_var } else { container_var }),
                    // A value that is not a variable name may be the key itself: never echo it.
                    format!(
                        "identity `{}` api_keys entry `{}: {}` is not a pair of variable names",
                        id.name,
                        if is_env_name(container_var) { container_var.as_str() } else { "***" },
                        if is_env_name(host_var) { host_var.as_str() } else { "***" },
                    ),
                    "map a container variable to the HOST variable holding the key, e.g. `ANTHROPIC_API_KEY: WORK_ANTHROPIC_KEY` (never the key itself)",
                ));
            }
        }
        if let Some(var) = &id.github_token_env {
            if !is_env_name(var) {
                return Err(doc.error(
                    ConfigErrorKind::InvalidValue,
                    &at("github_token_env"),
                    None,
                    format!("identity `{}` github_token_env `{var}` is not a variable name", id.name),
                    "name the HOST variable that holds the token, e.g. WORK_GITHUB_TOKEN (never the token itself)",
                ));
            }
        }
        if let Some(c) = id.cost_ceiling_usd_per_day {
            if !(c >= 0.0 && c.is_finite()) {
                return Err(doc.error(
                    ConfigErrorKind::InvalidValue,
                    &at("cost_ceiling_usd_per_day"),
                    None,
                    format!("identity `{}` has a negative cost ceiling", id.name),
                    "use a positive number of dollars per day, or remove the line for no ceiling",
                ));
            }
        }
        out.push(Identity {
            name: id.name.clone(),
            volumes,
            api_keys: id.api_keys.clone(),
            github_token_env: id.github_token_env.clone(),
            cost_ceiling_usd_per_day: id.cost_ceiling_usd_per_day,
            whole_directory: id.whole_directory.clone(),
        });
    }
    Ok(out)
}

fn check_identity_ref(
    doc: &Doc<'_>,
    known: &[&str],
    name: &str,
    path: &[Seg<'_>],
    who: &str,
) -> Result<(), ConfigError> {
    if known.contains(&name) {
        return Ok(());
    }
    let fix = if known.is_empty() {
        format!("define identity `{name}` in identities.yaml")
    } else {
        format!(
            "use one of {} (or add `{name}` to identities.yaml)",
            known.join(", ")
        )
    };
    Err(doc.error(
        ConfigErrorKind::UnknownReference,
        path,
        Some(name),
        format!("{who} names unknown identity `{name}`"),
        fix,
    ))
}

fn build_agents(
    g: &GlobalConfig,
    resolved: &Resolved,
    file: &AgentsFile,
    doc: &Doc<'_>,
    identities: &[&str],
) -> Result<Vec<AgentProfile>, ConfigError> {
    use Seg::{Item, Key};
    if file.agents.is_empty() {
        return Err(doc.error(
            ConfigErrorKind::InvalidValue,
            &[Key("agents")],
            None,
            "no agents are defined",
            "add at least one agent (`polyphony init --force` writes a template with claude, codex, kimi and gemini)",
        ));
    }
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (i, a) in file.agents.iter().enumerate() {
        let at = |k: &'static str| [Key("agents"), Item(i), Key(k)];
        if a.name.trim().is_empty() {
            return Err(doc.error(
                ConfigErrorKind::InvalidValue,
                &at("name"),
                None,
                format!("agent #{} has an empty name", i + 1),
                "give the agent a name such as `claude`",
            ));
        }
        if !seen.insert(a.name.as_str()) {
            return Err(doc.error(
                ConfigErrorKind::Duplicate,
                &at("name"),
                None,
                format!("agent `{}` is defined twice", a.name),
                "rename or remove one of them: agent names must be unique",
            ));
        }
        let agent_type: AgentType = a.agent_type.parse().map_err(|e: String| {
            doc.error(
                ConfigErrorKind::InvalidValue,
                &at("agent_type"),
                None,
                format!("agent `{}`: {e}", a.name),
                "set agent_type to claude, codex, kimi or gemini",
            )
        })?;
        if let Some(id) = &a.identity {
            check_identity_ref(
                doc,
                identities,
                id,
                &at("identity"),
                &format!("agent `{}`", a.name),
            )?;
        }
        let deadline = match &a.deadline {
            Some(d) => duration_at(doc, &at("deadline"), "deadline", d)?,
            None => resolved.container_deadline,
        };
        let idle = match &a.idle_timeout {
            Some(d) => duration_at(doc, &at("idle_timeout"), "idle_timeout", d)?,
            None => resolved.event_idle_timeout,
        };
        let network = match &a.network {
            Some(n) => network_at(doc, &at("network"), "network", n)?,
            None => resolved.network.clone(),
        };
        let memory_bytes = match &a.memory {
            Some(m) => memory_at(doc, &at("memory"), "memory", m)?,
            None => resolved.limits.memory_bytes,
        };
        check_cpus_pids(
            doc,
            &[Key("agents"), Item(i)],
            &format!("agents[{i}]"),
            a.cpus,
            a.pids_limit,
        )?;
        if a.max_turns == Some(0) {
            return Err(doc.error(
                ConfigErrorKind::InvalidValue,
                &at("max_turns"),
                None,
                format!("agent `{}` has max_turns 0", a.name),
                "set max_turns to 1 or more, or remove it for the CLI's default",
            ));
        }
        if let Some(user) = &a.user {
            if !valid_user(user) {
                return Err(doc.error(
                    ConfigErrorKind::InvalidValue,
                    &at("user"),
                    None,
                    format!(
                        "agent `{}` has user `{user}`, not `uid` or `uid:gid`",
                        a.name
                    ),
                    "use numeric ids like 1000:1000, or remove it for `container.user`",
                ));
            }
        }
        let hardening = a.hardening.clone().unwrap_or_default();
        out.push(AgentProfile {
            name: a.name.clone(),
            agent_type,
            cli_command: a
                .cli_command
                .clone()
                .unwrap_or_else(|| agent_type.default_command().to_string()),
            context_window_tokens: a
                .context_window_tokens
                .unwrap_or_else(|| default_context_window(agent_type)),
            strengths: a.strengths.clone(),
            event_protocol: default_event_protocol(agent_type).to_string(),
            auth_path: a
                .auth_path
                .clone()
                .unwrap_or_else(|| agent_type.default_auth_path().to_string()),
            model: a.model.clone(),
            max_turns: a.max_turns,
            image: a.image.clone(),
            identity: a.identity.clone(),
            network,
            deadline_seconds: Some(deadline.as_secs()),
            idle_timeout_seconds: Some(idle.as_secs()),
            limits: Some(ResourceLimits {
                memory_bytes,
                cpus: a.cpus.unwrap_or(g.container.cpus),
                pids: a.pids_limit.unwrap_or(g.container.pids_limit),
                cap_drop_all: hardening.cap_drop_all,
                no_new_privileges: hardening.no_new_privileges,
                init: hardening.init,
                user: a.user.clone().or_else(|| g.container.user.clone()),
            }),
        });
    }
    Ok(out)
}

fn validate_routing(
    routing: &RoutingFile,
    doc: &Doc<'_>,
    agents: &[&str],
    identities: &[&str],
) -> Result<(), ConfigError> {
    use Seg::{Item, Key};
    let mut seen = HashSet::new();
    for (i, rule) in routing.rules.iter().enumerate() {
        let at = |k: &'static str| vec![Key("rules"), Item(i), Key(k)];
        if rule.name.trim().is_empty() {
            return Err(doc.error(
                ConfigErrorKind::InvalidValue,
                &at("name"),
                None,
                format!("rule #{} has an empty name", i + 1),
                "give the rule a name; `route --explain` shows it",
            ));
        }
        if !seen.insert(rule.name.as_str()) {
            return Err(doc.error(
                ConfigErrorKind::Duplicate,
                &at("name"),
                None,
                format!("rule `{}` is defined twice", rule.name),
                "rename one of them: rule names must be unique",
            ));
        }
        let who = format!("rule `{}`", rule.name);
        check_target(
            doc,
            &who,
            &rule.agent,
            &rule.fallback,
            rule.identity.as_deref(),
            &[Key("rules"), Item(i)],
            agents,
            identities,
        )?;
        check_predicates(doc, rule, i)?;
    }
    let DefaultRuleConfig {
        agent,
        fallback,
        identity,
    } = &routing.default;
    check_target(
        doc,
        "the default rule",
        agent,
        fallback,
        identity.as_deref(),
        &[Key("default")],
        agents,
        identities,
    )
}

#[allow(clippy::too_many_arguments)]
fn check_target(
    doc: &Doc<'_>,
    who: &str,
    agent: &str,
    fallback: &[String],
    identity: Option<&str>,
    base: &[Seg<'_>],
    agents: &[&str],
    identities: &[&str],
) -> Result<(), ConfigError> {
    let path =
        |k: &'static str| -> Vec<Seg<'_>> { base.iter().copied().chain([Seg::Key(k)]).collect() };
    let unknown = |name: &str, field: &'static str, what: String| {
        let fix = format!(
            "use one of {} (or add it to agents.yaml)",
            agents.join(", ")
        );
        doc.error(
            ConfigErrorKind::UnknownReference,
            &path(field),
            Some(name),
            what,
            fix,
        )
    };
    if !agents.contains(&agent) {
        return Err(unknown(
            agent,
            "agent",
            format!("{who} names unknown agent `{agent}`"),
        ));
    }
    for (j, fb) in fallback.iter().enumerate() {
        if fb.trim().is_empty() {
            let mut p = path("fallback");
            p.push(Seg::Item(j));
            return Err(doc.error(
                ConfigErrorKind::InvalidValue,
                &p,
                None,
                format!("{who} has an empty fallback entry (#{})", j + 1),
                "remove the empty entry or name an agent",
            ));
        }
        if !agents.contains(&fb.as_str()) {
            return Err(unknown(
                fb,
                "fallback",
                format!("{who} falls back to unknown agent `{fb}`"),
            ));
        }
        if fb == agent || fallback[..j].contains(fb) {
            return Err(doc.error(
                ConfigErrorKind::Duplicate,
                &path("fallback"),
                Some(fb),
                format!("{who} lists `{fb}` twice (agent and fallback chain must not repeat)"),
                format!("remove the repeated `{fb}`"),
            ));
        }
    }
    if let Some(id) = identity {
        check_identity_ref(doc, identities, id, &path("identity"), who)?;
    }
    Ok(())
}

fn check_predicates(doc: &Doc<'_>, rule: &RuleConfig, i: usize) -> Result<(), ConfigError> {
    use Seg::{Item, Key};
    let m = &rule.match_;
    let values = |field: &'static str,
                  v: &Option<model::OneOrMany<String>>,
                  parse: &dyn Fn(&str) -> Result<(), String>,
                  fix: &str|
     -> Result<(), ConfigError> {
        for value in v.iter().flat_map(|v| v.as_slice()) {
            if let Err(e) = parse(value) {
                return Err(doc.error(
                    ConfigErrorKind::InvalidValue,
                    &[Key("rules"), Item(i), Key("match"), Key(field)],
                    Some(value),
                    format!("rule `{}`: {e}", rule.name),
                    fix.to_string(),
                ));
            }
        }
        Ok(())
    };
    values(
        "task_type",
        &m.task_type,
        &|s| s.parse::<TaskType>().map(drop),
        "use bugfix, feature, docs, refactor, research, migration or review",
    )?;
    values(
        "risk",
        &m.risk,
        &|s| s.parse::<Risk>().map(drop),
        "use low, medium or high",
    )?;
    values(
        "scope",
        &m.scope,
        &|s| s.parse::<Scope>().map(drop),
        "use small (0-1 files), medium (2-4) or large (5+)",
    )?;
    values(
        "source",
        &m.source,
        &|s| s.parse::<SourceKind>().map(drop),
        "use github or local",
    )?;
    values(
        "repo",
        &m.repo,
        &|s| {
            Glob::new(s)
                .map(drop)
                .map_err(|e| format!("`{s}` is not a valid glob: {e}"))
        },
        "use a glob like acme/* or **/widgets",
    )?;
    values(
        "labels",
        &m.labels,
        &|s| {
            if s.trim().is_empty() {
                Err("empty label".into())
            } else {
                Ok(())
            }
        },
        "remove the empty label",
    )?;
    if let Some(range) = &m.complexity {
        let bad = range.min.is_some_and(|v| v > 10)
            || range.max.is_some_and(|v| v > 10)
            || matches!((range.min, range.max), (Some(a), Some(b)) if a > b);
        if bad {
            return Err(doc.error(
                ConfigErrorKind::InvalidValue,
                &[Key("rules"), Item(i), Key("match"), Key("complexity")],
                None,
                format!(
                    "rule `{}`: complexity range {:?}..{:?} is not within 0..10 with min <= max",
                    rule.name, range.min, range.max
                ),
                "complexity scores run 0-10 (spec §5.1); write e.g. `complexity: {min: 7}`",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
