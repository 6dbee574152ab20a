//! Source comments: which comment was posted for which purpose, so a restart never posts
//! one twice.

use super::sql::params;
use chrono::{DateTime, Utc};

use super::{ts, Result, Store};

impl Store {
    /// Remembers that the comment for `purpose` (`claimed`, `landed`, `blocked`, …) was
    /// posted. Returns `false` if one was already recorded (the first id is kept).
    pub fn record_comment(
        &self,
        task_id: &str,
        purpose: &str,
        comment_id: u64,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let n = self.db.execute(
            "INSERT INTO source_comments (task_id, purpose, comment_id, at) VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT DO NOTHING",
            params![task_id, purpose, comment_id as i64, ts(now)],
        )?;
        Ok(n == 1)
    }

    /// The id of the comment posted for `purpose`, if any.
    pub fn comment_id(&self, task_id: &str, purpose: &str) -> Result<Option<u64>> {
        Ok(self
            .db
            .query_opt(
                "SELECT comment_id FROM source_comments WHERE task_id = ?1 AND purpose = ?2",
                params![task_id, purpose],
                |r| r.get::<i64>(0),
            )?
            .map(|v| v as u64))
    }
}
