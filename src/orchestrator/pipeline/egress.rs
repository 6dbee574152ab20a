//! The attempt's egress proxy log, stored as the proxy writes it (issue 25): each refusal
//! becomes an `egress` event the moment the proxy logs it, and the allowed connections'
//! summary is kept up to date, so `status TASK`, the API, the dashboard, the event stream
//! and `/metrics` show them while the agent runs, and a daemon killed mid-attempt has
//! stored them already.
//!
//! The log is followed through the runtime (`WorkerRuntime::egress_follow`, numbered lines
//! from the proxy's first); the store keys each row by that line (`Store::record_egress`),
//! so the follower of a re-attached attempt, which reads the log from its first line again,
//! stores nothing twice. [`Tally`] is the pure half: lines in, the report and the events to
//! store out.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use crate::domain::{EventKind, EventStream, TaskEvent};
use crate::egress::{EgressReport, LogLine, Refused};
use crate::runtime::ProxyLine;

/// How often the summary of allowed connections is rewritten while the agent runs (a
/// refusal is stored at once).
pub(super) const SUMMARY_EVERY: Duration = Duration::from_secs(1);

/// How long the log may take to end once the agent has exited and the proxy was stopped;
/// past it the log is read whole instead (`WorkerRuntime::egress_stop`).
pub(super) const DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// One refusal's `egress` event (pure): the line that would allow it, at log line `line`.
pub(crate) fn refusal_event(r: &Refused, profile: &str, line: u64, at: DateTime<Utc>) -> TaskEvent {
    let why = crate::egress::policy::Refusal::from_code(&r.reason);
    let summary = match &why {
        Some(why) if !r.host.is_empty() => {
            crate::egress::policy::suggestion(&r.host, r.port, why, profile)
        }
        _ => format!("refused: {} {}", r.reason, r.detail)
            .trim()
            .to_string(),
    };
    TaskEvent {
        seq: line,
        kind: EventKind::Egress,
        stream: EventStream::Stdout,
        summary,
        data: serde_json::json!({ "egress": "refused", "host": r.host, "port": r.port, "reason": r.reason, "detail": r.detail }),
        at,
    }
}

/// The summary of what the proxy allowed and refused through log line `line` (pure);
/// `None` while it logged neither.
pub(crate) fn summary_event(
    report: &EgressReport,
    line: u64,
    at: DateTime<Utc>,
) -> Option<TaskEvent> {
    if report.allowed.is_empty() && report.refused.is_empty() {
        return None;
    }
    Some(TaskEvent {
        seq: line,
        kind: EventKind::Egress,
        stream: EventStream::Stdout,
        summary: format!("egress: {}", report.summary()),
        data: serde_json::json!({ "egress": "summary", "allowed": report.allowed, "refused": report.refused.len() }),
        at,
    })
}

/// What one line changed ([`Tally::feed`]).
#[derive(Debug, Default)]
pub(crate) struct Fed {
    /// The line was not read before (by this follower, or by an earlier daemon's, as the
    /// store says): its refusal is new, its connection counts for `/metrics`.
    pub new: bool,
    /// The line's refusal.
    pub refused: Option<Refused>,
    /// The line's connection was allowed.
    pub allowed: bool,
    /// The line's model-API gateway record.
    pub gateway: Option<crate::gateway::RequestRecord>,
}

/// An attempt's proxy log read so far (pure): the report, the next line expected, and the
/// events not stored yet.
#[derive(Debug)]
pub(crate) struct Tally {
    pub report: EgressReport,
    /// Lines below it were fed.
    pub next: u64,
    /// The last line the store accounted for when the reading began.
    stored: Option<u64>,
    profile: String,
    /// Refusals to store.
    pending: Vec<TaskEvent>,
    /// The summary changed since it was last stored.
    dirty: bool,
    /// When the last fed line was written (the proxy's `ts`, else when it was read).
    last_at: Option<DateTime<Utc>>,
}

impl Tally {
    pub fn new(profile: &str, stored: Option<u64>) -> Tally {
        Tally {
            report: EgressReport::default(),
            next: 0,
            stored,
            profile: profile.to_string(),
            pending: Vec::new(),
            dirty: false,
            last_at: None,
        }
    }

    /// Feeds line `line` of the log; a line already fed (a whole-log read after a follower
    /// that stopped midway) is skipped.
    pub fn feed(&mut self, line: &ProxyLine, now: DateTime<Utc>) -> Fed {
        if line.number < self.next {
            return Fed::default();
        }
        self.next = line.number + 1;
        let Some(parsed) = LogLine::parse(line.text.as_bytes()) else {
            return Fed::default();
        };
        let at = LogLine::time_of(line.text.as_bytes()).unwrap_or(now);
        self.last_at = Some(at);
        let mut fed = Fed {
            new: self.stored.is_none_or(|s| line.number > s),
            ..Fed::default()
        };
        match &parsed {
            LogLine::Refused(r) => {
                self.pending
                    .push(refusal_event(r, &self.profile, line.number, at));
                fed.refused = Some(r.clone());
                self.dirty = true;
            }
            LogLine::Allowed { .. } => {
                fed.allowed = true;
                self.dirty = true;
            }
            LogLine::Closed { .. } => self.dirty = true,
            LogLine::Gateway(record) => fed.gateway = Some((**record).clone()),
            LogLine::Ready { .. } => {}
        }
        self.report.add(parsed);
        fed
    }

    /// Feeds a whole log (its lines numbered from 0).
    pub fn feed_log(&mut self, log: &[u8], now: DateTime<Utc>) -> Vec<Fed> {
        let mut splitter = crate::runtime::stream::LineSplitter::default();
        let mut lines = splitter.push(log);
        lines.extend(splitter.finish());
        lines
            .into_iter()
            .enumerate()
            .map(|(n, l)| {
                self.feed(
                    &ProxyLine {
                        number: n as u64,
                        text: l.text,
                    },
                    now,
                )
            })
            .collect()
    }

    /// Whether there are refusals to store.
    pub fn has_refusals(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Takes what is to be stored: the refusals fed since, and the summary when it changed
    /// (or `always`).
    pub fn take(&mut self, always: bool) -> (Vec<TaskEvent>, Option<TaskEvent>) {
        let summary = if self.dirty || always {
            self.dirty = false;
            match (self.next.checked_sub(1), self.last_at) {
                (Some(line), Some(at)) => summary_event(&self.report, line, at),
                _ => None,
            }
        } else {
            None
        };
        (std::mem::take(&mut self.pending), summary)
    }

    /// Whether the summary changed since it was last taken.
    pub fn dirty(&self) -> bool {
        self.dirty
    }
}

/// A clock for [`SUMMARY_EVERY`]: when the summary is next due.
#[derive(Debug)]
pub(super) struct Due(Instant);

impl Due {
    pub fn now() -> Due {
        Due(Instant::now() + SUMMARY_EVERY)
    }
    pub fn at(&self) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(n: u64, text: &str) -> ProxyLine {
        ProxyLine {
            number: n,
            text: text.to_string(),
        }
    }

    fn now() -> DateTime<Utc> {
        "2026-12-01T12:00:00Z".parse().unwrap()
    }

    const LOG: &str = r#"{"event":"ready","listen":"0.0.0.0:3128","ts":"2026-12-01T11:00:00.000Z"}
{"event":"refused","host":"evil.example","port":443,"reason":"not_allowed","detail":"","ts":"2026-12-01T11:00:01.000Z"}
{"event":"allowed","host":"api.anthropic.com","port":443,"addr":"1.2.3.4:443"}
not json
{"event":"closed","host":"api.anthropic.com","port":443,"bytes_up":5,"bytes_down":7}
{"event":"refused","host":"10.0.0.1","port":80,"reason":"ip_literal","detail":""}
"#;

    #[test]
    fn lines_fed_one_by_one_make_the_report_of_the_whole_log_and_each_refusal_once() {
        let mut live = Tally::new("claude", None);
        for (n, text) in LOG.lines().enumerate() {
            live.feed(&line(n as u64, text), now());
        }
        assert_eq!(live.report, EgressReport::from_log(LOG.as_bytes()));
        let (refused, summary) = live.take(false);
        assert_eq!(refused.len(), 2);
        assert_eq!(refused[0].seq, 1);
        assert_eq!(
            refused[0].at,
            "2026-12-01T11:00:01Z".parse::<DateTime<Utc>>().unwrap()
        );
        assert_eq!(
            refused[0].summary,
            "refused evil.example:443 (not on the allowlist) — to allow it add \"evil.example:443\" to egress.allow of profile claude in agents.yaml"
        );
        assert_eq!(refused[1].seq, 5);
        let summary = summary.expect("a summary");
        assert_eq!(summary.seq, 5);
        assert!(summary
            .summary
            .starts_with("egress: api.anthropic.com:443 ×1"));
        // Nothing changed since: nothing to store.
        assert_eq!(live.take(false), (vec![], None));
        // The whole log again (a follower that stopped midway): nothing is fed twice.
        let fed = live.feed_log(LOG.as_bytes(), now());
        assert!(fed.iter().all(|f| !f.new && f.refused.is_none()));
        assert_eq!(live.take(false), (vec![], None));
    }

    #[test]
    fn a_re_attached_reader_marks_only_the_lines_after_the_stored_ones_new() {
        let mut again = Tally::new("claude", Some(2));
        let fed = again.feed_log(LOG.as_bytes(), now());
        let new: Vec<bool> = fed.iter().map(|f| f.new).collect();
        // Lines 0..=2 were stored by the daemon before; line 3 is not JSON.
        assert_eq!(new, vec![false, false, false, false, true, true]);
        // The refusals are all handed to the store, which keeps the ones it has.
        assert_eq!(again.take(false).0.len(), 2);
    }
}
