//! Task events: one classified line of agent output (spec §9).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What a line of agent output says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// Session start, init, hooks and other bookkeeping from the CLI itself.
    System,
    /// Assistant text (or thinking).
    Message,
    ToolCall,
    ToolResult,
    /// Token or rate-limit accounting.
    Usage,
    /// The final outcome line.
    Result,
    Error,
    /// Anything unparseable or unrecognised (never a crash).
    Unknown,
    /// A connection the attempt's egress proxy refused, or the summary of those it allowed
    /// (issue 25): written by the orchestrator from the proxy's log, never by the agent.
    Egress,
}

impl EventKind {
    pub const ALL: [EventKind; 9] = [
        EventKind::System,
        EventKind::Message,
        EventKind::ToolCall,
        EventKind::ToolResult,
        EventKind::Usage,
        EventKind::Result,
        EventKind::Error,
        EventKind::Unknown,
        EventKind::Egress,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::System => "system",
            EventKind::Message => "message",
            EventKind::ToolCall => "tool_call",
            EventKind::ToolResult => "tool_result",
            EventKind::Usage => "usage",
            EventKind::Result => "result",
            EventKind::Error => "error",
            EventKind::Unknown => "unknown",
            EventKind::Egress => "egress",
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EventKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        EventKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("unknown event kind `{s}`"))
    }
}

/// Which output stream a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventStream {
    Stdout,
    Stderr,
}

impl EventStream {
    pub fn as_str(self) -> &'static str {
        match self {
            EventStream::Stdout => "stdout",
            EventStream::Stderr => "stderr",
        }
    }
}

/// One event of an attempt, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskEvent {
    /// Position in the attempt's output, from 0; unique per attempt.
    pub seq: u64,
    pub kind: EventKind,
    pub stream: EventStream,
    /// A one-line human summary ("Bash: cargo test", "assistant: Fixed the parser").
    pub summary: String,
    /// The parsed JSON line, or `{"raw": "..."}` when it was not JSON.
    pub data: serde_json::Value,
    pub at: DateTime<Utc>,
}
