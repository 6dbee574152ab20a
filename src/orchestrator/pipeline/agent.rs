//! RUNNING: the agent's container, its events into the store, and its RunResult.

use std::time::Duration;

use crate::agents::adapter_for;
use crate::agents::prompt::PromptContext;
use crate::domain::{AttemptStatus, CheckEvidence, RunResult, RunSpec, TaskState};
use crate::orchestrator::execute::{self, AttemptExecution, RunLimits, TranscriptPaths};
use crate::orchestrator::quota;
use crate::orchestrator::sink::{short_id, StoreSink};
use crate::runtime::container_spec::agent_spec;
use crate::store::IntentKind;

use super::{AttemptRun, Failure};

/// The attempt's `egress` events (pure): each refusal with the line that would allow
/// it, then the summary of what was allowed. Seqs are set by the caller.
pub(crate) fn egress_events(
    report: &crate::egress::EgressReport,
    profile: &str,
    at: chrono::DateTime<chrono::Utc>,
) -> Vec<crate::domain::TaskEvent> {
    use crate::domain::{EventKind, EventStream, TaskEvent};
    let mut out = Vec::new();
    for r in &report.refused {
        let why = crate::egress::policy::Refusal::from_code(&r.reason);
        let summary = match &why {
            Some(why) if !r.host.is_empty() => {
                crate::egress::policy::suggestion(&r.host, r.port, why, profile)
            }
            _ => format!("refused: {} {}", r.reason, r.detail)
                .trim()
                .to_string(),
        };
        out.push(TaskEvent {
            seq: 0,
            kind: EventKind::Egress,
            stream: EventStream::Stdout,
            summary,
            data: serde_json::json!({ "egress": "refused", "host": r.host, "port": r.port, "reason": r.reason, "detail": r.detail }),
            at,
        });
    }
    if report.allowed.is_empty() && report.refused.is_empty() {
        return out;
    }
    out.push(TaskEvent {
        seq: 0,
        kind: EventKind::Egress,
        stream: EventStream::Stdout,
        summary: format!("egress: {}", report.summary()),
        data: serde_json::json!({ "egress": "summary", "allowed": report.allowed, "refused": report.refused.len() }),
        at,
    });
    out
}

/// A failed attempt whose proxy refused something says so in its reason, with the fix.
fn explain_refusals(
    exec: &mut AttemptExecution,
    report: &crate::egress::EgressReport,
    profile: &str,
) {
    if exec.status == AttemptStatus::Succeeded {
        return;
    }
    let Some(first) = report.refused.iter().find(|r| !r.host.is_empty()) else {
        return;
    };
    let Some(why) = crate::egress::policy::Refusal::from_code(&first.reason) else {
        return;
    };
    let line = crate::egress::policy::suggestion(&first.host, first.port, &why, profile);
    let more = report.refused.len() - 1;
    let line = if more > 0 {
        format!("egress {line} (and {more} more refusal(s))")
    } else {
        format!("egress {line}")
    };
    exec.reason = Some(match exec.reason.take() {
        Some(r) => format!("{r}; {line}"),
        None => line,
    });
}

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
        // Issue 25: under `allowlist` the agent's only network is the attempt's own
        // internal one, whose one exit is the attempt's proxy. The model-API gateway still
        // runs in the daemon on the host (issue 26), which that network cannot reach: an
        // attempt behind the gateway keeps the profile's network until the gateway moves
        // into the proxy (docs/SECURITY.md "Egress").
        let egress = match &gateway {
            None => crate::egress::plan(spec, &self.orch.home_label),
            Some(_) => {
                if spec.egress.mode == crate::domain::EgressMode::Allowlist {
                    tracing::warn!(task = %self.task.id, "egress allowlist not applied: this attempt's model API goes through the in-daemon gateway");
                }
                None
            }
        };
        if gateway.is_none() {
            container.network = crate::egress::agent_network(spec, egress.as_ref());
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
                if let Some(plan) = &egress {
                    let started = std::time::Instant::now();
                    let endpoint = rt.egress_up(plan).await.map_err(|e| {
                        Failure::from(e).during("the attempt's egress network or proxy failed")
                    })?;
                    tracing::info!(
                        task = %self.task.id,
                        attempt = spec.attempt,
                        network = %plan.network,
                        proxy = %endpoint.proxy_ip,
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        "egress network and proxy up"
                    );
                    for (name, value) in crate::egress::agent_env(endpoint.proxy_ip) {
                        container = container.env(name, value);
                    }
                }
                let created =
                    match execute::create(rt, &container, limits.deadline, self.orch.now()).await {
                        Ok(id) => self.container_created(&id).await.map(|()| id),
                        Err(e) => Err(Failure::from(e).during("the container failed")),
                    };
                match created {
                    Ok(id) => Follow::Start(id),
                    Err(failure) => {
                        if let Some(plan) = &egress {
                            self.collect_egress(spec, plan).await;
                        }
                        return Err(failure);
                    }
                }
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
        // The proxy and the network go on every path (success, failure, cancel, deadline,
        // an engine error); what the proxy logged becomes the attempt's egress events.
        let report = match &egress {
            Some(plan) => self.collect_egress(spec, plan).await,
            None => None,
        };
        let exec = exec.map(|mut exec| {
            if let Some(report) = &report {
                explain_refusals(&mut exec, report, &spec.egress.profile);
            }
            exec
        });
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

    /// Stops and removes the attempt's proxy and network, and records what the proxy
    /// logged: one `egress` event per refusal (with the line to add) and one summary of
    /// the allowed connections. Best effort: a failure here never fails the attempt.
    async fn collect_egress(
        &self,
        spec: &RunSpec,
        plan: &crate::runtime::EgressPlan,
    ) -> Option<crate::egress::EgressReport> {
        let log = match self
            .orch
            .runtime
            .egress_down(&plan.proxy_name, &plan.network)
            .await
        {
            Ok(log) => log,
            Err(e) => {
                tracing::warn!(task = %self.task.id, proxy = %plan.proxy_name, error = %e, "cannot remove the attempt's egress proxy; cleanup will");
                return None;
            }
        };
        let report = crate::egress::EgressReport::from_log(&log);
        for a in &report.allowed {
            for _ in 0..a.connections {
                crate::metrics::egress_connection(true, "");
            }
        }
        for r in &report.refused {
            crate::metrics::egress_connection(false, &r.reason);
        }
        let events = egress_events(&report, &spec.egress.profile, self.orch.now());
        let db = self.db();
        let next = db.event_count(&self.task.id, spec.attempt).unwrap_or(0);
        let events: Vec<_> = events
            .into_iter()
            .enumerate()
            .map(|(i, mut e)| {
                e.seq = next + i as u64;
                e.summary = self.scrubber.scrub_line(&e.summary).into_owned();
                e
            })
            .collect();
        if let Err(e) = db.append_events(&self.task.id, spec.attempt, &events) {
            tracing::warn!(task = %self.task.id, error = %e, "cannot record the egress events");
        }
        Some(report)
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
