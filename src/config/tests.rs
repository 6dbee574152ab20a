//! Table tests for loading and validation, on in-memory sources.

use super::*;

const HOME: &str = "/srv/poly";

fn env(var: &str) -> Option<String> {
    match var {
        "HOME" => Some("/home/op".into()),
        "CREDS" => Some("/creds".into()),
        _ => None,
    }
}

fn load(sources: &ConfigSources) -> Result<Config, ConfigError> {
    Config::from_sources(Path::new(HOME), sources, &env)
}

/// The templates with one file replaced.
fn with(file: &str, text: &str) -> ConfigSources {
    let mut s = ConfigSources::templates();
    let slot = match file {
        CONFIG_FILE => &mut s.config,
        IDENTITIES_FILE => &mut s.identities,
        AGENTS_FILE => &mut s.agents,
        ROUTING_FILE => &mut s.routing,
        other => panic!("no file {other}"),
    };
    *slot = Some(text.to_string());
    s
}

/// Loads `file` = `text` on top of the templates and expects an error of `kind` at
/// `line` whose message and fix contain the given parts.
fn check_err(file: &str, text: &str, kind: ConfigErrorKind, line: usize, message: &str, fix: &str) {
    let err = load(&with(file, text)).unwrap_err();
    assert_eq!(err.kind, kind, "{err}");
    assert_eq!(err.file, Path::new(HOME).join(file), "{err}");
    assert_eq!(err.line, line, "{err}");
    assert!(err.column >= 1, "{err}");
    assert!(err.message.contains(message), "message: {err}");
    assert!(err.fix.contains(fix), "fix: {err}");
}

#[test]
fn templates_load_cleanly() {
    let cfg = load(&ConfigSources::templates()).unwrap();
    assert_eq!(cfg.workspace_root(), Path::new("/srv/poly/workspaces"));
    assert_eq!(cfg.mirror_root(), Path::new("/srv/poly/mirrors"));
    assert_eq!(cfg.poll_interval(), Duration::from_secs(30));
    assert_eq!(cfg.event_idle_timeout(), Duration::from_secs(300));
    assert_eq!(cfg.max_attempts(), 3);
    assert_eq!(cfg.max_concurrent_agents(), 8);
    assert_eq!(cfg.db_path(), Path::new("/srv/poly/queue.db"));
    assert_eq!(cfg.transcripts_dir(), Path::new("/srv/poly/transcripts"));
    let names: Vec<&str> = cfg.agents.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["claude", "codex", "kimi", "gemini"]);
    let personal = cfg.identity("personal").unwrap();
    assert_eq!(personal.volumes["claude"], Path::new("/home/op/.claude"));
    assert_eq!(cfg.routing.default.agent, "claude");
    assert_eq!(cfg.routing.default.fallback, ["codex"]);
    assert!(cfg.files().values().all(|read| *read));
}

/// Issue 29: the templates route no work to kimi, whose last CLI release cannot run a
/// task (docs/agents.md): not as a rule's agent, not in any fallback chain.
#[test]
fn templates_route_nothing_to_an_agent_that_cannot_run() {
    let cfg = load(&ConfigSources::templates()).unwrap();
    let routing = cfg.routing();
    let mut named: Vec<&str> = vec![routing.default.agent.as_str()];
    named.extend(routing.default.fallback.iter().map(String::as_str));
    for rule in &routing.rules {
        named.push(rule.agent.as_str());
        named.extend(rule.fallback.iter().map(String::as_str));
    }
    assert!(!named.contains(&"kimi"), "{named:?}");
}

#[test]
fn profiles_take_type_and_container_defaults() {
    let cfg = load(&ConfigSources::templates()).unwrap();
    let claude = cfg.agent("claude").unwrap();
    assert_eq!(claude.cli_command, "claude");
    assert_eq!(claude.auth_path, ".claude");
    assert_eq!(claude.event_protocol, "claude-stream-json");
    assert_eq!(claude.deadline_seconds, Some(45 * 60));
    assert_eq!(claude.idle_timeout_seconds, Some(300));
    let limits = claude.limits.as_ref().unwrap();
    assert_eq!(limits.memory_bytes, 4 << 30);
    assert!(limits.cap_drop_all && limits.no_new_privileges && limits.init);
    let codex = cfg.agent("codex").unwrap();
    assert_eq!(codex.event_protocol, "codex-exec-json");
    assert_eq!(codex.context_window_tokens, 272_000);
    assert!(cfg.agent("nobody").is_none());
}

#[test]
fn quota_settings() {
    use crate::config::model::QuotaHandoff;
    let defaults = load(&with(CONFIG_FILE, "max_attempts: 3\n"))
        .unwrap()
        .quota_settings();
    assert_eq!(
        (
            defaults.default_cooldown,
            defaults.handoff,
            defaults.return_to_preferred
        ),
        (
            std::time::Duration::from_secs(900),
            QuotaHandoff::Fresh,
            true
        )
    );
    let set = load(&with(
        CONFIG_FILE,
        "quota_default_cooldown: 1h30m\nquota_handoff: continue\nquota_return_to_preferred: false\n",
    ))
    .unwrap()
    .quota_settings();
    assert_eq!(
        (set.default_cooldown, set.handoff, set.return_to_preferred),
        (
            std::time::Duration::from_secs(5400),
            QuotaHandoff::Continue,
            false
        )
    );
}

#[test]
fn missing_files_mean_defaults() {
    let cfg = load(&ConfigSources::default()).unwrap();
    assert_eq!(cfg.global, GlobalConfig::default());
    assert!(cfg.identities.is_empty());
    assert_eq!(cfg.agents.len(), 4);
    assert!(cfg.routing.rules.is_empty());
    assert_eq!(cfg.routing.default.agent, "claude");
    assert_eq!(cfg.routing.default.fallback, ["codex", "kimi", "gemini"]);
    assert!(cfg.files().values().all(|read| !*read));

    // Without routing.yaml the default rule follows agents.yaml's order.
    let only = ConfigSources {
        agents: Some("agents:\n  - name: fast\n    agent_type: codex\n  - name: deep\n    agent_type: claude\n".into()),
        ..Default::default()
    };
    let cfg = load(&only).unwrap();
    assert_eq!(cfg.routing.default.agent, "fast");
    assert_eq!(cfg.routing.default.fallback, ["deep"]);
}

#[test]
fn repo_overrides_and_verify_merge() {
    let config = "\
verify:
  test: make test
  lint: make lint
  timeout: 5m
repos:
  - repo: acme/*
    base_ref: develop
    image: acme:dev
    verify:
      test: npm test
      timeout: 20m
  - repo: '**'
    base_ref: main
";
    let cfg = load(&with(CONFIG_FILE, config)).unwrap();
    assert_eq!(cfg.base_ref_for("acme/widgets"), Some("develop"));
    assert_eq!(cfg.base_ref_for("/tmp/other"), Some("main"));
    let v = cfg.verify_for("acme/widgets");
    assert_eq!(v.test.as_deref(), Some("npm test"));
    assert_eq!(v.lint.as_deref(), Some("make lint"));
    assert_eq!(v.timeout, Duration::from_secs(1200));
    let names: Vec<String> = v.commands().into_iter().map(|c| c.name).collect();
    assert_eq!(names, ["test", "lint"]);
    let other = cfg.verify_for("zeta/x");
    assert_eq!(other.test.as_deref(), Some("make test"));
    assert_eq!(other.timeout, Duration::from_secs(300));
    let claude = cfg.agent("claude").unwrap();
    assert_eq!(cfg.image_for("acme/widgets", claude), "acme:dev");
    assert_eq!(cfg.image_for("zeta/x", claude), "polyphony-worker:latest");
}

#[test]
fn config_yaml_errors() {
    use ConfigErrorKind::*;
    check_err(
        CONFIG_FILE,
        "poll_interval: 30s\nmax_concurent_agents: 4\n",
        UnknownField,
        2,
        "max_concurent_agents",
        "rename `max_concurent_agents` to `max_concurrent_agents`",
    );
    check_err(
        CONFIG_FILE,
        "poll_interval: soon\n",
        InvalidValue,
        1,
        "`poll_interval` is not a valid duration",
        "30s, 5m or 1h30m",
    );
    check_err(
        CONFIG_FILE,
        "container:\n  deadline: 30\n",
        InvalidValue,
        2,
        "container.deadline",
        "with a unit",
    );
    check_err(
        CONFIG_FILE,
        "container:\n  memory: 4x\n",
        InvalidValue,
        2,
        "memory",
        "512m or 4g",
    );
    check_err(
        CONFIG_FILE,
        "container:\n  network: wifi\n",
        InvalidValue,
        2,
        "wifi",
        "bridge, none, host or network:NAME",
    );
    check_err(
        CONFIG_FILE,
        "container:\n  network: network:host\n",
        InvalidValue,
        2,
        "network:host",
        "user-defined Docker network",
    );
    // Issue 14: the usage-limit settings.
    check_err(
        CONFIG_FILE,
        "max_attempts: 3\nquota_default_cooldown: soon\n",
        InvalidValue,
        2,
        "`quota_default_cooldown` is not a valid duration",
        "like 30s, 5m or 1h30m",
    );
    check_err(
        CONFIG_FILE,
        "quota_default_cooldown: 15\n",
        InvalidValue,
        1,
        "has no unit",
        "like 30s, 5m or 1h30m",
    );
    check_err(
        CONFIG_FILE,
        "quota_handoff: resume\n",
        InvalidValue,
        1,
        "resume",
        "fresh",
    );
    check_err(
        CONFIG_FILE,
        "quota_return_to_preferred: sometimes\n",
        WrongType,
        1,
        "quota_return_to_preferred",
        "true or false",
    );
    check_err(
        CONFIG_FILE,
        "max_attempts: three\n",
        WrongType,
        1,
        "`max_attempts`",
        "whole number",
    );
    check_err(
        CONFIG_FILE,
        "max_attempts: 0\n",
        InvalidValue,
        1,
        "max_attempts",
        "1 or more",
    );
    check_err(
        CONFIG_FILE,
        "default_identity: persnal\n",
        UnknownReference,
        1,
        "unknown identity `persnal`",
        "use one of personal",
    );
    check_err(
        CONFIG_FILE,
        "workspace_root: $NOPE/ws\n",
        InvalidValue,
        1,
        "$NOPE",
        "export the variable",
    );
    check_err(
        CONFIG_FILE,
        "repos:\n  - repo: 'a[b'\n",
        InvalidValue,
        2,
        "not a valid glob",
        "glob",
    );
    check_err(
        CONFIG_FILE,
        "github:\n  repos: [acme]\n",
        InvalidValue,
        2,
        "not `owner/name`",
        "owner/name",
    );
    check_err(
        CONFIG_FILE,
        "container:\n  user: bob\n",
        InvalidValue,
        2,
        "container.user",
        "numeric",
    );
    check_err(
        CONFIG_FILE,
        "poll_interval: \"30s\nmax_attempts: 3\n",
        Syntax,
        3,
        "invalid YAML",
        "indentation",
    );
}

#[test]
fn identities_yaml_errors() {
    use ConfigErrorKind::*;
    check_err(
        IDENTITIES_FILE,
        "identities:\n  - name: solo\n",
        InvalidValue,
        2,
        "identity `solo` has no volumes",
        "spec §7",
    );
    check_err(
        IDENTITIES_FILE,
        "identities:\n  - name: ''\n    volumes: {claude: ~/.claude}\n",
        InvalidValue,
        2,
        "empty name",
        "name required",
    );
    check_err(IDENTITIES_FILE, "identities:\n  - name: a\n    volumes: {claude: /c}\n  - name: a\n    volumes: {codex: /x}\n", Duplicate, 4, "identity `a` is defined twice", "unique");
    check_err(
        IDENTITIES_FILE,
        "identities:\n  - name: a\n    volumes:\n      cursor: /c\n",
        InvalidValue,
        4,
        "unknown agent type `cursor`",
        "claude, codex",
    );
    check_err(IDENTITIES_FILE, "identities:\n  - name: a\n    volumes: {claude: /c}\n    api_keys:\n      KEY: sk-ant-123\n", InvalidValue, 5, "not a pair of variable names", "HOST variable");
    check_err(
        IDENTITIES_FILE,
        "identities:\n  - name: a\n    volumz: {claude: /c}\n",
        UnknownField,
        3,
        "volumz",
        "rename `volumz` to `volumes`",
    );
}

#[test]
fn agents_yaml_errors() {
    use ConfigErrorKind::*;
    check_err(
        AGENTS_FILE,
        "agents:\n  - name: x\n    agent_type: cursor\n",
        InvalidValue,
        3,
        "unknown agent type `cursor`",
        "claude, codex, kimi, gemini or opencode",
    );
    check_err(AGENTS_FILE, "agents:\n  - name: claude\n    agent_type: claude\n  - name: claude\n    agent_type: codex\n", Duplicate, 4, "agent `claude` is defined twice", "unique");
    check_err(
        AGENTS_FILE,
        "agents:\n  - name: claude\n    agent_type: claude\n    identity: nobody\n",
        UnknownReference,
        4,
        "unknown identity `nobody`",
        "personal",
    );
    check_err(
        AGENTS_FILE,
        "agents:\n  - name: claude\n    agent_type: claude\n    deadline: forever\n",
        InvalidValue,
        4,
        "`deadline`",
        "30s",
    );
    check_err(
        AGENTS_FILE,
        "agents: []\n",
        InvalidValue,
        1,
        "no agents",
        "init --force",
    );
    check_err(
        AGENTS_FILE,
        "agents:\n  - name: claude\n    agent_type: claude\n    max_turns: many\n",
        WrongType,
        4,
        "max_turns",
        "whole number",
    );
}

/// Issue 28: a profile's `args` pass only the CLI's own flags its descriptor lists.
#[test]
fn profile_args_pass_only_the_clis_listed_flags() {
    use ConfigErrorKind::*;
    let text = "agents:\n  - name: claude\n    agent_type: claude\n  - name: oc\n    agent_type: opencode\n    args: [--auto, --agent, build, --variant=high]\n";
    let mut sources = with(AGENTS_FILE, text);
    sources.routing = Some("default:\n  agent: claude\n".into());
    let cfg = load(&sources).unwrap();
    let oc = cfg.agents.iter().find(|a| a.name == "oc").unwrap();
    assert_eq!(oc.args, ["--auto", "--agent", "build", "--variant=high"]);
    check_err(
        AGENTS_FILE,
        "agents:\n  - name: claude\n    agent_type: claude\n    args: [--model, x]\n",
        InvalidValue,
        4,
        "claude takes no extra flags",
        "remove the entry",
    );
    check_err(
        AGENTS_FILE,
        "agents:\n  - name: oc\n    agent_type: opencode\n    args: [--auto, --port, \"1\"]\n",
        InvalidValue,
        4,
        "`--port` is not a flag Polyphony passes: opencode takes --auto, --agent VALUE",
        "remove the entry",
    );
    check_err(
        AGENTS_FILE,
        "agents:\n  - name: oc\n    agent_type: opencode\n    args: [--agent]\n",
        InvalidValue,
        4,
        "`--agent` needs a value",
        "remove the entry",
    );
    check_err(
        AGENTS_FILE,
        "agents:\n  - name: oc\n    agent_type: opencode\n    args: [--auto=yes]\n",
        InvalidValue,
        4,
        "`--auto` takes no value",
        "remove the entry",
    );
}

const AGENTS4: &str =
    "agents:\n  - {name: claude, agent_type: claude}\n  - {name: codex, agent_type: codex}\n";

fn routing_err(text: &str, kind: ConfigErrorKind, line: usize, message: &str, fix: &str) {
    let mut s = with(ROUTING_FILE, text);
    s.agents = Some(AGENTS4.into());
    let err = load(&s).unwrap_err();
    assert_eq!(err.kind, kind, "{err}");
    assert_eq!(err.line, line, "{err}");
    assert!(err.message.contains(message), "message: {err}");
    assert!(err.fix.contains(fix), "fix: {err}");
}

#[test]
fn routing_yaml_errors() {
    use ConfigErrorKind::*;
    let default = "default:\n  agent: claude\n";
    routing_err(
        &format!("rules:\n  - name: hard\n    agent: claud\n{default}"),
        UnknownReference,
        3,
        "rule `hard` names unknown agent `claud`",
        "use one of claude, codex (or add it to agents.yaml)",
    );
    routing_err(
        &format!("rules:\n  - name: a\n    agent: claude\n    fallback: [codex, kimmi]\n{default}"),
        UnknownReference,
        4,
        "falls back to unknown agent `kimmi`",
        "claude, codex",
    );
    routing_err(
        &format!("rules:\n  - name: a\n    agent: claude\n    fallback: ['']\n{default}"),
        InvalidValue,
        4,
        "empty fallback entry",
        "remove the empty entry",
    );
    routing_err(
        &format!(
            "rules:\n  - name: a\n    agent: claude\n  - name: a\n    agent: codex\n{default}"
        ),
        Duplicate,
        4,
        "rule `a` is defined twice",
        "unique",
    );
    routing_err(
        &format!(
            "rules:\n  - name: a\n    match:\n      task_type: bugfx\n    agent: claude\n{default}"
        ),
        InvalidValue,
        4,
        "unknown task type `bugfx`",
        "bugfix",
    );
    routing_err(&format!("rules:\n  - name: a\n    match:\n      risk: [low, extreme]\n    agent: claude\n{default}"), InvalidValue, 4, "unknown risk `extreme`", "low, medium or high");
    routing_err(
        &format!(
            "rules:\n  - name: a\n    match:\n      scope: huge\n    agent: claude\n{default}"
        ),
        InvalidValue,
        4,
        "unknown scope",
        "small",
    );
    routing_err(
        &format!(
            "rules:\n  - name: a\n    match:\n      source: jira\n    agent: claude\n{default}"
        ),
        InvalidValue,
        4,
        "unknown source",
        "github or local",
    );
    routing_err(&format!("rules:\n  - name: a\n    match:\n      complexity: {{min: 8, max: 3}}\n    agent: claude\n{default}"), InvalidValue, 4, "complexity range", "0-10");
    routing_err(
        &format!(
            "rules:\n  - name: a\n    match:\n      task_typ: bugfix\n    agent: claude\n{default}"
        ),
        UnknownField,
        4,
        "task_typ",
        "rename `task_typ` to `task_type`",
    );
    routing_err(
        &format!("rules:\n  - name: a\n    agent: claude\n    identity: ghost\n{default}"),
        UnknownReference,
        4,
        "unknown identity `ghost`",
        "personal",
    );
    routing_err(
        "default:\n  agent: gpt\n",
        UnknownReference,
        2,
        "the default rule names unknown agent `gpt`",
        "claude, codex",
    );
    routing_err(
        "default:\n  agent: claude\n  fallback: [codex, claude]\n",
        Duplicate,
        3,
        "lists `claude` twice",
        "remove",
    );
    routing_err(
        "rules: []\n",
        MissingField,
        1,
        "missing field `default`",
        "add `default: …`",
    );
}

#[test]
fn errors_render_file_line_column_and_fix() {
    let mut s = with(
        ROUTING_FILE,
        "rules:\n  - name: hard\n    agent: claud\ndefault:\n  agent: claude\n",
    );
    s.agents = Some(AGENTS4.into());
    let err = load(&s).unwrap_err();
    assert_eq!(
        err.to_string(),
        "/srv/poly/routing.yaml:3:12: rule `hard` names unknown agent `claud` — fix: use one of claude, codex (or add it to agents.yaml)"
    );
}

#[test]
fn home_resolution() {
    let lookup = |vars: &'static [(&'static str, &'static str)]| {
        move |v: &str| {
            vars.iter()
                .find(|(k, _)| *k == v)
                .map(|(_, val)| val.to_string())
        }
    };
    let env1 = lookup(&[("HOME", "/home/op"), ("POLYPHONY_HOME", "/srv/p")]);
    assert_eq!(resolve_home(None, &env1).unwrap(), Path::new("/srv/p"));
    assert_eq!(
        resolve_home(Some(Path::new("~/alt")), &env1).unwrap(),
        Path::new("/home/op/alt")
    );
    let env2 = lookup(&[("HOME", "/home/op")]);
    assert_eq!(
        resolve_home(None, &env2).unwrap(),
        Path::new("/home/op/.polyphony")
    );
    let env3 = lookup(&[("HOME", "/home/op"), ("POLYPHONY_HOME", "")]);
    assert_eq!(
        resolve_home(None, &env3).unwrap(),
        Path::new("/home/op/.polyphony")
    );
    let env4 = lookup(&[]);
    assert_eq!(
        resolve_home(None, &env4).unwrap_err().kind,
        ConfigErrorKind::Io
    );
}

// ---------------------------------------------------------------- allow_unsafe (issue 11)

const AGENT_UNSAFE: &str = "agents:\n  - name: claude\n    agent_type: claude\n    network: host\n    egress: open\n    hardening:\n      cap_drop_all: false\n  - name: codex\n    agent_type: codex\n  - name: kimi\n    agent_type: kimi\n  - name: gemini\n    agent_type: gemini\n";

#[test]
fn unsafe_settings_are_refused_without_consent() {
    check_err(
        CONFIG_FILE,
        "container:\n  network: host\n",
        ConfigErrorKind::Unsafe,
        2,
        "`container.network: host`",
        "allow_unsafe: true",
    );
    check_err(
        CONFIG_FILE,
        "container:\n  user: \"0:0\"\n",
        ConfigErrorKind::Unsafe,
        2,
        "runs agents and checks as root",
        "allow_unsafe: true",
    );
    check_err(
        CONFIG_FILE,
        "verify:\n  protected_paths: []\n",
        ConfigErrorKind::Unsafe,
        2,
        "`verify.protected_paths` is empty",
        ".github/**",
    );
    check_err(
        AGENTS_FILE,
        AGENT_UNSAFE,
        ConfigErrorKind::Unsafe,
        4,
        "agent `claude` has `network: host`",
        "allow_unsafe: true",
    );
    check_err(
        IDENTITIES_FILE,
        "identities:\n  - name: personal\n    volumes:\n      claude: /var/run/docker.sock\n",
        ConfigErrorKind::Unsafe,
        4,
        "the Docker socket",
        "login directory",
    );
    check_err(
        IDENTITIES_FILE,
        "identities:\n  - name: personal\n    volumes:\n      claude: /\n",
        ConfigErrorKind::Unsafe,
        4,
        "whole filesystem",
        "allow_unsafe: true",
    );
    check_err(
        IDENTITIES_FILE,
        "identities:\n  - name: personal\n    volumes:\n      claude: ~/.claude\n    api_keys:\n      GH_TOKEN: WORK_TOKEN\n",
        ConfigErrorKind::Unsafe,
        6,
        "hands the GitHub token to the agent",
        "remove the entry",
    );
}

#[test]
fn consent_turns_each_unsafe_setting_into_a_warning() {
    let mut s = with(
        CONFIG_FILE,
        "allow_unsafe: true\ncontainer:\n  network: host\n  user: \"0\"\nverify:\n  protected_paths: []\n",
    );
    s.agents = Some(AGENT_UNSAFE.to_string());
    let cfg = load(&s).unwrap();
    let found: Vec<(String, usize)> = cfg
        .unsafe_settings()
        .iter()
        .map(|e| {
            (
                e.file.file_name().unwrap().to_string_lossy().into_owned(),
                e.line,
            )
        })
        .collect();
    assert_eq!(
        found,
        [
            ("config.yaml".to_string(), 3),
            ("config.yaml".to_string(), 4),
            ("config.yaml".to_string(), 6),
            ("agents.yaml".to_string(), 4),
            ("agents.yaml".to_string(), 5),
            ("agents.yaml".to_string(), 7),
        ]
    );
    assert!(load(&ConfigSources::templates())
        .unwrap()
        .unsafe_settings()
        .is_empty());
}

#[test]
fn a_profile_may_set_its_own_container_user_but_not_root() {
    let agents = "agents:\n  - name: claude\n    agent_type: claude\n    user: \"2000:2000\"\n  - name: codex\n    agent_type: codex\n  - name: kimi\n    agent_type: kimi\n  - name: gemini\n    agent_type: gemini\n";
    let cfg = load(&with(AGENTS_FILE, agents)).unwrap();
    let user = |name: &str| {
        cfg.agent(name)
            .unwrap()
            .limits
            .as_ref()
            .unwrap()
            .user
            .clone()
    };
    assert_eq!(user("claude").as_deref(), Some("2000:2000"));
    assert_eq!(
        user("codex"),
        None,
        "unset: container.user, then the runtime default"
    );
    check_err(
        AGENTS_FILE,
        &agents.replace("2000:2000", "0:0"),
        ConfigErrorKind::Unsafe,
        4,
        "agent `claude` runs as root",
        "allow_unsafe: true",
    );
}

#[test]
fn the_prompt_template_is_parsed_once_at_load_and_carried() {
    use crate::agents::prompt::{PromptContext, PromptTemplate};
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join(CONFIG_FILE),
        "prompt_template: $POLYPHONY_HOME/prompt.md\n",
    )
    .unwrap();
    std::fs::write(home.path().join("prompt.md"), "Do {title} in {repo}.\n").unwrap();
    let cfg = Config::load(home.path()).unwrap();
    let ctx = PromptContext {
        title: "the thing",
        repo: "acme/widgets",
        ..PromptContext::default()
    };
    assert_eq!(cfg.prompt().render(&ctx), "Do the thing in acme/widgets.\n");
    // The file is read once: changing it later does not change the loaded config.
    std::fs::write(home.path().join("prompt.md"), "Other {title}\n").unwrap();
    assert_eq!(cfg.prompt().render(&ctx), "Do the thing in acme/widgets.\n");
    // `from_sources` reads nothing from disk: the built-in template stands in.
    let sources = ConfigSources::read(home.path()).unwrap();
    let pure = Config::from_sources(home.path(), &sources, &env).unwrap();
    assert_eq!(pure.prompt_template(), cfg.prompt_template());
    assert_eq!(pure.prompt(), &PromptTemplate::builtin());
    // No `prompt_template`: the built-in template.
    assert_eq!(
        load(&ConfigSources::templates()).unwrap().prompt(),
        &PromptTemplate::builtin()
    );
}

#[test]
fn shepherd_conflicts_is_merge_or_rebase() {
    use shepherd::ConflictMode;
    let cfg = load(&ConfigSources::templates()).unwrap();
    assert_eq!(cfg.global().shepherd.conflicts, ConflictMode::Merge);
    let cfg = load(&with(CONFIG_FILE, "shepherd:\n  conflicts: rebase\n")).unwrap();
    assert_eq!(cfg.global().shepherd.conflicts, ConflictMode::Rebase);
    check_err(
        CONFIG_FILE,
        "shepherd:\n  conflicts: squash\n",
        ConfigErrorKind::InvalidValue,
        2,
        "`conflicts` is `squash`",
        "set `conflicts` to `merge` or `rebase`",
    );
}

// ---------------------------------------------------------------- egress (issue 25)

const FOUR: &str = "  - name: codex\n    agent_type: codex\n  - name: kimi\n    agent_type: kimi\n  - name: gemini\n    agent_type: gemini\n";

#[test]
fn every_profile_defaults_to_allowlist_with_its_model_hosts() {
    let cfg = load(&ConfigSources::templates()).unwrap();
    for a in cfg.agents() {
        assert_eq!(
            a.egress.mode,
            crate::domain::EgressMode::Allowlist,
            "{}",
            a.name
        );
    }
    let agents = format!("agents:\n  - name: claude\n    agent_type: claude\n    egress:\n      allow: [\"registry.npmjs.org:443\", \"*.crates.io:443\"]\n{FOUR}");
    let cfg = load(&with(AGENTS_FILE, &agents)).unwrap();
    assert_eq!(
        cfg.agents()[0].egress.allow,
        ["registry.npmjs.org:443", "*.crates.io:443"]
    );
    let cfg = load(&with(
        AGENTS_FILE,
        &format!("agents:\n  - name: claude\n    agent_type: claude\n    egress: none\n{FOUR}"),
    ))
    .unwrap();
    assert_eq!(cfg.agents()[0].egress.mode, crate::domain::EgressMode::None);
    let cfg = load(&with(CONFIG_FILE, "egress:\n  mode: none\n")).unwrap();
    assert!(cfg
        .agents()
        .iter()
        .all(|a| a.egress.mode == crate::domain::EgressMode::None));
}

#[test]
fn egress_errors_name_the_field_and_the_fix() {
    check_err(
        CONFIG_FILE,
        "egress:\n  mode: wide\n",
        ConfigErrorKind::InvalidValue,
        2,
        "not an egress mode",
        "allowlist",
    );
    check_err(
        CONFIG_FILE,
        "egress:\n  allow: [\"10.0.0.1:443\"]\n",
        ConfigErrorKind::InvalidValue,
        2,
        "IP addresses cannot be allowed",
        "host:port",
    );
    check_err(
        CONFIG_FILE,
        "egress:\n  allow:\n    - api.example.com\n",
        ConfigErrorKind::InvalidValue,
        3,
        "has no port",
        "host:port",
    );
    check_err(
        CONFIG_FILE,
        "egress:\n  hosts:\n    model.internal: nowhere\n",
        ConfigErrorKind::InvalidValue,
        3,
        "not an IP address",
        "10.0.0.5",
    );
    check_err(
        CONFIG_FILE,
        "egress:\n  outbound_network: host\n",
        ConfigErrorKind::InvalidValue,
        2,
        "outbound_network",
        "network:NAME",
    );
    check_err(
        CONFIG_FILE,
        "egress:\n  max_bytes: lots\n",
        ConfigErrorKind::InvalidValue,
        2,
        "max_bytes",
        "4g",
    );
    check_err(
        CONFIG_FILE,
        "repos:\n  - repo: acme/*\n    egress:\n      allow: [\"*:443\"]\n",
        ConfigErrorKind::InvalidValue,
        4,
        "not a host name",
        "host:port",
    );
    check_err(
        AGENTS_FILE,
        &format!("agents:\n  - name: claude\n    agent_type: claude\n    network: bridge\n{FOUR}"),
        ConfigErrorKind::InvalidValue,
        4,
        "applies only under `egress: open`",
        "remove `network`",
    );
    check_err(
        AGENTS_FILE,
        &format!("agents:\n  - name: claude\n    agent_type: claude\n    egress:\n      mode: allowlist\n      allow: [\"evil\"]\n{FOUR}"),
        ConfigErrorKind::InvalidValue,
        6,
        "has no port",
        "host:port",
    );
}

#[test]
fn open_egress_needs_consent_and_then_warns() {
    check_err(
        CONFIG_FILE,
        "egress:\n  mode: open\n",
        ConfigErrorKind::Unsafe,
        2,
        "`egress.mode: open`",
        "allow_unsafe: true",
    );
    check_err(
        AGENTS_FILE,
        &format!("agents:\n  - name: claude\n    agent_type: claude\n    egress: open\n{FOUR}"),
        ConfigErrorKind::Unsafe,
        4,
        "agent `claude` has `egress: open`",
        "allow_unsafe: true",
    );
    let mut s = with(CONFIG_FILE, "allow_unsafe: true\n");
    s.agents = Some(format!("agents:\n  - name: claude\n    agent_type: claude\n    egress: open\n    network: network:my-net\n{FOUR}"));
    let cfg = load(&s).unwrap();
    assert_eq!(cfg.unsafe_settings().len(), 1);
    assert_eq!(cfg.agents()[0].network, NetworkMode::Named("my-net".into()));
}

#[test]
fn retention_defaults_never_and_bounds() {
    use super::retention::RetentionSettings;
    let day = Duration::from_secs(86_400);
    assert_eq!(
        load(&ConfigSources::templates()).unwrap().retention(),
        RetentionSettings {
            workspaces: Some(day),
            events: Some(30 * day),
            every: Some(Duration::from_secs(3600)),
        }
    );
    let cfg = load(&with(
        CONFIG_FILE,
        "retention:\n  workspaces: never\n  events: 90d\n  every: 10m\n",
    ))
    .unwrap();
    assert_eq!(cfg.retention().workspaces, None);
    assert_eq!(cfg.retention().events, Some(90 * day));
    assert_eq!(cfg.retention().every, Some(Duration::from_secs(600)));
    let bad = |text: &str, line: usize, message: &str, fix: &str| {
        check_err(
            CONFIG_FILE,
            text,
            ConfigErrorKind::InvalidValue,
            line,
            message,
            fix,
        )
    };
    bad(
        "retention:\n  workspaces: forever\n",
        2,
        "`retention.workspaces` is neither a duration nor `never`",
        "or `never`",
    );
    bad(
        "retention:\n  events: 1h\n",
        2,
        "`retention.events` is 1h, below the bound of 1day",
        "at least 1day",
    );
    bad(
        "retention:\n  every: 1s\n",
        2,
        "`retention.every` is 1s, below the bound of 10s",
        "at least 10s",
    );
    bad(
        "retention:\n  workspaces: 100000d\n",
        2,
        "above the bound of 3650 days",
        "at most 3650d",
    );
    check_err(
        CONFIG_FILE,
        "retention:\n  keep: 1d\n",
        ConfigErrorKind::UnknownField,
        2,
        "keep",
        "workspaces",
    );
}

/// Issue 27: leases and machine ids are bounded, each error naming the field and the fix.
#[test]
fn store_lease_heartbeat_and_machine_bounds() {
    use ConfigErrorKind::*;
    check_err(
        CONFIG_FILE,
        "store:\n  lease: 5s\n",
        InvalidValue,
        2,
        "`store.lease` is 5s, outside the bounds of 10s to 1h",
        "between 10s and 1h",
    );
    check_err(
        CONFIG_FILE,
        "store:\n  lease: 30s\n  heartbeat: 15s\n",
        InvalidValue,
        3,
        "`store.heartbeat` is 15s, outside 1s to a third of `store.lease` (30s)",
        "at most a third of the lease",
    );
    check_err(
        CONFIG_FILE,
        "store:\n  machine: build/3\n",
        InvalidValue,
        2,
        "`store.machine` is `build/3`: not a machine id",
        "letters, digits",
    );
    let cfg = load(&with(
        CONFIG_FILE,
        "store:\n  machine: build-3\n  lease: 2m\n  heartbeat: 20s\n",
    ))
    .unwrap();
    assert_eq!(cfg.store_machine(), Some("build-3"));
    assert_eq!(cfg.store_lease(), Duration::from_secs(120));
    assert_eq!(cfg.store_heartbeat(), Duration::from_secs(20));
    let defaults = load(&with(CONFIG_FILE, "poll_interval: 30s\n")).unwrap();
    assert_eq!(
        (defaults.store_lease(), defaults.store_heartbeat()),
        (Duration::from_secs(60), Duration::from_secs(10))
    );
}
