//! Owned claims, leases and pins (issue 27; `core` says the rules). Since schema 11 the
//! claim (machine, owner, lease) and the pin are columns of the task's row, so a claim
//! writes no other table's pages (docs/benchmarks.md "Queue"). The same code runs on both
//! backends (`sql`).
//!
//! Lease times are the store's clock ([`lease_clock`]): on PostgreSQL the server's
//! `clock_timestamp()`, so daemons whose clocks disagree still agree on every lease (a
//! lease is written as the server's time plus its length, and compared with the server's
//! time); on SQLite, one machine and one clock, the caller's `now`.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::core::{Claim, Owner, Reconcilable};
use super::sql::{params, Db, Dialect};
use super::tasks::{claim_next_postgres, claim_transition};
use super::{get_task, parse_col, time_col, ts, Result, Store, StoreError};

impl Store {
    /// See [`super::QueueCore::pin_task`].
    pub fn pin_task(&self, task_id: &str, machine: &str) -> Result<()> {
        self.atomic(|conn| {
            let changed = conn.execute(
                "UPDATE tasks SET pinned_to = ?2 WHERE id = ?1",
                params![task_id, machine],
            )?;
            if changed == 0 {
                return Err(StoreError::NotFound(task_id.to_string()));
            }
            Ok(())
        })
    }

    /// Inserts a task and, when `pin` names a machine, pins it there in the same
    /// transaction (a local-path task is never claimable elsewhere, not even for a moment).
    pub fn insert_task_pinned(&self, task: &Task, pin: Option<&str>) -> Result<bool> {
        self.immediate(|_| {
            let inserted = self.insert_task(task)?;
            if let (true, Some(machine)) = (inserted, pin) {
                self.pin_task(&task.id, machine)?;
            }
            Ok(inserted)
        })
    }

    /// See [`super::QueueCore::claim_next_owned`]. On SQLite `BEGIN IMMEDIATE` makes it
    /// exclusive: one statement picks the older candidate (and reads its summary), then one
    /// changes its state and writes its owner, lease and claimed summary. On PostgreSQL one statement does it all under row locks
    /// (`tasks::claim_next_postgres`), claimers side by side.
    pub fn claim_next_owned(
        &self,
        owner: &Owner,
        lease: Duration,
        now: DateTime<Utc>,
    ) -> Result<Option<Task>> {
        if self.db.dialect() == Dialect::Postgres {
            return self.transaction(Db::begin_claim, |tx| {
                claim_next_postgres(tx, owner, lease, now)
            });
        }
        let lease_until = now + span(lease);
        self.immediate(|tx| {
            // Two probes keep each one on an index; the older candidate wins, chosen here
            // rather than by an outer `ORDER BY` (a sorter per claim).
            static PICK: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
                let not_pinned_elsewhere = "(pinned_to IS NULL OR pinned_to = ?1)";
                format!(
                    "SELECT * FROM (SELECT rowid, id, state, summary FROM tasks \
                       WHERE state = 'DISCOVERED' AND {not_pinned_elsewhere} \
                       ORDER BY rowid LIMIT 1) \
                     UNION ALL \
                     SELECT * FROM (SELECT rowid, id, state, summary FROM tasks \
                       WHERE state = 'FAILED' AND next_attempt_at IS NOT NULL \
                       AND next_attempt_at <= ?2 AND {not_pinned_elsewhere} \
                       ORDER BY rowid LIMIT 1)"
                )
            });
            let candidates = tx.query_map(&PICK, params![owner.machine, ts(now)], |r| {
                Ok((
                    r.get::<i64>(0)?,
                    r.get::<String>(1)?,
                    parse_col::<TaskState>(r, 2)?,
                    r.get::<Option<String>>(3)?,
                ))
            })?;
            let Some((seq, id, from, summary)) = candidates.into_iter().min_by_key(|c| c.0) else {
                return Ok(None);
            };
            let owner = Some((owner, lease_until));
            claim_transition(tx, seq, &id, from, summary.as_deref(), owner, now).map(Some)
        })
    }

    /// See [`super::QueueCore::renew_leases`].
    pub fn renew_leases(&self, owner: &Owner, lease: Duration, now: DateTime<Utc>) -> Result<u64> {
        self.atomic(|conn| {
            let until = lease_clock(conn, now)? + span(lease);
            // Through the state index: only active tasks hold a claim.
            Ok(conn.execute(
                &format!(
                    "UPDATE tasks SET lease_until = ?2 WHERE state IN ({ACTIVE}) AND owner = ?1"
                ),
                params![owner.key(), ts(until)],
            )? as u64)
        })
    }

    /// See [`super::QueueCore::lease_clock`].
    pub fn lease_clock(&self, now: DateTime<Utc>) -> Result<DateTime<Utc>> {
        lease_clock(&self.db, now)
    }

    pub fn claim_of(&self, task_id: &str) -> Result<Option<Claim>> {
        claim_of(&self.db, task_id)
    }

    /// See [`super::QueueCore::reconcilable`].
    pub fn reconcilable(&self, owner: &Owner, now: DateTime<Utc>) -> Result<Vec<Reconcilable>> {
        let now = lease_clock(&self.db, now)?;
        let ids: Vec<String> = self.db.query_map(
            &format!(
                "SELECT id FROM tasks WHERE state IN ({ACTIVE}) \
                 AND (owner IS NULL OR machine = ?1 OR lease_until < ?2) \
                 AND (pinned_to IS NULL OR pinned_to = ?1) ORDER BY rowid"
            ),
            params![owner.machine, ts(now)],
            |r| r.get(0),
        )?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let Some(task) = get_task(&self.db, &id)? else {
                continue;
            };
            let claim = claim_of(&self.db, &id)?;
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

    /// See [`super::QueueCore::take_over`].
    pub fn take_over(
        &self,
        task_id: &str,
        owner: &Owner,
        lease: Duration,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        self.immediate(|tx| {
            let state = super::current_state(tx, task_id)?;
            if !state.is_active() {
                return Ok(false);
            }
            // Read under the write lock: no other writer moves the claim or the decision.
            // A task pinned to another machine is that machine's alone, lease or not: no
            // other machine has its local-path repository.
            if pinned_elsewhere(tx, task_id, &owner.machine)? {
                return Ok(false);
            }
            let now = lease_clock(tx, now)?;
            match claim_of(tx, task_id)? {
                Some(c) if c.machine != owner.machine && c.lease_until >= now => Ok(false),
                _ => {
                    write_claim(tx, task_id, owner, now + span(lease))?;
                    Ok(true)
                }
            }
        })
    }
}

use crate::domain::{Task, TaskState};

/// The active states, quoted for `IN (…)`: the tasks that may hold a claim.
const ACTIVE: &str = "'CLAIMED', 'ROUTED', 'PROVISIONED', 'RUNNING', 'VERIFYING'";

/// A lease's length as a chrono span (`store.lease` is bounded to an hour by the config).
pub(super) fn span(lease: Duration) -> chrono::Duration {
    chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::days(1))
}

/// The time leases are judged by: the server's on PostgreSQL (every daemon of a fleet
/// reads the same clock), `now` (the caller's) on SQLite.
pub(super) fn lease_clock(conn: &Db, now: DateTime<Utc>) -> Result<DateTime<Utc>> {
    match conn.dialect() {
        Dialect::Sqlite => Ok(now),
        Dialect::Postgres => {
            static NOW: std::sync::LazyLock<String> =
                std::sync::LazyLock::new(|| format!("SELECT {}", super::rows::PG_CLOCK));
            conn.query_row(&NOW, params![], |r| time_col(r, 0))
        }
    }
}

fn write_claim(conn: &Db, task_id: &str, owner: &Owner, lease_until: DateTime<Utc>) -> Result<()> {
    conn.execute(
        "UPDATE tasks SET machine = ?2, owner = ?3, lease_until = ?4 WHERE id = ?1",
        params![task_id, owner.machine, owner.key(), ts(lease_until)],
    )?;
    Ok(())
}

/// Whether `task_id` is pinned to a machine other than `machine`.
fn pinned_elsewhere(conn: &Db, task_id: &str, machine: &str) -> Result<bool> {
    let pin: Option<Option<String>> = conn.query_opt(
        "SELECT pinned_to FROM tasks WHERE id = ?1",
        params![task_id],
        |r| r.get(0),
    )?;
    Ok(pin.flatten().is_some_and(|m| m != machine))
}

fn claim_of(conn: &Db, task_id: &str) -> Result<Option<Claim>> {
    conn.query_opt(
        "SELECT id, machine, owner, lease_until FROM tasks WHERE id = ?1 AND owner IS NOT NULL",
        params![task_id],
        |r| {
            Ok(Claim {
                task_id: r.get(0)?,
                machine: r.get(1)?,
                owner: r.get(2)?,
                lease_until: time_col(r, 3)?,
            })
        },
    )
}
