//! The durable queue: SQLite at `$POLYPHONY_HOME/queue.db` holding tasks, attempts,
//! transitions, events and landing records (spec §2, §4; DESIGN.md "Durability").
//!
//! Architecture Invariant: only `store` writes SQL, and every task state change goes
//! through [`Store::transition`] (or a claim, [`Store::settle_failure`],
//! [`Store::transition_completing`]), which checks `domain::transition` and writes the
//! transition row in the same IMMEDIATE transaction.
//! Architecture Invariant: a side effect outside the store is an intent (`intents`)
//! recorded before it is attempted, so whoever runs next can finish it (issue 19).
//! Architecture Invariant: claims are atomic across processes: `BEGIN IMMEDIATE` takes
//! the write lock before the candidate is read, so two daemons never claim one task.
//! API Boundary: [`Store`].
//!
//! The API is synchronous. A `Store` owns one connection; `Connection` is `Send` but not
//! `Sync`, so each thread (or `spawn_blocking` worker) opens its own `Store`. Opening is
//! cheap once the schema is current: a few pragmas and one `user_version` read.
//!
//! Must not: decide what happens next (that is the orchestrator), or store secret values
//! (RunSpecs carry variable names only).

mod error;
mod generations;
pub mod health;
mod intents;
pub mod quota;
pub mod schema;
mod views;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use rusqlite::{
    params, types::Type, Connection, OptionalExtension, Row, Transaction, TransactionBehavior,
};
use serde::Serialize;

pub use views::{RunningAttempt, TaskFilter};

use crate::domain::{
    self, AttemptStatus, CheckEvidence, EventKind, EventStream, Risk, RunResult, RunSpec, Scope,
    SourceKind, Task, TaskEvent, TaskState, TaskType, TokenUsage,
};
pub use error::StoreError;
pub use generations::{GenerationInsert, GenerationLinks};
pub use health::{damage_in, damaged, DatabaseDamaged};
pub use intents::{BlockSettlement, Intent, IntentKind, Settlement};

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// How long a writer waits for another process's transaction before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// One row of the transition log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TransitionRecord {
    pub task_id: String,
    pub from: TaskState,
    pub to: TaskState,
    pub reason: String,
    pub at: DateTime<Utc>,
}

/// One attempt as recorded.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttemptRecord {
    pub task_id: String,
    pub attempt: u32,
    pub agent: String,
    pub identity: String,
    /// The RunSpec as stored (JSON); [`AttemptRecord::spec`] decodes it.
    pub run_spec: serde_json::Value,
    pub container_id: Option<String>,
    pub workspace: PathBuf,
    pub branch: String,
    /// `None` while the attempt runs.
    pub status: Option<AttemptStatus>,
    pub turns: Option<u32>,
    pub tokens: Option<TokenUsage>,
    pub cost_usd: Option<f64>,
    pub exit_code: Option<i64>,
    pub duration_seconds: Option<f64>,
    pub final_message: Option<String>,
    pub reason: Option<String>,
    pub evidence: Vec<CheckEvidence>,
    pub commit_sha: Option<String>,
    pub pr_url: Option<String>,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

impl AttemptRecord {
    pub fn spec(&self) -> Result<RunSpec, serde_json::Error> {
        serde_json::from_value(self.run_spec.clone())
    }
}

/// What has been pushed and opened for a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Landing {
    pub task_id: String,
    pub attempt: u32,
    pub branch: String,
    pub commit_sha: String,
    pub pr_url: Option<String>,
    pub updated_at: DateTime<Utc>,
}

/// One task as a listing shows it (`polyphony status --json`): what identifies it, where
/// it stands and when it moves next, borrowed from the row so a 100k-task listing streams
/// without building a [`Task`] per row. The full task (body, repo, metadata, routing facts)
/// is [`Store::get_task`]. Timestamps are the stored text: RFC 3339 UTC, fixed-width
/// microseconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskSummary<'a> {
    pub id: &'a str,
    pub title: &'a str,
    pub source_ref: &'a str,
    pub state: TaskState,
    pub task_type: TaskType,
    pub risk: Risk,
    pub labels: Vec<Label<'a>>,
    pub attempts: u32,
    pub failures: u32,
    pub created_at: &'a str,
    pub updated_at: &'a str,
    pub next_attempt_at: Option<&'a str>,
    /// Set while the task waits for a usage limit to reset (issue 14).
    pub quota_wait: Option<QuotaWaitBrief<'a>>,
}

/// Why a parked task waits, in a listing: the agent whose reset comes first, under its
/// identity, and when (stored RFC 3339 text). `status TASK --json` has every agent's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QuotaWaitBrief<'a> {
    pub until: &'a str,
    pub agent: &'a str,
    pub identity: &'a str,
}

/// A label as stored, borrowed unless the JSON escaped it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Label<'a>(#[serde(borrow)] pub std::borrow::Cow<'a, str>);

/// A handle on the queue database. See the module docs for threading.
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

const TASK_COLS: &str = "id, title, body, source, source_ref, repo, base_ref, state, task_type, \
     scope, risk, context_tokens, requires_web, labels, metadata, attempts, failures, \
     created_at, updated_at, next_attempt_at";

const SUMMARY_COLS: &str = "id, title, source_ref, state, task_type, risk, labels, attempts, \
     failures, created_at, updated_at, next_attempt_at, w.until, w.agent, w.identity";

/// The tasks table with the quota wait of the FAILED ones (a parked task's).
const SUMMARY_FROM: &str =
    "tasks LEFT JOIN quota_waits w ON w.task_id = tasks.id AND tasks.state = 'FAILED'";

const ATTEMPT_COLS: &str = "task_id, attempt, agent, identity, run_spec, container_id, workspace, \
     branch, status, turns, tokens_in, tokens_out, tokens_cached, cost_usd, exit_code, \
     duration_seconds, final_message, reason, evidence, commit_sha, pr_url, started_at, finished_at";

impl Store {
    /// Opens (creating if needed) the database at `path` and brings its schema up to date.
    pub fn open(path: &Path) -> Result<Store> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // The store's directory is the home: owner-only (issue 11).
            crate::private::create_dir(dir).map_err(|source| StoreError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        crate::private::create_file_if_missing(path).map_err(|source| StoreError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let open_err = |source| {
            health::is_damage(&source);
            StoreError::Open {
                path: path.to_path_buf(),
                source,
            }
        };
        let conn = Connection::open(path).map_err(open_err)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(open_err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Corrupt(format!(
                "{} refused WAL mode (journal_mode is {mode})",
                path.display()
            )));
        }
        conn.execute_batch("PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;")
            .map_err(open_err)?;
        // SQLite gives -wal and -shm the database's mode; older files may predate that.
        for suffix in ["-wal", "-shm"] {
            let mut side = path.as_os_str().to_owned();
            side.push(suffix);
            let side = std::path::PathBuf::from(side);
            crate::private::restrict(&side, crate::private::FILE_MODE)
                .map_err(|source| StoreError::Io { path: side, source })?;
        }
        conn.set_prepared_statement_cache_capacity(64);
        let store = Store {
            conn,
            path: path.to_path_buf(),
        };
        store.migrate()?;
        Ok(store)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema version of the open database.
    pub fn schema_version(&self) -> Result<i64> {
        Ok(self
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))?)
    }

    fn migrate(&self) -> Result<()> {
        let latest = schema::latest();
        if self.schema_version()? == latest {
            return Ok(());
        }
        // Re-read under the write lock: another process may have migrated meanwhile.
        self.immediate(|tx| {
            let current: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
            if current > latest {
                return Err(StoreError::SchemaTooNew {
                    path: self.path.clone(),
                    found: current,
                    supported: latest,
                });
            }
            for (i, sql) in schema::MIGRATIONS.iter().enumerate().skip(current as usize) {
                tx.execute_batch(sql)?;
                tx.pragma_update(None, "user_version", i as i64 + 1)?;
            }
            Ok(())
        })
    }

    /// Runs `f` in a `BEGIN IMMEDIATE` transaction: the write lock is taken up front, so
    /// what `f` reads cannot change before it writes. Rolls back on error.
    fn immediate<T>(&self, f: impl FnOnce(&Transaction<'_>) -> Result<T>) -> Result<T> {
        let started = std::time::Instant::now();
        let tx = Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate)?;
        let value = f(&tx)?;
        tx.commit()?;
        crate::metrics::store_write(started.elapsed());
        Ok(value)
    }

    // ------------------------------------------------------------------ tasks

    /// Inserts a new task. Returns `false` (and changes nothing) when a task with the same
    /// id exists: sources call this on every poll and rely on it to dedupe.
    pub fn insert_task(&self, task: &Task) -> Result<bool> {
        let labels = to_json("labels", &task.labels)?;
        let metadata = to_json("metadata", &task.metadata)?;
        let mut stmt = self.conn.prepare_cached(&format!(
            "INSERT OR IGNORE INTO tasks ({TASK_COLS}) VALUES \
             (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)"
        ))?;
        let inserted = stmt.execute(params![
            task.id,
            task.title,
            task.body,
            task.source.as_str(),
            task.source_ref,
            task.repo,
            task.base_ref,
            task.state.as_str(),
            task.task_type.as_str(),
            task.scope.as_str(),
            task.risk.as_str(),
            task.context_tokens as i64,
            task.requires_web,
            labels,
            metadata,
            task.attempts,
            task.failures,
            ts(task.created_at),
            ts(task.updated_at),
            task.next_attempt_at.map(ts),
        ])?;
        Ok(inserted == 1)
    }

    /// Reserves the next local queue id, `local-<n>`. Ids are never reused.
    pub fn next_local_task_id(&self) -> Result<String> {
        let n: i64 = self.conn.query_row(
            "UPDATE counters SET value = value + 1 WHERE name = 'local_task' RETURNING value",
            [],
            |r| r.get(0),
        )?;
        Ok(format!("local-{n}"))
    }

    pub fn get_task(&self, id: &str) -> Result<Option<Task>> {
        get_task(&self.conn, id)
    }

    /// The task with this source reference (`owner/repo#42`), if any.
    pub fn find_by_source_ref(&self, source_ref: &str) -> Result<Option<Task>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {TASK_COLS} FROM tasks WHERE source_ref = ?1 ORDER BY rowid DESC LIMIT 1"
        ))?;
        Ok(stmt.query_row([source_ref], task_from_row).optional()?)
    }

    /// Tasks, newest first, optionally only those in `state`, at most `limit` of them.
    pub fn list_tasks(&self, state: Option<TaskState>, limit: Option<usize>) -> Result<Vec<Task>> {
        let limit = limit.map_or(-1, |l| l as i64);
        let rows = match state {
            Some(s) => {
                let mut stmt = self.conn.prepare_cached(&format!(
                    "SELECT {TASK_COLS} FROM tasks WHERE state = ?1 ORDER BY rowid DESC LIMIT ?2"
                ))?;
                let rows = stmt.query_map(params![s.as_str(), limit], task_from_row)?;
                rows.collect::<Result<Vec<_>, _>>()?
            }
            None => {
                let mut stmt = self.conn.prepare_cached(&format!(
                    "SELECT {TASK_COLS} FROM tasks ORDER BY rowid DESC LIMIT ?1"
                ))?;
                let rows = stmt.query_map(params![limit], task_from_row)?;
                rows.collect::<Result<Vec<_>, _>>()?
            }
        };
        Ok(rows)
    }

    /// Calls `each` with every task, newest first, optionally only those in `state`, at
    /// most `limit` of them, as a [`TaskSummary`] borrowed from the row: nothing is
    /// collected, so memory stays flat however many tasks there are. Stops at the first
    /// error `each` returns.
    pub fn for_each_task_summary<E>(
        &self,
        state: Option<TaskState>,
        limit: Option<usize>,
        mut each: impl FnMut(&TaskSummary<'_>) -> Result<(), E>,
    ) -> Result<(), E>
    where
        E: From<StoreError>,
    {
        let limit = limit.map_or(-1, |l| l as i64);
        let sql = match state {
            Some(_) => format!(
                "SELECT {SUMMARY_COLS} FROM {SUMMARY_FROM} WHERE state = ?2 ORDER BY tasks.rowid DESC LIMIT ?1"
            ),
            None => format!(
                "SELECT {SUMMARY_COLS} FROM {SUMMARY_FROM} WHERE ?2 IS NULL ORDER BY tasks.rowid DESC LIMIT ?1"
            ),
        };
        let mut stmt = self.conn.prepare_cached(&sql).map_err(StoreError::from)?;
        let mut rows = stmt
            .query(params![limit, state.map(TaskState::as_str)])
            .map_err(StoreError::from)?;
        while let Some(row) = rows.next().map_err(StoreError::from)? {
            let summary = summary_from_row(row).map_err(StoreError::from)?;
            each(&summary)?;
        }
        Ok(())
    }

    /// Calls `each` with the JSON object of every task's [`TaskSummary`] (exactly the bytes
    /// `serde_json::to_writer` writes for it), newest first, optionally only those in
    /// `state`, at most `limit` of them. The objects are stored text (schema version 2
    /// keeps them current by trigger), handed over without decoding or UTF-8 checks: this
    /// is `status --json` at 100k tasks (docs/benchmarks.md). Stops at the first error
    /// `each` returns.
    pub fn for_each_summary_json<E>(
        &self,
        state: Option<TaskState>,
        limit: Option<usize>,
        mut each: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E>
    where
        E: From<StoreError>,
    {
        let limit = limit.map_or(-1, |l| l as i64);
        let sql = match state {
            // The state index yields the rowids in order; each summary is one lookup.
            Some(_) => {
                "SELECT s.json FROM tasks t JOIN task_summaries s ON s.id = t.id \
                 WHERE t.state = ?2 ORDER BY t.rowid DESC LIMIT ?1"
            }
            None => "SELECT json FROM task_summaries WHERE ?2 IS NULL ORDER BY seq DESC LIMIT ?1",
        };
        let mut stmt = self.conn.prepare_cached(sql).map_err(StoreError::from)?;
        let mut rows = stmt
            .query(params![limit, state.map(TaskState::as_str)])
            .map_err(StoreError::from)?;
        while let Some(row) = rows.next().map_err(StoreError::from)? {
            let json = row
                .get_ref(0)
                .and_then(|v| v.as_bytes().map_err(rusqlite::Error::from))
                .map_err(StoreError::from)?;
            each(json)?;
        }
        Ok(())
    }

    /// Number of tasks in each state (states with none are absent).
    pub fn count_by_state(&self) -> Result<BTreeMap<TaskState, u64>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT state, COUNT(*) FROM tasks GROUP BY state")?;
        let rows = stmt.query_map([], |r| {
            Ok((parse_col::<TaskState>(r, 0)?, r.get::<_, i64>(1)? as u64))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// THE way a task changes state: in one IMMEDIATE transaction, checks `expected_from ->
    /// to` against the state machine, checks the task is still in `expected_from`, updates
    /// it and appends the transition row. Nothing is written when a check fails.
    pub fn transition(
        &self,
        task_id: &str,
        expected_from: TaskState,
        to: TaskState,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<Task> {
        self.immediate(|tx| {
            domain::transition(expected_from, to).map_err(|source| {
                StoreError::InvalidTransition {
                    task_id: task_id.to_string(),
                    source,
                }
            })?;
            let actual = current_state(tx, task_id)?;
            if actual != expected_from {
                return Err(StoreError::StaleState {
                    task_id: task_id.to_string(),
                    expected: expected_from,
                    actual,
                });
            }
            write_transition(tx, task_id, actual, to, reason, now)?;
            get_task(tx, task_id)?.ok_or_else(|| StoreError::NotFound(task_id.to_string()))
        })
    }

    /// Atomically claims the oldest claimable task: DISCOVERED, or FAILED with a retry
    /// time at or before `now`. Returns it in CLAIMED, or `None` when nothing is ready.
    pub fn claim_next(&self, now: DateTime<Utc>) -> Result<Option<Task>> {
        self.immediate(|tx| {
            // Two probes keep each one on an index; the older candidate wins.
            let discovered: Option<(i64, String)> = tx
                .prepare_cached(
                    "SELECT rowid, id FROM tasks WHERE state = 'DISCOVERED' ORDER BY rowid LIMIT 1",
                )?
                .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            let retry: Option<(i64, String)> = tx
                .prepare_cached(
                    "SELECT rowid, id FROM tasks WHERE state = 'FAILED' \
                     AND next_attempt_at IS NOT NULL AND next_attempt_at <= ?1 \
                     ORDER BY rowid LIMIT 1",
                )?
                .query_row([ts(now)], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            let pick = match (discovered, retry) {
                (Some(d), Some(r)) => Some(if d.0 <= r.0 { d } else { r }),
                (d, r) => d.or(r),
            };
            match pick {
                Some((_, id)) => claim_in(tx, &id, now).map(Some),
                None => Ok(None),
            }
        })
    }

    /// Atomically claims one task if it is claimable (see [`Store::claim_next`]);
    /// `Ok(None)` when it exists but is not, `NotFound` when it does not exist.
    pub fn claim(&self, task_id: &str, now: DateTime<Utc>) -> Result<Option<Task>> {
        self.immediate(|tx| {
            let state = current_state(tx, task_id)?;
            let next: Option<String> = tx.query_row(
                "SELECT next_attempt_at FROM tasks WHERE id = ?1",
                [task_id],
                |r| r.get(0),
            )?;
            let ready = match state {
                TaskState::Discovered => true,
                TaskState::Failed => next.is_some_and(|n| n <= ts(now)),
                _ => false,
            };
            if ready {
                claim_in(tx, task_id, now).map(Some)
            } else {
                Ok(None)
            }
        })
    }

    /// Records the failure count and when the task may be retried (`None`: never; the
    /// orchestrator then moves it to BLOCKED).
    pub fn set_retry(
        &self,
        task_id: &str,
        failures: u32,
        next_attempt_at: Option<DateTime<Utc>>,
    ) -> Result<()> {
        let changed = self.conn.execute(
            "UPDATE tasks SET failures = ?2, next_attempt_at = ?3 WHERE id = ?1",
            params![task_id, failures, next_attempt_at.map(ts)],
        )?;
        if changed == 0 {
            return Err(StoreError::NotFound(task_id.to_string()));
        }
        Ok(())
    }

    /// Replaces the routing facts (type, scope, risk, context estimate) the router or a
    /// source derived; the state is untouched.
    pub fn set_task_facts(
        &self,
        task_id: &str,
        task_type: TaskType,
        scope: Scope,
        risk: Risk,
        context_tokens: u64,
    ) -> Result<()> {
        let changed = self.conn.execute(
            "UPDATE tasks SET task_type = ?2, scope = ?3, risk = ?4, context_tokens = ?5 WHERE id = ?1",
            params![task_id, task_type.as_str(), scope.as_str(), risk.as_str(), context_tokens as i64],
        )?;
        if changed == 0 {
            return Err(StoreError::NotFound(task_id.to_string()));
        }
        Ok(())
    }

    /// The latest attempt's agent and the cost of all attempts of a task (for the
    /// `status` table).
    pub fn attempt_brief(&self, task_id: &str) -> Result<(Option<String>, Option<f64>)> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT (SELECT agent FROM attempts WHERE task_id = ?1 ORDER BY attempt DESC LIMIT 1), \
                    (SELECT SUM(cost_usd) FROM attempts WHERE task_id = ?1)",
        )?;
        Ok(stmt.query_row([task_id], |r| Ok((r.get(0)?, r.get(1)?)))?)
    }

    /// The earliest retry time among FAILED tasks scheduled for one (the daemon sleeps
    /// until then instead of polling).
    pub fn next_retry_at(&self) -> Result<Option<DateTime<Utc>>> {
        let text: Option<String> = self.conn.query_row(
            "SELECT MIN(next_attempt_at) FROM tasks WHERE state = 'FAILED' AND next_attempt_at IS NOT NULL",
            [],
            |r| r.get(0),
        )?;
        Ok(text
            .and_then(|t| DateTime::parse_from_rfc3339(&t).ok())
            .map(|t| t.with_timezone(&Utc)))
    }

    /// Freezes the title and body a source claim returned: later edits at the source never
    /// reach the agent.
    pub fn freeze_text(&self, task_id: &str, title: &str, body: &str) -> Result<()> {
        let changed = self.conn.execute(
            "UPDATE tasks SET title = ?2, body = ?3 WHERE id = ?1",
            params![task_id, title, body],
        )?;
        if changed == 0 {
            return Err(StoreError::NotFound(task_id.to_string()));
        }
        Ok(())
    }

    /// Transitions for one task, oldest first.
    pub fn transitions(&self, task_id: &str) -> Result<Vec<TransitionRecord>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT task_id, from_state, to_state, reason, at FROM transitions \
             WHERE task_id = ?1 ORDER BY id",
        )?;
        let rows = stmt.query_map([task_id], |r| {
            Ok(TransitionRecord {
                task_id: r.get(0)?,
                from: parse_col(r, 1)?,
                to: parse_col(r, 2)?,
                reason: r.get(3)?,
                at: time_col(r, 4)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    // ------------------------------------------------------------------ attempts

    /// Records the start of attempt `spec.attempt` with its immutable RunSpec and bumps the
    /// task's attempt count. `AttemptExists` if that attempt was already started.
    pub fn start_attempt(&self, spec: &RunSpec, now: DateTime<Utc>) -> Result<()> {
        let json = to_json("run spec", spec)?;
        self.immediate(|tx| {
            current_state(tx, &spec.task_id)?;
            let exists: bool = tx.query_row(
                "SELECT EXISTS (SELECT 1 FROM attempts WHERE task_id = ?1 AND attempt = ?2)",
                params![spec.task_id, spec.attempt],
                |r| r.get(0),
            )?;
            if exists {
                return Err(StoreError::AttemptExists {
                    task_id: spec.task_id.clone(),
                    attempt: spec.attempt,
                });
            }
            tx.execute(
                "INSERT INTO attempts (task_id, attempt, agent, identity, run_spec, workspace, branch, started_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    spec.task_id,
                    spec.attempt,
                    spec.agent,
                    spec.identity,
                    json,
                    spec.workspace.to_string_lossy(),
                    spec.branch,
                    ts(now)
                ],
            )?;
            tx.execute(
                "UPDATE tasks SET attempts = MAX(attempts, ?2), updated_at = ?3 WHERE id = ?1",
                params![spec.task_id, spec.attempt, ts(now)],
            )?;
            Ok(())
        })
    }

    /// Records how an attempt ended and the verification evidence.
    pub fn finish_attempt(
        &self,
        result: &RunResult,
        evidence: &[CheckEvidence],
        now: DateTime<Utc>,
    ) -> Result<()> {
        let verification_ms = evidence.iter().map(|e| e.duration_ms).sum::<u64>();
        let evidence = to_json("evidence", &evidence)?;
        let identity: Option<String> = self
            .conn
            .query_row(
                "SELECT identity FROM attempts WHERE task_id = ?1 AND attempt = ?2",
                params![result.task_id, result.attempt],
                |r| r.get(0),
            )
            .optional()?;
        crate::metrics::attempt_finished(
            &result.agent,
            identity.as_deref().unwrap_or("-"),
            result.status,
            result.duration_seconds,
            result.cost_usd,
            &result.tokens,
            verification_ms,
        );
        self.update_attempt(
            &result.task_id,
            result.attempt,
            "UPDATE attempts SET status = ?3, turns = ?4, tokens_in = ?5, tokens_out = ?6, \
             tokens_cached = ?7, cost_usd = ?8, exit_code = ?9, duration_seconds = ?10, \
             final_message = ?11, reason = ?12, evidence = ?13, finished_at = ?14 \
             WHERE task_id = ?1 AND attempt = ?2",
            params![
                result.task_id,
                result.attempt,
                result.status.as_str(),
                result.turns,
                result.tokens.input as i64,
                result.tokens.output as i64,
                result.tokens.cached_input as i64,
                result.cost_usd,
                result.exit_code,
                result.duration_seconds,
                result.final_message,
                result.reason,
                evidence,
                ts(now),
            ],
        )
    }

    /// Records what was pushed (and the PR, once opened) for an attempt, and makes it the
    /// task's landing record. Calling it again (e.g. to add the PR URL) overwrites.
    pub fn set_attempt_landing(
        &self,
        task_id: &str,
        attempt: u32,
        commit_sha: &str,
        branch: &str,
        pr_url: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<()> {
        self.immediate(|tx| {
            let changed = tx.execute(
                "UPDATE attempts SET commit_sha = ?3, branch = ?4, pr_url = ?5 \
                 WHERE task_id = ?1 AND attempt = ?2",
                params![task_id, attempt, commit_sha, branch, pr_url],
            )?;
            if changed == 0 {
                return Err(StoreError::AttemptNotFound {
                    task_id: task_id.to_string(),
                    attempt,
                });
            }
            tx.execute(
                "INSERT INTO landings (task_id, attempt, branch, commit_sha, pr_url, updated_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
                 ON CONFLICT (task_id) DO UPDATE SET attempt = excluded.attempt, \
                 branch = excluded.branch, commit_sha = excluded.commit_sha, \
                 pr_url = COALESCE(excluded.pr_url, landings.pr_url), updated_at = excluded.updated_at",
                params![task_id, attempt, branch, commit_sha, pr_url, ts(now)],
            )?;
            Ok(())
        })
    }

    /// The task's landing record, if anything was pushed.
    pub fn landing(&self, task_id: &str) -> Result<Option<Landing>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT task_id, attempt, branch, commit_sha, pr_url, updated_at FROM landings WHERE task_id = ?1",
        )?;
        Ok(stmt
            .query_row([task_id], |r| {
                Ok(Landing {
                    task_id: r.get(0)?,
                    attempt: r.get(1)?,
                    branch: r.get(2)?,
                    commit_sha: r.get(3)?,
                    pr_url: r.get(4)?,
                    updated_at: time_col(r, 5)?,
                })
            })
            .optional()?)
    }

    fn update_attempt(
        &self,
        task_id: &str,
        attempt: u32,
        sql: &str,
        params: impl rusqlite::Params,
    ) -> Result<()> {
        let changed = self.conn.prepare_cached(sql)?.execute(params)?;
        if changed == 0 {
            return Err(StoreError::AttemptNotFound {
                task_id: task_id.to_string(),
                attempt,
            });
        }
        Ok(())
    }

    /// All attempts of a task, first to last.
    pub fn attempts(&self, task_id: &str) -> Result<Vec<AttemptRecord>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {ATTEMPT_COLS} FROM attempts WHERE task_id = ?1 ORDER BY attempt"
        ))?;
        let rows = stmt.query_map([task_id], attempt_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn attempt(&self, task_id: &str, attempt: u32) -> Result<Option<AttemptRecord>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {ATTEMPT_COLS} FROM attempts WHERE task_id = ?1 AND attempt = ?2"
        ))?;
        Ok(stmt
            .query_row(params![task_id, attempt], attempt_from_row)
            .optional()?)
    }

    /// Dollars spent by attempts of `identity` started at or after `since` (the daily
    /// cost ceiling of spec §3.2).
    pub fn cost_spent_since(&self, identity: &str, since: DateTime<Utc>) -> Result<f64> {
        Ok(self.conn.query_row(
            "SELECT COALESCE(SUM(cost_usd), 0.0) FROM attempts WHERE identity = ?1 AND started_at >= ?2",
            params![identity, ts(since)],
            |r| r.get(0),
        )?)
    }

    /// The costliest attempt of `identity` since `since`: (task id, attempt, cost), so a
    /// held identity can say which attempt's figure holds it.
    pub fn largest_cost_since(
        &self,
        identity: &str,
        since: DateTime<Utc>,
    ) -> Result<Option<(String, u32, f64)>> {
        Ok(self
            .conn
            .query_row(
                "SELECT task_id, attempt, cost_usd FROM attempts \
                 WHERE identity = ?1 AND started_at >= ?2 AND cost_usd IS NOT NULL \
                 ORDER BY cost_usd DESC LIMIT 1",
                params![identity, ts(since)],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()?)
    }

    // ------------------------------------------------------------------ events

    /// Appends events of one attempt in a single transaction. Events whose `seq` is
    /// already stored are skipped, so re-ingesting after a crash never duplicates.
    /// Returns how many were new.
    pub fn append_events(
        &self,
        task_id: &str,
        attempt: u32,
        events: &[TaskEvent],
    ) -> Result<usize> {
        self.immediate(|tx| {
            let mut stmt = tx.prepare_cached(
                "INSERT OR IGNORE INTO events (task_id, attempt, seq, kind, stream, summary, data, at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?;
            let mut inserted = 0;
            for e in events {
                let data = to_json("event data", &e.data)?;
                inserted += stmt.execute(params![
                    task_id,
                    attempt,
                    e.seq as i64,
                    e.kind.as_str(),
                    e.stream.as_str(),
                    e.summary,
                    data,
                    ts(e.at)
                ])?;
            }
            Ok(inserted)
        })
    }

    /// How many stdout/stderr lines of an attempt are stored: one past the highest seq
    /// (seqs are dense from 0), so a re-attached stream resumes exactly there.
    pub fn event_count(&self, task_id: &str, attempt: u32) -> Result<u64> {
        let max: Option<i64> = self.conn.query_row(
            "SELECT MAX(seq) FROM events WHERE task_id = ?1 AND attempt = ?2",
            params![task_id, attempt],
            |r| r.get(0),
        )?;
        Ok(max.map_or(0, |m| m as u64 + 1))
    }

    /// Events of one attempt with `seq` greater than `after_seq`, in order, at most `limit`.
    pub fn events(
        &self,
        task_id: &str,
        attempt: u32,
        after_seq: Option<u64>,
        limit: usize,
    ) -> Result<Vec<TaskEvent>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT seq, kind, stream, summary, data, at FROM events \
             WHERE task_id = ?1 AND attempt = ?2 AND seq > ?3 ORDER BY seq LIMIT ?4",
        )?;
        let after = after_seq.map_or(-1, |s| s as i64);
        let rows = stmt.query_map(params![task_id, attempt, after, limit as i64], |r| {
            let stream: String = r.get(2)?;
            Ok(TaskEvent {
                seq: r.get::<_, i64>(0)? as u64,
                kind: parse_col::<EventKind>(r, 1)?,
                stream: match stream.as_str() {
                    "stderr" => EventStream::Stderr,
                    _ => EventStream::Stdout,
                },
                summary: r.get(3)?,
                data: json_col(r, 4)?,
                at: time_col(r, 5)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    // ------------------------------------------------------------------ idempotency

    /// Remembers that the comment for `purpose` (`claimed`, `landed`, `blocked`, …) was
    /// posted. Returns `false` if one was already recorded (the first id is kept).
    pub fn record_comment(
        &self,
        task_id: &str,
        purpose: &str,
        comment_id: u64,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let n = self.conn.execute(
            "INSERT OR IGNORE INTO source_comments (task_id, purpose, comment_id, at) VALUES (?1, ?2, ?3, ?4)",
            params![task_id, purpose, comment_id as i64, ts(now)],
        )?;
        Ok(n == 1)
    }

    /// The id of the comment posted for `purpose`, if any.
    pub fn comment_id(&self, task_id: &str, purpose: &str) -> Result<Option<u64>> {
        Ok(self
            .conn
            .query_row(
                "SELECT comment_id FROM source_comments WHERE task_id = ?1 AND purpose = ?2",
                params![task_id, purpose],
                |r| r.get::<_, i64>(0),
            )
            .optional()?
            .map(|v| v as u64))
    }

    pub fn kv_get(&self, key: &str) -> Result<Option<String>> {
        Ok(self
            .conn
            .query_row("SELECT value FROM kv WHERE key = ?1", [key], |r| r.get(0))
            .optional()?)
    }

    pub fn kv_set(&self, key: &str, value: &str, now: DateTime<Utc>) -> Result<()> {
        self.conn.execute(
            "INSERT INTO kv (key, value, updated_at) VALUES (?1, ?2, ?3) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
            params![key, value, ts(now)],
        )?;
        Ok(())
    }
}

// ---------------------------------------------------------------------- helpers

fn get_task(conn: &Connection, id: &str) -> Result<Option<Task>> {
    let mut stmt = conn.prepare_cached(&format!("SELECT {TASK_COLS} FROM tasks WHERE id = ?1"))?;
    Ok(stmt.query_row([id], task_from_row).optional()?)
}

fn current_state(conn: &Connection, task_id: &str) -> Result<TaskState> {
    conn.prepare_cached("SELECT state FROM tasks WHERE id = ?1")?
        .query_row([task_id], |r| parse_col::<TaskState>(r, 0))
        .optional()?
        .ok_or_else(|| StoreError::NotFound(task_id.to_string()))
}

/// Moves a task to CLAIMED inside an IMMEDIATE transaction the caller holds.
fn claim_in(tx: &Transaction<'_>, task_id: &str, now: DateTime<Utc>) -> Result<Task> {
    let from = current_state(tx, task_id)?;
    let reason = if from == TaskState::Failed {
        "claimed for retry"
    } else {
        "claimed"
    };
    write_transition(tx, task_id, from, TaskState::Claimed, reason, now)?;
    tx.execute(
        "UPDATE tasks SET next_attempt_at = NULL WHERE id = ?1",
        [task_id],
    )?;
    let task = get_task(tx, task_id)?.ok_or_else(|| StoreError::NotFound(task_id.to_string()))?;
    if from == TaskState::Discovered && task.attempts == 0 {
        crate::metrics::first_claim((now - task.created_at).to_std().unwrap_or_default());
    }
    Ok(task)
}

/// Checks the table, updates the state and appends the transition row.
fn write_transition(
    tx: &Transaction<'_>,
    task_id: &str,
    from: TaskState,
    to: TaskState,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<()> {
    domain::transition(from, to).map_err(|source| StoreError::InvalidTransition {
        task_id: task_id.to_string(),
        source,
    })?;
    let changed = tx
        .prepare_cached(
            "UPDATE tasks SET state = ?3, updated_at = ?4 WHERE id = ?1 AND state = ?2",
        )?
        .execute(params![task_id, from.as_str(), to.as_str(), ts(now)])?;
    if changed != 1 {
        return Err(StoreError::NotFound(task_id.to_string()));
    }
    tx.prepare_cached(
        "INSERT INTO transitions (task_id, from_state, to_state, reason, at) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![task_id, from.as_str(), to.as_str(), reason, ts(now)])?;
    Ok(())
}

/// Fixed-width RFC 3339 in UTC with microseconds: comparing the text compares the times.
fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

fn conversion(idx: usize, msg: String) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(idx, Type::Text, msg.into())
}

fn parse_col<T: FromStr>(r: &Row<'_>, idx: usize) -> rusqlite::Result<T>
where
    T::Err: std::fmt::Display,
{
    let text: String = r.get(idx)?;
    text.parse::<T>()
        .map_err(|e| conversion(idx, format!("`{text}`: {e}")))
}

fn time_col(r: &Row<'_>, idx: usize) -> rusqlite::Result<DateTime<Utc>> {
    let text: String = r.get(idx)?;
    DateTime::parse_from_rfc3339(&text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| conversion(idx, format!("time `{text}`: {e}")))
}

fn opt_time_col(r: &Row<'_>, idx: usize) -> rusqlite::Result<Option<DateTime<Utc>>> {
    match r.get::<_, Option<String>>(idx)? {
        None => Ok(None),
        Some(_) => time_col(r, idx).map(Some),
    }
}

fn json_col<T: serde::de::DeserializeOwned>(r: &Row<'_>, idx: usize) -> rusqlite::Result<T> {
    let text: String = r.get(idx)?;
    serde_json::from_str(&text).map_err(|e| conversion(idx, format!("JSON: {e}")))
}

fn to_json<T: Serialize + ?Sized>(what: &'static str, value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|source| StoreError::Json { what, source })
}

fn task_from_row(r: &Row<'_>) -> rusqlite::Result<Task> {
    Ok(Task {
        id: r.get(0)?,
        title: r.get(1)?,
        body: r.get(2)?,
        source: parse_col::<SourceKind>(r, 3)?,
        source_ref: r.get(4)?,
        repo: r.get(5)?,
        base_ref: r.get(6)?,
        state: parse_col::<TaskState>(r, 7)?,
        task_type: parse_col::<TaskType>(r, 8)?,
        scope: parse_col::<Scope>(r, 9)?,
        risk: parse_col::<Risk>(r, 10)?,
        context_tokens: r.get::<_, i64>(11)? as u64,
        requires_web: r.get(12)?,
        labels: json_col(r, 13)?,
        metadata: json_col(r, 14)?,
        attempts: r.get(15)?,
        failures: r.get(16)?,
        created_at: time_col(r, 17)?,
        updated_at: time_col(r, 18)?,
        next_attempt_at: opt_time_col(r, 19)?,
    })
}

/// A text column borrowed from the row.
fn str_col<'r>(r: &'r Row<'_>, idx: usize) -> rusqlite::Result<&'r str> {
    r.get_ref(idx)?.as_str().map_err(Into::into)
}

fn opt_str_col<'r>(r: &'r Row<'_>, idx: usize) -> rusqlite::Result<Option<&'r str>> {
    r.get_ref(idx)?.as_str_or_null().map_err(Into::into)
}

/// Parses a stored enum: the stored text is the canonical name, so compare first and only
/// fall back to the (allocating, lenient) `FromStr` for anything else.
fn enum_col<T>(
    r: &Row<'_>,
    idx: usize,
    all: &[T],
    name: fn(&T) -> &'static str,
) -> rusqlite::Result<T>
where
    T: Copy + FromStr,
    T::Err: std::fmt::Display,
{
    let text = str_col(r, idx)?;
    match all.iter().find(|v| name(v) == text) {
        Some(v) => Ok(*v),
        None => text
            .parse::<T>()
            .map_err(|e| conversion(idx, format!("`{text}`: {e}"))),
    }
}

fn summary_from_row<'r>(r: &'r Row<'_>) -> rusqlite::Result<TaskSummary<'r>> {
    let labels = str_col(r, 6)?;
    Ok(TaskSummary {
        id: str_col(r, 0)?,
        title: str_col(r, 1)?,
        source_ref: str_col(r, 2)?,
        state: enum_col(r, 3, &TaskState::ALL, |v| v.as_str())?,
        task_type: enum_col(r, 4, &TaskType::ALL, |v| v.as_str())?,
        risk: enum_col(r, 5, &[Risk::Low, Risk::Medium, Risk::High], |v| v.as_str())?,
        labels: serde_json::from_str(labels)
            .map_err(|e| conversion(6, format!("labels JSON `{labels}`: {e}")))?,
        attempts: r.get(7)?,
        failures: r.get(8)?,
        created_at: str_col(r, 9)?,
        updated_at: str_col(r, 10)?,
        next_attempt_at: opt_str_col(r, 11)?,
        quota_wait: match (
            opt_str_col(r, 12)?,
            opt_str_col(r, 13)?,
            opt_str_col(r, 14)?,
        ) {
            (Some(until), Some(agent), Some(identity)) => Some(QuotaWaitBrief {
                until,
                agent,
                identity,
            }),
            _ => None,
        },
    })
}

fn attempt_from_row(r: &Row<'_>) -> rusqlite::Result<AttemptRecord> {
    let status: Option<String> = r.get(8)?;
    let status = status
        .map(|s| s.parse::<AttemptStatus>().map_err(|e| conversion(8, e)))
        .transpose()?;
    let tokens = match (
        r.get::<_, Option<i64>>(10)?,
        r.get::<_, Option<i64>>(11)?,
        r.get::<_, Option<i64>>(12)?,
    ) {
        (None, None, None) => None,
        (i, o, c) => Some(TokenUsage {
            input: i.unwrap_or(0) as u64,
            output: o.unwrap_or(0) as u64,
            cached_input: c.unwrap_or(0) as u64,
        }),
    };
    Ok(AttemptRecord {
        task_id: r.get(0)?,
        attempt: r.get(1)?,
        agent: r.get(2)?,
        identity: r.get(3)?,
        run_spec: json_col(r, 4)?,
        container_id: r.get(5)?,
        workspace: PathBuf::from(r.get::<_, String>(6)?),
        branch: r.get(7)?,
        status,
        turns: r.get(9)?,
        tokens,
        cost_usd: r.get(13)?,
        exit_code: r.get(14)?,
        duration_seconds: r.get(15)?,
        final_message: r.get(16)?,
        reason: r.get(17)?,
        evidence: json_col(r, 18)?,
        commit_sha: r.get(19)?,
        pr_url: r.get(20)?,
        started_at: time_col(r, 21)?,
        finished_at: opt_time_col(r, 22)?,
    })
}
