//! Attempts: the start of one (its immutable RunSpec), how it ended, and what attempts
//! cost per identity (the daily ceiling).

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::sql::{params, Row, Value};
use super::{
    conversion, current_state, json_col, opt_time_col, time_col, to_json, ts, Result, Store,
    StoreError,
};
use crate::domain::{AttemptStatus, CheckEvidence, RunResult, RunSpec, TokenUsage};

const ATTEMPT_COLS: &str = "task_id, attempt, agent, identity, run_spec, container_id, workspace, \
     branch, status, turns, tokens_in, tokens_out, tokens_cached, cost_usd, exit_code, \
     duration_seconds, final_message, reason, evidence, commit_sha, pr_url, started_at, finished_at";

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

/// An identity's daily cost ceiling, checked where an attempt starts (issue 27): the spend
/// of today's finished attempts plus the reservation of each attempt of the identity still
/// running anywhere in the store (any daemon of a fleet) must stay under `ceiling_usd`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DailyLimit {
    pub ceiling_usd: f64,
    /// The start of the ceiling's day (00:00 UTC).
    pub since: DateTime<Utc>,
}

/// Why an attempt was not started under its identity's [`DailyLimit`].
#[derive(Debug, Clone, PartialEq)]
pub struct SpendHeld {
    /// Today's finished attempts' cost.
    pub spent_usd: f64,
    /// Attempts of the identity running now (their reservations held the start).
    pub running: u32,
    pub reserved_usd: f64,
}

impl Store {
    /// Records the start of attempt `spec.attempt` with its immutable RunSpec and bumps the
    /// task's attempt count. `AttemptExists` if that attempt was already started. No
    /// reservation is recorded: a ceiling check counts the attempt, while it runs, at the
    /// checking daemon's cap.
    pub fn start_attempt(&self, spec: &RunSpec, now: DateTime<Utc>) -> Result<()> {
        self.start_attempt_reserving(spec, now, None, None)
            .map(|_| ())
    }

    /// [`Store::start_attempt`] under the identity's daily ceiling, checked in the same
    /// writing transaction as the insert (the store's one write lock, on SQLite and across
    /// a fleet on PostgreSQL), so two daemons never both start on the same remainder.
    ///
    /// `reserve_usd` is what this attempt may cost (the starting daemon's
    /// `max_cost_usd_per_attempt`, which its reported cost is clamped to), recorded with the
    /// attempt: while it runs, every daemon's check counts it at that reservation, not at
    /// the checker's own cap, so daemons with different configs share one ceiling (issue
    /// 27). An attempt with none recorded (started before schema 10, or by
    /// [`Store::start_attempt`]) counts at `reserve_usd`. `Some(held)` and nothing written
    /// when the spend and the reservations reach the ceiling.
    pub fn start_attempt_within(
        &self,
        spec: &RunSpec,
        now: DateTime<Utc>,
        reserve_usd: f64,
        limit: Option<DailyLimit>,
    ) -> Result<Option<SpendHeld>> {
        self.start_attempt_reserving(spec, now, Some(reserve_usd), limit)
    }

    fn start_attempt_reserving(
        &self,
        spec: &RunSpec,
        now: DateTime<Utc>,
        reserve_usd: Option<f64>,
        limit: Option<DailyLimit>,
    ) -> Result<Option<SpendHeld>> {
        let json = to_json("run spec", spec)?;
        self.immediate(|tx| {
            current_state(tx, &spec.task_id)?;
            if let Some(limit) = limit {
                let spent: f64 = tx.query_row(
                    "SELECT COALESCE(SUM(cost_usd), 0.0) FROM attempts WHERE identity = ?1 AND started_at >= ?2",
                    params![spec.identity, ts(limit.since)],
                    |r| r.get(0),
                )?;
                // Running: not ended, of a task still in an active state (a row a crash
                // left open on a task that moved on is not spending).
                let (running, reserved): (i64, f64) = tx.query_row(
                    "SELECT COUNT(*), COALESCE(SUM(COALESCE(a.reserve_usd, ?4)), 0.0) \
                     FROM attempts a JOIN tasks t ON t.id = a.task_id \
                     WHERE a.identity = ?1 AND a.started_at >= ?2 AND a.status IS NULL \
                     AND a.task_id <> ?3 \
                     AND t.state IN ('CLAIMED','ROUTED','PROVISIONED','RUNNING','VERIFYING')",
                    params![
                        spec.identity,
                        ts(limit.since),
                        spec.task_id,
                        reserve_usd.unwrap_or(0.0)
                    ],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )?;
                let running = running.max(0) as u32;
                // `identity_policy::over_ceiling`'s rule: reaching the ceiling holds.
                if spent + reserved >= limit.ceiling_usd {
                    return Ok(Some(SpendHeld {
                        spent_usd: spent,
                        running,
                        reserved_usd: reserved,
                    }));
                }
            }
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
                "INSERT INTO attempts (task_id, attempt, agent, identity, run_spec, workspace, branch, started_at, reserve_usd) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![
                    spec.task_id,
                    spec.attempt,
                    spec.agent,
                    spec.identity,
                    json,
                    spec.workspace.to_string_lossy(),
                    spec.branch,
                    ts(now),
                    reserve_usd
                ],
            )?;
            tx.execute(
                "UPDATE tasks SET attempts = CASE WHEN attempts > ?2 THEN attempts ELSE ?2 END, updated_at = ?3 WHERE id = ?1",
                params![spec.task_id, spec.attempt, ts(now)],
            )?;
            super::refresh_summary(tx, &spec.task_id)?;
            Ok(None)
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
        let identity: Option<String> = self.db.query_opt(
            "SELECT identity FROM attempts WHERE task_id = ?1 AND attempt = ?2",
            params![result.task_id, result.attempt],
            |r| r.get(0),
        )?;
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

    /// Runs one UPDATE of an attempt and rewrites its task's summary (which shows the
    /// attempts' agent and cost) in the same transaction.
    fn update_attempt(
        &self,
        task_id: &str,
        attempt: u32,
        sql: &str,
        params: &[Value<'_>],
    ) -> Result<()> {
        self.atomic(|conn| {
            let changed = conn.execute(sql, params)?;
            if changed == 0 {
                return Err(StoreError::AttemptNotFound {
                    task_id: task_id.to_string(),
                    attempt,
                });
            }
            super::refresh_summary(conn, task_id)
        })
    }

    /// All attempts of a task, first to last.
    pub fn attempts(&self, task_id: &str) -> Result<Vec<AttemptRecord>> {
        self.db.query_map(
            &format!("SELECT {ATTEMPT_COLS} FROM attempts WHERE task_id = ?1 ORDER BY attempt"),
            params![task_id],
            attempt_from_row,
        )
    }

    pub fn attempt(&self, task_id: &str, attempt: u32) -> Result<Option<AttemptRecord>> {
        self.db.query_opt(
            &format!("SELECT {ATTEMPT_COLS} FROM attempts WHERE task_id = ?1 AND attempt = ?2"),
            params![task_id, attempt],
            attempt_from_row,
        )
    }

    /// Every attempt started at or after `since`, oldest first (the console's pictures).
    pub fn attempts_since(&self, since: DateTime<Utc>) -> Result<Vec<AttemptRecord>> {
        self.db.query_map(
            &format!(
                "SELECT {ATTEMPT_COLS} FROM attempts WHERE started_at >= ?1 ORDER BY started_at"
            ),
            params![ts(since)],
            attempt_from_row,
        )
    }

    /// Dollars spent by attempts of `identity` started at or after `since` (the daily
    /// cost ceiling of spec §3.2).
    pub fn cost_spent_since(&self, identity: &str, since: DateTime<Utc>) -> Result<f64> {
        self.db.query_row(
            "SELECT COALESCE(SUM(cost_usd), 0.0) FROM attempts WHERE identity = ?1 AND started_at >= ?2",
            params![identity, ts(since)],
            |r| r.get(0),
        )
    }

    /// The costliest attempt of `identity` since `since`: (task id, attempt, cost), so a
    /// held identity can say which attempt's figure holds it.
    pub fn largest_cost_since(
        &self,
        identity: &str,
        since: DateTime<Utc>,
    ) -> Result<Option<(String, u32, f64)>> {
        self.db.query_opt(
            "SELECT task_id, attempt, cost_usd FROM attempts \
             WHERE identity = ?1 AND started_at >= ?2 AND cost_usd IS NOT NULL \
             ORDER BY cost_usd DESC LIMIT 1",
            params![identity, ts(since)],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
    }
}

pub(super) fn attempt_from_row(r: &Row<'_>) -> Result<AttemptRecord> {
    let status: Option<String> = r.get(8)?;
    let status = status
        .map(|s| s.parse::<AttemptStatus>().map_err(|e| conversion(8, e)))
        .transpose()?;
    let tokens = match (
        r.get::<Option<i64>>(10)?,
        r.get::<Option<i64>>(11)?,
        r.get::<Option<i64>>(12)?,
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
        workspace: PathBuf::from(r.get::<String>(6)?),
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
