//! A running attempt's counters so far — turns, tokens, cost, tool calls, its last
//! activity — folded from its stored events by the same adapter code the daemon folds the
//! live stream with ([`crate::agents::fold`]), so the console never shows a figure the
//! daemon would not conclude from the same lines (pure).

use chrono::{DateTime, Utc};

use crate::agents::{self, AgentOutcome};
use crate::domain::{AgentType, EventStream, TaskEvent};

/// What a running attempt has done so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counters {
    pub turns: u32,
    /// Input plus output tokens.
    pub tokens: u64,
    pub cost_usd: Option<f64>,
    pub tool_calls: u32,
    /// The newest event: when, and its one-line summary.
    pub last: Option<(DateTime<Utc>, String)>,
    pub events: u64,
}

/// The stdout line an event was parsed from (its JSON, or the raw text).
fn line_of(e: &TaskEvent) -> String {
    match e.data.get("raw").and_then(|r| r.as_str()) {
        Some(raw) if e.data.as_object().is_some_and(|o| o.len() == 1) => raw.to_string(),
        _ => e.data.to_string(),
    }
}

/// Folds `events` (oldest first) as the agent's adapter does.
pub fn counters(agent: AgentType, events: &[TaskEvent]) -> Counters {
    let adapter = agents::adapter_for(agent);
    let mut outcome = AgentOutcome::default();
    let mut final_seen = false;
    for e in events.iter().filter(|e| e.stream == EventStream::Stdout) {
        agents::fold(adapter.as_ref(), &mut outcome, &mut final_seen, &line_of(e));
    }
    Counters {
        turns: outcome.turns,
        tokens: outcome.tokens.total(),
        cost_usd: outcome.cost_usd,
        tool_calls: outcome.tool_calls,
        last: events.last().map(|e| (e.at, e.summary.clone())),
        events: events.len() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::EventKind;
    use serde_json::json;

    fn ev(seq: u64, data: serde_json::Value) -> TaskEvent {
        TaskEvent {
            seq,
            kind: EventKind::Message,
            stream: EventStream::Stdout,
            summary: format!("line {seq}"),
            data,
            at: DateTime::parse_from_rfc3339("2026-12-01T10:00:00Z")
                .unwrap()
                .with_timezone(&Utc)
                + chrono::Duration::seconds(seq as i64),
        }
    }

    #[test]
    fn claude_turns_and_tokens_so_far() {
        let assistant = |id: &str, inp: u64, out: u64| {
            json!({"type": "assistant", "message": {"id": id, "role": "assistant",
                "content": [{"type": "text", "text": "working"}],
                "usage": {"input_tokens": inp, "output_tokens": out}}})
        };
        let events = vec![
            ev(0, json!({"type": "system", "subtype": "init"})),
            ev(1, assistant("m1", 100, 20)),
            ev(2, assistant("m2", 150, 30)),
        ];
        let c = counters(AgentType::Claude, &events);
        assert_eq!(c.turns, 2, "{c:?}");
        assert!(c.tokens > 0, "{c:?}");
        assert_eq!(c.events, 3);
        assert_eq!(c.last.as_ref().unwrap().1, "line 2");
        // The result line, when it comes, carries the cost.
        let mut done = events.clone();
        done.push(ev(
            3,
            json!({"type": "result", "subtype": "success", "is_error": false, "num_turns": 2,
                "total_cost_usd": 0.0425, "result": "ok",
                "usage": {"input_tokens": 250, "output_tokens": 50}}),
        ));
        let c = counters(AgentType::Claude, &done);
        assert_eq!(c.cost_usd, Some(0.0425), "{c:?}");
        assert_eq!(c.tokens, 300, "{c:?}");
    }

    #[test]
    fn raw_lines_and_stderr_do_not_count() {
        let mut e = ev(0, json!({"raw": "not json"}));
        assert_eq!(line_of(&e), "not json");
        e.stream = EventStream::Stderr;
        let c = counters(AgentType::Claude, &[e]);
        assert_eq!((c.turns, c.tokens, c.events), (0, 0, 1));
        assert_eq!(counters(AgentType::Codex, &[]), Counters::default());
    }
}
