//! The PostgreSQL backend of the store port (issue 27): the shared queue core
//! ([`QueueCore`]) of a fleet, several daemons on several machines on one server.
//!
//! Claims take the oldest claimable row with `FOR UPDATE SKIP LOCKED`, so concurrent
//! claimers neither wait on nor duplicate each other; a transition locks its task row
//! (`FOR UPDATE`) and writes the row, the transition and the summary in one transaction,
//! as SQLite does. Usage-limit rows are merged under a transaction-scoped advisory lock
//! per (identity, agent). Migrations ([`MIGRATIONS`]) are tracked in `polyphony_schema`
//! and applied under an advisory lock, so daemons starting together migrate once.
//! Timestamps are the same fixed-width RFC 3339 text as on SQLite (they sort as text).
//!
//! The client is the synchronous `postgres` crate; like a SQLite [`super::Store`], a
//! `PgStore` is one connection, used from a blocking thread (it runs its own runtime: do
//! not call it on an async worker thread).
//!
//! Must not: hold a password beyond connecting, or print one.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use chrono::{DateTime, Utc};
use postgres::{Client, GenericClient, NoTls, Row, Transaction};

use super::core::{Claim, Owner, QueueCore, Reconcilable};
use super::{ts, Result, StoreError};
use crate::domain::{self, AgentQuota, Task, TaskState};

/// Version `i + 1` is reached by running `MIGRATIONS[i]` (append-only, as on SQLite).
pub const MIGRATIONS: &[&str] = &[
    // 1: the queue core: tasks, transitions, summaries, owned claims, pins, usage limits.
    r#"
CREATE TABLE tasks (
    seq             BIGSERIAL PRIMARY KEY,
    id              TEXT NOT NULL UNIQUE,
    title           TEXT NOT NULL,
    body            TEXT NOT NULL,
    source          TEXT NOT NULL,
    source_ref      TEXT NOT NULL,
    repo            TEXT NOT NULL,
    base_ref        TEXT,
    state           TEXT NOT NULL,
    task_type       TEXT NOT NULL,
    scope           TEXT NOT NULL,
    risk            TEXT NOT NULL,
    context_tokens  BIGINT NOT NULL,
    requires_web    BOOLEAN NOT NULL,
    labels          TEXT NOT NULL,
    metadata        TEXT NOT NULL,
    attempts        BIGINT NOT NULL,
    failures        BIGINT NOT NULL,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    next_attempt_at TEXT
);
CREATE INDEX tasks_state ON tasks(state);
CREATE INDEX tasks_discovered ON tasks(seq) WHERE state = 'DISCOVERED';
CREATE INDEX tasks_retry ON tasks(next_attempt_at) WHERE state = 'FAILED' AND next_attempt_at IS NOT NULL;
CREATE TABLE transitions (
    id         BIGSERIAL PRIMARY KEY,
    task_id    TEXT NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    from_state TEXT NOT NULL,
    to_state   TEXT NOT NULL,
    reason     TEXT NOT NULL,
    at         TEXT NOT NULL
);
CREATE INDEX transitions_task ON transitions(task_id, id);
CREATE TABLE task_summaries (
    seq  BIGINT PRIMARY KEY,
    id   TEXT NOT NULL UNIQUE,
    json TEXT NOT NULL
);
CREATE TABLE claims (
    task_id     TEXT PRIMARY KEY REFERENCES tasks(id) ON DELETE CASCADE,
    machine     TEXT NOT NULL,
    owner       TEXT NOT NULL,
    lease_until TEXT NOT NULL
);
CREATE INDEX claims_owner ON claims(owner);
CREATE TABLE pins (
    task_id TEXT PRIMARY KEY REFERENCES tasks(id) ON DELETE CASCADE,
    machine TEXT NOT NULL
);
CREATE TABLE quota (
    identity  TEXT NOT NULL,
    agent     TEXT NOT NULL,
    resets_at TEXT NOT NULL,
    reported  BOOLEAN NOT NULL,
    message   TEXT NOT NULL,
    task_id   TEXT,
    attempt   BIGINT,
    hit_at    TEXT NOT NULL,
    PRIMARY KEY (identity, agent)
);
"#,
];

/// The advisory lock key under which migrations run (any fixed number; "poly" in ASCII).
const MIGRATION_LOCK: i64 = 0x706f_6c79;

const TASK_COLS: &str = "id, title, body, source, source_ref, repo, base_ref, state, task_type, \
     scope, risk, context_tokens, requires_web, labels, metadata, attempts, failures, \
     created_at, updated_at, next_attempt_at";

const ACTIVE: &str = "('CLAIMED','ROUTED','PROVISIONED','RUNNING','VERIFYING')";

/// A parsed PostgreSQL URL. The text with its password is kept only to connect.
pub(super) struct PgTarget {
    pub(super) config: postgres::Config,
    /// `postgresql://user@host:port/db`: what messages and `doctor` show.
    pub(super) shown: String,
}

/// One connection to a PostgreSQL store.
pub struct PgStore {
    client: Mutex<Client>,
    shown: String,
}

impl PgStore {
    /// Connects (the password from the URL, else `PGPASSWORD`) and migrates.
    pub(super) fn connect(target: &PgTarget) -> Result<PgStore> {
        let mut config = target.config.clone();
        if config.get_password().is_none() {
            if let Ok(password) = std::env::var("PGPASSWORD") {
                config.password(password);
            }
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(std::time::Duration::from_secs(10));
        }
        let client = config.connect(NoTls).map_err(|e| StoreError::Unreachable {
            shown: target.shown.clone(),
            detail: e.to_string(),
        })?;
        let store = PgStore {
            client: Mutex::new(client),
            shown: target.shown.clone(),
        };
        store.migrate()?;
        Ok(store)
    }

    /// `postgresql://user@host:port/db`, without password.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    fn client(&self) -> MutexGuard<'_, Client> {
        self.client
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The schema version of the server's store.
    pub fn schema_version(&self) -> Result<i64> {
        let mut client = self.client();
        let row = client.query_opt("SELECT version FROM polyphony_schema WHERE id = 1", &[])?;
        Ok(row.map_or(0, |r| r.get(0)))
    }

    /// The server's version (`server_version`) and whether it is one this store supports
    /// (PostgreSQL 12 or newer): what `doctor` reports.
    pub fn server_version(&self) -> Result<(String, bool)> {
        let mut client = self.client();
        let version: String = client.query_one("SHOW server_version", &[])?.get(0);
        let num: i32 = client
            .query_one("SELECT current_setting('server_version_num')::int", &[])?
            .get(0);
        Ok((version, num >= 120000))
    }

    fn migrate(&self) -> Result<()> {
        let latest = MIGRATIONS.len() as i64;
        let mut client = self.client();
        let mut tx = client.transaction()?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS polyphony_schema (id INT PRIMARY KEY, version BIGINT NOT NULL)",
        )?;
        let current: i64 = tx
            .query_opt("SELECT version FROM polyphony_schema WHERE id = 1", &[])?
            .map_or(0, |r| r.get(0));
        if current > latest {
            return Err(StoreError::SchemaTooNew {
                path: self.shown.clone().into(),
                found: current,
                supported: latest,
            });
        }
        for sql in MIGRATIONS.iter().skip(current as usize) {
            tx.batch_execute(sql)?;
        }
        if current < latest {
            tx.execute(
                "INSERT INTO polyphony_schema (id, version) VALUES (1, $1) \
                 ON CONFLICT (id) DO UPDATE SET version = excluded.version",
                &[&latest],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Removes every row (tests and benchmarks on a throwaway server only).
    pub fn wipe_for_tests(&self) -> Result<()> {
        self.client().batch_execute(
            "TRUNCATE tasks, transitions, task_summaries, claims, pins, quota RESTART IDENTITY CASCADE",
        )?;
        Ok(())
    }
}

fn task_from_row(r: &Row) -> Result<Task> {
    fn parse<T: std::str::FromStr>(r: &Row, idx: usize) -> Result<T>
    where
        T::Err: std::fmt::Display,
    {
        let text: String = r.get(idx);
        text.parse::<T>()
            .map_err(|e| StoreError::Corrupt(format!("column {idx}: `{text}`: {e}")))
    }
    let json = |idx: usize| -> Result<String> { Ok(r.get::<_, String>(idx)) };
    let labels = json(13)?;
    let metadata = json(14)?;
    Ok(Task {
        id: r.get(0),
        title: r.get(1),
        body: r.get(2),
        source: parse(r, 3)?,
        source_ref: r.get(4),
        repo: r.get(5),
        base_ref: r.get(6),
        state: parse(r, 7)?,
        task_type: parse(r, 8)?,
        scope: parse(r, 9)?,
        risk: parse(r, 10)?,
        context_tokens: r.get::<_, i64>(11) as u64,
        requires_web: r.get(12),
        labels: serde_json::from_str(&labels)
            .map_err(|e| StoreError::Corrupt(format!("labels JSON: {e}")))?,
        metadata: serde_json::from_str(&metadata)
            .map_err(|e| StoreError::Corrupt(format!("metadata JSON: {e}")))?,
        attempts: r.get::<_, i64>(15) as u32,
        failures: r.get::<_, i64>(16) as u32,
        created_at: time(&r.get::<_, String>(17))?,
        updated_at: time(&r.get::<_, String>(18))?,
        next_attempt_at: r
            .get::<_, Option<String>>(19)
            .map(|t| time(&t))
            .transpose()?,
    })
}

fn time(text: &str) -> Result<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| StoreError::Corrupt(format!("time `{text}`: {e}")))
}

fn get_task(c: &mut impl GenericClient, id: &str) -> Result<Option<Task>> {
    c.query_opt(
        &format!("SELECT {TASK_COLS} FROM tasks WHERE id = $1"),
        &[&id],
    )?
    .map(|r| task_from_row(&r))
    .transpose()
}

/// Rewrites the stored summary of `task_id` from its row (same transaction as the change).
fn refresh_summary(tx: &mut Transaction<'_>, task_id: &str) -> Result<()> {
    let Some(row) = tx.query_opt(
        &format!("SELECT {TASK_COLS}, seq FROM tasks WHERE id = $1"),
        &[&task_id],
    )?
    else {
        tx.execute("DELETE FROM task_summaries WHERE id = $1", &[&task_id])?;
        return Ok(());
    };
    let task = task_from_row(&row)?;
    let seq: i64 = row.get(20);
    let json = super::views::summary_of_task(&task)?;
    tx.execute(
        "INSERT INTO task_summaries (seq, id, json) VALUES ($1, $2, $3) \
         ON CONFLICT (seq) DO UPDATE SET id = excluded.id, json = excluded.json",
        &[&seq, &task_id, &json],
    )?;
    Ok(())
}

/// Moves a task locked by the caller, with its transition row, claim release and summary.
fn write_transition(
    tx: &mut Transaction<'_>,
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
    let at = ts(now);
    let changed = tx.execute(
        "UPDATE tasks SET state = $3, updated_at = $4 WHERE id = $1 AND state = $2",
        &[&task_id, &from.as_str(), &to.as_str(), &at],
    )?;
    if changed != 1 {
        return Err(StoreError::NotFound(task_id.to_string()));
    }
    tx.execute(
        "INSERT INTO transitions (task_id, from_state, to_state, reason, at) VALUES ($1, $2, $3, $4, $5)",
        &[&task_id, &from.as_str(), &to.as_str(), &reason, &at],
    )?;
    if from.is_active() && !to.is_active() {
        tx.execute("DELETE FROM claims WHERE task_id = $1", &[&task_id])?;
    }
    refresh_summary(tx, task_id)
}

fn locked_state(tx: &mut Transaction<'_>, task_id: &str) -> Result<TaskState> {
    let row = tx
        .query_opt(
            "SELECT state FROM tasks WHERE id = $1 FOR UPDATE",
            &[&task_id],
        )?
        .ok_or_else(|| StoreError::NotFound(task_id.to_string()))?;
    let text: String = row.get(0);
    text.parse()
        .map_err(|e| StoreError::Corrupt(format!("state `{text}`: {e}")))
}

fn write_claim(
    tx: &mut Transaction<'_>,
    task_id: &str,
    owner: &Owner,
    lease_until: DateTime<Utc>,
) -> Result<()> {
    tx.execute(
        "INSERT INTO claims (task_id, machine, owner, lease_until) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (task_id) DO UPDATE SET machine = excluded.machine, \
         owner = excluded.owner, lease_until = excluded.lease_until",
        &[&task_id, &owner.machine, &owner.key(), &ts(lease_until)],
    )?;
    Ok(())
}

fn claim_of(c: &mut impl GenericClient, task_id: &str) -> Result<Option<Claim>> {
    c.query_opt(
        "SELECT task_id, machine, owner, lease_until FROM claims WHERE task_id = $1",
        &[&task_id],
    )?
    .map(|r| {
        Ok(Claim {
            task_id: r.get(0),
            machine: r.get(1),
            owner: r.get(2),
            lease_until: time(&r.get::<_, String>(3))?,
        })
    })
    .transpose()
}

fn quota_from_row(r: &Row) -> Result<AgentQuota> {
    Ok(AgentQuota {
        identity: r.get(0),
        agent: r.get(1),
        resets_at: time(&r.get::<_, String>(2))?,
        reported: r.get(3),
        message: r.get(4),
        task_id: r.get(5),
        attempt: r.get::<_, Option<i64>>(6).map(|a| a as u32),
        hit_at: time(&r.get::<_, String>(7))?,
    })
}

const QUOTA_COLS: &str = "identity, agent, resets_at, reported, message, task_id, attempt, hit_at";

impl QueueCore for PgStore {
    fn backend(&self) -> &'static str {
        "postgresql"
    }

    fn insert_task(&self, task: &Task) -> Result<bool> {
        let labels = super::to_json("labels", &task.labels)?;
        let metadata = super::to_json("metadata", &task.metadata)?;
        let mut client = self.client();
        let mut tx = client.transaction()?;
        let inserted = tx.execute(
            &format!(
                "INSERT INTO tasks ({TASK_COLS}) VALUES \
                 ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20) \
                 ON CONFLICT (id) DO NOTHING"
            ),
            &[
                &task.id,
                &task.title,
                &task.body,
                &task.source.as_str(),
                &task.source_ref,
                &task.repo,
                &task.base_ref,
                &task.state.as_str(),
                &task.task_type.as_str(),
                &task.scope.as_str(),
                &task.risk.as_str(),
                &(task.context_tokens as i64),
                &task.requires_web,
                &labels,
                &metadata,
                &(task.attempts as i64),
                &(task.failures as i64),
                &ts(task.created_at),
                &ts(task.updated_at),
                &task.next_attempt_at.map(ts),
            ],
        )?;
        if inserted == 1 {
            refresh_summary(&mut tx, &task.id)?;
        }
        tx.commit()?;
        Ok(inserted == 1)
    }

    fn get_task(&self, id: &str) -> Result<Option<Task>> {
        get_task(&mut *self.client(), id)
    }

    fn pin_task(&self, task_id: &str, machine: &str) -> Result<()> {
        self.client().execute(
            "INSERT INTO pins (task_id, machine) VALUES ($1, $2) \
             ON CONFLICT (task_id) DO UPDATE SET machine = excluded.machine",
            &[&task_id, &machine],
        )?;
        Ok(())
    }

    fn claim_next_owned(
        &self,
        owner: &Owner,
        lease_until: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Option<Task>> {
        let mut client = self.client();
        let mut tx = client.transaction()?;
        let not_pinned_elsewhere = "NOT EXISTS (SELECT 1 FROM pins p \
             WHERE p.task_id = t.id AND p.machine <> $1)";
        // Two probes keep each one on its partial index; the older candidate wins. Rows
        // another claimer holds are skipped, not waited for.
        let discovered = tx.query_opt(
            &format!(
                "SELECT seq, id, state FROM tasks t WHERE state = 'DISCOVERED' \
                 AND {not_pinned_elsewhere} ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED"
            ),
            &[&owner.machine],
        )?;
        let retry = tx.query_opt(
            &format!(
                "SELECT seq, id, state FROM tasks t WHERE state = 'FAILED' \
                 AND next_attempt_at IS NOT NULL AND next_attempt_at <= $2 \
                 AND {not_pinned_elsewhere} ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED"
            ),
            &[&owner.machine, &ts(now)],
        )?;
        let pick = match (discovered, retry) {
            (Some(d), Some(r)) => Some(if d.get::<_, i64>(0) <= r.get::<_, i64>(0) {
                d
            } else {
                r
            }),
            (d, r) => d.or(r),
        };
        let Some(row) = pick else {
            return Ok(None);
        };
        let id: String = row.get(1);
        let from: TaskState = row
            .get::<_, String>(2)
            .parse()
            .map_err(|e| StoreError::Corrupt(format!("state: {e}")))?;
        let reason = if from == TaskState::Failed {
            "claimed for retry"
        } else {
            "claimed"
        };
        tx.execute(
            "UPDATE tasks SET next_attempt_at = NULL WHERE id = $1",
            &[&id],
        )?;
        write_transition(&mut tx, &id, from, TaskState::Claimed, reason, now)?;
        write_claim(&mut tx, &id, owner, lease_until)?;
        let task = get_task(&mut tx, &id)?.ok_or_else(|| StoreError::NotFound(id.clone()))?;
        tx.commit()?;
        Ok(Some(task))
    }

    fn transition(
        &self,
        task_id: &str,
        expected_from: TaskState,
        to: TaskState,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<Task> {
        domain::transition(expected_from, to).map_err(|source| StoreError::InvalidTransition {
            task_id: task_id.to_string(),
            source,
        })?;
        let mut client = self.client();
        let mut tx = client.transaction()?;
        let actual = locked_state(&mut tx, task_id)?;
        if actual != expected_from {
            return Err(StoreError::StaleState {
                task_id: task_id.to_string(),
                expected: expected_from,
                actual,
            });
        }
        write_transition(&mut tx, task_id, actual, to, reason, now)?;
        let task =
            get_task(&mut tx, task_id)?.ok_or_else(|| StoreError::NotFound(task_id.into()))?;
        tx.commit()?;
        Ok(task)
    }

    fn renew_leases(&self, owner: &Owner, until: DateTime<Utc>) -> Result<u64> {
        Ok(self.client().execute(
            "UPDATE claims SET lease_until = $2 WHERE owner = $1",
            &[&owner.key(), &ts(until)],
        )?)
    }

    fn claim_of(&self, task_id: &str) -> Result<Option<Claim>> {
        claim_of(&mut *self.client(), task_id)
    }

    fn reconcilable(&self, owner: &Owner, now: DateTime<Utc>) -> Result<Vec<Reconcilable>> {
        let mut client = self.client();
        let rows = client.query(
            &format!(
                "SELECT t.id FROM tasks t LEFT JOIN claims c ON c.task_id = t.id \
                 WHERE t.state IN {ACTIVE} \
                 AND (c.task_id IS NULL OR c.machine = $1 OR c.lease_until < $2) ORDER BY t.seq"
            ),
            &[&owner.machine, &ts(now)],
        )?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let id: String = row.get(0);
            let Some(task) = get_task(&mut *client, &id)? else {
                continue;
            };
            let claim = claim_of(&mut *client, &id)?;
            let expired = claim
                .as_ref()
                .is_some_and(|c| c.machine != owner.machine && c.lease_until < now);
            out.push(Reconcilable {
                task,
                claim,
                expired,
            });
        }
        Ok(out)
    }

    fn take_over(
        &self,
        task_id: &str,
        owner: &Owner,
        lease_until: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let mut client = self.client();
        let mut tx = client.transaction()?;
        // The task row's lock serialises two daemons taking the same expired claim.
        let state = locked_state(&mut tx, task_id)?;
        if !state.is_active() {
            return Ok(false);
        }
        let taken = match claim_of(&mut tx, task_id)? {
            Some(c) if c.machine != owner.machine && c.lease_until >= now => false,
            _ => {
                write_claim(&mut tx, task_id, owner, lease_until)?;
                true
            }
        };
        tx.commit()?;
        Ok(taken)
    }

    fn count_by_state(&self) -> Result<BTreeMap<TaskState, u64>> {
        let rows = self
            .client()
            .query("SELECT state, COUNT(*) FROM tasks GROUP BY state", &[])?;
        let mut counts = BTreeMap::new();
        for row in rows {
            let text: String = row.get(0);
            let state: TaskState = text
                .parse()
                .map_err(|e| StoreError::Corrupt(format!("state `{text}`: {e}")))?;
            counts.insert(state, row.get::<_, i64>(1) as u64);
        }
        Ok(counts)
    }

    fn summary_json(&self, task_id: &str) -> Result<Option<String>> {
        Ok(self
            .client()
            .query_opt("SELECT json FROM task_summaries WHERE id = $1", &[&task_id])?
            .map(|r| r.get(0)))
    }

    fn update_quota(
        &self,
        identity: &str,
        agent: &str,
        merge: &mut dyn FnMut(Option<AgentQuota>) -> AgentQuota,
    ) -> Result<AgentQuota> {
        let mut client = self.client();
        let mut tx = client.transaction()?;
        // A row that does not exist yet cannot be locked: lock the pair instead.
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 27))",
            &[&format!("quota/{identity}/{agent}")],
        )?;
        let stored = tx
            .query_opt(
                &format!("SELECT {QUOTA_COLS} FROM quota WHERE identity = $1 AND agent = $2"),
                &[&identity, &agent],
            )?
            .map(|r| quota_from_row(&r))
            .transpose()?;
        let row = merge(stored);
        tx.execute(
            &format!(
                "INSERT INTO quota ({QUOTA_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                 ON CONFLICT (identity, agent) DO UPDATE SET resets_at = excluded.resets_at, \
                 reported = excluded.reported, message = excluded.message, \
                 task_id = excluded.task_id, attempt = excluded.attempt, hit_at = excluded.hit_at"
            ),
            &[
                &row.identity,
                &row.agent,
                &ts(row.resets_at),
                &row.reported,
                &row.message,
                &row.task_id,
                &row.attempt.map(i64::from),
                &ts(row.hit_at),
            ],
        )?;
        tx.commit()?;
        Ok(row)
    }

    fn quota_rows(&self) -> Result<Vec<AgentQuota>> {
        self.client()
            .query(
                &format!("SELECT {QUOTA_COLS} FROM quota ORDER BY identity, agent"),
                &[],
            )?
            .iter()
            .map(quota_from_row)
            .collect()
    }
}
