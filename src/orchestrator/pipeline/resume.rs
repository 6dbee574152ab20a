//! Resuming an attempt after a daemon restart.

use crate::domain::{AttemptStatus, RunResult, TaskState};
use crate::orchestrator::proof;
use crate::orchestrator::sink::short_id;
use crate::store::AttemptRecord;

use super::{AttemptEnd, AttemptRun, Failure, Ran};

/// Resumes of one attempt after restarts before it is given up (issue 11: an attempt that
/// hangs the daemon must not hang every restart too).
const MAX_RESUMES: u32 = 3;

impl AttemptRun<'_> {
    pub(super) async fn resumed(&mut self, record: AttemptRecord) -> Result<AttemptEnd, Failure> {
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
        let resumes = self
            .db()
            .count_resume(&self.task.id, record.attempt, self.orch.now())
            .map_err(Failure::crash)?;
        if resumes > MAX_RESUMES {
            if let Some(id) = &record.container_id {
                let _ = self.orch.runtime.kill(id).await;
                let _ = self.orch.runtime.remove(id).await;
            }
            return Err(Failure::crash(format!(
                "attempt {} was resumed {} times after restarts without finishing; giving it up",
                record.attempt,
                resumes - 1
            )));
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
                let result = RunResult {
                    turns: record.turns.unwrap_or(0),
                    duration_seconds: record.duration_seconds.unwrap_or(0.0),
                    cost_usd: record.cost_usd,
                    tokens: record.tokens.unwrap_or_default(),
                    exit_code: record.exit_code,
                    final_message: record.final_message.clone(),
                    reason: record.reason.clone(),
                    ..RunResult::new(&self.task.id, record.attempt, &record.agent, status)
                };
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
