//! Resuming an attempt after a daemon restart (issue 24): its pending landing is finished
//! first; then only a restart the attempt itself could have caused counts against it
//! (`orchestrator::restarts`); otherwise it re-attaches to its container or re-runs
//! verification. [`AttemptRun::interrupted`] ends an attempt that will not go on without
//! counting a failure, after finishing what it started at the source.

use crate::domain::{AttemptStatus, CheckEvidence, RunResult, RunSpec, TaskState};
use crate::orchestrator::proof;
use crate::orchestrator::restarts::{self, Verdict};
use crate::orchestrator::sink::short_id;
use crate::store::{AttemptRecord, IntentKind};
use crate::workspace::Workspace;

use super::{AttemptEnd, AttemptRun, Failure, Ran};

impl AttemptRun<'_> {
    /// Loads what the attempt noted for itself (its workspace, chain, RunSpec).
    fn load(&mut self, record: &AttemptRecord) -> Result<(Workspace, RunSpec), Failure> {
        self.attempt = record.attempt;
        let spec = record.spec().map_err(Failure::crash)?;
        self.agent = spec.agent.clone();
        let ws = self
            .db()
            .workspace_of(&self.task.id, record.attempt)
            .ok()
            .flatten();
        self.ws = ws.clone();
        let Some(ws) = ws else {
            return Err(Failure::crash(
                "the attempt's workspace record is missing; starting over",
            ));
        };
        let chain = self.db().chain_of(&self.task.id).ok().flatten();
        self.chain = chain.unwrap_or_else(|| vec![spec.agent.clone()]);
        self.scrub_secrets_of(&spec.env_overlay, &spec.volume_mounts);
        self.spec = Some(spec.clone());
        Ok((ws, spec))
    }

    /// The attempt's verified landing a restart (or a lost lease) interrupted: its pending
    /// land intent with the sha and the evidence it was verified with (issue 24). `None`
    /// for an intent recorded before the evidence was kept with it: verification reruns.
    fn pending_landing(&self) -> Option<(String, Vec<CheckEvidence>)> {
        let intent = self
            .db()
            .pending_intent(&self.task.id, IntentKind::Land, self.attempt)
            .ok()
            .flatten()?;
        let sha = intent.payload["sha"].as_str()?.to_string();
        let evidence = serde_json::from_value(intent.payload["evidence"].clone()).ok()?;
        Some((sha, evidence))
    }

    /// Finishes the attempt's pending landing, if it has one: the push is found or done,
    /// the pull request found or opened, the comment found by its marker or posted, the
    /// labels finished; then LANDED. Never verifies or opens anything a second time.
    async fn finish_landing(
        &mut self,
        record: &AttemptRecord,
        ws: &Workspace,
        spec: &RunSpec,
    ) -> Option<Result<AttemptEnd, Failure>> {
        if self.state != TaskState::Verifying {
            return None;
        }
        let (sha, evidence) = self.pending_landing()?;
        let result = result_of(record);
        self.result = Some(result.clone());
        self.opts.progress.state(
            &self.task.id,
            TaskState::Verifying,
            &format!(
                "finishing the landing of {} a restart interrupted",
                &sha[..sha.len().min(10)]
            ),
        );
        let status = record.status.unwrap_or(AttemptStatus::Succeeded);
        let ran = Ran {
            ws: ws.clone(),
            spec: spec.clone(),
            result,
            gate: proof::result_gate(status, record.reason.as_deref()),
        };
        Some(self.land(&ran, sha, evidence).await)
    }

    /// An attempt that will not go on (given up after restarts it caused, or whose lease
    /// another instance found expired): its pending intents are finished first (a verified
    /// landing lands), otherwise its container goes and it ends as an interruption, which
    /// starts the task's next attempt at once without counting a failure (issue 24).
    pub(super) async fn interrupted(
        &mut self,
        record: AttemptRecord,
        why: String,
    ) -> Result<AttemptEnd, Failure> {
        let (ws, spec) = self.load(&record)?;
        if let Some(end) = self.finish_landing(&record, &ws, &spec).await {
            return end;
        }
        if let Some(id) = &record.container_id {
            let _ = self.orch.runtime.kill(id).await;
            let _ = self.orch.runtime.remove(id).await;
        }
        Err(Failure::interrupted(why))
    }

    /// An attempt of a machine that stopped renewing its lease, taken over by this daemon
    /// (issue 27). Its workspace and container are that machine's and never touched here.
    /// A verified landing it pushed is found at the upstream and finished from here (the
    /// pull request found by its branch, never opened twice); anything else ends as an
    /// interruption: the next attempt runs at once and no failure is counted.
    pub(super) async fn adopted(
        &mut self,
        record: AttemptRecord,
        why: String,
    ) -> Result<AttemptEnd, Failure> {
        let (ws, spec) = match self.load(&record) {
            Ok(loaded) => loaded,
            Err(_) => return Err(Failure::interrupted(why)),
        };
        if self.state != TaskState::Verifying {
            return Err(Failure::interrupted(why));
        }
        let Some((sha, evidence)) = self.pending_landing() else {
            return Err(Failure::interrupted(why));
        };
        let manager = self.orch.workspaces.clone();
        let (upstream, branch) = (ws.upstream.clone(), ws.branch.clone());
        let token = self.token().map(String::from);
        let remote = tokio::task::spawn_blocking(move || {
            manager.upstream_branch_sha(&upstream, &branch, token.as_deref())
        })
        .await
        .map_err(Failure::crash)?;
        match remote {
            Ok(Some(remote)) if remote == sha => {}
            Ok(_) => return Err(Failure::interrupted(why)),
            // Not knowing is not the agent's failure either; the next attempt starts over.
            Err(e) => {
                return Err(Failure::interrupted(format!(
                    "{why}; cannot ask the upstream for its push: {e}"
                )))
            }
        }
        self.opts.progress.state(
            &self.task.id,
            TaskState::Verifying,
            &format!(
                "finishing the landing of {} that a lost machine pushed",
                &sha[..sha.len().min(10)]
            ),
        );
        let result = result_of(&record);
        self.result = Some(result.clone());
        let status = record.status.unwrap_or(AttemptStatus::Succeeded);
        let pushed = ws.branch.clone();
        let ran = Ran {
            gate: proof::result_gate(status, record.reason.as_deref()),
            ws,
            spec,
            result,
        };
        self.land_as(&ran, sha, evidence, Some(pushed)).await
    }

    pub(super) async fn resumed(&mut self, record: AttemptRecord) -> Result<AttemptEnd, Failure> {
        let (ws, spec) = self.load(&record)?;
        // Issue 24: what the attempt had started at the source is finished before anything
        // else, and before any give-up.
        if let Some(end) = self.finish_landing(&record, &ws, &spec).await {
            return end;
        }
        // Only a restart the attempt itself could have caused counts (see `restarts`).
        let (found, strikes) = self
            .db()
            .take_handling(&self.task.id, record.attempt)
            .map_err(Failure::crash)?;
        match restarts::judge(found.as_ref(), &restarts::boot_id(), strikes) {
            Verdict::Resume { strikes: now } => {
                if now != strikes {
                    self.db()
                        .set_strikes(&self.task.id, record.attempt, now, self.orch.now())
                        .map_err(Failure::crash)?;
                    tracing::warn!(task = %self.task.id, attempt = record.attempt, strikes = now,
                        "the daemon died while handling this attempt's output; resuming it");
                }
            }
            Verdict::GiveUp { strikes, window } => {
                if let Some(id) = &record.container_id {
                    let _ = self.orch.runtime.kill(id).await;
                    let _ = self.orch.runtime.remove(id).await;
                }
                return Err(Failure::interrupted(restarts::give_up_reason(
                    record.attempt,
                    strikes,
                    &window,
                )));
            }
        }
        match self.state {
            TaskState::Running | TaskState::Provisioned => {
                let Some(container) = record.container_id.clone() else {
                    return Err(Failure::crash(
                        "the daemon stopped before the container existed",
                    ));
                };
                if self.state == TaskState::Provisioned {
                    self.move_to(
                        TaskState::Running,
                        &format!("container {} found after a restart", short_id(&container)),
                    )?;
                }
                let recorded = self
                    .db()
                    .event_count(&self.task.id, record.attempt)
                    .map_err(Failure::crash)?;
                self.opts.progress.state(
                    &self.task.id,
                    TaskState::Running,
                    &format!(
                        "re-attached to container {} after {} stored event(s)",
                        short_id(&container),
                        recorded
                    ),
                );
                let exec = self.run_agent(&spec, Some((container, recorded))).await?;
                self.after_run(ws, spec, exec).await
            }
            TaskState::Verifying => {
                let status = record.status.unwrap_or(AttemptStatus::Succeeded);
                let gate = proof::result_gate(status, record.reason.as_deref());
                let result = result_of(&record);
                self.result = Some(result.clone());
                self.opts.progress.state(
                    &self.task.id,
                    TaskState::Verifying,
                    "verification restarted after a restart",
                );
                self.verify_and_land(Ran {
                    ws,
                    spec,
                    result,
                    gate,
                })
                .await
            }
            other => Err(Failure::crash(format!("cannot resume a task in {other}"))),
        }
    }
}

/// The agent's result as the attempt recorded it when the agent ended.
fn result_of(record: &AttemptRecord) -> RunResult {
    let status = record.status.unwrap_or(AttemptStatus::Succeeded);
    RunResult {
        turns: record.turns.unwrap_or(0),
        duration_seconds: record.duration_seconds.unwrap_or(0.0),
        cost_usd: record.cost_usd,
        tokens: record.tokens.unwrap_or_default(),
        exit_code: record.exit_code,
        final_message: record.final_message.clone(),
        reason: record.reason.clone(),
        ..RunResult::new(&record.task_id, record.attempt, &record.agent, status)
    }
}
