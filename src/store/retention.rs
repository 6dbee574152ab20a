//! What the retention policy (issue 24, `ops::retention`) reads and removes in the store:
//! finished tasks whose per-attempt notes are still kept, the notes themselves, events of
//! attempts that ended long ago, and the disk figure the daemon measured last.
//!
//! Plain SQL every backend speaks (no `LIMIT` on `DELETE`, no SQLite-only functions):
//! timestamps are the fixed-width UTC text of `rows::ts`, so they compare as text.
//!
//! Must not: decide what may go (that is `ops::retention` over `ops::cleanup`'s plan); it
//! finds and removes what it is told.

use super::sql::params;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::attempt_notes::{
    chain_key, commit_key, giveups_key, handling_key, strikes_key, workspace_key,
};
use super::{parse_col, to_json, ts, Result, Store};
use crate::domain::TaskState;

/// kv: the disk figure the daemon measured last (JSON [`DiskUsage`]).
const DISK_USAGE_KEY: &str = "disk_usage";

/// A finished task that still has per-attempt notes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndedTask {
    pub id: String,
    pub state: TaskState,
    /// How many attempts it made (notes are kept per attempt, 1..=attempts).
    pub attempts: u32,
}

/// Bytes on disk a home uses, as measured at `measured_at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskUsage {
    /// Everything under `workspace_root` (attempt clones, check checkouts, `N.land.git`).
    pub workspaces: u64,
    /// Everything under `mirror_root`.
    pub mirrors: u64,
    /// `$POLYPHONY_HOME/transcripts`.
    pub transcripts: u64,
    /// `queue.db` with its `-wal` and `-shm`.
    pub queue: u64,
    pub measured_at: DateTime<Utc>,
}

/// Every per-task note key of a task with `attempts` attempts.
fn note_keys(task_id: &str, attempts: u32) -> Vec<String> {
    let mut keys = vec![chain_key(task_id), giveups_key(task_id)];
    for n in 1..=attempts.max(1) {
        keys.push(workspace_key(task_id, n));
        keys.push(commit_key(task_id, n));
        keys.push(handling_key(task_id, n));
        keys.push(strikes_key(task_id, n));
        keys.push(super::quota::handoff_key(task_id, n));
    }
    keys
}

impl Store {
    /// LANDED and BLOCKED tasks last changed before `cutoff` that still have notes (their
    /// routed chain, or their latest attempt's workspace), oldest first, at most `limit`.
    /// Notes are removed with the workspaces, so each task comes back here until both
    /// are gone.
    pub fn ended_tasks_with_notes(
        &self,
        cutoff: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<EndedTask>> {
        let stmt_sql = "SELECT t.id, t.state, t.attempts FROM tasks t \
             WHERE t.state IN ('LANDED', 'BLOCKED') AND t.updated_at < ?1 \
             AND EXISTS (SELECT 1 FROM kv k WHERE k.key = 'chain:' || t.id \
                 OR k.key = 'workspace:' || t.id || ':' || t.attempts) \
             ORDER BY t.updated_at LIMIT ?2";
        let rows = self
            .db
            .query_map(stmt_sql, params![ts(cutoff), limit as i64], |r| {
                Ok(EndedTask {
                    id: r.get(0)?,
                    state: parse_col(r, 1)?,
                    attempts: r.get::<i64>(2)?.max(0) as u32,
                })
            })?;
        Ok(rows)
    }

    /// Removes a finished task's per-attempt notes (workspace, chain, landing commit,
    /// restart breadcrumbs and strikes, give-ups, quota handoff); returns how many rows
    /// went. Its transitions, attempts, landing and generation links stay.
    pub fn forget_task_notes(&self, task_id: &str, attempts: u32) -> Result<usize> {
        let keys = note_keys(task_id, attempts);
        self.atomic(|conn| {
            let stmt_sql = "DELETE FROM kv WHERE key = ?1";
            let mut n = 0;
            for k in &keys {
                n += conn.execute(stmt_sql, params![k])?;
            }
            Ok(n)
        })
    }

    /// Attempts that ended before `cutoff` and still have events, oldest first, at most
    /// `limit`.
    pub fn attempts_with_events_before(
        &self,
        cutoff: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<(String, u32)>> {
        let stmt_sql = "SELECT a.task_id, a.attempt FROM attempts a \
             WHERE a.finished_at IS NOT NULL AND a.finished_at < ?1 \
             AND EXISTS (SELECT 1 FROM events e \
                 WHERE e.task_id = a.task_id AND e.attempt = a.attempt) \
             ORDER BY a.finished_at LIMIT ?2";
        let rows = self
            .db
            .query_map(stmt_sql, params![ts(cutoff), limit as i64], |r| {
                Ok((r.get::<String>(0)?, r.get::<i64>(1)?.max(0) as u32))
            })?;
        Ok(rows)
    }

    /// Removes one attempt's events; returns how many went. The attempt row (its result,
    /// evidence and event count in `status`) stays.
    pub fn delete_attempt_events(&self, task_id: &str, attempt: u32) -> Result<usize> {
        self.atomic(|conn| {
            conn.execute(
                "DELETE FROM events WHERE task_id = ?1 AND attempt = ?2",
                params![task_id, attempt],
            )
        })
    }

    /// Records the disk figure (the daemon, after each retention sweep).
    pub fn note_disk_usage(&self, usage: &DiskUsage) -> Result<()> {
        let json = to_json("disk usage", usage)?;
        self.kv_set(DISK_USAGE_KEY, &json, usage.measured_at)
    }

    /// The disk figure the daemon measured last, if any.
    pub fn disk_usage(&self) -> Result<Option<DiskUsage>> {
        Ok(self
            .kv_get(DISK_USAGE_KEY)?
            .and_then(|j| serde_json::from_str(&j).ok()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{SourceKind, Task};

    fn at(h: i64) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-12-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
            + chrono::Duration::hours(h)
    }

    fn task(store: &Store, id: &str, to: &[TaskState], when: DateTime<Utc>) {
        let t = Task::new(
            id,
            SourceKind::Local,
            format!("local:{id}"),
            "/r",
            "t",
            when,
        );
        store.insert_task(&t).unwrap();
        let mut from = TaskState::Discovered;
        for s in to {
            store.transition(id, from, *s, "test", when).unwrap();
            from = *s;
        }
    }

    #[test]
    fn finished_tasks_with_notes_are_found_and_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("q.db")).unwrap();
        use TaskState::*;
        let landed = [Claimed, Routed, Provisioned, Running, Verifying, Landed];
        task(&store, "old", &landed, at(0));
        task(&store, "new", &landed, at(30));
        task(&store, "running", &landed[..4], at(0));
        task(&store, "bare", &landed, at(0));
        for id in ["old", "new", "running"] {
            store.note_chain(id, &["claude".into()], at(0)).unwrap();
            store.set_strikes(id, 1, 2, at(0)).unwrap();
        }
        store.kv_set("retry_of:old", "x", at(0)).unwrap();
        let found = store.ended_tasks_with_notes(at(24), 10).unwrap();
        assert_eq!(
            found,
            vec![EndedTask {
                id: "old".into(),
                state: Landed,
                attempts: 0
            }]
        );
        assert_eq!(store.forget_task_notes("old", 1).unwrap(), 2);
        assert!(store.ended_tasks_with_notes(at(24), 10).unwrap().is_empty());
        assert_eq!(store.kv_get("chain:old").unwrap(), None);
        // Generation links are history, not notes.
        assert_eq!(store.kv_get("retry_of:old").unwrap().as_deref(), Some("x"));
        assert!(store.kv_get("chain:running").unwrap().is_some());
    }

    #[test]
    fn disk_usage_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("q.db")).unwrap();
        assert_eq!(store.disk_usage().unwrap(), None);
        let u = DiskUsage {
            workspaces: 1,
            mirrors: 2,
            transcripts: 3,
            queue: 4,
            measured_at: at(1),
        };
        store.note_disk_usage(&u).unwrap();
        assert_eq!(store.disk_usage().unwrap(), Some(u));
    }
}
