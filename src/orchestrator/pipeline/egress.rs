//! The attempt's egress proxy log, stored as the proxy writes it (issue 25): each refusal
//! becomes an `egress` event the moment the proxy logs it, and the allowed connections'
//! summary is kept up to date, so `status TASK`, the API, the dashboard, the event stream
//! and `/metrics` show them while the agent runs, and a daemon killed mid-attempt has
//! stored them already.
//!
//! The log is followed through the runtime (`WorkerRuntime::egress_follow`); the store keys
//! each row by the line's number in the proxy's whole log, which the proxy writes into it
//! (`n`: the engine's rotation of the log renumbers nothing), so the follower of a
//! re-attached attempt, which reads the log from its start again, stores nothing twice.
//! What is stored is bounded per attempt (the first `egress::KEPT_REFUSALS` refusals one
//! by one, the rest counted in the summary), and `/metrics` counts with each summary what
//! it counts beyond the last. [`Tally`] is the pure half: lines in, the report, the events
//! to store and the counts out.

use std::collections::BTreeMap;
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

/// How long a proxy asked to stop (SIGTERM) has to write its last line and exit before it
/// is killed (it takes a few milliseconds; an image whose proxy has no handler never does).
pub(super) const TERM_GRACE: Duration = Duration::from_millis(500);

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
/// `None` while it logged neither. Its data carries the report's counts, so a reader that
/// resumes (a re-attached attempt) knows what was counted, and `missed`: lines of the
/// proxy's log never read (the engine rotated the log before they were).
pub(crate) fn summary_event(
    report: &EgressReport,
    missed: u64,
    line: u64,
    at: DateTime<Utc>,
) -> Option<TaskEvent> {
    if report.allowed.is_empty() && report.refused_total == 0 {
        return None;
    }
    let mut summary = format!("egress: {}", report.summary());
    if missed > 0 {
        summary.push_str(&format!(
            "; {missed} line(s) of the proxy's log were never read (its log rotated before they were): not counted"
        ));
    }
    Some(TaskEvent {
        seq: line,
        kind: EventKind::Egress,
        stream: EventStream::Stdout,
        summary,
        data: serde_json::json!({
            "egress": "summary",
            "allowed": report.allowed,
            "refused": report.refused_total,
            "refused_stored": report.refused.len(),
            "reasons": report.refused_reasons,
            "targets": report.refused_targets,
            "elsewhere": report.refused_elsewhere,
            "missed": missed,
        }),
        at,
    })
}

/// What `/metrics` counts of an attempt's log: connections allowed, refusals by reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub allowed: u64,
    pub refused: BTreeMap<String, u64>,
}

impl Counts {
    fn of(report: &EgressReport) -> Counts {
        Counts {
            allowed: report.allowed_total(),
            refused: report.refused_reasons.clone(),
        }
    }

    /// What `self` holds beyond `earlier`.
    fn since(&self, earlier: &Counts) -> Counts {
        Counts {
            allowed: self.allowed.saturating_sub(earlier.allowed),
            refused: self
                .refused
                .iter()
                .filter_map(|(k, n)| {
                    let d = n.saturating_sub(earlier.refused.get(k).copied().unwrap_or(0));
                    (d > 0).then(|| (k.clone(), d))
                })
                .collect(),
        }
    }
}

/// What the store held of an attempt's egress when a reader began (a re-attached
/// attempt's follower, or a whole-log read after none).
#[derive(Debug, Clone, Default)]
pub(crate) struct Stored {
    /// The last log line its rows account for.
    pub line: Option<u64>,
    /// The latest summary: its line and the report it counted (refusals kept one by one
    /// from the stored refusal rows).
    pub summary: Option<(u64, EgressReport)>,
    /// The summary's line count of lines never read (`missed`).
    pub missed: u64,
}

impl Stored {
    /// From the attempt's stored `egress_events` rows (`Store::egress_rows_after`: the
    /// stored seq, twice the line, plus one for the summary), pure.
    pub fn from_rows(rows: &[(u64, TaskEvent)]) -> Stored {
        let mut stored = Stored {
            line: rows.iter().map(|(seq, _)| seq / 2).max(),
            ..Stored::default()
        };
        let mut refused = Vec::new();
        for (seq, e) in rows {
            if seq % 2 == 0 {
                if let Ok(r) = serde_json::from_value::<Refused>(e.data.clone()) {
                    refused.push(r);
                }
            } else {
                let d = &e.data;
                let report = EgressReport {
                    allowed: serde_json::from_value(d["allowed"].clone()).unwrap_or_default(),
                    refused_total: d["refused"].as_u64().unwrap_or(0),
                    refused_reasons: serde_json::from_value(d["reasons"].clone())
                        .unwrap_or_default(),
                    refused_targets: serde_json::from_value(d["targets"].clone())
                        .unwrap_or_default(),
                    refused_elsewhere: d["elsewhere"].as_u64().unwrap_or(0),
                    ..EgressReport::default()
                };
                stored.missed = d["missed"].as_u64().unwrap_or(0);
                stored.summary = Some((seq / 2, report));
            }
        }
        if let Some((_, report)) = &mut stored.summary {
            report.refused = refused;
        }
        stored
    }
}

/// What one line changed ([`Tally::feed`]).
#[derive(Debug, Default)]
pub(crate) struct Fed {
    /// The line was not stored before (by this follower, or by an earlier daemon's, as the
    /// store says).
    pub new: bool,
    /// The line's refusal, when it is kept one by one (within `egress::KEPT_REFUSALS`).
    pub refused: Option<Refused>,
    /// The line's model-API gateway record.
    pub gateway: Option<crate::gateway::RequestRecord>,
    /// The line is the proxy's last ([`LogLine::End`]): nothing follows it.
    pub end: bool,
}

/// What [`Tally::take`] hands the store and `/metrics`.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Taken {
    /// Refusals to store one by one.
    pub refused: Vec<TaskEvent>,
    /// The summary to store, when it changed.
    pub summary: Option<TaskEvent>,
    /// What `/metrics` has not counted yet (with the summary: it counts every line it
    /// covers once, the final one at the proxy's stop included).
    pub count: Counts,
}

/// An attempt's proxy log read so far (pure): the report, the next line expected, and the
/// events not stored yet. Lines are numbered by the proxy (`n`, in its whole log), so a
/// log the engine rotated keeps its numbers; a proxy that writes none is numbered by the
/// line's place in what the engine returned.
#[derive(Debug)]
pub(crate) struct Tally {
    pub report: EgressReport,
    /// Lines below it were fed.
    pub next: u64,
    /// A line was fed.
    started: bool,
    /// The last line the store accounted for when the reading began.
    stored: Option<u64>,
    /// The stored summary, to resume from when the log no longer starts at its first line.
    resume: Option<(u64, EgressReport)>,
    /// Lines at or below it are in the report already (resumed from the stored summary).
    resumed_through: Option<u64>,
    /// Lines never read: the log rotated before the reader reached them.
    pub missed: u64,
    profile: String,
    /// Refusals to store.
    pending: Vec<TaskEvent>,
    /// The summary changed since it was last stored.
    dirty: bool,
    /// When the last fed line was written (the proxy's `ts`, else when it was read).
    last_at: Option<DateTime<Utc>>,
    /// What `/metrics` counted of this attempt (this daemon's takes, on top of what the
    /// stored summary counted when the reading began).
    counted: Counts,
    /// Since when the store has failed to take what [`Tally::take`] gave (kept here).
    pub store_failed: Option<Instant>,
}

impl Tally {
    pub fn new(profile: &str, stored: Stored) -> Tally {
        Tally {
            report: EgressReport::default(),
            next: 0,
            started: false,
            stored: stored.line,
            counted: stored
                .summary
                .as_ref()
                .map(|(_, r)| Counts::of(r))
                .unwrap_or_default(),
            resume: stored.summary,
            resumed_through: None,
            missed: stored.missed,
            profile: profile.to_string(),
            pending: Vec::new(),
            dirty: false,
            last_at: None,
            store_failed: None,
        }
    }

    /// Feeds one line of the log; a line already fed (a whole-log read after a follower
    /// that stopped midway) is skipped.
    pub fn feed(&mut self, line: &ProxyLine, now: DateTime<Utc>) -> Fed {
        let numbered = LogLine::parse_numbered(line.text.as_bytes());
        let number = numbered.n.unwrap_or(line.number);
        if self.started && number < self.next {
            return Fed::default();
        }
        if !self.started {
            self.started = true;
            // The first line read is not the log's first: the engine rotated it before.
            // What the stored summary counted stands; the lines between it and this one
            // are gone, and said to be.
            let resume = self.resume.take();
            if number > 0 {
                match resume {
                    Some((through, report)) => {
                        self.missed += number.saturating_sub(through + 1);
                        self.report = report;
                        self.resumed_through = Some(through);
                    }
                    None => self.missed += number,
                }
                self.dirty = true;
            }
        } else if number > self.next {
            self.missed += number - self.next;
            self.dirty = true;
        }
        self.next = number + 1;
        if self.resumed_through.is_some_and(|t| number <= t) {
            return Fed::default();
        }
        let Some(parsed) = numbered.line else {
            return Fed::default();
        };
        let at = numbered.at.unwrap_or(now);
        self.last_at = Some(at);
        let mut fed = Fed {
            new: self.stored.is_none_or(|s| number > s),
            ..Fed::default()
        };
        let refusal = match &parsed {
            LogLine::Refused(r) => Some(r.clone()),
            LogLine::Allowed { .. } | LogLine::Closed { .. } => {
                self.dirty = true;
                None
            }
            LogLine::Gateway(record) => {
                fed.gateway = Some((**record).clone());
                None
            }
            LogLine::Ready { .. } => None,
            LogLine::End => {
                fed.end = true;
                None
            }
        };
        self.report.add(parsed);
        if let Some(r) = refusal {
            self.dirty = true;
            // The first `KEPT_REFUSALS` one by one; the rest are counted in the summary.
            if self.report.last_refusal_kept() {
                self.pending
                    .push(refusal_event(&r, &self.profile, number, at));
                fed.refused = Some(r);
            }
        }
        fed
    }

    /// Feeds a whole log (its lines numbered from 0 where the proxy numbers none).
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
    /// (or `always`), with what `/metrics` did not count yet.
    pub fn take(&mut self, always: bool) -> Taken {
        let mut taken = Taken {
            refused: std::mem::take(&mut self.pending),
            ..Taken::default()
        };
        if self.dirty || always {
            self.dirty = false;
            if let (Some(line), Some(at)) = (self.next.checked_sub(1), self.last_at) {
                taken.summary = summary_event(&self.report, self.missed, line, at);
            }
            let now = Counts::of(&self.report);
            taken.count = now.since(&self.counted);
            self.counted = now;
        }
        taken
    }

    /// Puts back refusals the store could not take (they are stored with the next), and
    /// marks the summary to be written again.
    pub fn restore(&mut self, mut refused: Vec<TaskEvent>) {
        refused.append(&mut self.pending);
        self.pending = refused;
        self.dirty = true;
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

    fn counts(allowed: u64, refused: &[(&str, u64)]) -> Counts {
        Counts {
            allowed,
            refused: refused.iter().map(|(k, n)| (k.to_string(), *n)).collect(),
        }
    }

    #[test]
    fn lines_fed_one_by_one_make_the_report_of_the_whole_log_and_each_refusal_once() {
        let mut live = Tally::new("claude", Stored::default());
        for (n, text) in LOG.lines().enumerate() {
            live.feed(&line(n as u64, text), now());
        }
        assert_eq!(live.report, EgressReport::from_log(LOG.as_bytes()));
        let taken = live.take(false);
        let (refused, summary) = (taken.refused, taken.summary);
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
        // Counted with the summary, once.
        assert_eq!(
            taken.count,
            counts(1, &[("ip_literal", 1), ("not_allowed", 1)])
        );
        // Nothing changed since: nothing to store.
        assert_eq!(live.take(false), Taken::default());
        // The whole log again (a follower that stopped midway): nothing is fed twice.
        let fed = live.feed_log(LOG.as_bytes(), now());
        assert!(fed.iter().all(|f| !f.new && f.refused.is_none()));
        assert_eq!(live.take(false), Taken::default());
        // The final summary is written all the same, and counts nothing twice.
        let last = live.take(true);
        assert!(last.summary.is_some());
        assert_eq!(last.count, Counts::default());
    }

    #[test]
    fn only_the_proxys_last_line_says_the_log_ended() {
        let mut t = Tally::new("claude", Stored::default());
        let before = t.report.clone();
        let ends: Vec<bool> = [
            r#"{"event":"ready","listen":"0.0.0.0:3128","n":0}"#,
            r#"{"event":"allowed","host":"a.example","port":443,"n":1}"#,
            r#"{"event":"end","ts":"2026-12-02T04:30:00.000Z","n":2}"#,
        ]
        .iter()
        .enumerate()
        .map(|(n, text)| t.feed(&line(n as u64, text), now()).end)
        .collect();
        assert_eq!(ends, vec![false, false, true]);
        // `end` counts nothing: the report is the allowed connection's alone.
        assert_ne!(t.report, before);
        assert_eq!(t.report.refused_total, 0);
    }

    #[test]
    fn a_re_attached_reader_marks_only_the_lines_after_the_stored_ones_new() {
        let mut again = Tally::new(
            "claude",
            Stored {
                line: Some(2),
                ..Stored::default()
            },
        );
        let fed = again.feed_log(LOG.as_bytes(), now());
        let new: Vec<bool> = fed.iter().map(|f| f.new).collect();
        // Lines 0..=2 were stored by the daemon before; line 3 is not JSON.
        assert_eq!(new, vec![false, false, false, false, true, true]);
        // The refusals are all handed to the store, which keeps the ones it has.
        assert_eq!(again.take(false).refused.len(), 2);
    }

    /// Issue 25: allowed connections logged after the last stored summary (a daemon killed
    /// before its next one, or the proxy killed within the second) are counted in
    /// `/metrics` by the next summary, the final one at the stop included, and what the
    /// stored summary counted is not counted again.
    #[test]
    fn what_the_last_stored_summary_did_not_count_the_final_one_counts() {
        let log = "{\"event\":\"allowed\",\"host\":\"a.example\",\"port\":443,\"n\":0}\n\
                   {\"event\":\"refused\",\"host\":\"evil.example\",\"port\":443,\"reason\":\"not_allowed\",\"n\":1}\n\
                   {\"event\":\"allowed\",\"host\":\"a.example\",\"port\":443,\"n\":2}\n\
                   {\"event\":\"allowed\",\"host\":\"a.example\",\"port\":443,\"n\":3}\n";
        // The first daemon stored the summary after line 1, then died.
        let mut first = Tally::new("claude", Stored::default());
        let lines: Vec<&str> = log.lines().collect();
        for (n, text) in lines.iter().take(2).enumerate() {
            first.feed(&line(n as u64, text), now());
        }
        let taken = first.take(false);
        assert_eq!(taken.count, counts(1, &[("not_allowed", 1)]));
        let rows: Vec<(u64, TaskEvent)> = taken
            .refused
            .iter()
            .map(|e| (2 * e.seq, e.clone()))
            .chain(taken.summary.iter().map(|e| (2 * e.seq + 1, e.clone())))
            .collect();
        // The next daemon's reader re-reads the whole log: the two later connections are
        // counted, by the final summary, and nothing before them.
        let mut next = Tally::new("claude", Stored::from_rows(&rows));
        next.feed_log(log.as_bytes(), now());
        let last = next.take(true);
        assert_eq!(last.count, counts(2, &[]));
        assert!(last.refused.iter().all(|e| e.seq == 1));
        assert!(last.summary.unwrap().summary.contains("a.example:443 ×3"));
    }

    /// Issue 25: a hostile agent's refusals without end are stored a bounded amount: the
    /// first `KEPT_REFUSALS` one by one, the rest counted (by reason for `/metrics`, by
    /// target for the summary, which says so).
    #[test]
    fn a_flood_of_refusals_stores_the_first_ones_and_counts_every_one() {
        let mut t = Tally::new("claude", Stored::default());
        let total = crate::egress::KEPT_REFUSALS as u64 * 3;
        let mut stored = 0;
        for n in 0..total {
            let text = format!(
                "{{\"event\":\"refused\",\"host\":\"h{}.example\",\"port\":443,\"reason\":\"not_allowed\",\"n\":{n}}}",
                n % 70
            );
            t.feed(&line(n, &text), now());
            stored += t.take(false).refused.len();
        }
        assert_eq!(stored, crate::egress::KEPT_REFUSALS);
        let last = t.take(true);
        let summary = last.summary.unwrap();
        assert_eq!(summary.data["refused"], total);
        assert_eq!(summary.data["refused_stored"], crate::egress::KEPT_REFUSALS);
        assert_eq!(
            summary.data["targets"].as_array().unwrap().len(),
            crate::egress::KEPT_TARGETS
        );
        assert!(
            summary
                .summary
                .contains(&format!("refused {total}: h0.example:443, h1.example:443")),
            "{}",
            summary.summary
        );
        assert!(
            summary.summary.contains(
                "refusal(s) of other targets (the first 200 stored one by one, the rest counted)"
            ),
            "{}",
            summary.summary
        );
        assert!(summary.summary.len() < 4096, "{}", summary.summary.len());
        assert_eq!(t.report.refused.len(), crate::egress::KEPT_REFUSALS);
    }

    /// Issue 25: the proxy numbers its lines (`n`), so a log the engine rotated (which
    /// starts again at its first byte, so the engine's numbering would start again at 0)
    /// neither collides with nor loses what was stored: a re-attached reader that finds
    /// the log rotated resumes from the stored summary and says how many lines it never
    /// read.
    #[test]
    fn a_rotated_log_keeps_the_proxys_numbers_and_resumes_from_the_stored_summary() {
        let refused = |n: u64, host: &str| {
            format!("{{\"event\":\"refused\",\"host\":\"{host}\",\"port\":443,\"reason\":\"not_allowed\",\"n\":{n}}}")
        };
        // A follower that read lines 0..=9 (the refusal at 9 stored) while the log rotated
        // after line 9: the engine's stream goes on with line 10 as its 11th line.
        let mut live = Tally::new("claude", Stored::default());
        live.feed(&line(0, &refused(9, "a.example")), now());
        let first = live.take(false);
        assert_eq!(first.refused[0].seq, 9);
        // After a rotation the engine gives the rest again from its place 0: keyed by the
        // proxy's number, line 10 is new and line 9 is not repeated.
        let fed = live.feed(&line(0, &refused(10, "b.example")), now());
        assert!(fed.refused.is_some());
        assert_eq!(live.take(false).refused[0].seq, 10);
        assert_eq!(live.missed, 9, "lines 0..=8 were never read");

        // A re-attached reader of a log rotated past what was stored: the stored summary
        // (through line 10, two refusals) stands, lines 11..=19 are gone, 20 is new.
        let rows: Vec<(u64, TaskEvent)> = vec![
            (
                18,
                refusal_event(&live.report.refused[0], "claude", 9, now()),
            ),
            (
                20,
                refusal_event(&live.report.refused[1], "claude", 10, now()),
            ),
            (
                21,
                summary_event(&live.report, 0, 10, now()).expect("a summary"),
            ),
        ];
        let mut again = Tally::new("claude", Stored::from_rows(&rows));
        again.feed_log(format!("{}\n", refused(20, "c.example")).as_bytes(), now());
        let taken = again.take(true);
        assert_eq!(taken.refused.len(), 1);
        assert_eq!(taken.refused[0].seq, 20);
        assert_eq!(taken.count, counts(0, &[("not_allowed", 1)]));
        let summary = taken.summary.unwrap();
        assert_eq!(summary.data["refused"], 3);
        assert_eq!(summary.data["missed"], 9);
        assert!(
            summary
                .summary
                .contains("9 line(s) of the proxy's log were never read"),
            "{}",
            summary.summary
        );
        assert_eq!(again.report.refused.len(), 3);
    }
}
