//! The orchestrator's clock (issue 30): every wall-clock time the orchestrator decides by
//! (retry times, quota resets, the cost ceiling's day, deadlines, the shepherd's looks,
//! the stamps it stores) comes from one injected [`Clock`], so each timing policy can be
//! tested with a fixed or stepped clock. This file is the only place under
//! `src/orchestrator/` that reads the system time (`scripts/clock_check.sh` keeps it so).
//!
//! Durations measured on the monotonic clock (`std::time::Instant`, tokio's timers) are
//! not wall-clock reads and stay where they are.

use std::sync::Arc;

use chrono::{DateTime, Utc};

/// The time the orchestrator decides by (injectable for tests).
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// The system's wall clock.
pub fn system() -> Clock {
    Arc::new(Utc::now)
}
