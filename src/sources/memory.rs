//! An in-memory tracker (tests): a [`Source`] whose issues are a list in memory and whose
//! claims and reports are recorded for the test to read, as Symphony's tracker adapters
//! have a memory adapter beside the real ones. It stands in for any kind with a remote side
//! (`reports_back` is `true`), so the pipeline's claim, land and block paths run without
//! a tracker server.
//!
//! Scripted answers: [`MemorySource::release_claims`] makes claims answer "no longer
//! ready" (another owner), [`MemorySource::fail_next`] makes the next call of one operation
//! fail with a [`SourceFailure`], [`MemorySource::stall_next`] makes the next landing or
//! cancel report do its work and then never answer (a daemon killed while waiting for the tracker).
//! Must not: be wired into a home's configuration (tests build it and hand it to
//! `Orchestrator::with_source`).

use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;

use super::{
    Blocked, ClaimError, ClaimInfo, ClaimedTask, Landed, Polled, ReplyPlace, Reported, Source,
    SourceError, SourceFailure, TrackerError,
};
use crate::domain::{SourceKind, Task};

/// An operation of the port, to script a failure of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Poll,
    Fetch,
    Claim,
    Land,
    Block,
    Cancelled,
    Reply,
    OfferAgain,
}

/// The error a scripted failure answers with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the in-memory tracker failed {op:?} as scripted ({failure:?})")]
pub struct MemoryError {
    pub op: Op,
    pub failure: SourceFailure,
}

/// One claim the pipeline made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRecord {
    pub task_id: String,
    pub info: ClaimInfo,
    pub resuming: bool,
}

/// One reply to review feedback the pipeline posted (or found again by its marker).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyRecord {
    pub task_id: String,
    pub place: ReplyPlace,
    pub marker: String,
    pub body: String,
}

#[derive(Debug, Default)]
struct State {
    offered: Vec<Task>,
    claims: Vec<ClaimRecord>,
    lands: Vec<(String, Landed)>,
    blocks: Vec<(String, Blocked)>,
    /// (task id, reason) of every cancel told.
    cancels: Vec<(String, String)>,
    offered_again: Vec<String>,
    replies: Vec<ReplyRecord>,
    /// Pull request numbers by task id (one per task, as a tracker finds its own again).
    pulls: Vec<String>,
    release: Option<String>,
    fail: Vec<(Op, SourceFailure)>,
    stall: Vec<Op>,
}

/// The in-memory tracker; clones share their state.
#[derive(Debug, Clone)]
pub struct MemorySource {
    kind: SourceKind,
    token: Option<String>,
    state: Arc<Mutex<State>>,
}

impl MemorySource {
    /// A tracker serving tasks of `kind`.
    pub fn new(kind: SourceKind) -> MemorySource {
        MemorySource {
            kind,
            token: None,
            state: Arc::default(),
        }
    }

    /// The credential pushes to its remotes take (and attempts scrub).
    pub fn with_push_token(mut self, token: impl Into<String>) -> MemorySource {
        self.token = Some(token.into());
        self
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Offers `task` (polls list it, `fetch` finds it by `source_ref`).
    pub fn offer(&self, task: Task) {
        self.state().offered.push(task);
    }

    /// From now on claims answer "no longer ready" with `reason` (another owner).
    pub fn release_claims(&self, reason: impl Into<String>) {
        self.state().release = Some(reason.into());
    }

    /// The next call of `op` fails with `failure`.
    pub fn fail_next(&self, op: Op, failure: SourceFailure) {
        self.state().fail.push((op, failure));
    }

    /// The next call of `op` (land or cancelled) does its work at the
    /// tracker, then never answers: the caller's future is dropped there, as a daemon
    /// killed while it waited for the tracker's answer.
    pub fn stall_next(&self, op: Op) {
        self.state().stall.push(op);
    }

    /// The ids of the tasks a pull request was opened for, once each (a repeated landing
    /// report finds its own).
    pub fn pulls(&self) -> Vec<String> {
        self.state().pulls.clone()
    }

    /// The tasks offered so far.
    pub fn offered(&self) -> Vec<Task> {
        self.state().offered.clone()
    }

    pub fn claims(&self) -> Vec<ClaimRecord> {
        self.state().claims.clone()
    }

    pub fn lands(&self) -> Vec<(String, Landed)> {
        self.state().lands.clone()
    }

    pub fn blocks(&self) -> Vec<(String, Blocked)> {
        self.state().blocks.clone()
    }

    /// (task id, reason) of every cancel told, repeats included.
    pub fn cancels(&self) -> Vec<(String, String)> {
        self.state().cancels.clone()
    }

    /// The replies posted, one per marker (a repeat finds the first).
    pub fn replies(&self) -> Vec<ReplyRecord> {
        self.state().replies.clone()
    }

    pub fn offered_again(&self) -> Vec<String> {
        self.state().offered_again.clone()
    }

    fn scripted(&self, op: Op) -> Result<(), SourceError> {
        let mut state = self.state();
        match state.fail.iter().position(|(o, _)| *o == op) {
            Some(i) => {
                let (op, failure) = state.fail.remove(i);
                Err(SourceError::Tracker(TrackerError::new(
                    failure,
                    MemoryError { op, failure },
                )))
            }
            None => Ok(()),
        }
    }

    /// Never returns when a stall of `op` was scripted (see [`MemorySource::stall_next`]).
    async fn maybe_stall(&self, op: Op) {
        let stalled = {
            let mut state = self.state();
            let at = state.stall.iter().position(|o| *o == op);
            at.map(|i| state.stall.remove(i)).is_some()
        };
        if stalled {
            std::future::pending::<()>().await;
        }
    }

    fn check_kind(&self, task: &Task) -> Result<(), SourceError> {
        if task.source == self.kind {
            return Ok(());
        }
        Err(SourceError::WrongTask {
            task_id: task.id.clone(),
            source_kind: self.kind,
            reason: format!("it comes from the {} source", task.source),
        })
    }
}

#[async_trait]
impl Source for MemorySource {
    fn kind(&self) -> SourceKind {
        self.kind
    }

    fn name(&self) -> &'static str {
        "the in-memory tracker"
    }

    fn reports_back(&self) -> bool {
        true
    }

    async fn poll_each(&self) -> Polled {
        match self.scripted(Op::Poll) {
            Ok(()) => Polled {
                tasks: self.state().offered.clone(),
                errors: Vec::new(),
                places: 1,
            },
            Err(e) => Polled {
                tasks: Vec::new(),
                errors: vec![("memory".into(), e)],
                places: 1,
            },
        }
    }

    async fn fetch(&self, reference: &str) -> Result<Task, SourceError> {
        self.scripted(Op::Fetch)?;
        self.state()
            .offered
            .iter()
            .find(|t| t.source_ref == reference)
            .cloned()
            .ok_or_else(|| SourceError::WrongTask {
                task_id: reference.to_string(),
                source_kind: self.kind,
                reason: "the in-memory tracker does not offer it".into(),
            })
    }

    async fn claim_resuming(
        &self,
        task: &Task,
        info: &ClaimInfo,
        resuming: bool,
    ) -> Result<ClaimedTask, ClaimError> {
        self.check_kind(task)?;
        self.scripted(Op::Claim)?;
        let mut state = self.state();
        state.claims.push(ClaimRecord {
            task_id: task.id.clone(),
            info: info.clone(),
            resuming,
        });
        if let Some(reason) = state.release.clone() {
            return Err(ClaimError::NoLongerReady {
                task_id: task.id.clone(),
                reason,
            });
        }
        // The text as offered now: a claim freezes it.
        let offered = state.offered.iter().find(|t| t.id == task.id);
        Ok(ClaimedTask {
            task_id: task.id.clone(),
            title: offered.map_or(task.title.clone(), |t| t.title.clone()),
            body: offered.map_or(task.body.clone(), |t| t.body.clone()),
            comment_id: Some(state.claims.len() as u64),
        })
    }

    async fn land(&self, task: &Task, landed: &Landed) -> Result<Reported, SourceError> {
        self.check_kind(task)?;
        self.scripted(Op::Land)?;
        let (created, number) = {
            let mut state = self.state();
            state.lands.push((task.id.clone(), landed.clone()));
            let created = !state.pulls.contains(&task.id);
            if created {
                state.pulls.push(task.id.clone());
            }
            let at = state.pulls.iter().position(|t| *t == task.id).unwrap_or(0);
            (created, at as u64 + 1)
        };
        self.maybe_stall(Op::Land).await;
        Ok(Reported {
            pr_url: Some(format!("memory://{}/pull/{number}", task.source_ref)),
            pr_number: Some(number),
            comment_ids: Vec::new(),
            created,
        })
    }

    async fn block(&self, task: &Task, blocked: &Blocked) -> Result<Reported, SourceError> {
        self.check_kind(task)?;
        self.scripted(Op::Block)?;
        let mut state = self.state();
        let created = !state.blocks.iter().any(|(id, _)| *id == task.id);
        state.blocks.push((task.id.clone(), blocked.clone()));
        Ok(Reported {
            created,
            ..Reported::default()
        })
    }

    async fn cancelled(&self, task: &Task, reason: &str) -> Result<Reported, SourceError> {
        self.check_kind(task)?;
        self.scripted(Op::Cancelled)?;
        let created = {
            let mut state = self.state();
            let created = !state.cancels.iter().any(|(id, _)| *id == task.id);
            state.cancels.push((task.id.clone(), reason.to_string()));
            created
        };
        self.maybe_stall(Op::Cancelled).await;
        Ok(Reported {
            created,
            ..Reported::default()
        })
    }

    async fn reply(
        &self,
        task: &Task,
        place: ReplyPlace,
        marker: &str,
        body: &str,
    ) -> Result<u64, SourceError> {
        self.check_kind(task)?;
        self.scripted(Op::Reply)?;
        let mut state = self.state();
        let found = state
            .replies
            .iter()
            .position(|r| r.task_id == task.id && r.marker == marker);
        let index = found.unwrap_or_else(|| {
            state.replies.push(ReplyRecord {
                task_id: task.id.clone(),
                place,
                marker: marker.to_string(),
                body: body.to_string(),
            });
            state.replies.len() - 1
        });
        Ok(index as u64 + 1)
    }

    async fn offer_again(&self, task: &Task) -> Result<(), SourceError> {
        self.check_kind(task)?;
        self.scripted(Op::OfferAgain)?;
        self.state().offered_again.push(task.id.clone());
        Ok(())
    }

    fn push_token(&self) -> Option<&str> {
        self.token.as_deref()
    }
}
