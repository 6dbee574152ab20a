//! A small key-value table for state that has no typed home yet.

use super::sql::params;
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::sql::Dialect;
use super::{ts, Result, Store};

/// The kv key of a shared store's fleet claimant ([`Store::fleet_claimant`]).
const FLEET_CLAIMANT: &str = "fleet:claimant";

impl Store {
    pub fn kv_get(&self, key: &str) -> Result<Option<String>> {
        self.db
            .query_opt("SELECT value FROM kv WHERE key = ?1", params![key], |r| {
                r.get(0)
            })
    }

    pub fn kv_set(&self, key: &str, value: &str, now: DateTime<Utc>) -> Result<()> {
        self.db.execute(
            "INSERT INTO kv (key, value, updated_at) VALUES (?1, ?2, ?3) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
            params![key, value, ts(now)],
        )?;
        Ok(())
    }

    pub fn kv_delete(&self, key: &str) -> Result<()> {
        self.db
            .execute("DELETE FROM kv WHERE key = ?1", params![key])?;
        Ok(())
    }

    /// Who holds a task in the eyes of a source (the GitHub claim comment's `by=`), when
    /// the queue is a fleet's (issue 27): on PostgreSQL one id per database, `candidate`
    /// of whichever daemon asks first, read by every other, so a task one daemon claimed
    /// and another took over is still the fleet's own claim. `None` on SQLite: the queue is
    /// one home's, and the home is the claimant.
    pub fn fleet_claimant(&self, candidate: &str, now: DateTime<Utc>) -> Result<Option<String>> {
        if matches!(self.db.dialect(), Dialect::Sqlite) {
            return Ok(None);
        }
        self.db.execute(
            "INSERT INTO kv (key, value, updated_at) VALUES (?1, ?2, ?3) ON CONFLICT (key) DO NOTHING",
            params![FLEET_CLAIMANT, candidate, ts(now)],
        )?;
        self.kv_get(FLEET_CLAIMANT)
    }
}

/// The kv keys of machines' heartbeats: `fleet.alive.MACHINE` = alive until (a
/// timestamp); `ALIVE_END` bounds the range (`/` follows `.`).
const ALIVE_PREFIX: &str = "fleet.alive.";
const ALIVE_END: &str = "fleet.alive/";

fn alive_key(machine: &str) -> String {
    format!("{ALIVE_PREFIX}{machine}")
}

/// The kv key of a machine's agent slots.
fn slots_key(machine: &str) -> String {
    format!("fleet.slots.{machine}")
}

impl Store {
    /// Records how many agent slots (`max_concurrent_agents`) the daemon of `machine` runs,
    /// for the console's per-machine slots (issue 29); each daemon writes it at start.
    pub fn set_machine_slots(&self, machine: &str, slots: u32, now: DateTime<Utc>) -> Result<()> {
        self.kv_set(&slots_key(machine), &slots.to_string(), now)
    }

    /// Records that `machine`'s daemon is alive for `lease` from the store's clock (its
    /// lease: a heartbeat renews it; `lease_clock`), for the console's Now panel, which
    /// shows every live machine of a fleet, idle ones too (issue 27).
    pub fn set_machine_alive(
        &self,
        machine: &str,
        lease: std::time::Duration,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let until = self.lease_clock(now)? + super::owners::span(lease);
        self.kv_set(&alive_key(machine), &ts(until), now)
    }

    /// Drops `machine`'s alive record: its daemon stopped cleanly, so the Now panel stops
    /// listing it at once rather than when its lease would have ended.
    pub fn clear_machine_alive(&self, machine: &str) -> Result<()> {
        self.kv_delete(&alive_key(machine))
    }

    /// The machines whose daemons' heartbeats still run now (recorded alive past the
    /// store's clock, `lease_clock`), each with the agent slots it recorded (0 when none),
    /// by name.
    pub fn live_machines(&self, now: DateTime<Utc>) -> Result<BTreeMap<String, u32>> {
        let now = self.lease_clock(now)?;
        let rows = self.db.query_map(
            "SELECT key, value FROM kv WHERE key >= ?1 AND key < ?2",
            params![ALIVE_PREFIX, ALIVE_END],
            |r| Ok((r.get::<String>(0)?, r.get::<String>(1)?)),
        )?;
        // Fixed-width timestamps compare bytewise (not in the server's collation).
        let now = ts(now);
        let mut out = BTreeMap::new();
        for (key, _) in rows.into_iter().filter(|(_, until)| *until > now) {
            let machine = &key[ALIVE_PREFIX.len()..];
            out.insert(
                machine.to_string(),
                self.machine_slots(machine)?.unwrap_or(0),
            );
        }
        Ok(out)
    }

    /// The agent slots `machine`'s daemon last recorded; `None` when it never did.
    pub fn machine_slots(&self, machine: &str) -> Result<Option<u32>> {
        Ok(self
            .kv_get(&slots_key(machine))?
            .and_then(|v| v.trim().parse().ok()))
    }
}
