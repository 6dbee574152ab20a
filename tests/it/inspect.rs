//! The inspection verbs through the built binary against a temporary POLYPHONY_HOME:
//! `logs` (readable, raw, JSON, follow, unknown task/attempt), `doctor` (failing and passing
//! homes, the GitHub token against the fake GitHub, secrets never printed) and `cleanup`
//! (real containers of this home and another, real workspace directories, a real store).
//!
//! Docker tests without an engine: fail when `CI` is set, otherwise print `SKIPPED: <why>`.

use crate::support;

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use assert_cmd::Command;
use chrono::Utc;
use polyphony::domain::{
    AttemptStatus, EventKind, EventStream, NetworkMode, RunResult, RunSpec, Task, TaskEvent,
    TaskState, TokenUsage,
};
use polyphony::runtime::{
    home_label, ContainerSpec, DockerRuntime, Role, WorkerRuntime, LABEL_HOME,
};
use polyphony::store::Store;
use predicates::prelude::PredicateBooleanExt as _;
use serde_json::json;
use support::docker::{engine, image};
use support::fake_github::{FakeGithub, FAKE_TOKEN};
use support::spec::{local_task, path_to, run_spec};

fn polyphony(home: &Path) -> Command {
    let mut cmd = Command::cargo_bin("polyphony").unwrap();
    cmd.env("POLYPHONY_HOME", home)
        .env_remove("RUST_LOG")
        .env_remove("GITHUB_TOKEN")
        .env_remove("GH_TOKEN")
        .env_remove("GITHUB_API_URL");
    cmd
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn task(id: &str) -> Task {
    local_task(id, Utc::now())
}

fn spec(task_id: &str, attempt: u32, workspace: PathBuf) -> RunSpec {
    RunSpec {
        workspace,
        max_turns: Some(10),
        args: Vec::new(),
        network: NetworkMode::Bridge,
        egress: Default::default(),
        ..run_spec(task_id, attempt)
    }
}

fn result(task_id: &str, attempt: u32, status: AttemptStatus) -> RunResult {
    RunResult {
        task_id: task_id.into(),
        attempt,
        agent: "claude".into(),
        status,
        turns: 3,
        duration_seconds: 12.5,
        cost_usd: Some(0.042),
        tokens: TokenUsage::default(),
        exit_code: Some(0),
        final_message: Some("done".into()),
        reason: None,
        events: 0,
        artifacts: vec![],
    }
}

/// The shortest legal path from DISCOVERED to `to`.
fn drive(store: &Store, id: &str, to: TaskState) {
    let path = path_to(to);
    let mut at = TaskState::Discovered;
    for &next in path {
        store
            .transition(id, at, next, "test setup", Utc::now())
            .unwrap();
        at = next;
    }
}

fn event(seq: u64, kind: EventKind, summary: &str, data: serde_json::Value) -> TaskEvent {
    TaskEvent {
        seq,
        kind,
        stream: EventStream::Stdout,
        summary: summary.into(),
        data,
        at: Utc::now(),
    }
}

fn transcript() -> Vec<TaskEvent> {
    let mut stderr = event(
        4,
        EventKind::Unknown,
        "unknown: not JSON",
        json!({"raw": "warning: slow disk", "note": "not JSON"}),
    );
    stderr.stream = EventStream::Stderr;
    vec![
        event(
            0,
            EventKind::System,
            "init: model opus, 12 tools",
            json!({"type": "system"}),
        ),
        event(
            1,
            EventKind::Message,
            "assistant: Running the tests",
            json!({"type": "assistant"}),
        ),
        event(
            2,
            EventKind::ToolCall,
            "Bash: cargo test",
            json!({"type": "tool_use", "n": 2}),
        ),
        event(
            3,
            EventKind::ToolResult,
            &format!("Bash: {}", "test result: ok. ".repeat(20)),
            json!({"type": "tool_result"}),
        ),
        stderr,
        event(
            5,
            EventKind::Result,
            "result: success, 3 turns, $0.0420",
            json!({"type": "result"}),
        ),
    ]
}

// ---------------------------------------------------------------------------- logs

#[test]
fn logs_prints_readable_raw_and_json_transcripts() {
    let home = tempfile::tempdir().unwrap();
    let store = Store::open(&home.path().join("queue.db")).unwrap();
    store.insert_task(&task("local-1")).unwrap();
    drive(&store, "local-1", TaskState::Running);
    store
        .start_attempt(&spec("local-1", 1, home.path().join("ws")), Utc::now())
        .unwrap();
    store
        .append_events(
            "local-1",
            1,
            &[event(
                0,
                EventKind::Message,
                "assistant: first try",
                json!({}),
            )],
        )
        .unwrap();
    store
        .finish_attempt(
            &result("local-1", 1, AttemptStatus::Failed),
            &[],
            Utc::now(),
        )
        .unwrap();
    store
        .start_attempt(&spec("local-1", 2, home.path().join("ws2")), Utc::now())
        .unwrap();
    store.append_events("local-1", 2, &transcript()).unwrap();
    store
        .finish_attempt(
            &result("local-1", 2, AttemptStatus::Succeeded),
            &[],
            Utc::now(),
        )
        .unwrap();

    // Default: the latest attempt, readable.
    let out = polyphony(home.path())
        .args(["logs", "local-1"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("attempt 2 of local-1 · agent claude"),
        "{text}"
    );
    assert!(lines[3].ends_with("tool    Bash: cargo test"), "{text}");
    assert!(
        lines[2].contains("text    assistant: Running the tests"),
        "{text}"
    );
    let result_line = lines[4];
    assert!(result_line.contains("output  Bash: test result") && result_line.ends_with('…'));
    assert!(lines[5].contains("[stderr] unknown: not JSON"), "{text}");
    assert_eq!(
        lines.last().unwrap(),
        &"attempt 2 ended: succeeded, 3 turns, $0.0420, 12.5s"
    );
    assert!(!text.contains("first try"));

    // --attempt 1.
    polyphony(home.path())
        .args(["logs", "local-1", "--attempt", "1"])
        .assert()
        .success()
        .stdout(predicates::str::contains("assistant: first try"))
        .stdout(predicates::str::contains("attempt 1 ended: failed"));

    // --raw: the stored lines, the non-JSON one as its text.
    let raw = stdout(
        &polyphony(home.path())
            .args(["logs", "local-1", "--raw"])
            .output()
            .unwrap(),
    );
    let raw: Vec<&str> = raw.lines().collect();
    assert_eq!(raw.len(), 6);
    assert_eq!(raw[2], r#"{"n":2,"type":"tool_use"}"#);
    assert_eq!(raw[4], "warning: slow disk");

    // --json: NDJSON with task and attempt.
    let js = stdout(
        &polyphony(home.path())
            .args(["logs", "local-1", "--json"])
            .output()
            .unwrap(),
    );
    let events: Vec<serde_json::Value> = js
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len(), 6);
    assert!(events
        .iter()
        .all(|e| e["task"] == "local-1" && e["attempt"] == 2));
    assert_eq!(events[2]["kind"], "tool_call");
    assert_eq!(events[4]["stream"], "stderr");
}

#[test]
fn logs_of_unknown_task_or_attempt_is_a_usage_error() {
    let home = tempfile::tempdir().unwrap();
    polyphony(home.path())
        .args(["logs", "nope"])
        .assert()
        .code(2)
        .stderr(
            predicates::str::contains("no task `nope`")
                .and(predicates::str::contains("polyphony status")),
        );
    assert!(
        !home.path().join("queue.db").exists(),
        "looking created the queue"
    );

    let store = Store::open(&home.path().join("queue.db")).unwrap();
    store.insert_task(&task("local-1")).unwrap();
    // No attempts yet: said on stderr, not an error.
    polyphony(home.path())
        .args(["logs", "local-1"])
        .assert()
        .success()
        .stderr(predicates::str::contains(
            "no attempts yet (state DISCOVERED)",
        ));
    // --follow on a task that ended without an attempt does not wait forever.
    store.insert_task(&task("local-2")).unwrap();
    drive(&store, "local-2", TaskState::Blocked);
    polyphony(home.path())
        .args(["logs", "local-2", "--follow"])
        .timeout(Duration::from_secs(10))
        .assert()
        .success()
        .stderr(predicates::str::contains("state BLOCKED"));
    drive(&store, "local-1", TaskState::Running);
    store
        .start_attempt(&spec("local-1", 1, home.path().join("ws")), Utc::now())
        .unwrap();
    polyphony(home.path())
        .args(["logs", "local-1", "--attempt", "7"])
        .assert()
        .code(2)
        .stderr(
            predicates::str::contains("has no attempt 7")
                .and(predicates::str::contains("one of 1")),
        );
}

#[test]
fn logs_follow_streams_new_events_until_the_attempt_ends() {
    let home = tempfile::tempdir().unwrap();
    let store = Store::open(&home.path().join("queue.db")).unwrap();
    store.insert_task(&task("local-1")).unwrap();
    drive(&store, "local-1", TaskState::Running);
    store
        .start_attempt(&spec("local-1", 1, home.path().join("ws")), Utc::now())
        .unwrap();
    let all = transcript();
    store.append_events("local-1", 1, &all[..2]).unwrap();

    let bin = assert_cmd::cargo::cargo_bin("polyphony");
    let mut child = std::process::Command::new(bin)
        .env("POLYPHONY_HOME", home.path())
        .env_remove("RUST_LOG")
        .args(["logs", "local-1", "--follow", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    for e in &all[2..] {
        std::thread::sleep(Duration::from_millis(250));
        store
            .append_events("local-1", 1, std::slice::from_ref(e))
            .unwrap();
    }
    // Re-appending (as recovery does) must not show twice.
    store.append_events("local-1", 1, &all).unwrap();
    std::thread::sleep(Duration::from_millis(400));
    assert!(
        child.try_wait().unwrap().is_none(),
        "follow stopped before the attempt ended"
    );
    store
        .finish_attempt(
            &result("local-1", 1, AttemptStatus::Succeeded),
            &[],
            Utc::now(),
        )
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if started.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("logs --follow did not stop after the attempt ended");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success());
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let seqs: Vec<u64> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(seqs, vec![0, 1, 2, 3, 4, 5]);
    println!(
        "follow stopped {:?} after the attempt ended",
        started.elapsed()
    );
}

// ---------------------------------------------------------------------------- Docker

/// Removes the named containers when dropped, even after a panic.
struct Containers {
    rt: DockerRuntime,
    ids: Vec<String>,
}

impl Drop for Containers {
    fn drop(&mut self) {
        let rt = self.rt.clone();
        let ids = std::mem::take(&mut self.ids);
        // A fresh runtime on its own thread: Drop may run inside the test's runtime.
        let _ = std::thread::spawn(move || {
            let Ok(local) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            local.block_on(async {
                for id in ids {
                    let _ = rt.remove(&id).await;
                }
            });
        })
        .join();
    }
}

async fn create(
    rt: &DockerRuntime,
    image: &str,
    name: &str,
    task: &str,
    attempt: u32,
    label: &str,
    start: bool,
) -> String {
    let spec = ContainerSpec::new(name, image, vec!["sleep".into(), "300".into()])
        .labels_for(task, attempt, label, Role::Agent)
        .network(NetworkMode::None);
    let id = rt.create(&spec).await.unwrap();
    if start {
        rt.start(&id).await.unwrap();
    }
    id
}

async fn exists(rt: &DockerRuntime, id: &str) -> bool {
    rt.inspect(id).await.is_ok()
}

/// A workspace with a little content, as the store would record it.
/// An attempt directory as Polyphony makes it: its task directory carries the marker.
fn workspace(home: &Path, key: &str, attempt: u32) -> PathBuf {
    let dir = home.join("workspaces").join(key).join(attempt.to_string());
    std::fs::create_dir_all(dir.join("src")).unwrap();
    polyphony::workspace::marker::mark_key_dir(&home.join("workspaces").join(key)).unwrap();
    std::fs::write(dir.join("src/lib.rs"), "x".repeat(10_000)).unwrap();
    dir
}

async fn run_bin(cmd: Command) -> std::process::Output {
    let mut cmd = cmd;
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_removes_exactly_the_leftovers_of_this_home() {
    let Some(rt) = engine().await else { return };
    let image = image(&rt).await;
    let home = tempfile::tempdir().unwrap();
    let other_home = tempfile::tempdir().unwrap();
    polyphony(home.path()).arg("init").assert().success();
    let label = home_label(home.path());
    let other_label = home_label(other_home.path());
    let p = format!("inspect-{}", std::process::id());

    let store = Store::open(&home.path().join("queue.db")).unwrap();
    let mut ws = std::collections::BTreeMap::new();
    for (id, state) in [
        ("landed", TaskState::Landed),
        ("blocked", TaskState::Blocked),
        ("failed", TaskState::Failed),
        ("running", TaskState::Running),
    ] {
        store.insert_task(&task(id)).unwrap();
        drive(&store, id, state);
        let dir = workspace(home.path(), id, 1);
        store
            .start_attempt(&spec(id, 1, dir.clone()), Utc::now())
            .unwrap();
        ws.insert(id, dir);
    }
    let orphan = workspace(home.path(), "zz-orphan", 1);
    // Issue 12: a directory Polyphony did not make (no marker) survives even --all.
    let foreign = home.path().join("workspaces/myproject/1");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(foreign.join("keep.txt"), "mine").unwrap();
    let mirrors = home.path().join("mirrors");
    std::fs::create_dir_all(&mirrors).unwrap();
    let mirror_lock = mirrors.join("github.com-acme-widgets.git.lock");
    std::fs::write(&mirror_lock, "").unwrap();
    let daemon_lock = home.path().join("daemon.lock");
    std::fs::write(&daemon_lock, "12345").unwrap();

    let mut guard = Containers {
        rt: rt.clone(),
        ids: vec![],
    };
    let landed_c = create(
        &rt,
        &image,
        &format!("{p}-landed"),
        "landed",
        1,
        &label,
        false,
    )
    .await;
    let ghost_c = create(
        &rt,
        &image,
        &format!("{p}-ghost"),
        "ghost",
        1,
        &label,
        false,
    )
    .await;
    let running_c = create(
        &rt,
        &image,
        &format!("{p}-running"),
        "running",
        1,
        &label,
        true,
    )
    .await;
    let foreign_c = create(
        &rt,
        &image,
        &format!("{p}-foreign"),
        "landed",
        1,
        &other_label,
        false,
    )
    .await;
    guard.ids.extend([
        landed_c.clone(),
        ghost_c.clone(),
        running_c.clone(),
        foreign_c.clone(),
    ]);

    // --dry-run removes nothing and says what it would.
    let out = run_bin({
        let mut c = polyphony(home.path());
        c.args(["cleanup", "--dry-run"]);
        c
    })
    .await;
    let text = stdout(&out);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&format!("would remove container {p}-landed")),
        "{text}"
    );
    assert!(text.contains("would be freed"), "{text}");
    for id in [&landed_c, &ghost_c, &running_c, &foreign_c] {
        assert!(exists(&rt, id).await, "dry run removed {id}");
    }
    assert!(ws.values().all(|d| d.is_dir()) && orphan.is_dir());
    assert!(mirror_lock.exists() && daemon_lock.exists());

    // The real run, as JSON.
    let out = run_bin({
        let mut c = polyphony(home.path());
        c.args(["cleanup", "--json"]);
        c
    })
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = report["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{report:#}");
    assert!(
        names.contains(&format!("{p}-landed").as_str())
            && names.contains(&format!("{p}-ghost").as_str())
    );
    assert!(!exists(&rt, &landed_c).await && !exists(&rt, &ghost_c).await);
    assert!(
        exists(&rt, &running_c).await,
        "the RUNNING attempt's container is kept for recovery"
    );
    assert!(
        exists(&rt, &foreign_c).await,
        "another home's container was touched"
    );
    assert!(!ws["landed"].exists() && !ws["blocked"].exists());
    assert!(
        !home.path().join("workspaces/landed").exists(),
        "empty task dir left"
    );
    assert!(ws["failed"].is_dir() && ws["running"].is_dir() && orphan.is_dir());
    assert!(!mirror_lock.exists() && !daemon_lock.exists());
    let freed = report["bytes_freed"].as_u64().unwrap();
    assert!(freed >= 2 * 10_000, "freed {freed}");
    assert_eq!(report["workspaces"].as_array().unwrap().len(), 2);

    // A second run finds nothing.
    polyphony(home.path())
        .arg("cleanup")
        .assert()
        .success()
        .stdout(predicates::str::contains("nothing to clean up"));

    // With a daemon holding the lock, --all still keeps the live attempt and the orphan.
    {
        let _lock = polyphony::home::DaemonLock::acquire(home.path()).unwrap();
        let out = run_bin({
            let mut c = polyphony(home.path());
            c.args(["cleanup", "--all", "--dry-run"]);
            c
        })
        .await;
        let text = stdout(&out);
        assert!(
            text.contains(&format!("kept container {p}-running")),
            "{text}"
        );
        assert!(
            text.contains("a daemon runs and may be preparing it"),
            "{text}"
        );
        assert!(
            !text.contains("zz-orphan ("),
            "orphan planned while a daemon runs: {text}"
        );
    }

    // --all (no daemon): the RUNNING container, FAILED workspace and the orphan go too.
    polyphony(home.path())
        .args(["cleanup", "--all"])
        .assert()
        .success()
        .stdout(predicates::str::contains("freed"));
    assert!(!exists(&rt, &running_c).await);
    assert!(!ws["failed"].exists() && !orphan.exists());
    assert!(
        foreign.join("keep.txt").is_file(),
        "cleanup --all removed a directory Polyphony did not make"
    );
    assert!(
        ws["running"].is_dir(),
        "a RUNNING task's workspace is never removed"
    );
    assert!(
        exists(&rt, &foreign_c).await,
        "another home's container was touched"
    );
    polyphony(home.path())
        .args(["cleanup", "--all"])
        .assert()
        .success()
        .stdout(predicates::str::contains("nothing to clean up"));

    let left = rt
        .list_by_labels(&[(LABEL_HOME.to_string(), label.clone())])
        .await
        .unwrap();
    assert!(left.is_empty(), "containers of this home left: {left:?}");
}

/// Issue 24: a profile's `network: network:NAME` naming no Docker network was accepted
/// silently, and every attempt then failed at container create. `doctor` asks the engine
/// and names the file, the profile, the field and both ways out; once the network exists
/// the check passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_names_a_profile_network_that_does_not_exist() {
    let Some(rt) = engine().await else { return };
    let image = image(&rt).await;
    let home = tempfile::tempdir().unwrap();
    let creds = home.path().join("creds");
    std::fs::create_dir_all(&creds).unwrap();
    ready_home(home.path(), &image, &creds, None);
    let config = home.path().join("config.yaml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("allow_unsafe: true\n{text}")).unwrap();
    // Unique per run, so parallel runs and leftovers never meet.
    let net = format!(
        "polyphony-doctor-net-{}-{}",
        std::process::id(),
        Utc::now().timestamp_micros()
    );
    std::fs::write(
        home.path().join("agents.yaml"),
        format!(
            "agents:\n  - name: claude\n    agent_type: claude\n    egress: open\n    network: network:{net}\n"
        ),
    )
    .unwrap();
    let doctor = || {
        let mut c = polyphony(home.path());
        c.args(["doctor", "--json"])
            .env("INSPECT_TEST_KEY", "sk-inspect-do-not-print");
        c
    };
    let check_of = |out: &std::process::Output| -> serde_json::Value {
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(out)));
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == format!("network {net}"))
            .cloned()
            .unwrap_or_else(|| panic!("no network check: {v:#}"))
    };

    // `config check` still says OK (it asks no engine); doctor fails, saying where and how.
    polyphony(home.path())
        .args(["config", "check"])
        .assert()
        .success();
    let out = run_bin(doctor()).await;
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let check = check_of(&out);
    assert_eq!(check["level"], "fail", "{check:#}");
    let detail = check["detail"].as_str().unwrap();
    assert!(
        detail.contains("agents.yaml: agent `claude` (egress open), field `network`")
            && detail.contains(&format!("Docker network `{net}` does not exist")),
        "{check:#}"
    );
    let fix = check["fix"].as_str().unwrap();
    assert!(
        fix.contains(&format!("`docker network create {net}`"))
            && fix.contains("applies only under `egress: open`"),
        "{check:#}"
    );

    // Created (and removed again whatever happens), the check passes.
    struct Remove(String);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::process::Command::new("docker")
                .args(["network", "rm", &self.0])
                .output();
        }
    }
    let made = std::process::Command::new("docker")
        .args([
            "network",
            "create",
            "--label",
            "polyphony.test=doctor-net",
            &net,
        ])
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let _remove = Remove(net.clone());
    let out = run_bin(doctor()).await;
    let check = check_of(&out);
    assert_eq!(check["level"], "pass", "{check:#}");
    assert!(
        check["detail"].as_str().unwrap().contains("agent `claude`"),
        "{check:#}"
    );
}

/// Writes a home whose every check can pass on this machine.
fn ready_home(home: &Path, image: &str, creds: &Path, github_repo: Option<&str>) {
    std::fs::write(
        home.join("config.yaml"),
        format!(
            "container:\n  image: {image}\ngithub:\n  repos: [{}]\n",
            github_repo.unwrap_or("")
        ),
    )
    .unwrap();
    std::fs::write(
        home.join("identities.yaml"),
        format!(
            "identities:\n  - name: personal\n    volumes:\n      claude: {}\n    api_keys:\n      ANTHROPIC_API_KEY: INSPECT_TEST_KEY\n",
            creds.display()
        ),
    )
    .unwrap();
    std::fs::write(
        home.join("agents.yaml"),
        "agents:\n  - name: claude\n    agent_type: claude\n",
    )
    .unwrap();
    std::fs::write(home.join("routing.yaml"), "default:\n  agent: claude\n").unwrap();
}

#[test]
fn doctor_fails_with_a_fix_for_each_problem() {
    let home = tempfile::tempdir().unwrap();
    let creds = home.path().join("creds");
    ready_home(home.path(), "polyphony-doctor-missing:never", &creds, None);
    let out = polyphony(home.path()).arg("doctor").output().unwrap();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("✓ config:"), "{text}");
    assert!(text.contains("✓ git: git version"), "{text}");
    assert!(
        text.contains("✗ image polyphony-doctor-missing:never"),
        "{text}"
    );
    assert!(
        text.contains("docker build -t polyphony-doctor-missing:never images/worker"),
        "{text}"
    );
    assert!(text.contains(&format!(
        "✗ identity personal: claude credentials: {} does not exist",
        creds.display()
    )));
    assert!(text.contains(
        "✗ identity personal: ANTHROPIC_API_KEY: host variable $INSPECT_TEST_KEY is not set"
    ));
    assert!(text.contains("! daemon: not running"), "{text}");
    assert!(text.contains("not ready:"), "{text}");

    // A broken config is printed as is, and exits 1 (doctor reports, it is not a usage error).
    std::fs::write(
        home.path().join("routing.yaml"),
        "default:\n  agent: claud\n",
    )
    .unwrap();
    let out = polyphony(home.path())
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], false);
    let config = &v["checks"][0];
    assert_eq!(config["name"], "config");
    assert_eq!(config["level"], "fail");
    assert!(
        config["detail"]
            .as_str()
            .unwrap()
            .contains("routing.yaml:2:"),
        "{config}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_passes_on_a_ready_home_and_checks_the_token_against_github() {
    let Some(rt) = engine().await else { return };
    let image = image(&rt).await;
    let gh = FakeGithub::start().await;
    gh.add_repo("acme/widgets", "file:///nowhere.git", "main");
    let home = tempfile::tempdir().unwrap();
    let creds = home.path().join("creds");
    std::fs::create_dir_all(&creds).unwrap();
    ready_home(home.path(), &image, &creds, Some("acme/widgets"));
    const SECRET: &str = "sk-inspect-do-not-print";

    let run = |token: &str| {
        let mut c = polyphony(home.path());
        c.arg("doctor")
            .env("INSPECT_TEST_KEY", SECRET)
            .env("GITHUB_API_URL", gh.base_url())
            .env("GITHUB_TOKEN", token);
        c
    };
    let out = run_bin(run(FAKE_TOKEN)).await;
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("✓ docker: engine"), "{text}");
    assert!(
        text.contains(&format!("✓ image {image}: present")),
        "{text}"
    );
    assert!(text.contains("✓ identity personal: ANTHROPIC_API_KEY: from $INSPECT_TEST_KEY (set)"));
    assert!(
        text.contains("✓ GitHub $GITHUB_TOKEN → acme/widgets: valid"),
        "{text}"
    );
    assert!(text.starts_with("✓ config"), "{text}");
    assert!(text.contains("ready:"), "{text}");

    let out = run_bin(run("ghp_wrong_token_value")).await;
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("✗ GitHub $GITHUB_TOKEN → acme/widgets"),
        "{text}"
    );
    assert!(text.contains("401"), "{text}");
    for secret in [SECRET, FAKE_TOKEN, "ghp_wrong_token_value"] {
        assert!(!text.contains(secret), "doctor printed a secret");
        assert!(!String::from_utf8_lossy(&out.stderr).contains(secret));
    }
}
