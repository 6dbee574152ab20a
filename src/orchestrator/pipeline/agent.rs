//! RUNNING: the agent's container, its events into the store, and its RunResult.

use std::time::Duration;

use crate::agents::adapter_for;
use crate::agents::prompt::PromptContext;
use crate::domain::{CheckEvidence, RunResult, RunSpec, TaskState};
use crate::orchestrator::execute::{self, AttemptExecution, RunLimits, TranscriptPaths};
use crate::orchestrator::quota;
use crate::orchestrator::sink::{short_id, StoreSink};
use crate::runtime::container_spec::agent_spec;
use crate::store::IntentKind;

use super::{AttemptRun, Failure};

/// How the agent's container is followed: started fresh, or re-attached after a restart
/// (its id and the events already stored).
enum Follow {
    Start(String),
    Reattach(String, u64),
}

impl AttemptRun<'_> {
    /// The most this attempt's reported cost may count for (issue 24): the attempt's cap,
    /// and no more than what is left of its identity's daily ceiling, so a forged result
    /// line cannot put the identity past its ceiling (until a gateway meters the cost).
    fn cost_room(&self, spec: &RunSpec, cap: f64) -> f64 {
        let Some(ceiling) = self
            .orch
            .config
            .identity(&spec.identity)
            .and_then(|i| i.cost_ceiling_usd_per_day)
        else {
            return cap;
        };
        let day_start = crate::identity_policy::utc_day_start((self.orch.clock)());
        // Unreadable: the cap alone (the ceiling check at the next attempt still holds).
        let Ok(spent) = self.db().cost_spent_since(&spec.identity, day_start) else {
            return cap;
        };
        crate::agents::cost_room(cap, ceiling, spent)
    }

    pub(super) fn previous_failures(&self) -> Vec<CheckEvidence> {
        self.db()
            .attempts(&self.task.id)
            .ok()
            .and_then(|a| a.into_iter().rfind(|r| r.attempt < self.attempt))
            .map(|r| r.evidence.into_iter().filter(|e| !e.passed).collect())
            .unwrap_or_default()
    }

    pub(super) async fn run_agent(
        &mut self,
        spec: &RunSpec,
        reattach: Option<(String, u64)>,
    ) -> Result<AttemptExecution, Failure> {
        let adapter = adapter_for(spec.agent_type);
        let previous = self.previous_failures();
        let handoff = quota::handoff_note(&self.db(), &self.task.id, spec.attempt);
        let prompt = self.orch.config.prompt().render(&PromptContext {
            title: &self.task.title,
            body: &self.task.body,
            source_ref: &self.task.source_ref,
            repo: &self.task.repo,
            branch: &spec.branch,
            attempt: spec.attempt,
            previous_failures: &previous,
            verify_commands: &spec.verification,
            handoff: handoff.as_deref(),
        });
        let invocation = adapter.invocation(spec, &prompt);
        let mut container = agent_spec(
            spec,
            &invocation,
            &self.orch.home_label,
            &self.orch.default_user,
        );
        // Issue 26: the model API goes through a gateway holding the real credential; the
        // container gets a placeholder. (A re-attached attempt has none: see gateway.rs.)
        let gateway = match reattach {
            Some(_) => None,
            None => self.start_gateway(spec).await?,
        };
        if let Some(gw) = &gateway {
            gw.apply(&mut container);
        }
        let config = &self.orch.config;
        let limits = RunLimits {
            deadline: Duration::from_secs(spec.deadline_seconds),
            idle_timeout: Duration::from_secs(spec.idle_timeout_seconds),
            max_output_bytes: config.max_output_bytes(),
            max_workspace_bytes: Some(config.max_workspace_bytes()),
            max_cost_usd: self.cost_room(spec, config.max_cost_usd_per_attempt()),
        };
        let transcript = TranscriptPaths::under(self.orch.home(), &self.task.id, spec.attempt);
        let scrubber = self.scrubber.clone();
        let scrub: execute::Scrub<'_> = scrubber.as_ref();
        let rt = self.orch.runtime.as_ref();
        let follow = match reattach {
            None => {
                // Before `docker create`: a kill before the id is recorded leaves a container
                // the next start finds by its labels and removes (issue 19).
                self.db().record_intent(
                    &self.task.id,
                    IntentKind::Container,
                    spec.attempt,
                    &serde_json::json!({ "name": container.name }),
                    self.orch.now(),
                )?;
                let id = execute::create(rt, &container, limits.deadline, self.orch.now())
                    .await
                    .map_err(|e| Failure::from(e).during("the container failed"))?;
                self.container_created(&id).await?;
                Follow::Start(id)
            }
            Some((id, recorded)) => Follow::Reattach(id, recorded),
        };
        let mut sink = StoreSink {
            store: &self.store,
            task_id: self.task.id.clone(),
            attempt: spec.attempt,
            agent: spec.agent.clone(),
            progress: self.opts.progress.clone(),
            handling: false,
            clock: self.orch.clock.clone(),
        };
        let run = execute::AgentRun {
            runtime: rt,
            adapter: adapter.as_ref(),
            sink: &mut sink,
            limits,
            transcript: Some(&transcript),
            scrub,
            cancel: self.opts.cancel.clone(),
            clock: self.orch.clock.clone(),
        };
        let exec = match follow {
            Follow::Start(id) => execute::start_created(run, &container, &id).await,
            Follow::Reattach(id, recorded) => execute::reattach(run, &id, recorded).await,
        };
        let exec = match (exec, &gateway) {
            (Ok(mut exec), Some(gw)) => {
                let events = gw.fold(&mut exec);
                if let Err(e) = self
                    .db()
                    .append_events(&self.task.id, spec.attempt, &events)
                {
                    tracing::warn!(task = %self.task.id, error = %e, "cannot store the model-API gateway's request events");
                }
                exec.next_seq += events.len() as u64;
                exec.events += events.len() as u64;
                Ok(exec)
            }
            (exec, _) => exec,
        };
        drop(gateway);
        let exec = exec.map_err(|e| Failure::from(e).during("the container failed"))?;
        if let Some(err) = &exec.sink_error {
            return Err(Failure::crash(format!("cannot record the run: {err}")));
        }
        Ok(exec)
    }

    /// The attempt's model-API gateway, when its CLI's credential can go through one.
    async fn start_gateway(
        &mut self,
        spec: &RunSpec,
    ) -> Result<Option<crate::orchestrator::gateway::AttemptGateway>, Failure> {
        let config = self.orch.config.clone();
        let ceiling = config
            .identities()
            .iter()
            .find(|i| i.name == spec.identity)
            .and_then(|i| i.cost_ceiling_usd_per_day);
        let daily_left_usd = match ceiling {
            Some(ceiling) => {
                let day = crate::identity_policy::utc_day_start((self.orch.clock)());
                let spent = self
                    .db()
                    .cost_spent_since(&spec.identity, day)
                    .map_err(Failure::crash)?;
                Some(ceiling - spent)
            }
            None => None,
        };
        let gw = crate::orchestrator::gateway::start(
            spec,
            crate::orchestrator::gateway::GatewayInputs {
                config: &config,
                runtime: self.orch.runtime.as_ref(),
                env: &self.orch.env,
                clock: &self.orch.clock,
                daily_left_usd,
            },
        )
        .await
        .map_err(Failure::crash)?;
        Ok(gw)
    }

    /// The container exists (not started yet): its id is recorded for recovery and the task
    /// moves PROVISIONED -> RUNNING. On failure the container is removed.
    async fn container_created(&mut self, id: &str) -> Result<(), Failure> {
        crate::failpoint::hit("container-created");
        let set = self.db().set_container(&self.task.id, self.attempt, id);
        let recorded = match set {
            Ok(()) => self.move_to(
                TaskState::Running,
                &format!("container {} started", short_id(id)),
            ),
            Err(e) => Err(Failure::from(e).during(&format!("cannot record container {id}"))),
        };
        if recorded.is_err() {
            if let Err(e) = self.orch.runtime.remove(id).await {
                tracing::warn!(container = id, error = %e, "cannot remove the container after a failed record; the watchdog will");
            }
        }
        recorded
    }

    pub(super) fn run_result(&self, spec: &RunSpec, exec: &AttemptExecution) -> RunResult {
        RunResult {
            turns: exec.outcome.turns,
            duration_seconds: exec.duration.as_secs_f64(),
            cost_usd: exec.outcome.cost_usd,
            tokens: exec.outcome.tokens,
            exit_code: exec.exit_code,
            final_message: exec
                .outcome
                .final_message
                .as_deref()
                .map(|m| self.scrubber.scrub_line(m).into_owned()),
            // Figures the runtime did not take as reported (a clamped cost) stay visible in
            // `status TASK`, even on a successful attempt.
            reason: {
                let parts: Vec<&str> = exec
                    .reason
                    .iter()
                    .chain(&exec.warnings)
                    .map(String::as_str)
                    .collect();
                (!parts.is_empty())
                    .then(|| self.scrubber.scrub_line(&parts.join("; ")).into_owned())
            },
            events: exec.events,
            artifacts: vec![
                TranscriptPaths::under(self.orch.home(), &self.task.id, self.attempt)
                    .stdout
                    .display()
                    .to_string(),
            ],
            ..RunResult::new(&self.task.id, self.attempt, &spec.agent, exec.status)
        }
    }
}
