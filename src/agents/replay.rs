//! Replaying a saved transcript through an adapter (spec §9, `polyphony replay`).
//!
//! Streams the file line by line with a fixed-size buffer: memory does not grow with the
//! file, and a line over [`MAX_LINE_BYTES`] keeps only its first MiB, is classified
//! `unknown` with a note, and the rest is skipped. Blank lines are not events.
//!
//! Architecture Invariant: reads only the `BufRead` it is handed; the CLI opens the file.

use serde::Serialize;
use std::borrow::Cow;
use std::io::{self, BufRead};

use super::common::{one_line, unknown};
use super::{AgentAdapter, AgentOutcome, Classified, MAX_LINE_BYTES};
use crate::domain::{AgentType, EventKind};

/// How the run ended, as far as the transcript says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReplayStatus {
    Succeeded,
    Failed,
    /// A usage or rate limit stopped the run.
    Quota,
    /// No completion and no error: the stream was cut (kill, crash, still running).
    Incomplete,
}

impl ReplayStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ReplayStatus::Succeeded => "succeeded",
            ReplayStatus::Failed => "failed",
            ReplayStatus::Quota => "quota",
            ReplayStatus::Incomplete => "incomplete",
        }
    }
}

/// The verdict on an outcome: success wins, then quota, then failure, else incomplete.
pub fn status_of(outcome: &AgentOutcome) -> ReplayStatus {
    if outcome.succeeded {
        ReplayStatus::Succeeded
    } else if outcome.quota.is_some() {
        ReplayStatus::Quota
    } else if outcome.completed || outcome.error.is_some() {
        ReplayStatus::Failed
    } else {
        ReplayStatus::Incomplete
    }
}

/// What a transcript contains and how the run ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplaySummary {
    pub agent: AgentType,
    /// Non-blank lines classified.
    pub lines: u64,
    pub blank_lines: u64,
    pub bytes: u64,
    /// Lines over 1 MiB that were cut.
    pub truncated_lines: u64,
    /// One entry per [`EventKind`], in `EventKind::ALL` order (a JSON object).
    #[serde(serialize_with = "counts_as_map")]
    pub counts: Vec<(EventKind, u64)>,
    pub status: ReplayStatus,
    pub outcome: AgentOutcome,
    /// Lines after the CLI's final report: classified and counted, never folded into the
    /// outcome (as in the live runtime).
    pub lines_after_final: u64,
}

fn counts_as_map<S: serde::Serializer>(
    counts: &[(EventKind, u64)],
    ser: S,
) -> Result<S::Ok, S::Error> {
    ser.collect_map(counts.iter().map(|(k, n)| (k.as_str(), n)))
}

impl ReplaySummary {
    pub fn count(&self, kind: EventKind) -> u64 {
        self.counts
            .iter()
            .find(|(k, _)| *k == kind)
            .map_or(0, |(_, n)| *n)
    }
}

/// Classifies and observes every line of `reader`.
pub fn replay<R: BufRead>(mut reader: R, adapter: &dyn AgentAdapter) -> io::Result<ReplaySummary> {
    let mut counts = [0u64; EventKind::ALL.len()];
    let mut outcome = AgentOutcome::default();
    let mut summary_lines = 0u64;
    let mut blank = 0u64;
    let mut bytes = 0u64;
    let mut truncated = 0u64;
    let mut line: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut overflow = false;
    let mut line_len = 0usize;
    let mut final_seen = false;
    let mut after_final = 0u64;

    let mut handle = |line: &[u8], cut: bool, len: usize, outcome: &mut AgentOutcome| {
        let text: Cow<'_, str> = String::from_utf8_lossy(line);
        if !cut && text.trim().is_empty() {
            blank += 1;
            return;
        }
        let event: Classified = if cut {
            truncated += 1;
            let mut ev = unknown(&text, "line over 1 MiB, truncated");
            ev.data["bytes"] = serde_json::Value::from(len);
            ev.data["truncated"] = serde_json::Value::Bool(true);
            ev
        } else {
            let (event, folded) = super::fold(adapter, outcome, &mut final_seen, &text);
            if !folded {
                after_final += 1;
            }
            event
        };
        summary_lines += 1;
        if let Some(i) = EventKind::ALL.iter().position(|k| *k == event.kind) {
            counts[i] += 1;
        }
    };

    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        let (chunk, consumed, ends_line) = match memchr::memchr(b'\n', buf) {
            Some(i) => (&buf[..i], i + 1, true),
            None => (buf, buf.len(), false),
        };
        line_len += chunk.len();
        if !overflow {
            let room = MAX_LINE_BYTES.saturating_sub(line.len());
            if chunk.len() > room {
                line.extend_from_slice(&chunk[..room]);
                overflow = true;
            } else {
                line.extend_from_slice(chunk);
            }
        }
        bytes += consumed as u64;
        reader.consume(consumed);
        if ends_line {
            let body = strip_cr(&line);
            handle(body, overflow, line_len, &mut outcome);
            line.clear();
            overflow = false;
            line_len = 0;
        }
    }
    if !line.is_empty() || overflow {
        let body = strip_cr(&line);
        handle(body, overflow, line_len, &mut outcome);
    }

    Ok(ReplaySummary {
        agent: adapter.agent_type(),
        lines: summary_lines,
        blank_lines: blank,
        bytes,
        truncated_lines: truncated,
        counts: EventKind::ALL.iter().copied().zip(counts).collect(),
        status: status_of(&outcome),
        outcome,
        lines_after_final: after_final,
    })
}

fn strip_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// The human-readable report `polyphony replay` prints.
pub fn render_text(s: &ReplaySummary, source: &str) -> String {
    let o = &s.outcome;
    let mut out = String::new();
    out.push_str(&format!(
        "transcript: {source} ({} lines, {} bytes) parsed as {}\n",
        s.lines, s.bytes, s.agent
    ));
    let counts: Vec<String> = s
        .counts
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    out.push_str(&format!("events: {}\n", counts.join(", ")));
    if s.truncated_lines > 0 {
        out.push_str(&format!(
            "note: {} line(s) over 1 MiB were cut and counted as unknown\n",
            s.truncated_lines
        ));
    }
    out.push_str(&format!("status: {}\n", s.status.as_str()));
    out.push_str(&format!("turns: {}\n", o.turns));
    out.push_str(&format!(
        "tokens: input {} (cached {}), output {}\n",
        o.tokens.input, o.tokens.cached_input, o.tokens.output
    ));
    out.push_str(&match o.cost_usd {
        Some(c) => format!("cost: ${c:.4}\n"),
        None => "cost: not reported\n".to_string(),
    });
    if let Some(q) = &o.quota {
        let resets = q
            .resets_at
            .as_deref()
            .map(|r| format!(" (resets {})", crate::domain::when::reset_absolute(r)))
            .unwrap_or_default();
        out.push_str(&format!(
            "quota: {}{resets}\n",
            crate::domain::when::without_epoch_tail(&q.message)
        ));
    }
    if let Some(e) = &o.error {
        out.push_str(&format!("error: {}\n", one_line(e, 300)));
    }
    if let Some(m) = &o.final_message {
        out.push_str(&format!("final message: {}\n", one_line(m, 500)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::adapter_for;

    fn run(agent: AgentType, input: &[u8]) -> ReplaySummary {
        let adapter = adapter_for(agent);
        match replay(io::BufReader::with_capacity(16, input), adapter.as_ref()) {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn counts_blank_crlf_and_unterminated_lines() {
        let s = run(
            AgentType::Codex,
            b"{\"type\":\"turn.started\"}\r\n\n  \nnot json\n{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":5}}",
        );
        assert_eq!(s.lines, 3);
        assert_eq!(s.blank_lines, 2);
        assert_eq!(s.count(EventKind::System), 1);
        assert_eq!(s.count(EventKind::Unknown), 1);
        assert_eq!(s.count(EventKind::Result), 1);
        assert_eq!(s.status, ReplayStatus::Succeeded);
        assert_eq!(s.outcome.tokens.input, 5);
    }

    #[test]
    fn huge_line_is_cut_and_unknown() {
        let mut input =
            b"{\"type\":\"assistant\",\"message\":{\"content\":[{\"type\":\"text\",\"text\":\""
                .to_vec();
        input.extend(std::iter::repeat_n(b'a', MAX_LINE_BYTES + 10));
        input.extend_from_slice(b"\"}]}}\n{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"num_turns\":1}\n");
        let s = run(AgentType::Claude, &input);
        assert_eq!(s.truncated_lines, 1);
        assert_eq!(s.count(EventKind::Unknown), 1);
        assert_eq!(s.count(EventKind::Result), 1);
        assert_eq!(s.status, ReplayStatus::Succeeded);
        assert_eq!(s.bytes, input.len() as u64);
    }

    #[test]
    fn empty_input_is_incomplete() {
        let s = run(AgentType::Gemini, b"");
        assert_eq!(s.lines, 0);
        assert_eq!(s.status, ReplayStatus::Incomplete);
        assert!(render_text(&s, "x").contains("status: incomplete"));
    }

    #[test]
    fn invalid_utf8_is_unknown_not_a_panic() {
        let s = run(AgentType::Kimi, b"\xff\xfe{\n");
        assert_eq!(s.count(EventKind::Unknown), 1);
    }
}
