//! The task state machine (spec §4, DESIGN.md "The task state machine").
//!
//! The transition table below is the only place that says which moves are legal.
//! The store calls [`transition`] inside the same transaction that records the change.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Where a task is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TaskState {
    Discovered,
    Claimed,
    Routed,
    Provisioned,
    Running,
    Verifying,
    Landed,
    Failed,
    Blocked,
    /// Stopped by a person (`polyphony cancel`, `POST /api/v1/tasks/{id}/cancel`): terminal,
    /// never the agent's failure. `polyphony retry` brings it back as a new generation.
    Cancelled,
}

impl TaskState {
    /// Every state, in pipeline order.
    pub const ALL: [TaskState; 10] = [
        TaskState::Discovered,
        TaskState::Claimed,
        TaskState::Routed,
        TaskState::Provisioned,
        TaskState::Running,
        TaskState::Verifying,
        TaskState::Landed,
        TaskState::Failed,
        TaskState::Blocked,
        TaskState::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Discovered => "DISCOVERED",
            TaskState::Claimed => "CLAIMED",
            TaskState::Routed => "ROUTED",
            TaskState::Provisioned => "PROVISIONED",
            TaskState::Running => "RUNNING",
            TaskState::Verifying => "VERIFYING",
            TaskState::Landed => "LANDED",
            TaskState::Failed => "FAILED",
            TaskState::Blocked => "BLOCKED",
            TaskState::Cancelled => "CANCELLED",
        }
    }

    /// LANDED, BLOCKED and CANCELLED end a task; nothing leaves them.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Landed | TaskState::Blocked | TaskState::Cancelled
        )
    }

    /// States in which an attempt is in flight (a worker owns the task).
    pub fn is_active(self) -> bool {
        matches!(
            self,
            TaskState::Claimed
                | TaskState::Routed
                | TaskState::Provisioned
                | TaskState::Running
                | TaskState::Verifying
        )
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A state name that is not one of the ten.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown task state `{0}` (expected one of DISCOVERED, CLAIMED, ROUTED, PROVISIONED, RUNNING, VERIFYING, LANDED, FAILED, BLOCKED, CANCELLED)")]
pub struct UnknownState(pub String);

impl FromStr for TaskState {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let upper = s.trim().to_ascii_uppercase();
        TaskState::ALL
            .into_iter()
            .find(|state| state.as_str() == upper)
            .ok_or_else(|| UnknownState(s.to_string()))
    }
}

/// Whether `from -> to` is in the transition table.
///
/// Spec §4 plus the failure edges a real run needs (no route, clone failed, container
/// create failed): CLAIMED/ROUTED/PROVISIONED -> FAILED; and a person's cancel (issue 29):
/// every state that is not terminal -> CANCELLED. Nothing else.
pub fn can_transition(from: TaskState, to: TaskState) -> bool {
    use TaskState::*;
    matches!(
        (from, to),
        (Discovered, Claimed)
            | (Claimed, Routed)
            | (Routed, Provisioned)
            | (Provisioned, Running)
            | (Running, Verifying)
            | (Verifying, Landed)
            | (Claimed, Failed)
            | (Routed, Failed)
            | (Provisioned, Failed)
            | (Running, Failed)
            | (Verifying, Failed)
            | (Failed, Claimed)
            | (Failed, Blocked)
            | (
                Discovered | Claimed | Routed | Provisioned | Running | Verifying | Failed,
                Cancelled
            )
    )
}

/// A move the state machine forbids. Spec §4: "Invalid transitions raise ValueError".
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid task transition {from} -> {to}")]
pub struct InvalidTransition {
    pub from: TaskState,
    pub to: TaskState,
}

/// Checks `from -> to` against the table and returns the new state.
pub fn transition(from: TaskState, to: TaskState) -> Result<TaskState, InvalidTransition> {
    if can_transition(from, to) {
        Ok(to)
    } else {
        Err(InvalidTransition { from, to })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TaskState::*;

    /// The table of DESIGN.md written out independently of `can_transition`.
    const ALLOWED: &[(TaskState, TaskState)] = &[
        (Discovered, Claimed),
        (Claimed, Routed),
        (Routed, Provisioned),
        (Provisioned, Running),
        (Running, Verifying),
        (Verifying, Landed),
        (Running, Failed),
        (Verifying, Failed),
        (Failed, Claimed),
        (Failed, Blocked),
        (Claimed, Failed),
        (Routed, Failed),
        (Provisioned, Failed),
        (Discovered, Cancelled),
        (Claimed, Cancelled),
        (Routed, Cancelled),
        (Provisioned, Cancelled),
        (Running, Cancelled),
        (Verifying, Cancelled),
        (Failed, Cancelled),
    ];

    #[test]
    fn all_100_pairs_match_the_table() {
        let mut checked = 0;
        for from in TaskState::ALL {
            for to in TaskState::ALL {
                let expected = ALLOWED.contains(&(from, to));
                assert_eq!(can_transition(from, to), expected, "{from} -> {to}");
                match transition(from, to) {
                    Ok(state) => {
                        assert!(expected);
                        assert_eq!(state, to);
                    }
                    Err(err) => {
                        assert!(!expected);
                        assert_eq!(err, InvalidTransition { from, to });
                        let msg = err.to_string();
                        assert!(
                            msg.contains(from.as_str()) && msg.contains(to.as_str()),
                            "{msg}"
                        );
                    }
                }
                checked += 1;
            }
        }
        assert_eq!(checked, 100);
    }

    #[test]
    fn terminal_states_have_no_exit() {
        for from in [Landed, Blocked, Cancelled] {
            assert!(from.is_terminal());
            assert!(TaskState::ALL.iter().all(|&to| !can_transition(from, to)));
        }
    }

    #[test]
    fn names_round_trip() {
        for state in TaskState::ALL {
            assert_eq!(state.as_str().parse::<TaskState>(), Ok(state));
            assert_eq!(
                state.as_str().to_lowercase().parse::<TaskState>(),
                Ok(state)
            );
            let json = serde_json::to_string(&state).unwrap();
            assert_eq!(json, format!("\"{}\"", state.as_str()));
        }
        assert!("LANDING".parse::<TaskState>().is_err());
    }
}
