//! The store against a real SQLite file: migrations, the transition log, the claim race,
//! summaries and idempotency records. Attempts, events and landings round-trip on both
//! backends in `store_contract.rs`.

use crate::support;

use std::collections::HashSet;
use std::sync::{Arc, Barrier};

use chrono::{DateTime, Duration, TimeZone, Utc};
use polyphony::domain::{
    AttemptStatus, NetworkMode, Risk, RunResult, RunSpec, SourceKind, Task, TaskState,
};
use polyphony::store::{Store, StoreError};
use support::spec::{local_task, path_to, run_spec};
use TaskState::*;

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 3, 9, 0, 0).unwrap()
}

fn temp_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("home/queue.db")).unwrap();
    (dir, store)
}

fn task(id: &str) -> Task {
    local_task(id, t0())
}

fn spec(task_id: &str, attempt: u32, identity: &str) -> RunSpec {
    RunSpec {
        fallback: vec!["codex".into()],
        identity: identity.into(),
        max_turns: Some(10),
        args: Vec::new(),
        network: NetworkMode::Bridge,
        egress: Default::default(),
        ..run_spec(task_id, attempt)
    }
}

fn drive(store: &Store, id: &str, to: TaskState) {
    let mut at = Discovered;
    for &next in path_to(to) {
        store.transition(id, at, next, "setup", t0()).unwrap();
        at = next;
    }
}

#[test]
fn migrations_create_the_schema_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/dir/queue.db");
    let store = Store::open(&path).unwrap();
    assert_eq!(
        store.schema_version().unwrap(),
        polyphony::store::schema::latest()
    );
    assert!(store.insert_task(&task("local-1")).unwrap());
    drop(store);

    // Reopening keeps the data and does not re-run migrations.
    let store = Store::open(&path).unwrap();
    assert!(store.get_task("local-1").unwrap().is_some());

    // WAL, as seen by an independent connection.
    let raw = rusqlite::Connection::open(&path).unwrap();
    let mode: String = raw
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");

    // A database written by a newer polyphony is refused, not silently used.
    raw.pragma_update(None, "user_version", 99).unwrap();
    drop(raw);
    drop(store);
    match Store::open(&path) {
        Err(StoreError::SchemaTooNew { found: 99, .. }) => {}
        other => panic!("expected SchemaTooNew, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn insert_dedupes_and_round_trips_every_field() {
    let (_dir, store) = temp_store();
    let mut t = task("acme/widgets#42");
    t.source = SourceKind::Github;
    t.source_ref = "acme/widgets#42".into();
    t.body = "The parser drops the last line.\nSee parser.rs".into();
    t.base_ref = Some("develop".into());
    t.labels = vec!["agent-ready".into(), "bug".into()];
    t.metadata.insert("issue_number".into(), "42".into());
    t.requires_web = true;
    t.context_tokens = 1234;
    t.next_attempt_at = Some(t0() + Duration::seconds(10));
    assert!(store.insert_task(&t).unwrap());
    assert_eq!(store.get_task(&t.id).unwrap(), Some(t.clone()));
    assert_eq!(
        store.find_by_source_ref("acme/widgets#42").unwrap(),
        Some(t.clone())
    );

    let mut changed = t.clone();
    changed.title = "Something else".into();
    assert!(
        !store.insert_task(&changed).unwrap(),
        "same id must not insert"
    );
    assert_eq!(store.get_task(&t.id).unwrap().unwrap().title, t.title);
    assert_eq!(store.get_task("nope").unwrap(), None);
}

#[test]
fn local_ids_are_sequential_and_never_reused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("queue.db");
    let store = Store::open(&path).unwrap();
    assert_eq!(store.next_local_task_id().unwrap(), "local-1");
    assert_eq!(store.next_local_task_id().unwrap(), "local-2");
    drop(store);
    let store = Store::open(&path).unwrap();
    assert_eq!(store.next_local_task_id().unwrap(), "local-3");
}

#[test]
fn every_legal_transition_writes_exactly_one_row() {
    let (_dir, store) = temp_store();
    let mut checked = 0;
    for from in TaskState::ALL {
        for to in TaskState::ALL {
            if !polyphony::domain::can_transition(from, to) {
                continue;
            }
            let id = format!("t-{from}-{to}");
            store.insert_task(&task(&id)).unwrap();
            drive(&store, &id, from);
            let before = store.transitions(&id).unwrap();
            assert_eq!(before.len(), path_to(from).len());
            let now = t0() + Duration::minutes(5);
            let moved = store.transition(&id, from, to, "because", now).unwrap();
            assert_eq!(moved.state, to);
            assert_eq!(moved.updated_at, now);
            let after = store.transitions(&id).unwrap();
            assert_eq!(after.len(), before.len() + 1, "{from} -> {to}");
            let last = after.last().unwrap();
            assert_eq!(
                (last.from, last.to, last.reason.as_str(), last.at),
                (from, to, "because", now)
            );
            checked += 1;
        }
    }
    // Spec §4, the three early failure edges, and the seven cancels (issue 29).
    assert_eq!(checked, 20);
}

#[test]
fn invalid_and_stale_transitions_write_nothing() {
    let (_dir, store) = temp_store();
    for from in TaskState::ALL {
        for to in TaskState::ALL {
            if polyphony::domain::can_transition(from, to) {
                continue;
            }
            let id = format!("bad-{from}-{to}");
            store.insert_task(&task(&id)).unwrap();
            drive(&store, &id, from);
            let before_task = store.get_task(&id).unwrap().unwrap();
            let before = store.transitions(&id).unwrap().len();
            match store.transition(&id, from, to, "nope", t0() + Duration::hours(1)) {
                Err(StoreError::InvalidTransition { source, .. }) => {
                    assert_eq!((source.from, source.to), (from, to));
                }
                other => panic!("{from} -> {to}: expected InvalidTransition, got {other:?}"),
            }
            assert_eq!(store.get_task(&id).unwrap().unwrap(), before_task);
            assert_eq!(store.transitions(&id).unwrap().len(), before);
        }
    }

    // Someone else moved the task: the caller's expectation is stale.
    store.insert_task(&task("stale")).unwrap();
    drive(&store, "stale", Routed);
    match store.transition("stale", Claimed, Routed, "late", t0()) {
        Err(StoreError::StaleState {
            expected: Claimed,
            actual: Routed,
            ..
        }) => {}
        other => panic!("expected StaleState, got {other:?}"),
    }
    assert_eq!(store.transitions("stale").unwrap().len(), 2);

    match store.transition("ghost", Discovered, Claimed, "x", t0()) {
        Err(StoreError::NotFound(id)) => assert_eq!(id, "ghost"),
        other => panic!("expected NotFound, got {other:?}"),
    }
}

#[test]
fn claims_take_the_oldest_ready_task_and_respect_backoff() {
    let (_dir, store) = temp_store();
    for id in ["a", "b", "c"] {
        store.insert_task(&task(id)).unwrap();
    }
    // `a` failed and waits for its retry time; `b` failed and will never retry.
    drive(&store, "a", Failed);
    store
        .set_retry("a", 1, Some(t0() + Duration::seconds(20)))
        .unwrap();
    drive(&store, "b", Failed);
    store.set_retry("b", 3, None).unwrap();

    let got = store.claim_next(t0()).unwrap().unwrap();
    assert_eq!((got.id.as_str(), got.state), ("c", Claimed));
    assert_eq!(
        store.claim_next(t0()).unwrap(),
        None,
        "a is backing off, b never retries"
    );

    let later = t0() + Duration::seconds(20);
    let retry = store.claim_next(later).unwrap().unwrap();
    assert_eq!(
        (retry.id.as_str(), retry.failures, retry.next_attempt_at),
        ("a", 1, None)
    );
    let last = store.transitions("a").unwrap().pop().unwrap();
    assert_eq!(
        (last.from, last.to, last.reason.as_str()),
        (Failed, Claimed, "claimed for retry")
    );
    assert_eq!(store.claim_next(later).unwrap(), None);

    // A specific claim.
    store.insert_task(&task("d")).unwrap();
    assert_eq!(store.claim("d", t0()).unwrap().unwrap().state, Claimed);
    assert_eq!(store.claim("d", t0()).unwrap(), None, "already claimed");
    assert_eq!(store.claim("b", later).unwrap(), None, "no retry time");
    assert!(matches!(
        store.claim("zzz", t0()),
        Err(StoreError::NotFound(_))
    ));
}

#[test]
fn claim_race_each_task_is_claimed_exactly_once() {
    const TASKS: usize = 1000;
    const WORKERS: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("queue.db");
    {
        let store = Store::open(&path).unwrap();
        for i in 0..TASKS {
            assert!(store.insert_task(&task(&format!("race-{i}"))).unwrap());
        }
    }
    let barrier = Arc::new(Barrier::new(WORKERS));
    let handles: Vec<_> = (0..WORKERS)
        .map(|_| {
            let path = path.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                // Each worker has its OWN connection, like separate daemons.
                let store = Store::open(&path).unwrap();
                barrier.wait();
                let mut claimed = Vec::new();
                while let Some(t) = store.claim_next(t0()).unwrap() {
                    assert_eq!(t.state, Claimed);
                    claimed.push(t.id);
                    // A daemon works between claims. Without a pause the holder of the
                    // write lock re-takes it before SQLite's busy handler wakes the
                    // waiters (it sleeps 1 ms, 2 ms, 5 ms, …), and no race happens at all.
                    std::thread::sleep(std::time::Duration::from_micros(500));
                }
                claimed
            })
        })
        .collect();
    let per_worker: Vec<Vec<String>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let all: Vec<&String> = per_worker.iter().flatten().collect();
    let unique: HashSet<&String> = all.iter().copied().collect();
    assert_eq!(all.len(), TASKS, "claims in total");
    assert_eq!(unique.len(), TASKS, "no task claimed twice");
    assert!(
        per_worker.iter().filter(|w| !w.is_empty()).count() > 1,
        "the race had several winners"
    );

    let store = Store::open(&path).unwrap();
    let counts = store.count_by_state().unwrap();
    assert_eq!(counts.get(&Claimed), Some(&(TASKS as u64)));
    assert_eq!(counts.get(&Discovered), None);
    for i in (0..TASKS).step_by(97) {
        let log = store.transitions(&format!("race-{i}")).unwrap();
        assert_eq!(log.len(), 1);
        assert_eq!((log[0].from, log[0].to), (Discovered, Claimed));
    }
}

#[test]
fn listing_is_newest_first_and_filters_by_state() {
    let (_dir, store) = temp_store();
    for i in 1..=5 {
        store.insert_task(&task(&format!("local-{i}"))).unwrap();
    }
    drive(&store, "local-2", Claimed);
    drive(&store, "local-4", Claimed);
    let ids = |tasks: Vec<Task>| tasks.into_iter().map(|t| t.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.list_tasks(None, None).unwrap()),
        ["local-5", "local-4", "local-3", "local-2", "local-1"]
    );
    assert_eq!(
        ids(store.list_tasks(Some(Claimed), None).unwrap()),
        ["local-4", "local-2"]
    );
    assert_eq!(
        ids(store.list_tasks(Some(Discovered), Some(2)).unwrap()),
        ["local-5", "local-3"]
    );
    assert!(store.list_tasks(Some(Landed), None).unwrap().is_empty());
    let counts = store.count_by_state().unwrap();
    assert_eq!((counts[&Discovered], counts[&Claimed]), (3, 2));
}

/// The streamed listing (`status --json`) sees what `list_tasks` sees, field for field.
#[test]
fn summaries_match_the_listing_and_stream_in_order() {
    let (_dir, store) = temp_store();
    for i in 1..=5 {
        let mut t = task(&format!("local-{i}"));
        t.labels = vec!["plain".into(), format!("quote \" and \\ {i}")];
        t.risk = Risk::High;
        store.insert_task(&t).unwrap();
    }
    drive(&store, "local-2", Claimed);
    store
        .set_retry("local-3", 2, Some(t0() + Duration::minutes(5)))
        .unwrap();
    let summaries = |state: Option<TaskState>, limit: Option<usize>| {
        let mut seen = Vec::new();
        store
            .for_each_task_summary(state, limit, |s| -> Result<(), StoreError> {
                seen.push(serde_json::to_value(s).unwrap());
                Ok(())
            })
            .unwrap();
        seen
    };
    let check = |state: Option<TaskState>, limit: Option<usize>| {
        let full = store.list_tasks(state, limit).unwrap();
        let seen = summaries(state, limit);
        assert_eq!(seen.len(), full.len());
        for (s, t) in seen.iter().zip(&full) {
            assert_eq!(s["id"], t.id.as_str());
            assert_eq!(s["title"], t.title.as_str());
            assert_eq!(s["source_ref"], t.source_ref.as_str());
            assert_eq!(s["state"], t.state.as_str());
            assert_eq!(s["task_type"], t.task_type.as_str());
            assert_eq!(s["risk"], "high");
            assert_eq!(s["labels"], serde_json::json!(t.labels));
            assert_eq!(
                (s["attempts"].as_u64(), s["failures"].as_u64()),
                (Some(t.attempts.into()), Some(t.failures.into()))
            );
            let at = |v: &serde_json::Value| {
                v.as_str()
                    .map(|s| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc))
            };
            assert_eq!(at(&s["created_at"]), Some(t.created_at));
            assert_eq!(at(&s["updated_at"]), Some(t.updated_at));
            assert_eq!(at(&s["next_attempt_at"]), t.next_attempt_at);
            assert!(s.get("body").is_none());
        }
    };
    check(None, None);
    check(Some(Claimed), None);
    check(Some(Discovered), Some(2));
    check(Some(Landed), None);
    assert_eq!(summaries(None, None)[2]["failures"], 2);

    // An error from the callback stops the walk and comes back unchanged.
    let mut calls = 0;
    let err = store
        .for_each_task_summary(None, None, |_| {
            calls += 1;
            Err(StoreError::NotFound("stop".into()))
        })
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound(ref s) if s == "stop"));
    assert_eq!(calls, 1);
}

#[test]
fn comments_and_kv_are_idempotent_records() {
    let (_dir, store) = temp_store();
    store.insert_task(&task("t")).unwrap();
    assert!(store.record_comment("t", "claimed", 1001, t0()).unwrap());
    assert!(!store.record_comment("t", "claimed", 1002, t0()).unwrap());
    assert_eq!(store.comment_id("t", "claimed").unwrap(), Some(1001));
    assert_eq!(store.comment_id("t", "landed").unwrap(), None);
    assert_eq!(store.kv_get("cursor").unwrap(), None);
    store.kv_set("cursor", "a", t0()).unwrap();
    store.kv_set("cursor", "b", t0()).unwrap();
    assert_eq!(store.kv_get("cursor").unwrap().as_deref(), Some("b"));
}

// ------------------------------------------------------------ issue 19: intents

use polyphony::store::{BlockSettlement, IntentKind, Settlement};

#[test]
fn intents_are_pending_until_completed_and_recording_again_reopens_them() {
    let (_dir, store) = temp_store();
    store.insert_task(&task("local-1")).unwrap();
    let payload = serde_json::json!({ "agent": "claude" });
    store
        .record_intent("local-1", IntentKind::Claim, 1, &payload, t0())
        .unwrap();
    assert!(store
        .has_pending_intent("local-1", IntentKind::Claim)
        .unwrap());
    assert!(!store
        .has_pending_intent("local-1", IntentKind::Block)
        .unwrap());
    let pending = store.pending_intents().unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(
        (pending[0].kind, pending[0].attempt, &pending[0].payload),
        (IntentKind::Claim, 1, &payload)
    );
    assert!(store
        .complete_intent("local-1", IntentKind::Claim, 1, t0())
        .unwrap());
    assert!(!store
        .complete_intent("local-1", IntentKind::Claim, 1, t0())
        .unwrap());
    assert!(store.pending_intents().unwrap().is_empty());
    store
        .record_intent("local-1", IntentKind::Claim, 1, &payload, t0())
        .unwrap();
    assert_eq!(store.pending_intents().unwrap().len(), 1);
}

#[test]
fn recording_the_container_completes_its_intent_in_the_same_write() {
    let (_dir, store) = temp_store();
    store.insert_task(&task("local-1")).unwrap();
    drive(&store, "local-1", Routed);
    store
        .start_attempt(&spec("local-1", 1, "demo"), t0())
        .unwrap();
    store
        .record_intent(
            "local-1",
            IntentKind::Container,
            1,
            &serde_json::json!({}),
            t0(),
        )
        .unwrap();
    store.set_container("local-1", 1, "abc123").unwrap();
    assert!(store.pending_intents().unwrap().is_empty());
    assert_eq!(
        store
            .attempt("local-1", 1)
            .unwrap()
            .unwrap()
            .container_id
            .as_deref(),
        Some("abc123")
    );
}

/// The attempt's failed result and the task's settlement are one write: a settlement that
/// cannot happen (a stale state) records no result either, so no kill between two writes
/// can leave a failed attempt on a task whose failure was never counted (the chaos test
/// once found the task with one failed attempt more than failures).
#[test]
fn a_failed_attempts_result_and_its_settlement_are_one_write() {
    let (_dir, store) = temp_store();
    store.insert_task(&task("local-1")).unwrap();
    drive(&store, "local-1", Routed);
    store
        .start_attempt(&spec("local-1", 1, "demo"), t0())
        .unwrap();
    for (from, to) in [(Routed, Provisioned), (Provisioned, Running)] {
        store
            .transition("local-1", from, to, "setup", t0())
            .unwrap();
    }
    let result = polyphony::domain::RunResult {
        reason: Some("tests failed".into()),
        ..polyphony::domain::RunResult::new("local-1", 1, "claude", AttemptStatus::Failed)
    };
    let retry = Settlement {
        failures: 1,
        next_attempt_at: Some(t0()),
        block: None,
    };
    let err = store
        .settle_attempt_failure((&result, &[]), Verifying, "tests failed", &retry, t0())
        .unwrap_err();
    assert!(matches!(err, StoreError::StaleState { .. }), "{err}");
    let attempts = store.attempts("local-1").unwrap();
    assert_eq!(attempts[0].status, None, "{attempts:?}");
    assert_eq!(store.get_task("local-1").unwrap().unwrap().failures, 0);

    let t = store
        .settle_attempt_failure((&result, &[]), Running, "tests failed", &retry, t0())
        .unwrap();
    assert_eq!((t.state, t.failures), (Failed, 1));
    let attempts = store.attempts("local-1").unwrap();
    assert_eq!(
        attempts[0].status,
        Some(AttemptStatus::Failed),
        "{attempts:?}"
    );
}

#[test]
fn settling_a_failure_writes_state_retry_time_and_block_together() {
    let (_dir, store) = temp_store();
    for id in ["local-1", "local-2", "local-3"] {
        store.insert_task(&task(id)).unwrap();
        drive(&store, id, Running);
    }
    let at = t0() + Duration::seconds(10);
    let retry = Settlement {
        failures: 1,
        next_attempt_at: Some(at),
        block: None,
    };
    let t = store
        .settle_failure("local-1", Running, "agent failed", &retry, t0())
        .unwrap();
    assert_eq!(
        (t.state, t.failures, t.next_attempt_at),
        (Failed, 1, Some(at))
    );

    // A stale caller writes nothing.
    let err = store
        .settle_failure("local-1", Running, "again", &retry, t0())
        .unwrap_err();
    assert!(matches!(err, StoreError::StaleState { .. }), "{err}");
    assert_eq!(store.transitions("local-1").unwrap().len(), 5);

    // Giving up: FAILED and BLOCKED in one write, the report pending with it.
    let block = Settlement {
        failures: 3,
        next_attempt_at: Some(at),
        block: Some(BlockSettlement {
            reason: "out of attempts".into(),
            report: true,
            released: false,
        }),
    };
    let t = store
        .settle_failure("local-2", Running, "tests failed", &block, t0())
        .unwrap();
    assert_eq!((t.state, t.failures, t.next_attempt_at), (Blocked, 3, None));
    let to: Vec<TaskState> = store
        .transitions("local-2")
        .unwrap()
        .iter()
        .map(|r| r.to)
        .collect();
    assert_eq!(&to[to.len() - 2..], &[Failed, Blocked]);
    let pending = store.pending_intents().unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].kind, IntentKind::Block);

    // Already FAILED (released while claiming): only BLOCKED is added; no report.
    store
        .settle_failure("local-3", Running, "x", &retry, t0())
        .unwrap();
    let quiet = Settlement {
        failures: 1,
        next_attempt_at: None,
        block: Some(BlockSettlement {
            reason: "released".into(),
            report: false,
            released: true,
        }),
    };
    assert_eq!(store.released_at("local-3").unwrap(), None);
    let t = store
        .settle_failure("local-3", Failed, "released", &quiet, t0())
        .unwrap();
    assert_eq!(t.state, Blocked);
    assert_eq!(store.released_at("local-3").unwrap(), Some(t0()));
    assert_eq!(store.released_at("local-2").unwrap(), None);
    assert_eq!(store.pending_intents().unwrap().len(), 1);
}

/// Issue 27: a home made by the release of schema version 6 (summaries written by SQLite
/// triggers) upgrades in place when the new binary opens it, and `status --json` prints
/// the same objects it printed before, fields only added; after the upgrade the store
/// writes the summaries itself.
#[test]
fn schema_6_home_upgrades_in_place_and_status_json_only_gains_fields() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let db = home.join("queue.db");
    // The home as schema 6 wrote it: its migrations, its triggers, rows of every kind.
    let old_output = {
        let conn = queue_at_schema(&db, 6);
        let tasks = [
            (
                "local-1",
                "local",
                "local:local-1",
                "DISCOVERED",
                0,
                0,
                None,
            ),
            (
                "local-2",
                "local",
                "local:local-2",
                "FAILED",
                1,
                1,
                Some("2026-11-30T05:00:00.000000Z"),
            ),
            ("o/r#3", "github", "o/r#3", "LANDED", 1, 0, None),
            ("o/r#3-f1", "github", "o/r#3", "RUNNING", 1, 0, None),
            ("o/r#4", "github", "o/r#4", "BLOCKED", 3, 3, None),
        ];
        for (id, source, source_ref, state, attempts, failures, next) in tasks {
            conn.execute(
                "INSERT INTO tasks VALUES (?1, 'Fix \"it\" \u{1f}é', 'body', ?2, ?3, '/r', NULL, ?4, \
                 'bugfix', 'small', 'medium', 3, 0, '[\"a\",\"b\\\"c\"]', '{}', ?5, ?6, \
                 '2026-11-30T01:00:00.000000Z', '2026-11-30T01:30:00.000000Z', ?7)",
                rusqlite::params![id, source, source_ref, state, attempts, failures, next],
            )
            .unwrap();
        }
        conn.execute_batch(
            "INSERT INTO quota_waits VALUES ('local-2', '2026-11-30T05:00:00.000000Z', 'claude', \
                 'personal', '[]', '2026-11-30T01:30:00.000000Z');
             INSERT INTO pulls VALUES ('o/r#3', 'o/r', 7, 'polyphony/o_r_3-a1', 'main', 'sha', \
                 'open', 'failing', NULL, 'yes', 1, 1, '2026-11-30T01:30:00.000000Z');
             INSERT INTO followups VALUES ('o/r#3-f1', 'o/r#3', 1, '{}', \
                 '2026-11-30T01:30:00.000000Z');
             PRAGMA wal_checkpoint(TRUNCATE);",
        )
        .unwrap();
        // What schema 6's `status --json` printed: the stored summaries, newest first.
        let mut stmt = conn
            .prepare("SELECT json FROM task_summaries ORDER BY seq DESC")
            .unwrap();
        let objects: Vec<String> = stmt
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(objects.len(), 5);
        format!("[{}]\n", objects.join(","))
    };
    let status_json = || status_json(&home);
    let new_output = status_json();
    let old: Vec<serde_json::Value> = serde_json::from_str(&old_output).unwrap();
    let new: Vec<serde_json::Value> = serde_json::from_str(&new_output).unwrap();
    assert_eq!(old.len(), new.len());
    for (o, n) in old.iter().zip(&new) {
        for (key, value) in o.as_object().unwrap() {
            assert_eq!(&n[key], value, "field `{key}` of {}", o["id"]);
        }
    }
    // The upgrade happened in place, once, and dropped every trigger.
    let store = Store::open(&db).unwrap();
    assert_eq!(
        store.schema_version().unwrap(),
        polyphony::store::schema::latest()
    );
    let triggers: i64 = rusqlite::Connection::open(&db)
        .unwrap()
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'trigger'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(triggers, 0);
    // From now on the store writes the summaries.
    store.claim("local-1", t0()).unwrap().unwrap();
    let after: Vec<serde_json::Value> = serde_json::from_str(&status_json()).unwrap();
    let local1 = after.iter().find(|o| o["id"] == "local-1").unwrap();
    assert_eq!(local1["state"], "CLAIMED");
    assert_eq!(after[0]["id"], "o/r#4", "still newest first");
    // Each detail still reads.
    for o in &old {
        let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("polyphony"))
            .arg("--home")
            .arg(&home)
            .args(["status", o["id"].as_str().unwrap(), "--json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The stored summary of `id`, as `status --json` prints it.
fn summary_of(store: &Store, id: &str) -> serde_json::Value {
    serde_json::from_str(&store.summary_json(id).unwrap().unwrap()).unwrap()
}

/// Issue 29: a summary names the agent of the task's latest attempt and what its attempts
/// cost, kept current by every attempt write (null before the first, or before a cost).
#[test]
fn summaries_carry_the_latest_agent_and_the_cost() {
    let (_dir, store) = temp_store();
    store.insert_task(&task("t")).unwrap();
    let s = summary_of(&store, "t");
    assert_eq!(s["agent"], serde_json::Value::Null, "{s}");
    assert_eq!(s["cost_usd"], serde_json::Value::Null, "{s}");
    store
        .start_attempt(&spec("t", 1, "personal"), t0())
        .unwrap();
    let s = summary_of(&store, "t");
    assert_eq!(s["agent"], "claude", "{s}");
    assert_eq!(s["cost_usd"], serde_json::Value::Null, "{s}");
    let ended = |attempt: u32, agent: &str, cost: Option<f64>| RunResult {
        cost_usd: cost,
        ..RunResult::new("t", attempt, agent, AttemptStatus::Failed)
    };
    store
        .finish_attempt(&ended(1, "claude", Some(0.25)), &[], t0())
        .unwrap();
    assert_eq!(summary_of(&store, "t")["cost_usd"], 0.25);
    store
        .start_attempt(
            &RunSpec {
                agent: "codex-main".into(),
                ..spec("t", 2, "work")
            },
            t0(),
        )
        .unwrap();
    let s = summary_of(&store, "t");
    assert_eq!(
        (s["agent"].as_str(), s["cost_usd"].as_f64()),
        (Some("codex-main"), Some(0.25))
    );
    store
        .finish_attempt(&ended(2, "codex-main", Some(0.5)), &[], t0())
        .unwrap();
    assert_eq!(summary_of(&store, "t")["cost_usd"], 0.75);
    // The listing and the table read the same fields.
    let mut seen = Vec::new();
    store
        .for_each_task_summary(None, None, |t| -> Result<(), StoreError> {
            seen.push((t.agent.map(str::to_string), t.cost_usd));
            Ok(())
        })
        .unwrap();
    assert_eq!(seen, [(Some("codex-main".to_string()), Some(0.75))]);
}

/// Issue 29: opening a home whose summaries predate `agent` and `cost_usd` (schema 8)
/// rewrites them with both.
#[test]
fn migration_9_adds_agent_and_cost_to_stored_summaries() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("queue.db");
    {
        // A home as schema 8 wrote it: a task with a finished attempt, its summary without
        // the two fields.
        let conn = rusqlite::Connection::open(&db).unwrap();
        for sql in &polyphony::store::schema::MIGRATIONS[..8] {
            conn.execute_batch(sql).unwrap();
        }
        conn.execute_batch(
            "INSERT INTO tasks VALUES ('t', 'title', 'body', 'local', 'local:t', '/r', NULL, \
                 'FAILED', 'bugfix', 'small', 'medium', 3, 0, '[]', '{}', 1, 1, \
                 '2026-11-30T01:00:00.000000Z', '2026-11-30T01:30:00.000000Z', NULL);
             INSERT INTO attempts (task_id, attempt, agent, identity, run_spec, workspace, \
                 branch, status, cost_usd, started_at, finished_at) VALUES ('t', 1, 'claude', \
                 'personal', '{}', '/w', 'b', 'failed', 1.5, '2026-11-30T01:00:00.000000Z', \
                 '2026-11-30T01:30:00.000000Z');
             INSERT INTO task_summaries (seq, id, json) VALUES (1, 't', '{\"id\":\"t\"}');",
        )
        .unwrap();
        conn.pragma_update(None, "user_version", 8).unwrap();
    }
    let store = Store::open(&db).unwrap();
    assert_eq!(
        store.schema_version().unwrap(),
        polyphony::store::schema::latest()
    );
    let s = summary_of(&store, "t");
    assert_eq!(
        (s["agent"].as_str(), s["cost_usd"].as_f64()),
        (Some("claude"), Some(1.5)),
        "{s}"
    );
}

/// Issue 27: schema 11 moves the claim's owner and lease and the pin into the task's row,
/// keys summaries by the task's rowid alone and numbers transitions per task. A home of
/// schema 10 with a live claim, a pin and interleaved transitions upgrades in place: the
/// claim, its lease and the pin hold as before, each task's transitions keep their order,
/// `status --json` prints the same bytes, and the `claims` and `pins` views read as the
/// tables did.
#[test]
fn schema_10_home_keeps_its_claims_pins_transitions_and_summaries_through_migration_11() {
    use polyphony::store::Owner;
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let db = home.join("queue.db");
    let owner = Owner {
        machine: "m1".into(),
        pid: 7,
        nonce: "abc".into(),
    };
    let lease = "2026-11-03T09:05:00.000000Z";
    let summaries = [
        r#"{"id":"local-1","state":"RUNNING","old":"bytes \u001f kept"}"#,
        r#"{"id":"local-2","state":"DISCOVERED"}"#,
        r#"{"id":"local-3","state":"LANDED"}"#,
    ];
    {
        let conn = queue_at_schema(&db, 10);
        for (i, (id, state)) in [
            ("local-1", "RUNNING"),
            ("local-2", "DISCOVERED"),
            ("local-3", "LANDED"),
        ]
        .into_iter()
        .enumerate()
        {
            conn.execute(
                "INSERT INTO tasks VALUES (?1, 'title', 'body', 'local', ?1, '/r', NULL, ?2, \
                 'bugfix', 'small', 'medium', 3, 0, '[]', '{}', 1, 0, \
                 '2026-11-03T08:00:00.000000Z', '2026-11-03T08:30:00.000000Z', NULL)",
                rusqlite::params![id, state],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO task_summaries (seq, id, json) VALUES (?1, ?2, ?3)",
                rusqlite::params![i as i64 + 1, id, summaries[i]],
            )
            .unwrap();
        }
        // Interleaved: local-3's history is written between local-1's steps.
        for (task, from, to) in [
            ("local-1", "DISCOVERED", "CLAIMED"),
            ("local-3", "DISCOVERED", "CLAIMED"),
            ("local-1", "CLAIMED", "ROUTED"),
            ("local-3", "CLAIMED", "LANDED"),
            ("local-1", "ROUTED", "PROVISIONED"),
            ("local-1", "PROVISIONED", "RUNNING"),
        ] {
            conn.execute(
                "INSERT INTO transitions (task_id, from_state, to_state, reason, at) \
                 VALUES (?1, ?2, ?3, 'r', '2026-11-03T08:10:00.000000Z')",
                rusqlite::params![task, from, to],
            )
            .unwrap();
        }
        conn.execute(
            "INSERT INTO claims VALUES ('local-1', 'm1', ?1, ?2)",
            rusqlite::params![owner.key(), lease],
        )
        .unwrap();
        conn.execute_batch(
            "INSERT INTO pins VALUES ('local-2', 'm2'); PRAGMA wal_checkpoint(TRUNCATE);",
        )
        .unwrap();
    }
    let status_json = || status_json(&home);
    // The listing prints the stored bytes, newest first, untouched by the upgrade.
    let mut newest_first = summaries;
    newest_first.reverse();
    assert_eq!(status_json(), format!("[{}]\n", newest_first.join(",")));
    let store = Store::open(&db).unwrap();
    assert_eq!(store.schema_version().unwrap(), 13);
    // The claim and its lease.
    let claim = store.claim_of("local-1").unwrap().unwrap();
    assert_eq!(
        (
            claim.machine.as_str(),
            claim.owner.as_str(),
            claim.lease_until
        ),
        ("m1", owner.key().as_str(), t0() + Duration::minutes(5))
    );
    assert_eq!(store.claim_of("local-2").unwrap(), None);
    let other = Owner {
        machine: "m2".into(),
        pid: 8,
        nonce: "def".into(),
    };
    let live: Vec<String> = store
        .reconcilable(&other, t0())
        .unwrap()
        .into_iter()
        .map(|r| r.task.id)
        .collect();
    assert!(live.is_empty(), "a live claim of m1 is not m2's: {live:?}");
    let expired = store
        .reconcilable(&other, t0() + Duration::minutes(6))
        .unwrap();
    assert_eq!(expired.len(), 1);
    assert!(expired[0].expired && expired[0].task.id == "local-1");
    assert_eq!(
        store
            .renew_leases(&owner, std::time::Duration::from_secs(9 * 60), t0())
            .unwrap(),
        1
    );
    // Each task's transitions in their order.
    let steps = |id: &str| -> Vec<(TaskState, TaskState)> {
        store
            .transitions(id)
            .unwrap()
            .into_iter()
            .map(|t| (t.from, t.to))
            .collect()
    };
    assert_eq!(
        steps("local-1"),
        [
            (Discovered, Claimed),
            (Claimed, Routed),
            (Routed, Provisioned),
            (Provisioned, Running)
        ]
    );
    assert_eq!(steps("local-3"), [(Discovered, Claimed), (Claimed, Landed)]);
    // A new transition is the task's next; leaving the active states ends the claim.
    store
        .transition("local-1", Running, Failed, "test", t0())
        .unwrap();
    assert_eq!(steps("local-1").last(), Some(&(Running, Failed)));
    assert_eq!(steps("local-1").len(), 5);
    assert_eq!(store.claim_of("local-1").unwrap(), None);
    // The pin holds: m1 cannot take local-2, m2 can.
    let lease = std::time::Duration::from_secs(10 * 60);
    assert_eq!(
        store
            .claim_next_owned(&owner, lease, t0())
            .unwrap()
            .map(|t| t.id),
        None
    );
    let taken = store
        .claim_next_owned(&other, lease, t0())
        .unwrap()
        .unwrap();
    assert_eq!(taken.id, "local-2");
    // The views read as the tables did.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let claims: Vec<(String, String, String)> = conn
        .prepare("SELECT task_id, machine, owner FROM claims")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(claims, [("local-2".into(), "m2".into(), other.key())]);
    let pins: Vec<(String, String)> = conn
        .prepare("SELECT task_id, machine FROM pins")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(pins, [("local-2".into(), "m2".into())]);
}

/// `polyphony --home HOME status --json`, which must succeed: its stdout.
fn status_json(home: &std::path::Path) -> String {
    let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("polyphony"))
        .arg("--home")
        .arg(home)
        .args(["status", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Issue 27: schema 13 moves each task's summary into its row and keys a task's
/// transitions by one integer. A home of schema 12 upgrades in place: `status --json`
/// prints the same bytes, each task's transitions keep their order (also when written
/// interleaved across tasks), the next transition is numbered after the last, and
/// `task_summaries` still reads as the table did.
#[test]
fn schema_12_home_keeps_its_summaries_and_transitions_through_migration_13() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let db = home.join("queue.db");
    let summaries = [
        r#"{"id":"local-1","state":"RUNNING","old":"bytes \u001f kept"}"#,
        r#"{"id":"local-2","state":"DISCOVERED"}"#,
        r#"{"id":"local-3","state":"LANDED"}"#,
    ];
    {
        let conn = queue_at_schema(&db, 12);
        for (i, (id, state)) in [
            ("local-1", "RUNNING"),
            ("local-2", "DISCOVERED"),
            ("local-3", "LANDED"),
        ]
        .into_iter()
        .enumerate()
        {
            conn.execute(
                "INSERT INTO tasks (id, title, body, source, source_ref, repo, base_ref, state, \
                 task_type, scope, risk, context_tokens, requires_web, labels, metadata, \
                 attempts, failures, created_at, updated_at, next_attempt_at) \
                 VALUES (?1, 'title', 'body', 'local', ?1, '/r', NULL, ?2, \
                 'bugfix', 'small', 'medium', 3, 0, '[]', '{}', 1, 0, \
                 '2026-11-03T08:00:00.000000Z', '2026-11-03T08:30:00.000000Z', NULL)",
                rusqlite::params![id, state],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO task_summaries (seq, json) VALUES (?1, ?2)",
                rusqlite::params![i as i64 + 1, summaries[i]],
            )
            .unwrap();
        }
        // Interleaved: local-3's history is written between local-1's steps.
        for (seq, n, task, from, to) in [
            (1, 1, "local-1", "DISCOVERED", "CLAIMED"),
            (3, 1, "local-3", "DISCOVERED", "CLAIMED"),
            (1, 2, "local-1", "CLAIMED", "ROUTED"),
            (3, 2, "local-3", "CLAIMED", "LANDED"),
            (1, 3, "local-1", "ROUTED", "PROVISIONED"),
            (1, 4, "local-1", "PROVISIONED", "RUNNING"),
        ] {
            conn.execute(
                "INSERT INTO transitions (task_seq, n, task_id, from_state, to_state, reason, at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, 'r', '2026-11-03T08:10:00.000000Z')",
                rusqlite::params![seq, n, task, from, to],
            )
            .unwrap();
        }
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
            .unwrap();
    }
    let mut newest_first = summaries;
    newest_first.reverse();
    let before = format!("[{}]\n", newest_first.join(","));
    // The first `status --json` migrates, then prints the stored bytes untouched.
    assert_eq!(status_json(&home), before);
    let store = Store::open(&db).unwrap();
    assert_eq!(store.schema_version().unwrap(), 13);
    assert_eq!(status_json(&home), before);
    assert_eq!(
        store.summary_json("local-2").unwrap().as_deref(),
        Some(summaries[1])
    );
    let steps = |id: &str| -> Vec<(TaskState, TaskState)> {
        store
            .transitions(id)
            .unwrap()
            .into_iter()
            .map(|t| (t.from, t.to))
            .collect()
    };
    assert_eq!(
        steps("local-1"),
        [
            (Discovered, Claimed),
            (Claimed, Routed),
            (Routed, Provisioned),
            (Provisioned, Running)
        ]
    );
    assert_eq!(steps("local-3"), [(Discovered, Claimed), (Claimed, Landed)]);
    assert_eq!(steps("local-2"), []);
    // New transitions follow the task's last, and its summary is rewritten in its row.
    store
        .transition("local-1", Running, Failed, "test", t0())
        .unwrap();
    store.claim("local-2", t0()).unwrap().unwrap();
    assert_eq!(steps("local-1").last(), Some(&(Running, Failed)));
    assert_eq!(steps("local-1").len(), 5);
    assert_eq!(steps("local-2"), [(Discovered, Claimed)]);
    assert_eq!(summary_of(&store, "local-1")["state"], "FAILED");
    assert_eq!(summary_of(&store, "local-2")["state"], "CLAIMED");
    let conn = rusqlite::Connection::open(&db).unwrap();
    let keys: Vec<(i64, i64, String)> = conn
        .prepare("SELECT task_seq, n, to_state FROM transitions ORDER BY task_seq, n")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        keys.iter().map(|k| (k.0, k.1)).collect::<Vec<_>>(),
        [
            (1, 1),
            (1, 2),
            (1, 3),
            (1, 4),
            (1, 5),
            (2, 1),
            (3, 1),
            (3, 2)
        ]
    );
    // The view reads as the table did: the summaries by the task's rowid.
    let listed: Vec<(i64, String)> = conn
        .prepare("SELECT seq, json FROM task_summaries ORDER BY seq")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(listed.len(), 3);
    assert_eq!(listed[2], (3, summaries[2].to_string()));
}

/// Pages a write appended to the WAL of `db`, from a checkpointed (empty) WAL.
fn wal_frames(db: &std::path::Path) -> f64 {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    let len = std::fs::metadata(std::path::PathBuf::from(wal))
        .map(|m| m.len())
        .unwrap_or(0);
    // A 32-byte header, then frames of a 24-byte header and a 4096-byte page.
    len.saturating_sub(32) as f64 / (24.0 + 4096.0)
}

fn checkpoint(db: &std::path::Path) {
    let conn = rusqlite::Connection::open(db).unwrap();
    let (busy, _, _): (i64, i64, i64) = conn
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .unwrap();
    assert_eq!(busy, 0, "the checkpoint ran");
}

/// Issue 27: a claim's cost is the pages its commit appends to the WAL (docs/benchmarks.md
/// "Queue"). Schema 13's claim writes the task row (its summary included), its
/// `tasks_state` entry and its transition: about 3 pages, against bare SQLite's 2 for an
/// `UPDATE … RETURNING` of the same rows (schema 12's claim wrote 4.4).
#[test]
fn a_claim_appends_about_three_pages_to_the_wal_against_bare_sqlites_two() {
    const TASKS: usize = 300;
    const CLAIMS: usize = 150;
    let body = "The parser drops the last line of a file. ".repeat(15);
    let dir = tempfile::tempdir().unwrap();
    let ours = dir.path().join("home/queue.db");
    let store = Store::open(&ours).unwrap();
    for i in 1..=TASKS {
        let mut t = task(&format!("local-{i}"));
        t.body = body.clone();
        t.labels = vec!["polyphony".into(), "parser".into()];
        assert!(store.insert_task(&t).unwrap());
    }
    checkpoint(&ours);
    for _ in 0..CLAIMS {
        store.claim_next(t0()).unwrap().expect("a task to claim");
    }
    let ours_per_claim = wal_frames(&ours) / CLAIMS as f64;

    // Bare SQLite: the same rows and pragmas (examples/bench.rs's baseline).
    let bare = dir.path().join("bare.db");
    let conn = rusqlite::Connection::open(&bare).unwrap();
    conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))
        .unwrap();
    conn.execute_batch("PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;")
        .unwrap();
    conn.execute_batch(polyphony::store::schema::MIGRATIONS[0])
        .unwrap();
    conn.execute_batch(polyphony::store::schema::TASKS_CLAIM_COLUMNS)
        .unwrap();
    for i in 1..=TASKS {
        conn.execute(
            "INSERT INTO tasks (id, title, body, source, source_ref, repo, base_ref, state, \
             task_type, scope, risk, context_tokens, requires_web, labels, metadata, attempts, \
             failures, created_at, updated_at, next_attempt_at) VALUES (?1, ?2, ?3, 'local', \
             ?4, '/r', NULL, 'DISCOVERED', 'bugfix', 'small', 'low', 150, 0, \
             '[\"polyphony\",\"parser\"]', '{}', 0, 0, '2026-11-03T09:00:00.000000Z', \
             '2026-11-03T09:00:00.000000Z', NULL)",
            rusqlite::params![
                format!("local-{i}"),
                format!("title {i}"),
                body,
                format!("local:local-{i}")
            ],
        )
        .unwrap();
    }
    drop(conn);
    checkpoint(&bare);
    let conn = rusqlite::Connection::open(&bare).unwrap();
    conn.execute_batch("PRAGMA synchronous = NORMAL;").unwrap();
    for _ in 0..CLAIMS {
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        let id: String = conn
            .query_row(
                "UPDATE tasks SET state = 'CLAIMED', updated_at = ?1 WHERE rowid = \
                 (SELECT rowid FROM tasks WHERE state = 'DISCOVERED' ORDER BY rowid LIMIT 1) \
                 RETURNING id",
                ["2026-11-03T09:00:01.000000Z"],
                |r| r.get(0),
            )
            .unwrap();
        assert!(id.starts_with("local-"));
        conn.execute_batch("COMMIT").unwrap();
    }
    let bare_per_claim = wal_frames(&bare) / CLAIMS as f64;
    eprintln!("WAL pages per claim: ours {ours_per_claim:.2}, bare {bare_per_claim:.2}");
    assert!(
        ours_per_claim <= 3.3,
        "a claim appended {ours_per_claim:.2} pages (bare {bare_per_claim:.2})"
    );
    assert!(
        ours_per_claim <= 1.65 * bare_per_claim,
        "a claim appended {ours_per_claim:.2} pages, bare {bare_per_claim:.2}"
    );
}

/// A queue at `db` made by migrations 1 to `version`, as that release left it (WAL, foreign
/// keys on, `user_version` set), for the upgrade tests to fill and then open with today's store.
fn queue_at_schema(db: &std::path::Path, version: usize) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA foreign_keys = ON;")
        .unwrap();
    for sql in &polyphony::store::schema::MIGRATIONS[..version] {
        conn.execute_batch(sql).unwrap();
    }
    conn.pragma_update(None, "user_version", version as i64)
        .unwrap();
    conn
}
