//! Read-only views for the daemon's HTTP API (src/http/): filtered, paged task listings
//! and the attempts running now. Same rows and bytes as the CLI's views (`status --json`
//! objects are the stored summary JSON), so the API and the CLI cannot disagree.

use chrono::{DateTime, Utc};
use rusqlite::params;
use serde::Serialize;

use super::{parse_col, time_col, Result, Store, StoreError};
use crate::domain::{SourceKind, TaskState};

/// Which tasks a listing shows; `None` fields do not filter.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskFilter {
    pub state: Option<TaskState>,
    pub source: Option<SourceKind>,
    /// Tasks with at least one attempt by this agent profile.
    pub agent: Option<String>,
}

impl TaskFilter {
    fn is_empty(&self) -> bool {
        self.state.is_none() && self.source.is_none() && self.agent.is_none()
    }
}

/// An attempt that has started and not ended, with its task's state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunningAttempt {
    pub task_id: String,
    pub title: String,
    pub state: TaskState,
    pub attempt: u32,
    pub agent: String,
    pub identity: String,
    pub branch: String,
    pub started_at: DateTime<Utc>,
}

impl Store {
    /// Calls `each` with the stored summary JSON (the `status --json` objects) of the
    /// tasks `filter` admits, newest first, skipping `offset`, at most `limit`
    /// (`None`: all). Streams like [`Store::for_each_summary_json`].
    pub fn for_each_summary_json_page<E>(
        &self,
        filter: &TaskFilter,
        limit: Option<usize>,
        offset: usize,
        mut each: impl FnMut(&[u8]) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E>
    where
        E: From<StoreError>,
    {
        let limit = limit.map_or(-1, |l| l as i64);
        let offset = offset as i64;
        let sql = if filter.is_empty() {
            // The unfiltered listing walks the summaries alone, as `status --json` does.
            "SELECT json FROM task_summaries WHERE ?3 IS NULL AND ?4 IS NULL AND ?5 IS NULL \
             ORDER BY seq DESC LIMIT ?1 OFFSET ?2"
        } else {
            "SELECT s.json FROM tasks t JOIN task_summaries s ON s.id = t.id \
             WHERE (?3 IS NULL OR t.state = ?3) AND (?4 IS NULL OR t.source = ?4) \
             AND (?5 IS NULL OR EXISTS (SELECT 1 FROM attempts a WHERE a.task_id = t.id AND a.agent = ?5)) \
             ORDER BY t.rowid DESC LIMIT ?1 OFFSET ?2"
        };
        let mut stmt = self.conn.prepare_cached(sql).map_err(StoreError::from)?;
        let mut rows = stmt
            .query(params![
                limit,
                offset,
                filter.state.map(TaskState::as_str),
                filter.source.map(|s| s.as_str()),
                filter.agent.as_deref(),
            ])
            .map_err(StoreError::from)?;
        while let Some(row) = rows.next().map_err(StoreError::from)? {
            let json = row
                .get_ref(0)
                .and_then(|v| v.as_bytes().map_err(rusqlite::Error::from))
                .map_err(StoreError::from)?;
            each(json)?;
        }
        Ok(())
    }

    /// Attempts that started and have not ended, oldest first.
    pub fn running_attempts(&self) -> Result<Vec<RunningAttempt>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT a.task_id, t.title, t.state, a.attempt, a.agent, a.identity, a.branch, a.started_at \
             FROM attempts a JOIN tasks t ON t.id = a.task_id \
             WHERE a.status IS NULL AND t.state IN ('PROVISIONED', 'RUNNING', 'VERIFYING') \
             ORDER BY a.started_at",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok(RunningAttempt {
                task_id: r.get(0)?,
                title: r.get(1)?,
                state: parse_col::<TaskState>(r, 2)?,
                attempt: r.get(3)?,
                agent: r.get(4)?,
                identity: r.get(5)?,
                branch: r.get(6)?,
                started_at: time_col(r, 7)?,
            })
        })?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }

    /// `status TASK --json` (and `GET /api/v1/tasks/{id}`): the task in full with its
    /// transitions, attempts and landing, or `None` when there is no such task.
    pub fn task_detail_json(&self, id: &str) -> Result<Option<serde_json::Value>> {
        let Some(task) = self.get_task(id)? else {
            return Ok(None);
        };
        let links = self.generation_links(id)?;
        Ok(Some(serde_json::json!({
            "task": task,
            "transitions": self.transitions(id)?,
            "attempts": self.attempts(id)?,
            "landing": self.landing(id)?,
            "generation": crate::domain::generation::number(&task),
            "retry_of": links.retry_of,
            "retried_as": links.retried_as,
            "quota": self.quota_detail_json(id)?,
        })))
    }

    /// The highest attempt number of a task, if it has any.
    pub fn latest_attempt(&self, task_id: &str) -> Result<Option<u32>> {
        Ok(self.conn.query_row(
            "SELECT MAX(attempt) FROM attempts WHERE task_id = ?1",
            [task_id],
            |r| r.get(0),
        )?)
    }
}
