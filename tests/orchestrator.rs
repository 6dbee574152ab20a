//! The orchestrator's attempt outcomes, fast (issue 17): the real pipeline, a real temp
//! SQLite store, real git origins (`demo::write_sample_repo`) and the project's real checks,
//! over the scripted runtime (`runtime::scripted`) instead of Docker. Each agent plays a
//! real CLI transcript from `tests/fixtures/` and edits the workspace as that agent did.
//!
//! What needs the real engine (kill -9, SIGTERM, containers, the watchdog) stays in
//! tests/e2e.rs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use polyphony::config::Config;
use polyphony::demo::{write_home, write_sample_repo};
use polyphony::domain::{AttemptStatus, SourceKind, Task, TaskState, TaskType};
use polyphony::orchestrator::drive::drive;
use polyphony::orchestrator::pipeline::RunOptions;
use polyphony::orchestrator::{AttemptEnd, Orchestrator, RecordingProgress};
use polyphony::runtime::scripted::{AgentScript, ScriptedRuntime};
use polyphony::store::Store;
use tokio::sync::watch;

/// The fixed sample project's `calc.sh` (what the agent's `sed` made of it).
const FIXED_CALC: &str = "# Arithmetic helpers for the demo project.\nadd() {\n    a=$1\n    b=$2\n    echo $((a + b))\n}\n";

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(path)
}

fn transcript(path: &str) -> AgentScript {
    AgentScript::transcript(&fixture(path)).expect("a fixture transcript")
}

/// Claude fixes `add()`: the recorded session that ran `sed` on calc.sh.
fn claude_fixes() -> AgentScript {
    transcript("claude/real_2.1.332_lands_1.ndjson").writes("calc.sh", FIXED_CALC)
}

/// Claude only writes notes: its session succeeds, the project's test still fails.
fn claude_misses() -> AgentScript {
    transcript("claude/real_2.1.332_repair_1.ndjson").writes("NOTES.md", "looked at add()\n")
}

/// One home, one sample origin, one scripted runtime.
struct World {
    _dir: tempfile::TempDir,
    home: PathBuf,
    origin: PathBuf,
    runtime: ScriptedRuntime,
    progress: Arc<RecordingProgress>,
}

impl World {
    fn new() -> World {
        World::with(|_| {})
    }

    /// A home written by `demo::write_home`, then changed by `edit(home)`.
    fn with(edit: impl FnOnce(&Path)) -> World {
        let dir = tempfile::tempdir().expect("a temp dir");
        let origin = write_sample_repo(dir.path()).expect("the sample origin");
        let home = dir.path().join("home");
        write_home(&home, dir.path(), "polyphony-test:scripted").expect("a home");
        edit(&home);
        World {
            _dir: dir,
            home,
            origin,
            runtime: ScriptedRuntime::new(),
            progress: Arc::new(RecordingProgress::new()),
        }
    }

    fn orchestrator(&self) -> Orchestrator {
        let config = Config::load(&self.home).expect("the home's config");
        Orchestrator::with_runtime(
            config,
            Arc::new(self.runtime.clone()),
            Arc::new(|_: &str| None),
        )
        .expect("an orchestrator")
    }

    fn store(&self, orch: &Orchestrator) -> Store {
        Store::open(&orch.db_path()).expect("the store")
    }

    /// Enqueues a local task on the sample origin; returns its id.
    fn enqueue(&self, store: &Store) -> String {
        let id = store.next_local_task_id().expect("an id");
        let mut task = Task::new(
            &id,
            SourceKind::Local,
            format!("local:{id}"),
            self.origin.display().to_string(),
            "Fix add()",
            Utc::now(),
        );
        task.body = "add() subtracts; make `sh test.sh` pass.".into();
        task.task_type = TaskType::Bugfix;
        store.insert_task(&task).expect("insert");
        id
    }

    fn opts(&self) -> (RunOptions, watch::Sender<bool>) {
        let (tx, rx) = watch::channel(false);
        let opts = RunOptions {
            progress: self.progress.clone(),
            cancel: rx,
            cancel_means_retry: false,
        };
        (opts, tx)
    }

    /// Claims `id` and runs one attempt of it.
    async fn attempt(&self, orch: &Orchestrator, store: &Store, id: &str) -> AttemptEnd {
        let claimed = store
            .claim(id, Utc::now())
            .expect("claim")
            .expect("claimable");
        let (opts, _cancel) = self.opts();
        orch.run_claimed(claimed, &opts).await.expect("an attempt")
    }

    /// The origin's commit on `branch`, if it has the branch.
    fn origin_branch(&self, branch: &str) -> Option<String> {
        let out = Command::new("git")
            .args(["rev-parse", "--verify", "-q"])
            .arg(format!("refs/heads/{branch}"))
            .current_dir(&self.origin)
            .output()
            .expect("git");
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// `calc.sh` as the origin's `branch` holds it.
    fn origin_file(&self, branch: &str, path: &str) -> String {
        let out = Command::new("git")
            .args(["show", &format!("{branch}:{path}")])
            .current_dir(&self.origin)
            .output()
            .expect("git");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn task(&self, store: &Store, id: &str) -> Task {
        store.get_task(id).expect("read").expect("the task")
    }
}

fn at(s: &str) -> DateTime<Utc> {
    s.parse().expect("a timestamp")
}

fn fixed_clock(orch: &mut Orchestrator, now: DateTime<Utc>) {
    orch.clock = Arc::new(move || now);
}

#[tokio::test]
async fn a_verified_fix_lands_on_the_origin() {
    let w = World::new();
    w.runtime.push(claude_fixes());
    let orch = w.orchestrator();
    let store = w.store(&orch);
    let id = w.enqueue(&store);

    let end = w.attempt(&orch, &store, &id).await;

    let AttemptEnd::Landed { branch, pr_url } = end else {
        panic!("not landed: {end:?}")
    };
    assert_eq!(pr_url, None);
    assert_eq!(w.origin_file(&branch, "calc.sh"), FIXED_CALC);
    let task = w.task(&store, &id);
    assert_eq!(task.state, TaskState::Landed);
    assert_eq!(
        w.progress.path_of(&id),
        vec![
            TaskState::Routed,
            TaskState::Provisioned,
            TaskState::Running,
            TaskState::Verifying,
            TaskState::Verifying,
            TaskState::Verifying,
            TaskState::Landed
        ]
    );
    let attempts = store.attempts(&id).expect("attempts");
    assert_eq!(attempts.len(), 1);
    let names: Vec<(&str, bool)> = attempts[0]
        .evidence
        .iter()
        .map(|e| (e.name.as_str(), e.passed))
        .collect();
    assert!(names.contains(&("test", true)), "{names:?}");
    assert!(names.contains(&("lint", true)), "{names:?}");
    assert_eq!(attempts[0].status, Some(AttemptStatus::Succeeded));
    // The agent container and one container per check; none left behind.
    assert_eq!(w.runtime.created().len(), 3);
    assert!(w.runtime.live().is_empty(), "{:?}", w.runtime.live());
}

#[tokio::test]
async fn failed_checks_schedule_a_retry_after_the_backoff() {
    let w = World::new();
    w.runtime.push(claude_misses());
    let mut orch = w.orchestrator();
    let now = at("2026-11-30T12:00:00Z");
    fixed_clock(&mut orch, now);
    let store = w.store(&orch);
    let id = w.enqueue(&store);

    let end = w.attempt(&orch, &store, &id).await;

    let AttemptEnd::Retry { at: due, reason } = end else {
        panic!("not a retry: {end:?}")
    };
    assert_eq!(due, now + chrono::Duration::seconds(10));
    assert_eq!(reason, "verification failed: test exited 1");
    let task = w.task(&store, &id);
    assert_eq!(task.state, TaskState::Failed);
    assert_eq!(task.failures, 1);
    assert_eq!(task.next_attempt_at, Some(due));
    let attempt = &store.attempts(&id).expect("attempts")[0];
    let failed: Vec<&str> = attempt
        .evidence
        .iter()
        .filter(|e| !e.passed)
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(failed, vec!["test"]);
    assert!(w.origin_branch("polyphony/local-1-a1").is_none());
}

#[tokio::test]
async fn an_agent_crash_is_retried() {
    let w = World::new();
    w.runtime.push(AgentScript::default().exits(1));
    let mut orch = w.orchestrator();
    let now = at("2026-11-30T12:00:00Z");
    fixed_clock(&mut orch, now);
    let store = w.store(&orch);
    let id = w.enqueue(&store);

    let end = w.attempt(&orch, &store, &id).await;

    assert!(
        matches!(&end, AttemptEnd::Retry { at, .. } if *at == now + chrono::Duration::seconds(10)),
        "{end:?}"
    );
    let task = w.task(&store, &id);
    assert_eq!((task.state, task.failures), (TaskState::Failed, 1));
    let attempt = &store.attempts(&id).expect("attempts")[0];
    assert_ne!(attempt.status, Some(AttemptStatus::Succeeded));
    assert_eq!(attempt.exit_code, Some(1));
}
