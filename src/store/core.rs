//! The shared queue core (issue 27): what every backend of the store port does the same
//! way — tasks, state changes with their summaries in the same transaction, claims owned
//! by a daemon under a lease, pins of local-path tasks to their machine, and the
//! fleet-wide usage-limit state. [`QueueCore`] is implemented by [`Store`] on either
//! backend; the store contract suite (tests/it/store_contract.rs) runs the same tests
//! against both.
//!
//! Architecture Invariant: a claim names its owner ([`Owner`]: machine id, process, start
//! nonce) and a lease. A daemon renews its own leases ([`QueueCore::renew_leases`]); it
//! reconciles only its own machine's claims, claims without an owner (written before
//! schema 8) and claims whose lease expired ([`QueueCore::reconcilable`]), and takes one
//! over only through [`QueueCore::take_over`], which succeeds for one daemon.
//!
//! Architecture Invariant: leases are judged by the store's clock, never a caller's
//! ([`QueueCore::lease_clock`]): a caller passes a lease's length, and the backend writes
//! its own time plus that length and compares with its own time. On PostgreSQL that is
//! the server's `clock_timestamp()`, so a daemon whose clock is off neither takes a live
//! lease nor keeps an expired one alive; on SQLite (one machine, one clock) it is the
//! caller's `now`, the orchestrator's clock.
//!
//! Must not: decide what a reconciling daemon does with a task it took over (that is the
//! orchestrator: finish the recorded intents, then a new attempt not counted as a failure).

use std::collections::BTreeMap;
use std::fmt;

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{Result, Store};
use crate::domain::{AgentQuota, Task, TaskState};

/// A daemon, as the owner of its claims: the machine id (`store.machine`, else the host
/// name), its process id and a nonce drawn when it started (a restarted daemon with a
/// reused pid is still a different owner).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub machine: String,
    pub pid: u32,
    pub nonce: String,
}

impl Owner {
    /// The owner for this process on `machine`, with a fresh nonce.
    pub fn this_process(machine: impl Into<String>) -> Owner {
        use sha2::Digest;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let pid = std::process::id();
        let seed = format!("{nanos}/{pid}/{:p}", &nanos);
        let nonce = hex::encode(&sha2::Sha256::digest(seed.as_bytes())[..6]);
        Owner {
            machine: machine.into(),
            pid,
            nonce,
        }
    }

    /// `machine/pid/nonce`: the stored owner column.
    pub fn key(&self) -> String {
        format!("{}/{}/{}", self.machine, self.pid, self.nonce)
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key())
    }
}

/// The machine id of this host when `store.machine` is unset: its host name.
pub fn host_machine_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into())
}

/// Who holds an active task, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub task_id: String,
    pub machine: String,
    /// `machine/pid/nonce` ([`Owner::key`]).
    pub owner: String,
    pub lease_until: DateTime<Utc>,
}

/// An active task a daemon may reconcile, with why: its own machine's claim, no recorded
/// owner, or a lease that expired (a lost machine: its attempt is not the agent's failure).
#[derive(Debug, Clone, PartialEq)]
pub struct Reconcilable {
    pub task: Task,
    pub claim: Option<Claim>,
    pub expired: bool,
}

/// What both backends do the same way (see the module docs). Object-safe: a
/// [`super::StoreHandle`] opens it as `Box<dyn QueueCore>` on either backend.
pub trait QueueCore: Send {
    /// `"sqlite"` or `"postgresql"`.
    fn backend(&self) -> &'static str;
    /// Inserts a new task; `false` (and nothing changed) when the id exists.
    fn insert_task(&self, task: &Task) -> Result<bool>;
    fn get_task(&self, id: &str) -> Result<Option<Task>>;
    /// Pins a task to the machine that holds its local-path repository: only that
    /// machine's daemons claim it.
    fn pin_task(&self, task_id: &str, machine: &str) -> Result<()>;
    /// Atomically claims the oldest claimable task not pinned elsewhere (DISCOVERED, or
    /// FAILED with a retry time at or before `now`) for `owner` with a lease of `lease`
    /// from the store's clock ([`QueueCore::lease_clock`]). Two claimers never get the
    /// same task.
    fn claim_next_owned(
        &self,
        owner: &Owner,
        lease: Duration,
        now: DateTime<Utc>,
    ) -> Result<Option<Task>>;
    /// THE way a task changes state (checked against `domain::transition` and the state
    /// the caller saw), with its transition row and summary in the same transaction. A
    /// task leaving the active states drops its claim.
    fn transition(
        &self,
        task_id: &str,
        expected_from: TaskState,
        to: TaskState,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<Task>;
    /// Extends every lease `owner` holds to `lease` from the store's clock; returns how
    /// many.
    fn renew_leases(&self, owner: &Owner, lease: Duration, now: DateTime<Utc>) -> Result<u64>;
    /// The time leases are judged by, to compare a [`Claim::lease_until`] with: the
    /// server's `clock_timestamp()` on PostgreSQL, `now` (the caller's clock) on SQLite.
    fn lease_clock(&self, now: DateTime<Utc>) -> Result<DateTime<Utc>>;
    fn claim_of(&self, task_id: &str) -> Result<Option<Claim>>;
    /// Active tasks `owner` may reconcile: its machine's claims, unowned ones and leases
    /// expired by the store's clock. Another machine's live claim is never among them, nor a
    /// task pinned to another machine (its local path is there), whatever its lease.
    fn reconcilable(&self, owner: &Owner, now: DateTime<Utc>) -> Result<Vec<Reconcilable>>;
    /// Takes the claim of an active task for `owner`, with a lease of `lease`, if it is
    /// unowned, this machine's, or its lease expired by the store's clock; `false` when
    /// another daemon holds it (or got it first), or the task is pinned to another machine.
    fn take_over(
        &self,
        task_id: &str,
        owner: &Owner,
        lease: Duration,
        now: DateTime<Utc>,
    ) -> Result<bool>;
    fn count_by_state(&self) -> Result<BTreeMap<TaskState, u64>>;
    /// The stored summary object of one task (`status --json`'s bytes).
    fn summary_json(&self, task_id: &str) -> Result<Option<String>>;
    /// Replaces the usage-limit row of (`identity`, `agent`) with what `merge` makes of the
    /// stored one, atomically: fleet-wide, two daemons meeting the same limit see each other.
    fn update_quota(
        &self,
        identity: &str,
        agent: &str,
        merge: &mut dyn FnMut(Option<AgentQuota>) -> AgentQuota,
    ) -> Result<AgentQuota>;
    fn quota_rows(&self) -> Result<Vec<AgentQuota>>;
}

impl QueueCore for Store {
    fn backend(&self) -> &'static str {
        Store::backend(self)
    }
    fn insert_task(&self, task: &Task) -> Result<bool> {
        Store::insert_task(self, task)
    }
    fn get_task(&self, id: &str) -> Result<Option<Task>> {
        Store::get_task(self, id)
    }
    fn pin_task(&self, task_id: &str, machine: &str) -> Result<()> {
        Store::pin_task(self, task_id, machine)
    }
    fn claim_next_owned(
        &self,
        owner: &Owner,
        lease: Duration,
        now: DateTime<Utc>,
    ) -> Result<Option<Task>> {
        Store::claim_next_owned(self, owner, lease, now)
    }
    fn transition(
        &self,
        task_id: &str,
        expected_from: TaskState,
        to: TaskState,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<Task> {
        Store::transition(self, task_id, expected_from, to, reason, now)
    }
    fn renew_leases(&self, owner: &Owner, lease: Duration, now: DateTime<Utc>) -> Result<u64> {
        Store::renew_leases(self, owner, lease, now)
    }
    fn lease_clock(&self, now: DateTime<Utc>) -> Result<DateTime<Utc>> {
        Store::lease_clock(self, now)
    }
    fn claim_of(&self, task_id: &str) -> Result<Option<Claim>> {
        Store::claim_of(self, task_id)
    }
    fn reconcilable(&self, owner: &Owner, now: DateTime<Utc>) -> Result<Vec<Reconcilable>> {
        Store::reconcilable(self, owner, now)
    }
    fn take_over(
        &self,
        task_id: &str,
        owner: &Owner,
        lease: Duration,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        Store::take_over(self, task_id, owner, lease, now)
    }
    fn count_by_state(&self) -> Result<BTreeMap<TaskState, u64>> {
        Store::count_by_state(self)
    }
    fn summary_json(&self, task_id: &str) -> Result<Option<String>> {
        Store::summary_json(self, task_id)
    }
    fn update_quota(
        &self,
        identity: &str,
        agent: &str,
        merge: &mut dyn FnMut(Option<AgentQuota>) -> AgentQuota,
    ) -> Result<AgentQuota> {
        Store::update_quota(self, identity, agent, merge)
    }
    fn quota_rows(&self) -> Result<Vec<AgentQuota>> {
        Store::quota_rows(self)
    }
}
