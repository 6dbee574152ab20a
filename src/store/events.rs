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

    /// The `egress` events of one attempt (its refusals and its summary), in order.
    pub fn egress_events(&self, task_id: &str, attempt: u32) -> Result<Vec<TaskEvent>> {
        self.db.query_map(
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
        )
    }
}
