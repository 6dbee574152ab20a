//! The pull requests this home opened, as the shepherd sees them (issue 15): one row per
//! landing task, the keys of what was handled on it, its follow-up tasks and the replies
//! they posted.
//!
//! A follow-up is a task of its own (LANDED stays terminal): [`Store::insert_followup`]
//! inserts it, links it, records the feedback it takes as handled and counts it, in one
//! IMMEDIATE transaction, so a kill or a second daemon never makes two for one batch.
//!
//! Must not: decide anything (that is `orchestrator::shepherd::decide`) or talk to GitHub.

use std::collections::BTreeSet;

use super::sql::{params, Db, Row};
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{get_task, time_col, ts, Result, Store};
use crate::domain::{Task, TaskState};

/// A pull request a task of this home landed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PullRecord {
    /// The task that opened it.
    pub task_id: String,
    /// `owner/name`.
    pub repo: String,
    pub number: u64,
    pub branch: String,
    pub base: String,
    pub head_sha: String,
    /// `open`, `merged` or `closed`.
    pub state: String,
    pub checks: Option<String>,
    pub review: Option<String>,
    pub mergeable: Option<String>,
    pub followups: u32,
    pub watching: bool,
    pub updated_at: DateTime<Utc>,
}

impl PullRecord {
    /// A pull request just opened by `task_id`: open, watched, nothing looked at yet.
    pub fn opened(
        task_id: &str,
        repo: &str,
        number: u64,
        branch: &str,
        base: &str,
        head_sha: &str,
        now: DateTime<Utc>,
    ) -> PullRecord {
        PullRecord {
            task_id: task_id.to_string(),
            repo: repo.to_string(),
            number,
            branch: branch.to_string(),
            base: base.to_string(),
            head_sha: head_sha.to_string(),
            state: "open".into(),
            checks: None,
            review: None,
            mergeable: None,
            followups: 0,
            watching: true,
            updated_at: now,
        }
    }
}

/// What one look at the pull request found (written by [`Store::update_pull`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PullLook {
    pub head_sha: String,
    pub state: String,
    pub checks: Option<String>,
    pub review: Option<String>,
    pub mergeable: Option<String>,
    pub watching: bool,
}

/// A follow-up task and the pull request it works on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FollowUpRecord {
    pub task_id: String,
    pub pull_task_id: String,
    pub seq: u32,
    pub state: TaskState,
    /// The `shepherd::decide::FollowUp` it carries out.
    pub plan: serde_json::Value,
    pub created_at: DateTime<Utc>,
}

const PULL_COLS: &str = "task_id, repo, number, branch, base, head_sha, state, checks, review, \
     mergeable, followups, watching, updated_at";

fn pull_from_row(r: &Row<'_>) -> Result<PullRecord> {
    Ok(PullRecord {
        task_id: r.get(0)?,
        repo: r.get(1)?,
        number: r.get::<i64>(2)? as u64,
        branch: r.get(3)?,
        base: r.get(4)?,
        head_sha: r.get(5)?,
        state: r.get(6)?,
        checks: r.get(7)?,
        review: r.get(8)?,
        mergeable: r.get(9)?,
        followups: r.get(10)?,
        watching: r.get::<i64>(11)? != 0,
        updated_at: time_col(r, 12)?,
    })
}

fn followup_from_row(r: &Row<'_>) -> Result<FollowUpRecord> {
    let plan: String = r.get(4)?;
    let state: String = r.get(3)?;
    Ok(FollowUpRecord {
        task_id: r.get(0)?,
        pull_task_id: r.get(1)?,
        seq: r.get(2)?,
        state: state
            .parse()
            .map_err(|_| super::conversion(3, format!("unknown state {state}")))?,
        plan: serde_json::from_str(&plan).unwrap_or(serde_json::Value::Null),
        created_at: time_col(r, 5)?,
    })
}

/// Refreshes the summary of the task that landed a pull request and of its follow-ups (their
/// `followup_of` names its number).
fn refresh_pull_summaries(conn: &Db, pull_task_id: &str) -> Result<()> {
    super::refresh_summary(conn, pull_task_id)?;
    let followups: Vec<String> = conn.query_map(
        "SELECT task_id FROM followups WHERE pull_task_id = ?1",
        params![pull_task_id],
        |r| r.get(0),
    )?;
    for id in followups {
        super::refresh_summary(conn, &id)?;
    }
    Ok(())
}

const FOLLOWUP_SELECT: &str = "SELECT f.task_id, f.pull_task_id, f.seq, t.state, f.plan, \
     f.created_at FROM followups f JOIN tasks t ON t.id = f.task_id";

impl Store {
    /// Records a pull request a task landed (once: a landing redone after a restart
    /// changes nothing).
    pub fn record_pull(&self, pull: &PullRecord) -> Result<()> {
        self.atomic(|conn| {
            conn.execute(
                &format!(
                    "INSERT INTO pulls ({PULL_COLS}) VALUES \
                 (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) ON CONFLICT DO NOTHING"
                ),
                params![
                    pull.task_id,
                    pull.repo,
                    pull.number as i64,
                    pull.branch,
                    pull.base,
                    pull.head_sha,
                    pull.state,
                    pull.checks,
                    pull.review,
                    pull.mergeable,
                    pull.followups,
                    pull.watching as i64,
                    ts(pull.updated_at),
                ],
            )?;
            refresh_pull_summaries(conn, &pull.task_id)
        })
    }

    /// The pull request `task_id` opened, if the shepherd knows it.
    pub fn pull(&self, task_id: &str) -> Result<Option<PullRecord>> {
        self.db.query_opt(
            &format!("SELECT {PULL_COLS} FROM pulls WHERE task_id = ?1"),
            params![task_id],
            pull_from_row,
        )
    }

    /// Every pull request, newest first (for `status`).
    pub fn pulls(&self) -> Result<Vec<PullRecord>> {
        let stmt_sql = &format!("SELECT {PULL_COLS} FROM pulls ORDER BY rowid DESC");
        let rows = self.db.query_map(stmt_sql, params![], pull_from_row)?;
        Ok(rows.into_iter().collect())
    }

    /// The pull requests still watched (open, as far as the last look knew).
    pub fn watched_pulls(&self) -> Result<Vec<PullRecord>> {
        let stmt_sql = &format!("SELECT {PULL_COLS} FROM pulls WHERE watching = 1 ORDER BY rowid");
        let rows = self.db.query_map(stmt_sql, params![], pull_from_row)?;
        Ok(rows.into_iter().collect())
    }

    /// Writes what one look found.
    pub fn update_pull(&self, task_id: &str, look: &PullLook, now: DateTime<Utc>) -> Result<()> {
        self.atomic(|conn| {
            conn.execute(
                "UPDATE pulls SET head_sha = ?2, state = ?3, checks = ?4, review = ?5, \
             mergeable = ?6, watching = ?7, updated_at = ?8 WHERE task_id = ?1",
                params![
                    task_id,
                    look.head_sha,
                    look.state,
                    look.checks,
                    look.review,
                    look.mergeable,
                    look.watching as i64,
                    ts(now),
                ],
            )?;
            super::refresh_summary(conn, task_id)
        })
    }

    /// The keys handled on a pull request so far.
    pub fn handled_keys(&self, pull_task_id: &str) -> Result<BTreeSet<String>> {
        let stmt_sql = "SELECT key FROM pull_handled WHERE pull_task_id = ?1";
        let rows = self
            .db
            .query_map(stmt_sql, params![pull_task_id], |r| r.get::<String>(0))?;
        Ok(rows.into_iter().collect())
    }

    /// Records keys as handled without a follow-up (ignored feedback, a report, the
    /// hand-off). Recording one twice changes nothing.
    pub fn mark_handled(
        &self,
        pull_task_id: &str,
        keys: &[String],
        now: DateTime<Utc>,
    ) -> Result<()> {
        self.immediate(|tx| {
            for key in keys {
                tx.execute(
                    "INSERT INTO pull_handled (pull_task_id, key, followup, at) \
                     VALUES (?1, ?2, NULL, ?3) ON CONFLICT DO NOTHING",
                    params![pull_task_id, key, ts(now)],
                )?;
            }
            Ok(())
        })
    }

    /// Inserts `task` as the next follow-up of the pull request, records `keys` as handled
    /// by it and counts it, in one transaction. `false` (nothing written) when a key is
    /// handled already: another look got there first.
    pub fn insert_followup(
        &self,
        pull_task_id: &str,
        task: &Task,
        plan: &serde_json::Value,
        keys: &[String],
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let plan = super::to_json("follow-up plan", plan)?;
        self.immediate(|tx| {
            for key in keys {
                let taken: Option<i64> = tx.query_opt(
                    "SELECT 1 FROM pull_handled WHERE pull_task_id = ?1 AND key = ?2",
                    params![pull_task_id, key],
                    |r| r.get(0),
                )?;
                if taken.is_some() {
                    return Ok(false);
                }
            }
            if get_task(tx, &task.id)?.is_some() || !self.insert_task(task)? {
                return Ok(false);
            }
            let seq: u32 = tx.query_row(
                "UPDATE pulls SET followups = followups + 1 WHERE task_id = ?1 RETURNING followups",
                params![pull_task_id],
                |r| r.get(0),
            )?;
            tx.execute(
                "INSERT INTO followups (task_id, pull_task_id, seq, plan, created_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![task.id, pull_task_id, seq, plan, ts(now)],
            )?;
            for key in keys {
                tx.execute(
                    "INSERT INTO pull_handled (pull_task_id, key, followup, at) \
                     VALUES (?1, ?2, ?3, ?4)",
                    params![pull_task_id, key, task.id, ts(now)],
                )?;
            }
            super::refresh_summary(tx, pull_task_id)?;
            super::refresh_summary(tx, &task.id)?;
            Ok(true)
        })
    }

    /// The follow-up `task_id` is, if it is one.
    pub fn followup(&self, task_id: &str) -> Result<Option<FollowUpRecord>> {
        self.db.query_opt(
            &format!("{FOLLOWUP_SELECT} WHERE f.task_id = ?1"),
            params![task_id],
            followup_from_row,
        )
    }

    /// A pull request's follow-ups, oldest first.
    pub fn followups_of(&self, pull_task_id: &str) -> Result<Vec<FollowUpRecord>> {
        let stmt_sql = &format!("{FOLLOWUP_SELECT} WHERE f.pull_task_id = ?1 ORDER BY f.seq");
        let rows = self
            .db
            .query_map(stmt_sql, params![pull_task_id], followup_from_row)?;
        Ok(rows.into_iter().collect())
    }

    /// The reply a follow-up posted to one piece of feedback.
    pub fn reply_id(&self, task_id: &str, key: &str) -> Result<Option<u64>> {
        Ok(self
            .db
            .query_opt(
                "SELECT comment_id FROM followup_replies WHERE task_id = ?1 AND key = ?2",
                params![task_id, key],
                |r| r.get::<i64>(0),
            )?
            .map(|id| id as u64))
    }

    /// Records a posted reply (once).
    pub fn record_reply(
        &self,
        task_id: &str,
        key: &str,
        comment_id: u64,
        now: DateTime<Utc>,
    ) -> Result<()> {
        self.db.execute(
            "INSERT INTO followup_replies (task_id, key, comment_id, at) \
             VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO NOTHING",
            params![task_id, key, comment_id as i64, ts(now)],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::SourceKind;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(&dir.path().join("queue.db")).expect("open");
        (dir, store)
    }

    fn task(id: &str) -> Task {
        Task::new(
            id,
            SourceKind::Github,
            "o/r#1",
            "https://github.com/o/r",
            "t",
            Utc::now(),
        )
    }

    fn pull(task_id: &str) -> PullRecord {
        PullRecord::opened(
            task_id,
            "o/r",
            5,
            "polyphony/o_r_1-a1",
            "main",
            &"a".repeat(40),
            Utc::now(),
        )
    }

    #[test]
    fn the_schema_is_current_and_has_pulls() {
        // Pulls and follow-ups arrived in versions 5 and 6; later versions keep them.
        let (_dir, store) = store();
        let version = store.schema_version().expect("version");
        assert_eq!(version, super::super::schema::latest());
        assert!(version >= 6);
    }

    #[test]
    fn a_pull_is_recorded_once_and_updated_by_looks() {
        let (_dir, store) = store();
        store.insert_task(&task("o/r#1")).expect("task");
        store.record_pull(&pull("o/r#1")).expect("pull");
        let mut again = pull("o/r#1");
        again.head_sha = "b".repeat(40);
        store.record_pull(&again).expect("again");
        assert_eq!(
            store.pull("o/r#1").expect("read").expect("some").head_sha,
            "a".repeat(40)
        );
        let look = PullLook {
            head_sha: "c".repeat(40),
            state: "merged".into(),
            checks: Some("passing".into()),
            watching: false,
            ..PullLook::default()
        };
        store
            .update_pull("o/r#1", &look, Utc::now())
            .expect("update");
        let read = store.pull("o/r#1").expect("read").expect("some");
        assert_eq!(read.state, "merged");
        assert_eq!(read.checks.as_deref(), Some("passing"));
        assert!(store.watched_pulls().expect("watched").is_empty());
        assert_eq!(store.pulls().expect("all").len(), 1);
    }

    #[test]
    fn a_follow_up_is_inserted_linked_and_counted_once_per_batch() {
        let (_dir, store) = store();
        store.insert_task(&task("o/r#1")).expect("task");
        store.record_pull(&pull("o/r#1")).expect("pull");
        let keys = vec!["review-comment:7".to_string()];
        let plan = serde_json::json!({ "keys": keys });
        let first = store
            .insert_followup("o/r#1", &task("o/r#1-f1"), &plan, &keys, Utc::now())
            .expect("insert");
        assert!(first);
        // The same batch seen again (a second look, a second daemon) makes nothing.
        let second = store
            .insert_followup("o/r#1", &task("o/r#1-f2"), &plan, &keys, Utc::now())
            .expect("insert");
        assert!(!second);
        assert!(store.get_task("o/r#1-f2").expect("get").is_none());
        let pull = store.pull("o/r#1").expect("read").expect("some");
        assert_eq!(pull.followups, 1);
        assert!(store
            .handled_keys("o/r#1")
            .expect("keys")
            .contains("review-comment:7"));
        let f = store.followup("o/r#1-f1").expect("read").expect("some");
        assert_eq!((f.seq, f.state), (1, TaskState::Discovered));
        assert_eq!(f.plan, plan);
        assert_eq!(store.followups_of("o/r#1").expect("list").len(), 1);
        assert!(store.followup("o/r#1").expect("read").is_none());
    }

    #[test]
    fn handled_keys_and_replies_are_recorded_once() {
        let (_dir, store) = store();
        store.insert_task(&task("o/r#1")).expect("task");
        store.record_pull(&pull("o/r#1")).expect("pull");
        let keys = vec!["hand-off".to_string(), "review-comment:9".to_string()];
        store
            .mark_handled("o/r#1", &keys, Utc::now())
            .expect("mark");
        store
            .mark_handled("o/r#1", &keys, Utc::now())
            .expect("again");
        assert_eq!(store.handled_keys("o/r#1").expect("keys").len(), 2);

        store.insert_task(&task("o/r#1-f1")).expect("task");
        assert_eq!(
            store
                .reply_id("o/r#1-f1", "review-comment:7")
                .expect("read"),
            None
        );
        store
            .record_reply("o/r#1-f1", "review-comment:7", 42, Utc::now())
            .expect("reply");
        store
            .record_reply("o/r#1-f1", "review-comment:7", 43, Utc::now())
            .expect("again");
        assert_eq!(
            store
                .reply_id("o/r#1-f1", "review-comment:7")
                .expect("read"),
            Some(42)
        );
    }
}
