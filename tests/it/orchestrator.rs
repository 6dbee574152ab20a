//! The orchestrator's attempt outcomes, fast (issue 17): the real pipeline, a real temp
//! SQLite store, real git origins (`demo::write_sample_repo`) and the project's real checks,
//! over the scripted runtime (`runtime::scripted`) instead of Docker. Each agent plays a
//! real CLI transcript from `tests/fixtures/` and edits the workspace as that agent did.
//!
//! Tasks come from the in-memory tracker (`sources::memory`) through the `Source` port, so
//! the claim, the landing report and the blocked report run as for any tracker, and time is
//! the test's clock (`World::now`), not the machine's. One test keeps the local queue.
//!
//! What needs the real engine (kill -9, SIGTERM, containers, the watchdog) stays in
//! tests/e2e.rs.

use crate::support;

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
use polyphony::runtime::LABEL_ROLE;
use polyphony::sources::memory::{MemorySource, Op};
use polyphony::sources::SourceFailure;
use polyphony::store::{IntentKind, Store};
use support::git::{git, git_as};
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

/// One home, one sample origin, one scripted runtime, one in-memory tracker, one clock.
struct World {
    _dir: tempfile::TempDir,
    home: PathBuf,
    origin: PathBuf,
    runtime: ScriptedRuntime,
    /// Serves the tasks `offer` makes (of kind github, as a tracker's are).
    tracker: MemorySource,
    /// The orchestrator's clock: fixed at this time.
    now: DateTime<Utc>,
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
            tracker: MemorySource::new(SourceKind::Github),
            now: at("2026-11-30T12:00:00Z"),
            progress: Arc::new(RecordingProgress::new()),
        }
    }

    fn orchestrator(&self) -> Orchestrator {
        self.orchestrator_with_env(&[])
    }

    /// An orchestrator whose host environment holds `vars` (an identity's api_keys).
    fn orchestrator_with_env(&self, vars: &[(&str, &str)]) -> Orchestrator {
        let config = Config::load(&self.home).expect("the home's config");
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut orch = Orchestrator::with_runtime(
            config,
            Arc::new(self.runtime.clone()),
            Arc::new(move |name: &str| {
                vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
            }),
        )
        .expect("an orchestrator")
        .with_source(Arc::new(self.tracker.clone()));
        let now = self.now;
        orch.clock = Arc::new(move || now);
        orch
    }

    fn store(&self, orch: &Orchestrator) -> Store {
        Store::open(&orch.db_path()).expect("the store")
    }

    /// Offers a task at the tracker (an issue of `octo/sample` on the sample origin) and
    /// records it, as the daemon's poll would; returns its id.
    fn offer(&self, store: &Store) -> String {
        let n = self.tracker.offered().len() + 1;
        let id = format!("octo/sample#{n}");
        let mut task = Task::new(
            &id,
            SourceKind::Github,
            id.clone(),
            self.origin.display().to_string(),
            "Fix add()",
            self.now,
        );
        task.body = "add() subtracts; make `sh test.sh` pass.".into();
        task.task_type = TaskType::Bugfix;
        self.tracker.offer(task.clone());
        store.insert_task(&task).expect("insert");
        id
    }

    /// Enqueues a local task on the sample origin; returns its id.
    fn enqueue_local(&self, store: &Store) -> String {
        let id = store.next_local_task_id().expect("an id");
        let mut task = Task::new(
            &id,
            SourceKind::Local,
            format!("local:{id}"),
            self.origin.display().to_string(),
            "Fix add()",
            self.now,
        );
        task.body = "add() subtracts; make `sh test.sh` pass.".into();
        task.task_type = TaskType::Bugfix;
        store.insert_task(&task).expect("insert");
        id
    }

    /// The branch attempt `attempt` of `id` pushes to.
    fn branch(&self, orch: &Orchestrator, id: &str, attempt: u32) -> String {
        let key = polyphony::workspace::task_key(id).expect("a key");
        polyphony::workspace::branch_name(&orch.config.global().git.branch_prefix, &key, attempt)
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
            .claim(id, self.now)
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

    /// `path` as the origin's `branch` holds it.
    fn origin_file(&self, branch: &str, path: &str) -> String {
        git(&self.origin, &["show", &format!("{branch}:{path}")]) + "\n"
    }

    fn task(&self, store: &Store, id: &str) -> Task {
        store.get_task(id).expect("read").expect("the task")
    }
}

fn at(s: &str) -> DateTime<Utc> {
    s.parse().expect("a timestamp")
}

#[tokio::test]
async fn a_verified_fix_lands_on_the_origin() {
    let w = World::new();
    w.runtime.push(claude_fixes());
    let orch = w.orchestrator();
    let store = w.store(&orch);
    let id = w.offer(&store);

    let end = w.attempt(&orch, &store, &id).await;

    let AttemptEnd::Landed { branch, pr_url } = end else {
        panic!("not landed: {end:?}")
    };
    // Reported at the tracker through the port: one claim, one landing with the evidence.
    assert_eq!(pr_url.as_deref(), Some("memory://octo/sample#1/pull/1"));
    assert_eq!(w.origin_file(&branch, "calc.sh"), FIXED_CALC);
    let claims = w.tracker.claims();
    assert_eq!(claims.len(), 1, "{claims:?}");
    assert_eq!(
        (
            claims[0].task_id.as_str(),
            claims[0].info.attempt,
            claims[0].resuming
        ),
        (id.as_str(), 1, false)
    );
    assert_eq!(claims[0].info.agent, "claude");
    let lands = w.tracker.lands();
    assert_eq!(lands.len(), 1, "{lands:?}");
    assert_eq!(lands[0].1.branch, branch);
    assert!(lands[0].1.evidence.iter().all(|e| e.passed), "{lands:?}");
    assert!(w.tracker.blocks().is_empty());
    let task = w.task(&store, &id);
    assert_eq!(task.state, TaskState::Landed);
    assert_eq!(task.updated_at, w.now, "stamped by the test's clock");
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

/// The local queue keeps no record of its own: no claim or report anywhere, and the push
/// alone lands the task.
#[tokio::test]
async fn a_local_task_lands_by_the_push_alone() {
    let w = World::new();
    w.runtime.push(claude_fixes());
    let orch = w.orchestrator();
    let store = w.store(&orch);
    let id = w.enqueue_local(&store);

    let end = w.attempt(&orch, &store, &id).await;

    let AttemptEnd::Landed { branch, pr_url } = end else {
        panic!("not landed: {end:?}")
    };
    assert_eq!(pr_url, None);
    assert_eq!(branch, w.branch(&orch, &id, 1));
    assert_eq!(w.origin_file(&branch, "calc.sh"), FIXED_CALC);
    assert_eq!(w.task(&store, &id).state, TaskState::Landed);
    assert!(w.tracker.claims().is_empty() && w.tracker.lands().is_empty());
}

/// Another owner at the source: the claim answers "no longer ready", so the task is
/// released (BLOCKED, not reported) before any agent runs.
#[tokio::test]
async fn a_claim_the_source_refuses_releases_the_task_before_any_agent_runs() {
    let w = World::new();
    w.tracker
        .release_claims("claimed by another Polyphony instance");
    let orch = w.orchestrator();
    let store = w.store(&orch);
    let id = w.offer(&store);

    let end = w.attempt(&orch, &store, &id).await;

    assert_eq!(
        end,
        AttemptEnd::Released {
            reason: "released: claimed by another Polyphony instance".into()
        }
    );
    assert_eq!(w.task(&store, &id).state, TaskState::Blocked);
    assert_eq!(store.released_at(&id).expect("released"), Some(w.now));
    assert!(
        w.runtime.created().is_empty(),
        "no container for a released task"
    );
    assert!(w.tracker.blocks().is_empty(), "a release is not reported");
    assert!(w.origin_branch(&w.branch(&orch, &id, 1)).is_none());
}

/// The retry decision follows the kind of the source's failure, whatever its words: the
/// tracker refusing our credentials while the landing is reported blocks at once; the
/// tracker being unreachable is retried after the backoff.
#[tokio::test]
async fn a_landing_report_the_source_refuses_blocks_and_an_unreachable_one_retries() {
    for (failure, blocks) in [
        (SourceFailure::RefusedCredentials, true),
        (SourceFailure::Transient, false),
    ] {
        let w = World::new();
        w.runtime.push(claude_fixes());
        w.tracker.fail_next(Op::Land, failure);
        let orch = w.orchestrator();
        let store = w.store(&orch);
        let id = w.offer(&store);

        let end = w.attempt(&orch, &store, &id).await;

        let task = w.task(&store, &id);
        if blocks {
            assert!(
                matches!(end, AttemptEnd::Blocked { .. }),
                "{failure:?}: {end:?}"
            );
            assert_eq!(task.state, TaskState::Blocked, "{failure:?}");
            assert_eq!(w.tracker.blocks().len(), 1, "the block is reported");
        } else {
            assert!(
                matches!(&end, AttemptEnd::Retry { at, .. } if *at == w.now + chrono::Duration::seconds(10)),
                "{failure:?}: {end:?}"
            );
            assert_eq!((task.state, task.failures), (TaskState::Failed, 1));
        }
        // The verified sha was pushed before the report failed.
        assert!(w.origin_branch(&w.branch(&orch, &id, 1)).is_some());
    }
}

#[tokio::test]
async fn failed_checks_schedule_a_retry_after_the_backoff() {
    let w = World::new();
    w.runtime.push(claude_misses());
    let orch = w.orchestrator();
    let now = w.now;
    let store = w.store(&orch);
    let id = w.offer(&store);

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
    assert!(w.origin_branch(&w.branch(&orch, &id, 1)).is_none());
}

#[tokio::test]
async fn an_agent_crash_is_retried() {
    let w = World::new();
    w.runtime.push(AgentScript::default().exits(1));
    let orch = w.orchestrator();
    let now = w.now;
    let store = w.store(&orch);
    let id = w.offer(&store);

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

#[tokio::test]
async fn an_agent_out_of_quota_falls_back_to_the_next_agent_without_a_failure() {
    let w = World::new();
    w.runtime
        .push(transcript("claude/real_2.1.332_quota_1.ndjson"))
        .push(transcript("codex/gump_stream_success.ndjson").writes("calc.sh", FIXED_CALC));
    let orch = w.orchestrator();
    let now = w.now;
    let store = w.store(&orch);
    let id = w.offer(&store);

    let end = w.attempt(&orch, &store, &id).await;
    assert!(
        matches!(&end, AttemptEnd::Fallback { next_agent, .. } if next_agent == "codex"),
        "{end:?}"
    );
    let task = w.task(&store, &id);
    assert_eq!((task.state, task.failures), (TaskState::Failed, 0));
    // The fallback is immediate: no backoff before the next attempt.
    assert_eq!(task.next_attempt_at, Some(now));
    assert_eq!(
        store.attempts(&id).expect("attempts")[0].status,
        Some(AttemptStatus::Quota)
    );

    let end = w.attempt(&orch, &store, &id).await;
    assert!(end.is_landed(), "{end:?}");
    let attempts = store.attempts(&id).expect("attempts");
    let agents: Vec<&str> = attempts.iter().map(|a| a.agent.as_str()).collect();
    assert_eq!(agents, vec!["claude", "codex"]);
    assert_eq!(attempts[1].status, Some(AttemptStatus::Succeeded));
    let task = w.task(&store, &id);
    assert_eq!((task.state, task.failures), (TaskState::Landed, 0));
}

#[tokio::test]
async fn an_identity_over_its_daily_ceiling_waits_for_the_next_utc_day_without_a_failure() {
    let w = World::with(|home| {
        let path = home.join("identities.yaml");
        let text = std::fs::read_to_string(&path).expect("identities.yaml");
        let text = text.replace(
            "  - name: demo\n",
            "  - name: demo\n    cost_ceiling_usd_per_day: 0.01\n",
        );
        std::fs::write(&path, text).expect("write");
    });
    w.runtime.push(claude_fixes());
    let orch = w.orchestrator();
    let store = w.store(&orch);
    let first = w.offer(&store);
    assert!(w.attempt(&orch, &store, &first).await.is_landed());
    let second = w.offer(&store);

    let end = w.attempt(&orch, &store, &second).await;

    let AttemptEnd::Retry { at: due, reason } = end else {
        panic!("not a wait: {end:?}")
    };
    let tomorrow = polyphony::identity_policy::utc_day_start(w.now) + chrono::Duration::days(1);
    assert_eq!(due, tomorrow);
    assert!(
        reason.starts_with("identity `demo` spent $0.01 of its $0.01 daily ceiling; waits until 00:00 UTC (largest: octo/sample#1 attempt 1"),
        "{reason}"
    );
    let task = w.task(&store, &second);
    assert_eq!((task.state, task.failures), (TaskState::Failed, 0));
    assert_eq!(task.next_attempt_at, Some(tomorrow));
    // Held before any container: only the first task's three.
    assert_eq!(w.runtime.created().len(), 3);
}

#[tokio::test]
async fn a_home_without_identities_runs_the_agent_without_credentials() {
    let w = World::with(|home| {
        std::fs::remove_file(home.join("identities.yaml")).expect("remove identities.yaml");
        let path = home.join("config.yaml");
        let text = std::fs::read_to_string(&path).expect("config.yaml");
        std::fs::write(&path, text.replace("default_identity: demo\n", "")).expect("write");
    });
    w.runtime.push(claude_fixes());
    let orch = w.orchestrator();
    let store = w.store(&orch);
    let id = w.offer(&store);

    let end = w.attempt(&orch, &store, &id).await;

    assert!(end.is_landed(), "{end:?}");
    assert_eq!(w.task(&store, &id).state, TaskState::Landed);
    assert_eq!(store.attempts(&id).expect("attempts")[0].identity, "(none)");
    let agent = &w.runtime.created()[0];
    assert!(
        agent
            .mounts
            .iter()
            .all(|m| !m.container_path.starts_with("/polyphony/credentials")),
        "{:?}",
        agent.mounts
    );
    assert!(agent.env_from_host.is_empty(), "{:?}", agent.env_from_host);
}

#[tokio::test]
async fn an_agent_past_its_deadline_times_out_and_is_retried() {
    let w = World::with(|home| {
        let path = home.join("config.yaml");
        let text = std::fs::read_to_string(&path).expect("config.yaml");
        std::fs::write(&path, text.replace("deadline: 2m", "deadline: 1s")).expect("write");
    });
    w.runtime.push(
        transcript("claude/real_2.1.332_lands_1.ndjson")
            .writes("calc.sh", FIXED_CALC)
            .hangs(),
    );
    let orch = w.orchestrator();
    let store = w.store(&orch);
    let id = w.offer(&store);

    let end = w.attempt(&orch, &store, &id).await;

    assert!(matches!(end, AttemptEnd::Retry { .. }), "{end:?}");
    let attempt = &store.attempts(&id).expect("attempts")[0];
    assert_eq!(attempt.status, Some(AttemptStatus::Timeout));
    assert_eq!(w.task(&store, &id).failures, 1);
    assert!(w.runtime.live().is_empty(), "{:?}", w.runtime.live());
}

#[tokio::test]
async fn a_taken_branch_name_lands_under_this_homes_variant() {
    let w = World::new();
    w.runtime.push(claude_fixes());
    let orch = w.orchestrator();
    let store = w.store(&orch);
    let id = w.offer(&store);
    let key = polyphony::workspace::task_key(&id).expect("a key");
    let taken = polyphony::workspace::branch_name(&orch.config.global().git.branch_prefix, &key, 1);
    // Unrelated history under the attempt's branch name (a reset home, another instance).
    let other_author = ("Other", "other@example.invalid");
    let tree = git(&w.origin, &["hash-object", "-w", "-t", "tree", "/dev/null"]);
    let other = git_as(
        other_author,
        &w.origin,
        &["commit-tree", &tree, "-m", "someone else's work"],
    );
    git(
        &w.origin,
        &["update-ref", &format!("refs/heads/{taken}"), &other],
    );

    let end = w.attempt(&orch, &store, &id).await;

    let AttemptEnd::Landed { branch, .. } = end else {
        panic!("not landed: {end:?}")
    };
    assert_eq!(branch, format!("{taken}-{}", &orch.home_label[..6]));
    // On the same attempt, without a failure.
    let task = w.task(&store, &id);
    assert_eq!(
        (task.state, task.attempts, task.failures),
        (TaskState::Landed, 1, 0)
    );
    assert_eq!(w.origin_branch(&taken), Some(other), "never forced");
    assert_eq!(w.origin_file(&branch, "calc.sh"), FIXED_CALC);
}

/// Runs one attempt of `id` with an agent that never ends, cancelling once it runs.
async fn cancelled_attempt(
    w: &World,
    orch: &Orchestrator,
    store: &Store,
    id: &str,
    means_retry: bool,
) -> AttemptEnd {
    w.runtime
        .push(transcript("claude/real_2.1.332_lands_1.ndjson").hangs());
    let claimed = store.claim(id, w.now).expect("claim").expect("claimable");
    let (mut opts, cancel) = w.opts();
    opts.cancel_means_retry = means_retry;
    let progress = w.progress.clone();
    let task = id.to_string();
    let canceller = tokio::spawn(async move {
        while !progress.path_of(&task).contains(&TaskState::Running) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = cancel.send(true);
        cancel
    });
    let end = orch.run_claimed(claimed, &opts).await.expect("an attempt");
    drop(canceller.await);
    end
}

#[tokio::test]
async fn a_cancelled_attempt_is_held_and_a_shutdown_retries_at_once() {
    let w = World::new();
    let orch = w.orchestrator();
    let now = w.now;
    let store = w.store(&orch);
    let id = w.offer(&store);

    let end = cancelled_attempt(&w, &orch, &store, &id, false).await;
    assert!(matches!(end, AttemptEnd::Held { .. }), "{end:?}");
    let task = w.task(&store, &id);
    assert_eq!(
        (task.state, task.failures, task.next_attempt_at),
        (TaskState::Failed, 0, None)
    );
    assert_eq!(
        store.attempts(&id).expect("attempts")[0].status,
        Some(AttemptStatus::Cancelled)
    );

    // A person runs it again; this time a daemon shutdown stops it.
    store.set_retry(&id, 0, Some(now)).expect("set retry");
    let end = cancelled_attempt(&w, &orch, &store, &id, true).await;
    assert_eq!(
        end,
        AttemptEnd::Retry {
            at: now,
            reason: "agent claude ended cancelled: cancelled; container killed".into()
        }
    );
    let task = w.task(&store, &id);
    assert_eq!(
        (task.state, task.failures, task.next_attempt_at),
        (TaskState::Failed, 0, Some(now))
    );
    assert!(w.runtime.live().is_empty(), "{:?}", w.runtime.live());
}

#[tokio::test]
async fn three_failures_block_the_task_through_spawns_loop() {
    let w = World::new();
    for _ in 0..3 {
        w.runtime.push(claude_misses());
    }
    let mut orch = w.orchestrator();
    // No backoff: the loop's waits are the policy's, not this test's.
    orch.policy.base = Duration::ZERO;
    let store = w.store(&orch);
    let id = w.offer(&store);
    let task = w.task(&store, &id);
    let (opts, cancel) = w.opts();
    let said = std::sync::Mutex::new(Vec::new());
    let say = |line: &str| said.lock().expect("lock").push(line.to_string());

    let end = drive(&orch, &store, task, &opts, cancel.subscribe(), &say)
        .await
        .expect("driven");

    let Some(AttemptEnd::Blocked { reason }) = end else {
        panic!("not blocked: {end:?}")
    };
    assert_eq!(
        reason,
        "3 failed attempt(s), the limit is max_attempts = 3; last: verification failed: test exited 1"
    );
    let task = w.task(&store, &id);
    assert_eq!((task.state, task.failures), (TaskState::Blocked, 3));
    assert_eq!(store.attempts(&id).expect("attempts").len(), 3);
    // Reported at the tracker once, with each attempt's reason; each attempt claimed.
    let blocks = w.tracker.blocks();
    assert_eq!(blocks.len(), 1, "{blocks:?}");
    let reasons: Vec<(u32, &str)> = blocks[0]
        .1
        .attempts
        .iter()
        .map(|a| (a.attempt, a.reason.as_str()))
        .collect();
    assert_eq!(
        reasons,
        vec![
            (1, "verification failed: test exited 1"),
            (2, "verification failed: test exited 1"),
            (3, "verification failed: test exited 1")
        ]
    );
    let claimed: Vec<u32> = w.tracker.claims().iter().map(|c| c.info.attempt).collect();
    assert_eq!(claimed, vec![1, 2, 3]);
    assert!(store.block_reported_at(&id).expect("reported").is_some());
    let said = said.lock().expect("lock").clone();
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(
        said[0].starts_with("FAILED (verification failed: test exited 1); next attempt at"),
        "{said:?}"
    );
}

#[tokio::test]
async fn a_failed_check_is_repaired_on_the_retry_whose_prompt_carries_it() {
    let w = World::new();
    w.runtime.push(claude_misses()).push(claude_fixes());
    let mut orch = w.orchestrator();
    orch.policy.base = Duration::ZERO;
    let store = w.store(&orch);
    let id = w.offer(&store);
    let (opts, cancel) = w.opts();

    let end = drive(
        &orch,
        &store,
        w.task(&store, &id),
        &opts,
        cancel.subscribe(),
        &|_| {},
    )
    .await
    .expect("driven");

    let Some(AttemptEnd::Landed { branch, .. }) = end else {
        panic!("not landed: {end:?}")
    };
    let task = w.task(&store, &id);
    assert_eq!((task.state, task.failures), (TaskState::Landed, 1));
    let attempts = store.attempts(&id).expect("attempts");
    assert_eq!(attempts.len(), 2);
    let test1 = attempts[0]
        .evidence
        .iter()
        .find(|e| e.name == "test")
        .expect("attempt 1 ran the test check");
    assert_eq!((test1.exit_code, test1.passed), (Some(1), false));
    assert!(
        test1.output_tail.contains("FAIL: add 2 3 gave -1"),
        "{}",
        test1.output_tail
    );
    assert_eq!(attempts[1].status, Some(AttemptStatus::Succeeded));
    assert_eq!(w.origin_file(&branch, "calc.sh"), FIXED_CALC);
    // The repair prompt carried attempt 1's failing check and its output.
    let prompt = |spec: &polyphony::runtime::ContainerSpec| {
        format!(
            "{} {}",
            spec.stdin.clone().unwrap_or_default(),
            spec.cmd.join(" ")
        )
    };
    let agents: Vec<_> = w
        .runtime
        .created()
        .into_iter()
        .filter(|s| s.role == polyphony::runtime::Role::Agent)
        .collect();
    assert_eq!(agents.len(), 2);
    assert!(prompt(&agents[0]).contains("None: this is the first attempt."));
    let second = prompt(&agents[1]);
    assert!(
        second.contains("failed verification") && second.contains("FAIL: add 2 3 gave -1"),
        "{second}"
    );
}

/// Issue 14 through `spawn`'s loop: claude and then codex meet their usage limits, so the
/// task waits for claude's reset (the default cool-down, 2 s here, since this transcript
/// names no time) without a failure, says so, and lands on claude after the reset.
#[tokio::test]
async fn spawn_waits_for_the_earliest_reset_when_every_agent_is_out_and_counts_nothing() {
    let w = World::with(|home| {
        let path = home.join("config.yaml");
        let text = std::fs::read_to_string(&path).expect("config.yaml");
        std::fs::write(&path, format!("{text}quota_default_cooldown: 2s\n")).expect("write");
    });
    w.runtime
        .push(transcript("claude/real_2.1.332_quota_1.ndjson"))
        .push(transcript("codex/usage_limit_constructed.ndjson"))
        .push(claude_fixes());
    let mut orch = w.orchestrator();
    // The wait is real: the clock starts at the test's time and moves with the machine's.
    let (start, ticking) = (w.now, std::time::Instant::now());
    orch.clock = Arc::new(move || {
        start + chrono::Duration::from_std(ticking.elapsed()).expect("a duration")
    });
    let store = w.store(&orch);
    let id = w.offer(&store);
    let task = w.task(&store, &id);
    let (opts, cancel) = w.opts();
    let said = std::sync::Mutex::new(Vec::new());
    let say = |line: &str| said.lock().expect("lock").push(line.to_string());
    let started = std::time::Instant::now();

    let end = drive(&orch, &store, task, &opts, cancel.subscribe(), &say)
        .await
        .expect("driven");

    assert!(matches!(end, Some(ref e) if e.is_landed()), "{end:?}");
    let said = said.lock().expect("lock").clone();
    assert!(
        said.iter().any(
            |l| l.starts_with("waiting for a usage limit: claude resets ")
                // The reset is 2 s away: on a loaded machine the line may be printed
                // within a second of it, which reads "(now)".
                && (l.contains(" UTC (in ") || l.contains(" UTC (now)"))
                && l.ends_with("); no failure counted")
        ),
        "{said:?}"
    );
    assert!(
        !said.iter().any(|l| l.contains("allowed failures")),
        "{said:?}"
    );
    assert!(started.elapsed() >= Duration::from_secs(1), "no wait");
    let task = w.task(&store, &id);
    assert_eq!((task.state, task.failures), (TaskState::Landed, 0));
    let attempts = store.attempts(&id).expect("attempts");
    let agents: Vec<&str> = attempts.iter().map(|a| a.agent.as_str()).collect();
    assert_eq!(agents, vec!["claude", "codex", "claude"]);
    assert_eq!(store.quota_wait(&id).expect("quota wait"), None);
}

/// Issue 24: secrets are scrubbed in what a line decodes to, not only in its raw spelling.
/// An agent prints a token shape behind a `\u0073` escape, its identity's API key fully
/// `\u`-escaped, and the same key split by a JSON `\n` inside one string. None of the
/// decoded values (nor the halves) may reach queue.db, `logs`, `logs --json` or the API.
#[tokio::test]
async fn secrets_behind_json_escapes_never_reach_the_store_logs_or_the_api() {
    let key = "pk-it-Zq8rXy0123456789abcdefWvU";
    let shaped = "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUv";
    let w = World::with(|home| {
        let path = home.join("identities.yaml");
        let text = std::fs::read_to_string(&path).expect("identities.yaml");
        let text = text.replace(
            "  - name: demo\n",
            "  - name: demo\n    api_keys:\n      FAKE_API_KEY: POLY_IT_LEAKED_KEY\n",
        );
        std::fs::write(&path, text).expect("write");
    });
    let escaped: String = key
        .chars()
        .map(|c| format!("\\u{:04x}", c as u32))
        .collect();
    let (a, b) = key.split_at(key.len() / 2);
    let says = |text: &str| {
        format!(
            r#"{{"type":"assistant","message":{{"content":[{{"type":"text","text":"{text}"}}],"id":"msg_leak","model":"claude-opus-5-5","role":"assistant","type":"message"}},"session_id":"s"}}"#
        )
    };
    let mut script = claude_fixes();
    let result = script.stdout.pop().expect("a result line");
    script
        .stdout
        .push(says(&format!("token \\u0073{}", &shaped[1..])));
    script.stdout.push(says(&format!("key {escaped} end")));
    script.stdout.push(says(&format!("split {a}\\n{b} end")));
    script.stdout.push(result);
    w.runtime.push(script);
    let orch = w.orchestrator_with_env(&[("POLY_IT_LEAKED_KEY", key)]);
    let store = w.store(&orch);
    let id = w.offer(&store);
    assert!(w.attempt(&orch, &store, &id).await.is_landed());

    let db = orch.db_path();
    let mut seen: Vec<(String, String)> = Vec::new();
    for name in ["queue.db", "queue.db-wal"] {
        if let Ok(bytes) = std::fs::read(db.with_file_name(name)) {
            seen.push((name.into(), String::from_utf8_lossy(&bytes).into_owned()));
        }
    }
    for args in [
        vec!["logs", &id],
        vec!["logs", &id, "--raw"],
        vec!["logs", &id, "--json"],
    ] {
        let out = assert_cmd::Command::cargo_bin("polyphony")
            .expect("the binary")
            .env("POLYPHONY_HOME", &w.home)
            .env("NO_COLOR", "1")
            .args(&args)
            .output()
            .expect("logs");
        assert!(out.status.success(), "{args:?}: {out:?}");
        seen.push((
            args.join(" "),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        ));
    }
    let addr = crate::http::start(crate::http::settings(db.clone(), None, false)).await;
    let path = format!(
        "/api/v1/tasks/{}/events",
        polyphony::http::encode_segment(&id)
    );
    let events = crate::http::sse(addr, &path, None).await;
    assert!(events.len() > 4, "{events:?}");
    seen.push(("the API's events".into(), format!("{events:?}")));
    let logs = &seen
        .iter()
        .find(|(n, _)| n.ends_with("--json"))
        .expect("logs --json")
        .1;
    assert!(logs.contains("token ***"), "{logs}");
    assert!(logs.contains("key *** end"), "{logs}");
    assert!(logs.contains("split *** end"), "{logs}");
    for (name, text) in &seen {
        for secret in [key, shaped, a, b, &shaped[1..]] {
            assert!(!text.contains(secret), "{name} holds a secret:\n{text}");
        }
    }
}

/// Issue 29: a check command the check image does not have (`sh` says "not found", exit
/// 127) is a configuration failure naming the command and `verify.image`: BLOCKED after
/// one attempt, not retried three times.
#[tokio::test]
async fn a_check_command_missing_from_the_image_blocks_at_once_naming_it() {
    let w = World::new();
    // The base branch's .polyphony.yaml names a test command no image has.
    let work = w._dir.path().join("edit");
    git(
        w._dir.path(),
        &["clone", "-q", w.origin.to_str().unwrap(), "edit"],
    );
    std::fs::write(
        work.join(".polyphony.yaml"),
        "test: polyphony-no-such-tool -m pytest\n",
    )
    .unwrap();
    git(&work, &["commit", "-qam", "checks need a tool"]);
    git(&work, &["push", "-q", "origin", "HEAD"]);
    w.runtime.push(claude_fixes());
    w.runtime.push(claude_fixes());
    let orch = w.orchestrator();
    let store = w.store(&orch);
    let id = w.offer(&store);

    let end = w.attempt(&orch, &store, &id).await;

    let AttemptEnd::Blocked { reason } = end else {
        panic!("not blocked at once: {end:?}")
    };
    assert!(
        reason.contains("polyphony-no-such-tool -m pytest"),
        "{reason}"
    );
    assert!(reason.contains("verify.image"), "{reason}");
    let task = w.task(&store, &id);
    assert_eq!(task.state, TaskState::Blocked);
    assert_eq!(store.attempts(&id).expect("attempts").len(), 1);
    assert!(w.origin_branch(&w.branch(&orch, &id, 1)).is_none());
}

/// Issue 24: a forged result line reporting $1000 counts for no more than what is left
/// of the identity's daily ceiling, so the identity's spend never passes its ceiling.
#[tokio::test]
async fn a_forged_cost_counts_no_more_than_what_is_left_of_the_ceiling() {
    let w = World::with(|home| {
        let path = home.join("identities.yaml");
        let text = std::fs::read_to_string(&path).expect("identities.yaml");
        let text = text.replace(
            "  - name: demo\n",
            "  - name: demo\n    cost_ceiling_usd_per_day: 0.05\n",
        );
        std::fs::write(&path, text).expect("write");
    });
    let mut script = claude_fixes();
    let result = script.stdout.pop().expect("a result line");
    let mut forged: serde_json::Value = serde_json::from_str(&result).expect("json");
    forged["total_cost_usd"] = serde_json::json!(1000.0);
    script.stdout.push(forged.to_string());
    w.runtime.push(script);
    let orch = w.orchestrator();
    let store = w.store(&orch);
    let id = w.offer(&store);
    assert!(w.attempt(&orch, &store, &id).await.is_landed());
    let attempts = store.attempts(&id).expect("attempts");
    let cost = attempts[0].cost_usd.expect("a cost");
    assert!((cost - 0.05).abs() < 1e-9, "counted {cost}");
    let day = polyphony::identity_policy::utc_day_start(w.now);
    let spent = store.cost_spent_since("demo", day).expect("spent");
    assert!(spent <= 0.05 + 1e-9, "the identity spent {spent} of 0.05");
}

/// The tracker, except that its poll is where the daemon's first signal arrives, with a
/// task due now: a SIGTERM landing while the daemon polls GitHub.
struct SignalDuringPoll {
    inner: MemorySource,
    signals: Arc<watch::Sender<u32>>,
    due: std::sync::Mutex<Option<(PathBuf, Task)>>,
}

#[async_trait::async_trait]
impl polyphony::sources::Source for SignalDuringPoll {
    fn kind(&self) -> SourceKind {
        self.inner.kind()
    }
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn reports_back(&self) -> bool {
        self.inner.reports_back()
    }
    async fn poll_each(&self) -> polyphony::sources::Polled {
        let due = self.due.lock().unwrap().take();
        if let Some((db, task)) = due {
            Store::open(&db).unwrap().insert_task(&task).unwrap();
            self.signals.send_modify(|n| *n += 1);
        }
        self.inner.poll_each().await
    }
    async fn fetch(&self, reference: &str) -> Result<Task, polyphony::sources::SourceError> {
        self.inner.fetch(reference).await
    }
    async fn claim_resuming(
        &self,
        task: &Task,
        info: &polyphony::sources::ClaimInfo,
        resuming: bool,
    ) -> Result<polyphony::sources::ClaimedTask, polyphony::sources::ClaimError> {
        self.inner.claim_resuming(task, info, resuming).await
    }
    async fn land(
        &self,
        task: &Task,
        landed: &polyphony::sources::Landed,
    ) -> Result<polyphony::sources::Reported, polyphony::sources::SourceError> {
        self.inner.land(task, landed).await
    }
    async fn block(
        &self,
        task: &Task,
        blocked: &polyphony::sources::Blocked,
    ) -> Result<polyphony::sources::Reported, polyphony::sources::SourceError> {
        self.inner.block(task, blocked).await
    }
    async fn cancelled(
        &self,
        task: &Task,
        reason: &str,
    ) -> Result<polyphony::sources::Reported, polyphony::sources::SourceError> {
        self.inner.cancelled(task, reason).await
    }
    async fn reply(
        &self,
        task: &Task,
        place: polyphony::sources::ReplyPlace,
        marker: &str,
        body: &str,
    ) -> Result<u64, polyphony::sources::SourceError> {
        self.inner.reply(task, place, marker, body).await
    }
    async fn offer_again(&self, task: &Task) -> Result<(), polyphony::sources::SourceError> {
        self.inner.offer_again(task).await
    }
    fn push_token(&self) -> Option<&str> {
        self.inner.push_token()
    }
}

/// Issue 24 (`e2e::sigterm_with_drain_lets_the_attempt_land` once landed with two
/// attempts): the first signal stops claiming, also when it arrives while the daemon is
/// polling its sources. The loop read the signals once per round, before the poll, so a
/// signal met during the poll still let that round claim what was due: a retry, or an
/// issue labelled after the signal.
#[tokio::test]
async fn a_signal_during_the_poll_stops_the_claims_of_that_round() {
    let w = World::new();
    w.runtime.push(claude_fixes());
    let (tx, rx) = watch::channel(0u32);
    let mut task = Task::new(
        "local-1",
        SourceKind::Local,
        "local:local-1",
        w.origin.display().to_string(),
        "Fix add()",
        w.now,
    );
    task.body = "add() subtracts; make `sh test.sh` pass.".into();
    let orch = w.orchestrator();
    let poll = SignalDuringPoll {
        inner: w.tracker.clone(),
        signals: Arc::new(tx),
        due: std::sync::Mutex::new(Some((orch.db_path(), task))),
    };
    let orch = Arc::new(orch.with_source(Arc::new(poll)));
    let opts = polyphony::orchestrator::daemon::DaemonOptions {
        drain: true,
        ..Default::default()
    };
    let summary = tokio::time::timeout(
        Duration::from_secs(60),
        polyphony::orchestrator::daemon::run(orch.clone(), opts, w.progress.clone(), rx),
    )
    .await
    .expect("the daemon stops")
    .expect("the daemon");
    assert_eq!(summary.attempts, 0, "{summary:?}");
    let store = w.store(&orch);
    let task = store.get_task("local-1").unwrap().unwrap();
    assert_eq!(task.state, TaskState::Discovered, "{task:?}");
    assert_eq!(task.attempts, 0);
}

/// Runs the daemon on `orch` until nothing is left to do (its start-up reconciliation
/// first: the re-attached attempts and the pending intents), as a restart does.
async fn restart(w: &World, orch: Orchestrator) -> polyphony::orchestrator::daemon::DaemonSummary {
    use polyphony::orchestrator::daemon::{self, DaemonOptions};
    let (_signals, rx) = watch::channel(0u32);
    let opts = DaemonOptions {
        drain: false,
        exit_when_idle: true,
        upkeep: None,
    };
    let run = daemon::run(Arc::new(orch), opts, w.progress.clone(), rx);
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the daemon exits once idle")
        .expect("the daemon runs")
}

/// Issue 19 on the in-memory tracker: the daemon dies while the tracker opens the pull
/// request (the report made, its answer never read). The restart finishes the recorded
/// landing intent once: the verified sha lands without the agent running again, the
/// tracker finds its own pull request (one opened, not two), nothing is claimed again,
/// and no failure is counted.
#[tokio::test]
async fn a_daemon_killed_during_the_landing_report_lands_once_on_restart() {
    let w = World::new();
    w.runtime.push(claude_fixes());
    w.tracker.stall_next(Op::Land);
    let orch = w.orchestrator();
    let store = w.store(&orch);
    let id = w.offer(&store);

    // The kill: the attempt's future is dropped while it waits for the tracker.
    let tracker = w.tracker.clone();
    tokio::select! {
        end = w.attempt(&orch, &store, &id) => panic!("the landing report answered: {end:?}"),
        () = async {
            while tracker.lands().is_empty() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        } => {}
    }
    let branch = w.branch(&orch, &id, 1);
    drop(orch);
    let task = w.task(&store, &id);
    assert_eq!(task.state, TaskState::Verifying);
    assert!(
        store
            .pending_intent(&id, IntentKind::Land, 1)
            .expect("intents")
            .is_some(),
        "the landing is a recorded intent"
    );

    let summary = restart(&w, w.orchestrator()).await;

    assert_eq!(summary.resumed, 1, "{summary:?}");
    let task = w.task(&store, &id);
    assert_eq!(
        (task.state, task.failures, task.attempts),
        (TaskState::Landed, 0, 1)
    );
    assert!(
        store.pending_intents().expect("intents").is_empty(),
        "every intent finished"
    );
    // Reported again (idempotently) and found: one pull request, on the attempt's branch.
    assert_eq!(w.tracker.pulls(), vec![id.clone()]);
    let lands = w.tracker.lands();
    assert!(
        lands.iter().all(|(t, l)| *t == id && l.branch == branch),
        "{lands:?}"
    );
    assert_eq!(w.tracker.claims().len(), 1, "the claim is not made again");
    assert!(w.tracker.blocks().is_empty());
    let agents = w
        .runtime
        .created()
        .iter()
        .filter(|c| c.labels.get(LABEL_ROLE).map(String::as_str) == Some("agent"))
        .count();
    assert_eq!(agents, 1, "the agent ran once");
    let attempts = store.attempts(&id).expect("attempts");
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].status, Some(AttemptStatus::Succeeded));
    assert_eq!(w.origin_file(&branch, "calc.sh"), FIXED_CALC);
    assert!(w.runtime.live().is_empty(), "{:?}", w.runtime.live());
}

/// Issue 29 through the port: a cancel is told to the task's source (`Source::cancelled`,
/// the claim released there) by a recorded intent; when the tracker does not answer, the
/// next start tells it, once, and a further start tells nothing again. A local task's
/// cancel tells no one. No failure is counted.
#[tokio::test]
async fn a_cancel_the_tracker_missed_is_told_once_by_the_next_start() {
    use polyphony::orchestrator::cancel::{self, Begun};
    let w = World::new();
    let orch = w.orchestrator();
    let store = w.store(&orch);
    let id = w.offer(&store);
    let local = w.enqueue_local(&store);
    let request = polyphony::store::CancelRequest {
        by: cancel::by_whom("alice", "cli"),
        at: w.now,
    };
    w.tracker.fail_next(Op::Cancelled, SourceFailure::Transient);

    for task in [&id, &local] {
        let begun = cancel::begin(&store, &orch.sources, task, &request)
            .expect("the store")
            .expect("cancellable");
        let Begun::Settled { task, from } = begun else {
            panic!("nothing runs: {begun:?}")
        };
        assert_eq!(
            (task.state, from),
            (TaskState::Cancelled, TaskState::Discovered)
        );
        let told = cancel::report(&orch.store, &orch.sources, &task, w.now)
            .await
            .expect("the store");
        // The tracker failed once; the local queue has nothing to be told.
        assert_eq!(told, task.id == local, "{}", task.id);
    }
    assert!(w.tracker.cancels().is_empty());
    let pending: Vec<(String, IntentKind)> = store
        .pending_intents()
        .expect("intents")
        .into_iter()
        .map(|i| (i.task_id, i.kind))
        .collect();
    assert_eq!(pending, vec![(id.clone(), IntentKind::Cancel)]);
    drop(orch);

    restart(&w, w.orchestrator()).await;
    restart(&w, w.orchestrator()).await;

    let reason = "cancelled by alice (cli)".to_string();
    assert_eq!(w.tracker.cancels(), vec![(id.clone(), reason)]);
    assert!(store.pending_intents().expect("intents").is_empty());
    for task in [&id, &local] {
        let task = w.task(&store, task);
        assert_eq!((task.state, task.failures), (TaskState::Cancelled, 0));
    }
    assert!(w.tracker.claims().is_empty(), "nothing was claimed");
    assert!(w.runtime.created().is_empty(), "nothing ran");
}
