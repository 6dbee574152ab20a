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

use super::{egress, AttemptRun, Failure};

/// What the daemon's log says of a store that did not take an attempt's egress events
/// (pure): a full disk is named, with where and what to do.
fn egress_store_failure(e: &crate::store::StoreError, store: &str) -> String {
    if e.is_full() {
        format!(
            "cannot store the attempt's egress events: the disk of the queue database {store} is full — free space on the filesystem that holds it (or move the home to a larger one)"
        )
    } else {
        format!("cannot store the attempt's egress events in the queue database {store}")
    }
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
    let more = report.refused_total.saturating_sub(1);
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

/// The attempt's egress network and proxy, made and started while the workspace is
/// prepared (issue 25): the proxy waits for its config, which the daemon writes once the
/// attempt is routed; only its `ready` is left when the agent's stage comes.
pub(super) struct EarlyNetwork {
    name: String,
    proxy: String,
    /// The network and the proxy's container made (not started), with the proxy's fixed
    /// address; `None`: making them failed (`started` says why).
    made: tokio::sync::oneshot::Receiver<Option<crate::runtime::EgressEndpoint>>,
    /// The proxy started (after `made`).
    started: StartedProxy,
}

type StartedProxy =
    tokio::task::JoinHandle<Result<crate::runtime::EgressEndpoint, crate::runtime::RuntimeError>>;

/// The early network and proxy as the agent's stage takes them.
struct Early {
    endpoint: crate::runtime::EgressEndpoint,
    /// The proxy still starting: the agent's container is held (`ContainerSpec::hold`),
    /// started beside the proxy and released once the proxy listens ([`Held`]). `None`:
    /// the proxy runs already (an image that cannot be held keeps that order).
    starting: Option<StartedProxy>,
}

/// An agent's container started beside its proxy, to be released once the proxy listens.
struct Held {
    proxy: String,
    starting: StartedProxy,
    /// The proxy hosts the model-API gateway: its credential file leaves the disk once the
    /// proxy said `ready` (it read the file before).
    forget_credential: bool,
}

/// What the follower of the attempt's proxy log read ([`AttemptRun::follow_proxy`]).
struct Followed {
    tally: egress::Tally,
    /// It read the log to its end (the proxy exited); else the log is read whole.
    to_the_end: bool,
    /// From the agent's end to the log's.
    drained: std::time::Duration,
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

    /// Begins making this attempt's egress network and starting its proxy
    /// (`egress::early_plan`: the proxy waits for its config file) while the workspace is
    /// prepared, when some agent profile runs under `egress: allowlist` (the one routed to
    /// may not: both are removed again, [`Self::take_early_network`]).
    pub(super) fn egress_early(&mut self) {
        let allowlist = self
            .orch
            .config
            .agents()
            .iter()
            .any(|a| a.egress.mode == crate::domain::EgressMode::Allowlist);
        if !allowlist {
            return;
        }
        let label = &self.orch.home_label;
        let (name, proxy) = crate::egress::names(&self.task.id, self.attempt, label);
        let global = self.orch.config.global();
        let outbound = global.egress.outbound_network.clone();
        let pins = global.egress.hosts.clone();
        let home = self.orch.home().to_path_buf();
        let rt = self.orch.runtime.clone();
        let (task, attempt, label) = (self.task.id.clone(), self.attempt, label.clone());
        let (made_tx, made) = tokio::sync::oneshot::channel();
        let started = tokio::spawn(async move {
            let started = std::time::Instant::now();
            let made_dir = crate::orchestrator::gateway::fresh_proxy_dir(
                &home,
                &crate::egress::names(&task, attempt, &label).1,
            )
            .map_err(|e| crate::runtime::RuntimeError::Engine {
                op: "egress",
                message: format!("cannot make the egress proxy's directory: {e}"),
            });
            let (dir, user) = match made_dir {
                Ok(d) => d,
                Err(e) => {
                    let _ = made_tx.send(None);
                    return Err(e);
                }
            };
            let plan =
                crate::egress::early_plan(&task, attempt, &label, &outbound, &pins, &dir, user);
            let endpoint = match rt.egress_make(&plan).await {
                Ok(endpoint) => endpoint,
                Err(e) => {
                    let _ = made_tx.send(None);
                    return Err(e);
                }
            };
            tracing::info!(%task, network = %plan.network, proxy = %endpoint.proxy_ip, elapsed_ms = started.elapsed().as_millis() as u64, "egress network and proxy made beside the workspace");
            let _ = made_tx.send(Some(endpoint.clone()));
            rt.egress_start(&plan, &endpoint).await?;
            tracing::info!(%task, network = %plan.network, elapsed_ms = started.elapsed().as_millis() as u64, "egress network and proxy started beside the workspace");
            Ok(endpoint)
        });
        self.early_network = Some(EarlyNetwork {
            name,
            proxy,
            made,
            started,
        });
    }

    /// Waits for the early network and proxy: their endpoint when `plan` runs on them,
    /// else they are removed after the attempt ([`Self::teardown`]). With `hold` (the
    /// agent's image can be held) only until they are made, the proxy's address fixed:
    /// the proxy goes on starting beside the agent's container ([`Early::starting`]);
    /// without, until the proxy runs. Ones that failed early are made again by
    /// `egress_up` (`None`).
    async fn take_early_network(
        &mut self,
        plan: Option<&crate::runtime::EgressPlan>,
        hold: bool,
    ) -> Option<Early> {
        let early = self.early_network.take()?;
        let waited = std::time::Instant::now();
        let used = plan.is_some_and(|p| p.network == early.name && p.proxy_name == early.proxy);
        if used && hold {
            if let Ok(Some(endpoint)) = early.made.await {
                tracing::info!(task = %self.task.id, network = %early.name, waited_ms = waited.elapsed().as_millis() as u64, held = true, "egress network and proxy awaited");
                return Some(Early {
                    endpoint,
                    starting: Some(early.started),
                });
            }
        }
        let made = early.started.await;
        if used {
            // The part of the early setup the attempt waited for (on its critical path).
            tracing::info!(task = %self.task.id, network = %early.name, waited_ms = waited.elapsed().as_millis() as u64, held = false, "egress network and proxy awaited");
        }
        match made {
            Ok(Ok(endpoint)) if used => Some(Early {
                endpoint,
                starting: None,
            }),
            Ok(Err(e)) if used => {
                tracing::debug!(task = %self.task.id, network = %early.name, error = %e, "the early egress network or proxy failed; they are made again");
                None
            }
            _ => {
                crate::orchestrator::gateway::remove_proxy_dir(self.orch.home(), &early.proxy);
                self.teardown(Some(early.proxy), early.name);
                None
            }
        }
    }

    /// Releases the held agent `agent_id` once its proxy started and said `ready`
    /// (`up` is told when the proxy runs, for the log's follower). On failure the agent is
    /// killed before its command ran, and the error fails the attempt.
    async fn release_held(
        &self,
        held: Held,
        agent_id: &str,
        up: tokio::sync::oneshot::Sender<()>,
    ) -> Result<(), crate::runtime::RuntimeError> {
        let rt = self.orch.runtime.as_ref();
        let since = std::time::Instant::now();
        let released = async {
            match held.starting.await {
                Ok(started) => started?,
                Err(e) => {
                    return Err(crate::runtime::RuntimeError::Engine {
                        op: "egress",
                        message: format!("the egress proxy's start did not finish: {e}"),
                    })
                }
            };
            let _ = up.send(());
            rt.egress_ready(&held.proxy).await?;
            if held.forget_credential {
                crate::orchestrator::gateway::forget_credential(self.orch.home(), &held.proxy);
            }
            rt.release(agent_id).await
        }
        .await;
        match &released {
            Ok(()) => {
                tracing::info!(task = %self.task.id, proxy = %held.proxy, elapsed_ms = since.elapsed().as_millis() as u64, "the agent released: its egress proxy listens");
            }
            Err(e) => {
                tracing::warn!(task = %self.task.id, proxy = %held.proxy, error = %e, "the attempt's egress proxy did not come up; its agent is stopped unreleased");
                if let Err(e) = rt.kill(agent_id).await {
                    tracing::warn!(task = %self.task.id, error = %e, "cannot stop the held agent");
                }
            }
        }
        released
    }

    /// A re-attached agent held by a daemon killed before it released it: released now,
    /// once its kept proxy says `ready` (best effort; releasing twice is harmless).
    async fn release_reattached(&self, image: &str, proxy: &str, agent_id: &str) {
        let rt = self.orch.runtime.as_ref();
        if !rt.holds(image).await.unwrap_or(false) {
            return;
        }
        let released = async {
            rt.egress_ready(proxy).await?;
            rt.release(agent_id).await
        };
        if let Err(e) = released.await {
            tracing::debug!(task = %self.task.id, %proxy, error = %e, "cannot release the re-attached agent (it ran already, or its proxy is gone)");
        }
    }

    /// Removes the attempt's egress proxy (when given) and network in the background; the
    /// attempt waits for it only once its result is recorded ([`Self::settle`]). A daemon
    /// killed before it finishes leaves them to reconciliation and `cleanup`.
    fn teardown(&self, proxy: Option<String>, network: String) {
        let rt = self.orch.runtime.clone();
        let task = self.task.id.clone();
        let handle = tokio::spawn(async move {
            let started = std::time::Instant::now();
            let removed = match &proxy {
                Some(proxy) => rt.egress_remove(proxy, &network).await,
                None => rt.remove_network(&network).await,
            };
            match removed {
                Ok(()) => {
                    tracing::info!(%task, %network, elapsed_ms = started.elapsed().as_millis() as u64, "egress proxy and network removed");
                }
                Err(e) => {
                    tracing::warn!(%task, %network, error = %e, "cannot remove the attempt's egress proxy or network; cleanup will");
                }
            }
        });
        self.teardowns
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(handle);
    }

    /// Finishes the attempt's teardowns (and removes an early network no stage took).
    pub(super) async fn settle(&mut self) {
        self.take_early_network(None, false).await;
        let handles = std::mem::take(
            &mut *self
                .teardowns
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        for handle in handles {
            let _ = handle.await;
        }
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
        // Issue 25: under `allowlist` the agent's only network is the attempt's own
        // internal one, whose one exit is the attempt's proxy. Issue 26: the model API goes
        // through a gateway holding the real credential (in that proxy; in the daemon under
        // `open`/`none`); the container gets a placeholder. A re-attached attempt keeps the
        // proxy, and with it its gateway.
        let mut egress = crate::egress::plan(spec, &self.orch.home_label);
        // An image whose entrypoint can hold the agent's command lets its container start
        // beside the proxy; any other keeps the order: the proxy listens first.
        let hold = egress.is_some()
            && reattach.is_none()
            && self.early_network.is_some()
            && self
                .orch
                .runtime
                .holds(&container.image)
                .await
                .unwrap_or_else(|e| {
                    tracing::debug!(image = %container.image, error = %e, "cannot tell whether the image holds its command; it is not held");
                    false
                });
        let early = match reattach {
            None => self.take_early_network(egress.as_ref(), hold).await,
            Some(_) => None,
        };
        let mut starting = None;
        let early = early.map(|e| {
            starting = e.starting;
            e.endpoint
        });
        container.hold = starting.is_some();
        if let (Some(plan), Some(_)) = (egress.as_mut(), &early) {
            // Its proxy runs already, waiting for this plan's config in its directory.
            plan.config_file = Some(crate::egress::proxy_config_path());
        }
        let home = self.orch.home().to_path_buf();
        let scratch =
            crate::orchestrator::gateway::proxy_dir(&home, &format!("{}-agent", container.name));
        let mut gateway = match reattach {
            Some(_) => None,
            None => match self.prepare_gateway(spec)? {
                None => None,
                Some(prepared) => Some(match egress.as_mut() {
                    Some(plan) => prepared.into_proxy(&home, plan).map_err(Failure::crash)?,
                    None => prepared
                        .in_daemon(self.orch.runtime.as_ref(), &spec.network, &self.orch.clock)
                        .await
                        .map_err(Failure::crash)?,
                }),
            },
        };
        container.network = crate::egress::agent_network(spec, egress.as_ref());
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
                let mut egress_started = None;
                if let Some(plan) = &egress {
                    // The window where a gateway's key is on disk for a proxy not started yet
                    // (swept at the next daemon start and by `cleanup`).
                    crate::failpoint::hit("egress-up");
                    let started = std::time::Instant::now();
                    let endpoint = match &early {
                        // The early proxy reads this file, then says `ready` (awaited beside
                        // the agent's create, below).
                        Some(endpoint) => crate::orchestrator::gateway::write_proxy_config(
                            &home,
                            &plan.proxy_name,
                            &plan.config_json,
                        )
                        .map(|()| endpoint.clone())
                        .map_err(|e| {
                            Failure::crash(format!("cannot hand the egress proxy its config: {e}"))
                        }),
                        None => rt.egress_up(plan).await.map_err(|e| {
                            Failure::from(e).during("the attempt's egress network or proxy failed")
                        }),
                    };
                    let endpoint = match endpoint {
                        Ok(e) => e,
                        Err(failure) => {
                            if early.is_some() {
                                self.collect_egress(spec, plan, None).await;
                            }
                            crate::orchestrator::gateway::remove_proxy_dir(&home, &plan.proxy_name);
                            return Err(failure);
                        }
                    };
                    if let Some(gw) = gateway.as_mut().filter(|g| g.in_proxy()) {
                        gw.proxy_ready(endpoint.proxy_ip);
                    }
                    egress_started = Some((started, endpoint.proxy_ip));
                    container = crate::egress::confine(container, plan, endpoint.proxy_ip);
                }
                if let Some(gw) = &gateway {
                    if let Err(e) = gw.apply(&mut container, &scratch) {
                        if let Some(plan) = &egress {
                            self.collect_egress(spec, plan, None).await;
                        }
                        return Err(Failure::crash(e));
                    }
                }
                // An early proxy says `ready` while the agent's container is created (a held
                // agent's: while it starts, `release_held`).
                let ready = async {
                    match (&egress, &early) {
                        (Some(plan), Some(_)) if !container.hold => {
                            rt.egress_ready(&plan.proxy_name).await
                        }
                        _ => Ok(()),
                    }
                };
                let (created, ready) = tokio::join!(
                    execute::create(rt, &container, limits.deadline, self.orch.now()),
                    ready
                );
                let created = match (created, ready) {
                    (Ok(id), Ok(())) => Ok(id),
                    (Ok(id), Err(e)) => {
                        let _ = rt.remove(&id).await;
                        Err(Failure::from(e).during("the attempt's egress network or proxy failed"))
                    }
                    (Err(e), _) => Err(Failure::from(e).during("the container failed")),
                };
                if let (Some(plan), Some((started, proxy))) = (&egress, egress_started) {
                    if created.is_ok() {
                        // The proxy read the key before it said `ready`: it leaves the disk
                        // (a held agent's proxy's: once it said so, `release_held`).
                        if !container.hold && gateway.as_ref().is_some_and(|g| g.in_proxy()) {
                            crate::orchestrator::gateway::forget_credential(
                                &home,
                                &plan.proxy_name,
                            );
                        }
                        tracing::info!(
                            task = %self.task.id,
                            attempt = spec.attempt,
                            network = %plan.network,
                            proxy = %proxy,
                            elapsed_ms = started.elapsed().as_millis() as u64,
                            "egress network and proxy up"
                        );
                    }
                }
                let created = match created {
                    Ok(id) => self.container_created(&id).await.map(|()| id),
                    Err(failure) => Err(failure),
                };
                match created {
                    Ok(id) => Follow::Start(id),
                    Err(failure) => {
                        if let Some(starting) = starting.take() {
                            // Its start is awaited, so the stop below finds it settled.
                            let _ = starting.await;
                        }
                        if let Some(plan) = &egress {
                            self.collect_egress(spec, plan, None).await;
                        }
                        return Err(failure);
                    }
                }
            }
            Some((id, recorded)) => Follow::Reattach(id, recorded),
        };
        let held = match (&egress, starting) {
            (Some(plan), Some(starting)) => Some(Held {
                proxy: plan.proxy_name.clone(),
                starting,
                forget_credential: gateway.as_ref().is_some_and(|g| g.in_proxy()),
            }),
            _ => None,
        };
        // The proxy's log is followed once the proxy runs (a held agent's may still start).
        let (proxy_up, proxy_runs) = tokio::sync::oneshot::channel::<()>();
        let proxy_runs = held.as_ref().map(|_| proxy_runs);
        let mut released_error = None;
        let mut sink = StoreSink {
            store: &self.store,
            task_id: self.task.id.clone(),
            attempt: spec.attempt,
            agent: spec.agent.clone(),
            progress: self.opts.progress.clone(),
            handling: false,
            clock: self.orch.clock.clone(),
        };
        // Told when the agent's output ended, before its container's removal; and when a held
        // agent's release is settled (a proxy stopped before it would fail the release).
        let (exited_tx, exited_rx) = tokio::sync::oneshot::channel::<()>();
        let (release_done_tx, release_done_rx) = tokio::sync::oneshot::channel::<()>();
        let run = execute::AgentRun {
            runtime: rt,
            adapter: adapter.as_ref(),
            sink: &mut sink,
            limits,
            transcript: Some(&transcript),
            scrub,
            cancel: self.opts.cancel.clone(),
            clock: self.orch.clock.clone(),
            exited: Some(exited_tx),
        };
        let budget_file = egress.as_ref().map(|p| {
            crate::orchestrator::gateway::proxy_dir(&home, &p.proxy_name)
                .join(crate::gateway::spec::BUDGET_FILE)
        });
        self.orch
            .spend
            .join(&self.task.id, spec.attempt, &spec.identity, budget_file);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let agent_id = match &follow {
            Follow::Start(id) | Follow::Reattach(id, _) => id.clone(),
        };
        let agent = async {
            match follow {
                Follow::Start(id) => match held {
                    // Started beside its proxy: released once the proxy listens.
                    Some(held) => {
                        let release = async {
                            let released = self.release_held(held, &id, proxy_up).await;
                            drop(release_done_tx);
                            released
                        };
                        let (exec, released) =
                            tokio::join!(execute::start_created(run, &container, &id), release);
                        released_error = released.err();
                        exec
                    }
                    None => {
                        drop(release_done_tx);
                        execute::start_created(run, &container, &id).await
                    }
                },
                Follow::Reattach(id, recorded) => {
                    drop(release_done_tx);
                    let release = async {
                        if let Some(plan) = &egress {
                            self.release_reattached(&container.image, &plan.proxy_name, &id)
                                .await;
                        }
                    };
                    let (exec, ()) = tokio::join!(execute::reattach(run, &id, recorded), release);
                    exec
                }
            }
        };
        let on_exit = async {
            let _ = exited_rx.await;
            let _ = release_done_rx.await;
            if let Some(plan) = &egress {
                // The agent is gone (its container is inspected and removed meanwhile): the
                // proxy is asked to stop, writes its last line (`end`, which is all the
                // follower waits for) and exits; killed after
                // `egress::TERM_GRACE` if it did not. Not awaited: the log's end came about
                // 50 ms after a kill (the engine noticing the process gone), its last line
                // comes as soon as the signal does; `egress_remove`'s forced removal waits
                // for the rest.
                let (rt, proxy, task) = (
                    self.orch.runtime.clone(),
                    plan.proxy_name.clone(),
                    self.task.id.clone(),
                );
                tokio::spawn(async move {
                    if let Err(e) = rt.terminate(&proxy).await {
                        tracing::debug!(%task, %proxy, error = %e, "cannot stop the attempt's egress proxy; it is killed");
                    }
                    tokio::time::sleep(egress::TERM_GRACE).await;
                    // Usually gone by now (its removal beside verification may be done).
                    if let Err(e) = rt.kill(&proxy).await {
                        tracing::debug!(%task, %proxy, error = %e, "the attempt's egress proxy was not killed after its grace (gone already, or the engine refused)");
                    }
                });
            }
            let _ = stop.send(());
        };
        let live = async {
            if let Some(runs) = proxy_runs {
                // Dropped unsent: the proxy never ran; the follower finds its log empty.
                let _ = runs.await;
            }
            match &egress {
                Some(plan) => Some(self.follow_proxy(spec, plan, &agent_id, stopped).await),
                None => None,
            }
        };
        let (exec, (), followed) = tokio::join!(agent, on_exit, live);
        // The proxy and the network go on every path (success, failure, cancel, deadline,
        // an engine error); the follower stored what the proxy logged as it logged it.
        let report = match &egress {
            Some(plan) => self.collect_egress(spec, plan, followed).await,
            None => None,
        };
        self.orch.spend.leave(&self.task.id, spec.attempt);
        crate::orchestrator::gateway::remove_proxy_dir(&home, &format!("{}-agent", container.name));
        let exec = exec.map(|mut exec| {
            if let Some(report) = &report {
                explain_refusals(&mut exec, report, &spec.egress.profile);
            }
            exec
        });
        // What the gateway metered: from the proxy's log when it hosted the gateway (a
        // re-attached attempt included), else from the in-daemon gateway.
        let records = match (&report, &gateway) {
            (Some(r), _) if r.gateway_on => Some(r.gateway.clone()),
            (_, Some(gw)) if !gw.in_proxy() => Some(gw.take_records()),
            _ => None,
        };
        let exec = match (exec, records) {
            (Ok(mut exec), Some(records)) => {
                // After every event the agent's stream stored.
                if let Ok(next) = self.db().event_count(&self.task.id, spec.attempt) {
                    exec.next_seq = exec.next_seq.max(next);
                }
                let events = crate::orchestrator::gateway::fold(&mut exec, records);
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
        if let Some(e) = released_error {
            return Err(Failure::from(e).during("the attempt's egress network or proxy failed"));
        }
        let exec = exec.map_err(|e| Failure::from(e).during("the container failed"))?;
        if let Some(err) = &exec.sink_error {
            return Err(Failure::crash(format!("cannot record the run: {err}")));
        }
        Ok(exec)
    }

    /// Stops and removes the attempt's proxy and network, and returns what the proxy
    /// logged, all of it stored: the follower's [`egress::Tally`] when it read the log to
    /// its end, else (no follower, or one cut short) the log read whole, only its lines
    /// not fed yet counted. Best effort: a failure here never fails the attempt.
    async fn collect_egress(
        &self,
        spec: &RunSpec,
        plan: &crate::runtime::EgressPlan,
        followed: Option<Followed>,
    ) -> Option<crate::egress::EgressReport> {
        let started = std::time::Instant::now();
        let (mut tally, whole, drained) = match followed {
            Some(f) => (f.tally, !f.to_the_end, f.drained),
            None => (self.egress_tally(spec), true, std::time::Duration::ZERO),
        };
        if whole {
            match self.orch.runtime.egress_stop(&plan.proxy_name).await {
                Ok(log) => {
                    let fed = tally.feed_log(&log, self.orch.now());
                    for f in &fed {
                        self.log_refusal(spec, f);
                    }
                }
                Err(e) => {
                    tracing::warn!(task = %self.task.id, proxy = %plan.proxy_name, error = %e, "cannot stop the attempt's egress proxy; it is removed all the same");
                    self.teardown(Some(plan.proxy_name.clone()), plan.network.clone());
                    self.store_egress(spec, &mut tally, true);
                    return None;
                }
            }
        }
        let elapsed = drained + started.elapsed();
        tracing::info!(task = %self.task.id, proxy = %plan.proxy_name, elapsed_ms = elapsed.as_millis() as u64, read_whole = whole, "egress proxy stopped and its log read");
        // The stopped proxy and the network are removed off the critical path.
        self.teardown(Some(plan.proxy_name.clone()), plan.network.clone());
        crate::orchestrator::gateway::remove_proxy_dir(self.orch.home(), &plan.proxy_name);
        self.store_egress(spec, &mut tally, true);
        Some(tally.report)
    }

    /// A reader of this attempt's proxy log that knows what the store has of it: the last
    /// line its rows account for, and its latest summary (what `/metrics` counted). A
    /// store that cannot say is taken as holding nothing (its rows are kept all the same:
    /// each is stored once by its line).
    fn egress_tally(&self, spec: &RunSpec) -> egress::Tally {
        let stored = match self
            .db()
            .egress_rows_after(&self.task.id, spec.attempt, None)
        {
            Ok(rows) => egress::Stored::from_rows(&rows),
            Err(e) => {
                tracing::warn!(task = %self.task.id, attempt = spec.attempt, error = %e, "cannot read the attempt's stored egress events; its proxy's log is read as new");
                egress::Stored::default()
            }
        };
        egress::Tally::new(&spec.egress.profile, stored)
    }

    /// The daemon's log for one refusal read for the first time and kept one by one (the
    /// rest are counted in the summary: a flood of refusals is not a flood of log lines).
    fn log_refusal(&self, spec: &RunSpec, fed: &egress::Fed) {
        if let (true, Some(r)) = (fed.new, &fed.refused) {
            tracing::warn!(task = %self.task.id, attempt = spec.attempt, host = %r.host, port = r.port, reason = %r.reason, "egress refused");
        }
    }

    /// Stores the tally's new refusals and (when changed, or `always`) its summary, and
    /// counts in `/metrics` what the summary counts beyond the last one (so every line is
    /// counted once, the ones after the last periodic summary by the final one). Returns
    /// whether the store took them. A store that fails keeps them in the tally, stored
    /// with the next try (a bounded amount: `egress::KEPT_REFUSALS` refusals and the
    /// counts); its first failure, and its recovery, are logged with what to do.
    fn store_egress(&self, spec: &RunSpec, tally: &mut egress::Tally, always: bool) -> bool {
        let taken = tally.take(always);
        if taken.count.allowed > 0 {
            crate::metrics::egress_connections(true, "", taken.count.allowed);
        }
        for (reason, n) in &taken.count.refused {
            crate::metrics::egress_connections(false, reason, *n);
        }
        if taken.refused.is_empty() && taken.summary.is_none() {
            return true;
        }
        let scrub = |mut e: crate::domain::TaskEvent| {
            e.summary = self.scrubber.scrub_line(&e.summary).into_owned();
            e
        };
        let refused: Vec<_> = taken.refused.into_iter().map(scrub).collect();
        let summary = taken.summary.map(scrub);
        let stored =
            self.db()
                .record_egress(&self.task.id, spec.attempt, &refused, summary.as_ref());
        match stored {
            Ok(_) => {
                if let Some(since) = tally.store_failed.take() {
                    tracing::warn!(task = %self.task.id, attempt = spec.attempt, refusals = refused.len(), failing_s = since.elapsed().as_secs(), "the attempt's egress events are stored again: nothing was lost");
                }
                true
            }
            Err(e) => {
                let kept = refused.len();
                tally.restore(refused);
                let what = egress_store_failure(&e, &self.db().path().display().to_string());
                if always {
                    // The last try: the proxy and its log are gone after it.
                    tracing::error!(task = %self.task.id, attempt = spec.attempt, refusals = kept, error = %e, "{what}; the attempt's last egress events (its summary and {kept} refusal(s)) could not be stored and are lost: the daemon's log above has its first refusals one by one, and /metrics counted every one");
                } else if tally.store_failed.is_none() {
                    tracing::warn!(task = %self.task.id, attempt = spec.attempt, refusals = kept, error = %e, "{what}; until then they are kept in memory (at most {} refusals and the counts) and stored every {}s", crate::egress::KEPT_REFUSALS, egress::SUMMARY_EVERY.as_secs());
                }
                if tally.store_failed.is_none() {
                    tally.store_failed = Some(std::time::Instant::now());
                }
                false
            }
        }
    }

    /// Follows the attempt's proxy log from its first line until it ends (the proxy is
    /// stopped once the agent exits: `stop`), storing each refusal as it is logged and the
    /// summary of the allowed connections at most every [`egress::SUMMARY_EVERY`] (issue
    /// 25); lines an earlier daemon stored are stored no second time. Each model-API
    /// request the gateway records is logged as it happens and its cost counted against the
    /// identity's daily budget of every running attempt of that identity (their budget
    /// files). The first request the gateway refuses for the budget ends the attempt there
    /// (issue 26): the agent's container is killed, and the attempt ends as `budget` (a CLI
    /// may otherwise retry, or try to compact its context, against the refusal until a
    /// limit stops it).
    async fn follow_proxy(
        &self,
        spec: &RunSpec,
        plan: &crate::runtime::EgressPlan,
        agent_id: &str,
        mut stop: tokio::sync::oneshot::Receiver<()>,
    ) -> Followed {
        use futures_util::StreamExt;
        let mut tally = self.egress_tally(spec);
        let mut lines = self.orch.runtime.egress_follow(&plan.proxy_name);
        let mut meter = crate::gateway::Meter::default();
        let mut due = egress::Due::now();
        let mut drain: Option<tokio::time::Instant> = None;
        let mut stopped_at: Option<std::time::Instant> = None;
        let to_the_end = loop {
            let limit = drain.unwrap_or_else(|| due.at());
            let line = tokio::select! {
                _ = &mut stop, if drain.is_none() => {
                    drain = Some(tokio::time::Instant::now() + egress::DRAIN_LIMIT);
                    stopped_at = Some(std::time::Instant::now());
                    continue;
                }
                _ = tokio::time::sleep_until(limit), if drain.is_some() || tally.dirty() || tally.has_refusals() => {
                    if drain.is_some() {
                        tracing::debug!(task = %self.task.id, proxy = %plan.proxy_name, "the egress proxy's log did not end; it is read whole");
                        break false;
                    }
                    self.store_egress(spec, &mut tally, false);
                    due = egress::Due::now();
                    continue;
                }
                l = lines.next() => l,
            };
            let line = match line {
                // The log ended after the proxy was stopped: read to its end.
                None if drain.is_some() => break true,
                // It ended while the agent runs (the proxy died, or the engine's stream
                // did): what the log holds is read whole once the agent ends, each line
                // once by its number.
                None => {
                    tracing::debug!(task = %self.task.id, proxy = %plan.proxy_name, "the egress proxy's log ended before the agent; it is read whole at the end");
                    let _ = (&mut stop).await;
                    break false;
                }
                Some(Ok(line)) => line,
                Some(Err(e)) => {
                    tracing::debug!(task = %self.task.id, proxy = %plan.proxy_name, error = %e, "the egress proxy's log cannot be followed; it is read whole at the end");
                    if drain.is_none() {
                        let _ = (&mut stop).await;
                    }
                    break false;
                }
            };
            let fed = tally.feed(&line, self.orch.now());
            self.log_refusal(spec, &fed);
            if fed.end {
                // The proxy's last line: its log is read to its end (it was stopped, so
                // the agent is gone, or is about to say so).
                if drain.is_none() {
                    let _ = (&mut stop).await;
                }
                break true;
            }
            if tally.has_refusals() && tally.store_failed.is_none() {
                // At once: an operator sees the refusal while the agent runs (a store that
                // fails is tried again on the clock, not per line).
                self.store_egress(spec, &mut tally, false);
                due = egress::Due::now();
            }
            if let Some(record) = &fed.gateway {
                tracing::info!(target: "polyphony::gateway", task = %self.task.id, attempt = spec.attempt, "{}", record.summary());
                meter.add(record);
                self.share_budget(spec, meter.cost_picos);
            }
            if let Some(refusal) = meter.budget_refusal.take() {
                tracing::info!(task = %self.task.id, attempt = spec.attempt, limit = %refusal.limit, "the model-API gateway refused a request for the budget: the attempt ends");
                if let Err(e) = self.orch.runtime.kill(agent_id).await {
                    tracing::warn!(task = %self.task.id, error = %e, "cannot stop the agent after a budget refusal");
                }
            }
        };
        Followed {
            tally,
            to_the_end,
            drained: stopped_at.map(|t| t.elapsed()).unwrap_or_default(),
        }
    }

    /// This attempt metered `spent` so far: rewrites the budget file of every running
    /// attempt of its identity (the identity's ceiling, less today's finished spend, less
    /// what the other running attempts metered).
    fn share_budget(&self, spec: &RunSpec, spent: crate::gateway::Picos) {
        let files = self
            .orch
            .spend
            .set_spent(&self.task.id, spec.attempt, spent);
        let Some(ceiling) = self
            .orch
            .config
            .identity(&spec.identity)
            .and_then(|i| i.cost_ceiling_usd_per_day)
        else {
            return;
        };
        let day = crate::identity_policy::utc_day_start((self.orch.clock)());
        let Ok(finished) = self.db().cost_spent_since(&spec.identity, day) else {
            return;
        };
        for (file, others) in files {
            crate::orchestrator::gateway::write_budget(&file, Some(ceiling - finished - others));
        }
    }

    /// The attempt's model-API gateway decided, when its CLI's credential can go through
    /// one: the daily remainder is the identity's ceiling less today's finished spend and
    /// what its other running attempts metered so far.
    fn prepare_gateway(
        &mut self,
        spec: &RunSpec,
    ) -> Result<Option<crate::orchestrator::gateway::Prepared>, Failure> {
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
                let others = self
                    .orch
                    .spend
                    .others(&spec.identity, &self.task.id, spec.attempt);
                Some(ceiling - spent - others)
            }
            None => None,
        };
        Ok(crate::orchestrator::gateway::prepare(
            spec,
            crate::orchestrator::gateway::GatewayInputs {
                config: &config,
                env: &self.orch.env,
                clock: &self.orch.clock,
                daily_left_usd,
            },
        ))
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
