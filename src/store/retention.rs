//! What the retention policy (issue 24, `ops::retention`) reads and removes in the store:
//! finished tasks whose per-attempt notes are still kept, the notes themselves, events of
//! attempts that ended long ago, and the disk figure the daemon measured last.
//!
//! Plain SQL every backend speaks (no `LIMIT` on `DELETE`, no SQLite-only functions):
//! timestamps are the fixed-width UTC text of `rows::ts`, so they compare as text. Notes
//! are found by key range (`key >= 'chain:' AND key < 'chain;'`), an index scan anywhere.
//!
//! **Giving the space back** ([`Store::reclaim_space`], SQLite only): deleted rows leave
//! free pages inside `queue.db`, which SQLite reuses but never returns, so without this the
//! file only grows. The choice, measured on a 94 MiB queue with half its events removed
//! (docs/benchmarks.md "Queue space", `bench/vacuum.sh`):
//! - a full `VACUUM` rewrites the whole file: it needs free disk about twice the file (a
//!   temporary copy, then the copy in the WAL) and holds the write lock throughout (4.0 s
//!   for 94 MiB on the loaded build machine, so the 30 s busy timeout of every other
//!   writer near 700 MB);
//! - `auto_vacuum = INCREMENTAL` keeps a map of page owners, so `PRAGMA
//!   incremental_vacuum(N)` moves N pages from the end into free slots and truncates: the
//!   cost is the pages moved, not the file, it needs no extra disk, and taken in steps of
//!   [`RECLAIM_STEP_PAGES`] the lock is held under a second at a time (4.4 s in all for the
//!   same 94 MiB, at most 740 ms per step).
//!
//! So new queues are made incremental (`Store::open`, before the first table; the mode can
//! change only then or by a `VACUUM`), and each retention sweep frees the free pages in
//! steps, then truncates the WAL (`wal_checkpoint(TRUNCATE)`: in WAL mode the file
//! shrinks at a checkpoint). A queue made before this (mode `NONE`) is converted by one
//! `VACUUM` at the first sweep where that pays: at least [`CONVERT_MIN_FREE`] bytes and a
//! quarter of the file free, at most [`CONVERT_MAX_BYTES`] large (the lock), and twice its
//! size free on disk; a larger one is left as it is, with a warning saying how to convert
//! it with the daemon stopped.
//!
//! Must not: decide what may go (that is `ops::retention` over `ops::cleanup`'s plan); it
//! finds and removes what it is told.

use std::collections::BTreeSet;

use super::sql::params;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

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

/// Free pages freed per `incremental_vacuum` step (8 MiB of 4 KiB pages): the write lock
/// is released between steps.
pub const RECLAIM_STEP_PAGES: u64 = 2048;

/// A queue made before incremental vacuum is converted only with this much free inside.
pub const CONVERT_MIN_FREE: u64 = 16 << 20;

/// Nor when it is larger than this: its `VACUUM` would hold the write lock too long.
pub const CONVERT_MAX_BYTES: u64 = 256 << 20;

/// What [`Store::reclaim_space`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Reclaimed {
    /// Free pages given back to the filesystem.
    pub pages: u64,
    /// Bytes of the database file before and after.
    pub file_before: u64,
    pub file_after: u64,
    /// The queue was converted to incremental vacuum by a `VACUUM` now.
    pub converted: bool,
    /// Why a queue made before incremental vacuum was not converted (with the fix).
    pub not_converted: Option<String>,
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

/// Notes kept under `PREFIX<task>`: what running the task needs (its routed chain, the
/// give-ups of restarts it caused, the agents that refused it, its quota chain and
/// fallback, a pending cancel). None is read once the task has ended.
const TASK_NOTES: [&str; 6] = [
    "chain:",
    "giveups:",
    "agents_refused:",
    "quota_chain:",
    "quota_fallback:",
    "cancel_request:",
];

/// Notes kept under `PREFIX<task>:<n>`, one per attempt: its workspace, landing commit,
/// restart breadcrumb and strikes, quota handoff (and `resumes:`, written before issue 24).
const ATTEMPT_NOTES: [&str; 6] = [
    "workspace:",
    "commit:",
    "handling:",
    "strikes:",
    "quota_handoff:",
    "resumes:",
];

// Kept for good, with the transitions and attempts: `retry_of:` and `retried_as:` (the
// generation links `status` and `retry` follow), `block_reported:` (a BLOCKED issue
// labelled ready again weeks later gets its next generation by it), `released:` (`retry`
// refuses a task another instance owns by it) and `actions:` (the operator action log,
// at most `ops::actions::KEPT` entries). Each is one row per task.

/// The end of the key range of every key starting with `prefix` (ASCII): `prefix` with
/// its last byte raised by one, so `key >= prefix AND key < end` is an index scan.
fn range_end(prefix: &str) -> String {
    let mut end = prefix.to_string();
    let last = end.pop().expect("a non-empty prefix");
    end.push(char::from(last as u8 + 1));
    end
}

/// The task a note key belongs to, if `key` is one: `PREFIX<task>` of [`TASK_NOTES`] or
/// `PREFIX<task>:<n>` of [`ATTEMPT_NOTES`].
fn noted_task(key: &str) -> Option<&str> {
    if let Some(task) = TASK_NOTES.iter().find_map(|p| key.strip_prefix(p)) {
        return Some(task).filter(|t| !t.is_empty());
    }
    let rest = ATTEMPT_NOTES.iter().find_map(|p| key.strip_prefix(p))?;
    let (task, n) = rest.rsplit_once(':')?;
    let digits = !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
    Some(task).filter(|t| digits && !t.is_empty())
}

impl Store {
    /// Tasks that ended (LANDED, BLOCKED, CANCELLED) before `cutoff` and still have a
    /// note, oldest first, at most `limit`. Found from the notes themselves (each note
    /// prefix's key range), so a task that ended before it was routed, or with notes of
    /// any attempt, is found too; the scan is bounded by the notes kept, which are those of
    /// live tasks and tasks within the grace. Notes are removed with the workspaces, so
    /// each task comes back here until both are gone.
    pub fn ended_tasks_with_notes(
        &self,
        cutoff: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<EndedTask>> {
        let mut noted: BTreeSet<String> = BTreeSet::new();
        for prefix in TASK_NOTES.iter().chain(ATTEMPT_NOTES.iter()) {
            let end = range_end(prefix);
            let keys = self.db.query_map(
                "SELECT key FROM kv WHERE key >= ?1 AND key < ?2",
                params![*prefix, end.as_str()],
                |r| r.get::<String>(0),
            )?;
            for key in keys {
                if let Some(task) = noted_task(&key) {
                    noted.insert(task.to_string());
                }
            }
        }
        let mut ended: Vec<(String, EndedTask)> = Vec::new();
        for id in &noted {
            let found = self.db.query_opt(
                "SELECT id, state, attempts, updated_at FROM tasks \
                 WHERE id = ?1 AND state IN ('LANDED', 'BLOCKED', 'CANCELLED') \
                 AND updated_at < ?2",
                params![id.as_str(), ts(cutoff)],
                |r| {
                    Ok((
                        r.get::<String>(3)?,
                        EndedTask {
                            id: r.get(0)?,
                            state: parse_col(r, 1)?,
                            attempts: r.get::<i64>(2)?.max(0) as u32,
                        },
                    ))
                },
            )?;
            ended.extend(found);
        }
        ended.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.id.cmp(&b.1.id)));
        Ok(ended.into_iter().take(limit).map(|(_, t)| t).collect())
    }

    /// Removes every note of a task ([`TASK_NOTES`], and [`ATTEMPT_NOTES`] of any
    /// attempt); returns how many rows went. Its transitions, attempts, landing, generation
    /// links and action log stay.
    pub fn forget_task_notes(&self, task_id: &str) -> Result<usize> {
        self.atomic(|conn| {
            let delete = "DELETE FROM kv WHERE key = ?1";
            let mut n = 0;
            for prefix in TASK_NOTES {
                let key = format!("{prefix}{task_id}");
                n += conn.execute(delete, params![key.as_str()])?;
            }
            for prefix in ATTEMPT_NOTES {
                let start = format!("{prefix}{task_id}:");
                let end = range_end(&start);
                let found = conn.query_map(
                    "SELECT key FROM kv WHERE key >= ?1 AND key < ?2",
                    params![start.as_str(), end.as_str()],
                    |r| r.get::<String>(0),
                )?;
                // Only `<task>:<n>`: a task whose id is this one's with `:…` appended
                // keeps its own.
                for key in found.iter().filter(|k| noted_task(k) == Some(task_id)) {
                    n += conn.execute(delete, params![key.as_str()])?;
                }
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
             AND (EXISTS (SELECT 1 FROM events e \
                 WHERE e.task_id = a.task_id AND e.attempt = a.attempt) \
                 OR EXISTS (SELECT 1 FROM egress_events g \
                 WHERE g.task_id = a.task_id AND g.attempt = a.attempt)) \
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
            Ok(conn.execute(
                "DELETE FROM events WHERE task_id = ?1 AND attempt = ?2",
                params![task_id, attempt],
            )? + conn.execute(
                "DELETE FROM egress_events WHERE task_id = ?1 AND attempt = ?2",
                params![task_id, attempt],
            )?)
        })
    }

    /// Gives the free pages of `queue.db` back to the filesystem (SQLite; see the module
    /// doc). `disk_free` is what the filesystem holding the file has free, if known (a
    /// conversion needs twice the file). Call it with no transaction open on this handle.
    pub fn reclaim_space(&self, disk_free: Option<u64>) -> Result<Reclaimed> {
        // PostgreSQL gives space back by itself (autovacuum).
        let Some(conn) = self.db.sqlite() else {
            return Ok(Reclaimed::default());
        };
        let pragma = |name: &str| -> Result<u64> {
            Ok(conn
                .query_row(&format!("PRAGMA {name}"), [], |r| r.get::<_, i64>(0))?
                .max(0) as u64)
        };
        let page_size = pragma("page_size")?.max(512);
        let file = |pages: u64| pages * page_size;
        let mut done = Reclaimed {
            file_before: file(pragma("page_count")?),
            ..Reclaimed::default()
        };
        let free = pragma("freelist_count")?;
        match pragma("auto_vacuum")? {
            // INCREMENTAL: in steps, each its own write transaction.
            2 => {
                let mut left = free;
                while left > 0 {
                    // Stepped to the end: the statement frees one page per row it yields.
                    let mut step =
                        conn.prepare(&format!("PRAGMA incremental_vacuum({RECLAIM_STEP_PAGES})"))?;
                    let mut rows = step.query([])?;
                    while rows.next()?.is_some() {}
                    let now = pragma("freelist_count")?;
                    if now >= left {
                        break;
                    }
                    done.pages += left - now;
                    left = now;
                }
            }
            // NONE: convert once, when it pays and is safe.
            0 if free > 0 => {
                let size = done.file_before;
                let worth = file(free) >= CONVERT_MIN_FREE && free * 4 >= pragma("page_count")?;
                let room = disk_free.is_none_or(|d| d >= size.saturating_mul(2));
                if worth && size <= CONVERT_MAX_BYTES && room {
                    conn.execute_batch("PRAGMA auto_vacuum = INCREMENTAL; VACUUM;")?;
                    done.converted = true;
                    done.pages = free;
                } else if worth {
                    done.not_converted = Some(format!(
                        "{} has {} MiB of free pages it cannot give back (made before \
                         incremental vacuum; {}): stop the daemon, then `sqlite3 {} \
                         'PRAGMA auto_vacuum = INCREMENTAL; VACUUM;'` (needs {} MiB free on \
                         its filesystem)",
                        self.path.display(),
                        file(free) >> 20,
                        if room {
                            "too large to convert while the daemon runs"
                        } else {
                            "not enough free disk to convert it"
                        },
                        self.path.display(),
                        size.saturating_mul(2) >> 20
                    ));
                }
            }
            _ => {}
        }
        if done.pages > 0 {
            // The file shrinks at a checkpoint; TRUNCATE empties the WAL too. Best effort:
            // a reader in the way leaves it to the next automatic checkpoint.
            conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        }
        done.file_after = file(pragma("page_count")?);
        Ok(done)
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
        assert_eq!(store.forget_task_notes("old").unwrap(), 2);
        assert!(store.ended_tasks_with_notes(at(24), 10).unwrap().is_empty());
        assert_eq!(store.kv_get("chain:old").unwrap(), None);
        // Generation links are history, not notes.
        assert_eq!(store.kv_get("retry_of:old").unwrap().as_deref(), Some("x"));
        assert!(store.kv_get("chain:running").unwrap().is_some());
    }

    #[test]
    fn notes_are_found_by_their_keys_however_the_task_ended() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("q.db")).unwrap();
        use TaskState::*;
        // BLOCKED before routing (no `chain:`, no attempt), with the notes such a task has.
        task(&store, "early", &[Claimed, Failed, Blocked], at(0));
        for key in [
            "giveups:early",
            "agents_refused:early",
            "handling:early:1",
            "strikes:early:1",
            "cancel_request:early",
        ] {
            store.kv_set(key, "1", at(0)).unwrap();
        }
        // Cancelled while running; notes of an attempt its counter no longer names.
        task(&store, "gone", &[Claimed, Routed, Cancelled], at(0));
        store.kv_set("commit:gone:3", "abc", at(0)).unwrap();
        // A task whose id is another's with `:1` appended keeps its own notes.
        task(
            &store,
            "gone:1",
            &[Claimed, Routed, Provisioned, Running],
            at(0),
        );
        store.kv_set("workspace:gone:1:2", "{}", at(0)).unwrap();
        // History stays.
        for key in ["block_reported:early", "retry_of:early", "actions:early"] {
            store.kv_set(key, "x", at(0)).unwrap();
        }
        let ids = |v: Vec<EndedTask>| v.into_iter().map(|t| t.id).collect::<Vec<_>>();
        assert_eq!(
            ids(store.ended_tasks_with_notes(at(24), 10).unwrap()),
            ["early", "gone"]
        );
        assert_eq!(store.forget_task_notes("early").unwrap(), 5);
        assert_eq!(store.forget_task_notes("gone").unwrap(), 1);
        assert!(store.ended_tasks_with_notes(at(24), 10).unwrap().is_empty());
        assert!(store.kv_get("workspace:gone:1:2").unwrap().is_some());
        for key in ["block_reported:early", "retry_of:early", "actions:early"] {
            assert!(store.kv_get(key).unwrap().is_some(), "{key}");
        }
        let left: i64 = store
            .db
            .sqlite()
            .unwrap()
            .query_row(
                "SELECT COUNT(*) FROM kv WHERE key LIKE '%early%' OR key LIKE 'commit:gone%'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(left, 3, "only the history rows of `early` are left");
        assert_eq!(noted_task("workspace:a:b:12"), Some("a:b"));
        assert_eq!(noted_task("workspace:a:x"), None);
        assert_eq!(noted_task("chain:"), None);
        assert_eq!(noted_task("retry_of:a"), None);
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
