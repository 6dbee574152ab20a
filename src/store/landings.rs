//! Landings: what was pushed for a task (branch, commit, PR), recorded on the attempt and
//! as the task's one landing record.

use super::sql::params;
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{time_col, ts, Result, Store, StoreError};

/// What has been pushed and opened for a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Landing {
    pub task_id: String,
    pub attempt: u32,
    pub branch: String,
    pub commit_sha: String,
    pub pr_url: Option<String>,
    pub updated_at: DateTime<Utc>,
}

impl Store {
    /// Records what was pushed (and the PR, once opened) for an attempt, and makes it the
    /// task's landing record. Calling it again (e.g. to add the PR URL) overwrites.
    pub fn set_attempt_landing(
        &self,
        task_id: &str,
        attempt: u32,
        commit_sha: &str,
        branch: &str,
        pr_url: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<()> {
        self.immediate(|tx| {
            let changed = tx.execute(
                "UPDATE attempts SET commit_sha = ?3, branch = ?4, pr_url = ?5 \
                 WHERE task_id = ?1 AND attempt = ?2",
                params![task_id, attempt, commit_sha, branch, pr_url],
            )?;
            if changed == 0 {
                return Err(StoreError::AttemptNotFound {
                    task_id: task_id.to_string(),
                    attempt,
                });
            }
            tx.execute(
                "INSERT INTO landings (task_id, attempt, branch, commit_sha, pr_url, updated_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
                 ON CONFLICT (task_id) DO UPDATE SET attempt = excluded.attempt, \
                 branch = excluded.branch, commit_sha = excluded.commit_sha, \
                 pr_url = COALESCE(excluded.pr_url, landings.pr_url), updated_at = excluded.updated_at",
                params![task_id, attempt, branch, commit_sha, pr_url, ts(now)],
            )?;
            Ok(())
        })
    }

    /// The task's landing record, if anything was pushed.
    pub fn landing(&self, task_id: &str) -> Result<Option<Landing>> {
        self.db.query_opt(
            "SELECT task_id, attempt, branch, commit_sha, pr_url, updated_at FROM landings WHERE task_id = ?1",
            params![task_id],
            |r| {
                Ok(Landing {
                    task_id: r.get(0)?,
                    attempt: r.get(1)?,
                    branch: r.get(2)?,
                    commit_sha: r.get(3)?,
                    pr_url: r.get(4)?,
                    updated_at: time_col(r, 5)?,
                })
            },
        )
    }
}
