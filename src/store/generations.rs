//! Task generations in the store (see `domain::generation`): the new generation is
//! inserted and linked both ways in one IMMEDIATE transaction, so two retries racing (the
//! CLI and the daemon's poll, or two daemons) make exactly one.
//!
//! The links live in `kv` (`retried_as:<old>`, `retry_of:<new>`), never in the old task's
//! row: a BLOCKED record is not rewritten.

use super::sql::params;
use chrono::{DateTime, Utc};

use super::{get_task, ts, Result, Store, StoreError};
use crate::domain::{Task, TaskState};

/// What [`Store::insert_generation`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GenerationInsert {
    /// The new generation is DISCOVERED.
    Created,
    /// The old task was retried before, as this task.
    AlreadyRetried(String),
    /// The old task is not BLOCKED (any more).
    NotBlocked(TaskState),
}

/// A task's neighbours among its generations.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct GenerationLinks {
    /// The BLOCKED task this one retries.
    pub retry_of: Option<String>,
    /// The task that retries this one.
    pub retried_as: Option<String>,
}

fn retried_as_key(id: &str) -> String {
    format!("retried_as:{id}")
}

fn retry_of_key(id: &str) -> String {
    format!("retry_of:{id}")
}

fn block_reported_key(id: &str) -> String {
    format!("block_reported:{id}")
}

pub(super) fn released_key(id: &str) -> String {
    format!("released:{id}")
}

impl Store {
    /// Inserts `next` (made by `domain::generation::next`) as the retry of `old_id`, if
    /// `old_id` is BLOCKED and was not retried yet.
    pub fn insert_generation(
        &self,
        old_id: &str,
        next: &Task,
        now: DateTime<Utc>,
    ) -> Result<GenerationInsert> {
        self.immediate(|tx| {
            let old =
                get_task(tx, old_id)?.ok_or_else(|| StoreError::NotFound(old_id.to_string()))?;
            let retried: Option<String> = tx.query_opt(
                "SELECT value FROM kv WHERE key = ?1",
                params![retried_as_key(old_id)],
                |r| r.get(0),
            )?;
            if let Some(newer) = retried {
                return Ok(GenerationInsert::AlreadyRetried(newer));
            }
            if !matches!(old.state, TaskState::Blocked | TaskState::Cancelled) {
                return Ok(GenerationInsert::NotBlocked(old.state));
            }
            if !self.insert_task(next)? {
                // Only a generation made outside this function has that id; link it.
                tracing::warn!(task = %next.id, "a task with the next generation's id exists");
            }
            for (key, value) in [
                (retried_as_key(old_id), next.id.as_str()),
                (retry_of_key(&next.id), old_id),
            ] {
                tx.execute(
                    "INSERT INTO kv (key, value, updated_at) VALUES (?1, ?2, ?3) \
                     ON CONFLICT (key) DO UPDATE SET value = excluded.value, \
                     updated_at = excluded.updated_at",
                    params![key, value, ts(now)],
                )?;
            }
            Ok(GenerationInsert::Created)
        })
    }

    /// The task's links to the generation before and after it.
    pub fn generation_links(&self, id: &str) -> Result<GenerationLinks> {
        Ok(GenerationLinks {
            retry_of: self.kv_get(&retry_of_key(id))?,
            retried_as: self.kv_get(&retried_as_key(id))?,
        })
    }

    /// The newest generation reached from `id` by following `retried_as` links.
    pub fn newest_generation(&self, id: &str) -> Result<Option<Task>> {
        let mut current = match self.get_task(id)? {
            Some(t) => t,
            None => return Ok(None),
        };
        // Bounded: a link cycle (never written by this module) cannot loop forever.
        for _ in 0..10_000 {
            match self.kv_get(&retried_as_key(&current.id))? {
                Some(next) => match self.get_task(&next)? {
                    Some(t) => current = t,
                    None => break,
                },
                None => break,
            }
        }
        Ok(Some(current))
    }

    /// Records when the BLOCKED task was reported at its source (comment posted, ready
    /// label removed by us).
    pub fn mark_block_reported(&self, id: &str, now: DateTime<Utc>) -> Result<()> {
        self.kv_set(&block_reported_key(id), &ts(now), now)
    }

    /// When the task was BLOCKED as released to another Polyphony instance
    /// ([`super::BlockSettlement::released`]), if it was.
    pub fn released_at(&self, id: &str) -> Result<Option<DateTime<Utc>>> {
        Ok(self
            .kv_get(&released_key(id))?
            .and_then(|t| DateTime::parse_from_rfc3339(&t).ok())
            .map(|t| t.with_timezone(&Utc)))
    }

    /// When [`Store::mark_block_reported`] was called for the task, if it was.
    pub fn block_reported_at(&self, id: &str) -> Result<Option<DateTime<Utc>>> {
        Ok(self
            .kv_get(&block_reported_key(id))?
            .and_then(|t| DateTime::parse_from_rfc3339(&t).ok())
            .map(|t| t.with_timezone(&Utc)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{generation, SourceKind};

    fn blocked_task(store: &Store, id: &str, now: DateTime<Utc>) -> Task {
        let t = Task::new(id, SourceKind::Local, format!("local:{id}"), "/r", "t", now);
        store.insert_task(&t).unwrap();
        store.claim(id, now).unwrap().unwrap();
        store
            .transition(id, TaskState::Claimed, TaskState::Failed, "x", now)
            .unwrap();
        store
            .transition(id, TaskState::Failed, TaskState::Blocked, "y", now)
            .unwrap()
    }

    #[test]
    fn one_generation_per_blocked_task_linked_both_ways() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("queue.db")).unwrap();
        let now = Utc::now();
        let old = blocked_task(&store, "local-1", now);
        let transitions_before = store.transitions("local-1").unwrap();
        let next = generation::next(&old, None, now);
        assert_eq!(
            store.insert_generation("local-1", &next, now).unwrap(),
            GenerationInsert::Created
        );
        // A second retry (the CLI and the daemon racing) makes nothing new.
        assert_eq!(
            store.insert_generation("local-1", &next, now).unwrap(),
            GenerationInsert::AlreadyRetried("local-1.2".into())
        );
        let new = store.get_task("local-1.2").unwrap().unwrap();
        assert_eq!(new.state, TaskState::Discovered);
        assert_eq!(
            store.generation_links("local-1.2").unwrap(),
            GenerationLinks {
                retry_of: Some("local-1".into()),
                retried_as: None
            }
        );
        assert_eq!(
            store.generation_links("local-1").unwrap().retried_as,
            Some("local-1.2".into())
        );
        // The old record is untouched.
        assert_eq!(store.get_task("local-1").unwrap().unwrap(), old);
        assert_eq!(store.transitions("local-1").unwrap(), transitions_before);
        assert_eq!(
            store.newest_generation("local-1").unwrap().unwrap().id,
            "local-1.2"
        );
        // Not BLOCKED: refused.
        let g3 = generation::next(&new, None, now);
        assert_eq!(
            store.insert_generation("local-1.2", &g3, now).unwrap(),
            GenerationInsert::NotBlocked(TaskState::Discovered)
        );
        assert!(store.get_task("local-1.3").unwrap().is_none());
    }

    #[test]
    fn block_reports_are_remembered() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("queue.db")).unwrap();
        assert_eq!(store.block_reported_at("o/r#1").unwrap(), None);
        let now = Utc::now();
        store.mark_block_reported("o/r#1", now).unwrap();
        let at = store.block_reported_at("o/r#1").unwrap().unwrap();
        assert!((at - now).num_milliseconds().abs() < 1, "{at} vs {now}");
    }
}
