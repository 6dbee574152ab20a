//! The self-contained demonstration (`polyphony demo`) and its fixtures, shared with the
//! end-to-end tests: a sample repository with a failing test, a home that runs every
//! agent in the offline test image, and four tasks whose fake agents land first time,
//! land on the repair retry, land on the fallback agent after a quota hit, and end BLOCKED.

use std::path::{Path, PathBuf};

use crate::domain::TaskState;

/// The sample project: `add` subtracts, `test.sh` catches it; `.polyphony.yaml` on the
/// base branch names the checks the orchestrator re-runs.
const CALC_SH: &str = "# Arithmetic helpers for the demo project.\nadd() {\n    a=$1\n    b=$2\n    echo $((a - b))\n}\n";
const TEST_SH: &str = "#!/bin/sh\n. ./calc.sh\ngot=$(add 2 3)\nif [ \"$got\" != 5 ]; then\n    echo \"FAIL: add 2 3 gave $got, expected 5\"\n    exit 1\nfi\necho \"ok: add 2 3 = 5\"\n";
const POLYPHONY_YAML: &str = "# Checks Polyphony runs (from the base branch) before landing.\ntest: sh test.sh\nlint: sh -n calc.sh\n";
const README_MD: &str =
    "# calc\n\nA tiny shell library with a failing test, for `polyphony demo`.\n";

/// The fix the fake agents apply when their scenario says so.
pub const FIX_DIRECTIVE: &str = "polyphony-fake-sed: calc.sh s/a - b/a + b/";

/// Creates `dir/calc.git` (a bare origin on `main`) holding the sample project; returns
/// its path.
pub fn write_sample_repo(dir: &Path) -> anyhow::Result<PathBuf> {
    let work = dir.join("calc-src");
    std::fs::create_dir_all(&work)?;
    for (name, text) in [
        ("calc.sh", CALC_SH),
        ("test.sh", TEST_SH),
        (".polyphony.yaml", POLYPHONY_YAML),
        ("README.md", README_MD),
    ] {
        std::fs::write(work.join(name), text)?;
    }
    let origin = dir.join("calc.git");
    crate::workspace::seed_bare_repo(&work, &origin, "calc: add() with a test")?;
    std::fs::remove_dir_all(&work)?;
    Ok(origin)
}

/// Writes a home whose agents all run in `image` with dummy logins under `dir/logins`:
/// each agent's login directory holds exactly the files its descriptor stages (and the
/// files beside it), so every mount the identity asks for exists and no attempt warns
/// about a missing login. The fake agents call no model API, so the home turns the model
/// gateway off: there is nothing for it to stand in for.
pub fn write_home(home: &Path, dir: &Path, image: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(home)?;
    let logins = dir.join("logins");
    let mut volumes = String::new();
    for agent in crate::domain::AgentType::ALL {
        let login = logins.join(agent.as_str());
        std::fs::create_dir_all(&login)?;
        let mut files: Vec<PathBuf> = crate::identity::credential_files(agent)
            .iter()
            .map(|f| login.join(f))
            .collect();
        for (suffix, _) in crate::identity::sibling_files(agent) {
            let mut beside = login.clone().into_os_string();
            beside.push(suffix);
            files.push(PathBuf::from(beside));
        }
        for file in files {
            if let Some(parent) = file.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&file, dummy_login(&file))?;
        }
        volumes.push_str(&format!("      {agent}: {}\n", login.display()));
    }
    std::fs::write(
        home.join("config.yaml"),
        format!(
            "# Written by `polyphony demo`.\npoll_interval: 30s\nmax_concurrent_agents: 4\nevent_idle_timeout: 1m\nmax_attempts: 3\ndefault_identity: demo\n# The offline fake agents reach nothing: no network at all.\negress:\n  mode: none\n# They call no model API either: no gateway to stand in for one.\ngateway:\n  enabled: false\ncontainer:\n  image: {image}\n  deadline: 2m\n  memory: 512m\n  cpus: 1\n"
        ),
    )?;
    std::fs::write(
        home.join("identities.yaml"),
        format!("identities:\n  - name: demo\n    volumes:\n{volumes}"),
    )?;
    std::fs::write(
        home.join("routing.yaml"),
        "# Everything goes to claude; codex takes over when claude is out of quota.\ndefault:\n  agent: claude\n  fallback: [codex]\n",
    )?;
    Ok(())
}

/// A dummy login file's text, valid for its kind (the fake agents read none of them).
fn dummy_login(file: &Path) -> &'static str {
    match file.extension().and_then(|e| e.to_str()) {
        Some("json") => "{\"demo\": true}\n",
        Some("toml") => "# A dummy login written by `polyphony demo`.\n",
        _ => "polyphony-demo\n",
    }
}

/// One demo task: title, body (with the fake agents' directives) and the state it must
/// end in.
pub struct DemoTask {
    pub title: &'static str,
    pub body: String,
    pub expect: TaskState,
    pub story: &'static str,
}

/// Enqueues the demo's four tasks in `store` against the sample repository at `origin`;
/// returns each task's id beside its [`DemoTask`].
pub fn enqueue(
    store: &crate::store::Store,
    origin: &std::path::Path,
) -> Result<Vec<(String, DemoTask)>, crate::store::StoreError> {
    enqueue_these(store, origin, tasks())
}

/// Enqueues `list` (some of [`tasks`]) like [`enqueue`].
pub fn enqueue_these(
    store: &crate::store::Store,
    origin: &std::path::Path,
    list: Vec<DemoTask>,
) -> Result<Vec<(String, DemoTask)>, crate::store::StoreError> {
    let mut out = Vec::new();
    for t in list {
        let id = store.next_local_task_id()?;
        let mut task = crate::domain::Task::new(
            &id,
            crate::domain::SourceKind::Local,
            format!("local:{id}"),
            origin.display().to_string(),
            t.title,
            chrono::Utc::now(),
        );
        task.body = t.body.clone();
        task.task_type = crate::domain::TaskType::Bugfix;
        store.insert_task(&task)?;
        out.push((id, t));
    }
    Ok(out)
}

/// The four tasks of the demo.
pub fn tasks() -> Vec<DemoTask> {
    vec![
        DemoTask {
            title: "Fix add(): it subtracts",
            body: format!("`add 2 3` prints -1; test.sh fails.\n\npolyphony-fake: succeed\n{FIX_DIRECTIVE}\n"),
            expect: TaskState::Landed,
            story: "lands first time",
        },
        DemoTask {
            title: "Fix add() (needs a repair round)",
            body: format!("`add 2 3` prints -1.\n\npolyphony-fake: fix-on-retry\n{FIX_DIRECTIVE}\n"),
            expect: TaskState::Landed,
            story: "fails verification, lands on the repair retry",
        },
        DemoTask {
            title: "Fix add() (claude is out of quota)",
            body: format!("`add 2 3` prints -1.\n\npolyphony-fake[claude]: quota\npolyphony-fake: succeed\n{FIX_DIRECTIVE}\n"),
            expect: TaskState::Landed,
            story: "claude hits its usage limit, codex lands it",
        },
        DemoTask {
            title: "Fix add() (the agent never gets it right)",
            body: "`add 2 3` prints -1.\n\npolyphony-fake: fail-tests\n".to_string(),
            expect: TaskState::Blocked,
            story: "fails verification 3 times, ends BLOCKED",
        },
    ]
}

// ---------------------------------------------------------------- demo --real-claude

/// What the scripted model does in `demo --real-claude`, decided from the request the REAL
/// Claude Code sent (the task's title and, on a repair round, the failing check's output are
/// in its prompt). `limited`: this is the API of the identity that is out of quota.
pub fn real_claude_script(
    turn: &crate::scripted_model::Turn<'_>,
    limited: bool,
    reset_epoch: i64,
) -> crate::scripted_model::Reply {
    use crate::scripted_model::Reply;
    let t = turn.transcript;
    if t.contains("tool_result") {
        return Reply::Text("Done: see the diff.".into());
    }
    if limited && t.contains("claude is out of quota") {
        return Reply::RateLimited {
            retry_after_secs: 3600,
            reset_epoch,
        };
    }
    let no_fix = t.contains("the agent never gets it right")
        || (t.contains("needs a repair round") && !t.contains("FAIL: add 2 3 gave -1"));
    if no_fix {
        Reply::Bash("echo 'add() looks fine to me' >> NOTES.md".into())
    } else {
        Reply::Bash("sed -i 's/a - b/a + b/' calc.sh".into())
    }
}

/// Host variables the real-Claude demo home's identities read (set by the demo itself).
pub const REAL_KEY_VAR: &str = "POLYPHONY_DEMO_ANTHROPIC_KEY";
pub const REAL_URL_VAR: &str = "POLYPHONY_DEMO_ANTHROPIC_URL";
pub const REAL_URL2_VAR: &str = "POLYPHONY_DEMO_ANTHROPIC_URL_2";

/// config.yaml's `egress` section for agents that reach a scripted model API at
/// `address` (on the Docker network `network`) as `host` on `ports`.
pub fn egress_yaml(network: &str, address: std::net::IpAddr, host: &str, ports: &[u16]) -> String {
    let allow: Vec<String> = ports.iter().map(|p| format!("\"{host}:{p}\"")).collect();
    format!(
        "egress:\n  outbound_network: network:{network}\n  hosts:\n    {host}: \"{address}\"\n  allow: [{}]\n",
        allow.join(", ")
    )
}

/// The name the real-Claude demo's agents reach the scripted model API by, through their
/// egress proxy (config.yaml `egress.hosts` pins it to the API's address).
pub const SCRIPTED_MODEL_HOST: &str = "scripted-model.test";

/// A home whose agents are the real Claude in `image`, with egress `allowlist`: each
/// attempt's proxy reaches the scripted model API at `model` (an address on the Docker
/// network `network`, the proxies' outbound network) by the name [`SCRIPTED_MODEL_HOST`]
/// on the listed ports, and nothing else. Profile `claude` (identity `demo`, whose API is
/// out of quota for one task) falls back to `claude-b` (identity `second`). `user`: the
/// container user when the daemon is root.
pub fn write_real_home(
    home: &Path,
    dir: &Path,
    image: &str,
    network: &str,
    model: (std::net::IpAddr, &[u16]),
    user: Option<&str>,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(home)?;
    let login = dir.join("logins").join("claude");
    std::fs::create_dir_all(&login)?;
    std::fs::write(login.join("settings.json"), "{}\n")?;
    let user = user.map_or(String::new(), |u| format!("  user: \"{u}\"\n"));
    std::fs::write(
        home.join("config.yaml"),
        format!(
            "# Written by `polyphony demo --real-claude`.\npoll_interval: 30s\nmax_concurrent_agents: 2\nevent_idle_timeout: 1m\nmax_attempts: 3\ndefault_identity: demo\ncontainer:\n  image: {image}\n{user}  deadline: 3m\n  memory: 1g\n  cpus: 1\n# The scripted API is reached by name through each attempt's egress proxy.\ngateway:\n  enabled: false\n{}",
            egress_yaml(network, model.0, SCRIPTED_MODEL_HOST, model.1)
        ),
    )?;
    let identity = |name: &str, url_var: &str| {
        format!(
            "  - name: {name}\n    volumes:\n      claude: {}\n    api_keys:\n      ANTHROPIC_API_KEY: {REAL_KEY_VAR}\n      ANTHROPIC_BASE_URL: {url_var}\n",
            login.display()
        )
    };
    std::fs::write(
        home.join("identities.yaml"),
        format!(
            "identities:\n{}{}",
            identity("demo", REAL_URL_VAR),
            identity("second", REAL_URL2_VAR)
        ),
    )?;
    std::fs::write(
        home.join("agents.yaml"),
        "agents:\n  - name: claude\n    agent_type: claude\n  - name: claude-b\n    agent_type: claude\n    identity: second\n",
    )?;
    std::fs::write(
        home.join("routing.yaml"),
        "# The real Claude; a second Claude identity takes over when the first is out of quota.\ndefault:\n  agent: claude\n  fallback: [claude-b]\n",
    )?;
    Ok(())
}

// ---------------------------------------------------------------- demo --real-codex

/// What the scripted Responses API does in `demo --real-codex`: the fix with `exec_command`,
/// then (once the REAL Codex sent the command's output back) a closing message.
pub fn real_codex_script(turn: &crate::scripted_openai::Turn<'_>) -> crate::scripted_openai::Reply {
    use crate::scripted_openai::Reply;
    if turn.transcript.contains("function_call_output") {
        Reply::Text("Fixed add(): it now adds.".into())
    } else {
        Reply::Shell("sed -i 's/a - b/a + b/' calc.sh".into())
    }
}

/// Host variables the real-Codex demo home's identity reads (the demo's own environment).
pub const CODEX_KEY_VAR: &str = "POLYPHONY_DEMO_OPENAI_KEY";
pub const CODEX_URL_VAR: &str = "POLYPHONY_DEMO_OPENAI_URL";

/// A home whose one agent is the real Codex in `image`. Its login directory holds only a
/// `config.toml` whose model provider is the scripted Responses API by the name
/// [`SCRIPTED_MODEL_HOST`] (what an operator's `~/.codex/config.toml` does for a custom
/// endpoint); the key and the API's address (the model gateway's upstream) come through the
/// identity's `api_keys`. Egress `allowlist`: each attempt's proxy reaches `model` (on the
/// Docker network `network`) by that name on its port, and nothing else.
pub fn write_real_codex_home(
    home: &Path,
    dir: &Path,
    image: &str,
    network: &str,
    model: (std::net::IpAddr, u16),
    user: Option<&str>,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(home)?;
    let login = dir.join("logins").join("codex");
    std::fs::create_dir_all(&login)?;
    std::fs::write(
        login.join("config.toml"),
        crate::scripted_openai::codex_config_toml(
            &format!("http://{SCRIPTED_MODEL_HOST}:{}/v1", model.1),
            "OPENAI_API_KEY",
            "gpt-5.5",
        ),
    )?;
    let user = user.map_or(String::new(), |u| format!("  user: \"{u}\"\n"));
    std::fs::write(
        home.join("config.yaml"),
        format!(
            "# Written by `polyphony demo --real-codex`.\npoll_interval: 30s\nmax_concurrent_agents: 1\nevent_idle_timeout: 1m\nmax_attempts: 2\ndefault_identity: demo\ncontainer:\n  image: {image}\n{user}  deadline: 3m\n  memory: 1g\n  cpus: 1\n{}",
            egress_yaml(network, model.0, SCRIPTED_MODEL_HOST, &[model.1])
        ),
    )?;
    std::fs::write(
        home.join("identities.yaml"),
        format!(
            "identities:\n  - name: demo\n    volumes:\n      codex: {}\n    api_keys:\n      OPENAI_API_KEY: {CODEX_KEY_VAR}\n      OPENAI_BASE_URL: {CODEX_URL_VAR}\n",
            login.display()
        ),
    )?;
    std::fs::write(
        home.join("agents.yaml"),
        "agents:\n  - name: codex\n    agent_type: codex\n",
    )?;
    std::fs::write(
        home.join("routing.yaml"),
        "# The real Codex CLI.\ndefault:\n  agent: codex\n  fallback: []\n",
    )?;
    Ok(())
}
