//! Retention (issue 24, a daemon that runs for weeks): what the daemon removes of finished
//! tasks, when, and what it never touches; the disk figure `status` and `doctor` show. The
//! real pipeline over the scripted runtime (as tests/it/orchestrator.rs), a temp SQLite
//! store, real git origins and workspaces, and a test clock for every "later".

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use polyphony::config::Config;
use polyphony::demo::{write_home, write_sample_repo};
use polyphony::domain::{SourceKind, Task, TaskState, TaskType};
use polyphony::ops::retention;
use polyphony::orchestrator::daemon::{self, DaemonOptions};
use polyphony::orchestrator::pipeline::RunOptions;
use polyphony::orchestrator::{AttemptEnd, Orchestrator, RecordingProgress};
use polyphony::runtime::scripted::{AgentScript, ScriptedRuntime};
use polyphony::store::Store;
use tokio::sync::watch;

const FIXED_CALC: &str = "# Arithmetic helpers for the demo project.\nadd() {\n    a=$1\n    b=$2\n    echo $((a + b))\n}\n";

fn transcript(path: &str) -> AgentScript {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(path);
    AgentScript::transcript(&path).expect("a fixture transcript")
}

struct World {
    _dir: tempfile::TempDir,
    home: PathBuf,
    origin: PathBuf,
    runtime: ScriptedRuntime,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().expect("a temp dir");
        let origin = write_sample_repo(dir.path()).expect("the sample origin");
        let home = dir.path().join("home");
        write_home(&home, dir.path(), "polyphony-test:scripted").expect("a home");
        World {
            _dir: dir,
            home,
            origin,
            runtime: ScriptedRuntime::new(),
        }
    }

    /// An orchestrator whose clock stands at `now`.
    fn orchestrator(&self, now: DateTime<Utc>) -> Orchestrator {
        let config = Config::load(&self.home).expect("the home's config");
        let mut orch =
            Orchestrator::with_runtime(config, Arc::new(self.runtime.clone()), Arc::new(|_| None))
                .expect("an orchestrator");
        orch.clock = Arc::new(move || now);
        orch
    }

    fn enqueue(&self, store: &Store, now: DateTime<Utc>) -> String {
        let id = store.next_local_task_id().expect("an id");
        let mut task = Task::new(
            &id,
            SourceKind::Local,
            format!("local:{id}"),
            self.origin.display().to_string(),
            "Fix add()",
            now,
        );
        task.body = "add() subtracts; make `sh test.sh` pass.".into();
        task.task_type = TaskType::Bugfix;
        store.insert_task(&task).expect("insert");
        id
    }

    /// Runs one attempt of a new task with `script`; returns the task id and the end.
    async fn run(
        &self,
        orch: &Orchestrator,
        store: &Store,
        script: AgentScript,
    ) -> (String, AttemptEnd) {
        self.runtime.push(script);
        let id = self.enqueue(store, orch.now());
        let claimed = store
            .claim(&id, orch.now())
            .expect("claim")
            .expect("claimable");
        let (_tx, rx) = watch::channel(false);
        let opts = RunOptions {
            progress: Arc::new(RecordingProgress::new()),
            cancel: rx,
            cancel_means_retry: false,
        };
        let end = orch.run_claimed(claimed, &opts).await.expect("an attempt");
        (id, end)
    }

    fn transcripts(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for key in std::fs::read_dir(self.home.join("transcripts"))
            .into_iter()
            .flatten()
        {
            for f in std::fs::read_dir(key.unwrap().path()).into_iter().flatten() {
                out.push(f.unwrap().path());
            }
        }
        out
    }
}

fn hours(h: i64) -> chrono::Duration {
    chrono::Duration::hours(h)
}

#[tokio::test]
async fn finished_workspaces_go_after_the_grace_and_live_or_parked_ones_stay() {
    let w = World::new();
    // Today: transcripts are written now, so "31 days later" is after their mtime.
    let t0 = Utc::now();
    let orch = w.orchestrator(t0);
    let store = Store::open(&orch.db_path()).unwrap();
    let fixes = transcript("claude/real_2.1.332_lands_1.ndjson").writes("calc.sh", FIXED_CALC);
    let (landed, end) = w.run(&orch, &store, fixes).await;
    assert!(end.is_landed(), "{end:?}");
    let misses = transcript("claude/real_2.1.332_repair_1.ndjson").writes("NOTES.md", "hm\n");
    let (parked, end) = w.run(&orch, &store, misses).await;
    assert!(matches!(end, AttemptEnd::Retry { .. }), "{end:?}");
    // A task in flight: claimed and routed, with its notes.
    let running = w.enqueue(&store, t0);
    store.claim(&running, t0).unwrap().unwrap();
    store
        .transition(&running, TaskState::Claimed, TaskState::Routed, "t", t0)
        .unwrap();
    store.note_chain(&running, &["claude".into()], t0).unwrap();

    let ws = |id: &str| store.attempts(id).unwrap()[0].workspace.clone();
    let (ws_landed, ws_parked) = (ws(&landed), ws(&parked));
    // The orchestrator's own repository beside the attempt (issue 23).
    let own = ws_landed.with_file_name("1.land.git");
    assert!(ws_landed.is_dir() && own.is_dir() && ws_parked.is_dir());
    assert!(store.chain_of(&landed).unwrap().is_some());
    let config = Config::load(&w.home).unwrap();

    // Within the grace (24h by default) nothing goes; the disk is measured and stored.
    let s = retention::sweep(&store, &config, t0 + hours(23)).unwrap();
    assert_eq!(s.workspaces_removed, 0, "{s:?}");
    assert!(ws_landed.is_dir());
    assert!(
        s.disk.workspaces > 0 && s.disk.queue > 0 && s.disk.transcripts > 0,
        "{s:?}"
    );
    assert_eq!(store.disk_usage().unwrap(), Some(s.disk.clone()));
    let before = s.disk.workspaces;

    // After it: the landed task's clone and its land.git go, with its notes; the parked
    // (FAILED, retry due) and the live task keep theirs.
    let s = retention::sweep(&store, &config, t0 + hours(25)).unwrap();
    assert_eq!(s.workspaces_removed, 1, "{s:?}");
    assert!(s.errors.is_empty(), "{s:?}");
    assert!(!ws_landed.exists() && !own.exists());
    assert!(
        ws_parked.is_dir(),
        "a FAILED task's workspace stays (retry, quota handoff)"
    );
    assert_eq!(store.chain_of(&landed).unwrap(), None);
    assert!(store
        .workspace_of::<serde_json::Value>(&landed, 1)
        .unwrap()
        .is_none());
    assert!(store.chain_of(&parked).unwrap().is_some());
    assert!(store.chain_of(&running).unwrap().is_some());
    assert!(
        s.disk.workspaces < before,
        "{} !< {before}",
        s.disk.workspaces
    );
    assert_eq!(s.tasks_forgotten, 1);
    // Nothing more the next time.
    let again = retention::sweep(&store, &config, t0 + hours(26)).unwrap();
    assert_eq!((again.workspaces_removed, again.tasks_forgotten), (0, 0));

    // Events and transcripts stay 30 days (by default), then go; the attempt rows stay.
    assert!(store.event_count(&landed, 1).unwrap() > 0);
    assert!(!w.transcripts().is_empty());
    let s = retention::sweep(&store, &config, t0 + hours(29 * 24)).unwrap();
    assert_eq!(s.attempts_pruned, 0, "{s:?}");
    let s = retention::sweep(&store, &config, t0 + hours(31 * 24)).unwrap();
    assert_eq!(s.attempts_pruned, 2, "{s:?}");
    assert_eq!(store.event_count(&landed, 1).unwrap(), 0);
    assert_eq!(store.event_count(&parked, 1).unwrap(), 0);
    assert!(w.transcripts().is_empty(), "{:?}", w.transcripts());
    assert!(s.transcripts_removed > 0);
    assert_eq!(store.attempts(&landed).unwrap().len(), 1);
    assert_eq!(
        store.get_task(&landed).unwrap().unwrap().state,
        TaskState::Landed
    );
}

#[tokio::test]
async fn the_daemon_applies_retention_and_status_shows_the_disk() {
    let w = World::new();
    let t0 = Utc::now();
    let orch = w.orchestrator(t0);
    let store = Store::open(&orch.db_path()).unwrap();
    let fixes = transcript("claude/real_2.1.332_lands_1.ndjson").writes("calc.sh", FIXED_CALC);
    let (landed, end) = w.run(&orch, &store, fixes).await;
    assert!(end.is_landed(), "{end:?}");
    let workspace = store.attempts(&landed).unwrap()[0].workspace.clone();
    assert!(workspace.is_dir());

    // The daemon starts a day and an hour later by its clock, finds nothing to run, sweeps
    // once and exits.
    let later = Arc::new(w.orchestrator(t0 + hours(25)));
    let (_signals, rx) = watch::channel(0u32);
    let opts = DaemonOptions {
        exit_when_idle: true,
        upkeep: Some(retention::upkeep(Duration::from_secs(3600))),
        ..DaemonOptions::default()
    };
    daemon::run(later, opts, Arc::new(RecordingProgress::new()), rx)
        .await
        .expect("the daemon");
    assert!(
        !workspace.exists(),
        "the daemon removed the finished workspace"
    );
    let disk = store
        .disk_usage()
        .unwrap()
        .expect("the daemon measured the disk");
    assert_eq!(disk.measured_at, t0 + hours(25));

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_polyphony"))
        .arg("--home")
        .arg(&w.home)
        .arg("status")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("disk: workspaces ") && text.contains(" · queue "),
        "{text}"
    );
    // `status --json` keeps its shape: an array of task summaries.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_polyphony"))
        .arg("--home")
        .arg(&w.home)
        .args(["status", "--json"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json.as_array().map(Vec::len), Some(1), "{json}");
}

#[test]
fn doctor_reports_the_disk_used_and_warns_when_retention_is_off() {
    let used = polyphony::store::DiskUsage {
        workspaces: 3 << 30,
        mirrors: 5 << 20,
        transcripts: 7 << 10,
        queue: 9,
        measured_at: Utc::now(),
    };
    let on = polyphony::config::retention::RetentionSettings {
        workspaces: Some(Duration::from_secs(86_400)),
        events: Some(Duration::from_secs(30 * 86_400)),
        every: Some(Duration::from_secs(3600)),
    };
    let check = polyphony::ops::doctor::disk_used_check(&used, &on);
    assert_eq!(
        check.level,
        polyphony::ops::doctor::Level::Pass,
        "{check:?}"
    );
    assert!(
        check
            .detail
            .starts_with("workspaces 3.0 GiB · mirrors 5.0 MiB"),
        "{check:?}"
    );
    assert!(check.detail.contains("after: 1day"), "{check:?}");
    let off = polyphony::config::retention::RetentionSettings {
        workspaces: None,
        ..on
    };
    let check = polyphony::ops::doctor::disk_used_check(&used, &off);
    assert_eq!(
        check.level,
        polyphony::ops::doctor::Level::Warn,
        "{check:?}"
    );
    assert!(check.fix.unwrap().contains("retention.workspaces"));
}

/// Issue 24: a task BLOCKED before it was routed has no `chain:` note and no workspace,
/// so retention never found it and its other notes (restart breadcrumbs, give-ups, agents
/// that refused it) stayed forever. Found by their keys now; its history rows stay.
#[test]
fn a_task_blocked_before_routing_loses_its_notes_after_the_grace() {
    let w = World::new();
    let config = Config::load(&w.home).unwrap();
    let store = Store::open(&config.db_path()).unwrap();
    let t0 = Utc::now();
    let id = w.enqueue(&store, t0);
    store.claim(&id, t0).unwrap().unwrap();
    store
        .transition(&id, TaskState::Claimed, TaskState::Failed, "t", t0)
        .unwrap();
    store
        .transition(&id, TaskState::Failed, TaskState::Blocked, "t", t0)
        .unwrap();
    for key in ["giveups", "agents_refused", "cancel_request"] {
        store.kv_set(&format!("{key}:{id}"), "1", t0).unwrap();
    }
    for key in ["handling", "strikes"] {
        store.kv_set(&format!("{key}:{id}:1"), "1", t0).unwrap();
    }
    store.mark_block_reported(&id, t0).unwrap();
    assert!(store.chain_of(&id).unwrap().is_none());

    let s = retention::sweep(&store, &config, t0 + hours(23)).unwrap();
    assert_eq!(s.tasks_forgotten, 0, "{s:?}");
    let s = retention::sweep(&store, &config, t0 + hours(25)).unwrap();
    assert_eq!((s.tasks_forgotten, s.notes_removed), (1, 5), "{s:?}");
    for key in [
        format!("giveups:{id}"),
        format!("agents_refused:{id}"),
        format!("cancel_request:{id}"),
        format!("handling:{id}:1"),
        format!("strikes:{id}:1"),
    ] {
        assert_eq!(store.kv_get(&key).unwrap(), None, "{key}");
    }
    // A relabelled issue still gets its next generation by this.
    assert!(store.block_reported_at(&id).unwrap().is_some());
    let again = retention::sweep(&store, &config, t0 + hours(26)).unwrap();
    assert_eq!(again.tasks_forgotten, 0);
}

/// The bytes of `db` with its WAL, after a checkpoint (what the file holds, not what is
/// still waiting in the WAL).
fn queue_bytes(db: &Path) -> u64 {
    let c = rusqlite::Connection::open(db).unwrap();
    c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    let wal = PathBuf::from(format!("{}-wal", db.display()));
    std::fs::metadata(db).unwrap().len() + std::fs::metadata(wal).map_or(0, |m| m.len())
}

/// Issue 24: queue.db never shrank. The events retention deletes leave free pages that
/// SQLite reuses but never gives back, so the file kept its largest size for good. A new
/// queue is made with incremental vacuum and the sweep frees the pages; one made before
/// that is converted once by a `VACUUM` (store::retention says why).
#[test]
fn the_queue_file_shrinks_once_old_events_are_removed() {
    for made_before in [false, true] {
        let w = World::new();
        let config = Config::load(&w.home).unwrap();
        let db = config.db_path();
        if made_before {
            // As every queue was made until now: WAL first, no auto_vacuum mode.
            let c = rusqlite::Connection::open(&db).unwrap();
            c.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))
                .unwrap();
        }
        let store = Store::open(&db).unwrap();
        let auto_vacuum = || -> i64 {
            let c = rusqlite::Connection::open(&db).unwrap();
            c.query_row("PRAGMA auto_vacuum", [], |r| r.get(0)).unwrap()
        };
        assert_eq!(auto_vacuum(), if made_before { 0 } else { 2 });
        // Three attempts 40 days old with 24 MB of events, one of today with a few.
        let old = Utc::now() - hours(40 * 24);
        let line = "x".repeat(2000);
        for (id, at, events) in [
            ("old-1", old, 4000u64),
            ("old-2", old, 4000),
            ("old-3", old, 4000),
            ("new-1", Utc::now(), 50),
        ] {
            support::console_seed::task(&store, id, "t", at);
            support::console_seed::attempt(
                &store,
                id,
                1,
                "claude",
                "personal",
                at,
                5.0,
                polyphony::domain::AttemptStatus::Succeeded,
                0.1,
                &[],
            );
            let batch: Vec<_> = (0..events)
                .map(|seq| {
                    support::spec::message_event(
                        seq,
                        "progress",
                        serde_json::json!({"type": "assistant", "text": format!("{seq} {line}")}),
                    )
                })
                .collect();
            for chunk in batch.chunks(500) {
                store.append_events(id, 1, chunk).unwrap();
            }
        }
        let before = queue_bytes(&db);
        assert!(before > 20 << 20, "{before}");

        let s = retention::sweep(&store, &config, Utc::now()).unwrap();
        assert_eq!(s.attempts_pruned, 3, "{s:?}");
        assert_eq!(s.reclaimed.converted, made_before, "{s:?}");
        assert!(s.reclaimed.pages > 5000, "{s:?}");
        let after = queue_bytes(&db);
        assert!(
            after < before / 4,
            "made_before={made_before}: {before} -> {after} bytes ({s:?})"
        );
        // The figure stored for `status` is the shrunk one.
        assert!(s.disk.queue <= after + (1 << 20), "{s:?}");
        assert_eq!(auto_vacuum(), 2, "incremental from now on");
        assert_eq!(store.event_count("new-1", 1).unwrap(), 50);
        assert!(store.check_integrity(true).unwrap().is_empty());
        // Nothing more to give back the next time.
        let again = retention::sweep(&store, &config, Utc::now()).unwrap();
        assert_eq!(again.reclaimed.pages, 0, "{again:?}");
    }
}
