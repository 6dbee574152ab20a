//! A fleet on one queue (issue 27), deterministic: the daemon's ownership of claims on
//! SQLite, with the other machines' daemons played through the store API and a second
//! orchestrator (two homes cannot share one queue file: the lock refuses). The real
//! pipeline over the scripted runtime, real git origins, the in-memory tracker and test
//! clocks, as tests/it/orchestrator.rs.
//!
//! - another machine's live claim is never touched;
//! - an expired lease of a lost machine is taken over: a landing it pushed is finished
//!   (one pull request, no second push), an attempt it did not get to push ends as an
//!   interruption and the next attempt lands, with no failure counted;
//! - a daemon whose lease runs low refuses to push and records nothing;
//! - a task enqueued with a local path is pinned to the enqueuing machine.
//!
//! Three daemons on PostgreSQL (the fleet test proper) need the full store there.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use polyphony::config::Config;
use polyphony::demo::{write_home, write_sample_repo};
use polyphony::domain::{AttemptStatus, SourceKind, Task, TaskState, TaskType};
use polyphony::orchestrator::daemon::{self, DaemonOptions, DaemonSummary};
use polyphony::orchestrator::lease::Leases;
use polyphony::orchestrator::pipeline::RunOptions;
use polyphony::orchestrator::{AttemptEnd, Orchestrator, RecordingProgress};
use polyphony::runtime::scripted::{AgentScript, ScriptedRuntime};
use polyphony::sources::memory::MemorySource;
use polyphony::store::{IntentKind, Owner, Store};
use tokio::sync::watch;

const FIXED_CALC: &str = "# Arithmetic helpers for the demo project.\nadd() {\n    a=$1\n    b=$2\n    echo $((a + b))\n}\n";

fn claude_fixes() -> AgentScript {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/claude/real_2.1.332_lands_1.ndjson");
    AgentScript::transcript(&path)
        .expect("a fixture transcript")
        .writes("calc.sh", FIXED_CALC)
}

fn at(s: &str) -> DateTime<Utc> {
    s.parse().expect("a timestamp")
}

fn secs(n: i64) -> chrono::Duration {
    chrono::Duration::seconds(n)
}

fn owner(machine: &str) -> Owner {
    Owner {
        machine: machine.into(),
        pid: 4242,
        nonce: format!("{machine}-nonce"),
    }
}

struct World {
    _dir: tempfile::TempDir,
    home: PathBuf,
    origin: PathBuf,
    runtime: ScriptedRuntime,
    tracker: MemorySource,
    t0: DateTime<Utc>,
}

impl World {
    fn new() -> World {
        // This home is machine m1 of the fleet; short leases keep the test fast.
        World::with_store("store:\n  machine: m1\n  lease: 30s\n  heartbeat: 1s\n")
    }

    /// A world whose home's config.yaml ends with `store` (a `store:` block).
    fn with_store(store: &str) -> World {
        let dir = tempfile::tempdir().expect("a temp dir");
        let origin = write_sample_repo(dir.path()).expect("the sample origin");
        let home = dir.path().join("home");
        write_home(&home, dir.path(), "polyphony-test:scripted").expect("a home");
        let config = home.join("config.yaml");
        let mut text = std::fs::read_to_string(&config).expect("config.yaml");
        text.push_str(store);
        std::fs::write(&config, text).expect("config.yaml");
        World {
            _dir: dir,
            home,
            origin,
            runtime: ScriptedRuntime::new(),
            tracker: MemorySource::new(SourceKind::Github),
            t0: at("2026-12-01T12:00:00Z"),
        }
    }

    /// An orchestrator of `machine` (m1 is this home's own) whose clock stands at `now`.
    fn orchestrator(&self, machine: &str, now: DateTime<Utc>) -> Orchestrator {
        let config = Config::load(&self.home).expect("the home's config");
        let mut orch =
            Orchestrator::with_runtime(config, Arc::new(self.runtime.clone()), Arc::new(|_| None))
                .expect("an orchestrator")
                .with_source(Arc::new(self.tracker.clone()));
        orch.clock = Arc::new(move || now);
        if machine != "m1" {
            orch.leases = Arc::new(Leases::new(
                owner(machine),
                Duration::from_secs(30),
                Duration::from_secs(1),
            ));
        }
        orch
    }

    fn store(&self) -> Store {
        Store::open(&self.home.join("queue.db")).expect("the store")
    }

    /// An issue of `octo/sample` at the tracker, recorded as the daemon's poll would.
    fn offer(&self, store: &Store) -> String {
        self.offer_issue(store, self.tracker.offered().len() + 1)
    }

    /// Issue `n` of `octo/sample` at this world's tracker, recorded in `store` (two worlds
    /// on one store offer different numbers).
    fn offer_issue(&self, store: &Store, n: usize) -> String {
        let id = format!("octo/sample#{n}");
        let mut task = Task::new(
            &id,
            SourceKind::Github,
            id.clone(),
            self.origin.display().to_string(),
            "Fix add()",
            self.t0,
        );
        task.body = "add() subtracts; make `sh test.sh` pass.".into();
        task.task_type = TaskType::Bugfix;
        self.tracker.offer(task.clone());
        store.insert_task(&task).expect("insert");
        id
    }

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

    /// A lost machine's attempt: `machine` claims `id` with a lease that is already low
    /// when it is about to push, so its attempt stops there (recorded intent, no push),
    /// as a machine dying between the intent and the push would leave it.
    async fn lost_attempt(&self, store: &Store, machine: &str) -> Task {
        self.runtime.push(claude_fixes());
        let lost = self.orchestrator(machine, self.t0);
        let claimed = store
            .claim_next_owned(&owner(machine), Duration::from_secs(5), self.t0)
            .expect("claim")
            .expect("a task to claim");
        let (_tx, rx) = watch::channel(false);
        let opts = RunOptions {
            progress: Arc::new(RecordingProgress::new()),
            cancel: rx,
            cancel_means_retry: true,
        };
        let end = lost
            .run_claimed(claimed.clone(), &opts)
            .await
            .expect("an attempt");
        assert!(matches!(end, AttemptEnd::LeaseLost { .. }), "{end:?}");
        let task = store.get_task(&claimed.id).unwrap().unwrap();
        assert_eq!(
            task.state,
            TaskState::Verifying,
            "nothing recorded after the refusal"
        );
        assert!(store
            .pending_intent(&task.id, IntentKind::Land, 1)
            .unwrap()
            .is_some());
        task
    }

    /// Runs the m1 daemon (clock at `now`) until `done` holds for the store, then stops it.
    async fn daemon_until(&self, now: DateTime<Utc>, done: impl Fn(&Store) -> bool) {
        let orch = Arc::new(self.orchestrator("m1", now));
        run_daemon_until(orch, &self.store(), done).await;
    }
}

/// Runs `orch`'s daemon until `done` holds for `store`, then signals it and waits for it.
/// (The daemon's future holds its store connection across awaits: it runs on this task.)
async fn run_daemon_until(orch: Arc<Orchestrator>, store: &Store, done: impl Fn(&Store) -> bool) {
    let (signals, rx) = watch::channel(0u32);
    let run = daemon::run(
        orch,
        DaemonOptions::default(),
        Arc::new(RecordingProgress::new()),
        rx,
    );
    tokio::pin!(run);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        tokio::select! {
            ended = &mut run => panic!("the daemon stopped on its own: {ended:?}"),
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
        if done(store) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the daemon did not get there in 120 s"
        );
    }
    signals.send(1).unwrap();
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the daemon stops")
        .expect("the daemon");
}

fn state(store: &Store, id: &str) -> TaskState {
    store.get_task(id).unwrap().unwrap().state
}

/// Another machine's live claim is left alone; a lost machine's expired one is taken over
/// and its pushed landing finished from here: one push (the lost machine's), one pull
/// request, LANDED, no failure counted.
#[tokio::test]
async fn a_live_claim_elsewhere_is_left_and_a_lost_machines_pushed_landing_is_finished() {
    let w = World::new();
    let store = w.store();
    // m2 is alive: it claimed the first issue and renews its lease.
    let live = w.offer(&store);
    let claimed = store
        .claim_next_owned(&owner("m2"), Duration::from_secs(3600), w.t0)
        .unwrap()
        .unwrap();
    assert_eq!(claimed.id, live);
    // m3 ran the second to its landing, pushed, and was lost before the pull request.
    let lost = w.offer(&store);
    let task = w.lost_attempt(&store, "m3").await;
    assert_eq!(task.id, lost);
    let intent = store
        .pending_intent(&lost, IntentKind::Land, 1)
        .unwrap()
        .unwrap();
    let sha = intent.payload["sha"].as_str().unwrap().to_string();
    let branch = intent.payload["branch"].as_str().unwrap().to_string();
    let own_repo = format!(
        "{}.land.git",
        store.attempts(&lost).unwrap()[0].workspace.display()
    );
    let pushed = Command::new("git")
        .arg(format!("--git-dir={own_repo}"))
        .args(["push", "-q"])
        .arg(&w.origin)
        .arg(format!("{sha}:refs/heads/{branch}"))
        .status()
        .unwrap();
    assert!(pushed.success());
    assert!(w.tracker.lands().is_empty());

    // m1's daemon starts five minutes later: m3's lease ran out long ago.
    let now = w.t0 + secs(300);
    w.daemon_until(now, |s| state(s, &lost) == TaskState::Landed)
        .await;

    let lands = w.tracker.lands();
    assert_eq!(lands.len(), 1, "one pull request: {lands:?}");
    assert_eq!(lands[0].0, lost);
    assert_eq!(lands[0].1.branch, branch);
    assert_eq!(w.origin_branch(&branch), Some(sha.clone()));
    let task = store.get_task(&lost).unwrap().unwrap();
    assert_eq!((task.attempts, task.failures), (1, 0), "{task:?}");
    let attempts = store.attempts(&lost).unwrap();
    assert_eq!(attempts.len(), 1, "no new attempt: {attempts:?}");
    assert_eq!(attempts[0].status, Some(AttemptStatus::Succeeded));
    // Only one agent ran (m3's): m1 verified and pushed nothing again.
    assert_eq!(
        w.runtime
            .created()
            .iter()
            .filter(|c| c.role == polyphony::runtime::Role::Agent)
            .count(),
        1,
        "one agent container"
    );
    assert!(store
        .pending_intent(&lost, IntentKind::Land, 1)
        .unwrap()
        .is_none());
    // m2's task: untouched, still m2's.
    assert_eq!(state(&store, &live), TaskState::Claimed);
    let claim = store.claim_of(&live).unwrap().unwrap();
    assert_eq!(claim.owner, owner("m2").key());
    assert_eq!(claim.lease_until, w.t0 + secs(3600));
}

/// A lost machine that had not pushed: the daemon taking its lease over ends that attempt
/// as an interruption (recorded as a crash, no failure counted) and lands the next one.
#[tokio::test]
async fn a_lost_machines_unpushed_attempt_is_not_a_failure_and_the_next_attempt_lands() {
    let w = World::new();
    let store = w.store();
    let id = w.offer(&store);
    w.lost_attempt(&store, "m3").await;
    let branch = store
        .pending_intent(&id, IntentKind::Land, 1)
        .unwrap()
        .unwrap()
        .payload["branch"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(w.origin_branch(&branch), None, "m3 never pushed");
    // m3 had died once inside the attempt's output window and resumed it (a strike), then
    // was lost before the resumed run made progress.
    let crumb = polyphony::store::Handling {
        window: "output".into(),
        boot: "lost-boot".into(),
    };
    store.raise_handling(&id, 1, &crumb, w.t0).unwrap();
    store.set_strikes(&id, 1, 1, w.t0).unwrap();

    w.runtime.push(claude_fixes());
    let now = w.t0 + secs(300);
    w.daemon_until(now, |s| state(s, &id) == TaskState::Landed)
        .await;

    let task = store.get_task(&id).unwrap().unwrap();
    assert_eq!((task.attempts, task.failures), (2, 0), "{task:?}");
    let attempts = store.attempts(&id).unwrap();
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[0].status, Some(AttemptStatus::Crash));
    let reason = attempts[0].reason.clone().unwrap_or_default();
    assert!(
        reason.contains("stopped renewing its lease") && reason.contains("m3/"),
        "{reason}"
    );
    assert_eq!(attempts[1].status, Some(AttemptStatus::Succeeded));
    let lands = w.tracker.lands();
    assert_eq!(lands.len(), 1, "{lands:?}");
    assert_ne!(lands[0].1.branch, branch, "attempt 2's own branch");
    // The claim is m1's daemon's until the task ended, then dropped.
    assert!(store.claim_of(&id).unwrap().is_none());
    // The ended attempt's breadcrumb and strike went with it.
    for key in [format!("handling:{id}:1"), format!("strikes:{id}:1")] {
        assert_eq!(store.kv_get(&key).unwrap(), None, "{key} left");
    }
}

/// `polyphony enqueue` of a local path pins the task to this home's machine: another
/// machine's claim passes it by, this machine's takes it.
#[tokio::test]
async fn a_local_path_task_is_pinned_to_the_machine_that_enqueued_it() {
    let w = World::new();
    let out = Command::new(env!("CARGO_BIN_EXE_polyphony"))
        .arg("--home")
        .arg(&w.home)
        .args(["enqueue", "--repo"])
        .arg(&w.origin)
        .arg("Fix add()")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let url = Command::new(env!("CARGO_BIN_EXE_polyphony"))
        .arg("--home")
        .arg(&w.home)
        .args([
            "enqueue",
            "--no-check",
            "--repo",
            "https://example.com/acme/widgets.git",
            "Anywhere",
        ])
        .output()
        .unwrap();
    assert!(url.status.success());
    let anywhere = String::from_utf8_lossy(&url.stdout).trim().to_string();
    let store = w.store();
    let now = Utc::now();
    let other = store
        .claim_next_owned(&owner("m2"), Duration::from_secs(60), now)
        .unwrap()
        .expect("the URL task is anyone's");
    assert_eq!(other.id, anywhere, "m2 passes the pinned task by");
    assert!(store
        .claim_next_owned(&owner("m2"), Duration::from_secs(60), now)
        .unwrap()
        .is_none());
    let mine = store
        .claim_next_owned(&owner("m1"), Duration::from_secs(60), now)
        .unwrap()
        .expect("m1 has the path");
    assert_eq!(mine.id, id);
}

/// The daemon claims with its owner and a lease, and its heartbeat renews the lease.
#[tokio::test]
async fn the_daemon_claims_under_its_lease_and_renews_it() {
    let w = World::new();
    let store = w.store();
    let id = w.offer(&store);
    // The agent waits for its stop: the attempt stays RUNNING while the heartbeat beats.
    w.runtime.push(claude_fixes().hangs());
    let orch = Arc::new(w.orchestrator("m1", w.t0));
    let me = orch.leases.owner.key();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let shortened = std::cell::Cell::new(false);
    run_daemon_until(orch.clone(), &store, |s| {
        assert!(
            std::time::Instant::now() < deadline,
            "never claimed and renewed"
        );
        let Some(c) = s.claim_of(&id).unwrap() else {
            return false;
        };
        assert_eq!((c.machine.as_str(), c.owner.as_str()), ("m1", me.as_str()));
        if !shortened.get() {
            assert_eq!(c.lease_until, w.t0 + secs(30));
            // Rewrite the lease shorter behind the daemon's back: the next beat puts it
            // back to now + lease.
            s.take_over(&id, &orch.leases.owner, Duration::from_secs(1), w.t0)
                .unwrap();
            shortened.set(true);
            return false;
        }
        c.lease_until == w.t0 + secs(30)
    })
    .await;
}

/// Issue 27: a daemon stopped cleanly drops its machine's alive record at once, so the
/// console's Now panel (and whatever reads `live_machines`) stops listing it now, not when
/// its lease would have run out (30 s here; the clock stands still, so it never would).
#[tokio::test]
async fn a_daemon_stopped_cleanly_is_no_longer_listed_as_a_live_machine() {
    let w = World::new();
    let store = w.store();
    let orch = Arc::new(w.orchestrator("m1", w.t0));
    run_daemon_until(orch, &store, |s| {
        s.live_machines(w.t0).unwrap().contains_key("m1")
    })
    .await;
    let live = store.live_machines(w.t0).unwrap();
    assert!(
        !live.contains_key("m1"),
        "still listed after a clean stop: {live:?}"
    );
}

/// A daemon started on this task (its future holds its store connection across awaits:
/// not `Send`, so it is polled here rather than spawned).
struct Running {
    signals: watch::Sender<u32>,
    run: std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<DaemonSummary>>>>,
}

impl Running {
    fn start(orch: Orchestrator) -> Running {
        let (signals, rx) = watch::channel(0u32);
        let run = daemon::run(
            Arc::new(orch),
            DaemonOptions::default(),
            Arc::new(RecordingProgress::new()),
            rx,
        );
        Running {
            signals,
            run: Box::pin(run),
        }
    }

    /// Signals the daemon to stop (its attempts are left running, as a kill would) and
    /// waits for it.
    async fn stop(self) {
        self.signals.send(1).unwrap();
        tokio::time::timeout(Duration::from_secs(60), self.run)
            .await
            .expect("the daemon stops")
            .expect("the daemon");
    }
}

/// Drives every daemon of `fleet` until `done` holds (looked at every 100 ms), for at
/// most `limit`.
async fn drive(
    fleet: &mut [&mut Running],
    what: &str,
    limit: Duration,
    mut done: impl FnMut() -> bool,
) {
    let deadline = tokio::time::Instant::now() + limit;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within {limit:?}: {what}"
        );
        let step = std::future::poll_fn(|cx| {
            for d in fleet.iter_mut() {
                if let std::task::Poll::Ready(ended) = d.run.as_mut().poll(cx) {
                    panic!("a daemon stopped on its own: {ended:?}");
                }
            }
            std::task::Poll::<()>::Pending
        });
        let _ = tokio::time::timeout(Duration::from_millis(100), step).await;
    }
}

/// Issue 27: on PostgreSQL leases are judged by the server's clock, not a daemon's. Two
/// daemons on one server, m1's clock an hour ahead and m2's an hour behind:
/// - m1 never takes m2's live lease (by m1's clock it ran out an hour ago);
/// - once m1 stops, its lease (written by m1's clock, it would have run an hour more)
///   runs out after its 10 s for m2 (by m2's clock, two hours more), which takes the task
///   over as a lost machine's;
/// - and the stopped m1 is no longer listed as a live machine.
/// Needs the test server (`POLYPHONY_TEST_PG_URL`): SKIPPED without, failing with `CI`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgresql_a_daemons_skewed_clock_neither_steals_a_live_lease_nor_keeps_a_dead_one() {
    let pg = tokio::task::spawn_blocking(|| crate::store_contract::postgres("fleet_skew"))
        .await
        .expect("create the test database");
    let Some(pg) = pg else { return };
    let world = |machine: &str, slots: &str| {
        let w = World::with_store(&format!(
            "store:\n  url: {}\n  machine: {machine}\n  lease: 10s\n  heartbeat: 1s\n",
            pg.handle
        ));
        let config = w.home.join("config.yaml");
        let text = std::fs::read_to_string(&config).expect("config.yaml");
        assert!(text.contains("max_concurrent_agents: 4"), "{text}");
        std::fs::write(
            &config,
            text.replace(
                "max_concurrent_agents: 4",
                &format!("max_concurrent_agents: {slots}"),
            ),
        )
        .expect("config.yaml");
        w
    };
    let (ahead, behind) = (world("m1", "1"), world("m2", "4"));
    let hour = chrono::Duration::hours(1);
    let mut m1 = ahead.orchestrator("m1", ahead.t0);
    m1.clock = Arc::new(move || Utc::now() + hour);
    let m1_key = m1.leases.owner.key();
    let mut m2 = behind.orchestrator("m2", behind.t0);
    m2.clock = Arc::new(move || Utc::now() - hour);
    let m2_key = m2.leases.owner.key();
    let store = pg.handle.open().expect("the server");
    let owner_of = |id: &str| store.claim_of(id).unwrap().map(|c| c.owner);

    // m1 (one agent slot) runs issue 1; its agent waits for its stop.
    ahead.runtime.push(claude_fixes().hangs());
    let on_m1 = ahead.offer_issue(&store, 1);
    let mut a = Running::start(m1);
    drive(
        &mut [&mut a],
        "m1 claims issue 1",
        Duration::from_secs(60),
        || owner_of(&on_m1).as_ref() == Some(&m1_key),
    )
    .await;

    // m2 runs issue 2 beside it: for several of m1's heartbeats its lease stays m2's.
    behind.runtime.push(claude_fixes().hangs());
    behind.runtime.push(claude_fixes().hangs());
    let on_m2 = behind.offer_issue(&store, 2);
    let mut b = Running::start(m2);
    drive(
        &mut [&mut a, &mut b],
        "m2 claims issue 2",
        Duration::from_secs(60),
        || owner_of(&on_m2).as_ref() == Some(&m2_key),
    )
    .await;
    let held = std::time::Instant::now();
    drive(
        &mut [&mut a, &mut b],
        "m2 holds issue 2",
        Duration::from_secs(60),
        || {
            let by = owner_of(&on_m2);
            assert_eq!(
                by.as_ref(),
                Some(&m2_key),
                "m1, an hour ahead, took m2's live lease"
            );
            assert_eq!(
                owner_of(&on_m1).as_ref(),
                Some(&m1_key),
                "m2 took m1's live lease"
            );
            held.elapsed() > Duration::from_secs(4)
        },
    )
    .await;

    // m1 stops (its attempt left running, as if its machine were lost): it is no longer a
    // live machine, and its lease runs out by the server's clock.
    a.stop().await;
    let live = store.live_machines(Utc::now()).unwrap();
    assert!(
        live.contains_key("m2") && !live.contains_key("m1"),
        "the live machines after m1's clean stop: {live:?}"
    );
    let stopped = std::time::Instant::now();
    drive(
        &mut [&mut b],
        "m2 takes over m1's expired lease",
        Duration::from_secs(40),
        || {
            let lost = store
                .attempts(&on_m1)
                .unwrap()
                .first()
                .and_then(|a| a.reason.clone())
                .is_some_and(|r| r.contains("stopped renewing its lease"));
            lost || owner_of(&on_m1).as_ref() == Some(&m2_key)
        },
    )
    .await;
    assert!(
        stopped.elapsed() < Duration::from_secs(25),
        "taken over only after {:?}",
        stopped.elapsed()
    );
    assert_eq!(owner_of(&on_m2).as_ref(), Some(&m2_key));
    b.stop().await;
}

/// Issue 27: on PostgreSQL an enqueue by another process (another machine's daemon or
/// CLI) wakes the daemon through LISTEN/NOTIFY: it claims the task at once, not at its
/// next poll (10 minutes) or heartbeat (20 s). Needs the test server
/// (`POLYPHONY_TEST_PG_URL`, scripts/pg-test-cluster.sh): SKIPPED without, failing with `CI`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgresql_another_processs_enqueue_wakes_the_daemon_before_its_poll() {
    // The admin connection blocks: off the test's runtime.
    let pg = tokio::task::spawn_blocking(|| crate::store_contract::postgres("fleet_wake"))
        .await
        .expect("create the test database");
    let Some(pg) = pg else { return };
    let w = World::with_store(&format!(
        "store:\n  url: {}\n  machine: m1\n  lease: 60s\n  heartbeat: 20s\n",
        pg.handle
    ));
    let config = w.home.join("config.yaml");
    let text = std::fs::read_to_string(&config).expect("config.yaml");
    assert!(text.contains("poll_interval: 30s"), "{text}");
    std::fs::write(
        &config,
        text.replace("poll_interval: 30s", "poll_interval: 10m"),
    )
    .expect("config.yaml");
    // Another process's connection to the same server.
    let store = pg.handle.open().expect("the server");
    // The first task shows the daemon's loop has started (its first poll and claims are
    // behind it); both attempts wait for their stop.
    w.runtime.push(claude_fixes().hangs());
    w.runtime.push(claude_fixes().hangs());
    let first = w.offer(&store);
    let orch = Arc::new(w.orchestrator("m1", w.t0));
    let second: std::cell::RefCell<Option<(String, std::time::Instant)>> = Default::default();
    run_daemon_until(orch, &store, |s| {
        let mut second = second.borrow_mut();
        match second.as_ref() {
            None => {
                if s.claim_of(&first).unwrap().is_some() {
                    // Let the loop settle into its wait, then enqueue from elsewhere.
                    std::thread::sleep(Duration::from_millis(500));
                    *second = Some((w.offer(s), std::time::Instant::now()));
                }
                false
            }
            Some((id, at)) => {
                let waited = at.elapsed();
                let claimed = s.claim_of(id).unwrap();
                assert!(
                    waited < Duration::from_secs(8) || claimed.is_some(),
                    "not claimed {waited:?} after the enqueue: the daemon waited for its poll or heartbeat"
                );
                match claimed {
                    Some(c) => {
                        assert!(waited < Duration::from_secs(8), "claimed only after {waited:?}");
                        assert_eq!(c.machine, "m1");
                        true
                    }
                    None => false,
                }
            }
        }
    })
    .await;
}
