//! Readable renderings for the inspection verbs: one line per stored event (`logs`), the
//! attempt header and footer, and byte counts (`cleanup`, `doctor`).
//!
//! Pure: values in, strings out; no store, disk or clock (callers pass what they read).
//! Must not: decide anything about tasks, or print secrets (events are scrubbed before
//! they are stored; nothing here adds to them).

use serde::Serialize;

use crate::domain::{EventKind, EventStream, TaskEvent};
use crate::store::AttemptRecord;

pub use crate::domain::terminal::printable;

/// `println!` for text others wrote: the formatted line passes [`printable`].
#[macro_export]
macro_rules! println_printable {
    ($($arg:tt)*) => {
        println!("{}", $crate::domain::terminal::printable(&format!($($arg)*)))
    };
}

/// Longest tool-result text shown on a `logs` line, in characters.
pub const TOOL_RESULT_CHARS: usize = 100;

/// The label `logs` shows for an event kind: what a reader looks for, not the enum name.
pub fn kind_label(kind: EventKind) -> &'static str {
    match kind {
        EventKind::System => "system",
        EventKind::Message => "text",
        EventKind::ToolCall => "tool",
        EventKind::ToolResult => "output",
        EventKind::Usage => "usage",
        EventKind::Result => "result",
        EventKind::Error => "ERROR",
        EventKind::Unknown => "?",
        EventKind::Egress => "egress",
    }
}

/// One readable line: `HH:MM:SS  tool    Bash: cargo test`. Tool results are cut to
/// [`TOOL_RESULT_CHARS`]; stderr lines are marked.
pub fn event_line(e: &TaskEvent) -> String {
    let summary = match e.kind {
        EventKind::ToolResult => truncate(&e.summary, TOOL_RESULT_CHARS),
        _ => collapse_whitespace(&e.summary),
    };
    let stream = match e.stream {
        EventStream::Stderr => "[stderr] ",
        EventStream::Stdout => "",
    };
    format!(
        "{}  {:<6}  {stream}{summary}",
        e.at.format("%H:%M:%S"),
        kind_label(e.kind)
    )
}

/// The line as the agent printed it, as far as the store kept it: the parsed JSON object
/// compact, or the raw text of a line that was not JSON.
pub fn raw_line(e: &TaskEvent) -> String {
    let not_json = e.kind == EventKind::Unknown && e.data.get("note").is_some();
    match e.data.get("raw").and_then(|r| r.as_str()) {
        Some(raw) if not_json => raw.to_string(),
        _ => e.data.to_string(),
    }
}

/// One NDJSON line of `logs --json`: the stored event plus which task and attempt.
#[derive(Debug, Serialize)]
pub struct EventJson<'a> {
    pub task: &'a str,
    pub attempt: u32,
    #[serde(flatten)]
    pub event: &'a TaskEvent,
}

/// `attempt 2 of local-1 · agent claude (identity personal) · branch polyphony/local-1-a2`.
pub fn attempt_header(a: &AttemptRecord) -> String {
    format!(
        "attempt {} of {} · agent {} (identity {}) · branch {} · started {}",
        a.attempt,
        a.task_id,
        a.agent,
        a.identity,
        a.branch,
        a.started_at.format("%Y-%m-%d %H:%M:%S UTC")
    )
}

/// How the attempt ended, or `None` while it runs.
pub fn attempt_footer(a: &AttemptRecord) -> Option<String> {
    let status = a.status?;
    let mut out = format!("attempt {} ended: {status}", a.attempt);
    if let Some(turns) = a.turns {
        out.push_str(&format!(", {turns} turns"));
    }
    if let Some(cost) = a.cost_usd {
        out.push_str(&format!(", ${cost:.4}"));
    }
    if let Some(secs) = a.duration_seconds {
        out.push_str(&format!(", {secs:.1}s"));
    }
    if let Some(reason) = &a.reason {
        out.push_str(&format!(" — {}", collapse_whitespace(reason)));
    }
    Some(out)
}

/// `0 B`, `512 B`, `1.5 KiB`, `3.2 MiB`, `4.0 GiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

fn collapse_whitespace(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whitespace collapsed, then cut to `max` characters with `…`.
pub fn truncate(s: &str, max: usize) -> String {
    let line = collapse_whitespace(s);
    if line.chars().count() <= max {
        return line;
    }
    let mut out: String = line.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// An attempt's egress as `status TASK --json` and `GET /api/v1/tasks/ID` show it (pure,
/// from its stored `egress` events): `summary` (the `status TASK` line), `allowed` (host,
/// port, connections, bytes up and down) and `refused` (host, port, reason, detail and the
/// `suggestion` line saying what to add; the first `egress::KEPT_REFUSALS`) and
/// `refusals` (every refusal counted: `total`, `stored` one by one, by reason, by target).
/// `null` when the attempt had no proxy or it logged nothing.
pub fn egress_json(events: &[TaskEvent]) -> serde_json::Value {
    use serde_json::{json, Value};
    let mut allowed = Value::Array(Vec::new());
    let mut summary = Value::Null;
    let mut refused = Vec::new();
    let mut counts = Value::Null;
    for e in events.iter().filter(|e| e.kind == EventKind::Egress) {
        match e.data.get("egress").and_then(|v| v.as_str()) {
            Some("summary") => {
                summary = Value::String(
                    e.summary
                        .strip_prefix("egress: ")
                        .unwrap_or(&e.summary)
                        .to_string(),
                );
                allowed = e.data.get("allowed").cloned().unwrap_or(allowed);
                // Every refusal counted; the first `egress::KEPT_REFUSALS` stored one by
                // one (a summary from before issue 25's cap has only the count).
                let total = e.data.get("refused").cloned().unwrap_or(Value::Null);
                let stored = e
                    .data
                    .get("refused_stored")
                    .cloned()
                    .unwrap_or(total.clone());
                counts = json!({
                    "total": total,
                    "stored": stored,
                    "by_reason": e.data.get("reasons"),
                    "by_target": e.data.get("targets"),
                    "other_targets": e.data.get("elsewhere"),
                    "log_lines_missed": e.data.get("missed"),
                });
            }
            Some("refused") => refused.push(json!({
                "host": e.data.get("host"),
                "port": e.data.get("port"),
                "reason": e.data.get("reason"),
                "detail": e.data.get("detail"),
                "suggestion": e.summary,
            })),
            _ => {}
        }
    }
    if summary.is_null() && refused.is_empty() {
        return Value::Null;
    }
    json!({ "summary": summary, "allowed": allowed, "refused": refused, "refusals": counts })
}

/// Adds each attempt's [`egress_json`] to a task detail (`{"attempts": [...]}`) as its
/// `egress` field; `events(attempt)` reads that attempt's egress events.
pub fn add_egress<E>(
    detail: &mut serde_json::Value,
    mut events: impl FnMut(u32) -> Result<Vec<TaskEvent>, E>,
) -> Result<(), E> {
    let Some(attempts) = detail.get_mut("attempts").and_then(|a| a.as_array_mut()) else {
        return Ok(());
    };
    for a in attempts {
        let Some(n) = a.get("attempt").and_then(|n| n.as_u64()) else {
            continue;
        };
        let value = egress_json(&events(n as u32)?);
        if let Some(obj) = a.as_object_mut() {
            obj.insert("egress".into(), value);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn egress_json_sums_the_stored_egress_events() {
        use crate::domain::{EventKind, EventStream, TaskEvent};
        let ev = |summary: &str, data: serde_json::Value| TaskEvent {
            seq: 0,
            kind: EventKind::Egress,
            stream: EventStream::Stdout,
            summary: summary.into(),
            data,
            at: chrono::Utc::now(),
        };
        assert!(super::egress_json(&[]).is_null());
        let events = vec![
            ev(
                "refused evil.example:443 (not on the allowlist) — to allow it add \"evil.example:443\" to egress.allow of profile claude in agents.yaml",
                serde_json::json!({"egress": "refused", "host": "evil.example", "port": 443, "reason": "not_allowed", "detail": ""}),
            ),
            ev(
                "egress: api.anthropic.com:443 ×2 (1 B up, 2 B down); refused 1: evil.example:443",
                serde_json::json!({"egress": "summary", "allowed": [{"host": "api.anthropic.com", "port": 443, "connections": 2, "bytes_up": 1, "bytes_down": 2}], "refused": 1}),
            ),
        ];
        let v = super::egress_json(&events);
        assert_eq!(v["allowed"][0]["connections"], 2);
        assert_eq!(v["refused"][0]["reason"], "not_allowed");
        assert!(v["refused"][0]["suggestion"]
            .as_str()
            .unwrap()
            .contains("to allow it add"));
        assert!(v["summary"]
            .as_str()
            .unwrap()
            .starts_with("api.anthropic.com:443 ×2"));
        let mut detail = serde_json::json!({"attempts": [{"attempt": 1}, {"attempt": 2}]});
        super::add_egress(&mut detail, |n| {
            Ok::<_, ()>(if n == 1 { events.clone() } else { Vec::new() })
        })
        .unwrap();
        assert_eq!(detail["attempts"][0]["egress"]["allowed"][0]["port"], 443);
        assert!(detail["attempts"][1]["egress"].is_null());
    }

    use super::*;
    use chrono::{TimeZone, Utc};
    use serde_json::json;

    fn ev(kind: EventKind, summary: &str, data: serde_json::Value) -> TaskEvent {
        TaskEvent {
            seq: 3,
            kind,
            stream: EventStream::Stdout,
            summary: summary.into(),
            data,
            at: Utc.with_ymd_and_hms(2026, 11, 3, 9, 5, 7).unwrap(),
        }
    }

    fn check(kind: EventKind, summary: &str, want: &str) {
        assert_eq!(event_line(&ev(kind, summary, json!({}))), want);
    }

    #[test]
    fn event_lines() {
        check(
            EventKind::ToolCall,
            "Bash: cargo test",
            "09:05:07  tool    Bash: cargo test",
        );
        check(
            EventKind::Message,
            "assistant: Fixed\nthe parser",
            "09:05:07  text    assistant: Fixed the parser",
        );
        check(
            EventKind::Error,
            "error: boom",
            "09:05:07  ERROR   error: boom",
        );
        check(
            EventKind::Unknown,
            "unknown: not JSON",
            "09:05:07  ?       unknown: not JSON",
        );
        let long = "x".repeat(300);
        let line = event_line(&ev(EventKind::ToolResult, &long, json!({})));
        assert!(line.ends_with('…'), "{line}");
        assert_eq!(
            line.chars().count(),
            "09:05:07  output  ".len() + TOOL_RESULT_CHARS
        );
    }

    #[test]
    fn stderr_is_marked() {
        let mut e = ev(EventKind::Unknown, "unknown: not JSON", json!({}));
        e.stream = EventStream::Stderr;
        assert_eq!(
            event_line(&e),
            "09:05:07  ?       [stderr] unknown: not JSON"
        );
    }

    #[test]
    fn raw_lines() {
        let obj = json!({"type": "assistant", "n": 1});
        assert_eq!(
            raw_line(&ev(EventKind::Message, "", obj.clone())),
            obj.to_string()
        );
        let text = json!({"raw": "plain text line", "note": "not JSON"});
        assert_eq!(
            raw_line(&ev(EventKind::Unknown, "", text)),
            "plain text line"
        );
        // An object the agent printed that happens to have a `raw` field stays JSON.
        let agent = json!({"raw": "x", "type": "tool"});
        assert_eq!(
            raw_line(&ev(EventKind::ToolCall, "", agent.clone())),
            agent.to_string()
        );
    }

    #[test]
    fn json_line_has_task_and_attempt() {
        let e = ev(EventKind::Usage, "usage: 10 in", json!({}));
        let v = serde_json::to_value(EventJson {
            task: "local-1",
            attempt: 2,
            event: &e,
        })
        .unwrap();
        assert_eq!(v["task"], "local-1");
        assert_eq!(v["attempt"], 2);
        assert_eq!(v["kind"], "usage");
        assert_eq!(v["seq"], 3);
    }

    #[test]
    fn bytes() {
        for (n, want) in [
            (0, "0 B"),
            (1023, "1023 B"),
            (1536, "1.5 KiB"),
            (5 * 1024 * 1024, "5.0 MiB"),
            (3 * 1024 * 1024 * 1024, "3.0 GiB"),
        ] {
            assert_eq!(human_bytes(n), want);
        }
    }

    #[test]
    fn truncation_counts_chars() {
        assert_eq!(truncate("héllo wörld", 5), "héll…");
        assert_eq!(truncate("short", 5), "short");
    }
}
