//! The claim at the source: a task of a source that reports back (a GitHub issue) is
//! claimed there and its text frozen.

use crate::domain::{AttemptStatus, TaskState};
use crate::orchestrator::failure::FailureKind;
use crate::sources::{ClaimError, ClaimInfo};
use crate::store::{BlockSettlement, IntentKind, Settlement};

use super::{AttemptEnd, AttemptRun, Failure};

impl AttemptRun<'_> {
    /// Claims the issue at the source and freezes its text. `Some(end)` when another
    /// instance owns it.
    pub(super) async fn claim_at_source(&mut self) -> Result<Option<AttemptEnd>, Failure> {
        // A follow-up works on a pull request this home opened: nothing to claim.
        if self.followup.is_some() {
            return Ok(None);
        }
        let source = self.orch.sources.of(&self.task).map_err(Failure::crash)?;
        if !source.reports_back() {
            return Ok(None);
        }
        let claimant = self.orch.claimant(&self.db()).map_err(Failure::crash)?;
        let info = ClaimInfo {
            agent: self.agent.clone(),
            attempt: self.attempt,
            claimant,
        };
        // Recorded before anything is written at the source; a claim this home left half-done
        // (killed between comment and labels) is finished, never taken for a release.
        let resuming = self
            .db()
            .has_pending_intent(&self.task.id, IntentKind::Claim)
            .map_err(Failure::crash)?;
        self.db()
            .record_intent(
                &self.task.id,
                IntentKind::Claim,
                self.attempt,
                &serde_json::json!({ "agent": self.agent }),
                self.orch.now(),
            )
            .map_err(Failure::crash)?;
        let claim = source.claim_resuming(&self.task, &info, resuming).await;
        if matches!(claim, Ok(_) | Err(ClaimError::NoLongerReady { .. })) {
            self.db()
                .complete_intent(
                    &self.task.id,
                    IntentKind::Claim,
                    self.attempt,
                    self.orch.now(),
                )
                .map_err(Failure::crash)?;
        }
        match claim {
            Ok(claimed) => {
                self.db()
                    .freeze_text(&self.task.id, &claimed.title, &claimed.body)
                    .map_err(Failure::crash)?;
                self.task.title = claimed.title;
                self.task.body = claimed.body;
                if let Some(id) = claimed.comment_id {
                    self.db().record_comment(
                        &self.task.id,
                        &format!("claim-{}", self.attempt),
                        id,
                        self.orch.now(),
                    )?;
                }
                Ok(None)
            }
            Err(ClaimError::NoLongerReady { reason, .. }) => {
                let reason = self
                    .scrubber
                    .scrub_line(&format!("released: {reason}"))
                    .into_owned();
                // FAILED and BLOCKED in one transaction: never FAILED with no retry time.
                let settlement = Settlement {
                    failures: self.task.failures,
                    next_attempt_at: None,
                    block: Some(BlockSettlement {
                        reason: reason.clone(),
                        report: false,
                        released: true,
                    }),
                };
                let settled = self
                    .db()
                    .settle_failure(
                        &self.task.id,
                        self.state,
                        &reason,
                        &settlement,
                        self.orch.now(),
                    )
                    .map_err(Failure::crash)?;
                self.task = settled;
                self.state = self.task.state;
                self.opts
                    .progress
                    .state(&self.task.id, TaskState::Blocked, &reason);
                self.discard_workspace().await;
                Ok(Some(AttemptEnd::Released { reason }))
            }
            Err(ClaimError::Source(e)) => Err(Failure::new(
                AttemptStatus::Crash,
                format!(
                    "cannot claim {} at {}: {e}",
                    self.task.source_ref,
                    source.name()
                ),
            )
            .of_kind(FailureKind::from(&e))),
        }
    }
}
