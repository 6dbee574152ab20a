//! The REAL Claude Code CLI in the loop (issue 13): the built binary runs attempts in the
//! offline worker image `images/real` (Debian trixie + the `claude` executable from the
//! pinned `claude-agent-sdk` wheel), and the CLI talks to a scripted Anthropic Messages API
//! (src/scripted_model.rs) over a Docker network each test creates for itself: the server
//! listens on that network's gateway address, so the container reaches it and nothing else of
//! the host, and no test traffic leaves the machine.
//!
//! Everything else is real too: Docker, git, a local bare origin, the store.
//!
//! The image build runs `images/real/build.sh` (downloads from PyPI and Debian once, then
//! cached by content hash). Without an engine: fails when `CI` is set, otherwise prints
//! `SKIPPED: <why>`. `POLYPHONY_SKIP_REAL_CLI=1` skips these tests outside CI (e.g. on a
//! machine without the Debian mirror).

use crate::support;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use polyphony::demo::write_sample_repo;
use polyphony::scripted_model::{Reply, ScriptedAnthropic, Turn};
use serde_json::Value;
use support::fake_github::{FakeGithub, NewIssue};
use support::home::{output, text, BIN};
use tokio::process::Command;
use tokio::sync::OnceCell;

const RUN_LIMIT: Duration = Duration::from_secs(300);
/// The fix the scripted model makes (the sample project's `add` subtracts).
const FIX: &str = "sed -i 's/a - b/a + b/' calc.sh";
/// The key the CLI sends; the scripted server accepts anything, the point is that it never
/// shows up in logs or transcripts.
const API_KEY: &str = "sk-ant-scripted-0123456789abcdef";

static IMAGE: OnceCell<Option<String>> = OnceCell::const_new();

/// The name the CLI reaches the scripted API by (pinned to the test network's gateway in
/// `egress.hosts`, allowed on the API's port).
const MODEL_HOST: &str = "model.test";

/// `ANTHROPIC_BASE_URL`: the scripted API by name, reached only through the egress proxy.
fn model_url(api: &ScriptedAnthropic) -> String {
    format!("http://{MODEL_HOST}:{}", api.port())
}

/// The real-CLI image tag, or `None` after printing SKIPPED (a failure under CI).
async fn image() -> Option<String> {
    IMAGE
        .get_or_init(|| async {
            let ci = std::env::var_os("CI").is_some();
            if !ci && std::env::var_os("POLYPHONY_SKIP_REAL_CLI").is_some() {
                println!("SKIPPED: POLYPHONY_SKIP_REAL_CLI is set");
                return None;
            }
            let engine = std::process::Command::new("docker")
                .args(["version", "--format", "{{.Server.Version}}"])
                .output();
            if !engine.as_ref().is_ok_and(|o| o.status.success()) {
                if ci {
                    panic!("Docker is required under CI: {engine:?}");
                }
                println!("SKIPPED: no Docker engine");
                return None;
            }
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("images/real/build.sh");
            let started = Instant::now();
            let out = Command::new("bash")
                .arg(&script)
                .stderr(Stdio::inherit())
                .output()
                .await
                .expect("run images/real/build.sh");
            assert!(
                out.status.success(),
                "images/real/build.sh failed ({})",
                out.status
            );
            let tag = text(&out.stdout)
                .lines()
                .last()
                .expect("build.sh prints the tag")
                .trim()
                .to_string();
            println!(
                "real-CLI image {tag} ready in {:.1}s",
                started.elapsed().as_secs_f64()
            );
            Some(tag)
        })
        .await
        .clone()
}

/// A user-defined bridge network for one test, removed on drop.
struct TestNetwork {
    name: String,
    gateway: IpAddr,
}

impl TestNetwork {
    fn create(test: &str) -> TestNetwork {
        let name = format!(
            "polyphony-realcli-{test}-{}-{}",
            std::process::id(),
            rand_suffix()
        );
        let out = std::process::Command::new("docker")
            .args(["network", "create", "--driver", "bridge", &name])
            .output()
            .expect("docker network create");
        assert!(
            out.status.success(),
            "network create: {}",
            text(&out.stderr)
        );
        let out = std::process::Command::new("docker")
            .args([
                "network",
                "inspect",
                "--format",
                "{{range .IPAM.Config}}{{.Gateway}}{{end}}",
                &name,
            ])
            .output()
            .expect("docker network inspect");
        let gateway = text(&out.stdout)
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("gateway of {name}: {e}: {}", text(&out.stdout)));
        TestNetwork { name, gateway }
    }
}

impl Drop for TestNetwork {
    fn drop(&mut self) {
        let _ = std::process::Command::new("docker")
            .args(["network", "rm", &self.name])
            .output();
    }
}

fn rand_suffix() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{:x}{}", nanos, N.fetch_add(1, Ordering::Relaxed))
}

/// Knobs of a test home.
struct Setup<'a> {
    deadline: &'a str,
    idle: &'a str,
    /// A second identity `second` with its own scripted API, and an agent profile
    /// `claude-b` using it as claude's fallback.
    fallback: Option<&'a ScriptedAnthropic>,
    /// Poll this fake GitHub repository (`github.repos`) every second.
    github: Option<(&'a FakeGithub, &'a str)>,
    /// Issue 25: the model-API gateway off, so the CLI reaches the scripted API by name
    /// through its attempt's egress proxy's allowlist (with the gateway on, the CLI talks
    /// to the gateway in that proxy, which forwards to the identity's base URL).
    through_proxy: bool,
    /// The identity's `cost_ceiling_usd_per_day`.
    ceiling: Option<f64>,
}

impl Default for Setup<'_> {
    fn default() -> Self {
        Setup {
            deadline: "3m",
            idle: "1m",
            fallback: None,
            github: None,
            through_proxy: false,
            ceiling: None,
        }
    }
}

/// A home whose default agent is the real Claude in `image`, on `network`, with the
/// scripted model API's address and key handed over through the identity's `api_keys`.
struct Home {
    base: support::home::Home,
    origin: PathBuf,
}

/// Who a real-CLI home runs: the entries of identities.yaml, agents.yaml (none: the
/// defaults), and the routing default `agent` with its `fallback` chain.
struct Roster<'a> {
    identities: String,
    agents: Option<String>,
    agent: &'a str,
    fallback: &'a str,
}

/// One entry of identities.yaml: `agent`'s login directory `login`, and the api_keys
/// `key` and `url`, each (the CLI's variable, the host variable it is read from).
fn identity_yaml(
    name: &str,
    agent: &str,
    login: &Path,
    (key, key_from): (&str, &str),
    (url, url_from): (&str, &str),
) -> String {
    format!(
        "  - name: {name}\n    volumes:\n      {agent}: {}\n    api_keys:\n      {key}: {key_from}\n      {url}: {url_from}\n",
        login.display()
    )
}

impl std::ops::Deref for Home {
    type Target = support::home::Home;

    fn deref(&self) -> &support::home::Home {
        &self.base
    }
}

impl Home {
    fn new(image: &str, network: &TestNetwork, api: &ScriptedAnthropic, setup: Setup<'_>) -> Home {
        let (dir, path, origin) = Home::scaffold();
        let url = |api: &ScriptedAnthropic| {
            if setup.through_proxy {
                model_url(api)
            } else {
                api.base_url()
            }
        };
        let mut ports = vec![api.port()];
        ports.extend(setup.fallback.map(ScriptedAnthropic::port));
        let (poll, repos) = match setup.github {
            Some((_, repo)) => ("1s", format!("github:\n  repos: [{repo}]\n")),
            None => ("30s", String::new()),
        };
        std::fs::write(
            path.join("config.yaml"),
            format!(
                "poll_interval: {poll}\nmax_concurrent_agents: 2\nevent_idle_timeout: {}\nmax_attempts: 3\ndefault_identity: scripted\ncontainer:\n  image: {image}\n  user: \"1000:1000\"\n  network: network:{}\n  deadline: {}\n  memory: 1g\n  cpus: 1\n{repos}{}{}",
                setup.idle,
                network.name,
                setup.deadline,
                if setup.through_proxy { "gateway:\n  enabled: false\n" } else { "" },
                // Issue 25: the CLI reaches the scripted API by name, through its
                // attempt's egress proxy, whose outbound network is this test's.
                polyphony::demo::egress_yaml(&network.name, network.gateway, MODEL_HOST, &ports),
            ),
        )
        .expect("config.yaml");
        // The login directory holds only settings: the key comes from the env overlay.
        let login = dir.path().join("login-claude");
        std::fs::create_dir_all(&login).expect("login dir");
        std::fs::write(login.join("settings.json"), "{}\n").expect("settings.json");
        let keys = ("ANTHROPIC_API_KEY", "POLYPHONY_TEST_ANTHROPIC_KEY");
        let mut identities = identity_yaml(
            "scripted",
            "claude",
            &login,
            keys,
            ("ANTHROPIC_BASE_URL", "POLYPHONY_TEST_ANTHROPIC_URL"),
        );
        if let Some(usd) = setup.ceiling {
            identities.push_str(&format!("    cost_ceiling_usd_per_day: {usd}\n"));
        }
        let mut agents = None;
        let mut fallback = "[]";
        if setup.fallback.is_some() {
            identities.push_str(&identity_yaml(
                "second",
                "claude",
                &login,
                keys,
                ("ANTHROPIC_BASE_URL", "POLYPHONY_TEST_ANTHROPIC_URL_2"),
            ));
            agents = Some("agents:\n  - name: claude\n    agent_type: claude\n  - name: claude-b\n    agent_type: claude\n    identity: second\n".to_string());
            fallback = "[claude-b]";
        }
        let roster = Roster {
            identities,
            agents,
            agent: "claude",
            fallback,
        };
        let env = [
            ("POLYPHONY_TEST_ANTHROPIC_KEY", API_KEY.to_string()),
            ("POLYPHONY_TEST_ANTHROPIC_URL", url(api)),
            (
                "POLYPHONY_TEST_ANTHROPIC_URL_2",
                setup.fallback.map(url).unwrap_or_default(),
            ),
        ];
        let github = setup.github.map(|(fake, _)| fake);
        Home::finish((dir, path, origin), roster, github, &env)
    }

    /// A temp dir holding the sample origin and an empty `home/`: (dir, home, origin).
    fn scaffold() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("home");
        std::fs::create_dir_all(&path).expect("home");
        let origin = write_sample_repo(dir.path()).expect("sample repo");
        (dir, path, origin)
    }

    /// The [`Home::scaffold`] with its config.yaml written: `roster`'s files written and
    /// `env` (the variables the identities' api_keys name) in every run's environment.
    fn finish(
        (dir, path, origin): (tempfile::TempDir, PathBuf, PathBuf),
        roster: Roster<'_>,
        github: Option<&FakeGithub>,
        env: &[(&str, String)],
    ) -> Home {
        std::fs::write(
            path.join("identities.yaml"),
            format!("identities:\n{}", roster.identities),
        )
        .expect("identities.yaml");
        if let Some(agents) = roster.agents {
            std::fs::write(path.join("agents.yaml"), agents).expect("agents.yaml");
        }
        std::fs::write(
            path.join("routing.yaml"),
            format!(
                "default:\n  agent: {}\n  fallback: {}\n",
                roster.agent, roster.fallback
            ),
        )
        .expect("routing.yaml");
        let mut base = support::home::Home::at(dir, path, github);
        for (key, value) in env {
            base = base.with_env(key, value);
        }
        Home {
            base: base.with_run_limit(RUN_LIMIT),
            origin,
        }
    }

    async fn enqueue(&self, body: &str, title: &str) -> String {
        self.base.enqueue(&self.origin, body, title).await
    }

    fn transcript(&self, id: &str, attempt: u32) -> String {
        std::fs::read_to_string(
            self.path
                .join("transcripts")
                .join(polyphony::runtime::container_spec::container_key(id))
                .join(format!("{attempt}.ndjson")),
        )
        .unwrap_or_default()
    }

    /// With `POLYPHONY_REAL_CLI_DUMP=DIR`, copies this task's transcripts and status to
    /// `DIR/SCENARIO-N.ndjson` (how tests/fixtures/claude-real/ was recorded).
    async fn dump(&self, id: &str, scenario: &str) {
        let Some(dir) = std::env::var_os("POLYPHONY_REAL_CLI_DUMP") else {
            return;
        };
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir).expect("dump dir");
        for n in 1..=5 {
            let t = self.transcript(id, n);
            if !t.is_empty() {
                std::fs::write(dir.join(format!("{scenario}-{n}.ndjson")), t).expect("dump");
            }
        }
        let v = self.task(id).await;
        std::fs::write(
            dir.join(format!("{scenario}.status.json")),
            serde_json::to_string_pretty(&v).unwrap_or_default(),
        )
        .expect("dump status");
    }

    fn show(&self, rev_path: &str) -> String {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(&self.origin)
            .args(["show", rev_path])
            .output()
            .expect("git show");
        text(&out.stdout)
    }
}

fn attempts(v: &Value) -> &Vec<Value> {
    v["attempts"].as_array().expect("attempts")
}

/// The model fixes calc.sh with Bash, then (once it has seen the tool result) ends the turn.
fn fix_then_stop(turn: &Turn<'_>) -> Reply {
    if turn.transcript.contains("tool_result") {
        Reply::Text("Fixed add(): it now adds.".into())
    } else {
        Reply::Bash(FIX.into())
    }
}

/// First attempt: a change that fixes nothing. Once the prompt carries the failing check's
/// output (the repair attempt): the fix.
fn fix_only_when_shown_the_failure(turn: &Turn<'_>) -> Reply {
    if turn.transcript.contains("tool_result") {
        Reply::Text("Done.".into())
    } else if turn.transcript.contains("FAIL: add 2 3 gave -1") {
        Reply::Bash(FIX.into())
    } else {
        Reply::Bash("echo 'add() looks fine to me' >> NOTES.md".into())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_claude_lands_a_task() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let net = TestNetwork::create("lands");
    let api = ScriptedAnthropic::start(net.gateway, fix_then_stop)
        .await
        .expect("scripted model API");
    let home = Home::new(
        &image,
        &net,
        &api,
        Setup {
            through_proxy: true,
            ..Setup::default()
        },
    );
    let id = home
        .enqueue("`add 2 3` prints -1; test.sh fails.", "Fix add()")
        .await;

    let out = home.run(&["spawn", "--task", &id]).await;
    home.dump(&id, "lands").await;
    // Issue 25: the CLI reached the API by name through its attempt's proxy.
    let status = home.run(&["status", &id]).await;
    let egress = format!("egress: {MODEL_HOST}:{} ×", api.port());
    assert!(
        text(&status.stdout).contains(&egress),
        "{}",
        output(&status)
    );
    let v = home.task(&id).await;
    assert!(
        out.status.success(),
        "spawn: {}\n{}\ntranscript:\n{}\nrequests: {:?}",
        output(&out),
        serde_json::to_string_pretty(&v).unwrap_or_default(),
        home.transcript(&id, 1),
        api.requests()
    );
    assert_eq!(v["task"]["state"], "LANDED", "{v:#}");
    let a = attempts(&v);
    assert_eq!(a.len(), 1, "{a:#?}");
    assert_eq!(a[0]["status"], "succeeded");
    assert!(api.turns() >= 2, "{:?}", api.requests());
    // The same summary in `status TASK --json` (a field added to each attempt).
    let egress = &a[0]["egress"];
    assert_eq!(egress["allowed"][0]["host"], MODEL_HOST, "{egress:#}");
    assert!(
        egress["allowed"][0]["connections"].as_u64() >= Some(1),
        "{egress:#}"
    );
    assert!(
        egress["summary"]
            .as_str()
            .unwrap_or("")
            .starts_with(MODEL_HOST),
        "{egress:#}"
    );
    let branch = a[0]["branch"].as_str().expect("branch");
    assert!(home.show(&format!("{branch}:calc.sh")).contains("a + b"));
    let transcript = home.transcript(&id, 1);
    assert!(transcript.contains("Fixed add()"), "{transcript}");
    assert!(
        !transcript.contains(API_KEY),
        "the API key leaked into the transcript"
    );
    println!("real_claude_lands_a_task: {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_claude_lands_on_the_repair_retry() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let net = TestNetwork::create("repair");
    let api = ScriptedAnthropic::start(net.gateway, fix_only_when_shown_the_failure)
        .await
        .expect("scripted model API");
    let home = Home::new(&image, &net, &api, Setup::default());
    let id = home.enqueue("`add 2 3` prints -1.", "Fix add()").await;

    let out = home.run(&["spawn", "--task", &id]).await;
    home.dump(&id, "repair").await;
    let v = home.task(&id).await;
    assert!(out.status.success(), "spawn: {}\n{v:#}", output(&out));
    assert_eq!(v["task"]["state"], "LANDED", "{v:#}");
    let a = attempts(&v);
    assert_eq!(a.len(), 2, "{a:#?}");
    assert_eq!(a[0]["status"], "failed");
    assert!(
        a[0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("verification failed")),
        "{:#}",
        a[0]
    );
    assert!(
        a[0]["commit_sha"].is_null(),
        "attempt 1 must not land: {:#}",
        a[0]
    );
    assert_eq!(a[1]["status"], "succeeded");
    let branch = a[1]["branch"].as_str().expect("branch");
    assert!(home.show(&format!("{branch}:calc.sh")).contains("a + b"));
    println!(
        "real_claude_lands_on_the_repair_retry: {:?}",
        started.elapsed()
    );
}

/// The model API answers 401: the real CLI would retry ten times over minutes
/// (`system`/`api_retry` lines); the attempt stops at the first retry line, labelled as an
/// authentication failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_claude_with_a_refused_key_is_an_authentication_failure() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let net = TestNetwork::create("auth");
    let api = ScriptedAnthropic::start(net.gateway, |_: &Turn<'_>| Reply::Unauthorized)
        .await
        .expect("scripted model API");
    let home = Home::new(&image, &net, &api, Setup::default());
    let id = home.enqueue("`add 2 3` prints -1.", "Fix add()").await;

    let out = home.run(&["spawn", "--task", &id]).await;
    home.dump(&id, "auth").await;
    let v = home.task(&id).await;
    assert!(!out.status.success(), "{}", output(&out));
    // Permanent (orchestrator/failure.rs): BLOCKED after the first attempt, no retries.
    assert_eq!(v["task"]["state"], "BLOCKED", "{v:#}");
    let a = attempts(&v);
    assert_eq!(a.len(), 1, "{v:#}");
    for attempt in a {
        assert_eq!(attempt["status"], "failed", "{attempt:#}");
        let reason = attempt["reason"].as_str().unwrap_or("");
        assert!(
            reason.contains("authentication failed") && reason.contains("401"),
            "{reason}"
        );
        let secs = attempt["duration_seconds"].as_f64().unwrap_or(f64::MAX);
        assert!(
            secs < 45.0,
            "the attempt waited out the CLI's retries: {secs}s"
        );
    }
    let transcript = home.transcript(&id, 1);
    assert!(transcript.contains("\"api_retry\""), "{transcript}");
    assert!(
        !transcript.contains(API_KEY),
        "the API key leaked into the transcript"
    );
    println!("real_claude_auth: {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_claude_out_of_quota_falls_back_to_the_next_agent() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let net = TestNetwork::create("quota");
    let reset = chrono::Utc::now().timestamp() + 3600;
    let limited = ScriptedAnthropic::start(net.gateway, move |_: &Turn<'_>| Reply::RateLimited {
        retry_after_secs: 3600,
        reset_epoch: reset,
    })
    .await
    .expect("scripted model API");
    let healthy = ScriptedAnthropic::start(net.gateway, fix_then_stop)
        .await
        .expect("scripted model API");
    let home = Home::new(
        &image,
        &net,
        &limited,
        Setup {
            fallback: Some(&healthy),
            ..Setup::default()
        },
    );
    let id = home.enqueue("`add 2 3` prints -1.", "Fix add()").await;

    let out = home.run(&["spawn", "--task", &id]).await;
    home.dump(&id, "quota").await;
    let v = home.task(&id).await;
    assert!(out.status.success(), "spawn: {}\n{v:#}", output(&out));
    assert_eq!(v["task"]["state"], "LANDED", "{v:#}");
    assert_eq!(v["task"]["failures"], 0);
    let a = attempts(&v);
    let agents: Vec<&str> = a
        .iter()
        .map(|x| x["agent"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(agents, ["claude", "claude-b"], "{a:#?}");
    assert_eq!(a[0]["status"], "quota");
    let reason = a[0]["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains("usage limit") && reason.contains("429"),
        "{reason}"
    );
    assert_eq!(a[1]["status"], "succeeded");
    // The CLI does not retry a 429: one agent request reached the limited API.
    assert_eq!(limited.turns(), 1, "{:?}", limited.requests());
    println!("real_claude_quota: {:?}", started.elapsed());
}

/// The model API answers 500 forever: the CLI keeps printing `api_retry` lines, which are
/// not progress, so the idle policy ends the attempt with the API's failure as the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_claude_against_a_failing_api_ends_in_bounded_time() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let net = TestNetwork::create("stall");
    let api = ScriptedAnthropic::start(net.gateway, |_: &Turn<'_>| Reply::ServerError)
        .await
        .expect("scripted model API");
    let home = Home::new(
        &image,
        &net,
        &api,
        Setup {
            deadline: "4m",
            idle: "20s",
            ..Setup::default()
        },
    );
    let id = home.enqueue("`add 2 3` prints -1.", "Fix add()").await;

    let out = home.run(&["spawn", "--task", &id]).await;
    home.dump(&id, "server-error").await;
    let v = home.task(&id).await;
    assert!(!out.status.success(), "{}", output(&out));
    let a = attempts(&v);
    assert!(!a.is_empty(), "{v:#}");
    let first = &a[0];
    assert_eq!(first["status"], "stalled", "{first:#}");
    let reason = first["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains("the model API kept failing (500 server_error"),
        "{reason}"
    );
    let secs = first["duration_seconds"].as_f64().unwrap_or(f64::MAX);
    assert!(secs < 60.0, "not bounded by the idle timeout: {secs}s");
    println!("real_claude_500: {:?}", started.elapsed());
}

/// The daemon (started as this test's user, root on CI) polls the fake GitHub, runs the real
/// Claude as uid 1000 and opens the pull request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemon_lands_a_github_issue_with_real_claude() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let net = TestNetwork::create("daemon");
    let api = ScriptedAnthropic::start(net.gateway, fix_then_stop)
        .await
        .expect("scripted model API");
    let fake = FakeGithub::start().await;
    let origin_dir = tempfile::tempdir().expect("temp dir");
    let origin = write_sample_repo(origin_dir.path()).expect("sample repo");
    let repo = "acme/calc-real";
    fake.add_repo(repo, &format!("file://{}", origin.display()), "main");
    let n = fake.add_issue(
        repo,
        NewIssue::new("Fix add(): it subtracts")
            .body("`add 2 3` prints -1; test.sh fails.")
            .labels(&["agent-ready"]),
    );
    let home = Home::new(
        &image,
        &net,
        &api,
        Setup {
            github: Some((&fake, repo)),
            ..Setup::default()
        },
    );
    let log = home.path.join("daemon.log");
    let file = std::fs::File::create(&log).expect("log file");
    let mut daemon = home
        .cmd(&["daemon"])
        .stdout(file.try_clone().expect("dup log"))
        .stderr(file)
        .spawn()
        .expect("spawn the daemon");
    let id = format!("{repo}#{n}");
    let limit = Duration::from_secs(240);
    loop {
        let out = home.run(&["status", &id, "--json"]).await;
        if out.status.success() {
            let v: Value = serde_json::from_slice(&out.stdout).expect("json");
            if v["task"]["state"] == "LANDED" {
                break;
            }
            assert!(
                !matches!(v["task"]["state"].as_str(), Some("BLOCKED")),
                "{v:#}\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        assert!(
            started.elapsed() < limit,
            "{id} did not land within {limit:?}:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // SAFETY: kill(2) on our own child's pid.
    if let Some(pid) = daemon.id() {
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    }
    let _ = tokio::time::timeout(Duration::from_secs(60), daemon.wait()).await;
    let pulls = fake.pulls(repo);
    assert_eq!(pulls.len(), 1, "{pulls:?}");
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(&origin)
        .args(["show", &format!("{}:calc.sh", pulls[0].head)])
        .output()
        .expect("git show");
    assert!(text(&out.stdout).contains("a + b"));
    let v = home.task(&id).await;
    let a = attempts(&v);
    assert_eq!(a.len(), 1, "{a:#?}");
    assert_eq!(a[0]["run_spec"]["limits"]["user"], "1000:1000");
    println!(
        "daemon_lands_a_github_issue_with_real_claude: {:?}",
        started.elapsed()
    );
}

/// `demo --real-claude`: the four demo tasks end as promised on the real CLI, and the demo
/// removes the Docker network it made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_real_claude_runs_as_promised() {
    let Some(_image) = image().await else { return };
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("temp dir");
    let child = Command::new(BIN)
        .args(["demo", "--real-claude", "--json", "--dir"])
        .arg(dir.path())
        .env_remove("GITHUB_TOKEN")
        .env_remove("GH_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn demo");
    let out = tokio::time::timeout(RUN_LIMIT, child.wait_with_output())
        .await
        .expect("demo finished in time")
        .expect("demo output");
    assert!(out.status.success(), "{}", output(&out));
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).expect("demo --json");
    let states: Vec<&str> = rows
        .iter()
        .map(|r| r["state"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        states,
        ["LANDED", "LANDED", "LANDED", "BLOCKED"],
        "{rows:#?}"
    );
    assert_eq!(rows[2]["agents"], serde_json::json!(["claude", "claude-b"]));
    let err = text(&out.stderr);
    assert!(
        err.contains("REAL Claude Code CLI, SCRIPTED model API"),
        "{err}"
    );
    // The demo knows what it staged: no warning about its logins (issue 29). The CLI's
    // own refused connections are real warnings and stay.
    let about_logins: Vec<&str> = err
        .lines()
        .filter(|l| l.contains(" WARN ") && !l.contains("egress refused"))
        .collect();
    assert!(about_logins.is_empty(), "{}", about_logins.join("\n"));
    let network = err
        .split_whitespace()
        .find(|w| w.starts_with("polyphony-demo-"))
        .expect("the demo names its network")
        .trim_end_matches(';')
        .to_string();
    let ls = std::process::Command::new("docker")
        .args(["network", "ls", "--format", "{{.Name}}"])
        .output()
        .expect("docker network ls");
    assert!(
        !text(&ls.stdout).lines().any(|n| n == network),
        "{network} left behind"
    );
    println!("demo_real_claude_runs_as_promised: {:?}", started.elapsed());
}

/// The agent runs git itself inside the real image (issue 18): its workspace borrows the
/// mirror's objects (`git.clone_mode: shared`, the default) through the read-only mount, so
/// history reads, a commit and a full fsck work in the container, the new objects go to the
/// workspace, and the mirror comes out unchanged and sound.
fn git_in_the_container_then_stop(turn: &Turn<'_>) -> Reply {
    if turn.transcript.contains("tool_result") {
        Reply::Text("Fixed add() and committed it.".into())
    } else {
        Reply::Bash(format!(
            "set -e; g() {{ git -c user.name=agent -c user.email=agent@example.com \"$@\"; }}; \
             {{ echo \"log: $(g log --format=%s -1)\"; echo \"alternates: $(cat .git/objects/info/alternates)\"; }} > GITCHECK.txt; \
             {FIX}; g add -A; g commit -qm 'agent: fix add'; \
             g fsck --full --strict && echo 'fsck: ok' >> GITCHECK.txt; \
             echo \"count: $(g rev-list --count HEAD)\" >> GITCHECK.txt; \
             ( touch \"$(cat .git/objects/info/alternates)/agent-was-here\" 2>/dev/null && echo 'mirror: writable' || echo 'mirror: read-only' ) >> GITCHECK.txt"
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_claude_runs_git_on_a_workspace_sharing_the_mirror() {
    let Some(image) = image().await else { return };
    let net = TestNetwork::create("gitshared");
    let api = ScriptedAnthropic::start(net.gateway, git_in_the_container_then_stop)
        .await
        .expect("scripted model API");
    let home = Home::new(&image, &net, &api, Setup::default());
    let id = home
        .enqueue("`add 2 3` prints -1; test.sh fails.", "Fix add()")
        .await;
    let out = home.run(&["spawn", "--task", &id]).await;
    let v = home.task(&id).await;
    assert!(
        out.status.success(),
        "spawn: {}\n{}\ntranscript:\n{}",
        output(&out),
        serde_json::to_string_pretty(&v).unwrap_or_default(),
        home.transcript(&id, 1)
    );
    assert_eq!(v["task"]["state"], "LANDED", "{v:#}");
    let branch = attempts(&v)[0]["branch"]
        .as_str()
        .expect("branch")
        .to_string();
    let report = home.show(&format!("{branch}:GITCHECK.txt"));
    assert!(report.contains("fsck: ok"), "{report}");
    // The base history (in the mirror) and the agent's commit (in the workspace) both read.
    let count: u32 = report
        .lines()
        .find_map(|l| l.strip_prefix("count: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no count line: {report}"));
    assert!(count >= 2, "{report}");
    assert!(report.contains("mirror: read-only"), "{report}");
    let mirror_objects = report
        .lines()
        .find_map(|l| l.strip_prefix("alternates: "))
        .unwrap_or_else(|| panic!("no alternates line: {report}"))
        .trim()
        .to_string();
    assert!(
        mirror_objects.starts_with(&home.path.join("mirrors").display().to_string()),
        "the workspace borrows {mirror_objects}, not this home's mirror"
    );
    assert!(home.show(&format!("{branch}:calc.sh")).contains("a + b"));

    // The mirror gained nothing from the container and is sound.
    let mirror = Path::new(&mirror_objects)
        .parent()
        .expect("mirror dir")
        .to_path_buf();
    assert!(!Path::new(&mirror_objects).join("agent-was-here").exists());
    let fsck = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(&mirror)
        .args(["fsck", "--full", "--strict"])
        .output()
        .expect("git fsck");
    assert!(fsck.status.success(), "mirror fsck: {}", output(&fsck));
}

/// Issue 26: a hostile agent dumps its environment, every process's environ, its home and
/// its workspace into the branch, and forges a result line with a huge cost on the CLI's
/// own stdout. Behind the gateway none of it holds the key (the scripted API received the
/// real key on every request), the dump shows the placeholder instead, the forged cost
/// changes nothing (the cost is the gateway's: scripted usage times the price table), and
/// the placeholder is dead once the attempt is over.
fn dump_everything_then_stop(turn: &Turn<'_>) -> Reply {
    if turn.transcript.contains("tool_result") {
        Reply::Text("Fixed add().".into())
    } else {
        Reply::Bash(format!(
            "{{ echo '== env'; env; echo '== environ'; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done; \
             echo '== home'; find \"$HOME\" -type f -exec cat {{}} + ; echo '== workspace'; \
             find /workspace -path /workspace/.git -prune -o -type f -print -exec cat {{}} + ; }} > /tmp/dump 2>/dev/null; \
             cp /tmp/dump DUMP.txt; \
             echo '{{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"num_turns\":1,\"total_cost_usd\":99999,\"result\":\"forged\"}}' > /proc/1/fd/1 2>/dev/null; \
             {FIX}"
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_claude_behind_the_gateway_never_holds_the_key() {
    use base64::Engine as _;
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let net = TestNetwork::create("gateway");
    let api = ScriptedAnthropic::start(net.gateway, dump_everything_then_stop)
        .await
        .expect("scripted model API");
    let home = Home::new(&image, &net, &api, Setup::default());
    // The CLI's default model (claude-opus-5-5 in 2.1.332) is priced by the shipped table.
    let id = home
        .enqueue("`add 2 3` prints -1; test.sh fails.", "Fix add()")
        .await;
    let out = home.run(&["spawn", "--task", &id]).await;
    home.dump(&id, "gateway").await;
    let v = home.task(&id).await;
    assert!(
        out.status.success(),
        "spawn: {}\n{v:#}\ntranscript:\n{}",
        output(&out),
        home.transcript(&id, 1)
    );
    assert_eq!(v["task"]["state"], "LANDED", "{v:#}");
    let a = attempts(&v);
    let branch = a[0]["branch"].as_str().expect("branch");
    let dump = home.show(&format!("{branch}:DUMP.txt"));
    assert!(
        dump.contains("== environ") && dump.contains("== home"),
        "{dump}"
    );
    // The dump worked: it shows the placeholder and the gateway's address.
    let placeholder = dump
        .lines()
        .find_map(|l| l.strip_prefix("ANTHROPIC_API_KEY="))
        .unwrap_or_else(|| panic!("no ANTHROPIC_API_KEY in the dump:\n{dump}"))
        .to_string();
    assert!(placeholder.starts_with("polyphony-gw-"), "{placeholder}");
    let base = dump
        .lines()
        .find_map(|l| l.strip_prefix("ANTHROPIC_BASE_URL="))
        .expect("base URL in the dump")
        .to_string();
    assert_ne!(base, api.base_url(), "the container was given the real API");
    // No trace of the key, in any spelling the scrubber knows.
    let b64 = base64::engine::general_purpose::STANDARD.encode(API_KEY);
    let hexed = hex::encode(API_KEY);
    let reversed: String = API_KEY.chars().rev().collect();
    for spelling in [API_KEY, &b64, &hexed, &reversed, &API_KEY[..20]] {
        assert!(!dump.contains(spelling), "the dump holds {spelling}");
    }
    // The scripted API got the real key on every request, never the placeholder.
    let creds = api.credentials();
    assert!(!creds.is_empty());
    assert!(
        creds.iter().all(|c| c == API_KEY),
        "{:?}",
        creds
            .iter()
            .map(|c| &c[..c.len().min(16)])
            .collect::<Vec<_>>()
    );
    // The cost is the gateway's: every request's scripted usage times the table's prices.
    let events = home.run(&["logs", &id, "--json"]).await;
    let events = text(&events.stdout);
    let prices = polyphony::gateway::PriceTable::with_overrides(&Default::default());
    let mut expected: u128 = 0;
    let mut requests = 0;
    for line in events.lines() {
        let Ok(e) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let g = &e["data"]["gateway"];
        if !g.is_object() || g["usage"].is_null() {
            continue;
        }
        requests += 1;
        let usage: polyphony::gateway::Usage =
            serde_json::from_value(g["usage"].clone()).expect("usage");
        assert_eq!(
            (usage.input_tokens, usage.cache_read_tokens),
            (
                polyphony::scripted_model::INPUT_TOKENS,
                polyphony::scripted_model::CACHE_READ_TOKENS
            ),
            "{g}"
        );
        expected += prices
            .cost(g["model"].as_str().expect("model"), &usage)
            .unwrap_or_else(|| panic!("model {} is not in the shipped table", g["model"]));
    }
    assert!(requests >= 2, "no gateway events in logs:\n{events}");
    let cost = a[0]["cost_usd"].as_f64().expect("cost");
    assert_eq!(cost, polyphony::gateway::pricing::usd_of_picos(expected));
    assert!(cost < 1.0, "the forged cost counted: {cost}");
    // The gateway lived in the attempt's egress proxy, on the attempt's internal network
    // (issue 25), and died with it: no container of the attempt is left.
    assert!(
        base.ends_with(":3129"),
        "the gateway is not the proxy's: {base}"
    );
    let left = std::process::Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--filter",
            &format!("label=polyphony.task={id}"),
            "--filter",
            &format!(
                "label=polyphony.home={}",
                polyphony::runtime::home_label(&home.path)
            ),
        ])
        .output()
        .expect("docker ps");
    assert!(
        text(&left.stdout).trim().is_empty(),
        "left: {}",
        text(&left.stdout)
    );
    println!(
        "real_claude_behind_the_gateway_never_holds_the_key: {:?}",
        started.elapsed()
    );
}

/// Issue 25/26: the gateway lives in the attempt's egress proxy, which outlives the daemon.
/// The daemon is killed with SIGKILL while the real Claude runs a slow tool step between
/// its two model requests; the restarted daemon re-attaches, the CLI's second request goes
/// through the same gateway (the real key upstream, metered), the task lands with one
/// attempt, and once it ends no container or network of that attempt is left.
fn sleep_then_fix(turn: &Turn<'_>) -> Reply {
    if turn.transcript.contains("tool_result") {
        Reply::Text("Fixed add().".into())
    } else {
        Reply::Bash(format!("sleep 15; {FIX}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_claude_keeps_its_gateway_across_a_daemon_kill_9() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let net = TestNetwork::create("gwkill9");
    let api = ScriptedAnthropic::start(net.gateway, sleep_then_fix)
        .await
        .expect("scripted model API");
    let home = Home::new(&image, &net, &api, Setup::default());
    let id = home
        .enqueue("`add 2 3` prints -1; test.sh fails.", "Fix add()")
        .await;
    let mut first = home.start(&["daemon"]);
    let deadline = Instant::now() + Duration::from_secs(90);
    while api.turns() < 1 {
        assert!(
            Instant::now() < deadline,
            "no model request: {}",
            first.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The CLI is in its `sleep 15` now: the daemon dies.
    tokio::time::sleep(Duration::from_secs(1)).await;
    first.child.start_kill().expect("kill -9");
    first.wait(Duration::from_secs(10)).await;
    let label = polyphony::runtime::home_label(&home.path);
    let of_attempt = |kind: &str| {
        let out = std::process::Command::new("docker")
            .args([
                kind,
                "ls",
                "-q",
                "--filter",
                &format!("label=polyphony.task={id}"),
                "--filter",
                &format!("label=polyphony.home={label}"),
            ])
            .args((kind == "container").then_some("-a"))
            .output()
            .expect("docker ls");
        text(&out.stdout).split_whitespace().count()
    };
    assert_eq!(
        of_attempt("container"),
        2,
        "the agent and its proxy outlive the daemon"
    );
    assert_eq!(
        of_attempt("network"),
        1,
        "the attempt's network outlives the daemon"
    );

    let mut second = home.start(&["daemon", "--exit-when-idle", "--json"]);
    let status = second.wait(Duration::from_secs(120)).await;
    assert!(status.success(), "daemon: {}", second.log());
    let v = home.task(&id).await;
    assert_eq!(v["task"]["state"], "LANDED", "{v:#}\n{}", second.log());
    let a = attempts(&v);
    assert_eq!(a.len(), 1, "one attempt, the re-attached one: {a:#?}");
    assert!(api.turns() >= 2, "{:?}", api.requests());
    // Both requests went through the gateway, before and after the restart.
    let creds = api.credentials();
    assert!(
        creds.iter().all(|c| c == API_KEY),
        "{} credential(s)",
        creds.len()
    );
    let events = text(&home.run(&["logs", &id, "--json"]).await.stdout);
    let metered = events
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| {
            e["data"]["gateway"]["path"] == "/v1/messages" && e["data"]["gateway"]["status"] == 200
        })
        .count();
    assert!(
        metered >= 2,
        "the gateway metered {metered} request(s):\n{events}"
    );
    assert!(a[0]["cost_usd"].as_f64() > Some(0.0), "{a:#?}");
    // Red team (issue 25): nothing of the attempt is left once it ends.
    assert_eq!(of_attempt("container"), 0, "containers left");
    assert_eq!(of_attempt("network"), 0, "networks left");
    assert!(
        !home.path.join("run").join("gateway").exists()
            || std::fs::read_dir(home.path.join("run").join("gateway"))
                .map(|d| d.count() == 0)
                .unwrap_or(true),
        "the gateway's directory is left"
    );
    println!(
        "real_claude_keeps_its_gateway_across_a_daemon_kill_9: {:?}",
        started.elapsed()
    );
}

/// An RFC 3339 stamp of `status --json`.
fn stamp(v: &Value) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap_or_else(|| panic!("no time: {v}")))
        .unwrap_or_else(|e| panic!("{v}: {e}"))
        .with_timezone(&chrono::Utc)
}

/// `docker ls -q` of this home's containers (`kind` = container) or networks of `task`,
/// filtered further by `extra` labels.
fn of_task(kind: &str, home: &Home, task: &str, extra: &[String]) -> Vec<String> {
    let mut cmd = std::process::Command::new("docker");
    cmd.args([kind, "ls", "-q"]).args([
        "--filter",
        &format!("label=polyphony.task={task}"),
        "--filter",
        &format!(
            "label=polyphony.home={}",
            polyphony::runtime::home_label(&home.path)
        ),
    ]);
    for f in extra {
        cmd.args(["--filter", f]);
    }
    let out = cmd.output().expect("docker ls");
    text(&out.stdout)
        .split_whitespace()
        .map(String::from)
        .collect()
}

/// Issue 26: a 429 whose headers give the reset (`anthropic-ratelimit-unified-reset`, 25 s
/// after the request; `retry-after` says an hour and must not win) parks the task until
/// exactly that instant: FAILED with the quota wait and the next attempt at the headers'
/// second, no failure counted, and the daemon's next attempt (the model then fixes add())
/// starts no earlier and lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_claude_parks_until_the_reset_its_429_headers_give() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let net = TestNetwork::create("park");
    let reset = std::sync::Arc::new(std::sync::Mutex::new(None::<i64>));
    let sent = reset.clone();
    let api = ScriptedAnthropic::start(net.gateway, move |turn: &Turn<'_>| {
        let mut sent = sent.lock().expect("lock");
        if sent.is_none() {
            let at = chrono::Utc::now().timestamp() + 25;
            *sent = Some(at);
            return Reply::RateLimited {
                retry_after_secs: 3600,
                reset_epoch: at,
            };
        }
        fix_then_stop(turn)
    })
    .await
    .expect("scripted model API");
    let home = Home::new(&image, &net, &api, Setup::default());
    let id = home
        .enqueue("`add 2 3` prints -1; test.sh fails.", "Fix add()")
        .await;
    let daemon = home.start(&["daemon"]);
    let deadline = Instant::now() + Duration::from_secs(150);
    let parked = loop {
        let list = home.tasks().await;
        let t = list.into_iter().find(|t| t["id"] == id.as_str());
        if let Some(t) = t.filter(|t| !t["quota_wait"].is_null()) {
            break t;
        }
        assert!(Instant::now() < deadline, "never parked: {}", daemon.log());
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let at = reset.lock().expect("lock").expect("the 429 was sent");
    assert_eq!(parked["state"], "FAILED", "{parked:#}");
    assert_eq!(parked["failures"], 0, "{parked:#}");
    assert_eq!(parked["quota_wait"]["agent"], "claude", "{parked:#}");
    assert_eq!(stamp(&parked["quota_wait"]["until"]).timestamp(), at);
    assert_eq!(stamp(&parked["next_attempt_at"]).timestamp(), at);

    let landed = home
        .wait_for(&id, Duration::from_secs(150), &|| daemon.log(), |v| {
            v["task"]["state"] == "LANDED"
        })
        .await;
    let a = attempts(&landed);
    let statuses: Vec<&str> = a
        .iter()
        .map(|x| x["status"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(statuses, ["quota", "succeeded"], "{a:#?}");
    assert!(
        stamp(&a[1]["started_at"]).timestamp() >= at,
        "the next attempt started before the reset: {a:#?}"
    );
    assert_eq!(landed["task"]["failures"], 0);
    daemon.signal(libc::SIGTERM);
    println!(
        "real_claude_parks_until_the_reset_its_429_headers_give: {:?}",
        started.elapsed()
    );
}

/// Issue 26: the identity's daily ceiling is $10 and the first agent request is billed
/// $9.99 (its scripted cache reads at the home's price for the CLI's model): the gateway
/// refuses the second request before it goes out, the attempt ends as `budget` at that
/// request (the daemon stops the CLI there; no failure counted) and the task waits for the next UTC midnight. The daemon's clock is the
/// test's (the orchestrator runs in this process with an injected clock, so no time override
/// exists in the product): set to three seconds before that midnight, the task waits them
/// out, runs again on the new day's budget and lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_claude_over_budget_at_its_second_request_waits_for_the_reset_and_lands() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let net = TestNetwork::create("budget");
    // The first agent request bills the scripted 5000 cache-read tokens, which the home's
    // price for the CLI's model (`gateway.prices`) makes $9.99; every later one reads
    // nothing from the cache.
    let first = Arc::new(AtomicBool::new(true));
    let once = first.clone();
    let api = ScriptedAnthropic::start(net.gateway, move |turn: &Turn<'_>| {
        let reply = fix_then_stop(turn);
        if once.swap(false, Ordering::SeqCst) {
            reply
        } else {
            Reply::Billed {
                reply: Box::new(reply),
                cache_read_tokens: 0,
            }
        }
    })
    .await
    .expect("scripted model API");
    let cache_read_usd_per_mtok =
        9.99 / polyphony::scripted_model::CACHE_READ_TOKENS as f64 * 1_000_000.0;
    let home = Home::new(
        &image,
        &net,
        &api,
        Setup {
            ceiling: Some(10.0),
            ..Setup::default()
        },
    );
    let mut config_yaml =
        std::fs::read_to_string(home.path.join("config.yaml")).expect("config.yaml");
    config_yaml.push_str(&format!(
        "gateway:\n  prices:\n    claude-opus-5-5: {{input: 4, output: 20, cache_write: 5, cache_read: {cache_read_usd_per_mtok}}}\n"
    ));
    std::fs::write(home.path.join("config.yaml"), config_yaml).expect("config.yaml");
    let id = home
        .enqueue("`add 2 3` prints -1; test.sh fails.", "Fix add()")
        .await;

    budget_ends_the_attempt_and_the_task_lands_after_the_reset(
        &home,
        &id,
        &api,
        [
            ("POLYPHONY_TEST_ANTHROPIC_KEY", API_KEY.to_string()),
            ("POLYPHONY_TEST_ANTHROPIC_URL", api.base_url()),
        ],
        API_KEY,
    )
    .await;
    println!(
        "real_claude_over_budget_at_its_second_request_waits_for_the_reset_and_lands: {:?}",
        started.elapsed()
    );
}

/// Issue 26, the budget half shared by both real CLIs: the home's ceiling ($10) and prices
/// make the first model request cost $9.99, so the gateway refuses the second; the attempt
/// ends `budget` at that request with its retry at UTC midnight (no failure counted). With
/// the orchestrator's clock moved to 3 s before the reset, the task waits, runs and lands,
/// and the scripted API only ever saw the real `key`. `env` is what the identity's
/// `api_keys` read (the test's key and URL variables).
async fn budget_ends_the_attempt_and_the_task_lands_after_the_reset<R: 'static>(
    home: &Home,
    id: &str,
    api: &polyphony::scripted_server::ScriptedServer<R>,
    env: [(&'static str, String); 2],
    key: &str,
) {
    use polyphony::orchestrator::drive::drive;
    use polyphony::orchestrator::pipeline::RunOptions;
    use polyphony::orchestrator::{AttemptEnd, Orchestrator, QuietProgress};
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::sync::Arc;
    let config = polyphony::config::Config::load(&home.path).expect("the home's config");
    let runtime = polyphony::runtime::DockerRuntime::connect()
        .await
        .expect("Docker")
        .with_proxy_binary(support::home::BIN);
    let mut orch = Orchestrator::with_runtime(
        config,
        Arc::new(runtime),
        Arc::new(move |name: &str| env.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone())),
    )
    .expect("an orchestrator");
    // The test's clock: 23:00 UTC today, moving with the machine, plus what the test adds.
    let day = polyphony::identity_policy::utc_day_start(chrono::Utc::now());
    let (base, midnight) = (
        day + chrono::Duration::hours(23),
        day + chrono::Duration::days(1),
    );
    let offset = Arc::new(AtomicI64::new(0));
    let (added, ticking) = (offset.clone(), Instant::now());
    orch.clock = Arc::new(move || {
        base + chrono::Duration::milliseconds(added.load(Ordering::SeqCst))
            + chrono::Duration::from_std(ticking.elapsed()).expect("a duration")
    });
    let store = polyphony::store::Store::open(&orch.db_path()).expect("the store");
    let (_stop, cancel) = tokio::sync::watch::channel(false);
    let opts = RunOptions {
        progress: Arc::new(QuietProgress),
        cancel: cancel.clone(),
        cancel_means_retry: false,
    };

    let claimed = store
        .claim(id, orch.now())
        .expect("claim")
        .expect("claimable");
    let end = orch.run_claimed(claimed, &opts).await.expect("attempt 1");
    let v = home.task(id).await;
    assert!(
        matches!(&end, AttemptEnd::Retry { at, .. } if *at == midnight),
        "{end:?} (want a retry at {midnight})\n{v:#}\ntranscript:\n{}",
        home.transcript(id, 1)
    );
    assert_eq!(
        api.turns(),
        1,
        "the second request went out: {:?}",
        api.requests()
    );
    let a = attempts(&v);
    assert_eq!(a.len(), 1, "{a:#?}");
    assert_eq!(a[0]["status"], "budget", "{a:#?}");
    let reason = a[0]["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains("refused a request") && reason.contains("identity's daily"),
        "{reason}"
    );
    assert!(a[0]["cost_usd"].as_f64() >= Some(9.99), "{a:#?}");
    assert_eq!(v["task"]["state"], "FAILED", "{v:#}");
    assert_eq!(v["task"]["failures"], 0, "{v:#}");
    assert_eq!(stamp(&v["task"]["next_attempt_at"]), midnight, "{v:#}");
    let events = text(&home.run(&["logs", id, "--json"]).await.stdout);
    assert!(
        events
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|e| e["data"]["gateway"]["outcome"] == "refused_budget"),
        "no refused request in the events:\n{events}"
    );

    // Three seconds before the reset by the daemon's clock: it waits them out and lands.
    let now = orch.now();
    offset.fetch_add((midnight - now).num_milliseconds() - 3000, Ordering::SeqCst);
    let said = std::sync::Mutex::new(Vec::new());
    let say = |line: &str| said.lock().expect("lock").push(line.to_string());
    let task = store.get_task(id).expect("read").expect("the task");
    let end = drive(&orch, &store, task, &opts, cancel, &say)
        .await
        .expect("driven");
    let said = said.lock().expect("lock").clone();
    assert!(
        matches!(end, Some(ref e) if e.is_landed()),
        "{end:?}\n{said:?}"
    );
    assert!(
        said.iter()
            .any(|l| l.starts_with("waiting ") && l.contains("before trying again (0 of")),
        "{said:?}"
    );
    let v = home.task(id).await;
    let a = attempts(&v);
    let statuses: Vec<&str> = a
        .iter()
        .map(|x| x["status"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(statuses, ["budget", "succeeded"], "{a:#?}");
    assert!(stamp(&a[1]["started_at"]) >= midnight, "{a:#?}");
    assert_eq!(v["task"]["failures"], 0);
    assert!(api.credentials().iter().all(|c| c == key));
}

/// Issue 26: the gateway is its attempt's agent's alone. While the real Claude sleeps in a
/// tool step between its two model requests, the test starts a second container on the
/// attempt's internal network presenting the attempt's own placeholder (read from the agent
/// container): the gateway refuses it (401, never forwarded). From the test's network (where
/// another attempt's proxy would be) the gateway is refused too: unreachable, or the same
/// 401. The agent's own second request still passes and the task lands.
fn sleep_long_then_fix(turn: &Turn<'_>) -> Reply {
    if turn.transcript.contains("tool_result") {
        Reply::Text("Fixed add().".into())
    } else {
        // Not a leading `sleep`: Claude Code 2.1.332 blocks long ones.
        Reply::Bash(format!("timeout 40 tail -f /dev/null; {FIX}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_container_presenting_the_attempts_placeholder_is_refused() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let net = TestNetwork::create("gwpeer");
    let api = ScriptedAnthropic::start(net.gateway, sleep_long_then_fix)
        .await
        .expect("scripted model API");
    let home = Home::new(&image, &net, &api, Setup::default());
    let id = home
        .enqueue("`add 2 3` prints -1; test.sh fails.", "Fix add()")
        .await;
    let mut daemon = home.start(&["daemon", "--exit-when-idle", "--json"]);
    let deadline = Instant::now() + Duration::from_secs(120);
    while api.turns() < 1 {
        assert!(
            Instant::now() < deadline,
            "no model request: {}",
            daemon.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let agent = of_task(
        "container",
        &home,
        &id,
        &["label=polyphony.role=agent".into()],
    );
    assert_eq!(agent.len(), 1, "{agent:?}");
    let out = std::process::Command::new("docker")
        .args([
            "inspect",
            "--format",
            "{{range .Config.Env}}{{println .}}{{end}}",
            &agent[0],
        ])
        .output()
        .expect("docker inspect");
    let env = text(&out.stdout);
    let var = |name: &str| {
        env.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("no {name} in the agent's environment"))
            .to_string()
    };
    let placeholder = var("ANTHROPIC_API_KEY");
    assert!(placeholder.starts_with("polyphony-gw-"), "{placeholder}");
    let gateway = var("ANTHROPIC_BASE_URL");
    let host = gateway
        .trim_start_matches("http://")
        .trim_end_matches(":3129")
        .to_string();
    let internal = of_task("network", &home, &id, &[]);
    assert_eq!(internal.len(), 1, "{internal:?}");
    let proxy = of_task(
        "container",
        &home,
        &id,
        &["label=polyphony.role=egress".into()],
    );
    assert_eq!(proxy.len(), 1, "{proxy:?}");
    let out = std::process::Command::new("docker")
        .args([
            "inspect",
            "--format",
            &format!(
                "{{{{(index .NetworkSettings.Networks \"{}\").IPAddress}}}}",
                net.name
            ),
            &proxy[0],
        ])
        .output()
        .expect("docker inspect proxy");
    let outside_ip = text(&out.stdout).trim().to_string();
    let probe = |network: &str, host: &str| {
        probe_gateway(
            &image,
            network,
            host,
            "POST /v1/messages HTTP/1.1\r\nHost: gw\r\nx-api-key: %s\r\nanthropic-version: 2023-06-01\r\n",
            &placeholder,
        )
    };
    let proxy_log = || {
        let out = std::process::Command::new("docker")
            .args(["logs", "--tail", "8", &proxy[0]])
            .output()
            .expect("docker logs");
        format!("{}{}", text(&out.stdout), text(&out.stderr))
    };
    let inside = probe(&internal[0], &host);
    assert!(
        inside.contains("HTTP/1.1 401") && inside.contains("in use by another client"),
        "a second container on the attempt's network got:\n{inside}\nproxy:\n{}",
        proxy_log()
    );
    let outside = probe(&net.name, &outside_ip);
    assert!(
        outside.contains("CONNECT-FAILED")
            || (outside.contains("HTTP/1.1 401") && outside.contains("another client")),
        "a container on the proxy's outbound network got:\n{outside}"
    );

    let status = daemon.wait(Duration::from_secs(180)).await;
    assert!(status.success(), "daemon: {}", daemon.log());
    let v = home.task(&id).await;
    assert_eq!(v["task"]["state"], "LANDED", "{v:#}\n{}", daemon.log());
    assert_eq!(attempts(&v).len(), 1);
    assert!(api.turns() >= 2, "{:?}", api.requests());
    assert!(api.credentials().iter().all(|c| c == API_KEY));
    let events = text(&home.run(&["logs", &id, "--json"]).await.stdout);
    let refused = events
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["data"]["gateway"]["outcome"] == "refused_client")
        .count();
    assert!(refused >= 1, "no refused client in the events:\n{events}");
    println!(
        "a_second_container_presenting_the_attempts_placeholder_is_refused: {:?}",
        started.elapsed()
    );
}

/// A raw HTTP request from a fresh container on `network` to the gateway at `host:3129`
/// (bash's /dev/tcp; at most 8 s, an unreachable address says CONNECT-FAILED): `head` is the
/// request line and headers up to the credential's (`%s` stands for `key`), each ending in
/// CRLF; an empty JSON body follows. Not labelled with a home: a daemon would take it for one
/// of its own containers. Returns what came back (stdout and stderr).
fn probe_gateway(image: &str, network: &str, host: &str, head: &str, key: &str) -> String {
    let request = "exec 3<>/dev/tcp/$GW_HOST/3129 || exit 1; \
         printf \"${GW_HEAD}content-type: application/json\\r\\ncontent-length: 0\\r\\nconnection: close\\r\\n\\r\\n\" \"$GW_KEY\" >&3; \
         cat <&3";
    let out = std::process::Command::new("docker")
        .args([
            "run",
            "--rm",
            "--network",
            network,
            "--entrypoint",
            "/bin/bash",
        ])
        .args(["-e", &format!("GW_HOST={host}")])
        .args(["-e", &format!("GW_KEY={key}")])
        .args(["-e", &format!("GW_HEAD={}", head.replace("\r\n", "\\r\\n"))])
        .args(["-e", &format!("PROBE={request}")])
        .args([
            image,
            "-c",
            "timeout 8 bash -c \"$PROBE\" || echo CONNECT-FAILED $?",
        ])
        .output()
        .expect("docker run");
    format!("{}{}", text(&out.stdout), text(&out.stderr))
}

/// Issue 26: the gateway is invisible to the CLI. The same scripted conversation runs once
/// with the gateway off (the CLI reaches the scripted API through its egress proxy's
/// allowlist) and once through the gateway; the real CLI's output (its stream-json
/// transcript) is the same line for line, once the values that differ between any two runs
/// (ids, session ids, timestamps, durations) are blanked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_claude_prints_the_same_with_and_without_the_gateway() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let mut outputs = Vec::new();
    for through_proxy in [true, false] {
        let net = TestNetwork::create(if through_proxy { "nogw" } else { "withgw" });
        let api = ScriptedAnthropic::start(net.gateway, fix_then_stop)
            .await
            .expect("scripted model API");
        let home = Home::new(
            &image,
            &net,
            &api,
            Setup {
                through_proxy,
                ..Setup::default()
            },
        );
        let id = home
            .enqueue("`add 2 3` prints -1; test.sh fails.", "Fix add()")
            .await;
        let out = home.run(&["spawn", "--task", &id]).await;
        let v = home.task(&id).await;
        assert!(out.status.success(), "spawn: {}\n{v:#}", output(&out));
        assert_eq!(v["task"]["state"], "LANDED", "{v:#}");
        let gated = api.credentials().iter().all(|c| c == API_KEY);
        assert!(gated, "the API got another credential");
        outputs.push(normalised(&home.transcript(&id, 1)));
    }
    let (direct, gated) = (&outputs[0], &outputs[1]);
    assert!(direct.len() >= 3, "{direct:#?}");
    let mut differences = Vec::new();
    for (n, (d, g)) in direct.iter().zip(gated).enumerate() {
        differ(&format!("line {}", n + 1), d, g, &mut differences);
    }
    assert!(
        differences.is_empty() && direct.len() == gated.len(),
        "{} vs {} lines; differences:\n{}",
        direct.len(),
        gated.len(),
        differences.join("\n")
    );
    println!(
        "real_claude_prints_the_same_with_and_without_the_gateway: {:?}",
        started.elapsed()
    );
}

/// Every path where `a` and `b` differ, with both values (cut to 200 characters).
fn differ(at: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                differ(
                    &format!("{at}.{k}"),
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                differ(&format!("{at}[{i}]"), p, q, out);
            }
        }
        _ if a != b => {
            let cut = |v: &Value| v.to_string().chars().take(200).collect::<String>();
            out.push(format!("{at}: {} | {}", cut(a), cut(b)));
        }
        _ => {}
    }
}

/// A transcript's JSON lines with run-specific values blanked: ids, session ids, uuids,
/// timestamps, durations (keys ending in `_ms`), the CLI's per-process socket path.
fn normalised(transcript: &str) -> Vec<Value> {
    fn blank(v: &mut Value) {
        match v {
            Value::Object(map) => {
                for (k, x) in map.iter_mut() {
                    let volatile = matches!(
                        k.as_str(),
                        "id" | "session_id"
                            | "uuid"
                            | "timestamp"
                            | "tool_use_id"
                            | "request_id"
                            | "thread_id"
                            | "messaging_socket_path"
                    ) || k.ends_with("_ms");
                    if volatile {
                        *x = Value::Null;
                    } else {
                        blank(x);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(blank),
            _ => {}
        }
    }
    transcript
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|mut v| {
            blank(&mut v);
            v
        })
        .collect()
}

// ------------------------------------------------------------------ the real Codex CLI

/// The key Codex sends (its provider's `env_key`); it must never show in logs or transcripts.
const OPENAI_KEY: &str = "sk-scripted-openai-0123456789abcdef";

use polyphony::scripted_openai::{self, ScriptedOpenAi};

/// A home whose default agent is the real Codex 0.147.0 in `image`: the identity's codex
/// login directory holds only a `config.toml` whose provider points at the scripted
/// Responses API (what an operator's `~/.codex/config.toml` does for a custom endpoint), and
/// the key comes through the identity's `api_keys`. `fallback`: a second identity and profile
/// `codex-b` on another scripted API, codex's fallback.
fn codex_home(
    image: &str,
    network: &TestNetwork,
    api: &ScriptedOpenAi,
    fallback: Option<&ScriptedOpenAi>,
) -> Home {
    codex_home_with(image, network, api, fallback, CodexKnobs::default())
}

/// What some real-Codex tests change in [`codex_home`]'s config (everything else, the
/// gateway and egress lines included, is [`codex_home_with`]'s alone).
struct CodexKnobs<'a> {
    idle: &'a str,
    max_attempts: u32,
    /// The fake GitHub the home talks to (`GITHUB_API_URL`).
    github: Option<&'a FakeGithub>,
    /// Appended to config.yaml (e.g. a `shepherd:` section).
    yaml: &'a str,
    /// Issue 26: the model-API gateway off (`gateway: enabled: false`): Codex then reaches
    /// the scripted API by name through its egress proxy's allowlist, with the real key.
    gateway_off: bool,
    /// The identity's `cost_ceiling_usd_per_day`.
    ceiling: Option<f64>,
}

impl Default for CodexKnobs<'_> {
    fn default() -> Self {
        CodexKnobs {
            idle: "1m",
            max_attempts: 3,
            github: None,
            yaml: "",
            gateway_off: false,
            ceiling: None,
        }
    }
}

fn codex_home_with(
    image: &str,
    network: &TestNetwork,
    api: &ScriptedOpenAi,
    fallback: Option<&ScriptedOpenAi>,
    knobs: CodexKnobs<'_>,
) -> Home {
    let (dir, path, origin) = Home::scaffold();
    std::fs::write(
        path.join("config.yaml"),
        format!(
            // Issue 26: the gateway (in the attempt's egress proxy) holds the key; Codex is
            // pointed at it by a model provider in its staged config.toml.
            "poll_interval: 30s\nmax_concurrent_agents: 2\nevent_idle_timeout: {}\nmax_attempts: {}\ndefault_identity: scripted\ncontainer:\n  image: {image}\n  user: \"1000:1000\"\n  deadline: 3m\n  memory: 1g\n  cpus: 1\n{}{}{}",
            knobs.idle,
            knobs.max_attempts,
            if knobs.gateway_off { "gateway:\n  enabled: false\n" } else { "" },
            // Issue 25: Codex reaches the scripted API by name through its egress proxy.
            polyphony::demo::egress_yaml(
                &network.name,
                network.gateway,
                MODEL_HOST,
                &std::iter::once(api)
                    .chain(fallback)
                    .map(|a| openai_port(a, network))
                    .collect::<Vec<_>>(),
            ),
            knobs.yaml,
        ),
    )
    .expect("config.yaml");
    let login = |name: &str, api: &ScriptedOpenAi| {
        let login = dir.path().join(name);
        std::fs::create_dir_all(&login).expect("login dir");
        std::fs::write(
            login.join("config.toml"),
            scripted_openai::codex_config_toml(
                &api.base_url()
                    .replacen(&network.gateway.to_string(), MODEL_HOST, 1),
                "OPENAI_API_KEY",
                "gpt-5.5",
            ),
        )
        .expect("config.toml");
        login
    };
    let first = login("login-codex", api);
    // The gateway's upstream: the identity's OPENAI_BASE_URL (the scripted API's address,
    // reached from the proxy over the test network).
    let keys = ("OPENAI_API_KEY", "POLYPHONY_TEST_OPENAI_KEY");
    let mut identities = identity_yaml(
        "scripted",
        "codex",
        &first,
        keys,
        ("OPENAI_BASE_URL", "POLYPHONY_TEST_OPENAI_URL"),
    );
    if let Some(usd) = knobs.ceiling {
        identities.push_str(&format!("    cost_ceiling_usd_per_day: {usd}\n"));
    }
    let mut agents = "agents:\n  - name: codex\n    agent_type: codex\n".to_string();
    let mut chain = "[]";
    if let Some(second) = fallback {
        let login2 = login("login-codex-b", second);
        identities.push_str(&identity_yaml(
            "second",
            "codex",
            &login2,
            keys,
            ("OPENAI_BASE_URL", "POLYPHONY_TEST_OPENAI_URL_2"),
        ));
        agents.push_str("  - name: codex-b\n    agent_type: codex\n    identity: second\n");
        chain = "[codex-b]";
    }
    let roster = Roster {
        identities,
        agents: Some(agents),
        agent: "codex",
        fallback: chain,
    };
    let upstream = |a: &ScriptedOpenAi| a.base_url().trim_end_matches("/v1").to_string();
    let env = [
        ("POLYPHONY_TEST_OPENAI_KEY", OPENAI_KEY.to_string()),
        ("POLYPHONY_TEST_OPENAI_URL", upstream(api)),
        (
            "POLYPHONY_TEST_OPENAI_URL_2",
            fallback.map(upstream).unwrap_or_default(),
        ),
    ];
    Home::finish((dir, path, origin), roster, knobs.github, &env)
}

/// The port of a scripted Responses API listening on `network`'s gateway.
fn openai_port(api: &ScriptedOpenAi, network: &TestNetwork) -> u16 {
    let url = api.base_url();
    let rest = url
        .split_once(&format!("{}:", network.gateway))
        .map(|(_, r)| r)
        .unwrap_or("");
    rest.split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {url}"))
}

/// Codex fixes calc.sh with `exec_command`, then (once it has seen the output) says so.
fn codex_fix_then_stop(turn: &scripted_openai::Turn<'_>) -> scripted_openai::Reply {
    if turn.transcript.contains("function_call_output") {
        scripted_openai::Reply::Text("Fixed add(): it now adds.".into())
    } else {
        scripted_openai::Reply::Shell(FIX.into())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_codex_lands_a_task() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let net = TestNetwork::create("cxlands");
    let api = ScriptedOpenAi::start(net.gateway, codex_fix_then_stop)
        .await
        .expect("scripted Responses API");
    let home = codex_home(&image, &net, &api, None);
    let id = home
        .enqueue("`add 2 3` prints -1; test.sh fails.", "Fix add()")
        .await;

    let out = home.run(&["spawn", "--task", &id]).await;
    home.dump(&id, "codex-lands").await;
    let v = home.task(&id).await;
    assert!(
        out.status.success(),
        "spawn: {}\n{v:#}\ntranscript:\n{}\nrequests: {:?}",
        output(&out),
        home.transcript(&id, 1),
        api.requests()
    );
    assert_eq!(v["task"]["state"], "LANDED", "{v:#}");
    let a = attempts(&v);
    assert_eq!(a.len(), 1, "{a:#?}");
    assert_eq!(a[0]["status"], "succeeded");
    assert!(api.turns() >= 2, "{:?}", api.requests());
    assert!(
        api.credentials().iter().all(|c| c == OPENAI_KEY),
        "{:?}",
        api.credentials()
    );
    let branch = a[0]["branch"].as_str().expect("branch");
    assert!(home.show(&format!("{branch}:calc.sh")).contains("a + b"));
    let transcript = home.transcript(&id, 1);
    assert!(transcript.contains("Fixed add()"), "{transcript}");
    assert!(transcript.contains("command_execution"), "{transcript}");
    assert!(!transcript.contains(OPENAI_KEY), "the key leaked");
    // Issue 26: Codex went through the gateway in its proxy (its staged config.toml names
    // the gateway's provider), which metered every Responses call.
    let events = text(&home.run(&["logs", &id, "--json"]).await.stdout);
    let metered = events
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["data"]["gateway"]["path"] == "/v1/responses")
        .count();
    assert!(metered >= 2, "no gateway records:\n{events}");
    assert!(a[0]["cost_usd"].as_f64().is_some(), "{a:#?}");
    println!("real_codex_lands_a_task: {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_codex_with_a_refused_key_is_auth_and_blocked_after_one_attempt() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let net = TestNetwork::create("cxauth");
    let api = ScriptedOpenAi::start(net.gateway, |_: &scripted_openai::Turn<'_>| {
        scripted_openai::Reply::Unauthorized
    })
    .await
    .expect("scripted Responses API");
    let home = codex_home(&image, &net, &api, None);
    let id = home.enqueue("`add 2 3` prints -1.", "Fix add()").await;

    let out = home.run(&["spawn", "--task", &id]).await;
    home.dump(&id, "codex-auth").await;
    let v = home.task(&id).await;
    assert!(!out.status.success(), "{}", output(&out));
    assert_eq!(v["task"]["state"], "BLOCKED", "{v:#}");
    let a = attempts(&v);
    assert_eq!(a.len(), 1, "{v:#}");
    let reason = a[0]["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains("authentication failed") && reason.contains("401"),
        "{reason}"
    );
    assert!(
        reason.contains("codex login"),
        "the fix names the login: {reason}"
    );
    let secs = a[0]["duration_seconds"].as_f64().unwrap_or(f64::MAX);
    assert!(
        secs < 45.0,
        "the attempt waited out the CLI's retries: {secs}s"
    );
    assert!(
        !home.transcript(&id, 1).contains(OPENAI_KEY),
        "the key leaked"
    );
    println!("real_codex_auth: {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_codex_out_of_quota_falls_back_with_the_printed_reset() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let net = TestNetwork::create("cxquota");
    let resets_at = chrono::Utc::now().timestamp() + 3 * 3600;
    let limited = ScriptedOpenAi::start(net.gateway, move |_: &scripted_openai::Turn<'_>| {
        scripted_openai::Reply::UsageLimit { resets_at }
    })
    .await
    .expect("scripted Responses API");
    let healthy = ScriptedOpenAi::start(net.gateway, codex_fix_then_stop)
        .await
        .expect("scripted Responses API");
    let home = codex_home(&image, &net, &limited, Some(&healthy));
    let id = home.enqueue("`add 2 3` prints -1.", "Fix add()").await;

    let out = home.run(&["spawn", "--task", &id]).await;
    home.dump(&id, "codex-quota").await;
    let v = home.task(&id).await;
    assert!(out.status.success(), "spawn: {}\n{v:#}", output(&out));
    assert_eq!(v["task"]["state"], "LANDED", "{v:#}");
    assert_eq!(v["task"]["failures"], 0);
    let a = attempts(&v);
    let agents: Vec<&str> = a
        .iter()
        .map(|x| x["agent"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(agents, ["codex", "codex-b"], "{a:#?}");
    assert_eq!(a[0]["status"], "quota");
    // Codex prints the reset in the container's local time (UTC): "try again at 3:04 PM".
    let at = chrono::DateTime::from_timestamp(resets_at, 0).expect("instant");
    let printed = at.format("%-I:%M %p").to_string();
    let reason = a[0]["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains("usage limit") && reason.contains(&printed),
        "{reason} (want {printed})"
    );
    assert_eq!(a[1]["status"], "succeeded");
    // No retry on a usage limit: one request reached the limited API.
    assert_eq!(limited.turns(), 1, "{:?}", limited.requests());
    println!("real_codex_quota: {:?}", started.elapsed());
}

/// First attempt: a change that fixes nothing. Once the prompt carries the failing check's
/// output (the repair attempt): the fix.
fn codex_fix_only_when_shown_the_failure(
    turn: &scripted_openai::Turn<'_>,
) -> scripted_openai::Reply {
    use scripted_openai::Reply;
    let t = turn.transcript;
    if t.contains("function_call_output") {
        Reply::Text("Done.".into())
    } else if t.contains("FAIL: add 2 3 gave -1") {
        Reply::Shell(FIX.into())
    } else {
        Reply::Shell("echo 'add() looks fine to me' >> NOTES.md".into())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_codex_lands_on_the_repair_retry() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let net = TestNetwork::create("cxrepair");
    let api = ScriptedOpenAi::start(net.gateway, codex_fix_only_when_shown_the_failure)
        .await
        .expect("scripted Responses API");
    let home = codex_home(&image, &net, &api, None);
    let id = home.enqueue("`add 2 3` prints -1.", "Fix add()").await;

    let out = home.run(&["spawn", "--task", &id]).await;
    home.dump(&id, "codex-repair").await;
    let v = home.task(&id).await;
    assert!(out.status.success(), "spawn: {}\n{v:#}", output(&out));
    assert_eq!(v["task"]["state"], "LANDED", "{v:#}");
    let a = attempts(&v);
    assert_eq!(a.len(), 2, "{a:#?}");
    assert_eq!(a[0]["status"], "failed");
    assert!(
        a[0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("verification failed")),
        "{:#}",
        a[0]
    );
    assert!(a[0]["commit_sha"].is_null(), "attempt 1 must not land");
    assert_eq!(a[1]["status"], "succeeded");
    let branch = a[1]["branch"].as_str().expect("branch");
    assert!(home.show(&format!("{branch}:calc.sh")).contains("a + b"));
    // The script fixes only once a request carries the failing check's output: the repair
    // prompt reached the model through the real CLI.
    assert!(
        !home.transcript(&id, 2).contains(OPENAI_KEY),
        "the key leaked"
    );
    println!(
        "real_codex_lands_on_the_repair_retry: {:?}",
        started.elapsed()
    );
}

/// The Responses API answers 500 forever: Codex retries (5 × 5 requests), then fails the
/// turn with its "high demand" text; the attempt ends transient with that reason, in
/// bounded time, and with `max_attempts: 1` the task ends with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_codex_against_a_failing_api_ends_with_the_reason() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let net = TestNetwork::create("cx500");
    let api = ScriptedOpenAi::start(net.gateway, |_: &scripted_openai::Turn<'_>| {
        scripted_openai::Reply::ServerError
    })
    .await
    .expect("scripted Responses API");
    let home = codex_home_with(
        &image,
        &net,
        &api,
        None,
        CodexKnobs {
            max_attempts: 1,
            ..CodexKnobs::default()
        },
    );
    let id = home.enqueue("`add 2 3` prints -1.", "Fix add()").await;

    let out = home.run(&["spawn", "--task", &id]).await;
    home.dump(&id, "codex-server-error").await;
    let v = home.task(&id).await;
    assert!(!out.status.success(), "{}", output(&out));
    let a = attempts(&v);
    assert_eq!(a.len(), 1, "{v:#}");
    assert_eq!(a[0]["status"], "failed", "{:#}", a[0]);
    let reason = a[0]["reason"].as_str().unwrap_or("");
    assert!(reason.contains("high demand"), "{reason}");
    let secs = a[0]["duration_seconds"].as_f64().unwrap_or(f64::MAX);
    assert!(secs < 120.0, "not bounded: {secs}s");
    let state = v["task"]["state"].as_str().unwrap_or("");
    assert!(
        matches!(state, "FAILED" | "BLOCKED"),
        "the task ends after its one attempt: {v:#}"
    );
    let last = v["task"]["last_error"]
        .as_str()
        .or_else(|| v["task"]["reason"].as_str())
        .unwrap_or("");
    assert!(
        last.contains("high demand") || v.to_string().matches("high demand").count() >= 2,
        "the task names the reason: {v:#}"
    );
    assert!(api.turns() >= 5, "Codex retried: {}", api.turns());
    println!("real_codex_500: {:?}", started.elapsed());
}

/// The PR shepherd on real Codex: the task lands as a pull request on the fake GitHub; a
/// trusted reviewer's inline comment then becomes one follow-up run by the real CLI, one
/// verified commit on top of the PR's head, and one reply in that thread naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_codex_runs_a_pr_shepherd_follow_up() {
    const DOC: &str = "# add A B: prints A + B";
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let net = TestNetwork::create("cxshep");
    let api = ScriptedOpenAi::start(net.gateway, |turn: &scripted_openai::Turn<'_>| {
        use scripted_openai::Reply;
        let t = turn.transcript;
        if t.contains("function_call_output") {
            Reply::Text("Done: see the diff.".into())
        } else if t.contains("Please document add()") {
            Reply::Shell(format!("sed -i '1a {DOC}' calc.sh"))
        } else {
            Reply::Shell(FIX.into())
        }
    })
    .await
    .expect("scripted Responses API");
    let fake = FakeGithub::start().await;
    let home = codex_home_with(
        &image,
        &net,
        &api,
        None,
        CodexKnobs {
            github: Some(&fake),
            yaml: "verify:\n  timeout: 1m\nshepherd:\n  enabled: true\n",
            ..CodexKnobs::default()
        },
    );
    let repo = "acme/calc-codex";
    fake.add_repo(repo, &format!("file://{}", home.origin.display()), "main");
    fake.set_permission(repo, "alice", "write");
    let n = fake.add_issue(
        repo,
        NewIssue::new("Fix add()")
            .body("`add 2 3` prints -1.")
            .labels(&["agent-ready"]),
    );
    let issue = format!("{repo}#{n}");
    let out = home.run(&["spawn", &issue]).await;
    let v = home.task(&issue).await;
    assert!(out.status.success(), "spawn: {}\n{v:#}", output(&out));
    assert_eq!(v["task"]["state"], "LANDED", "{v:#}");
    let pr = v["pull"]["number"]
        .as_u64()
        .expect("the pull request is watched");
    let branch = v["pull"]["branch"].as_str().expect("branch").to_string();
    let tip = |b: &str| {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(&home.origin)
            .args(["rev-parse", &format!("refs/heads/{b}")])
            .output()
            .expect("git rev-parse");
        text(&out.stdout).trim().to_string()
    };
    let head = tip(&branch);

    let comment = fake.add_review_comment_as(
        repo,
        pr,
        "alice",
        "calc.sh",
        5,
        "Please document add() above it.",
    );
    let out = home.run(&["daemon", "--exit-when-idle"]).await;
    assert!(out.status.success(), "daemon: {}", output(&out));

    let v = home.task(&issue).await;
    let followups = v["followups"].as_array().cloned().unwrap_or_default();
    assert_eq!(followups.len(), 1, "{v:#}");
    let fid = followups[0]["task_id"].as_str().expect("id").to_string();
    home.dump(&fid, "codex-shepherd").await;
    let f = home.task(&fid).await;
    assert_eq!(f["task"]["state"], "LANDED", "{f:#}");
    assert_eq!(f["attempts"][0]["agent"], "codex", "{f:#}");
    let new = tip(&branch);
    assert_ne!(new, head, "a new commit on the PR branch");
    assert_eq!(f["attempts"][0]["commit_sha"].as_str(), Some(new.as_str()));
    let parent = std::process::Command::new("git")
        .arg("-C")
        .arg(&home.origin)
        .args(["rev-parse", &format!("{new}^")])
        .output()
        .expect("git rev-parse");
    assert_eq!(text(&parent.stdout).trim(), head, "on top of the old head");
    let calc = home.show(&format!("{new}:calc.sh"));
    assert!(calc.contains(DOC) && calc.contains("a + b"), "{calc}");
    let replies: Vec<_> = fake
        .review_comments(repo, pr)
        .into_iter()
        .filter(|c| c.author == "polyphony-bot")
        .collect();
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(replies[0].in_reply_to, Some(comment));
    assert!(replies[0].body.contains(&new[..12]), "{}", replies[0].body);
    println!(
        "real_codex_runs_a_pr_shepherd_follow_up: {:?}",
        started.elapsed()
    );
}

/// `demo --real-codex`: the demo's first task lands on the real Codex CLI, and the demo
/// removes the Docker network it made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_real_codex_lands_its_task() {
    let Some(_image) = image().await else { return };
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("temp dir");
    let child = Command::new(BIN)
        .args(["demo", "--real-codex", "--json", "--dir"])
        .arg(dir.path())
        .env_remove("GITHUB_TOKEN")
        .env_remove("GH_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn demo");
    let out = tokio::time::timeout(RUN_LIMIT, child.wait_with_output())
        .await
        .expect("demo finished in time")
        .expect("demo output");
    assert!(out.status.success(), "{}", output(&out));
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).expect("demo --json");
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(rows[0]["state"], "LANDED", "{rows:#?}");
    assert_eq!(rows[0]["agents"], serde_json::json!(["codex"]));
    let err = text(&out.stderr);
    assert!(err.contains("REAL Codex CLI, SCRIPTED model API"), "{err}");
    // The demo knows what it staged: no warning about its logins (issue 29). The CLI's
    // own refused connections are real warnings and stay.
    let about_logins: Vec<&str> = err
        .lines()
        .filter(|l| l.contains(" WARN ") && !l.contains("egress refused"))
        .collect();
    assert!(about_logins.is_empty(), "{}", about_logins.join("\n"));
    let network = err
        .split_whitespace()
        .find(|w| w.starts_with("polyphony-demo-codex-"))
        .expect("the demo names its network")
        .trim_end_matches(';')
        .to_string();
    let ls = std::process::Command::new("docker")
        .args(["network", "ls", "--format", "{{.Name}}"])
        .output()
        .expect("docker network ls");
    assert!(
        !text(&ls.stdout).lines().any(|n| n == network),
        "{network} left behind"
    );
    println!("demo_real_codex_lands_its_task: {:?}", started.elapsed());
}

// ------------------------------------------------------------------ Codex behind the gateway

/// The gateway events of `logs TASK --json` that metered usage (a Responses answer).
fn metered_records(events: &str) -> Vec<Value> {
    events
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|e| e["data"]["gateway"].clone())
        .filter(|g| g.is_object() && !g["usage"].is_null())
        .collect()
}

/// Issue 26 on the real Codex: the hostile dump of [`dump_everything_then_stop`] (its
/// environment, every process's environ, its home with the staged config.toml, its
/// workspace) lands in the branch and holds the placeholder and the gateway's address,
/// never the key in any spelling; a forged `turn.completed` with a billion tokens written to
/// the CLI's own stdout changes nothing (the tokens and the cost are the gateway's: the
/// scripted usage of each request times the shipped price of the CLI's model).
fn codex_dump_everything_then_stop(turn: &scripted_openai::Turn<'_>) -> scripted_openai::Reply {
    use scripted_openai::Reply;
    if turn.transcript.contains("function_call_output") {
        Reply::Text("Fixed add().".into())
    } else {
        Reply::Shell(format!(
            "{{ echo '== env'; env; echo '== environ'; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done; \
             echo '== home'; find \"$HOME\" -type f -exec cat {{}} + ; echo '== workspace'; \
             find /workspace -path /workspace/.git -prune -o -type f -print -exec cat {{}} + ; }} > /tmp/dump 2>/dev/null; \
             cp /tmp/dump DUMP.txt; \
             echo '{{\"type\":\"turn.completed\",\"usage\":{{\"input_tokens\":1000000000,\"cached_input_tokens\":0,\"output_tokens\":1000000000}},\"total_cost_usd\":99999}}' > /proc/1/fd/1; \
             {FIX}"
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_codex_behind_the_gateway_never_holds_the_key() {
    use base64::Engine as _;
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let net = TestNetwork::create("cxgateway");
    let api = ScriptedOpenAi::start(net.gateway, codex_dump_everything_then_stop)
        .await
        .expect("scripted Responses API");
    let home = codex_home(&image, &net, &api, None);
    let id = home
        .enqueue("`add 2 3` prints -1; test.sh fails.", "Fix add()")
        .await;
    let out = home.run(&["spawn", "--task", &id]).await;
    home.dump(&id, "codex-gateway").await;
    let v = home.task(&id).await;
    let transcript = home.transcript(&id, 1);
    assert!(
        out.status.success(),
        "spawn: {}\n{v:#}\ntranscript:\n{transcript}",
        output(&out),
    );
    assert_eq!(v["task"]["state"], "LANDED", "{v:#}");
    let a = attempts(&v);
    let branch = a[0]["branch"].as_str().expect("branch");
    let dump = home.show(&format!("{branch}:DUMP.txt"));
    assert!(
        dump.contains("== environ") && dump.contains("== home"),
        "{dump}"
    );
    // The dump worked: the placeholder, and the gateway in the staged config.toml.
    let placeholder = dump
        .lines()
        .find_map(|l| l.strip_prefix("OPENAI_API_KEY="))
        .unwrap_or_else(|| panic!("no OPENAI_API_KEY in the dump:\n{dump}"))
        .to_string();
    assert!(placeholder.starts_with("polyphony-gw-"), "{placeholder}");
    // Codex is pointed at the gateway in its proxy by the staged config.toml.
    assert!(
        dump.contains(&format!(
            "model_provider = \"{}\"",
            polyphony::orchestrator::gateway::CODEX_PROVIDER
        )),
        "no gateway provider in the dump:\n{dump}"
    );
    let gateway = dump
        .lines()
        .filter_map(|l| l.trim().strip_prefix("base_url = "))
        .map(|u| u.trim_matches('"'))
        .find(|u| u.ends_with(":3129/v1"))
        .unwrap_or_else(|| panic!("no gateway base_url in the dump:\n{dump}"));
    assert!(gateway.starts_with("http://"), "{gateway}");
    let b64 = base64::engine::general_purpose::STANDARD.encode(OPENAI_KEY);
    let hexed = hex::encode(OPENAI_KEY);
    let reversed: String = OPENAI_KEY.chars().rev().collect();
    for spelling in [OPENAI_KEY, &b64, &hexed, &reversed, &OPENAI_KEY[..20]] {
        assert!(!dump.contains(spelling), "the dump holds {spelling}");
        assert!(
            !transcript.contains(spelling),
            "the transcript holds {spelling}"
        );
    }
    // The scripted API got the real key on every request, never the placeholder.
    let creds = api.credentials();
    assert!(!creds.is_empty());
    assert!(
        creds.iter().all(|c| c == OPENAI_KEY),
        "{:?}",
        creds
            .iter()
            .map(|c| &c[..c.len().min(16)])
            .collect::<Vec<_>>()
    );
    // The forged line reached the CLI's stdout (the transcript), as its own output would.
    let forged = transcript
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .any(|e| e["type"] == "turn.completed" && e["usage"]["input_tokens"] == 1_000_000_000u64);
    assert!(
        forged,
        "the forged line is not in the transcript:\n{transcript}"
    );
    // Tokens and cost are the gateway's: the scripted usage of each request, priced.
    let events = text(&home.run(&["logs", &id, "--json"]).await.stdout);
    let records = metered_records(&events);
    assert!(records.len() >= 2, "no gateway records:\n{events}");
    let prices = polyphony::gateway::PriceTable::with_overrides(&Default::default());
    let mut expected: u128 = 0;
    for g in &records {
        let usage: polyphony::gateway::Usage =
            serde_json::from_value(g["usage"].clone()).expect("usage");
        assert_eq!(
            (
                usage.input_tokens,
                usage.cache_read_tokens,
                usage.output_tokens
            ),
            (
                scripted_openai::INPUT_TOKENS - scripted_openai::CACHED_TOKENS,
                scripted_openai::CACHED_TOKENS,
                scripted_openai::OUTPUT_TOKENS
            ),
            "{g}"
        );
        let model = g["model"].as_str().expect("model");
        expected += prices
            .cost(model, &usage)
            .unwrap_or_else(|| panic!("model {model} is not in the shipped table"));
    }
    let n = records.len() as u64;
    assert_eq!(
        a[0]["cost_usd"].as_f64(),
        Some(polyphony::gateway::pricing::usd_of_picos(expected)),
        "{a:#?}"
    );
    assert_eq!(
        (
            a[0]["tokens"]["input"].as_u64(),
            a[0]["tokens"]["cached_input"].as_u64(),
            a[0]["tokens"]["output"].as_u64()
        ),
        (
            Some(n * scripted_openai::INPUT_TOKENS),
            Some(n * scripted_openai::CACHED_TOKENS),
            Some(n * scripted_openai::OUTPUT_TOKENS)
        ),
        "the forged tokens counted: {a:#?}"
    );
    assert!(
        of_task("container", &home, &id, &["status=running".into()]).is_empty(),
        "a container of the attempt is still running"
    );
    println!(
        "real_codex_behind_the_gateway_never_holds_the_key: {:?}",
        started.elapsed()
    );
}

/// Issue 26 on the real Codex: a 429 `usage_limit_reached` whose body says an hour (what
/// Codex prints) but whose `x-ratelimit-reset-requests` header says 25 s parks the task until
/// the header's instant: FAILED with the quota wait there, no failure counted, and the next
/// attempt (the model then fixes add()) starts no earlier and lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_codex_parks_until_the_reset_its_429_headers_give() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let net = TestNetwork::create("cxpark");
    let reset = std::sync::Arc::new(std::sync::Mutex::new(None::<i64>));
    let sent = reset.clone();
    let api = ScriptedOpenAi::start(net.gateway, move |turn: &scripted_openai::Turn<'_>| {
        let mut sent = sent.lock().expect("lock");
        if sent.is_none() {
            let now = chrono::Utc::now().timestamp();
            *sent = Some(now + 25);
            return scripted_openai::Reply::UsageLimitWithHeaders {
                resets_at: now + 3600,
                reset_requests_secs: 25,
            };
        }
        codex_fix_then_stop(turn)
    })
    .await
    .expect("scripted Responses API");
    let home = codex_home(&image, &net, &api, None);
    let id = home
        .enqueue("`add 2 3` prints -1; test.sh fails.", "Fix add()")
        .await;
    let daemon = home.start(&["daemon"]);
    let deadline = Instant::now() + Duration::from_secs(150);
    let parked = loop {
        let list = home.tasks().await;
        let t = list.into_iter().find(|t| t["id"] == id.as_str());
        if let Some(t) = t.filter(|t| !t["quota_wait"].is_null()) {
            break t;
        }
        assert!(Instant::now() < deadline, "never parked: {}", daemon.log());
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let at = reset.lock().expect("lock").expect("the 429 was sent");
    assert_eq!(parked["state"], "FAILED", "{parked:#}");
    assert_eq!(parked["failures"], 0, "{parked:#}");
    assert_eq!(parked["quota_wait"]["agent"], "codex", "{parked:#}");
    // A duration is counted from when the gateway read it, a moment after the server sent
    // it: the same second or the next, never the body's hour.
    let until = stamp(&parked["quota_wait"]["until"]).timestamp();
    assert!(
        (at..=at + 1).contains(&until),
        "parked until {until}, the headers said {at}: {parked:#}"
    );
    assert_eq!(stamp(&parked["next_attempt_at"]).timestamp(), until);

    let landed = home
        .wait_for(&id, Duration::from_secs(150), &|| daemon.log(), |v| {
            v["task"]["state"] == "LANDED"
        })
        .await;
    let a = attempts(&landed);
    let statuses: Vec<&str> = a
        .iter()
        .map(|x| x["status"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(statuses, ["quota", "succeeded"], "{a:#?}");
    assert!(
        stamp(&a[1]["started_at"]).timestamp() >= until,
        "the next attempt started before the reset: {a:#?}"
    );
    assert_eq!(landed["task"]["failures"], 0);
    assert!(api.credentials().iter().all(|c| c == OPENAI_KEY));
    daemon.signal(libc::SIGTERM);
    println!(
        "real_codex_parks_until_the_reset_its_429_headers_give: {:?}",
        started.elapsed()
    );
}

/// Issue 26 on the real Codex: the identity's daily ceiling is $10 and the first request is
/// billed $9.99 (its scripted cached tokens at the home's price for the CLI's model): the
/// gateway refuses the second request before it goes out, the attempt ends as `budget` at
/// that request (no failure counted) and the task waits for the next UTC midnight. The
/// orchestrator runs in this process with the test's clock; set to three seconds before that
/// midnight, the task waits them out, runs on the new day's budget and lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_codex_over_budget_at_its_second_request_waits_for_the_reset_and_lands() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let net = TestNetwork::create("cxbudget");
    // The first request bills the scripted cached tokens, which the home's price makes
    // $9.99; every later one reads nothing from the cache.
    let first = Arc::new(AtomicBool::new(true));
    let once = first.clone();
    let api = ScriptedOpenAi::start(net.gateway, move |turn: &scripted_openai::Turn<'_>| {
        let reply = codex_fix_then_stop(turn);
        if once.swap(false, Ordering::SeqCst) {
            reply
        } else {
            scripted_openai::Reply::Billed {
                reply: Box::new(reply),
                cached_tokens: 0,
            }
        }
    })
    .await
    .expect("scripted Responses API");
    let cached_usd_per_mtok = 9.99 / scripted_openai::CACHED_TOKENS as f64 * 1_000_000.0;
    let prices = format!(
        "gateway:\n  prices:\n    gpt-5.5: {{input: 4, output: 20, cache_write: 0, cache_read: {cached_usd_per_mtok}}}\n"
    );
    let home = codex_home_with(
        &image,
        &net,
        &api,
        None,
        CodexKnobs {
            ceiling: Some(10.0),
            yaml: &prices,
            ..CodexKnobs::default()
        },
    );
    let id = home
        .enqueue("`add 2 3` prints -1; test.sh fails.", "Fix add()")
        .await;

    let url = api.base_url().trim_end_matches("/v1").to_string();
    budget_ends_the_attempt_and_the_task_lands_after_the_reset(
        &home,
        &id,
        &api,
        [
            ("POLYPHONY_TEST_OPENAI_KEY", OPENAI_KEY.to_string()),
            ("POLYPHONY_TEST_OPENAI_URL", url),
        ],
        OPENAI_KEY,
    )
    .await;
    println!(
        "real_codex_over_budget_at_its_second_request_waits_for_the_reset_and_lands: {:?}",
        started.elapsed()
    );
}

/// Issue 26 on the real Codex: while Codex waits on a 25 s tool step between its two model
/// requests, a second container on the attempt's internal network presenting the attempt's
/// placeholder as Codex does (`Authorization: Bearer`) is refused (401, never forwarded);
/// from the proxy's outbound network the gateway is unreachable or refuses the same way.
/// Codex's own second request still passes and the task lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_container_presenting_the_codex_attempts_placeholder_is_refused() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let net = TestNetwork::create("cxpeer");
    let api = ScriptedOpenAi::start(net.gateway, |turn: &scripted_openai::Turn<'_>| {
        if turn.transcript.contains("function_call_output") {
            scripted_openai::Reply::Text("Fixed add().".into())
        } else {
            // Codex answers the model after at most 30 s of a command (10 s by default).
            scripted_openai::Reply::ShellWaiting {
                cmd: format!("sleep 25; {FIX}"),
                yield_time_ms: 30_000,
            }
        }
    })
    .await
    .expect("scripted Responses API");
    let home = codex_home(&image, &net, &api, None);
    let id = home
        .enqueue("`add 2 3` prints -1; test.sh fails.", "Fix add()")
        .await;
    let mut daemon = home.start(&["daemon", "--exit-when-idle", "--json"]);
    let deadline = Instant::now() + Duration::from_secs(120);
    while api.turns() < 1 {
        assert!(
            Instant::now() < deadline,
            "no model request: {}",
            daemon.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let agent = of_task(
        "container",
        &home,
        &id,
        &["label=polyphony.role=agent".into()],
    );
    assert_eq!(agent.len(), 1, "{agent:?}");
    let out = std::process::Command::new("docker")
        .args([
            "inspect",
            "--format",
            "{{range .Config.Env}}{{println .}}{{end}}",
            &agent[0],
        ])
        .output()
        .expect("docker inspect");
    let env = text(&out.stdout);
    let var = |name: &str| {
        env.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("no {name} in the agent's environment"))
            .to_string()
    };
    let placeholder = var("OPENAI_API_KEY");
    assert!(placeholder.starts_with("polyphony-gw-"), "{placeholder}");
    let gateway = var("OPENAI_BASE_URL");
    let host = gateway
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .trim_end_matches(":3129")
        .to_string();
    let proxy = of_task(
        "container",
        &home,
        &id,
        &["label=polyphony.role=egress".into()],
    );
    assert_eq!(proxy.len(), 1, "{proxy:?}");
    let internal = of_task("network", &home, &id, &[]);
    assert_eq!(internal.len(), 1, "{internal:?}");
    let ip_on = |network: &str| {
        let out = std::process::Command::new("docker")
            .args([
                "inspect",
                "--format",
                &format!("{{{{(index .NetworkSettings.Networks \"{network}\").IPAddress}}}}"),
                &proxy[0],
            ])
            .output()
            .expect("docker inspect proxy");
        text(&out.stdout).trim().to_string()
    };
    let head = "POST /v1/responses HTTP/1.1\r\nHost: gw\r\nauthorization: Bearer %s\r\n";
    let inside = probe_gateway(&image, &internal[0], &host, head, &placeholder);
    assert!(
        inside.contains("HTTP/1.1 401") && inside.contains("in use by another client"),
        "a second container on the attempt's network got:\n{inside}"
    );
    let outside = probe_gateway(&image, &net.name, &ip_on(&net.name), head, &placeholder);
    assert!(
        outside.contains("CONNECT-FAILED")
            || (outside.contains("HTTP/1.1 401") && outside.contains("another client")),
        "a container on the proxy's outbound network got:\n{outside}"
    );
    assert_eq!(
        api.turns(),
        1,
        "a probe reached the API: {:?}",
        api.requests()
    );

    let status = daemon.wait(Duration::from_secs(180)).await;
    assert!(status.success(), "daemon: {}", daemon.log());
    let v = home.task(&id).await;
    assert_eq!(v["task"]["state"], "LANDED", "{v:#}\n{}", daemon.log());
    assert_eq!(attempts(&v).len(), 1);
    assert!(api.turns() >= 2, "{:?}", api.requests());
    assert!(api.credentials().iter().all(|c| c == OPENAI_KEY));
    let events = text(&home.run(&["logs", &id, "--json"]).await.stdout);
    let refused = events
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["data"]["gateway"]["outcome"] == "refused_client")
        .count();
    assert!(refused >= 1, "no refused client in the events:\n{events}");
    println!(
        "a_second_container_presenting_the_codex_attempts_placeholder_is_refused: {:?}",
        started.elapsed()
    );
}

/// Issue 26 on the real Codex: the gateway is invisible to it. The same scripted
/// conversation runs once with the gateway off (Codex reaches the scripted API by name
/// through its proxy's allowlist, with the real key) and once through the gateway; Codex's
/// `exec --json` output is the same line for line once run-specific values are blanked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_codex_prints_the_same_with_and_without_the_gateway() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let mut outputs = Vec::new();
    for gateway_off in [true, false] {
        let net = TestNetwork::create(if gateway_off { "cxnogw" } else { "cxwithgw" });
        let api = ScriptedOpenAi::start(net.gateway, codex_fix_then_stop)
            .await
            .expect("scripted Responses API");
        let home = codex_home_with(
            &image,
            &net,
            &api,
            None,
            CodexKnobs {
                gateway_off,
                ..CodexKnobs::default()
            },
        );
        let id = home
            .enqueue("`add 2 3` prints -1; test.sh fails.", "Fix add()")
            .await;
        let out = home.run(&["spawn", "--task", &id]).await;
        let v = home.task(&id).await;
        assert!(out.status.success(), "spawn: {}\n{v:#}", output(&out));
        assert_eq!(v["task"]["state"], "LANDED", "{v:#}");
        assert!(api.credentials().iter().all(|c| c == OPENAI_KEY));
        let events = text(&home.run(&["logs", &id, "--json"]).await.stdout);
        assert_eq!(
            metered_records(&events).is_empty(),
            gateway_off,
            "gateway off: {gateway_off}\n{events}"
        );
        outputs.push(normalised(&home.transcript(&id, 1)));
    }
    let (direct, gated) = (&outputs[0], &outputs[1]);
    assert!(direct.len() >= 3, "{direct:#?}");
    let mut differences = Vec::new();
    for (n, (d, g)) in direct.iter().zip(gated).enumerate() {
        differ(&format!("line {}", n + 1), d, g, &mut differences);
    }
    assert!(
        differences.is_empty() && direct.len() == gated.len(),
        "{} vs {} lines; differences:\n{}",
        direct.len(),
        gated.len(),
        differences.join("\n")
    );
    println!(
        "real_codex_prints_the_same_with_and_without_the_gateway: {:?}",
        started.elapsed()
    );
}
