//! Tasks: inserting, reading and listing them, their routing facts and retry schedule,
//! and [`Store::transition`], the one way a task changes state.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::sql::{params, Db, Dialect, Row};
use super::{json_col, opt_time_col, parse_col, time_col, to_json, ts, Result, Store, StoreError};
use crate::domain::{self, Risk, Scope, SourceKind, Task, TaskState, TaskType};

const TASK_COLS: &str = "id, title, body, source, source_ref, repo, base_ref, state, task_type, \
     scope, risk, context_tokens, requires_web, labels, metadata, attempts, failures, \
     created_at, updated_at, next_attempt_at";

/// One row of the transition log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TransitionRecord {
    pub task_id: String,
    pub from: TaskState,
    pub to: TaskState,
    pub reason: String,
    pub at: DateTime<Utc>,
}

impl Store {
    /// Inserts a new task. Returns `false` (and changes nothing) when a task with the same
    /// id exists: sources call this on every poll and rely on it to dedupe.
    pub fn insert_task(&self, task: &Task) -> Result<bool> {
        let labels = to_json("labels", &task.labels)?;
        let metadata = to_json("metadata", &task.metadata)?;
        self.atomic(|conn| {
        let inserted = conn.execute(&format!(
            "INSERT INTO tasks ({TASK_COLS}) VALUES \
             (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20) \
             ON CONFLICT DO NOTHING"
        ), params![
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
        if inserted == 1 {
            super::refresh_summary(conn, &task.id)?;
            // New work: the fleet's daemons look now (PostgreSQL; issue 27).
            super::wake::notify(conn)?;
        }
        Ok(inserted == 1)
        })
    }

    /// Reserves the next local queue id, `local-<n>`. Ids are never reused.
    pub fn next_local_task_id(&self) -> Result<String> {
        let n: i64 = self.atomic(|db| {
            db.query_row(
                "UPDATE counters SET value = value + 1 WHERE name = 'local_task' RETURNING value",
                params![],
                |r| r.get(0),
            )
        })?;
        Ok(format!("local-{n}"))
    }

    pub fn get_task(&self, id: &str) -> Result<Option<Task>> {
        get_task(&self.db, id)
    }

    /// The task with this source reference (`owner/repo#42`), if any.
    pub fn find_by_source_ref(&self, source_ref: &str) -> Result<Option<Task>> {
        self.db.query_opt(
            &format!(
                "SELECT {TASK_COLS} FROM tasks WHERE source_ref = ?1 ORDER BY rowid DESC LIMIT 1"
            ),
            params![source_ref],
            task_from_row,
        )
    }

    /// Tasks, newest first, optionally only those in `state`, at most `limit` of them.
    pub fn list_tasks(&self, state: Option<TaskState>, limit: Option<usize>) -> Result<Vec<Task>> {
        let limit = self.db.limit(limit);
        match state {
            Some(s) => self.db.query_map(
                &format!(
                    "SELECT {TASK_COLS} FROM tasks WHERE state = ?1 ORDER BY rowid DESC LIMIT ?2"
                ),
                params![s.as_str(), limit],
                task_from_row,
            ),
            None => self.db.query_map(
                &format!("SELECT {TASK_COLS} FROM tasks ORDER BY rowid DESC LIMIT ?1"),
                params![limit],
                task_from_row,
            ),
        }
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

    /// Records the failure count and when the task may be retried (`None`: never; the
    /// orchestrator then moves it to BLOCKED).
    pub fn set_retry(
        &self,
        task_id: &str,
        failures: u32,
        next_attempt_at: Option<DateTime<Utc>>,
    ) -> Result<()> {
        self.atomic(|conn| {
            let changed = conn.execute(
                "UPDATE tasks SET failures = ?2, next_attempt_at = ?3 WHERE id = ?1",
                params![task_id, failures, next_attempt_at.map(ts)],
            )?;
            if changed == 0 {
                return Err(StoreError::NotFound(task_id.to_string()));
            }
            super::refresh_summary(conn, task_id)
        })
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
        self.atomic(|conn| {
            let changed = conn.execute(
                "UPDATE tasks SET task_type = ?2, scope = ?3, risk = ?4, context_tokens = ?5 WHERE id = ?1",
                params![task_id, task_type.as_str(), scope.as_str(), risk.as_str(), context_tokens as i64],
            )?;
            if changed == 0 {
                return Err(StoreError::NotFound(task_id.to_string()));
            }
            super::refresh_summary(conn, task_id)
        })
    }

    /// The earliest retry time among FAILED tasks scheduled for one (the daemon sleeps
    /// until then instead of polling).
    pub fn next_retry_at(&self) -> Result<Option<DateTime<Utc>>> {
        let text: Option<String> = self.db.query_row(
            "SELECT MIN(next_attempt_at) FROM tasks WHERE state = 'FAILED' AND next_attempt_at IS NOT NULL",
            params![],
            |r| r.get(0),
        )?;
        Ok(text
            .and_then(|t| DateTime::parse_from_rfc3339(&t).ok())
            .map(|t| t.with_timezone(&Utc)))
    }

    /// Freezes the title and body a source claim returned: later edits at the source never
    /// reach the agent.
    pub fn freeze_text(&self, task_id: &str, title: &str, body: &str) -> Result<()> {
        self.atomic(|conn| {
            let changed = conn.execute(
                "UPDATE tasks SET title = ?2, body = ?3 WHERE id = ?1",
                params![task_id, title, body],
            )?;
            if changed == 0 {
                return Err(StoreError::NotFound(task_id.to_string()));
            }
            super::refresh_summary(conn, task_id)
        })
    }

    /// Transitions into `to` at or after `since`, oldest first (the console's pictures).
    pub fn transitions_into_since(
        &self,
        to: TaskState,
        since: DateTime<Utc>,
    ) -> Result<Vec<TransitionRecord>> {
        self.db.query_map(
            "SELECT task_id, from_state, to_state, reason, at FROM transitions \
             WHERE to_state = ?1 AND at >= ?2 ORDER BY at, task_seq, n",
            params![to.as_str(), ts(since)],
            transition_row,
        )
    }

    /// (queued at, claimed at) of each claim of a DISCOVERED task at or after `since`: how
    /// long tasks waited in the queue.
    pub fn queue_waits_since(
        &self,
        since: DateTime<Utc>,
    ) -> Result<Vec<(DateTime<Utc>, DateTime<Utc>)>> {
        self.db.query_map(
            "SELECT t.created_at, tr.at FROM transitions tr JOIN tasks t ON t.rowid = tr.task_seq \
             WHERE tr.from_state = 'DISCOVERED' AND tr.to_state = 'CLAIMED' AND tr.at >= ?1 \
             ORDER BY tr.at, tr.task_seq, tr.n",
            params![ts(since)],
            |r| Ok((time_col(r, 0)?, time_col(r, 1)?)),
        )
    }

    /// Transitions for one task, oldest first.
    pub fn transitions(&self, task_id: &str) -> Result<Vec<TransitionRecord>> {
        // Schema 13 on SQLite: the task's rows are one range of the integer key.
        static SQLITE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
            let span = super::schema::TRANSITION_SPAN;
            format!(
                "SELECT task_id, from_state, to_state, reason, at FROM transitions \
                 WHERE id > (SELECT rowid FROM tasks WHERE id = ?1) * {span} \
                 AND id < ((SELECT rowid FROM tasks WHERE id = ?1) + 1) * {span} ORDER BY id"
            )
        });
        let sql = match self.db.dialect() {
            Dialect::Sqlite => SQLITE.as_str(),
            Dialect::Postgres => {
                "SELECT task_id, from_state, to_state, reason, at FROM transitions \
                 WHERE task_seq = (SELECT rowid FROM tasks WHERE id = ?1) ORDER BY n"
            }
        };
        self.db.query_map(sql, params![task_id], transition_row)
    }
}

pub(super) fn get_task(db: &Db, id: &str) -> Result<Option<Task>> {
    db.query_opt(
        &format!("SELECT {TASK_COLS} FROM tasks WHERE id = ?1"),
        params![id],
        task_from_row,
    )
}

pub(super) fn current_state(db: &Db, task_id: &str) -> Result<TaskState> {
    db.query_opt(
        "SELECT state FROM tasks WHERE id = ?1",
        params![task_id],
        |r| parse_col::<TaskState>(r, 0),
    )?
    .ok_or_else(|| StoreError::NotFound(task_id.to_string()))
}

/// Checks the table, updates the state and appends the transition row.
pub(super) fn write_transition(
    tx: &Db,
    task_id: &str,
    from: TaskState,
    to: TaskState,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<()> {
    check_transition(task_id, from, to)?;
    let seq: i64 = tx
        .query_opt(
            "UPDATE tasks SET state = ?3, updated_at = ?4 WHERE id = ?1 AND state = ?2 RETURNING rowid",
            params![task_id, from.as_str(), to.as_str(), ts(now)],
            |r| r.get(0),
        )?
        .ok_or_else(|| StoreError::NotFound(task_id.to_string()))?;
    insert_transition(tx, seq, task_id, from, to, reason, now)?;
    if from.is_active() && !to.is_active() {
        // The claim goes with the activity (issue 27, `owners`).
        tx.execute(
            "UPDATE tasks SET machine = NULL, owner = NULL, lease_until = NULL WHERE rowid = ?1",
            params![seq],
        )?;
    }
    super::views::refresh_summary_of(tx, seq)
}

/// Appends a transition row of the task whose rowid is `seq`: its next number. The table
/// is keyed by (task rowid, number), so the row lands beside the task's others and no
/// second index is written; on SQLite (schema 13) that key is one integer,
/// `seq * TRANSITION_SPAN + n`, and a task whose numbers would run into the next task's
/// range is refused, nothing written.
fn insert_transition(
    tx: &Db,
    seq: i64,
    task_id: &str,
    from: TaskState,
    to: TaskState,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<()> {
    let (at, from, to) = (ts(now), from.as_str(), to.as_str());
    let values = params![seq, task_id, from, to, reason, at];
    match tx.dialect() {
        Dialect::Sqlite => {
            static INSERT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
                let span = super::schema::TRANSITION_SPAN;
                format!(
                    "INSERT INTO transitions (id, task_id, from_state, to_state, reason, at) \
                     SELECT COALESCE(MAX(id), ?1 * {span}) + 1, ?2, ?3, ?4, ?5, ?6 \
                     FROM transitions WHERE id > ?1 * {span} AND id < (?1 + 1) * {span} \
                     HAVING COALESCE(MAX(id), ?1 * {span}) + 1 < (?1 + 1) * {span}"
                )
            });
            if tx.execute(&INSERT, values)? == 0 {
                return Err(StoreError::TooManyTransitions {
                    task_id: task_id.to_string(),
                    most: super::schema::TRANSITION_SPAN - 1,
                });
            }
        }
        Dialect::Postgres => {
            tx.execute(
                "INSERT INTO transitions (task_seq, n, task_id, from_state, to_state, reason, at) \
                 VALUES (?1, (SELECT COALESCE(MAX(n), 0) + 1 FROM transitions WHERE task_seq = ?1), \
                 ?2, ?3, ?4, ?5, ?6)",
                values,
            )?;
        }
    }
    Ok(())
}

/// One row of `task_id, from_state, to_state, reason, at` from `transitions`.
fn transition_row(r: &Row<'_>) -> Result<TransitionRecord> {
    Ok(TransitionRecord {
        task_id: r.get(0)?,
        from: parse_col(r, 1)?,
        to: parse_col(r, 2)?,
        reason: r.get(3)?,
        at: time_col(r, 4)?,
    })
}

pub(super) fn task_from_row(r: &Row<'_>) -> Result<Task> {
    task_from_row_at(r, 0)
}

/// A task from [`TASK_COLS`] starting at column `at` of the row.
pub(super) fn task_from_row_at(r: &Row<'_>, at: usize) -> Result<Task> {
    Ok(Task {
        id: r.get(at)?,
        title: r.get(at + 1)?,
        body: r.get(at + 2)?,
        source: parse_col::<SourceKind>(r, at + 3)?,
        source_ref: r.get(at + 4)?,
        repo: r.get(at + 5)?,
        base_ref: r.get(at + 6)?,
        state: parse_col::<TaskState>(r, at + 7)?,
        task_type: parse_col::<TaskType>(r, at + 8)?,
        scope: parse_col::<Scope>(r, at + 9)?,
        risk: parse_col::<Risk>(r, at + 10)?,
        context_tokens: r.get::<i64>(at + 11)? as u64,
        requires_web: r.get(at + 12)?,
        labels: json_col(r, at + 13)?,
        metadata: json_col(r, at + 14)?,
        attempts: r.get(at + 15)?,
        failures: r.get(at + 16)?,
        created_at: time_col(r, at + 17)?,
        updated_at: time_col(r, at + 18)?,
        next_attempt_at: opt_time_col(r, at + 19)?,
    })
}

/// Why a claim moved a task, by the state it left.
fn claim_reason(from: TaskState) -> &'static str {
    if from == TaskState::Failed {
        "claimed for retry"
    } else {
        "claimed"
    }
}

fn check_transition(task_id: &str, from: TaskState, to: TaskState) -> Result<()> {
    domain::transition(from, to)
        .map(|_| ())
        .map_err(|source| StoreError::InvalidTransition {
            task_id: task_id.to_string(),
            source,
        })
}

/// A task claimed for the first time: how long it waited in the queue (metrics).
fn note_claim(task: &Task, from: TaskState, now: DateTime<Utc>) {
    if from == TaskState::Discovered && task.attempts == 0 {
        crate::metrics::first_claim((now - task.created_at).to_std().unwrap_or_default());
    }
}

/// A claim's state change (`claims`, `owners`): the task whose rowid is `seq`, `from`
/// (DISCOVERED, or FAILED with its retry due) to CLAIMED with the retry time cleared and
/// the claim's owner and lease (`None`: a claim without an owner), its transition row and
/// summary, in the caller's writing transaction; returns the claimed task. Besides
/// [`write_transition`] the only writers of `state`, checked against `domain::transition`
/// the same way; a claim is the hot path (issue 27), so one statement changes the row,
/// owner, lease and summary included, and returns it: `summary` is the task's stored
/// summary as the caller read it in this transaction, and the claimed one is derived from
/// it (`views::claimed_summary`); only when that cannot be done (`None`, or not a summary
/// of today's shape) is it rebuilt from the rows after the change.
pub(super) fn claim_transition(
    tx: &Db,
    seq: i64,
    task_id: &str,
    from: TaskState,
    summary: Option<&str>,
    owner: Option<(&super::Owner, DateTime<Utc>)>,
    now: DateTime<Utc>,
) -> Result<Task> {
    check_transition(task_id, from, TaskState::Claimed)?;
    static UPDATE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "UPDATE tasks SET state = 'CLAIMED', next_attempt_at = NULL, updated_at = ?3, \
             machine = ?4, owner = ?5, lease_until = ?6, summary = COALESCE(?7, summary) \
             WHERE rowid = ?1 AND state = ?2 RETURNING {TASK_COLS}"
        )
    });
    let (machine, key, lease) = match owner {
        Some((o, until)) => (Some(o.machine.as_str()), Some(o.key()), Some(ts(until))),
        None => (None, None, None),
    };
    let at = ts(now);
    let claimed = summary.and_then(|s| super::views::claimed_summary(s, &at));
    let task = tx
        .query_opt(
            &UPDATE,
            params![seq, from.as_str(), at, machine, key, lease, claimed],
            task_from_row,
        )?
        .ok_or_else(|| StoreError::NotFound(task_id.to_string()))?;
    insert_transition(
        tx,
        seq,
        task_id,
        from,
        TaskState::Claimed,
        claim_reason(from),
        now,
    )?;
    if claimed.is_none() {
        super::views::refresh_summary_of(tx, seq)?;
    }
    note_claim(&task, from, now);
    Ok(task)
}

/// [`super::QueueCore::claim_next_owned`] on PostgreSQL in one statement (issue 27): the
/// oldest DISCOVERED task and the oldest FAILED one whose retry is due, each not pinned to
/// another machine, are locked with `FOR UPDATE SKIP LOCKED` (a row another claimer holds
/// is passed over, not waited for; one it claimed and committed meanwhile fails the
/// re-checked state and is passed over too); the older becomes CLAIMED with its retry time
/// cleared and its claim (`owner`, its lease `lease` from the server's clock) in the same row, its transition
/// row is written, and the row comes back with its summary's columns. The summary is then stored in the
/// same transaction. The caller's transaction holds the store's write lock shared
/// (`sql::Db::begin_claim`): claimers run side by side, other writers exclude them.
pub(super) fn claim_next_postgres(
    tx: &Db,
    owner: &super::Owner,
    lease: std::time::Duration,
    now: DateTime<Utc>,
) -> Result<Option<Task>> {
    for from in [TaskState::Discovered, TaskState::Failed] {
        check_transition("(next claimable)", from, TaskState::Claimed)?;
    }
    static CLAIM: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        let not_pinned_elsewhere = "(pinned_to IS NULL OR pinned_to = ?1)";
        let task_cols: Vec<String> = TASK_COLS
            .split(',')
            .map(|c| format!("tasks.{}", c.trim()))
            .collect();
        // The server's clock plus the lease (`owners::lease_clock`), not the caller's.
        let lease_until = super::rows::PG_CLOCK.replace(
            "clock_timestamp()",
            "(clock_timestamp() + make_interval(secs => ?4))",
        );
        format!(
            "WITH d AS (SELECT seq FROM tasks WHERE state = 'DISCOVERED' \
               AND {not_pinned_elsewhere} ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED), \
             r AS (SELECT seq FROM tasks WHERE state = 'FAILED' \
               AND next_attempt_at IS NOT NULL AND next_attempt_at <= ?2 \
               AND {not_pinned_elsewhere} ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED), \
             pick AS (SELECT seq, from_state FROM \
               (SELECT seq, 'DISCOVERED' AS from_state FROM d \
                UNION ALL SELECT seq, 'FAILED' AS from_state FROM r) c \
               ORDER BY seq LIMIT 1), \
             upd AS (UPDATE tasks SET state = 'CLAIMED', next_attempt_at = NULL, updated_at = ?2, \
               machine = ?1, owner = ?3, lease_until = {lease_until} \
               FROM pick WHERE tasks.seq = pick.seq RETURNING tasks.*, pick.from_state), \
             tr AS (INSERT INTO transitions (task_seq, n, task_id, from_state, to_state, reason, at) \
               SELECT seq, (SELECT COALESCE(MAX(t.n), 0) + 1 FROM transitions t \
               WHERE t.task_seq = upd.seq), id, from_state, 'CLAIMED', \
               CASE WHEN from_state = 'FAILED' THEN '{}' ELSE '{}' END, ?2 FROM upd) \
             {}",
            claim_reason(TaskState::Failed),
            claim_reason(TaskState::Discovered),
            super::views::summary_select(
                "upd",
                &format!("tasks.from_state, {}", task_cols.join(", "))
            )
        )
    });
    let extra = super::views::SUMMARY_EXTRA_COL;
    let claimed = tx.query_opt(
        &CLAIM,
        params![owner.machine, ts(now), owner.key(), lease.as_secs_f64()],
        |r| {
            let (seq, json) = super::views::summary_of_row(r)?;
            let from = parse_col::<TaskState>(r, extra)?;
            Ok((seq, json, from, task_from_row_at(r, extra + 1)?))
        },
    )?;
    let Some((seq, json, from, task)) = claimed else {
        return Ok(None);
    };
    super::views::write_summary(tx, seq, &json)?;
    note_claim(&task, from, now);
    Ok(Some(task))
}
