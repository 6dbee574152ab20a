//! The local queue as a [`Source`]: tasks someone enqueued (`intake`), rows of the store.
//!
//! The store is the queue's whole record: the store's claim is the whole claim, the push of
//! the verified sha the whole landing, and nothing is polled or offered again at a remote.
//! So every call here succeeds without doing anything, and [`Source::reports_back`] is
//! `false`: the pipeline records no claim or block intent for these tasks.

use async_trait::async_trait;

use super::{
    Blocked, ClaimError, ClaimInfo, ClaimedTask, Landed, Polled, ReplyPlace, Reported, Source,
    SourceError,
};
use crate::domain::{SourceKind, Task};

/// The local queue (`polyphony enqueue`, `POST /api/v1/tasks`).
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalQueue;

#[async_trait]
impl Source for LocalQueue {
    fn kind(&self) -> SourceKind {
        SourceKind::Local
    }

    fn name(&self) -> &'static str {
        "the local queue"
    }

    fn reports_back(&self) -> bool {
        false
    }

    /// Local tasks are stored when enqueued, not polled.
    async fn poll_each(&self) -> Polled {
        Polled::default()
    }

    async fn fetch(&self, reference: &str) -> Result<Task, SourceError> {
        Err(SourceError::WrongTask {
            task_id: reference.to_string(),
            source_kind: SourceKind::Local,
            reason: "local tasks are enqueued (`polyphony enqueue`), not fetched".into(),
        })
    }

    /// The task's own text, as it was enqueued.
    async fn claim_resuming(
        &self,
        task: &Task,
        _info: &ClaimInfo,
        _resuming: bool,
    ) -> Result<ClaimedTask, ClaimError> {
        Ok(ClaimedTask {
            task_id: task.id.clone(),
            title: task.title.clone(),
            body: task.body.clone(),
            comment_id: None,
        })
    }

    async fn land(&self, _task: &Task, _landed: &Landed) -> Result<Reported, SourceError> {
        Ok(Reported::default())
    }

    async fn block(&self, _task: &Task, _blocked: &Blocked) -> Result<Reported, SourceError> {
        Ok(Reported::default())
    }

    async fn cancelled(&self, _task: &Task, _reason: &str) -> Result<Reported, SourceError> {
        Ok(Reported::default())
    }

    async fn reply(
        &self,
        task: &Task,
        _place: ReplyPlace,
        _marker: &str,
        _body: &str,
    ) -> Result<u64, SourceError> {
        Err(SourceError::WrongTask {
            task_id: task.id.clone(),
            source_kind: SourceKind::Local,
            reason: "the local queue has no change requests to reply on".into(),
        })
    }

    async fn offer_again(&self, _task: &Task) -> Result<(), SourceError> {
        Ok(())
    }

    fn push_token(&self) -> Option<&str> {
        None
    }
}
