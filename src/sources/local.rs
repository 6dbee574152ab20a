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
