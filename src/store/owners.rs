//! Owned claims, leases and pins on SQLite (issue 27, schema 8; `core` says the rules).
//! The PostgreSQL backend implements the same in `pg`.

use chrono::{DateTime, Utc};
use rusqlite::{params, Connection, OptionalExtension};

use super::core::{Claim, Owner, Reconcilable};
use super::{claims::claim_in, get_task, time_col, ts, Result, Store};

impl Store {
    /// See [`super::QueueCore::pin_task`].
    pub fn pin_task(&self, task_id: &str, machine: &str) -> Result<()> {
        self.atomic(|conn| {
            conn.prepare_cached(
                "INSERT INTO pins (task_id, machine) VALUES (?1, ?2) \
                 ON CONFLICT (task_id) DO UPDATE SET machine = excluded.machine",
            )?
            .execute(params![task_id, machine])?;
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

    /// See [`super::QueueCore::claim_next_owned`]: `BEGIN IMMEDIATE` makes it exclusive.
    pub fn claim_next_owned(
        &self,
        owner: &Owner,
        lease_until: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Option<Task>> {
        self.immediate(|tx| {
            let not_pinned_elsewhere = "NOT EXISTS (SELECT 1 FROM pins \
                 WHERE pins.task_id = tasks.id AND pins.machine <> ?1)";
            let discovered: Option<(i64, String)> = tx
                .prepare_cached(&format!(
                    "SELECT rowid, id FROM tasks WHERE state = 'DISCOVERED' \
                     AND {not_pinned_elsewhere} ORDER BY rowid LIMIT 1"
                ))?
                .query_row([&owner.machine], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            let retry: Option<(i64, String)> = tx
                .prepare_cached(&format!(
                    "SELECT rowid, id FROM tasks WHERE state = 'FAILED' \
                     AND next_attempt_at IS NOT NULL AND next_attempt_at <= ?2 \
                     AND {not_pinned_elsewhere} ORDER BY rowid LIMIT 1"
                ))?
                .query_row(params![owner.machine, ts(now)], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .optional()?;
            let pick = match (discovered, retry) {
                (Some(d), Some(r)) => Some(if d.0 <= r.0 { d } else { r }),
                (d, r) => d.or(r),
            };
            let Some((_, id)) = pick else {
                return Ok(None);
            };
            let task = claim_in(tx, &id, now)?;
            write_claim(tx, &id, owner, lease_until)?;
            Ok(Some(task))
        })
    }

    /// See [`super::QueueCore::renew_leases`].
    pub fn renew_leases(&self, owner: &Owner, until: DateTime<Utc>) -> Result<u64> {
        self.atomic(|conn| {
            Ok(conn
                .prepare_cached("UPDATE claims SET lease_until = ?2 WHERE owner = ?1")?
                .execute(params![owner.key(), ts(until)])? as u64)
        })
    }

    pub fn claim_of(&self, task_id: &str) -> Result<Option<Claim>> {
        claim_of(&self.conn, task_id)
    }

    /// See [`super::QueueCore::reconcilable`].
    pub fn reconcilable(&self, owner: &Owner, now: DateTime<Utc>) -> Result<Vec<Reconcilable>> {
        let ids: Vec<String> = {
            let mut stmt = self.conn.prepare_cached(
                "SELECT tasks.id FROM tasks LEFT JOIN claims c ON c.task_id = tasks.id \
                 WHERE tasks.state IN ('CLAIMED','ROUTED','PROVISIONED','RUNNING','VERIFYING') \
                 AND (c.task_id IS NULL OR c.machine = ?1 OR c.lease_until < ?2) \
                 ORDER BY tasks.rowid",
            )?;
            let rows = stmt.query_map(params![owner.machine, ts(now)], |r| r.get(0))?;
            rows.collect::<Result<_, _>>()?
        };
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let Some(task) = get_task(&self.conn, &id)? else {
                continue;
            };
            let claim = claim_of(&self.conn, &id)?;
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
        lease_until: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        self.immediate(|tx| {
            let state = super::current_state(tx, task_id)?;
            if !state.is_active() {
                return Ok(false);
            }
            match claim_of(tx, task_id)? {
                Some(c) if c.machine != owner.machine && c.lease_until >= now => Ok(false),
                _ => {
                    write_claim(tx, task_id, owner, lease_until)?;
                    Ok(true)
                }
            }
        })
    }
}

use crate::domain::Task;

fn write_claim(
    conn: &Connection,
    task_id: &str,
    owner: &Owner,
    lease_until: DateTime<Utc>,
) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO claims (task_id, machine, owner, lease_until) VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT (task_id) DO UPDATE SET machine = excluded.machine, \
         owner = excluded.owner, lease_until = excluded.lease_until",
    )?
    .execute(params![
        task_id,
        owner.machine,
        owner.key(),
        ts(lease_until)
    ])?;
    Ok(())
}

fn claim_of(conn: &Connection, task_id: &str) -> Result<Option<Claim>> {
    Ok(conn
        .prepare_cached(
            "SELECT task_id, machine, owner, lease_until FROM claims WHERE task_id = ?1",
        )?
        .query_row([task_id], |r| {
            Ok(Claim {
                task_id: r.get(0)?,
                machine: r.get(1)?,
                owner: r.get(2)?,
                lease_until: time_col(r, 3)?,
            })
        })
        .optional()?)
}
