//! Loading: the home directory, the four files' text, and [`Config::load`] /
//! [`Config::from_sources`], which parse each file, resolve and validate it (`resolve`,
//! `profiles`, `rules`, `checks`, `consent`) and build the [`Config`].
//!
//! Each file's text is held as a [`Doc`] (`doc.rs`) so every error can point at file:line.

use std::path::{Path, PathBuf};

use super::doc::{Doc, Docs};
use super::locate::Seg;
use super::model::{AgentConfig, AgentsFile, DefaultRuleConfig, IdentitiesFile, RoutingFile};
use super::profiles::{build_agents, build_identities, check_identity_ref};
use super::resolve::resolve_global;
use super::rules::validate_routing;
use super::{
    checks, consent, templates, values, Config, ConfigError, ConfigErrorKind, GlobalConfig,
    AGENTS_FILE, CONFIG_FILE, FILES, IDENTITIES_FILE, ROUTING_FILE,
};
use crate::agents::prompt::PromptTemplate;
use crate::domain::AgentType;

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

impl Config {
    /// Reads and validates the four files under `home`.
    pub fn load(home: &Path) -> Result<Config, ConfigError> {
        let sources = ConfigSources::read(home)?;
        let mut config = Config::from_sources(home, &sources, &|v| std::env::var(v).ok())?;
        // What reads the disk (issue 12): a root holding someone else's files, and the
        // prompt template, parsed once here so a missing file or a bad placeholder is a
        // config error now rather than a failed attempt later.
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
            config.prompt = read_prompt_template(path, &doc)?;
        }
        // A credential volume that is a symlink into a system directory (issue 24).
        let ids_doc = Doc::new(home, IDENTITIES_FILE, &sources.identities);
        let linked = consent::symlinked_volumes(&config.identities, &ids_doc);
        if let Some(first) = linked.first() {
            if !config.global.allow_unsafe {
                return Err(first.clone());
            }
        }
        config.unsafe_settings.extend(linked);
        Ok(config)
    }

    /// Validates already-read file contents. `lookup` answers environment variables for
    /// `$VAR` expansion (`POLYPHONY_HOME` always resolves to `home`). Reads nothing from
    /// disk: the config's prompt is the built-in template even when `prompt_template`
    /// names a file (only [`Config::load`] reads and parses that file).
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
                    .filter(|t| crate::agents::descriptor(**t).default_profile)
                    .map(|t| default_agent_config(*t))
                    .collect(),
            },
        };
        let routing: RoutingFile = match &sources.routing {
            Some(_) => docs.routing.parse()?,
            None => default_routing(&agents_file),
        };

        checks::check_values(&global, &agents_file, &docs.config, &docs.agents)?;
        super::quota::check(&global, &docs.config)?;
        super::retention::check(&global, &docs.config)?;
        let resolved = resolve_global(home, &global, &docs.config, &env)?;
        super::egress::check_global(&global, &docs.config)?;
        super::bounds::check_global(&global, &resolved, &docs.config)?;
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
            prompt: PromptTemplate::builtin(),
            resolved,
            unsafe_settings,
        })
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
        args: Vec::new(),
        image: None,
        identity: None,
        network: None,
        egress: None,
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

/// Reads and parses the configured prompt template.
fn read_prompt_template(path: &Path, doc: &Doc<'_>) -> Result<PromptTemplate, ConfigError> {
    PromptTemplate::load(path).map_err(|e| {
        doc.error(
            ConfigErrorKind::InvalidValue,
            &[Seg::Key("prompt_template")],
            None,
            format!("`prompt_template` {}: {e}", path.display()),
            "point it at a readable template file whose placeholders are listed in the README, or remove the line for the built-in template",
        )
    })
}
