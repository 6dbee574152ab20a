//! Read-only views: the task listings of `status` (summaries borrowed from the row, or
//! the stored summary JSON as bytes), counts by state, and for the daemon's HTTP API
//! (src/http/) filtered, paged listings and the attempts running now. The API and the CLI
//! read the same rows and bytes (`status --json` objects are the stored summary JSON), so
//! they cannot disagree.

use std::collections::BTreeMap;

use super::sql::{params, Db, Dialect, Row, Value};
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{
    conversion, enum_col, opt_str_col, parse_col, str_col, time_col, Result, Store, StoreError,
};
use crate::domain::{Risk, SourceKind, TaskState, TaskType};

/// Which tasks a listing shows; `None` fields do not filter.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskFilter {
    pub state: Option<TaskState>,
    pub source: Option<SourceKind>,
    /// Tasks with at least one attempt by this agent profile.
    pub agent: Option<String>,
}

impl TaskFilter {
    fn is_empty(&self) -> bool {
        self.state.is_none() && self.source.is_none() && self.agent.is_none()
    }
}

/// An attempt that has started and not ended, with its task's state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunningAttempt {
    pub task_id: String,
    pub title: String,
    pub state: TaskState,
    pub attempt: u32,
    pub agent: String,
    pub identity: String,
    pub branch: String,
    pub started_at: DateTime<Utc>,
    /// The machine whose daemon holds the task's claim (issue 27); `None` for a claim
    /// written without an owner (`spawn`, or before schema 8).
    pub machine: Option<String>,
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
    /// The pull request the task landed, as the shepherd last saw it (issue 15).
    pub pull: Option<PullBrief<'a>>,
    /// The pull request a follow-up task works on (issue 15).
    pub followup_of: Option<FollowUpOf<'a>>,
    /// The agent profile of the task's latest attempt; null before the first (issue 29).
    pub agent: Option<&'a str>,
    /// Dollars its attempts cost so far, as their CLIs reported; null when none reported
    /// a cost (issue 29).
    pub cost_usd: Option<f64>,
}

/// Why a parked task waits, in a listing: the agent whose reset comes first, under its
/// identity, and when (stored RFC 3339 text). `status TASK --json` has every agent's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QuotaWaitBrief<'a> {
    pub until: &'a str,
    pub agent: &'a str,
    pub identity: &'a str,
}

/// A landed task's pull request, in a listing: its number and what the shepherd's last
/// look found (`open`/`merged`/`closed`; checks `passing`/`failing`/`pending`; review
/// `approved`/`changes_requested`/`commented`; mergeable `yes`/`no`/`unknown`), how many
/// follow-ups it had and whether it is still watched. `status TASK --json` has the record
/// in full and the follow-ups.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PullBrief<'a> {
    pub number: u64,
    pub state: &'a str,
    pub checks: Option<&'a str>,
    pub review: Option<&'a str>,
    pub mergeable: Option<&'a str>,
    pub followups: u32,
    pub watching: bool,
}

/// The pull request a follow-up works on: the task that landed it and its number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FollowUpOf<'a> {
    pub task_id: &'a str,
    pub number: u64,
}

/// A label as stored, borrowed unless the JSON escaped it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Label<'a>(#[serde(borrow)] pub std::borrow::Cow<'a, str>);

const SUMMARY_COLS: &str = "tasks.id, tasks.title, tasks.source_ref, tasks.state, \
     tasks.task_type, tasks.risk, tasks.labels, tasks.attempts, tasks.failures, \
     tasks.created_at, tasks.updated_at, tasks.next_attempt_at, w.until, w.agent, w.identity, \
     p.number, p.state, p.checks, p.review, p.mergeable, p.followups, p.watching, \
     f.pull_task_id, fp.number, \
     (SELECT a.agent FROM attempts a WHERE a.task_id = tasks.id ORDER BY a.attempt DESC LIMIT 1), \
     (SELECT SUM(a.cost_usd) FROM attempts a WHERE a.task_id = tasks.id)";

/// The column after [`SUMMARY_COLS`] the summary writers select: the task's rowid.
const SEQ_COL: usize = 26;

/// The joins of [`SUMMARY_FROM`] onto a relation named `tasks`.
macro_rules! summary_joins {
    () => {
        "LEFT JOIN quota_waits w ON w.task_id = tasks.id AND tasks.state = 'FAILED' \
         LEFT JOIN pulls p ON p.task_id = tasks.id \
         LEFT JOIN followups f ON f.task_id = tasks.id \
         LEFT JOIN pulls fp ON fp.task_id = f.pull_task_id"
    };
}

/// The tasks table with the quota wait of the FAILED ones (a parked task's), the pull
/// request each landed and, for a follow-up, the pull request it works on.
const SUMMARY_FROM: &str = concat!("tasks ", summary_joins!());

/// What a summary writer selects from `relation` (a table or a statement's `WITH` name
/// holding rows of `tasks`, aliased `tasks`): [`SUMMARY_COLS`], the rowid at [`SEQ_COL`],
/// then `extra` (more of the relation's columns, comma-separated, `tasks.`-qualified).
/// [`summary_of_row`] reads what one such row says.
pub(super) fn summary_select(relation: &str, extra: &str) -> String {
    format!(
        "SELECT {SUMMARY_COLS}, tasks.rowid, {extra} FROM {relation} AS tasks {}",
        summary_joins!()
    )
}

/// The first column after [`summary_select`]'s summary and rowid.
pub(super) const SUMMARY_EXTRA_COL: usize = SEQ_COL + 1;

/// Rows of a PostgreSQL listing read per round trip ([`Store::for_each_newest`]): about
/// 0.8 MB of summaries, and 50 round trips at 100k tasks.
const PAGE_ROWS: usize = 2000;

/// A listing newest first, as the parts of its statement: `SELECT {columns}, {key} FROM
/// {from} …`, where `from` ends in a `WHERE` clause whose parameters are `?3…`, and the
/// key (a rowid, unique) is column `key_col` of the row.
#[derive(Clone, Copy)]
struct Newest<'a> {
    columns: &'a str,
    from: &'a str,
    key: &'a str,
    key_col: usize,
}

impl Store {
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
        if self.db.dialect() == Dialect::Postgres {
            let (from, state) = match state {
                Some(s) => (
                    format!("{SUMMARY_FROM} WHERE tasks.state = ?3"),
                    Value::Text(s.as_str()),
                ),
                None => (
                    format!("{SUMMARY_FROM} WHERE CAST(?3 AS TEXT) IS NULL"),
                    Value::Null,
                ),
            };
            let newest = Newest {
                columns: SUMMARY_COLS,
                from: &from,
                key: "tasks.rowid",
                key_col: SEQ_COL,
            };
            return self.for_each_newest(&newest, &[state], limit, 0, |row| {
                let summary = summary_from_row(row)?;
                each(&summary)
            });
        }
        let limit = self.db.limit(limit);
        let sql = match state {
            Some(_) => format!(
                "SELECT {SUMMARY_COLS} FROM {SUMMARY_FROM} WHERE tasks.state = ?2 ORDER BY tasks.rowid DESC LIMIT ?1"
            ),
            None => format!(
                "SELECT {SUMMARY_COLS} FROM {SUMMARY_FROM} WHERE CAST(?2 AS TEXT) IS NULL ORDER BY tasks.rowid DESC LIMIT ?1"
            ),
        };
        self.db
            .for_each(&sql, params![limit, state.map(TaskState::as_str)], |row| {
                let summary = summary_from_row(row)?;
                each(&summary)
            })
    }

    /// Calls `each` with the JSON object of every task's [`TaskSummary`] (exactly the bytes
    /// `serde_json::to_writer` writes for it), newest first, optionally only those in
    /// `state`, at most `limit` of them. The objects are stored text (the task row's
    /// `summary`, kept current by [`write_summary`]), handed over without decoding or UTF-8
    /// checks: this is `status --json` at 100k tasks (docs/benchmarks.md). Stops at the
    /// first error `each` returns.
    pub fn for_each_summary_json<E>(
        &self,
        state: Option<TaskState>,
        limit: Option<usize>,
        each: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E>
    where
        E: From<StoreError>,
    {
        if self.db.dialect() == Dialect::Postgres {
            let filter = TaskFilter {
                state,
                ..TaskFilter::default()
            };
            return self.for_each_summary_json_page(&filter, limit, 0, each);
        }
        let limit = self.db.limit(limit);
        let sql = match state {
            // The state index yields the rowids in order; each summary is one lookup.
            Some(_) => "SELECT summary FROM tasks WHERE state = ?2 ORDER BY rowid DESC LIMIT ?1",
            None => "SELECT summary FROM tasks WHERE CAST(?2 AS TEXT) IS NULL ORDER BY rowid DESC LIMIT ?1",
        };
        self.for_each_stored_json(sql, params![limit, state.map(TaskState::as_str)], each)
    }

    /// Number of tasks in each state (states with none are absent).
    /// The stored summary object of one task (`status --json`'s bytes for it).
    pub fn summary_json(&self, task_id: &str) -> Result<Option<String>> {
        self.db.query_opt(
            "SELECT summary FROM tasks WHERE id = ?1",
            params![task_id],
            |r| r.get(0),
        )
    }

    pub fn count_by_state(&self) -> Result<BTreeMap<TaskState, u64>> {
        let stmt_sql = "SELECT state, COUNT(*) FROM tasks GROUP BY state";
        let rows = self.db.query_map(stmt_sql, params![], |r| {
            Ok((parse_col::<TaskState>(r, 0)?, r.get::<i64>(1)? as u64))
        })?;
        Ok(rows.into_iter().collect())
    }

    /// Calls `each` with the stored summary JSON (the `status --json` objects) of the
    /// tasks `filter` admits, newest first, skipping `offset`, at most `limit`
    /// (`None`: all). Streams like [`Store::for_each_summary_json`].
    pub fn for_each_summary_json_page<E>(
        &self,
        filter: &TaskFilter,
        limit: Option<usize>,
        offset: usize,
        each: impl FnMut(&[u8]) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E>
    where
        E: From<StoreError>,
    {
        let text = |v: Option<&'static str>| v.map_or(Value::Null, Value::Text);
        let rest = [
            text(filter.state.map(TaskState::as_str)),
            text(filter.source.map(|s| s.as_str())),
            filter.agent.as_deref().map_or(Value::Null, Value::Text),
        ];
        if self.db.dialect() == Dialect::Postgres {
            let newest = if filter.is_empty() {
                Newest {
                    columns: "summary",
                    from: "tasks WHERE CAST(?3 AS TEXT) IS NULL \
                           AND CAST(?4 AS TEXT) IS NULL AND CAST(?5 AS TEXT) IS NULL",
                    key: "rowid",
                    key_col: 1,
                }
            } else {
                Newest {
                    columns: "t.summary",
                    from: "tasks t \
                           WHERE (CAST(?3 AS TEXT) IS NULL OR t.state = ?3) \
                           AND (CAST(?4 AS TEXT) IS NULL OR t.source = ?4) \
                           AND (CAST(?5 AS TEXT) IS NULL OR EXISTS (SELECT 1 FROM attempts a WHERE a.task_id = t.id AND a.agent = ?5))",
                    key: "t.rowid",
                    key_col: 1,
                }
            };
            let mut each = each;
            return self
                .for_each_newest(&newest, &rest, limit, offset, |row| each(row.get_bytes(0)?));
        }
        let limit = self.db.limit(limit);
        let offset = offset as i64;
        let sql = if filter.is_empty() {
            // The unfiltered listing walks the rows in order, as `status --json` does.
            "SELECT summary FROM tasks WHERE CAST(?3 AS TEXT) IS NULL \
             AND CAST(?4 AS TEXT) IS NULL AND CAST(?5 AS TEXT) IS NULL \
             ORDER BY rowid DESC LIMIT ?1 OFFSET ?2"
        } else {
            "SELECT t.summary FROM tasks t \
             WHERE (CAST(?3 AS TEXT) IS NULL OR t.state = ?3) \
             AND (CAST(?4 AS TEXT) IS NULL OR t.source = ?4) \
             AND (CAST(?5 AS TEXT) IS NULL OR EXISTS (SELECT 1 FROM attempts a WHERE a.task_id = t.id AND a.agent = ?5)) \
             ORDER BY t.rowid DESC LIMIT ?1 OFFSET ?2"
        };
        self.for_each_stored_json(sql, params![limit, offset, rest[0], rest[1], rest[2]], each)
    }

    /// A listing newest first on PostgreSQL (issue 27), in keyset pages of [`PAGE_ROWS`]:
    /// the first page skips `offset` rows, each next one starts below the last key seen
    /// (`key < ?2`, an index range, never an `OFFSET` walk), so at most a page of rows is
    /// held whatever the store's size; the `postgres` client reads a statement's rows whole
    /// (at 100k summaries about 40 MB before). The pages are read in one `REPEATABLE READ`
    /// read-only transaction (unless one is open already), so they are the one snapshot a
    /// single statement would have read: the output is the same. `rest` are `?3…`; `each`
    /// may use this store between pages (reads only).
    fn for_each_newest<E>(
        &self,
        q: &Newest<'_>,
        rest: &[Value<'_>],
        limit: Option<usize>,
        offset: usize,
        mut each: impl FnMut(&Row<'_>) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E>
    where
        E: From<StoreError>,
    {
        let Newest {
            columns,
            from,
            key,
            key_col,
        } = *q;
        let first =
            format!("SELECT {columns}, {key} FROM {from} ORDER BY {key} DESC LIMIT ?1 OFFSET ?2");
        let next = format!(
            "SELECT {columns}, {key} FROM {from} AND {key} < ?2 ORDER BY {key} DESC LIMIT ?1"
        );
        let snapshot = !self.db.in_transaction();
        if snapshot {
            self.db.begin_snapshot()?;
        }
        let walked = (|| {
            let mut left = limit;
            let mut cursor: Option<i64> = None;
            loop {
                let page = left.map_or(PAGE_ROWS, |l| l.min(PAGE_ROWS));
                if page == 0 {
                    return Ok(());
                }
                let mut params = vec![
                    Value::Int(page as i64),
                    Value::Int(cursor.unwrap_or(offset as i64)),
                ];
                params.extend_from_slice(rest);
                let mut read = 0;
                self.db.for_each(
                    if cursor.is_some() { &next } else { &first },
                    &params,
                    |row| {
                        read += 1;
                        cursor = Some(row.get::<i64>(key_col)?);
                        each(row)
                    },
                )?;
                if read < page {
                    return Ok(());
                }
                left = left.map(|l| l - read);
            }
        })();
        if snapshot {
            match &walked {
                Ok(()) => self.db.commit()?,
                Err(_) => self.db.rollback(),
            }
        }
        walked
    }

    /// Runs `sql`, whose one column is stored summary JSON, and hands each row's bytes to
    /// `each` as they are stored: no decoding, no UTF-8 check, nothing collected.
    fn for_each_stored_json<E>(
        &self,
        sql: &str,
        params: &[Value<'_>],
        mut each: impl FnMut(&[u8]) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E>
    where
        E: From<StoreError>,
    {
        self.db.for_each(sql, params, |row| each(row.get_bytes(0)?))
    }

    /// Attempts that started and have not ended, oldest first.
    pub fn running_attempts(&self) -> Result<Vec<RunningAttempt>> {
        let stmt_sql = "SELECT a.task_id, t.title, t.state, a.attempt, a.agent, a.identity, a.branch, a.started_at, t.machine \
             FROM attempts a JOIN tasks t ON t.id = a.task_id \
             WHERE a.status IS NULL AND t.state IN ('PROVISIONED', 'RUNNING', 'VERIFYING') \
             ORDER BY a.started_at";
        let rows = self.db.query_map(stmt_sql, params![], |r| {
            Ok(RunningAttempt {
                task_id: r.get(0)?,
                title: r.get(1)?,
                state: parse_col::<TaskState>(r, 2)?,
                attempt: r.get(3)?,
                agent: r.get(4)?,
                identity: r.get(5)?,
                branch: r.get(6)?,
                started_at: time_col(r, 7)?,
                machine: r.get(8)?,
            })
        })?;
        Ok(rows)
    }

    /// `status TASK --json` (and `GET /api/v1/tasks/{id}`): the task in full with its
    /// transitions, attempts and landing, or `None` when there is no such task.
    pub fn task_detail_json(&self, id: &str) -> Result<Option<serde_json::Value>> {
        let Some(task) = self.get_task(id)? else {
            return Ok(None);
        };
        let links = self.generation_links(id)?;
        Ok(Some(serde_json::json!({
            "task": task,
            "transitions": self.transitions(id)?,
            "attempts": self.attempts(id)?,
            "landing": self.landing(id)?,
            "generation": crate::domain::generation::number(&task),
            "retry_of": links.retry_of,
            "retried_as": links.retried_as,
            "quota": self.quota_detail_json(id)?,
            // The pull request it opened and its follow-ups, or the PR a follow-up works on
            // (issue 15).
            "pull": self.pull(id)?,
            "followups": self.followups_of(id)?,
            // The same shape as in the task's summary: {task_id, number}.
            "followup_of": match self.followup(id)? {
                Some(f) => {
                    let number = self.pull(&f.pull_task_id)?.map(|p| p.number);
                    serde_json::json!({ "task_id": f.pull_task_id, "number": number })
                }
                None => serde_json::Value::Null,
            },
        })))
    }

    /// The highest attempt number of a task, if it has any.
    pub fn latest_attempt(&self, task_id: &str) -> Result<Option<u32>> {
        self.db.query_row(
            "SELECT MAX(attempt) FROM attempts WHERE task_id = ?1",
            params![task_id],
            |r| r.get(0),
        )
    }
}

/// Writes the stored summary of `task_id` (its [`TaskSummary`] as serde writes it, the
/// bytes `status --json` prints) from the rows as they are now. Every write that changes a
/// summary field (the task's own columns, its quota wait, its pull request or the one it
/// follows up) calls this in its own transaction, so a reader never sees a summary that
/// disagrees with the rows (issue 27: this replaced the triggers of schema 2-6).
///
/// A task is never deleted, and its summary is keyed by its rowid: with no task there is no
/// summary to write (or remove).
pub(super) fn refresh_summary(db: &Db, task_id: &str) -> Result<()> {
    static SELECT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!("SELECT {SUMMARY_COLS}, tasks.rowid FROM {SUMMARY_FROM} WHERE tasks.id = ?1")
    });
    match db.query_opt(&SELECT, params![task_id], summary_of_row)? {
        Some((seq, json)) => write_summary(db, seq, &json),
        None => Ok(()),
    }
}

/// [`refresh_summary`] of the task whose rowid is `seq` (a state change has it).
pub(super) fn refresh_summary_of(db: &Db, seq: i64) -> Result<()> {
    // Built once: this runs in every state change, claims included.
    static SELECT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!("SELECT {SUMMARY_COLS}, tasks.rowid FROM {SUMMARY_FROM} WHERE tasks.rowid = ?1")
    });
    match db.query_opt(&SELECT, params![seq], summary_of_row)? {
        Some((seq, json)) => write_summary(db, seq, &json),
        None => Ok(()),
    }
}

/// The rowid and stored JSON of the summary a [`summary_select`] row holds.
pub(super) fn summary_of_row(row: &Row<'_>) -> Result<(i64, String)> {
    Ok((
        row.get::<i64>(SEQ_COL)?,
        summary_json(&summary_from_row(row)?)?,
    ))
}

/// Stores one task's summary (its task's rowid `seq`, its JSON) in the task's row (schema
/// 13, PostgreSQL 6): the page a state change writes anyway, so a claim writes no other
/// table's (docs/benchmarks.md "Queue").
pub(super) fn write_summary(db: &Db, seq: i64, json: &str) -> Result<()> {
    db.execute(
        "UPDATE tasks SET summary = ?2 WHERE rowid = ?1",
        params![seq, json],
    )?;
    Ok(())
}

/// The summary of a task a claim moved to CLAIMED at `updated_at` (stored text), from its
/// summary stored before the claim (`old`, current: every write that changes a summary
/// field rewrites it in the same transaction). Of the fields a summary shows, a claim
/// changes the state, `updated_at` and `next_attempt_at` (cleared), and the quota wait
/// leaves with the FAILED state; the title, labels, counts, pull request, follow-up, agent
/// and cost cannot change in one. So those four are written as serde writes them and every
/// other field's bytes are kept as stored: the bytes [`summary_from_row`] and serde would
/// write after the claim, without the joins that rebuild them and without a second write
/// of the row (issue 27, docs/benchmarks.md "Queue"). `None` when `old` is not a summary of
/// today's shape (its top-level fields those of [`TaskSummary`], in its order); the caller
/// then rebuilds the summary from the rows.
pub(super) fn claimed_summary(old: &str, updated_at: &str) -> Option<String> {
    // The fields serde writes for a summary, in order, from a sample of it.
    static FIELDS: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
        let sample = TaskSummary {
            id: "",
            title: "",
            source_ref: "",
            state: TaskState::Claimed,
            task_type: TaskType::Bugfix,
            risk: Risk::Low,
            labels: Vec::new(),
            attempts: 0,
            failures: 0,
            created_at: "",
            updated_at: "",
            next_attempt_at: None,
            quota_wait: None,
            pull: None,
            followup_of: None,
            agent: None,
            cost_usd: None,
        };
        let json = serde_json::to_string(&sample).expect("a summary serialises");
        let fields: TopLevel<'_> = serde_json::from_str(&json).expect("a summary is an object");
        fields.0.iter().map(|(k, _)| k.to_string()).collect()
    });
    static CLAIMED: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        serde_json::to_string(&TaskState::Claimed).expect("a state serialises")
    });
    let fields: TopLevel<'_> = serde_json::from_str(old).ok()?;
    if fields.0.len() != FIELDS.len() || fields.0.iter().zip(FIELDS.iter()).any(|(f, k)| f.0 != k) {
        return None;
    }
    let updated_at = serde_json::to_string(updated_at).ok()?;
    let mut out = String::with_capacity(old.len() + 16);
    out.push('{');
    for (i, (key, raw)) in fields.0.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        // A key read borrowed has no escapes, so it is written back as it was.
        out.push('"');
        out.push_str(key);
        out.push_str("\":");
        out.push_str(match *key {
            "state" => CLAIMED.as_str(),
            "updated_at" => &updated_at,
            "next_attempt_at" | "quota_wait" => "null",
            _ => raw.get(),
        });
    }
    out.push('}');
    Some(out)
}

/// A JSON object's top-level fields in order, each value its text as stored (keys without
/// escapes only: a key that has one fails the read).
struct TopLevel<'a>(Vec<(&'a str, &'a serde_json::value::RawValue)>);

impl<'de> serde::Deserialize<'de> for TopLevel<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = TopLevel<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(20));
                while let Some(key) = map.next_key::<&'de str>()? {
                    fields.push((key, map.next_value()?));
                }
                Ok(TopLevel(fields))
            }
        }
        d.deserialize_map(Fields)
    }
}

/// Rewrites every stored summary (the migration to Rust-written summaries).
pub(super) fn rebuild_summaries(db: &Db) -> Result<()> {
    let mut rows = Vec::new();
    db.for_each(
        &format!("SELECT {SUMMARY_COLS}, tasks.rowid FROM {SUMMARY_FROM} ORDER BY tasks.rowid"),
        params![],
        |row| {
            let summary = summary_from_row(row)?;
            rows.push((row.get::<i64>(SEQ_COL)?, summary_json(&summary)?));
            Ok::<(), StoreError>(())
        },
    )?;
    for (seq, json) in rows {
        write_summary(db, seq, &json)?;
    }
    Ok(())
}

/// The stored text of a summary. Text, not a blob: `sqlite3` and readers see JSON.
fn summary_json(summary: &TaskSummary<'_>) -> Result<String> {
    super::to_json("task summary", summary)
}

fn summary_from_row<'r>(r: &Row<'r>) -> Result<TaskSummary<'r>> {
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
        pull: match opt_str_col(r, 16)? {
            Some(state) => Some(PullBrief {
                number: r.get::<i64>(15)? as u64,
                state,
                checks: opt_str_col(r, 17)?,
                review: opt_str_col(r, 18)?,
                mergeable: opt_str_col(r, 19)?,
                followups: r.get(20)?,
                watching: r.get::<i64>(21)? != 0,
            }),
            None => None,
        },
        followup_of: match opt_str_col(r, 22)? {
            Some(task_id) => Some(FollowUpOf {
                task_id,
                number: r.get::<i64>(23)? as u64,
            }),
            None => None,
        },
        agent: opt_str_col(r, 24)?,
        cost_usd: r.get(25)?,
    })
}
