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

use crate::support::spec::local_task;

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 9, 0, 0).unwrap()
}

fn task(id: &str) -> Task {
    local_task(id, t0())
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
    a_failed_task_is_claimed_again_once_its_retry_time_comes,
    usage_limit_merges_are_atomic_across_connections,
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
    let lease = t0() + Duration::seconds(30);
    let claimed = store.claim_next_owned(&me, lease, t0()).unwrap().unwrap();
    assert_eq!((claimed.id.as_str(), claimed.state), ("local-1", Claimed));
    let claim = store.claim_of("local-1").unwrap().unwrap();
    assert_eq!(claim.machine, "m1");
    assert_eq!(claim.owner, me.key());
    assert_eq!(claim.lease_until, lease);
    let summary = store.summary_json("local-1").unwrap().unwrap();
    assert!(summary.contains("\"state\":\"CLAIMED\""), "{summary}");
    assert_eq!(
        store
            .claim_next_owned(&me, lease, t0())
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
                        match store.claim_next_owned(&me, t0() + Duration::seconds(60), t0()) {
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
    store
        .claim_next_owned(&me, t0() + Duration::seconds(30), t0())
        .unwrap();
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
    store
        .claim_next_owned(&me, t0() + Duration::seconds(30), t0())
        .unwrap();
    store
        .transition("local-1", Claimed, Routed, "routed", t0())
        .unwrap();
    assert!(store.claim_of("local-1").unwrap().is_some(), "still active");
    store
        .transition("local-1", Routed, Failed, "no agent", t0())
        .unwrap();
    assert_eq!(store.claim_of("local-1").unwrap(), None);
    assert!(store.reconcilable(&me, t0()).unwrap().is_empty());
}

fn leases_are_renewed_by_their_owner_and_expire_for_the_others(b: Backend) {
    let store = b.open();
    store.insert_task(&task("local-1")).unwrap();
    store.insert_task(&task("local-2")).unwrap();
    let (a, other) = (owner("m1", "a"), owner("m2", "b"));
    let lease = t0() + Duration::seconds(30);
    store.claim_next_owned(&a, lease, t0()).unwrap().unwrap();
    store
        .claim_next_owned(&other, lease, t0())
        .unwrap()
        .unwrap();
    // Each daemon reconciles its own machine's claims only while the other's lease runs.
    let mine = |o: &Owner, now| -> Vec<(String, bool)> {
        store
            .reconcilable(o, now)
            .unwrap()
            .into_iter()
            .map(|r| (r.task.id, r.expired))
            .collect()
    };
    assert_eq!(mine(&a, t0()), vec![("local-1".to_string(), false)]);
    assert_eq!(mine(&other, t0()), vec![("local-2".to_string(), false)]);
    // a renews; m2's lease runs out: a may now reconcile local-2 as a lost machine's.
    let renewed_to = t0() + Duration::seconds(90);
    assert_eq!(store.renew_leases(&a, renewed_to).unwrap(), 1);
    assert_eq!(
        store.claim_of("local-1").unwrap().unwrap().lease_until,
        renewed_to
    );
    let after = t0() + Duration::seconds(60);
    assert_eq!(
        mine(&a, after),
        vec![
            ("local-1".to_string(), false),
            ("local-2".to_string(), true)
        ]
    );
    assert_eq!(mine(&other, after), vec![("local-2".to_string(), false)]);
    // A different owner key renews nothing.
    assert_eq!(
        store.renew_leases(&owner("m1", "zzz"), renewed_to).unwrap(),
        0
    );
}

fn an_expired_claim_is_taken_over_by_exactly_one_daemon(b: Backend) {
    let store = b.open();
    store.insert_task(&task("local-1")).unwrap();
    let lost = owner("m-lost", "a");
    store
        .claim_next_owned(&lost, t0() + Duration::seconds(30), t0())
        .unwrap()
        .unwrap();
    let (b1, b2) = (owner("m1", "b"), owner("m2", "c"));
    let lease = t0() + Duration::seconds(120);
    assert!(
        !store.take_over("local-1", &b1, lease, t0()).unwrap(),
        "a live lease is not taken"
    );
    let after = t0() + Duration::seconds(31);
    assert!(store.take_over("local-1", &b1, lease, after).unwrap());
    assert!(
        !store.take_over("local-1", &b2, lease, after).unwrap(),
        "the second taker finds b1's live lease"
    );
    let claim = store.claim_of("local-1").unwrap().unwrap();
    assert_eq!((claim.machine.as_str(), claim.owner), ("m1", b1.key()));
    // The lost daemon, back, renews nothing: the claim is not its any more.
    assert_eq!(store.renew_leases(&lost, lease).unwrap(), 0);
    // Concurrently, from separate connections: one winner.
    store.insert_task(&task("local-2")).unwrap();
    store
        .claim_next_owned(&lost, t0() + Duration::seconds(30), t0())
        .unwrap()
        .unwrap();
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
                        .take_over("local-2", &owner(&format!("r{n}"), "n"), lease, after)
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
    let lease = t0() + Duration::seconds(30);
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

fn a_failed_task_is_claimed_again_once_its_retry_time_comes(b: Backend) {
    let store = b.open();
    let mut t = task("local-1");
    t.state = Failed;
    t.next_attempt_at = Some(t0() + Duration::seconds(10));
    store.insert_task(&t).unwrap();
    let me = owner("m1", "a");
    let lease = t0() + Duration::seconds(60);
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
