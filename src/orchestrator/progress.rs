//! Live progress of attempts: state changes and agent activity (turns, cost, last event).
//!
//! The pipeline reports through the [`Progress`] trait; `spawn` prints it for a person,
//! the daemon logs it. Rendering of one line is pure ([`progress_line`]).

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::domain::TaskState;

/// Receives what an attempt is doing.
pub trait Progress: Send + Sync {
    /// The task moved to `state`; `detail` is the transition reason.
    fn state(&self, task_id: &str, state: TaskState, detail: &str);
    /// The agent produced output: turns and cost so far, and a one-line summary.
    fn activity(&self, task_id: &str, agent: &str, turns: u32, cost_usd: Option<f64>, last: &str);
}

/// Reports nothing (tests, benchmarks).
pub struct QuietProgress;

impl Progress for QuietProgress {
    fn state(&self, _: &str, _: TaskState, _: &str) {}
    fn activity(&self, _: &str, _: &str, _: u32, _: Option<f64>, _: &str) {}
}

/// Keeps every state change in memory, in order (tests assert the path a task took).
#[derive(Debug, Default)]
pub struct RecordingProgress {
    states: Mutex<Vec<(String, TaskState, String)>>,
}

impl RecordingProgress {
    pub fn new() -> RecordingProgress {
        RecordingProgress::default()
    }

    /// `(task, state, detail)` of every state change so far.
    pub fn states(&self) -> Vec<(String, TaskState, String)> {
        self.states.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// The states `task_id` went through, in order.
    pub fn path_of(&self, task_id: &str) -> Vec<TaskState> {
        self.states()
            .into_iter()
            .filter(|(id, _, _)| id == task_id)
            .map(|(_, state, _)| state)
            .collect()
    }
}

impl Progress for RecordingProgress {
    fn state(&self, task_id: &str, state: TaskState, detail: &str) {
        if let Ok(mut s) = self.states.lock() {
            s.push((task_id.to_string(), state, detail.to_string()));
        }
    }
    fn activity(&self, _: &str, _: &str, _: u32, _: Option<f64>, _: &str) {}
}

/// Logs through tracing (the daemon).
pub struct LogProgress;

impl Progress for LogProgress {
    fn state(&self, task_id: &str, state: TaskState, detail: &str) {
        tracing::info!(task = task_id, %state, "{detail}");
    }
    fn activity(&self, task_id: &str, agent: &str, turns: u32, cost: Option<f64>, last: &str) {
        tracing::debug!(task = task_id, agent, turns, cost, "{last}");
    }
}

/// One progress line: `[00:42] RUNNING claude · 3 turns · $0.0421 · tool Bash: cargo test`.
pub fn progress_line(
    elapsed: Duration,
    state: TaskState,
    agent: &str,
    turns: u32,
    cost_usd: Option<f64>,
    detail: &str,
) -> String {
    let secs = elapsed.as_secs();
    let mut line = format!("[{:02}:{:02}] {state}", secs / 60, secs % 60);
    if !agent.is_empty() {
        line.push_str(&format!(" {agent}"));
    }
    if turns > 0 {
        line.push_str(&format!(
            " · {turns} turn{}",
            if turns == 1 { "" } else { "s" }
        ));
    }
    if let Some(cost) = cost_usd {
        line.push_str(&format!(" · ${cost:.4}"));
    }
    // Whole: a state's detail carries the reason and its fix, which must never be cut
    // (issue 29). Only the agent's activity is shortened, by the caller.
    let detail = detail.trim();
    if !detail.is_empty() {
        line.push_str(&format!(" · {detail}"));
    }
    line
}

/// The agent's last activity, as the one-line spinner shows it: at most 100 characters.
fn activity_text(last: &str) -> String {
    let last = last.trim();
    if last.chars().count() <= 100 {
        return last.to_string();
    }
    let mut short: String = last.chars().take(99).collect();
    short.push('…');
    short
}

/// A [`LineProgress`] line: elapsed time, task, state and the whole detail.
pub fn state_line(elapsed: Duration, task_id: &str, state: TaskState, detail: &str) -> String {
    let secs = elapsed.as_secs();
    format!(
        "[{:02}:{:02}] {task_id:<10} {:<11} {}",
        secs / 60,
        secs % 60,
        state.as_str(),
        detail.trim()
    )
}

struct TermState {
    state: TaskState,
    agent: String,
    turns: u32,
    cost: Option<f64>,
    last_activity_print: Option<Instant>,
}

/// Prints progress for a person on stderr: every state change on its own line, and agent
/// activity at most once a second (a spinner line on a terminal, plain lines otherwise).
pub struct TerminalProgress {
    started: Instant,
    tty: bool,
    inner: Mutex<TermState>,
}

impl TerminalProgress {
    pub fn new() -> TerminalProgress {
        TerminalProgress {
            started: Instant::now(),
            tty: std::io::stderr().is_terminal(),
            inner: Mutex::new(TermState {
                state: TaskState::Discovered,
                agent: String::new(),
                turns: 0,
                cost: None,
                last_activity_print: None,
            }),
        }
    }
}

impl Default for TerminalProgress {
    fn default() -> Self {
        TerminalProgress::new()
    }
}

impl Progress for TerminalProgress {
    fn state(&self, _task_id: &str, state: TaskState, detail: &str) {
        let Ok(mut s) = self.inner.lock() else { return };
        s.state = state;
        let line = progress_line(
            self.started.elapsed(),
            state,
            &s.agent,
            s.turns,
            s.cost,
            detail,
        );
        let mut err = std::io::stderr().lock();
        if self.tty {
            let _ = write!(err, "\r\x1b[2K");
        }
        let _ = writeln!(err, "{line}");
    }

    fn activity(&self, _task_id: &str, agent: &str, turns: u32, cost: Option<f64>, last: &str) {
        let Ok(mut s) = self.inner.lock() else { return };
        s.agent = agent.to_string();
        s.turns = turns;
        s.cost = cost;
        let due = s
            .last_activity_print
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(1));
        if !due {
            return;
        }
        s.last_activity_print = Some(Instant::now());
        let line = progress_line(
            self.started.elapsed(),
            s.state,
            agent,
            turns,
            cost,
            &activity_text(last),
        );
        let mut err = std::io::stderr().lock();
        if self.tty {
            // The spinner line is rewritten in place: it must stay one terminal line.
            let width = 120;
            let short: String = line.chars().take(width).collect();
            let _ = write!(err, "\r\x1b[2K{short}");
            let _ = err.flush();
        } else {
            let _ = writeln!(err, "{line}");
        }
    }
}

/// Prints every state change of every task as one line on stderr (many tasks at once:
/// the demo, a daemon in the foreground for a person).
pub struct LineProgress {
    started: Instant,
}

impl LineProgress {
    pub fn new() -> LineProgress {
        LineProgress {
            started: Instant::now(),
        }
    }
}

impl Default for LineProgress {
    fn default() -> Self {
        LineProgress::new()
    }
}

impl Progress for LineProgress {
    fn state(&self, task_id: &str, state: TaskState, detail: &str) {
        eprintln!(
            "{}",
            state_line(self.started.elapsed(), task_id, state, detail)
        );
    }
    fn activity(&self, _: &str, _: &str, _: u32, _: Option<f64>, _: &str) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 29: a state's detail (a BLOCKED reason with its fix) is printed whole, however
    /// long; only the agent's activity on the spinner line is shortened.
    #[test]
    fn fixes_are_never_cut() {
        let fix = format!(
            "BLOCKED: verification failed: test exited 127 (`python3: not found`); fix: install \
             python3 in the check image or set verify.image in config.yaml to one that has it{}",
            " and more".repeat(20)
        );
        let line = progress_line(Duration::ZERO, TaskState::Blocked, "claude", 3, None, &fix);
        assert!(line.ends_with(&fix), "{line}");
        let line = state_line(Duration::from_secs(5), "local-1", TaskState::Blocked, &fix);
        assert!(line.ends_with(&fix), "{line}");
        let long = "x".repeat(300);
        assert_eq!(activity_text(&long).chars().count(), 100);
        assert!(activity_text(&long).ends_with('…'));
        assert_eq!(activity_text(" short "), "short");
    }

    #[test]
    fn lines() {
        assert_eq!(
            progress_line(
                Duration::from_secs(62),
                TaskState::Running,
                "claude",
                3,
                Some(0.0421),
                "tool Bash: cargo test"
            ),
            "[01:02] RUNNING claude · 3 turns · $0.0421 · tool Bash: cargo test"
        );
        assert_eq!(
            progress_line(Duration::ZERO, TaskState::Claimed, "", 0, None, ""),
            "[00:00] CLAIMED"
        );
        assert_eq!(
            progress_line(Duration::ZERO, TaskState::Running, "codex", 1, None, "x"),
            "[00:00] RUNNING codex · 1 turn · x"
        );
    }
}
