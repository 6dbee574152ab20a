//! The outcome of one attempt (spec §3.5).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttemptStatus {
    Succeeded,
    Failed,
    /// The agent hit a usage or rate limit; the next fallback agent gets the task
    /// without a failure being counted.
    Quota,
    /// Deadline passed; the container was killed.
    Timeout,
    /// No output for the idle timeout; the container was killed.
    Stalled,
    /// The process died (OOM kill, signal, no result line).
    Crash,
    Cancelled,
    /// The model-API gateway refused a request the identity's daily budget (or the
    /// attempt's `max_cost_usd_per_attempt`) could not cover: the task waits for the
    /// budget's reset without a failure being counted (issue 26).
    Budget,
}

impl AttemptStatus {
    pub const ALL: [AttemptStatus; 8] = [
        AttemptStatus::Succeeded,
        AttemptStatus::Failed,
        AttemptStatus::Quota,
        AttemptStatus::Timeout,
        AttemptStatus::Stalled,
        AttemptStatus::Crash,
        AttemptStatus::Cancelled,
        AttemptStatus::Budget,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AttemptStatus::Succeeded => "succeeded",
            AttemptStatus::Failed => "failed",
            AttemptStatus::Quota => "quota",
            AttemptStatus::Timeout => "timeout",
            AttemptStatus::Stalled => "stalled",
            AttemptStatus::Crash => "crash",
            AttemptStatus::Cancelled => "cancelled",
            AttemptStatus::Budget => "budget",
        }
    }
}

impl fmt::Display for AttemptStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AttemptStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        AttemptStatus::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| format!("unknown attempt status `{s}`"))
    }
}

/// Token counts as absolute totals for the attempt (never summed twice).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TokenUsage {
    pub input: u64,
    pub output: u64,
    pub cached_input: u64,
}

impl TokenUsage {
    pub fn total(&self) -> u64 {
        self.input + self.output
    }
}

/// Evidence of one verification check (spec §10).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckEvidence {
    /// `test`, `lint`, `typecheck`, or a gate such as `diff` or `protected-paths`.
    pub name: String,
    pub command: String,
    pub exit_code: Option<i64>,
    pub duration_ms: u64,
    pub passed: bool,
    /// Last lines of combined output (secrets scrubbed).
    pub output_tail: String,
}

/// What one attempt produced (spec §3.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub task_id: String,
    pub attempt: u32,
    pub agent: String,
    pub status: AttemptStatus,
    pub turns: u32,
    pub duration_seconds: f64,
    pub cost_usd: Option<f64>,
    pub tokens: TokenUsage,
    pub exit_code: Option<i64>,
    /// The agent's final message, if it gave one.
    pub final_message: Option<String>,
    /// Why the attempt did not succeed, in one line.
    pub reason: Option<String>,
    /// Number of events recorded.
    pub events: u64,
    /// Paths the attempt produced (transcript, …).
    pub artifacts: Vec<String>,
}

impl RunResult {
    /// The one constructor: an attempt's result with nothing measured yet (no turns, cost,
    /// tokens, exit code, message, events or artifacts). Callers set what they measured
    /// with struct update syntax.
    pub fn new(
        task_id: impl Into<String>,
        attempt: u32,
        agent: impl Into<String>,
        status: AttemptStatus,
    ) -> RunResult {
        RunResult {
            task_id: task_id.into(),
            attempt,
            agent: agent.into(),
            status,
            turns: 0,
            duration_seconds: 0.0,
            cost_usd: None,
            tokens: TokenUsage::default(),
            exit_code: None,
            final_message: None,
            reason: None,
            events: 0,
            artifacts: Vec::new(),
        }
    }
}
