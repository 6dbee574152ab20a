//! FAILED and what follows it: retry, fallback, hold or BLOCKED.

use std::collections::BTreeSet;

use anyhow::Context as _;
use chrono::{DateTime, Utc};

use crate::domain::{AttemptStatus, RunResult, TaskState};
use crate::orchestrator::failure::Class;
use crate::orchestrator::retry::Next;
use crate::orchestrator::verify::first_line;
use crate::orchestrator::{failure, intents, proof, quota, retry};
use crate::store::{BlockSettlement, IntentKind, Settlement};

use super::{AttemptEnd, AttemptRun, Failure};

impl AttemptRun<'_> {
    pub(super) async fn discard_workspace(&mut self) {
        if let Some(ws) = self.ws.take() {
            let manager = self.orch.workspaces.clone();
            let _ = tokio::task::spawn_blocking(move || manager.remove(&ws.path)).await;
        }
    }

    /// Turns the outcome into the task's next state.
    pub(super) async fn conclude(
        &mut self,
        outcome: Result<AttemptEnd, Failure>,
    ) -> anyhow::Result<AttemptEnd> {
        let failure = match outcome {
            Ok(end) => return Ok(end),
            Err(failure) => failure,
        };
        if failure.lease_lost {
            // Issue 27: the task is not this daemon's to write any more.
            tracing::warn!(task = %self.task.id, attempt = self.attempt, "{}", failure.reason);
            return Ok(AttemptEnd::LeaseLost {
                reason: failure.reason,
            });
        }
        if crate::store::damaged() {
            // A damaged database is never a task failure (issue 12): record nothing.
            return Err(crate::store::DatabaseDamaged {
                path: self.orch.db_path(),
                detail: first_line(&failure.reason),
            }
            .into());
        }
        // The attempt ends here: its restart breadcrumb and strikes go with it (issue 24).
        // An attempt adopted from a lost machine, or given up, never reaches the progress
        // that clears them, and a strike of an ended attempt counts nothing.
        self.db().clear_handling(&self.task.id, self.attempt)?;
        // A person's cancel (issue 29) ends the attempt whatever it died of.
        let cancel = self.db().cancel_request(&self.task.id)?;
        if let Some(request) = cancel {
            return self.conclude_cancelled(&request, &failure).await;
        }
        let now = (self.orch.clock)();
        let mut reason = self.scrubber.scrub_line(&failure.reason).into_owned();
        // A permanent failure carries its fix everywhere it is shown: the attempt, the
        // transitions and the report at the source.
        let class = failure::classify(&failure.kind, failure.status, &self.agent, &self.task.repo);
        if let Class::Permanent { fix, .. } = &class {
            let fix = fix.replace("retry TASK", &format!("retry {}", self.task.id));
            reason = failure::permanent_reason(&reason, &fix);
        }
        tracing::info!(task = %self.task.id, attempt = self.attempt, status = %failure.status, "{reason}");
        // The attempt's evidence, when the attempt row exists: recorded with the settlement.
        let evidence = if self.spec.is_some() {
            // The agent never ended (the container failed to start, the run was cut short):
            // the attempt's result is the failure alone.
            let mut result = self.result.take().unwrap_or_else(|| RunResult {
                duration_seconds: self.started.elapsed().as_secs_f64(),
                ..RunResult::new(&self.task.id, self.attempt, &self.agent, failure.status)
            });
            result.status = failure.status;
            result.reason = Some(reason.clone());
            self.result = Some(result);
            let mut evidence = failure.evidence.clone();
            if evidence.is_empty() {
                evidence.push(proof::gate("result", false, reason.clone()));
            }
            Some(evidence)
        } else {
            // No attempt row: this number is reused, so its directory must go.
            self.discard_workspace().await;
            None
        };
        // Decide first, then write the attempt's result, FAILED, the failure count, the
        // retry time and (when it gives up) BLOCKED with its pending report in one
        // transaction (issue 19): a kill never leaves a failed attempt uncounted.
        let (end, settlement) = self.settlement(&failure, &class, &reason, now)?;
        let from = self.state;
        let settled = match (&self.result, &evidence) {
            (Some(result), Some(evidence)) => self.db().settle_attempt_failure(
                (result, evidence),
                from,
                &reason,
                &settlement,
                now,
            ),
            _ => self
                .db()
                .settle_failure(&self.task.id, from, &reason, &settlement, now),
        }
        .with_context(|| {
            format!(
                "cannot record the attempt and move {} to FAILED",
                self.task.id
            )
        })?;
        self.task = settled;
        if from != TaskState::Failed {
            self.opts
                .progress
                .state(&self.task.id, TaskState::Failed, &reason);
        }
        self.state = self.task.state;
        crate::failpoint::hit("failed");
        if let Some(block) = &settlement.block {
            self.opts
                .progress
                .state(&self.task.id, TaskState::Blocked, &block.reason);
            crate::failpoint::hit("blocked-report");
            self.report_blocked().await;
        }
        Ok(end)
    }

    /// CANCELLED by a person (`orchestrator::cancel`): the attempt is recorded as
    /// cancelled, no failure is counted, the source is told and the claim released.
    async fn conclude_cancelled(
        &mut self,
        request: &crate::store::CancelRequest,
        failure: &Failure,
    ) -> anyhow::Result<AttemptEnd> {
        let now = (self.orch.clock)();
        let reason = crate::orchestrator::cancel::reason(request);
        tracing::info!(task = %self.task.id, attempt = self.attempt, ended = %failure.status, "{reason}");
        if self.spec.is_some() {
            let mut result = self.result.take().unwrap_or_else(|| RunResult {
                duration_seconds: self.started.elapsed().as_secs_f64(),
                ..RunResult::new(
                    &self.task.id,
                    self.attempt,
                    &self.agent,
                    AttemptStatus::Cancelled,
                )
            });
            result.status = AttemptStatus::Cancelled;
            result.reason = Some(reason.clone());
            self.result = Some(result);
            self.record_attempt(&[proof::gate("result", false, reason.clone())])
                .context("cannot record the attempt")?;
        } else {
            self.discard_workspace().await;
        }
        let report = self.reports_back();
        let settled = self
            .db()
            .settle_cancel(&self.task.id, self.state, &reason, report, now)
            .with_context(|| format!("cannot move {} to CANCELLED", self.task.id))?;
        self.task = settled;
        self.state = self.task.state;
        self.opts
            .progress
            .state(&self.task.id, TaskState::Cancelled, &reason);
        if report {
            crate::orchestrator::cancel::report(
                &self.orch.store,
                &self.orch.sources,
                &self.task,
                self.orch.now(),
            )
            .await?;
        }
        Ok(AttemptEnd::Cancelled { reason })
    }

    /// What follows a failure: the attempt end and what the store records with FAILED
    /// (decided by [`retry::after_failure`]).
    fn settlement(
        &mut self,
        failure: &Failure,
        class: &Class,
        reason: &str,
        now: DateTime<Utc>,
    ) -> anyhow::Result<(AttemptEnd, Settlement)> {
        let chain = if self.chain.is_empty() {
            vec![self.agent.clone()]
        } else {
            self.chain.clone()
        };
        let reason = reason.to_string();
        if failure.interrupted {
            // Issue 24: not the agent's failure. The next attempt at once, bounded: after
            // `max_attempts` such give-ups the task is BLOCKED for a person.
            let giveups = self.db().count_giveup(&self.task.id, now)?;
            let failures = self.task.failures;
            if giveups >= self.orch.policy.max_attempts.max(1) {
                let block_reason = format!(
                    "{giveups} attempt(s) given up after restarts they caused, the limit is \
                     max_attempts = {}; last: {reason}",
                    self.orch.policy.max_attempts
                );
                let block = BlockSettlement {
                    reason: block_reason.clone(),
                    report: self.reports_back(),
                    released: false,
                };
                return Ok((
                    AttemptEnd::Blocked {
                        reason: block_reason,
                    },
                    Settlement {
                        failures,
                        next_attempt_at: None,
                        block: Some(block),
                    },
                ));
            }
            return Ok((
                AttemptEnd::Retry { at: now, reason },
                Settlement {
                    failures,
                    next_attempt_at: Some(now),
                    block: None,
                },
            ));
        }
        let waits = failure.wait_until.is_some()
            || (failure.status == AttemptStatus::Cancelled && self.opts.cancel_means_retry);
        let exhausted = if waits {
            self.exhausted()
        } else {
            match self.settle_quota_hit(failure.status, class, &chain, now)? {
                QuotaSettled::Continue(exhausted) => exhausted,
                // Issue 14: the next agent that is neither out nor refused, else a wait for
                // the earliest reset; neither counts a failure.
                QuotaSettled::Fallback(next_agent) => {
                    return Ok((
                        AttemptEnd::Fallback { next_agent, reason },
                        Settlement {
                            failures: self.task.failures,
                            next_attempt_at: Some(now),
                            block: None,
                        },
                    ))
                }
                QuotaSettled::Park(wait) => {
                    let at = wait.until;
                    let reason = format!("{reason}; {}", quota::park_reason(&wait, now));
                    return Ok((
                        AttemptEnd::Retry { at, reason },
                        Settlement {
                            failures: self.task.failures,
                            next_attempt_at: Some(at),
                            block: None,
                        },
                    ));
                }
            }
        };
        let next = retry::after_failure(
            &self.orch.policy,
            &retry::FailedAttempt {
                status: failure.status,
                reason: &reason,
                class,
                wait_until: failure.wait_until,
                cancel_means_retry: self.opts.cancel_means_retry,
                failures: self.task.failures,
                chain: &chain,
                exhausted: &exhausted,
            },
            now,
        );
        let settle = |failures, next_attempt_at, block| Settlement {
            failures,
            next_attempt_at,
            block,
        };
        Ok(match next {
            Next::Retry { at, failures } => (
                AttemptEnd::Retry { at, reason },
                settle(failures, Some(at), None),
            ),
            Next::Fallback {
                next_agent,
                failures,
            } => (
                AttemptEnd::Fallback { next_agent, reason },
                settle(failures, Some(now), None),
            ),
            Next::Hold { failures } => (AttemptEnd::Held { reason }, settle(failures, None, None)),
            Next::Block {
                reason: block_reason,
                failures,
            } => {
                let block = BlockSettlement {
                    reason: block_reason.clone(),
                    // A follow-up's block is the shepherd's to hand over, not the issue's.
                    report: self.reports_back(),
                    released: false,
                };
                (
                    AttemptEnd::Blocked {
                        reason: block_reason,
                    },
                    settle(failures, None, Some(block)),
                )
            }
        })
    }

    /// Where an attempt's quota hit (or refused login) is settled. A refused login is
    /// noted for this task; a usage limit was already recorded for its (identity, agent)
    /// when the agent ended. Then the next usable agent of the chain, or the wait for the
    /// earliest reset (issue 14).
    fn settle_quota_hit(
        &mut self,
        status: AttemptStatus,
        class: &Class,
        chain: &[String],
        now: DateTime<Utc>,
    ) -> anyhow::Result<QuotaSettled> {
        let mut exhausted = self.exhausted();
        if !retry::exhausts_agent(status, class) || self.agent.is_empty() {
            return Ok(QuotaSettled::Continue(exhausted));
        }
        if status != AttemptStatus::Quota {
            quota::refuse(&self.db(), &self.task.id, &self.agent, now)?;
        }
        exhausted.insert(self.agent.clone());
        let choice =
            quota::after_attempt(&self.db(), &self.orch.config, &self.task.id, chain, now)?;
        Ok(match choice {
            quota::Choice::Agent(next_agent) => QuotaSettled::Fallback(next_agent),
            quota::Choice::Park(wait) => QuotaSettled::Park(wait),
            quota::Choice::NoAgent => {
                exhausted.extend(chain.iter().cloned());
                QuotaSettled::Continue(exhausted)
            }
        })
    }

    pub(super) async fn report_blocked(&self) {
        if !self.reports_back() {
            return;
        }
        let attempts = self.db().attempts(&self.task.id).unwrap_or_default();
        let blocked = intents::blocked_of(&attempts);
        // Done only once the source has it; otherwise the next start finishes the report.
        if intents::report_blocked(self.orch, &self.task, &blocked).await {
            // From now on the ready label on the issue can only be a person's: re-labelling
            // brings the task back as a new generation (`orchestrator::generation`).
            // A write that fails leaves the Block intent pending: the next start reports
            // again (idempotent at the source) and records it then (`intents::finish`).
            // One statement per lock: `db()` is a std Mutex guard, and a second `db()`
            // while the first guard lives (in an `and_then` closure) deadlocks the daemon.
            let reported = self
                .db()
                .mark_block_reported(&self.task.id, self.orch.now());
            let recorded = reported.and_then(|()| {
                let db = self.db();
                db.complete_intent(
                    &self.task.id,
                    IntentKind::Block,
                    self.task.attempts,
                    self.orch.now(),
                )
            });
            if let Err(e) = recorded {
                tracing::warn!(task = %self.task.id, error = %e, "the blocked report is posted but cannot be recorded; the next start records it");
            }
        }
    }
}

/// What a quota hit or refused login leaves to decide.
enum QuotaSettled {
    /// Not settled here: the usual retry policy decides, with these agents out.
    Continue(BTreeSet<String>),
    /// Run the next attempt on this agent at once.
    Fallback(String),
    /// Every agent of the chain is out: wait for the earliest reset.
    Park(crate::domain::QuotaWait),
}
