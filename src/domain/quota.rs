//! Usage limits as the queue knows them (issue 14, DESIGN.md "Usage limits"): which agent
//! is out under which identity until when, and why a task waits.
//!
//! Quota is a property of (identity, agent), not of a task: every task that would start
//! `claude` under identity `personal` sees the same [`AgentQuota`].

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One (identity, agent) out of quota until `resets_at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentQuota {
    pub identity: String,
    pub agent: String,
    /// Out until then (UTC). Past: the agent may be used again.
    pub resets_at: DateTime<Utc>,
    /// The CLI named the reset; `false`: it did not, and the default cool-down applies.
    pub reported: bool,
    /// The CLI's limit message (scrubbed, one line).
    pub message: String,
    /// Where the limit was met.
    pub task_id: Option<String>,
    pub attempt: Option<u32>,
    pub hit_at: DateTime<Utc>,
}

impl AgentQuota {
    /// Whether the agent is still out at `now`.
    pub fn is_out(&self, now: DateTime<Utc>) -> bool {
        self.resets_at > now
    }
}

/// One agent of a parked task's chain and when it can run again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentReset {
    pub agent: String,
    pub identity: String,
    pub resets_at: DateTime<Utc>,
}

/// A task parked because every agent of its chain is out: it is FAILED with
/// `next_attempt_at = until`, no attempt and no failure counted (issue 14).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaWait {
    pub task_id: String,
    /// The earliest reset among the chain's agents.
    pub until: DateTime<Utc>,
    /// The agent whose reset comes first, under its identity.
    pub agent: String,
    pub identity: String,
    /// Every agent of the chain that is out, in chain order.
    pub resets: Vec<AgentReset>,
    pub parked_at: DateTime<Utc>,
}
