//! Wake-ups across a fleet (issue 27). On PostgreSQL a write that gives the daemons new
//! work — a task inserted (an enqueue, a retry's new generation, a source's poll) or a
//! cancel requested — sends `NOTIFY polyphony_wake` in its own transaction, so PostgreSQL
//! delivers it when that commits, and every daemon listens on a connection of its own
//! ([`WakeListener`]): an enqueue on one machine starts work on the others at once instead
//! of at their next poll. On SQLite the home's socket does this
//! (`orchestrator::daemon::wake`); nothing here runs.
//!
//! A wake-up carries nothing: it only says "look at the queue now". A missed one (the
//! listener reconnecting) costs a poll interval, never a task.

use std::time::Duration;

use super::sql::{Db, Dialect};
use super::Result;

/// The channel the store notifies and the daemons listen on.
const CHANNEL: &str = "polyphony_wake";

/// Notifies the listening daemons when the caller's transaction commits (PostgreSQL;
/// nothing on SQLite).
pub(super) fn notify(db: &Db) -> Result<()> {
    if db.dialect() == Dialect::Postgres {
        db.batch(&format!("NOTIFY {CHANNEL}"))?;
    }
    Ok(())
}

/// A connection that waits for the fleet's wake-ups ([`super::StoreHandle::wake_listener`]).
/// Blocking: use it from a plain thread, never from async code (the client runs a runtime
/// of its own).
pub struct WakeListener {
    client: postgres::Client,
}

impl WakeListener {
    pub(super) fn listen(mut client: postgres::Client) -> Result<WakeListener> {
        client.batch_execute(&format!("LISTEN {CHANNEL}"))?;
        Ok(WakeListener { client })
    }

    /// Waits up to `timeout` for a wake-up: `true` when one came (every one pending is
    /// taken with it), `false` when none did. An error means the connection is gone.
    pub fn wait(&mut self, timeout: Duration) -> Result<bool> {
        use postgres::fallible_iterator::FallibleIterator;
        let mut notifications = self.client.notifications();
        let woken = notifications.timeout_iter(timeout).next()?.is_some();
        let mut pending = notifications.iter();
        while pending.next()?.is_some() {}
        Ok(woken)
    }
}
