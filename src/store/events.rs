//! Events: an attempt's stdout/stderr lines, appended idempotently by sequence number so a
//! re-attached stream resumes where it stopped.

use super::sql::params;

use super::{json_col, parse_col, time_col, to_json, ts, Result, Store};
use crate::domain::{EventKind, EventStream, TaskEvent};

impl Store {
    /// Appends events of one attempt in a single transaction. Events whose `seq` is
    /// already stored are skipped, so re-ingesting after a crash never duplicates.
    /// Returns how many were new.
    pub fn append_events(
        &self,
        task_id: &str,
        attempt: u32,
        events: &[TaskEvent],
    ) -> Result<usize> {
        self.immediate(|tx| {
            let mut inserted = 0;
            for e in events {
                let data = to_json("event data", &e.data)?;
                inserted += tx.execute(
                    "INSERT INTO events (task_id, attempt, seq, kind, stream, summary, data, at) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT DO NOTHING",
                    params![
                        task_id,
                        attempt,
                        e.seq as i64,
                        e.kind.as_str(),
                        e.stream.as_str(),
                        e.summary,
                        data,
                        ts(e.at)
                    ],
                )?;
            }
            Ok(inserted)
        })
    }

    /// How many stdout/stderr lines of an attempt are stored: one past the highest seq
    /// (seqs are dense from 0), so a re-attached stream resumes exactly there.
    pub fn event_count(&self, task_id: &str, attempt: u32) -> Result<u64> {
        let max: Option<i64> = self.db.query_row(
            "SELECT MAX(seq) FROM events WHERE task_id = ?1 AND attempt = ?2",
            params![task_id, attempt],
            |r| r.get(0),
        )?;
        Ok(max.map_or(0, |m| m as u64 + 1))
    }

    /// Events of one attempt with `seq` greater than `after_seq`, in order, at most `limit`.
    pub fn events(
        &self,
        task_id: &str,
        attempt: u32,
        after_seq: Option<u64>,
        limit: usize,
    ) -> Result<Vec<TaskEvent>> {
        let after = after_seq.map_or(-1, |s| s as i64);
        self.db.query_map(
            "SELECT seq, kind, stream, summary, data, at FROM events \
             WHERE task_id = ?1 AND attempt = ?2 AND seq > ?3 ORDER BY seq LIMIT ?4",
            params![task_id, attempt, after, limit as i64],
            |r| {
                let stream: String = r.get(2)?;
                Ok(TaskEvent {
                    seq: r.get::<i64>(0)? as u64,
                    kind: parse_col::<EventKind>(r, 1)?,
                    stream: match stream.as_str() {
                        "stderr" => EventStream::Stderr,
                        _ => EventStream::Stdout,
                    },
                    summary: r.get(3)?,
                    data: json_col(r, 4)?,
                    at: time_col(r, 5)?,
                })
            },
        )
    }

    /// Records what an attempt's egress proxy logged (issue 25), as it logs it: each
    /// refusal under its log line (`TaskEvent::seq`), and `summary` (the allowed
    /// connections so far, `seq` the last line it counts), which replaces an older one.
    /// Lines already stored are skipped, so a log read again (a re-attached attempt's
    /// follower starts at the proxy's first line) never duplicates. Returns how many
    /// refusals were new.
    pub fn record_egress(
        &self,
        task_id: &str,
        attempt: u32,
        refused: &[TaskEvent],
        summary: Option<&TaskEvent>,
    ) -> Result<usize> {
        let insert = "INSERT INTO egress_events (task_id, attempt, seq, what, summary, data, at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT DO NOTHING";
        self.immediate(|tx| {
            let mut inserted = 0;
            for e in refused {
                let data = to_json("egress event data", &e.data)?;
                inserted += tx.execute(
                    insert,
                    params![
                        task_id,
                        attempt,
                        (2 * e.seq) as i64,
                        "refused",
                        e.summary,
                        data,
                        ts(e.at)
                    ],
                )?;
            }
            if let Some(e) = summary {
                let seq = (2 * e.seq + 1) as i64;
                let data = to_json("egress event data", &e.data)?;
                let newest: Option<i64> = tx.query_row(
                    "SELECT MAX(seq) FROM egress_events \
                     WHERE task_id = ?1 AND attempt = ?2 AND what = 'summary'",
                    params![task_id, attempt],
                    |r| r.get(0),
                )?;
                // An older summary (a log read again) does not replace a newer one.
                if newest.is_none_or(|n| n < seq)
                    && tx.execute(
                        insert,
                        params![task_id, attempt, seq, "summary", e.summary, data, ts(e.at)],
                    )? > 0
                {
                    tx.execute(
                        "DELETE FROM egress_events WHERE task_id = ?1 AND attempt = ?2 \
                         AND what = 'summary' AND seq < ?3",
                        params![task_id, attempt, seq],
                    )?;
                }
            }
            Ok(inserted)
        })
    }

    /// The last proxy log line of an attempt its stored egress events account for.
    pub fn egress_line(&self, task_id: &str, attempt: u32) -> Result<Option<u64>> {
        let max: Option<i64> = self.db.query_row(
            "SELECT MAX(seq) FROM egress_events WHERE task_id = ?1 AND attempt = ?2",
            params![task_id, attempt],
            |r| r.get(0),
        )?;
        Ok(max.map(|m| m as u64 / 2))
    }

    /// The `egress` events of one attempt (its refusals, then its summary), each `seq` the
    /// proxy's log line it comes from. An attempt that ended before issue 25's live events
    /// has them in `events`, stored when it ended: those come first.
    pub fn egress_events(&self, task_id: &str, attempt: u32) -> Result<Vec<TaskEvent>> {
        let mut out = self.db.query_map(
            "SELECT seq, kind, stream, summary, data, at FROM events \
             WHERE task_id = ?1 AND attempt = ?2 AND kind = 'egress' ORDER BY seq",
            params![task_id, attempt],
            |r| {
                Ok(TaskEvent {
                    seq: r.get::<i64>(0)? as u64,
                    kind: parse_col::<EventKind>(r, 1)?,
                    stream: EventStream::Stdout,
                    summary: r.get(3)?,
                    data: json_col(r, 4)?,
                    at: time_col(r, 5)?,
                })
            },
        )?;
        out.extend(self.egress_events_after(task_id, attempt, None)?);
        Ok(out)
    }

    /// The live `egress` events of one attempt (refusals by log line, then the summary)
    /// with a stored `seq` above `after` (`egress_events`' rows: twice the line, plus one
    /// for the summary), with that stored seq; for a reader following them.
    pub fn egress_rows_after(
        &self,
        task_id: &str,
        attempt: u32,
        after: Option<u64>,
    ) -> Result<Vec<(u64, TaskEvent)>> {
        let after = after.map_or(-1, |s| s as i64);
        self.db.query_map(
            "SELECT seq, summary, data, at FROM egress_events \
             WHERE task_id = ?1 AND attempt = ?2 AND seq > ?3 ORDER BY seq",
            params![task_id, attempt, after],
            |r| {
                let seq = r.get::<i64>(0)? as u64;
                Ok((
                    seq,
                    TaskEvent {
                        seq: seq / 2,
                        kind: EventKind::Egress,
                        stream: EventStream::Stdout,
                        summary: r.get(1)?,
                        data: json_col(r, 2)?,
                        at: time_col(r, 3)?,
                    },
                ))
            },
        )
    }

    fn egress_events_after(
        &self,
        task_id: &str,
        attempt: u32,
        after: Option<u64>,
    ) -> Result<Vec<TaskEvent>> {
        let mut rows = self.egress_rows_after(task_id, attempt, after)?;
        // Refusals in log order, the summary (one) last.
        rows.sort_by_key(|(seq, _)| (seq % 2, *seq));
        Ok(rows.into_iter().map(|(_, e)| e).collect())
    }
}
