//! The store contract suite (issue 27): the same tests, run against every backend of the
//! store port through `StoreHandle::open_shared` — SQLite in a temp file, and PostgreSQL in
//! a database of its own per test on the server named by `POLYPHONY_TEST_PG_URL` (`.ci/run`
//! starts a throwaway cluster with scripts/pg-test-cluster.sh). Without that variable the
//! PostgreSQL half prints SKIPPED, and fails when `CI` is set.

use std::collections::HashSet;
use std::sync::{Arc, Barrier};

use chrono::{DateTime, Duration, TimeZone, Utc};
use polyphony::domain::{AgentQuota, Task, TaskState};
use polyphony::store::{Owner, QueueCore, StoreError, StoreHandle};
use TaskState::*;

use crate::support::spec::{local_task, message_event, path_to, run_spec};

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 9, 0, 0).unwrap()
}

fn task(id: &str) -> Task {
    local_task(id, t0())
}

/// A lease's length (the store writes its own clock plus this: `QueueCore::lease_clock`).
fn secs(n: u64) -> std::time::Duration {
    std::time::Duration::from_secs(n)
}

/// The store's clock for leases now: the server's on PostgreSQL, the wall clock on SQLite;
/// at the microseconds the store records times in (`ts`: a lease written at a time of the
/// same microsecond as this one is not earlier than it).
fn lease_clock(store: &dyn QueueCore) -> DateTime<Utc> {
    use chrono::SubsecRound;
    store.lease_clock(Utc::now()).unwrap().trunc_subsecs(6)
}

/// Waits, on real time, until `task_id`'s lease has passed by the store's clock.
fn wait_past_lease(store: &dyn QueueCore, task_id: &str) {
    let until = store.claim_of(task_id).unwrap().unwrap().lease_until;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while lease_clock(store) <= until {
        assert!(
            std::time::Instant::now() < deadline,
            "the lease of {task_id} never passed"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn owner(machine: &str, nonce: &str) -> Owner {
    Owner {
        machine: machine.into(),
        pid: 4242,
        nonce: nonce.into(),
    }
}

/// A fresh, empty store of one backend; dropping it removes it.
pub(crate) struct Backend {
    pub handle: StoreHandle,
    _dir: Option<tempfile::TempDir>,
}

impl Backend {
    fn open(&self) -> Box<dyn QueueCore> {
        self.handle.open_shared().expect("open the store")
    }
}

fn sqlite() -> Backend {
    let dir = tempfile::tempdir().unwrap();
    Backend {
        handle: StoreHandle::sqlite(dir.path().join("queue.db")),
        _dir: Some(dir),
    }
}

/// A database of its own on the test server, named after the test; `None` (SKIPPED) when
/// no server is configured outside CI.
pub(crate) fn postgres(test: &str) -> Option<Backend> {
    let Some(base) = std::env::var("POLYPHONY_TEST_PG_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        if std::env::var_os("CI").is_some() {
            panic!("POLYPHONY_TEST_PG_URL is not set: .ci/run starts a PostgreSQL cluster (scripts/pg-test-cluster.sh)");
        }
        eprintln!("SKIPPED: {test} on PostgreSQL needs POLYPHONY_TEST_PG_URL (scripts/pg-test-cluster.sh start)");
        return None;
    };
    // Identifiers stop at 63 bytes: a prefix of the test's name and the process.
    let db = format!("t_{}_{}", &test[..test.len().min(40)], std::process::id()).to_lowercase();
    // CREATE DATABASE copies template1, which must have no other session: one at a time.
    static CREATING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = CREATING.lock().unwrap_or_else(|p| p.into_inner());
    let mut admin = ::postgres::Client::connect(&base, ::postgres::NoTls).expect("the test server");
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
        .unwrap_or_else(|e| panic!("drop the test database {db}: {e:?}"));
    // template1 may be busy for a moment (a session another test just closed).
    let mut tries = 0;
    while let Err(e) = admin.batch_execute(&format!("CREATE DATABASE {db}")) {
        tries += 1;
        assert!(tries < 50, "create the test database {db}: {e:?}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let (prefix, _) = base.rsplit_once('/').expect("a URL with a database");
    Some(Backend {
        handle: StoreHandle::postgres(&format!("{prefix}/{db}")).unwrap(),
        _dir: None,
    })
}

/// `contract!(name)` runs `name(Backend)` once per backend: `sqlite::name`, `postgres::name`.
macro_rules! contract {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $( #[test] fn $name() { super::$name(super::sqlite()) } )*
        }
        mod postgres {
            $( #[test] fn $name() {
                if let Some(b) = super::postgres(stringify!($name)) { super::$name(b) }
            } )*
        }
    };
}

contract!(
    insert_dedupes_and_round_trips,
    claims_take_the_oldest_and_record_owner_and_lease,
    concurrent_claimers_never_share_a_task,
    a_transition_is_checked_and_its_summary_written_with_it,
    leaving_the_active_states_releases_the_claim,
    leases_are_renewed_by_their_owner_and_expire_for_the_others,
    an_expired_claim_is_taken_over_by_exactly_one_daemon,
    a_pinned_task_is_claimed_only_on_its_machine,
    a_pinned_task_of_a_lost_machine_is_left_to_that_machine,
    a_failed_task_is_claimed_again_once_its_retry_time_comes,
    a_claim_writes_its_transition_and_the_summary_a_refresh_would,
    every_claim_keeps_the_summary_a_refresh_would_write,
    usage_limit_merges_are_atomic_across_connections,
    attempts_events_and_landings_round_trip,
    intents_settle_with_their_state_change,
    pull_requests_and_follow_ups_are_recorded_once,
    cancels_settle_without_a_failure,
    listings_and_local_ids_agree,
    listings_longer_than_a_page_read_one_snapshot_newest_first,
    running_attempts_reserve_the_daily_ceiling_across_connections,
    daemons_with_different_caps_share_one_ceiling_at_the_reservations_they_recorded,
    a_shared_store_names_one_claimant_for_the_fleet,
    egress_events_are_stored_once_by_their_log_line,
    a_nul_byte_in_foreign_text_is_stored_as_a_replacement_character,
);

fn insert_dedupes_and_round_trips(b: Backend) {
    let store = b.open();
    let mut t = task("local-1");
    t.labels = vec!["bug".into(), "quote\"d".into()];
    t.metadata.insert("k".into(), "v".into());
    t.base_ref = Some("main".into());
    assert!(store.insert_task(&t).unwrap());
    assert!(
        !store.insert_task(&t).unwrap(),
        "a second insert changes nothing"
    );
    assert_eq!(store.get_task("local-1").unwrap().as_ref(), Some(&t));
    assert_eq!(store.get_task("nope").unwrap(), None);
    let summary: serde_json::Value =
        serde_json::from_str(&store.summary_json("local-1").unwrap().unwrap()).unwrap();
    assert_eq!(summary["state"], "DISCOVERED");
    assert_eq!(summary["labels"], serde_json::json!(["bug", "quote\"d"]));
    assert_eq!(store.count_by_state().unwrap().get(&Discovered), Some(&1));
}

fn claims_take_the_oldest_and_record_owner_and_lease(b: Backend) {
    let store = b.open();
    for i in 1..=3 {
        store.insert_task(&task(&format!("local-{i}"))).unwrap();
    }
    let me = owner("m1", "a");
    let lease = secs(30);
    let before = lease_clock(&*store);
    let claimed = store
        .claim_next_owned(&me, lease, Utc::now())
        .unwrap()
        .unwrap();
    let after = lease_clock(&*store);
    assert_eq!((claimed.id.as_str(), claimed.state), ("local-1", Claimed));
    let claim = store.claim_of("local-1").unwrap().unwrap();
    assert_eq!(claim.machine, "m1");
    assert_eq!(claim.owner, me.key());
    // The store's clock at the claim, plus the lease.
    let span = Duration::seconds(30);
    assert!(
        before + span <= claim.lease_until && claim.lease_until <= after + span,
        "{before} + 30 s <= {} <= {after} + 30 s",
        claim.lease_until
    );
    let summary = store.summary_json("local-1").unwrap().unwrap();
    assert!(summary.contains("\"state\":\"CLAIMED\""), "{summary}");
    assert_eq!(
        store
            .claim_next_owned(&me, lease, Utc::now())
            .unwrap()
            .unwrap()
            .id,
        "local-2"
    );
}

fn concurrent_claimers_never_share_a_task(b: Backend) {
    const TASKS: usize = 120;
    const CLAIMERS: usize = 4;
    {
        let store = b.open();
        for i in 0..TASKS {
            store.insert_task(&task(&format!("local-{i}"))).unwrap();
        }
    }
    let barrier = Arc::new(Barrier::new(CLAIMERS));
    let handle = b.handle.clone();
    let got: Vec<Vec<String>> = std::thread::scope(|s| {
        let joins: Vec<_> = (0..CLAIMERS)
            .map(|n| {
                let (barrier, handle) = (barrier.clone(), handle.clone());
                s.spawn(move || {
                    let store = handle.open_shared().unwrap();
                    let me = owner(&format!("m{n}"), "x");
                    barrier.wait();
                    let mut mine = Vec::new();
                    loop {
                        match store.claim_next_owned(&me, secs(60), t0()) {
                            Ok(Some(t)) => mine.push(t.id),
                            Ok(None) => break,
                            Err(e) => panic!("claim failed: {e}"),
                        }
                    }
                    mine
                })
            })
            .collect();
        joins.into_iter().map(|j| j.join().unwrap()).collect()
    });
    let all: Vec<&String> = got.iter().flatten().collect();
    let unique: HashSet<&String> = all.iter().copied().collect();
    assert_eq!(all.len(), TASKS, "every task claimed once");
    assert_eq!(unique.len(), TASKS, "no task claimed twice");
    let store = b.open();
    assert_eq!(
        store.count_by_state().unwrap().get(&Claimed),
        Some(&(TASKS as u64))
    );
}

fn a_transition_is_checked_and_its_summary_written_with_it(b: Backend) {
    let store = b.open();
    store.insert_task(&task("local-1")).unwrap();
    let me = owner("m1", "a");
    store.claim_next_owned(&me, secs(30), t0()).unwrap();
    let later = t0() + Duration::seconds(5);
    let moved = store
        .transition("local-1", Claimed, Routed, "routed", later)
        .unwrap();
    assert_eq!((moved.state, moved.updated_at), (Routed, later));
    let before = store.summary_json("local-1").unwrap();
    assert!(before.as_deref().unwrap().contains("\"ROUTED\""));
    // A stale expectation and an illegal move both change nothing, summary included.
    assert!(matches!(
        store.transition("local-1", Claimed, Routed, "again", later),
        Err(StoreError::StaleState { actual: Routed, .. })
    ));
    assert!(matches!(
        store.transition("local-1", Routed, Landed, "skip", later),
        Err(StoreError::InvalidTransition { .. })
    ));
    assert!(matches!(
        store.transition("nope", Routed, Provisioned, "x", later),
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(store.summary_json("local-1").unwrap(), before);
    assert_eq!(store.get_task("local-1").unwrap().unwrap().state, Routed);
}

fn leaving_the_active_states_releases_the_claim(b: Backend) {
    let store = b.open();
    store.insert_task(&task("local-1")).unwrap();
    let me = owner("m1", "a");
    store.claim_next_owned(&me, secs(30), Utc::now()).unwrap();
    store
        .transition("local-1", Claimed, Routed, "routed", t0())
        .unwrap();
    assert!(store.claim_of("local-1").unwrap().is_some(), "still active");
    store
        .transition("local-1", Routed, Failed, "no agent", t0())
        .unwrap();
    assert_eq!(store.claim_of("local-1").unwrap(), None);
    assert!(store.reconcilable(&me, Utc::now()).unwrap().is_empty());
}

fn leases_are_renewed_by_their_owner_and_expire_for_the_others(b: Backend) {
    let store = b.open();
    store.insert_task(&task("local-1")).unwrap();
    store.insert_task(&task("local-2")).unwrap();
    let (a, other) = (owner("m1", "a"), owner("m2", "b"));
    // Real time, short leases: the store's clock decides (the server's on PostgreSQL).
    store
        .claim_next_owned(&a, secs(2), Utc::now())
        .unwrap()
        .unwrap();
    store
        .claim_next_owned(&other, secs(2), Utc::now())
        .unwrap()
        .unwrap();
    // Each daemon reconciles its own machine's claims only while the other's lease runs.
    let mine = |o: &Owner| -> Vec<(String, bool)> {
        store
            .reconcilable(o, Utc::now())
            .unwrap()
            .into_iter()
            .map(|r| (r.task.id, r.expired))
            .collect()
    };
    assert_eq!(mine(&a), vec![("local-1".to_string(), false)]);
    assert_eq!(mine(&other), vec![("local-2".to_string(), false)]);
    // a renews; m2's lease runs out: a may now reconcile local-2 as a lost machine's.
    let before = lease_clock(&*store);
    assert_eq!(store.renew_leases(&a, secs(30), Utc::now()).unwrap(), 1);
    let after = lease_clock(&*store);
    let renewed = store.claim_of("local-1").unwrap().unwrap().lease_until;
    let span = Duration::seconds(30);
    assert!(
        before + span <= renewed && renewed <= after + span,
        "renewed to the store's clock plus the lease: {renewed} (before {before}, after {after})"
    );
    wait_past_lease(&*store, "local-2");
    assert_eq!(
        mine(&a),
        vec![
            ("local-1".to_string(), false),
            ("local-2".to_string(), true)
        ]
    );
    assert_eq!(mine(&other), vec![("local-2".to_string(), false)]);
    // A different owner key renews nothing.
    assert_eq!(
        store
            .renew_leases(&owner("m1", "zzz"), secs(30), Utc::now())
            .unwrap(),
        0
    );
}

fn an_expired_claim_is_taken_over_by_exactly_one_daemon(b: Backend) {
    let store = b.open();
    store.insert_task(&task("local-1")).unwrap();
    let lost = owner("m-lost", "a");
    store
        .claim_next_owned(&lost, secs(1), Utc::now())
        .unwrap()
        .unwrap();
    let (b1, b2) = (owner("m1", "b"), owner("m2", "c"));
    let lease = secs(120);
    assert!(
        !store.take_over("local-1", &b1, lease, Utc::now()).unwrap(),
        "a live lease is not taken"
    );
    wait_past_lease(&*store, "local-1");
    assert!(store.take_over("local-1", &b1, lease, Utc::now()).unwrap());
    assert!(
        !store.take_over("local-1", &b2, lease, Utc::now()).unwrap(),
        "the second taker finds b1's live lease"
    );
    let claim = store.claim_of("local-1").unwrap().unwrap();
    assert_eq!((claim.machine.as_str(), claim.owner), ("m1", b1.key()));
    // The lost daemon, back, renews nothing: the claim is not its any more.
    assert_eq!(store.renew_leases(&lost, lease, Utc::now()).unwrap(), 0);
    // Concurrently, from separate connections: one winner.
    store.insert_task(&task("local-2")).unwrap();
    store
        .claim_next_owned(&lost, secs(1), Utc::now())
        .unwrap()
        .unwrap();
    wait_past_lease(&*store, "local-2");
    let handle = b.handle.clone();
    let wins: usize = std::thread::scope(|s| {
        let barrier = Arc::new(Barrier::new(4));
        let joins: Vec<_> = (0..4)
            .map(|n| {
                let (barrier, handle) = (barrier.clone(), handle.clone());
                s.spawn(move || {
                    let store = handle.open_shared().unwrap();
                    barrier.wait();
                    store
                        .take_over("local-2", &owner(&format!("r{n}"), "n"), lease, Utc::now())
                        .unwrap() as usize
                })
            })
            .collect();
        joins.into_iter().map(|j| j.join().unwrap()).sum()
    });
    assert_eq!(wins, 1);
}

fn a_pinned_task_is_claimed_only_on_its_machine(b: Backend) {
    let store = b.open();
    store.insert_task(&task("local-1")).unwrap();
    store.pin_task("local-1", "laptop").unwrap();
    store.insert_task(&task("local-2")).unwrap();
    let lease = secs(30);
    let elsewhere = owner("server", "a");
    assert_eq!(
        store
            .claim_next_owned(&elsewhere, lease, t0())
            .unwrap()
            .unwrap()
            .id,
        "local-2",
        "the pinned task is passed over"
    );
    assert_eq!(
        store.claim_next_owned(&elsewhere, lease, t0()).unwrap(),
        None
    );
    let home = owner("laptop", "b");
    assert_eq!(
        store
            .claim_next_owned(&home, lease, t0())
            .unwrap()
            .unwrap()
            .id,
        "local-1"
    );
}

/// A lost machine's pinned task (a local-path repository only it has) is neither adopted
/// by reconcile nor taken over elsewhere when its lease expires; its machine, back, has it.
fn a_pinned_task_of_a_lost_machine_is_left_to_that_machine(b: Backend) {
    let store = b.open();
    store.insert_task(&task("local-1")).unwrap();
    store.pin_task("local-1", "laptop").unwrap();
    store.insert_task(&task("local-2")).unwrap();
    let lost = owner("laptop", "a");
    for _ in 0..2 {
        store
            .claim_next_owned(&lost, secs(1), Utc::now())
            .unwrap()
            .unwrap();
    }
    wait_past_lease(&*store, "local-1");
    wait_past_lease(&*store, "local-2");
    let other = owner("server", "b");
    let ids = |o: &Owner| -> Vec<String> {
        store
            .reconcilable(o, Utc::now())
            .unwrap()
            .into_iter()
            .map(|r| r.task.id)
            .collect()
    };
    assert_eq!(
        ids(&other),
        ["local-2"],
        "only the unpinned expired task is another's to adopt"
    );
    assert!(
        !store
            .take_over("local-1", &other, secs(60), Utc::now())
            .unwrap(),
        "a task pinned elsewhere is not taken over, even with its lease expired"
    );
    assert!(store
        .take_over("local-2", &other, secs(60), Utc::now())
        .unwrap());
    let back = owner("laptop", "c");
    assert_eq!(
        ids(&back),
        ["local-1"],
        "the machine, restarted, finds its pinned task"
    );
    assert!(store
        .take_over("local-1", &back, secs(60), Utc::now())
        .unwrap());
}

fn a_failed_task_is_claimed_again_once_its_retry_time_comes(b: Backend) {
    let store = b.open();
    let mut t = task("local-1");
    t.state = Failed;
    t.next_attempt_at = Some(t0() + Duration::seconds(10));
    store.insert_task(&t).unwrap();
    let me = owner("m1", "a");
    let lease = secs(60);
    assert_eq!(store.claim_next_owned(&me, lease, t0()).unwrap(), None);
    let later = t0() + Duration::seconds(10);
    let claimed = store.claim_next_owned(&me, lease, later).unwrap().unwrap();
    assert_eq!((claimed.state, claimed.next_attempt_at), (Claimed, None));
}

fn usage_limit_merges_are_atomic_across_connections(b: Backend) {
    const WRITERS: usize = 6;
    let handle = b.handle.clone();
    std::thread::scope(|s| {
        let barrier = Arc::new(Barrier::new(WRITERS));
        for n in 0..WRITERS {
            let (barrier, handle) = (barrier.clone(), handle.clone());
            s.spawn(move || {
                let store = handle.open_shared().unwrap();
                barrier.wait();
                store
                    .update_quota("work", "claude", &mut |stored: Option<AgentQuota>| {
                        let mut q = stored.unwrap_or(AgentQuota {
                            identity: "work".into(),
                            agent: "claude".into(),
                            resets_at: t0() + Duration::hours(1),
                            reported: true,
                            message: String::new(),
                            task_id: None,
                            attempt: None,
                            hit_at: t0(),
                        });
                        q.message.push_str(&format!("[{n}]"));
                        q
                    })
                    .unwrap();
            });
        }
    });
    // Another connection (another daemon) sees every merge: none was lost.
    let rows = b.open().quota_rows().unwrap();
    assert_eq!(rows.len(), 1);
    for n in 0..WRITERS {
        assert!(rows[0].message.contains(&format!("[{n}]")), "{:?}", rows[0]);
    }
    assert!(rows[0].is_out(t0()));
    assert_eq!(rows[0].attempt, None);
}

/// The full store (what the daemon and the verbs use) on this backend.
fn full(b: &Backend) -> polyphony::store::Store {
    b.handle.open().expect("open the full store")
}

/// `task` moved along the shortest legal path to `state`.
fn walk_to(store: &polyphony::store::Store, id: &str, state: TaskState) {
    let mut from = Discovered;
    for &to in path_to(state) {
        store.transition(id, from, to, "test", t0()).unwrap();
        from = to;
    }
}

fn attempts_events_and_landings_round_trip(b: Backend) {
    use polyphony::domain::{
        AttemptStatus, CheckEvidence, EventKind, NetworkMode, RunResult, RunSpec, TaskEvent,
        TokenUsage,
    };
    let store = full(&b);
    store.insert_task(&task("local-1")).unwrap();
    walk_to(&store, "local-1", Running);
    // Every field of the spec round-trips, the optional ones set.
    let spec = RunSpec {
        fallback: vec!["codex".into()],
        max_turns: Some(10),
        network: NetworkMode::Bridge,
        ..run_spec("local-1", 1)
    };
    store.start_attempt(&spec, t0()).unwrap();
    assert!(matches!(
        store.start_attempt(&spec, t0()),
        Err(StoreError::AttemptExists { attempt: 1, .. })
    ));
    assert!(matches!(
        store.start_attempt(&run_spec("ghost", 1), t0()),
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(store.get_task("local-1").unwrap().unwrap().attempts, 1);
    store.set_container("local-1", 1, "c0ffee").unwrap();
    assert!(matches!(
        store.set_container("local-1", 9, "x"),
        Err(StoreError::AttemptNotFound { attempt: 9, .. })
    ));
    let running = store.attempt("local-1", 1).unwrap().unwrap();
    assert_eq!(running.status, None);
    assert_eq!(running.container_id.as_deref(), Some("c0ffee"));
    assert_eq!(running.spec().unwrap(), spec);

    let events: Vec<_> = (0..5u64)
        .map(|i| TaskEvent {
            kind: if i.is_multiple_of(2) {
                EventKind::Message
            } else {
                EventKind::ToolCall
            },
            at: t0() + Duration::seconds(i as i64),
            ..message_event(
                i,
                &format!("line {i}"),
                serde_json::json!({"i": i, "s": "é\"q"}),
            )
        })
        .collect();
    assert_eq!(store.append_events("local-1", 1, &events[..3]).unwrap(), 3);
    // Re-ingesting after a crash: only the new ones count.
    assert_eq!(store.append_events("local-1", 1, &events).unwrap(), 2);
    assert_eq!(store.event_count("local-1", 1).unwrap(), 5);
    let after = store.events("local-1", 1, Some(1), 2).unwrap();
    assert_eq!(after.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![2, 3]);
    assert_eq!(after[0].data, events[2].data);
    assert_eq!(store.events("local-1", 1, None, 100).unwrap(), events);
    // Events need a started attempt.
    assert!(store.append_events("local-1", 2, &events).is_err());

    let result = RunResult {
        task_id: "local-1".into(),
        attempt: 1,
        agent: "claude".into(),
        status: AttemptStatus::Succeeded,
        turns: 7,
        duration_seconds: 61.5,
        cost_usd: Some(0.42),
        tokens: TokenUsage {
            input: 1000,
            output: 200,
            cached_input: 50,
        },
        exit_code: Some(0),
        final_message: Some("Fixed the parser".into()),
        reason: None,
        events: 5,
        artifacts: vec![],
    };
    let evidence = vec![CheckEvidence {
        name: "test".into(),
        command: "cargo test".into(),
        exit_code: Some(0),
        duration_ms: 900,
        passed: true,
        output_tail: "test result: ok".into(),
    }];
    store
        .finish_attempt(&result, &evidence, t0() + Duration::minutes(2))
        .unwrap();
    let done = store.attempt("local-1", 1).unwrap().unwrap();
    assert_eq!(done.status, Some(AttemptStatus::Succeeded));
    assert_eq!(
        (done.turns, done.cost_usd, done.exit_code),
        (Some(7), Some(0.42), Some(0))
    );
    assert_eq!(done.tokens, Some(result.tokens));
    assert_eq!(done.evidence, evidence);
    assert_eq!(done.finished_at, Some(t0() + Duration::minutes(2)));
    assert_eq!(done.container_id.as_deref(), Some("c0ffee"));
    assert_eq!(done.spec().unwrap(), spec);
    assert_eq!(store.attempts("local-1").unwrap(), vec![done]);
    // The stored summary (what `status --json` and the console's queue read) has the
    // latest attempt's agent and the attempts' cost (issue 29).
    let summary: serde_json::Value =
        serde_json::from_str(&store.summary_json("local-1").unwrap().unwrap()).unwrap();
    assert_eq!(summary["agent"], "claude", "{summary}");
    assert_eq!(summary["cost_usd"], 0.42, "{summary}");
    assert!((store.cost_spent_since("personal", t0()).unwrap() - 0.42).abs() < 1e-9);
    assert_eq!(
        store
            .cost_spent_since("personal", t0() + Duration::hours(1))
            .unwrap(),
        0.0
    );
    assert_eq!(
        store.largest_cost_since("personal", t0()).unwrap(),
        Some(("local-1".to_string(), 1, 0.42))
    );
    assert_eq!(store.latest_attempt("local-1").unwrap(), Some(1));

    store
        .set_attempt_landing("local-1", 1, "deadbeef", "polyphony/local-1-a1", None, t0())
        .unwrap();
    store
        .set_attempt_landing(
            "local-1",
            1,
            "deadbeef",
            "polyphony/local-1-a1",
            Some("https://github.example/o/r/pull/7"),
            t0(),
        )
        .unwrap();
    // A later call without the URL keeps it.
    store
        .set_attempt_landing("local-1", 1, "deadbeef", "polyphony/local-1-a1", None, t0())
        .unwrap();
    let landing = store.landing("local-1").unwrap().unwrap();
    assert_eq!(landing.commit_sha, "deadbeef");
    assert_eq!(
        landing.pr_url.as_deref(),
        Some("https://github.example/o/r/pull/7")
    );
    assert!(store.landing("local-2").unwrap().is_none());
    let landed = store.attempt("local-1", 1).unwrap().unwrap();
    assert_eq!(landed.commit_sha.as_deref(), Some("deadbeef"));

    // The daily ceiling counts spend since a time, per identity, over every task.
    store.insert_task(&task("local-2")).unwrap();
    store
        .start_attempt(&run_spec("local-2", 1), t0() + Duration::hours(3))
        .unwrap();
    let second = RunResult {
        task_id: "local-2".into(),
        cost_usd: Some(1.0),
        ..result.clone()
    };
    store
        .finish_attempt(&second, &[], t0() + Duration::hours(3))
        .unwrap();
    let spent = |since| store.cost_spent_since("personal", since).unwrap();
    assert!((spent(t0()) - 1.42).abs() < 1e-9);
    assert!((spent(t0() + Duration::hours(1)) - 1.0).abs() < 1e-9);
    assert_eq!(store.cost_spent_since("work", t0()).unwrap(), 0.0);
    assert_eq!(store.running_attempts().unwrap().len(), 0, "finished");
}

/// Issue 27: the claim is one statement on PostgreSQL (its summary built from what that
/// statement returns) and a short path on SQLite; either way it writes the transition row,
/// the owner, and exactly the summary the general refresh writes — the attempts' agent
/// and cost kept, the quota wait of the FAILED task gone.
fn a_claim_writes_its_transition_and_the_summary_a_refresh_would(b: Backend) {
    use polyphony::domain::{AttemptStatus, QuotaWait, RunResult, TokenUsage};
    let store = full(&b);
    store.insert_task(&task("local-1")).unwrap();
    store.insert_task(&task("local-2")).unwrap();
    walk_to(&store, "local-1", Running);
    store.start_attempt(&run_spec("local-1", 1), t0()).unwrap();
    let result = RunResult {
        task_id: "local-1".into(),
        attempt: 1,
        agent: "claude".into(),
        status: AttemptStatus::Failed,
        turns: 3,
        duration_seconds: 20.0,
        cost_usd: Some(0.25),
        tokens: TokenUsage::default(),
        exit_code: Some(1),
        final_message: None,
        reason: Some("tests failed".into()),
        events: 0,
        artifacts: vec![],
    };
    store.finish_attempt(&result, &[], t0()).unwrap();
    store
        .transition("local-1", Running, Failed, "tests failed", t0())
        .unwrap();
    let due = t0() + Duration::minutes(10);
    store
        .set_quota_wait(&QuotaWait {
            task_id: "local-1".into(),
            until: due,
            agent: "claude".into(),
            identity: "personal".into(),
            resets: vec![],
            parked_at: t0(),
        })
        .unwrap();
    store.set_retry("local-1", 1, Some(due)).unwrap();
    let parked: serde_json::Value =
        serde_json::from_str(&store.summary_json("local-1").unwrap().unwrap()).unwrap();
    assert_eq!(parked["quota_wait"]["agent"], "claude", "{parked}");

    let me = owner("m1", "a");
    let lease = secs(60);
    // Not due yet: the DISCOVERED one is claimed.
    let first = store.claim_next_owned(&me, lease, t0()).unwrap().unwrap();
    assert_eq!(first.id, "local-2");
    assert_eq!(
        store
            .transitions("local-2")
            .unwrap()
            .last()
            .map(|t| (t.from, t.to, t.reason.as_str())),
        Some((Discovered, Claimed, "claimed"))
    );
    store.insert_task(&task("local-3")).unwrap();
    // Due: the older candidate, the retry, wins over local-3.
    let at = due + Duration::minutes(1);
    let before = store.lease_clock(at).unwrap();
    let retry = store.claim_next_owned(&me, lease, at).unwrap().unwrap();
    let after = store.lease_clock(at).unwrap();
    assert_eq!(retry.id, "local-1");
    assert_eq!(
        (
            retry.state,
            retry.attempts,
            retry.failures,
            retry.next_attempt_at,
            retry.updated_at
        ),
        (Claimed, 1, 1, None, at)
    );
    assert_eq!(store.get_task("local-1").unwrap().as_ref(), Some(&retry));
    let last = store.transitions("local-1").unwrap().pop().unwrap();
    assert_eq!(
        (last.from, last.to, last.reason.as_str(), last.at),
        (Failed, Claimed, "claimed for retry", at)
    );
    let claim = store.claim_of("local-1").unwrap().unwrap();
    assert_eq!(claim.owner, me.key());
    // The store's clock plus the lease: exactly `at` + 1 min on SQLite (the caller's
    // clock), the server's time at the claim + 1 min on PostgreSQL.
    let span = Duration::minutes(1);
    assert!(
        before + span <= claim.lease_until && claim.lease_until <= after + span,
        "{before} + 1 min <= {} <= {after} + 1 min",
        claim.lease_until
    );

    let claimed = store.summary_json("local-1").unwrap().unwrap();
    let json: serde_json::Value = serde_json::from_str(&claimed).unwrap();
    assert_eq!(json["state"], "CLAIMED", "{claimed}");
    assert_eq!(
        json["next_attempt_at"],
        serde_json::Value::Null,
        "{claimed}"
    );
    assert_eq!(json["quota_wait"], serde_json::Value::Null, "{claimed}");
    assert_eq!(json["agent"], "claude", "{claimed}");
    assert_eq!(json["cost_usd"], 0.25, "{claimed}");
    // The general refresh (any write that leaves the row as it is) writes the same bytes.
    store
        .set_task_facts(
            "local-1",
            retry.task_type,
            retry.scope,
            retry.risk,
            retry.context_tokens,
        )
        .unwrap();
    assert_eq!(store.summary_json("local-1").unwrap().unwrap(), claimed);
    assert_eq!(store.count_by_state().unwrap().get(&Claimed), Some(&2));
}

/// The stored summary of `id` is the one the general refresh writes: any write that
/// leaves the row as it is (here its routing facts, written back unchanged) rebuilds the
/// summary from the rows, and the bytes must not move.
fn assert_summary_is_a_refresh(store: &polyphony::store::Store, id: &str) -> serde_json::Value {
    let stored = store.summary_json(id).unwrap().unwrap();
    let t = store.get_task(id).unwrap().unwrap();
    store
        .set_task_facts(id, t.task_type, t.scope, t.risk, t.context_tokens)
        .unwrap();
    assert_eq!(store.summary_json(id).unwrap().unwrap(), stored, "{id}");
    serde_json::from_str(&stored).unwrap()
}

/// Issue 27: a claim derives the claimed task's summary from the one stored before it
/// (four fields change; see `views::claimed_summary`) instead of rebuilding it from the
/// rows. Each way of claiming (owned, `claim_next`, `claim TASK`), of a DISCOVERED task
/// and of a FAILED one for retry, keeps exactly the bytes the rebuild writes: escapes in
/// the title and labels, the pull request a landed task opened, the one a follow-up works
/// on, the latest attempt's agent and the cost kept; the quota wait and the retry time gone.
fn every_claim_keeps_the_summary_a_refresh_would_write(b: Backend) {
    use polyphony::domain::{AttemptStatus, QuotaWait, RunResult};
    use polyphony::store::{PullLook, PullRecord};
    // No NUL: the store keeps none (see `a_nul_byte_in_foreign_text_is_stored_as_a_replacement_character`).
    const TRICKY: &str = "quote \" backslash \\ tab \t newline \n us \u{1f} del \u{7f} \
        é 🎻 \u{2028} </script>";
    let store = full(&b);
    let mut landed = task("o/r#1");
    landed.labels = vec!["b\"c".into(), "\u{1f}".into(), "é/\\x".into()];
    store.insert_task(&landed).unwrap();
    store.freeze_text("o/r#1", TRICKY, "body").unwrap();
    walk_to(&store, "o/r#1", Running);
    store.start_attempt(&run_spec("o/r#1", 1), t0()).unwrap();
    let ended = RunResult {
        cost_usd: Some(0.1),
        ..RunResult::new("o/r#1", 1, "claude", AttemptStatus::Failed)
    };
    store.finish_attempt(&ended, &[], t0()).unwrap();
    store
        .transition("o/r#1", Running, Failed, "tests failed", t0())
        .unwrap();
    let sha = "a".repeat(40);
    let pull = PullRecord::opened("o/r#1", "o/r", 17, "polyphony/o_r_1-a1", "main", &sha, t0());
    store.record_pull(&pull).unwrap();
    let look = PullLook {
        head_sha: "b".repeat(40),
        state: "open".into(),
        checks: Some("failing".into()),
        review: Some("changes_requested".into()),
        mergeable: Some("no".into()),
        watching: true,
    };
    store.update_pull("o/r#1", &look, t0()).unwrap();
    let followup = task("o/r#1-f1");
    let keys = vec!["check:ci:failure".to_string()];
    assert!(store
        .insert_followup("o/r#1", &followup, &serde_json::json!({}), &keys, t0())
        .unwrap());
    let due = t0() + Duration::minutes(10);
    store
        .set_quota_wait(&QuotaWait {
            task_id: "o/r#1".into(),
            until: due,
            agent: "claude".into(),
            identity: "personal \"p\"".into(),
            resets: vec![],
            parked_at: t0(),
        })
        .unwrap();
    store.set_retry("o/r#1", 1, Some(due)).unwrap();
    let parked = assert_summary_is_a_refresh(&store, "o/r#1");
    assert_eq!(parked["quota_wait"]["agent"], "claude", "{parked}");
    assert_eq!(parked["pull"]["followups"], 1, "{parked}");

    // The follow-up, DISCOVERED, by `claim_next` (the retry is not due yet).
    let f = store.claim_next(t0()).unwrap().unwrap();
    assert_eq!((f.id.as_str(), f.state), ("o/r#1-f1", Claimed));
    let s = assert_summary_is_a_refresh(&store, "o/r#1-f1");
    assert_eq!(
        (&s["state"], &s["followup_of"]),
        (
            &serde_json::json!("CLAIMED"),
            &serde_json::json!({"task_id": "o/r#1", "number": 17})
        )
    );

    // The landed task, FAILED with its retry due, by `claim TASK`.
    let at = due + Duration::seconds(1);
    let r = store.claim("o/r#1", at).unwrap().unwrap();
    assert_eq!(
        (r.state, r.next_attempt_at, r.updated_at),
        (Claimed, None, at)
    );
    let s = assert_summary_is_a_refresh(&store, "o/r#1");
    assert_eq!(s["title"], TRICKY, "{s}");
    assert_eq!(s["labels"], serde_json::json!(landed.labels), "{s}");
    assert_eq!(
        (&s["agent"], &s["cost_usd"]),
        (&serde_json::json!("claude"), &serde_json::json!(0.1))
    );
    assert_eq!(s["pull"]["review"], "changes_requested", "{s}");
    assert_eq!(
        (&s["quota_wait"], &s["next_attempt_at"]),
        (&serde_json::Value::Null, &serde_json::Value::Null)
    );

    // Back to FAILED with the wait still recorded, and claimed for retry by its owner.
    store
        .transition("o/r#1", Claimed, Failed, "again", at)
        .unwrap();
    store.set_retry("o/r#1", 2, Some(at)).unwrap();
    assert_eq!(
        assert_summary_is_a_refresh(&store, "o/r#1")["quota_wait"]["agent"],
        "claude"
    );
    let later = at + Duration::seconds(1);
    let me = owner("m1", "a");
    let o = store
        .claim_next_owned(&me, secs(60), later)
        .unwrap()
        .unwrap();
    assert_eq!((o.id.as_str(), o.failures), ("o/r#1", 2));
    let s = assert_summary_is_a_refresh(&store, "o/r#1");
    assert_eq!(
        (&s["state"], &s["quota_wait"]),
        (&serde_json::json!("CLAIMED"), &serde_json::Value::Null)
    );
}

fn intents_settle_with_their_state_change(b: Backend) {
    use polyphony::store::{BlockSettlement, IntentKind, Settlement};
    let store = full(&b);
    store.insert_task(&task("local-1")).unwrap();
    walk_to(&store, "local-1", Verifying);
    store.start_attempt(&run_spec("local-1", 1), t0()).unwrap();
    let payload = serde_json::json!({"branch": "polyphony/local-1-a1"});
    store
        .record_intent("local-1", IntentKind::Land, 1, &payload, t0())
        .unwrap();
    assert!(store
        .has_pending_intent("local-1", IntentKind::Land)
        .unwrap());
    let pending = store
        .pending_intent("local-1", IntentKind::Land, 1)
        .unwrap()
        .unwrap();
    assert_eq!(pending.payload, payload);
    assert_eq!(store.pending_intents().unwrap().len(), 1);
    // Landing completes the landing intent in the same transaction.
    store
        .transition_completing(
            "local-1",
            Verifying,
            Landed,
            "landed",
            (IntentKind::Land, 1),
            t0(),
        )
        .unwrap();
    assert!(!store
        .has_pending_intent("local-1", IntentKind::Land)
        .unwrap());
    assert!(!store
        .complete_intent("local-1", IntentKind::Land, 1, t0())
        .unwrap());
    // Recording again reopens it.
    store
        .record_intent("local-1", IntentKind::Land, 1, &payload, t0())
        .unwrap();
    assert!(store
        .complete_intent("local-1", IntentKind::Land, 1, t0())
        .unwrap());

    // A failure that blocks: FAILED -> BLOCKED with its report pending, in one write.
    store.insert_task(&task("local-2")).unwrap();
    walk_to(&store, "local-2", Running);
    store.start_attempt(&run_spec("local-2", 1), t0()).unwrap();
    let settled = store
        .settle_failure(
            "local-2",
            Running,
            "agent failed",
            &Settlement {
                failures: 3,
                next_attempt_at: None,
                block: Some(BlockSettlement {
                    reason: "3 failures".into(),
                    report: true,
                    released: true,
                }),
            },
            t0(),
        )
        .unwrap();
    assert_eq!(settled.state, Blocked);
    assert_eq!(settled.failures, 3);
    assert!(store
        .has_pending_intent("local-2", IntentKind::Block)
        .unwrap());
    assert_eq!(store.released_at("local-2").unwrap(), Some(t0()));
    let moves: Vec<_> = store
        .transitions("local-2")
        .unwrap()
        .into_iter()
        .map(|t| t.to)
        .collect();
    assert_eq!(moves.last(), Some(&Blocked));
    assert!(matches!(
        store.settle_failure(
            "local-2",
            Running,
            "again",
            &Settlement {
                failures: 4,
                next_attempt_at: None,
                block: None
            },
            t0()
        ),
        Err(StoreError::StaleState { .. })
    ));
    // And a failure with a retry time comes back at that time.
    store.insert_task(&task("local-3")).unwrap();
    walk_to(&store, "local-3", Running);
    let retry_at = t0() + Duration::minutes(5);
    store
        .settle_failure(
            "local-3",
            Running,
            "flaky",
            &Settlement {
                failures: 1,
                next_attempt_at: Some(retry_at),
                block: None,
            },
            t0(),
        )
        .unwrap();
    assert_eq!(store.next_retry_at().unwrap(), Some(retry_at));
    assert!(store.claim("local-3", t0()).unwrap().is_none());
    assert_eq!(
        store.claim("local-3", retry_at).unwrap().unwrap().state,
        Claimed
    );
}

fn pull_requests_and_follow_ups_are_recorded_once(b: Backend) {
    use polyphony::store::{PullLook, PullRecord};
    let store = full(&b);
    store.insert_task(&task("local-1")).unwrap();
    walk_to(&store, "local-1", Landed);
    let pull = PullRecord::opened(
        "local-1",
        "o/r",
        7,
        "polyphony/local-1-a1",
        "main",
        "abc",
        t0(),
    );
    store.record_pull(&pull).unwrap();
    let mut again = pull.clone();
    again.number = 8;
    store.record_pull(&again).unwrap();
    assert_eq!(
        store.pull("local-1").unwrap().unwrap().number,
        7,
        "recorded once"
    );
    let summary = store.summary_json("local-1").unwrap().unwrap();
    assert!(
        summary.contains(r#""pull":{"number":7,"state":"open""#),
        "{summary}"
    );
    store
        .update_pull(
            "local-1",
            &PullLook {
                head_sha: "def".into(),
                state: "open".into(),
                checks: Some("failing".into()),
                review: Some("changes_requested".into()),
                mergeable: Some("yes".into()),
                watching: true,
            },
            t0(),
        )
        .unwrap();
    assert_eq!(store.watched_pulls().unwrap().len(), 1);
    let summary = store.summary_json("local-1").unwrap().unwrap();
    assert!(summary.contains(r#""checks":"failing""#), "{summary}");

    let keys = vec!["review:1".to_string(), "issue-comment:2".to_string()];
    let followup = local_task("local-2", t0());
    let plan = serde_json::json!({"kind": "address review"});
    assert!(store
        .insert_followup("local-1", &followup, &plan, &keys, t0())
        .unwrap());
    // The same feedback again makes no second follow-up.
    assert!(!store
        .insert_followup(
            "local-1",
            &local_task("local-3", t0()),
            &plan,
            &keys[..1],
            t0()
        )
        .unwrap());
    let f = store.followup("local-2").unwrap().unwrap();
    assert_eq!(
        (f.pull_task_id.as_str(), f.seq, f.state),
        ("local-1", 1, Discovered)
    );
    assert_eq!(store.followups_of("local-1").unwrap().len(), 1);
    assert_eq!(store.pull("local-1").unwrap().unwrap().followups, 1);
    let summary = store.summary_json("local-2").unwrap().unwrap();
    assert!(
        summary.contains(r#""followup_of":{"task_id":"local-1","number":7}"#),
        "{summary}"
    );
    store
        .mark_handled("local-1", &["check:ci:failure".to_string()], t0())
        .unwrap();
    assert_eq!(store.handled_keys("local-1").unwrap().len(), 3);
    store
        .record_reply("local-2", "review:1", 991, t0())
        .unwrap();
    store
        .record_reply("local-2", "review:1", 992, t0())
        .unwrap();
    assert_eq!(store.reply_id("local-2", "review:1").unwrap(), Some(991));
    assert!(store.record_comment("local-1", "landed", 55, t0()).unwrap());
    assert!(!store.record_comment("local-1", "landed", 56, t0()).unwrap());
    assert_eq!(store.comment_id("local-1", "landed").unwrap(), Some(55));
}

fn cancels_settle_without_a_failure(b: Backend) {
    use polyphony::store::{CancelRequest, IntentKind};
    let store = full(&b);
    for id in ["local-1", "local-2"] {
        store.insert_task(&task(id)).unwrap();
    }
    // A key just outside the range must not be taken for a request.
    store.kv_set("cancel_requestz", "{}", t0()).unwrap();
    store.kv_set("cancel_request", "{}", t0()).unwrap();
    let request = CancelRequest {
        by: "alice (cli)".into(),
        at: t0(),
    };
    store.request_cancel("local-1", &request).unwrap();
    store.request_cancel("local-2", &request).unwrap();
    let ids: Vec<String> = store
        .cancel_requests()
        .unwrap()
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(ids, vec!["local-1".to_string(), "local-2".to_string()]);
    store.clear_cancel_request("local-2").unwrap();
    assert!(store.cancel_request("local-2").unwrap().is_none());

    walk_to(&store, "local-1", Running);
    store.start_attempt(&run_spec("local-1", 1), t0()).unwrap();
    let cancelled = store
        .settle_cancel("local-1", Running, "cancelled by alice (cli)", true, t0())
        .unwrap();
    assert_eq!(cancelled.state, Cancelled);
    assert_eq!(
        cancelled.failures, 0,
        "a cancel is never the agent's failure"
    );
    assert!(store.cancel_request("local-1").unwrap().is_none());
    assert!(store
        .has_pending_intent("local-1", IntentKind::Cancel)
        .unwrap());
    assert!(store.claim_of("local-1").unwrap().is_none());
}

fn listings_and_local_ids_agree(b: Backend) {
    let store = full(&b);
    let ids: Vec<String> = (0..4)
        .map(|_| store.next_local_task_id().unwrap())
        .collect();
    assert_eq!(ids, vec!["local-1", "local-2", "local-3", "local-4"]);
    for id in &ids {
        store.insert_task(&task(id)).unwrap();
    }
    walk_to(&store, "local-2", Blocked);
    let newest: Vec<String> = store
        .list_tasks(None, None)
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(newest, vec!["local-4", "local-3", "local-2", "local-1"]);
    assert_eq!(store.list_tasks(Some(Blocked), Some(5)).unwrap().len(), 1);
    let mut json = Vec::new();
    store
        .for_each_summary_json(None, None, |j| -> Result<(), StoreError> {
            json.push(String::from_utf8(j.to_vec()).unwrap());
            Ok(())
        })
        .unwrap();
    assert_eq!(json.len(), 4);
    assert!(json[0].starts_with(r#"{"id":"local-4""#), "{}", json[0]);
    let mut blocked = 0;
    store
        .for_each_summary_json(Some(Blocked), Some(10), |_| -> Result<(), StoreError> {
            blocked += 1;
            Ok(())
        })
        .unwrap();
    assert_eq!(blocked, 1);
    let mut summaries = Vec::new();
    store
        .for_each_task_summary(None, Some(2), |s| -> Result<(), StoreError> {
            summaries.push(s.id.to_string());
            Ok(())
        })
        .unwrap();
    assert_eq!(summaries, vec!["local-4", "local-3"]);
    let mut page = 0;
    store
        .for_each_summary_json_page(
            &polyphony::store::TaskFilter {
                state: Some(Blocked),
                ..Default::default()
            },
            Some(10),
            0,
            |_| -> Result<(), StoreError> {
                page += 1;
                Ok(())
            },
        )
        .unwrap();
    assert_eq!(page, 1);
    assert_eq!(store.count_by_state().unwrap().get(&Discovered), Some(&3));
    assert_eq!(
        store
            .find_by_source_ref("local:local-3")
            .unwrap()
            .map(|t| t.id),
        Some("local-3".to_string())
    );
    let detail = store.task_detail_json("local-2").unwrap().unwrap();
    assert_eq!(detail["task"]["state"], "BLOCKED");
}

/// Issue 27: PostgreSQL listings are read in keyset pages (2,000 rows) so memory stays
/// bounded; SQLite streams one statement. Either way a listing longer than a page is every
/// task once, newest first, with limits and offsets across page boundaries, and it is one
/// snapshot: a task another connection inserts or moves while the listing runs is listed
/// as it was when the listing began (what one statement reads).
fn listings_longer_than_a_page_read_one_snapshot_newest_first(b: Backend) {
    use polyphony::store::TaskFilter;
    const N: usize = 4050;
    let store = full(&b);
    for i in 1..=N {
        store.insert_task(&task(&format!("local-{i}"))).unwrap();
    }
    let other = b.handle.open().expect("a second connection");
    walk_to(&store, "local-1", Blocked);
    walk_to(&store, &format!("local-{}", N - 2000), Blocked);
    let id_of = |json: &[u8]| -> String {
        let v: serde_json::Value = serde_json::from_slice(json).unwrap();
        v["id"].as_str().unwrap().to_string()
    };
    let newest = |from: usize, n: usize| -> Vec<String> {
        (0..n).map(|k| format!("local-{}", from - k)).collect()
    };
    let json = |state, limit| {
        let mut out = Vec::new();
        store
            .for_each_summary_json(state, limit, |j| -> Result<(), StoreError> {
                out.push(j.to_vec());
                Ok(())
            })
            .unwrap();
        out
    };
    let page = |filter: &TaskFilter, limit, offset| {
        let mut out = Vec::new();
        store
            .for_each_summary_json_page(filter, limit, offset, |j| -> Result<(), StoreError> {
                out.push(id_of(j));
                Ok(())
            })
            .unwrap();
        out
    };

    let all = json(None, None);
    assert_eq!(
        all.iter().map(|j| id_of(j)).collect::<Vec<_>>(),
        newest(N, N)
    );
    for k in [0, 1999, 2000, 2001, N - 1] {
        let id = format!("local-{}", N - k);
        assert_eq!(
            String::from_utf8(all[k].clone()).unwrap(),
            store.summary_json(&id).unwrap().unwrap(),
            "the stored bytes of {id}"
        );
    }
    let mut summaries = Vec::new();
    store
        .for_each_task_summary(None, None, |t| -> Result<(), StoreError> {
            summaries.push(t.id.to_string());
            Ok(())
        })
        .unwrap();
    assert_eq!(summaries, newest(N, N));
    let discovered: Vec<String> = json(Some(Discovered), None)
        .iter()
        .map(|j| id_of(j))
        .collect();
    let mut expected = newest(N, N);
    expected.retain(|id| *id != "local-1" && *id != format!("local-{}", N - 2000));
    assert_eq!(discovered, expected);
    let blocked: Vec<String> = json(Some(Blocked), None).iter().map(|j| id_of(j)).collect();
    assert_eq!(
        blocked,
        vec![format!("local-{}", N - 2000), "local-1".into()]
    );
    for limit in [1, 1999, 2000, 2001, 4000, N] {
        let got: Vec<String> = json(None, Some(limit)).iter().map(|j| id_of(j)).collect();
        assert_eq!(got, newest(N, limit), "limit {limit}");
    }
    let any = TaskFilter::default();
    assert_eq!(page(&any, Some(3), 1999), newest(N - 1999, 3));
    assert_eq!(page(&any, Some(2500), 1000), newest(N - 1000, 2500));
    assert_eq!(page(&any, None, 2000).len(), N - 2000);
    assert_eq!(page(&any, Some(10), N - 1), vec!["local-1".to_string()]);
    assert!(page(&any, Some(10), N).is_empty());
    let in_state = TaskFilter {
        state: Some(Discovered),
        ..Default::default()
    };
    assert_eq!(
        page(&in_state, Some(4), 1998),
        expected[1998..2002].to_vec()
    );

    // One snapshot: at the first row another connection adds a task and moves two the
    // listing has not reached (their summaries change); neither shows. Reading this store
    // between rows works.
    let mut seen = Vec::new();
    store
        .for_each_summary_json(None, None, |j| -> Result<(), StoreError> {
            if seen.is_empty() {
                other.insert_task(&task(&format!("local-{}", N + 1)))?;
                walk_to(&other, "local-5", Routed);
                walk_to(&other, &format!("local-{}", N - 2500), Routed);
                assert!(store.summary_json("local-7")?.is_some());
            }
            let v: serde_json::Value = serde_json::from_slice(j).unwrap();
            seen.push((
                v["id"].as_str().unwrap().to_string(),
                v["state"].as_str().unwrap().to_string(),
            ));
            Ok(())
        })
        .unwrap();
    assert_eq!(
        seen.iter().map(|s| s.0.clone()).collect::<Vec<_>>(),
        newest(N, N)
    );
    for id in ["local-5".to_string(), format!("local-{}", N - 2500)] {
        let state = &seen.iter().find(|s| s.0 == id).unwrap().1;
        assert_eq!(state, "DISCOVERED", "{id} as the listing began");
    }
    let mut listed = Vec::new();
    store
        .for_each_task_summary(Some(Discovered), None, |t| -> Result<(), StoreError> {
            if listed.is_empty() {
                walk_to(&other, "local-9", Routed);
            }
            listed.push(t.id.to_string());
            Ok(())
        })
        .unwrap();
    assert!(
        listed.contains(&"local-9".to_string()),
        "local-9 was DISCOVERED as it began"
    );
    // Afterwards the changes show.
    assert_eq!(json(None, None).len(), N + 1);
    assert_eq!(json(Some(Routed), None).len(), 3);
}

/// Issue 27, shared limits: each running attempt of an identity reserves the per-attempt cap
/// against its daily ceiling in the start's own writing transaction, so connections of
/// different daemons starting at once never share one remainder: with a $0.15 ceiling and a
/// $0.05 cap exactly three of eight concurrent starts go ahead; an ended attempt frees its
/// reservation and only its reported cost counts, and the spend alone holds the rest.
fn running_attempts_reserve_the_daily_ceiling_across_connections(b: Backend) {
    use polyphony::domain::{AttemptStatus, RunResult, TokenUsage};
    use polyphony::store::DailyLimit;
    let limit = DailyLimit {
        ceiling_usd: 0.15,
        since: t0() - Duration::hours(1),
    };
    let setup = full(&b);
    for i in 1..=8 {
        let id = format!("local-{i}");
        setup.insert_task(&task(&id)).unwrap();
        walk_to(&setup, &id, Routed);
    }
    let barrier = Arc::new(Barrier::new(8));
    let started: Vec<bool> = (1..=8)
        .map(|i| {
            let handle = b.handle.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let store = handle.open().expect("a connection of its own");
                barrier.wait();
                store
                    .start_attempt_within(
                        &run_spec(&format!("local-{i}"), 1),
                        t0(),
                        0.05,
                        Some(limit),
                    )
                    .unwrap()
                    .is_none()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    assert_eq!(
        started.iter().filter(|s| **s).count(),
        3,
        "three reservations fill the ceiling: {started:?}"
    );
    let held: Vec<usize> = (0..8).filter(|i| !started[*i]).collect();
    let first = format!("local-{}", held[0] + 1);
    let again = setup
        .start_attempt_within(&run_spec(&first, 1), t0(), 0.05, Some(limit))
        .unwrap()
        .expect("still held");
    assert_eq!(again.running, 3);
    assert!((again.spent_usd - 0.0).abs() < 1e-9, "{again:?}");
    assert!((again.reserved_usd - 0.15).abs() < 1e-9, "{again:?}");
    // Held starts wrote nothing.
    assert_eq!(setup.attempts(&first).unwrap().len(), 0);
    // One running attempt ends having cost $0.04: its reservation goes, its cost stays.
    let ended = format!("local-{}", (0..8).find(|i| started[*i]).unwrap() + 1);
    setup
        .finish_attempt(
            &RunResult {
                task_id: ended.clone(),
                attempt: 1,
                agent: "claude".into(),
                status: AttemptStatus::Succeeded,
                turns: 1,
                duration_seconds: 1.0,
                cost_usd: Some(0.04),
                tokens: TokenUsage::default(),
                exit_code: Some(0),
                final_message: None,
                reason: None,
                events: 0,
                artifacts: vec![],
            },
            &[],
            t0(),
        )
        .unwrap();
    // 0.04 + 2 x 0.05 = 0.14 < 0.15: one more starts, and then 0.04 + 3 x 0.05 holds.
    assert_eq!(
        setup
            .start_attempt_within(&run_spec(&first, 1), t0(), 0.05, Some(limit))
            .unwrap(),
        None
    );
    let second = format!("local-{}", held[1] + 1);
    let held_again = setup
        .start_attempt_within(&run_spec(&second, 1), t0(), 0.05, Some(limit))
        .unwrap()
        .expect("held by three reservations and the spend");
    assert_eq!(held_again.running, 3);
    assert!((held_again.spent_usd - 0.04).abs() < 1e-9, "{held_again:?}");
    // Another identity's reservations never count; without a limit an attempt starts.
    let mut other = run_spec(&second, 1);
    other.identity = "work".into();
    assert_eq!(
        setup
            .start_attempt_within(&other, t0(), 0.05, Some(limit))
            .unwrap(),
        None
    );
    assert_eq!(
        setup
            .start_attempt_within(
                &run_spec(&format!("local-{}", held[2] + 1), 1),
                t0(),
                0.05,
                None
            )
            .unwrap(),
        None
    );
}

/// Issue 27: each running attempt counts against its identity's ceiling at the reservation
/// recorded when it started (the cap of the daemon that started it), not at the checking
/// daemon's cap, so daemons whose configs differ share one ceiling. Daemon A caps attempts
/// at $0.50 and B at $0.125, ceiling $1: B's three running attempts hold $0.375, so A
/// starts one ($0.875 then; counted at A's cap they would have held $1.50 and refused it),
/// B's check counts A's attempt at $0.50 (at B's cap, $0.125, B would overshoot), and one
/// more of B's fills the ceiling. An attempt with no recorded reservation (started before
/// schema 10) counts at the checker's cap.
fn daemons_with_different_caps_share_one_ceiling_at_the_reservations_they_recorded(b: Backend) {
    use polyphony::store::DailyLimit;
    let limit = DailyLimit {
        ceiling_usd: 1.0,
        since: t0() - Duration::hours(1),
    };
    let (cap_a, cap_b) = (0.5, 0.125);
    let setup = full(&b);
    for i in 1..=9 {
        let id = format!("local-{i}");
        setup.insert_task(&task(&id)).unwrap();
        walk_to(&setup, &id, Routed);
    }
    let a = b.handle.open().expect("daemon A's connection");
    let bee = b.handle.open().expect("daemon B's connection");
    let start = |store: &polyphony::store::Store, i: u32, cap: f64| {
        store
            .start_attempt_within(&run_spec(&format!("local-{i}"), 1), t0(), cap, Some(limit))
            .unwrap()
    };
    for i in 1..=3 {
        assert_eq!(start(&bee, i, cap_b), None, "B's attempt {i}");
    }
    assert_eq!(
        start(&a, 4, cap_a),
        None,
        "B's three hold $0.375, not 3 x A's $0.50"
    );
    assert_eq!(start(&bee, 5, cap_b), None, "$0.875 held: B's fourth fits");
    let held = start(&bee, 6, cap_b).expect("the reservations reach the ceiling");
    assert_eq!(held.running, 5);
    assert!((held.reserved_usd - 1.0).abs() < 1e-9, "{held:?}");
    let held = start(&a, 6, cap_a).expect("held for A as for B");
    assert!((held.reserved_usd - 1.0).abs() < 1e-9, "{held:?}");
    assert_eq!(setup.attempts("local-6").unwrap().len(), 0);

    // An attempt of another identity started without a reservation (as before schema 10)
    // counts at each checker's own cap.
    let work = |i: u32| {
        let mut spec = run_spec(&format!("local-{i}"), 1);
        spec.identity = "work".into();
        spec
    };
    setup.start_attempt(&work(7), t0()).unwrap();
    let half = DailyLimit {
        ceiling_usd: 0.5,
        ..limit
    };
    let held = a
        .start_attempt_within(&work(8), t0(), cap_a, Some(half))
        .unwrap()
        .expect("at A's cap the legacy attempt fills $0.50");
    assert!((held.reserved_usd - 0.5).abs() < 1e-9, "{held:?}");
    assert_eq!(
        bee.start_attempt_within(&work(9), t0(), cap_b, Some(half))
            .unwrap(),
        None,
        "at B's cap it holds $0.125"
    );
}

/// Issue 27: the daemons of a fleet claim GitHub issues under one name, the first asker's
/// candidate, so a task one daemon claimed and another took over is still the fleet's; a
/// home's own SQLite queue has none (the home is the claimant).
fn a_shared_store_names_one_claimant_for_the_fleet(b: Backend) {
    let one = full(&b);
    let two = b.handle.open().expect("a second connection");
    let first = one.fleet_claimant("fleet-aaaa", t0()).unwrap();
    let second = two.fleet_claimant("fleet-bbbb", t0()).unwrap();
    if b.handle.backend() == "sqlite" {
        assert_eq!((first, second), (None, None));
    } else {
        assert_eq!(first.as_deref(), Some("fleet-aaaa"));
        assert_eq!(second.as_deref(), Some("fleet-aaaa"));
    }
}

/// Issue 25: an attempt's egress events, stored as its proxy logs them, apart from its
/// stream's events: each refusal once by its log line however often the log is read, one
/// summary (the latest), refusals first; the stream's resume point is untouched.
fn egress_events_are_stored_once_by_their_log_line(b: Backend) {
    use polyphony::domain::{EventKind, TaskEvent};
    let store = full(&b);
    store.insert_task(&task("local-1")).unwrap();
    walk_to(&store, "local-1", Running);
    store.start_attempt(&run_spec("local-1", 1), t0()).unwrap();
    let egress = |line: u64, what: &str, summary: &str| TaskEvent {
        kind: EventKind::Egress,
        at: t0() + Duration::seconds(line as i64),
        ..message_event(line, summary, serde_json::json!({ "egress": what }))
    };
    let stream: Vec<_> = (0..3u64)
        .map(|i| TaskEvent {
            at: t0(),
            ..message_event(i, &format!("line {i}"), serde_json::json!({}))
        })
        .collect();
    store.append_events("local-1", 1, &stream).unwrap();
    assert_eq!(store.egress_line("local-1", 1).unwrap(), None);
    let first = [egress(1, "refused", "refused a:443")];
    let summary = egress(2, "summary", "egress: one");
    assert_eq!(
        store
            .record_egress("local-1", 1, &first, Some(&summary))
            .unwrap(),
        1
    );
    // The log read again from its first line (a re-attached attempt), one line further.
    let again = [
        egress(1, "refused", "refused a:443"),
        egress(4, "refused", "refused b:443"),
    ];
    let later = egress(4, "summary", "egress: two");
    assert_eq!(
        store
            .record_egress("local-1", 1, &again, Some(&later))
            .unwrap(),
        1,
        "only the new line's refusal is new"
    );
    // An older summary does not replace a newer one.
    store
        .record_egress("local-1", 1, &[], Some(&summary))
        .unwrap();
    let got = store.egress_events("local-1", 1).unwrap();
    let shown: Vec<(u64, &str)> = got.iter().map(|e| (e.seq, e.summary.as_str())).collect();
    assert_eq!(
        shown,
        vec![
            (1, "refused a:443"),
            (4, "refused b:443"),
            (4, "egress: two")
        ]
    );
    assert_eq!(got[0].at, t0() + Duration::seconds(1));
    assert_eq!(store.egress_line("local-1", 1).unwrap(), Some(4));
    // The stream's events and its resume point are its own.
    assert_eq!(store.event_count("local-1", 1).unwrap(), 3);
    assert_eq!(store.events("local-1", 1, None, 100).unwrap(), stream);
    // A follower's cursor: rows after the stored seq of the last one read.
    let rows = store.egress_rows_after("local-1", 1, Some(2)).unwrap();
    assert_eq!(rows.iter().map(|(s, _)| *s).collect::<Vec<_>>(), vec![8, 9]);
    // Retention takes them with the stream's events.
    assert!(store.delete_attempt_events("local-1", 1).unwrap() >= 6);
    assert!(store.egress_events("local-1", 1).unwrap().is_empty());
}

/// Foreign text with a NUL byte (an issue's title or body, a label, an agent's output line,
/// a check's output) is stored on every backend, each NUL of a text column as U+FFFD:
/// PostgreSQL refuses a NUL in text, and SQLite keeps no more than PostgreSQL can (the
/// contract). Before, such a task or event failed to store on PostgreSQL.
fn a_nul_byte_in_foreign_text_is_stored_as_a_replacement_character(b: Backend) {
    use polyphony::domain::{AttemptStatus, CheckEvidence, RunResult};
    let store = full(&b);
    let mut t = task("local-1");
    t.title = "Fix\0 add()".into();
    t.body = "`add 2 3`\0 prints -1.\0".into();
    t.labels = vec!["b\0ug".into()];
    t.metadata.insert("k\0".into(), "v\0".into());
    assert!(store.insert_task(&t).unwrap());
    let got = store.get_task("local-1").unwrap().expect("stored");
    assert_eq!(got.title, "Fix\u{fffd} add()");
    assert_eq!(got.body, "`add 2 3`\u{fffd} prints -1.\u{fffd}");
    // Labels and metadata are stored as JSON, which escapes a NUL itself: exact.
    assert_eq!(got.labels, t.labels);
    assert_eq!(got.metadata, t.metadata);
    walk_to(&store, "local-1", Running);
    store.start_attempt(&run_spec("local-1", 1), t0()).unwrap();
    let event = message_event(0, "a line\0 with a NUL", serde_json::json!({"raw": "x\0y"}));
    assert_eq!(store.append_events("local-1", 1, &[event]).unwrap(), 1);
    let stored = store.events("local-1", 1, None, 10).unwrap();
    assert_eq!(stored[0].summary, "a line\u{fffd} with a NUL");
    // JSON escapes a NUL itself: the data round-trips exactly.
    assert_eq!(stored[0].data["raw"], "x\0y");
    let result = RunResult {
        final_message: Some("done\0".into()),
        reason: Some("ended\0".into()),
        ..RunResult::new("local-1", 1, "claude", AttemptStatus::Failed)
    };
    let evidence = CheckEvidence {
        name: "test".into(),
        command: "sh test.sh".into(),
        exit_code: Some(1),
        duration_ms: 5,
        passed: false,
        output_tail: "FAIL\0".into(),
    };
    store.finish_attempt(&result, &[evidence], t0()).unwrap();
    let record = store.attempt("local-1", 1).unwrap().unwrap();
    assert_eq!(record.final_message.as_deref(), Some("done\u{fffd}"));
    assert_eq!(record.reason.as_deref(), Some("ended\u{fffd}"));
    // A key with a NUL is mapped alike: `local-1\0` looks up `local-1\u{fffd}`, not `local-1`.
    assert!(store.get_task("local-1\0").unwrap().is_none());
}
