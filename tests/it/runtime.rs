//! The worker runtime against the REAL Docker engine and the offline test image
//! (images/test/): every fake scenario through `run_attempt` with the real adapters,
//! deadline / idle / cancel kills, hardening read back through inspect, secret scrubbing,
//! huge lines, leftover containers, `run_check`, `reattach`, and no container left behind.
//!
//! Without an engine: fails when `CI` is set, otherwise prints `SKIPPED: <why>`.

use crate::support;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use polyphony::agents::prompt::{PromptContext, PromptTemplate};
use polyphony::agents::scrub::Scrubber;
use polyphony::agents::{adapter_for, AgentAdapter};
use polyphony::domain::{
    AgentType, AttemptStatus, EnvVar, EventKind, EventStream, NetworkMode, ResourceLimits, RunSpec,
    VolumeMount,
};
use polyphony::orchestrator::execute::{
    reattach, run_attempt, run_check, AgentRun, AttemptExecution, EventSink, RunLimits, Scrub,
    TranscriptPaths, VecSink,
};
use polyphony::runtime::container_spec::{agent_spec, verify_spec, CREDENTIAL_STAGING_DIR};
use polyphony::runtime::{
    daemon_user, default_container_user, home_label, ContainerSpec, DockerRuntime, RuntimeError,
    WorkerRuntime, LABEL_HOME,
};
use support::docker::{engine, image};
use tokio::sync::watch;

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// One test's world: a temp home (its own `polyphony.home` label), a workspace, an id
/// prefix. Dropping it removes every container of the home, even after a panic.
struct World {
    rt: DockerRuntime,
    image: String,
    home: tempfile::TempDir,
    label: String,
    prefix: String,
}

impl World {
    async fn new(test: &str) -> Option<World> {
        let rt = engine().await?;
        let image = image(&rt).await;
        let home = tempfile::tempdir().expect("temp home");
        let label = home_label(home.path());
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let prefix = format!("rt-{test}-{}-{n}", std::process::id());
        Some(World {
            rt,
            image,
            home,
            label,
            prefix,
        })
    }

    fn workspace(&self, name: &str) -> PathBuf {
        let ws = self.home.path().join("ws").join(name);
        std::fs::create_dir_all(&ws).expect("workspace dir");
        std::fs::write(ws.join("calc.sh"), "echo $((a - b))\n").expect("seed file");
        ws
    }

    fn run_spec(&self, agent: AgentType, name: &str, attempt: u32) -> RunSpec {
        RunSpec {
            task_id: format!("{}/{name}-{}#{attempt}", self.prefix, agent.as_str()),
            attempt,
            agent: agent.as_str().into(),
            agent_type: agent,
            cli_command: polyphony::agents::descriptor(agent).command.into(),
            fallback: vec![],
            identity: "test".into(),
            workspace: self.workspace(&format!("{name}-{}-{attempt}", agent.as_str())),
            branch: "polyphony/test".into(),
            base_ref: None,
            image: self.image.clone(),
            model: None,
            max_turns: Some(10),
            args: Vec::new(),
            env_overlay: vec![],
            volume_mounts: vec![],
            deadline_seconds: 60,
            idle_timeout_seconds: 30,
            network: NetworkMode::Bridge,
            egress: Default::default(),
            limits: ResourceLimits::default(),
            verification: vec![],
            verify_image: self.image.clone(),
            rule: "test".into(),
        }
    }

    /// `run_attempt` of `cspec` with the defaults: [`LIMITS`], no transcript, the
    /// [`plain`] scrub, never cancelled, the system clock; its events in `sink`.
    async fn run_plain(
        &self,
        adapter: &dyn AgentAdapter,
        sink: &mut VecSink,
        cspec: &ContainerSpec,
    ) -> Result<AttemptExecution, RuntimeError> {
        run_attempt(
            AgentRun {
                runtime: &self.rt,
                adapter,
                sink,
                limits: LIMITS,
                transcript: None,
                scrub: &plain,
                cancel: no_cancel(),
                clock: polyphony::orchestrator::clock::system(),
                exited: None,
            },
            cspec,
        )
        .await
    }

    async fn assert_no_containers(&self) {
        let left = self
            .rt
            .list_by_labels(&[(LABEL_HOME.to_string(), self.label.clone())])
            .await
            .expect("list by label");
        assert!(left.is_empty(), "containers left behind: {left:?}");
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let rt = self.rt.clone();
        let label = self.label.clone();
        // Drop cannot await and may run inside a runtime: clean up on a thread of its own.
        let _ = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Runtime::new() else {
                return;
            };
            runtime.block_on(async move {
                if let Ok(found) = rt.list_by_labels(&[(LABEL_HOME.to_string(), label)]).await {
                    for c in found {
                        let _ = rt.remove(&c.id).await;
                    }
                }
            });
        })
        .join();
    }
}

fn prompt(directives: &str, attempt: u32) -> String {
    let body = format!("Fix the calculator.\n\n{directives}\n");
    PromptTemplate::builtin().render(&PromptContext {
        title: "Fix calc",
        body: &body,
        source_ref: "local:1",
        repo: "file:///repo",
        branch: "polyphony/test",
        attempt,
        ..Default::default()
    })
}

fn no_cancel() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    // Keep the sender alive for the test's duration: a closed channel is not a cancel.
    std::mem::forget(tx);
    rx
}

const LIMITS: RunLimits = RunLimits::new(Duration::from_secs(60), Duration::from_secs(30));

struct Ran {
    exec: AttemptExecution,
    sink: VecSink,
    spec: RunSpec,
    transcript: TranscriptPaths,
    wall: Duration,
}

#[allow(clippy::too_many_arguments)]
async fn run(
    w: &World,
    agent: AgentType,
    name: &str,
    attempt: u32,
    directives: &str,
    limits: RunLimits,
    scrub: Scrub<'_>,
    tweak: impl FnOnce(ContainerSpec) -> ContainerSpec,
) -> Ran {
    let spec = w.run_spec(agent, name, attempt);
    let adapter = adapter_for(agent);
    let inv = adapter.invocation(&spec, &prompt(directives, attempt));
    let cspec = tweak(agent_spec(&spec, &inv, &w.label, &default_container_user()));
    let transcript = TranscriptPaths::under(w.home.path(), &spec.task_id, attempt);
    let mut sink = VecSink::default();
    let started = Instant::now();
    let exec = run_attempt(
        AgentRun {
            runtime: &w.rt,
            adapter: adapter.as_ref(),
            sink: &mut sink,
            limits,
            transcript: Some(&transcript),
            scrub,
            cancel: no_cancel(),
            clock: polyphony::orchestrator::clock::system(),
            exited: None,
        },
        &cspec,
    )
    .await
    .unwrap_or_else(|e| panic!("{agent} {name}: run_attempt failed: {e}"));
    let wall = started.elapsed();
    println!(
        "{agent:<6} {name:<16} {:<9} exit={:?} turns={} events={} cost={:?} in {:?}",
        exec.status.as_str(),
        exec.exit_code,
        exec.outcome.turns,
        exec.events,
        exec.outcome.cost_usd,
        wall
    );
    Ran {
        exec,
        sink,
        spec,
        transcript,
        wall,
    }
}

fn plain(s: &str) -> String {
    s.to_string()
}

fn file(ws: &Path, name: &str) -> Option<String> {
    std::fs::read_to_string(ws.join(name)).ok()
}

/// Seqs 0..n without gaps or duplicates, stdout lines in the transcript file.
fn assert_events_consistent(r: &Ran) {
    let seqs: Vec<u64> = r.sink.events.iter().map(|e| e.seq).collect();
    let expected: Vec<u64> = (0..seqs.len() as u64).collect();
    assert_eq!(seqs, expected, "seqs must be 0..n in order");
    assert_eq!(r.exec.events, seqs.len() as u64);
    let stdout_events = r
        .sink
        .events
        .iter()
        .filter(|e| e.stream == EventStream::Stdout)
        .count();
    let transcript = std::fs::read_to_string(&r.transcript.stdout).expect("transcript file");
    assert_eq!(
        transcript.lines().count(),
        stdout_events,
        "one transcript line per stdout event"
    );
}

const AGENTS: [AgentType; AgentType::ALL.len()] = AgentType::ALL;

/// Usage figures the fakes print (images/test/README.md).
fn assert_success_figures(agent: AgentType, r: &Ran) {
    let o = &r.exec.outcome;
    assert!(o.completed && o.succeeded, "{agent}: {o:?}");
    let expected_turns = match agent {
        // Claude's num_turns, Kimi's and Gemini's assistant messages, Codex's turns,
        // OpenCode's steps (ls, the edit, the final answer).
        AgentType::Claude => 4,
        AgentType::Codex => 1,
        AgentType::Kimi => 4,
        AgentType::Gemini => 2,
        AgentType::OpenCode => 3,
    };
    assert_eq!(o.turns, expected_turns, "{agent} turns");
    match agent {
        AgentType::Claude | AgentType::OpenCode => {
            assert_eq!(o.cost_usd, Some(0.0421));
            assert_eq!(
                (o.tokens.input, o.tokens.output, o.tokens.cached_input),
                (6200, 340, 5000)
            );
        }
        AgentType::Codex | AgentType::Gemini => {
            assert_eq!(o.cost_usd, None);
            assert_eq!(
                (o.tokens.input, o.tokens.output, o.tokens.cached_input),
                (6200, 340, 5000)
            );
        }
        AgentType::Kimi => assert_eq!(o.cost_usd, None),
    }
    let final_message = o.final_message.as_deref().unwrap_or("");
    assert!(
        final_message.starts_with("Done."),
        "{agent} final: {final_message:?}"
    );
    let kinds: HashSet<EventKind> = r.sink.events.iter().map(|e| e.kind).collect();
    assert!(
        kinds.contains(&EventKind::Message),
        "{agent} kinds {kinds:?}"
    );
    assert!(
        kinds.contains(&EventKind::ToolCall),
        "{agent} kinds {kinds:?}"
    );
    // OpenCode reports a finished call as one `tool_use` line, input and output together.
    if agent != AgentType::OpenCode {
        assert!(
            kinds.contains(&EventKind::ToolResult),
            "{agent} kinds {kinds:?}"
        );
    }
    if agent != AgentType::Kimi {
        assert!(
            kinds.contains(&EventKind::Result),
            "{agent} kinds {kinds:?}"
        );
    }
}

macro_rules! world {
    ($name:expr) => {
        match World::new($name).await {
            Some(w) => w,
            None => return,
        }
    };
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn succeed_applies_the_sed_fix_for_every_agent() {
    let w = world!("succeed");
    let runs = futures_util::future::join_all(AGENTS.map(|a| {
        run(
            &w,
            a,
            "succeed",
            1,
            "polyphony-fake-sed: calc.sh s/a - b/a + b/",
            LIMITS,
            &plain,
            |s| s,
        )
    }))
    .await;
    for (agent, r) in AGENTS.into_iter().zip(&runs) {
        assert_eq!(
            r.exec.status,
            AttemptStatus::Succeeded,
            "{agent}: {:?}",
            r.exec
        );
        assert_eq!(r.exec.exit_code, Some(0));
        assert_eq!(
            file(&r.spec.workspace, "calc.sh").as_deref(),
            Some("echo $((a + b))\n")
        );
        assert_success_figures(agent, r);
        assert_events_consistent(r);
    }
    w.assert_no_containers().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_scenario_appends_a_note_and_prompt_goes_through_stdin_too() {
    let w = world!("default");
    // A prompt starting with `-` goes through stdin (the adapters' rule): both paths work.
    let runs = futures_util::future::join_all(
        AGENTS.map(|a| run(&w, a, "default", 1, "", LIMITS, &plain, |s| s)),
    )
    .await;
    for (agent, r) in AGENTS.into_iter().zip(&runs) {
        assert_eq!(r.exec.status, AttemptStatus::Succeeded, "{agent}");
        let note = file(&r.spec.workspace, "POLYPHONY_FAKE.md").unwrap_or_default();
        assert!(
            note.contains(&format!("fake {agent}, attempt 1: succeed")),
            "{note}"
        );
    }
    let spec = w.run_spec(AgentType::Claude, "stdin", 1);
    let adapter = adapter_for(AgentType::Claude);
    let long = format!(
        "{}\npolyphony-fake-sed: calc.sh s/a - b/a * b/\n",
        "x".repeat(200_000)
    );
    let inv = adapter.invocation(&spec, &long);
    assert!(inv.stdin.is_some(), "a 200 KB prompt goes through stdin");
    let cspec = agent_spec(&spec, &inv, &w.label, &default_container_user());
    let mut sink = VecSink::default();
    let exec = w
        .run_plain(adapter.as_ref(), &mut sink, &cspec)
        .await
        .expect("stdin run");
    assert_eq!(exec.status, AttemptStatus::Succeeded);
    assert_eq!(
        file(&spec.workspace, "calc.sh").as_deref(),
        Some("echo $((a * b))\n")
    );
    w.assert_no_containers().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workspace_scenarios_fix_on_retry_fail_tests_no_change_touch_protected() {
    let w = world!("ws");
    let sed = "polyphony-fake-sed: calc.sh s/a - b/a + b/";
    for agent in AGENTS {
        let first = run(
            &w,
            agent,
            "retry",
            1,
            &format!("polyphony-fake: fix-on-retry\n{sed}"),
            LIMITS,
            &plain,
            |s| s,
        )
        .await;
        assert_eq!(first.exec.status, AttemptStatus::Succeeded);
        assert_eq!(
            file(&first.spec.workspace, "calc.sh").as_deref(),
            Some("echo $((a - b))\n")
        );
        assert!(file(&first.spec.workspace, "POLYPHONY_FAKE.md").is_some());
        let second = run(
            &w,
            agent,
            "retry",
            2,
            &format!("polyphony-fake: fix-on-retry\n{sed}"),
            LIMITS,
            &plain,
            |s| s,
        )
        .await;
        assert_eq!(second.exec.status, AttemptStatus::Succeeded);
        assert_eq!(
            file(&second.spec.workspace, "calc.sh").as_deref(),
            Some("echo $((a + b))\n")
        );

        let r = run(
            &w,
            agent,
            "fail-tests",
            1,
            &format!("polyphony-fake: fail-tests\n{sed}"),
            LIMITS,
            &plain,
            |s| s,
        )
        .await;
        assert_eq!(
            r.exec.status,
            AttemptStatus::Succeeded,
            "the agent claims success"
        );
        assert_eq!(
            file(&r.spec.workspace, "calc.sh").as_deref(),
            Some("echo $((a - b))\n")
        );
        assert!(file(&r.spec.workspace, "POLYPHONY_FAKE.md").is_some());

        let r = run(
            &w,
            agent,
            "no-change",
            1,
            "polyphony-fake: no-change",
            LIMITS,
            &plain,
            |s| s,
        )
        .await;
        assert_eq!(r.exec.status, AttemptStatus::Succeeded);
        let entries: Vec<_> = std::fs::read_dir(&r.spec.workspace).unwrap().collect();
        assert_eq!(entries.len(), 1, "only calc.sh");

        let r = run(
            &w,
            agent,
            "protected",
            1,
            "polyphony-fake: touch-protected",
            LIMITS,
            &plain,
            |s| s,
        )
        .await;
        assert_eq!(r.exec.status, AttemptStatus::Succeeded);
        assert!(file(&r.spec.workspace, ".github/workflows/ci.yml").is_some());
    }
    // Agent-specific directives win over the general one.
    let r = run(
        &w,
        AgentType::Codex,
        "specific",
        1,
        "polyphony-fake: succeed\npolyphony-fake[codex]: quota",
        LIMITS,
        &plain,
        |s| s,
    )
    .await;
    assert_eq!(r.exec.status, AttemptStatus::Quota);
    let r = run(
        &w,
        AgentType::Claude,
        "specific",
        1,
        "polyphony-fake: quota\npolyphony-fake[claude]: succeed",
        LIMITS,
        &plain,
        |s| s,
    )
    .await;
    assert_eq!(r.exec.status, AttemptStatus::Succeeded);
    w.assert_no_containers().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_garbage_crash_for_every_agent() {
    let w = world!("qgc");
    for agent in AGENTS {
        let r = run(
            &w,
            agent,
            "quota",
            1,
            "polyphony-fake: quota",
            LIMITS,
            &plain,
            |s| s,
        )
        .await;
        assert_eq!(r.exec.status, AttemptStatus::Quota, "{agent}: {:?}", r.exec);
        assert_eq!(r.exec.exit_code, Some(1));
        assert!(r.exec.outcome.quota.is_some());
        assert!(r
            .exec
            .reason
            .as_deref()
            .unwrap_or("")
            .starts_with("usage limit"));
        assert_events_consistent(&r);

        let r = run(
            &w,
            agent,
            "garbage",
            1,
            "polyphony-fake: garbage",
            LIMITS,
            &plain,
            |s| s,
        )
        .await;
        assert_eq!(
            r.exec.status,
            AttemptStatus::Succeeded,
            "{agent}: {:?}",
            r.exec
        );
        let unknown = r
            .sink
            .events
            .iter()
            .filter(|e| e.kind == EventKind::Unknown)
            .count();
        assert!(
            unknown >= 3,
            "{agent}: non-JSON lines are unknown events ({unknown})"
        );
        assert_success_figures(agent, &r);

        let r = run(
            &w,
            agent,
            "crash",
            1,
            "polyphony-fake: crash",
            LIMITS,
            &plain,
            |s| s,
        )
        .await;
        assert_eq!(r.exec.status, AttemptStatus::Crash, "{agent}: {:?}", r.exec);
        assert_eq!(r.exec.exit_code, Some(137));
        assert!(r.exec.reason.as_deref().unwrap_or("").contains("signal 9"));
        assert!(!r.sink.events.is_empty(), "the partial stream was recorded");
    }
    w.assert_no_containers().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_kill_lands_within_five_seconds() {
    let w = world!("deadline");
    let limits = RunLimits::new(Duration::from_secs(3), Duration::from_secs(30));
    let r = run(
        &w,
        AgentType::Claude,
        "hang",
        1,
        "polyphony-fake: hang",
        limits,
        &plain,
        |s| s,
    )
    .await;
    assert_eq!(r.exec.status, AttemptStatus::Timeout);
    assert!(
        r.wall < limits.deadline + Duration::from_secs(5),
        "took {:?}",
        r.wall
    );
    println!(
        "deadline kill latency: {:?} past the 3 s deadline",
        r.wall.saturating_sub(limits.deadline)
    );
    assert!(
        r.sink.events.len() >= 2,
        "heartbeats were streamed while it ran"
    );
    w.assert_no_containers().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_kill_fires_and_cancel_kills() {
    let w = world!("idle");
    let limits = RunLimits::new(Duration::from_secs(60), Duration::from_secs(2));
    let r = run(
        &w,
        AgentType::Codex,
        "silent",
        1,
        "polyphony-fake: silent",
        limits,
        &plain,
        |s| s,
    )
    .await;
    assert_eq!(r.exec.status, AttemptStatus::Stalled, "{:?}", r.exec);
    assert!(r.wall < Duration::from_secs(10), "took {:?}", r.wall);

    // Heartbeats keep an attempt alive past the idle timeout; cancel stops it.
    let spec = w.run_spec(AgentType::Gemini, "cancel", 1);
    let adapter = adapter_for(AgentType::Gemini);
    let inv = adapter.invocation(&spec, &prompt("polyphony-fake: hang", 1));
    let cspec = agent_spec(&spec, &inv, &w.label, &default_container_user());
    let (tx, rx) = watch::channel(false);
    let mut sink = VecSink::default();
    let canceller = async {
        tokio::time::sleep(Duration::from_secs(4)).await;
        let _ = tx.send(true);
    };
    let (exec, ()) = tokio::join!(
        run_attempt(
            AgentRun {
                runtime: &w.rt,
                adapter: adapter.as_ref(),
                sink: &mut sink,
                limits,
                transcript: None,
                scrub: &plain,
                cancel: rx,
                clock: polyphony::orchestrator::clock::system(),
                exited: None,
            },
            &cspec,
        ),
        canceller
    );
    let exec = exec.expect("cancel run");
    assert_eq!(exec.status, AttemptStatus::Cancelled);
    assert!(
        exec.events >= 3,
        "ran past the 2 s idle timeout on heartbeats"
    );
    w.assert_no_containers().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echoed_secret_is_stored_only_as_stars() {
    let w = world!("secret");
    let host_var = format!("POLYPHONY_TEST_SECRET_{}", std::process::id());
    let secret = format!("s3cr3t-{}-value", std::process::id());
    // The overlay reads host variables by design; a unique name keeps this test isolated.
    std::env::set_var(&host_var, &secret);
    let scrubber = Scrubber::new([secret.as_str()]);
    let scrub = &scrubber;
    for agent in AGENTS {
        let r = run(
            &w,
            agent,
            "secret",
            1,
            "polyphony-fake: echo-secret\npolyphony-fake-echo: FAKE_API_KEY",
            LIMITS,
            scrub,
            |s| {
                s.env_from_host(EnvVar {
                    name: "FAKE_API_KEY".into(),
                    from_host: host_var.clone(),
                })
            },
        )
        .await;
        assert_eq!(r.exec.status, AttemptStatus::Succeeded);
        let stored = serde_json::to_string(&r.sink.events).unwrap();
        assert!(
            !stored.contains(&secret),
            "{agent}: secret reached the sink"
        );
        assert!(
            stored.contains("The value of FAKE_API_KEY is ***"),
            "{agent}: {stored}"
        );
        let transcript = std::fs::read_to_string(&r.transcript.stdout).unwrap();
        assert!(!transcript.contains(&secret) && transcript.contains("***"));
        assert!(!format!("{:?}", r.exec).contains(&secret));
    }
    // A missing host variable is a clear error naming it, not an empty secret.
    let spec = w.run_spec(AgentType::Claude, "missing", 1);
    let cspec = agent_spec(
        &spec,
        &adapter_for(AgentType::Claude).invocation(&spec, "hi"),
        &w.label,
        &default_container_user(),
    )
    .env_from_host(EnvVar {
        name: "K".into(),
        from_host: "POLYPHONY_TEST_UNSET_VARIABLE".into(),
    });
    match w.rt.create(&cspec).await {
        Err(RuntimeError::MissingHostEnv { host_var, .. }) => {
            assert_eq!(host_var, "POLYPHONY_TEST_UNSET_VARIABLE")
        }
        other => panic!("expected MissingHostEnv, got {other:?}"),
    }
    w.assert_no_containers().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_line_is_cut_and_recorded() {
    let w = world!("huge");
    for agent in [AgentType::Claude, AgentType::Gemini] {
        let r = run(
            &w,
            agent,
            "huge",
            1,
            "polyphony-fake: huge-line",
            LIMITS,
            &plain,
            |s| s,
        )
        .await;
        assert_eq!(
            r.exec.status,
            AttemptStatus::Succeeded,
            "{agent}: {:?}",
            r.exec
        );
        assert_eq!(r.exec.cut_lines, 1);
        let cut: Vec<_> = r
            .sink
            .events
            .iter()
            .filter(|e| e.data["cut"] == true)
            .collect();
        assert_eq!(cut.len(), 1);
        let bytes = cut[0].data["bytes"].as_u64().unwrap();
        assert!(bytes > 1_572_864, "original size recorded: {bytes}");
        assert_eq!(cut[0].data["raw"].as_str().unwrap().len(), 1024 * 1024);
        assert_events_consistent(&r);
    }
    w.assert_no_containers().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hardening_user_and_credential_staging() {
    let w = world!("harden");
    let mut spec = w.run_spec(AgentType::Claude, "harden", 1);
    // A non-root user owning the workspace, as on a developer machine.
    spec.limits.user = Some("1000:1000".into());
    let creds = w.home.path().join("creds-claude");
    std::fs::create_dir_all(&creds).unwrap();
    std::fs::write(creds.join(".credentials.json"), "{\"token\":\"t0\"}").unwrap();
    spec.volume_mounts.push(VolumeMount {
        host_path: creds.clone(),
        container_path: format!("{CREDENTIAL_STAGING_DIR}/.claude"),
        read_only: true,
    });
    // As root, the daemon's files stay root's 0600: the runtime shares the workspace with
    // the container's group and stages a group-readable copy of the credentials.
    std::fs::set_permissions(
        creds.join(".credentials.json"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let adapter = adapter_for(AgentType::Claude);
    let inv = adapter.invocation(
        &spec,
        &prompt("polyphony-fake-sed: calc.sh s/a - b/a + b/", 1),
    );
    let cspec = agent_spec(&spec, &inv, &w.label, &default_container_user());
    let id = w.rt.create(&cspec).await.expect("create");
    let info = w.rt.inspect(&id).await.expect("inspect");
    assert_eq!(info.cap_drop, vec!["ALL".to_string()]);
    assert!(
        info.security_opt.iter().any(|o| o == "no-new-privileges"),
        "{:?}",
        info.security_opt
    );
    assert_eq!(info.pids_limit, Some(512));
    assert_eq!(info.memory_bytes, Some(4 * 1024 * 1024 * 1024));
    assert_eq!(info.nano_cpus, Some(2_000_000_000));
    assert_eq!(info.init, Some(true));
    assert_eq!(info.user.as_deref(), Some("1000:1000"));
    assert_eq!(info.network_mode.as_deref(), Some("bridge"));
    assert!(info.readonly_rootfs, "root filesystem is read-only");
    let ulimit = |name: &str| {
        info.ulimits
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, soft, hard)| (*soft, *hard))
    };
    assert_eq!(ulimit("core"), Some((0, 0)));
    assert_eq!(ulimit("nofile"), Some((8192, 8192)));
    assert_eq!(ulimit("nproc"), Some((8192, 8192)));
    assert_eq!(ulimit("fsize"), Some((1 << 31, 1 << 31)));
    assert_eq!(info.log_config["type"], "json-file");
    assert_eq!(info.log_config["max-size"], "128m");
    assert!(
        info.tmpfs["/home/worker"].contains("mode=0700,uid=1000,gid=1000"),
        "{:?}",
        info.tmpfs
    );
    assert!(info.tmpfs.contains_key("/tmp"));
    // Only the workspace and the staging copy are mounted; never the login directory.
    let creds_str = creds.to_string_lossy().into_owned();
    assert!(
        info.mounts
            .iter()
            .all(|(_, src)| !src.starts_with(&creds_str)),
        "{:?}",
        info.mounts
    );
    assert_eq!(info.labels["polyphony.role"], "agent");
    assert_eq!(info.labels["polyphony.attempt"], "1");
    assert_eq!(info.labels["polyphony.task"], spec.task_id);
    w.rt.remove(&id).await.unwrap();

    {
        let mut sink = VecSink::default();
        let exec = w
            .run_plain(adapter.as_ref(), &mut sink, &cspec)
            .await
            .unwrap();
        assert_eq!(exec.status, AttemptStatus::Succeeded, "{exec:?}");
        assert_eq!(
            file(&spec.workspace, "calc.sh").as_deref(),
            Some("echo $((a + b))\n")
        );
    }

    // The entrypoint copies staged credentials into a writable per-attempt HOME; the
    // host's file is never written.
    let check = ContainerSpec::new(
        format!("polyphony-{}-stage", w.prefix),
        w.image.clone(),
        vec![
            "/bin/sh".into(),
            "-c".into(),
            "cat $HOME/.claude/.credentials.json && echo rewritten > $HOME/.claude/.credentials.json && cat $HOME/.claude/.credentials.json && id -u && (echo x 2>/dev/null > /polyphony/credentials/.claude/x && echo WROTE-STAGING || echo staging-read-only) && (echo x 2>/dev/null > /etc/x && echo WROTE-ROOTFS || echo rootfs-read-only) && echo ok > /workspace/by-container && echo ok > /tmp/t".into(),
        ],
    )
    .labels_for(&spec.task_id, 1, &w.label, polyphony::runtime::Role::Verify)
    .workspace(spec.workspace.clone())
    .mount(spec.volume_mounts[0].clone())
    .network(NetworkMode::None)
    .limits(spec.limits.clone(), &default_container_user());
    let out = run_check(
        &w.rt,
        &check,
        Duration::from_secs(30),
        &plain,
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    assert_eq!(out.exit_code, Some(0), "{}", out.output_tail);
    assert!(
        out.output_tail.contains("{\"token\":\"t0\"}"),
        "{}",
        out.output_tail
    );
    assert!(
        out.output_tail
            .contains("rewritten\n1000\nstaging-read-only\nrootfs-read-only"),
        "{}",
        out.output_tail
    );
    assert_eq!(
        std::fs::read_to_string(creds.join(".credentials.json")).unwrap(),
        "{\"token\":\"t0\"}"
    );
    w.assert_no_containers().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leftover_container_is_replaced_and_foreign_one_left_alone() {
    let w = world!("leftover");
    let spec = w.run_spec(AgentType::Codex, "leftover", 1);
    let adapter = adapter_for(AgentType::Codex);
    let inv = adapter.invocation(&spec, &prompt("", 1));
    let cspec = agent_spec(&spec, &inv, &w.label, &default_container_user());
    // A crash left a created (never collected) container with the same name.
    let stale = w.rt.create(&cspec).await.expect("stale create");
    let mut sink = VecSink::default();
    let exec = w
        .run_plain(adapter.as_ref(), &mut sink, &cspec)
        .await
        .expect("run over a leftover");
    assert_eq!(exec.status, AttemptStatus::Succeeded);
    assert_ne!(exec.container_id, stale);
    assert!(matches!(
        w.rt.inspect(&stale).await,
        Err(RuntimeError::NotFound(_))
    ));

    // The same name owned by another home (two homes on one engine both running
    // `local-1`) is not ours to remove: ours is created under the name plus this home's
    // label, and theirs survives.
    let mut foreign = cspec.clone();
    foreign
        .labels
        .insert(LABEL_HOME.into(), format!("{}-other", w.label));
    let other_id = w.rt.create(&foreign).await.expect("foreign create");
    let ours =
        w.rt.create(&cspec)
            .await
            .expect("created beside the foreign one");
    assert_ne!(ours, other_id);
    let info = w.rt.inspect(&ours).await.expect("inspect ours");
    assert_eq!(
        info.labels.get(LABEL_HOME).map(String::as_str),
        Some(w.label.as_str())
    );
    assert!(w.rt.inspect(&other_id).await.is_ok(), "theirs survives");
    // A second create replaces our own leftover under the variant name, still leaving
    // theirs alone.
    let again = w.rt.create(&cspec).await.expect("replaces our leftover");
    assert_ne!(again, ours);
    assert!(matches!(
        w.rt.inspect(&ours).await,
        Err(RuntimeError::NotFound(_))
    ));
    assert!(
        w.rt.inspect(&other_id).await.is_ok(),
        "theirs still survives"
    );
    w.rt.remove(&again).await.unwrap();
    w.rt.remove(&other_id).await.unwrap();
    w.assert_no_containers().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_check_pass_fail_timeout_and_no_network() {
    let w = world!("check");
    let spec = w.run_spec(AgentType::Claude, "check", 1);
    let user = daemon_user();
    let fail = verify_spec(
        &spec,
        1,
        "echo out; echo SECRETX err >&2; exit 3",
        &w.label,
        &user,
    );
    let scrub = |l: &str| l.replace("SECRETX", "***");
    let r = run_check(
        &w.rt,
        &fail,
        Duration::from_secs(30),
        &scrub,
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    assert_eq!(r.exit_code, Some(3));
    assert!(!r.timed_out);
    assert!(
        r.output_tail.contains("out") && r.output_tail.contains("*** err"),
        "{}",
        r.output_tail
    );
    println!("run_check (failing) took {:?}", r.duration);

    let pass = verify_spec(
        &spec,
        2,
        "test -f calc.sh && grep -q 'a - b' calc.sh",
        &w.label,
        &user,
    );
    let r = run_check(
        &w.rt,
        &pass,
        Duration::from_secs(30),
        &plain,
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    assert_eq!(r.exit_code, Some(0));

    let net = verify_spec(&spec, 3, "ls /sys/class/net", &w.label, &user);
    let r = run_check(
        &w.rt,
        &net,
        Duration::from_secs(30),
        &plain,
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    assert_eq!(r.output_tail.trim(), "lo", "verification has no network");

    let slow = verify_spec(&spec, 4, "sleep 30", &w.label, &user);
    let r = run_check(
        &w.rt,
        &slow,
        Duration::from_secs(1),
        &plain,
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    assert!(r.timed_out);
    assert!(r.duration < Duration::from_secs(8), "{:?}", r.duration);

    let long = verify_spec(
        &spec,
        5,
        "i=0; while [ $i -lt 2000 ]; do echo line-$i; i=$((i+1)); done",
        &w.label,
        &user,
    );
    let r = run_check(
        &w.rt,
        &long,
        Duration::from_secs(30),
        &plain,
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    assert!(r.output_tail.len() <= 4096);
    assert!(r.output_tail.ends_with("line-1999\n"));
    w.assert_no_containers().await;
}

/// A [`VecSink`] that wakes `stored` once it holds `after` events.
struct SignalSink {
    inner: VecSink,
    after: usize,
    stored: std::sync::Arc<tokio::sync::Notify>,
}

impl EventSink for SignalSink {
    fn record(
        &mut self,
        events: &[polyphony::domain::TaskEvent],
        live: &polyphony::agents::AgentOutcome,
    ) -> Result<(), String> {
        self.inner.record(events, live)?;
        if self.inner.events.len() >= self.after {
            // A stored permit: the waiter wakes even if it polls later.
            self.stored.notify_one();
        }
        Ok(())
    }

    fn container_created(&mut self, container_id: &str) {
        self.inner.container_created(container_id);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reattach_resumes_without_duplicates() {
    let w = world!("reattach");
    let spec = w.run_spec(AgentType::Claude, "reattach", 1);
    let adapter = adapter_for(AgentType::Claude);
    let inv = adapter.invocation(
        &spec,
        &prompt("polyphony-fake: slow\npolyphony-fake-sleep: 5", 1),
    );
    let cspec = agent_spec(&spec, &inv, &w.label, &default_container_user());
    let transcript = TranscriptPaths::under(w.home.path(), &spec.task_id, 1);
    // The daemon "dies" once two events are stored (the init and the first of five
    // progress lines a second apart; not at a fixed time, which a loaded engine's slow
    // start overran): the follower is dropped, the container keeps running.
    let stored = std::sync::Arc::new(tokio::sync::Notify::new());
    let mut signal = SignalSink {
        inner: VecSink::default(),
        after: 2,
        stored: stored.clone(),
    };
    let first = tokio::select! {
        r = run_attempt(
            AgentRun {
                runtime: &w.rt,
                adapter: adapter.as_ref(),
                sink: &mut signal,
                limits: LIMITS,
                transcript: Some(&transcript),
                scrub: &plain,
                cancel: no_cancel(),
                clock: polyphony::orchestrator::clock::system(),
                exited: None,
            },
            &cspec,
        ) => Some(r),
        () = stored.notified() => None,
        () = tokio::time::sleep(Duration::from_secs(60)) => panic!("no two events in 60 s"),
    };
    assert!(
        first.is_none(),
        "the slow agent was still running: {first:?}"
    );
    let mut sink = signal.inner;
    let id = sink.container_id.clone().expect("container id reported");
    let recorded = sink.events.len() as u64;
    assert!(
        recorded >= 2,
        "some events were stored before the crash ({recorded})"
    );
    let exec = reattach(
        AgentRun {
            runtime: &w.rt,
            adapter: adapter.as_ref(),
            sink: &mut sink,
            limits: LIMITS,
            transcript: Some(&transcript),
            scrub: &plain,
            cancel: no_cancel(),
            clock: polyphony::orchestrator::clock::system(),
            exited: None,
        },
        &id,
        recorded,
    )
    .await
    .expect("reattach");
    assert_eq!(exec.status, AttemptStatus::Succeeded, "{exec:?}");
    assert_eq!(exec.outcome.turns, 5 + 4, "turns count the whole stream");
    assert_eq!(exec.outcome.cost_usd, Some(0.0421));
    let seqs: Vec<u64> = sink.events.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (0..seqs.len() as u64).collect::<Vec<_>>(),
        "no gap, no duplicate"
    );
    assert_eq!(exec.next_seq, seqs.len() as u64);
    w.assert_no_containers().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oom_kill_is_a_crash_with_the_reason() {
    let w = world!("oom");
    let mut spec = w.run_spec(AgentType::Claude, "oom", 1);
    spec.limits.memory_bytes = 16 * 1024 * 1024;
    let inv = polyphony::agents::Invocation {
        argv: vec![
            "/bin/sh".into(),
            "-c".into(),
            "echo '{\"type\":\"system\",\"subtype\":\"init\"}'; x=$(head -c 64000000 /dev/zero | tr '\\0' x); echo ${#x}".into(),
        ],
        stdin: None,
    };
    let cspec = agent_spec(&spec, &inv, &w.label, &default_container_user());
    let adapter = adapter_for(AgentType::Claude);
    let mut sink = VecSink::default();
    let exec = w
        .run_plain(adapter.as_ref(), &mut sink, &cspec)
        .await
        .expect("oom run");
    assert_eq!(exec.status, AttemptStatus::Crash, "{exec:?}");
    assert!(exec.oom_killed);
    assert!(
        exec.reason
            .as_deref()
            .unwrap_or("")
            .contains("out of memory"),
        "{exec:?}"
    );
    w.assert_no_containers().await;
}

// ---------------------------------------------------------------- hostile agents (issue 11)

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_final_report_is_stored_but_never_counted() {
    let w = world!("forge");
    for agent in [AgentType::Claude, AgentType::Codex, AgentType::Gemini] {
        let r = run(
            &w,
            agent,
            "forge",
            1,
            "polyphony-fake: forge-result",
            LIMITS,
            &plain,
            |s| s,
        )
        .await;
        assert_eq!(
            r.exec.status,
            AttemptStatus::Succeeded,
            "{agent}: {:?}",
            r.exec
        );
        // The real figures, not the forged 1,000,000 dollars and 999 turns.
        assert_success_figures(agent, &r);
        assert_eq!(r.exec.lines_after_result, 1, "{agent}");
        assert!(
            r.exec
                .warnings
                .iter()
                .any(|w| w.contains("after the CLI's final report")),
            "{agent}: {:?}",
            r.exec.warnings
        );
        let reports = r
            .sink
            .events
            .iter()
            .filter(|e| e.kind == EventKind::Result)
            .count();
        assert_eq!(reports, 2, "{agent}: the forged report is on record too");
    }
    w.assert_no_containers().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reported_cost_is_clamped_to_a_sane_range() {
    let w = world!("cost");
    let limits = RunLimits {
        max_cost_usd: 25.0,
        ..LIMITS
    };
    for (n, (reported, counted)) in [("-5", 0.0), ("1000000", 25.0)].into_iter().enumerate() {
        let r = run(
            &w,
            AgentType::Claude,
            &format!("cost{n}"),
            1,
            &format!("polyphony-fake: forge-cost\npolyphony-fake-cost: {reported}"),
            limits,
            &plain,
            |s| s,
        )
        .await;
        assert_eq!(r.exec.status, AttemptStatus::Succeeded, "{reported}");
        assert_eq!(r.exec.outcome.cost_usd, Some(counted), "{reported}");
        assert!(
            r.exec
                .warnings
                .iter()
                .any(|w| w.contains("max_cost_usd_per_attempt")),
            "{reported}: {:?}",
            r.exec.warnings
        );
    }
    w.assert_no_containers().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_flood_is_capped_and_the_container_killed() {
    let w = world!("flood");
    let limits = RunLimits {
        max_output_bytes: 1024 * 1024,
        ..LIMITS
    };
    let r = run(
        &w,
        AgentType::Codex,
        "flood",
        1,
        "polyphony-fake: flood",
        limits,
        &plain,
        |s| s,
    )
    .await;
    assert_eq!(r.exec.status, AttemptStatus::Failed, "{:?}", r.exec);
    let reason = r.exec.reason.clone().unwrap_or_default();
    assert!(reason.contains("container.max_output"), "{reason}");
    let stored: u64 = std::fs::metadata(&r.transcript.stdout).unwrap().len();
    assert!(stored <= 1024 * 1024, "transcript holds {stored} bytes");
    assert!(r.wall < Duration::from_secs(30), "killed in {:?}", r.wall);
    assert_events_consistent(&r);
    w.assert_no_containers().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workspace_over_its_cap_fails_the_attempt() {
    let w = world!("fill");
    let limits = RunLimits {
        max_workspace_bytes: Some(8 * 1024 * 1024),
        ..LIMITS
    };
    let r = run(
        &w,
        AgentType::Claude,
        "fill",
        1,
        "polyphony-fake: fill-workspace\npolyphony-fake-fill-mb: 16",
        limits,
        &plain,
        |s| s,
    )
    .await;
    assert_eq!(r.exec.status, AttemptStatus::Failed, "{:?}", r.exec);
    let reason = r.exec.reason.clone().unwrap_or_default();
    assert!(reason.contains("container.max_workspace_size"), "{reason}");
    assert!(r.wall < Duration::from_secs(30), "killed in {:?}", r.wall);
    w.assert_no_containers().await;
}

/// The real engine, with a fault or a probe a test asks for.
struct Intercepted {
    inner: DockerRuntime,
    /// The log stream breaks after its first chunk.
    break_logs: bool,
    /// Called at each removal, before it.
    on_remove: Option<Box<dyn Fn() + Send + Sync>>,
}

impl Intercepted {
    fn new(inner: DockerRuntime) -> Intercepted {
        Intercepted {
            inner,
            break_logs: false,
            on_remove: None,
        }
    }
}

impl WorkerRuntime for Intercepted {
    fn create<'a>(
        &'a self,
        spec: &'a ContainerSpec,
    ) -> futures_util::future::BoxFuture<'a, Result<String, RuntimeError>> {
        self.inner.create(spec)
    }
    fn start<'a>(
        &'a self,
        id: &'a str,
    ) -> futures_util::future::BoxFuture<'a, Result<(), RuntimeError>> {
        self.inner.start(id)
    }
    fn logs<'a>(
        &'a self,
        id: &'a str,
        since: Option<i64>,
    ) -> futures_util::stream::BoxStream<'a, Result<polyphony::runtime::LogChunk, RuntimeError>>
    {
        use futures_util::StreamExt;
        if !self.break_logs {
            return self.inner.logs(id, since);
        }
        self.inner
            .logs(id, since)
            .take(1)
            .chain(futures_util::stream::once(async {
                Err(RuntimeError::Engine {
                    op: "logs",
                    message: "connection reset (injected)".into(),
                })
            }))
            .boxed()
    }
    fn wait<'a>(
        &'a self,
        id: &'a str,
    ) -> futures_util::future::BoxFuture<'a, Result<i64, RuntimeError>> {
        self.inner.wait(id)
    }
    fn kill<'a>(
        &'a self,
        id: &'a str,
    ) -> futures_util::future::BoxFuture<'a, Result<(), RuntimeError>> {
        self.inner.kill(id)
    }
    fn remove<'a>(
        &'a self,
        id: &'a str,
    ) -> futures_util::future::BoxFuture<'a, Result<(), RuntimeError>> {
        if let Some(hook) = &self.on_remove {
            hook();
        }
        self.inner.remove(id)
    }
    fn list_by_labels<'a>(
        &'a self,
        labels: &'a [(String, String)],
    ) -> futures_util::future::BoxFuture<
        'a,
        Result<Vec<polyphony::runtime::ContainerSummary>, RuntimeError>,
    > {
        self.inner.list_by_labels(labels)
    }
    fn inspect<'a>(
        &'a self,
        id: &'a str,
    ) -> futures_util::future::BoxFuture<'a, Result<polyphony::runtime::ContainerInfo, RuntimeError>>
    {
        self.inner.inspect(id)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_log_stream_leaves_no_container_behind() {
    let w = world!("broken");
    let spec = w.run_spec(AgentType::Claude, "broken", 1);
    let adapter = adapter_for(AgentType::Claude);
    let inv = adapter.invocation(&spec, &prompt("polyphony-fake: hang", 1));
    let cspec = agent_spec(&spec, &inv, &w.label, &default_container_user());
    let rt = Intercepted {
        break_logs: true,
        ..Intercepted::new(w.rt.clone())
    };
    let mut sink = VecSink::default();
    let err = run_attempt(
        AgentRun {
            runtime: &rt,
            adapter: adapter.as_ref(),
            sink: &mut sink,
            limits: LIMITS,
            transcript: None,
            scrub: &plain,
            cancel: no_cancel(),
            clock: polyphony::orchestrator::clock::system(),
            exited: None,
        },
        &cspec,
    )
    .await
    .expect_err("the stream broke");
    assert!(err.to_string().contains("injected"), "{err}");
    // Killed and removed at once, not left running with no deadline.
    w.assert_no_containers().await;
}

/// The attempt learns that the agent's output ended before the agent's container is
/// removed, so its egress proxy's stop runs beside that removal (docs/benchmarks.md,
/// "Egress", 4ac7686).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_end_of_the_agents_output_is_told_before_its_container_is_removed() {
    let w = world!("exited");
    let spec = w.run_spec(AgentType::Claude, "exited", 1);
    let adapter = adapter_for(AgentType::Claude);
    let inv = adapter.invocation(&spec, &prompt("polyphony-fake: succeed", 1));
    let cspec = agent_spec(&spec, &inv, &w.label, &default_container_user());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    // At the first removal: whether the attempt had been told already (`try_recv`, so no
    // timing is involved).
    let exited = std::sync::Mutex::new(Some(rx));
    let told = std::sync::Arc::new(std::sync::Mutex::new(None::<bool>));
    let noted = told.clone();
    let rt = Intercepted {
        on_remove: Some(Box::new(move || {
            if let Some(mut rx) = exited.lock().unwrap().take() {
                *noted.lock().unwrap() = Some(rx.try_recv().is_ok());
            }
        })),
        ..Intercepted::new(w.rt.clone())
    };
    let mut sink = VecSink::default();
    let exec = run_attempt(
        AgentRun {
            runtime: &rt,
            adapter: adapter.as_ref(),
            sink: &mut sink,
            limits: LIMITS,
            transcript: None,
            scrub: &plain,
            cancel: no_cancel(),
            clock: polyphony::orchestrator::clock::system(),
            exited: Some(tx),
        },
        &cspec,
    )
    .await
    .expect("the run");
    assert_eq!(exec.status, AttemptStatus::Succeeded, "{:?}", exec.reason);
    assert_eq!(
        *told.lock().unwrap(),
        Some(true),
        "the container was removed before the attempt was told its output ended (None: never removed)"
    );
    w.assert_no_containers().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_runs_unprivileged_and_sees_only_credential_files() {
    let w = world!("creds");
    let login_home = w.home.path().join("operator");
    let claude = login_home.join(".claude");
    std::fs::create_dir_all(claude.join("projects")).unwrap();
    std::fs::write(claude.join(".credentials.json"), "{\"claudeAiOauth\":{}}").unwrap();
    std::fs::write(claude.join("projects/history.jsonl"), "old conversation").unwrap();
    std::fs::write(login_home.join(".claude.json"), "{\"oauthAccount\":{}}").unwrap();
    for f in [
        claude.join(".credentials.json"),
        login_home.join(".claude.json"),
    ] {
        std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    }
    let ident = polyphony::domain::Identity {
        name: "op".into(),
        volumes: [("claude".to_string(), claude.clone())].into(),
        api_keys: Default::default(),
        github_token_env: None,
        cost_ceiling_usd_per_day: None,
        whole_directory: vec![],
    };
    let mut spec = w.run_spec(AgentType::Claude, "creds", 1);
    spec.volume_mounts = polyphony::identity::broker(&ident, AgentType::Claude)
        .unwrap()
        .volume_mounts;
    let adapter = adapter_for(AgentType::Claude);
    let inv = adapter.invocation(&spec, &prompt("polyphony-fake: show-home", 1));
    let user = default_container_user();
    let cspec = agent_spec(&spec, &inv, &w.label, &user);
    let mut sink = VecSink::default();
    let exec = w
        .run_plain(adapter.as_ref(), &mut sink, &cspec)
        .await
        .unwrap();
    assert_eq!(exec.status, AttemptStatus::Succeeded, "{exec:?}");
    let text: String = sink
        .events
        .iter()
        .map(|e| e.summary.clone() + "\n")
        .collect();
    let uid = user.split(':').next().unwrap();
    assert_ne!(uid, "0", "never root by default");
    assert!(text.contains(&format!("uid={uid} ")), "{text}");
    assert!(text.contains("./.claude/.credentials.json"), "{text}");
    assert!(text.contains("./.claude.json"), "{text}");
    assert!(
        !text.contains("history"),
        "history must not be staged: {text}"
    );
    assert!(text.contains("root: read-only"), "{text}");
    // The agent's edit landed in the workspace the daemon still owns.
    assert!(file(&spec.workspace, "POLYPHONY_FAKE.md").is_some());
    w.assert_no_containers().await;
    // The per-container credential copy went with the container.
    let prefix = format!("polyphony-stage-{}-", w.label);
    let left: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "staging left behind: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_removes_containers_past_their_labelled_deadline() {
    use polyphony::runtime::watchdog::{sweep, LABEL_DEADLINE};
    let w = world!("watchdog");
    let spec = w.run_spec(AgentType::Claude, "watchdog", 1);
    let mk = |name: &str, deadline: i64| {
        let mut c = ContainerSpec::new(
            format!("polyphony-{}-{name}", w.prefix),
            w.image.clone(),
            vec!["/bin/sh".into(), "-c".into(), "sleep 1000".into()],
        )
        .labels_for(&spec.task_id, 1, &w.label, polyphony::runtime::Role::Agent)
        .network(NetworkMode::None)
        .limits(ResourceLimits::default(), &default_container_user());
        c.labels
            .insert(LABEL_DEADLINE.to_string(), deadline.to_string());
        c
    };
    let now = chrono::Utc::now();
    let late = w.rt.create(&mk("late", now.timestamp() - 5)).await.unwrap();
    w.rt.start(&late).await.unwrap();
    let fine =
        w.rt.create(&mk("fine", now.timestamp() + 3600))
            .await
            .unwrap();
    w.rt.start(&fine).await.unwrap();
    let swept = sweep(&w.rt, &w.label, now).await.unwrap();
    assert_eq!(swept, vec![format!("polyphony-{}-late", w.prefix)]);
    assert!(matches!(
        w.rt.inspect(&late).await,
        Err(RuntimeError::NotFound(_))
    ));
    assert!(
        w.rt.inspect(&fine).await.is_ok(),
        "a container within its deadline stays"
    );
    w.rt.remove(&fine).await.unwrap();
    w.assert_no_containers().await;
}

/// `docker logs` of a container so far (stdout and stderr), without following it.
/// A released held container: it ends, with 0, having run its command.
async fn ends_having_run(rt: &DockerRuntime, id: &str) {
    let code = tokio::time::timeout(Duration::from_secs(10), rt.wait(id))
        .await
        .expect("released, it ends")
        .unwrap();
    assert_eq!(code, 0, "{}", logs_so_far(id));
    assert!(logs_so_far(id).contains("the-command-ran"));
}

/// The container's processes, one command line each (`docker top`).
fn processes(id: &str) -> Vec<String> {
    let out = std::process::Command::new("docker")
        .args(["top", id, "-o", "pid,args"])
        .output()
        .expect("docker top");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .filter_map(|l| {
            l.trim()
                .split_once(' ')
                .map(|(_, args)| args.trim().to_string())
        })
        .collect()
}

fn logs_so_far(id: &str) -> String {
    let out = std::process::Command::new("docker")
        .args(["logs", id])
        .output()
        .expect("docker logs");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Issue 25: a held container (`ContainerSpec::hold`) of Polyphony's image runs, but its
/// command waits until the daemon releases it (the agent's container starts beside its
/// egress proxy, its CLI only once the proxy listens). Released by a runtime that did not
/// create it (a re-attached attempt's daemon), it goes on; never released, its entrypoint
/// gives up after its bound with a clear error. The image says it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_container_runs_its_command_only_once_released() {
    use polyphony::runtime::container_spec::{HOLD_FIFO_ENV, HOLD_TIMEOUT_ENV, RELEASE_FILE};
    let w = world!("hold");
    assert!(
        w.rt.holds(&w.image).await.unwrap(),
        "the test image carries the hold label"
    );
    let spec = w.run_spec(AgentType::Claude, "hold", 1);
    let mk = |name: &str| {
        let mut c = ContainerSpec::new(
            format!("polyphony-{}-{name}", w.prefix),
            w.image.clone(),
            vec!["/bin/sh".into(), "-c".into(), "echo the-command-ran".into()],
        )
        .labels_for(&spec.task_id, 1, &w.label, polyphony::runtime::Role::Agent)
        .network(NetworkMode::None)
        .limits(ResourceLimits::default(), &default_container_user());
        c.hold = true;
        c
    };
    let id = w.rt.create(&mk("held")).await.unwrap();
    w.rt.start(&id).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let info = w.rt.inspect(&id).await.unwrap();
    assert_eq!(
        info.state,
        polyphony::runtime::RunState::Running,
        "held: {}",
        logs_so_far(&id)
    );
    assert!(
        !logs_so_far(&id).contains("the-command-ran"),
        "the command ran before its release: {}",
        logs_so_far(&id)
    );
    // It waits in a `read` on the release FIFO beside one timer (`sleep 30`, the bound),
    // not polling: no `sleep 0.01` comes and goes.
    let procs = processes(&id);
    assert!(
        procs.iter().any(|p| p.ends_with("sleep 30")),
        "no timer: {procs:?}"
    );
    assert!(
        !procs.iter().any(|p| p.contains("sleep 0.01")),
        "polling: {procs:?}"
    );
    // Another process's runtime finds the staging directory by the container's mounts.
    let other = DockerRuntime::from_client(w.rt.client().clone());
    let released = std::time::Instant::now();
    other.release(&id).await.unwrap();
    ends_having_run(&w.rt, &id).await;
    // Woken by the line, not by the bound.
    assert!(
        released.elapsed() < Duration::from_secs(5),
        "released after {:?}",
        released.elapsed()
    );
    w.rt.remove(&id).await.unwrap();

    // An entrypoint told no FIFO polls for the file, and is released the same way.
    let mut polled = mk("polled");
    polled.env.insert(HOLD_FIFO_ENV.to_string(), String::new());
    let id = w.rt.create(&polled).await.unwrap();
    w.rt.start(&id).await.unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        !logs_so_far(&id).contains("the-command-ran"),
        "the command ran before its release: {}",
        logs_so_far(&id)
    );
    assert!(
        !processes(&id).iter().any(|p| p.ends_with("sleep 30")),
        "told no FIFO, it still waited on one: {:?}",
        processes(&id)
    );
    w.rt.release(&id).await.unwrap();
    ends_having_run(&w.rt, &id).await;
    w.rt.remove(&id).await.unwrap();

    // Never released: the bounded wait ends with the reason, and the command never runs.
    let mut never = mk("never");
    never
        .env
        .insert(HOLD_TIMEOUT_ENV.to_string(), "1".to_string());
    let id = w.rt.create(&never).await.unwrap();
    let info = w.rt.inspect(&id).await.unwrap();
    assert!(
        info.mounts
            .iter()
            .any(|(target, _)| target == polyphony::runtime::container_spec::STAGING_ROOT),
        "a held container always has its staging directory: {:?}",
        info.mounts
    );
    w.rt.start(&id).await.unwrap();
    let code = tokio::time::timeout(Duration::from_secs(15), w.rt.wait(&id))
        .await
        .expect("the wait is bounded")
        .unwrap();
    let out = logs_so_far(&id);
    assert_eq!(code, 75, "{out}");
    assert!(out.contains("not released within 1 s"), "{out}");
    assert!(out.contains(RELEASE_FILE), "{out}");
    assert!(!out.contains("the-command-ran"), "{out}");
    w.rt.remove(&id).await.unwrap();
    w.assert_no_containers().await;
}
