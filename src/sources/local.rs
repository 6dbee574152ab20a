//! The local queue as a [`Source`] (spec §2: tasks from `polyphony enqueue`).
//!
//! Owns: the adapter shape only. The queue itself (SQLite, atomic claims) lives in `store/`;
//! the store implements [`LocalQueue`] and this adapter turns it into a `Source`.
//! Must not: write SQL, push branches (the workspace pushes; this only records the outcome).

use async_trait::async_trait;

use super::{ClaimError, ClaimInfo, ClaimedTask, Outcome, Reported, Source, SourceError};
use crate::domain::{SourceKind, Task};

/// Boxed error of a queue implementation.
pub type QueueError = Box<dyn std::error::Error + Send + Sync>;

/// What the store offers the local source.
#[async_trait]
pub trait LocalQueue: Send + Sync {
    /// Enqueued tasks not yet picked up (state DISCOVERED).
    async fn queued(&self) -> Result<Vec<Task>, QueueError>;
    /// Record how a task ended (the landed branch, or the block reasons) so `status` shows it.
    async fn record_outcome(&self, task_id: &str, outcome: &Outcome) -> Result<(), QueueError>;
}

/// The local queue source.
pub struct LocalSource<Q> {
    queue: Q,
}

impl<Q: LocalQueue> LocalSource<Q> {
    pub fn new(queue: Q) -> Self {
        LocalSource { queue }
    }
}

#[async_trait]
impl<Q: LocalQueue> Source for LocalSource<Q> {
    fn kind(&self) -> SourceKind {
        SourceKind::Local
    }

    async fn poll(&self) -> Result<Vec<Task>, SourceError> {
        self.queue.queued().await.map_err(SourceError::Other)
    }

    /// Nobody else edits a queued task, so the text stored at enqueue time is already frozen.
    async fn claim(&self, task: &Task, _info: &ClaimInfo) -> Result<ClaimedTask, ClaimError> {
        if task.source != SourceKind::Local {
            return Err(ClaimError::Source(SourceError::WrongTask {
                task_id: task.id.clone(),
                source_kind: SourceKind::Local,
                reason: format!("it comes from the {} source", task.source),
            }));
        }
        Ok(ClaimedTask {
            task_id: task.id.clone(),
            title: task.title.clone(),
            body: task.body.clone(),
            comment_id: None,
        })
    }

    async fn report(&self, task: &Task, outcome: &Outcome) -> Result<Reported, SourceError> {
        self.queue
            .record_outcome(&task.id, outcome)
            .await
            .map_err(SourceError::Other)?;
        Ok(Reported {
            created: true,
            ..Reported::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::{Blocked, BlockedAttempt};
    use std::sync::Mutex;

    #[derive(Default)]
    struct MemoryQueue {
        tasks: Vec<Task>,
        recorded: Mutex<Vec<(String, Outcome)>>,
    }

    #[async_trait]
    impl LocalQueue for MemoryQueue {
        async fn queued(&self) -> Result<Vec<Task>, QueueError> {
            Ok(self.tasks.clone())
        }
        async fn record_outcome(&self, task_id: &str, outcome: &Outcome) -> Result<(), QueueError> {
            let mut recorded = self.recorded.lock().map_err(|e| e.to_string())?;
            recorded.push((task_id.to_string(), outcome.clone()));
            Ok(())
        }
    }

    fn task(source: SourceKind) -> Task {
        let mut t = Task::new(
            "local-1",
            source,
            "local:1",
            "/repo",
            "Title",
            chrono::Utc::now(),
        );
        t.body = "Body".into();
        t
    }

    #[tokio::test]
    async fn local_source_passes_through_the_queue() {
        let source = LocalSource::new(MemoryQueue {
            tasks: vec![task(SourceKind::Local)],
            ..MemoryQueue::default()
        });
        assert_eq!(source.kind(), SourceKind::Local);
        assert_eq!(source.poll().await.unwrap().len(), 1);
        let info = ClaimInfo {
            agent: "codex".into(),
            attempt: 1,
            claimant: "home-a".into(),
        };
        let claimed = source.claim(&task(SourceKind::Local), &info).await.unwrap();
        assert_eq!(
            (claimed.title.as_str(), claimed.body.as_str()),
            ("Title", "Body")
        );
        assert!(matches!(
            source.claim(&task(SourceKind::Github), &info).await,
            Err(ClaimError::Source(SourceError::WrongTask { .. }))
        ));
        let outcome = Outcome::Blocked(Blocked {
            attempts: vec![BlockedAttempt {
                attempt: 1,
                agent: "codex".into(),
                reason: "r".into(),
            }],
        });
        source
            .report(&task(SourceKind::Local), &outcome)
            .await
            .unwrap();
        let recorded = source.queue.recorded.lock().unwrap();
        assert_eq!(recorded.as_slice(), &[("local-1".to_string(), outcome)]);
    }
}
