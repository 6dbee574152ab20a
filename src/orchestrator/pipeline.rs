//! One attempt of one task, end to end (spec §4, §6–§10; DESIGN.md "Attempts", "Proof of
//! work and landing"):
//!
//! CLAIMED: clone the workspace, gather facts, route, claim at the source (title and body
//! frozen) -> ROUTED: identity, cost ceiling, RunSpec -> PROVISIONED: the container is
//! created -> RUNNING: the agent streams, events are stored as they arrive -> VERIFYING:
//! commit, diff and protected-path gates, then the test/lint/typecheck commands of the
//! BASE ref, each in a fresh container with no network -> LANDED: push, PR, comment.
//!
//! Any failure moves the task to FAILED from wherever it was, with the reason and the
//! evidence; [`retry::after_attempt`] then decides retry (backoff), fallback (quota), hold
//! (cancelled) or BLOCKED (reported where the task came from).
//!
//! Must not: decide transitions itself (the store checks the state machine), or let a
//! secret reach the store, a log line or a transcript (everything passes the scrubber).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use tokio::sync::watch;

use super::execute::{self, AttemptExecution, RunLimits, TranscriptPaths};
use crate::agents::prompt::PromptContext;
use crate::agents::scrub::Scrubber;
use crate::agents::{adapter_for, AgentOutcome};
use crate::domain::{
    AttemptStatus, CheckEvidence, EnvVar, RunResult, RunSpec, SourceKind, Task, TaskState,
    VolumeMount,
};
use crate::identity;
use crate::routing::{self, build_run_spec, RunSpecInputs};
use crate::runtime::container_spec::agent_spec;
use crate::sources::{ClaimError, ClaimInfo};
use crate::store::{AttemptRecord, BlockSettlement, IntentKind, Settlement, Store};
use crate::workspace::{self, Author, PrepareRequest, Workspace};

use super::facts::gather_facts;
use super::failure::{self, Class, Stage};
use super::intents;
use super::land;
use super::proof;
use super::quota;
use super::retry::{self, AfterAttempt};
use super::sink::{short_id, StoreSink};
use super::verify::{self, one_line};
use super::{Orchestrator, Progress};

/// How an attempt ended for the task.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptEnd {
    /// Verified and landed: the branch is pushed (and the PR opened for GitHub tasks).
    Landed {
        branch: String,
        pr_url: Option<String>,
    },
    /// FAILED; the next attempt is due at `at`.
    Retry { at: DateTime<Utc>, reason: String },
    /// FAILED on quota; the next agent of the chain takes over at once.
    Fallback { next_agent: String, reason: String },
    /// FAILED and left for a person (cancelled): `spawn --task` picks it up again.
    Held { reason: String },
    /// Out of attempts (or agents): BLOCKED, reported at the source.
    Blocked { reason: String },
    /// Another Polyphony instance owns the issue: BLOCKED here, nothing reported.
    Released { reason: String },
}

impl AttemptEnd {
    pub fn is_landed(&self) -> bool {
        matches!(self, AttemptEnd::Landed { .. })
    }

    /// Whether the task is finished for good (no further attempt will run).
    pub fn is_final(&self) -> bool {
        matches!(
            self,
            AttemptEnd::Landed { .. }
                | AttemptEnd::Blocked { .. }
                | AttemptEnd::Released { .. }
                | AttemptEnd::Held { .. }
        )
    }
}

/// Per-run knobs.
#[derive(Clone)]
pub struct RunOptions {
    pub progress: Arc<dyn Progress>,
    /// Flips to true to stop the attempt (Ctrl-C, daemon shutdown).
    pub cancel: watch::Receiver<bool>,
    /// A cancellation is a daemon shutdown, not a user's decision: retry at once on the
    /// next start instead of holding the task.
    pub cancel_means_retry: bool,
}

/// Why an attempt did not land.
#[derive(Debug)]
struct Failure {
    status: AttemptStatus,
    reason: String,
    evidence: Vec<CheckEvidence>,
    /// Not a failure of the work: wait until then without counting an attempt (cost
    /// ceiling reached).
    wait_until: Option<DateTime<Utc>>,
    /// Where it happened, for [`failure::classify`].
    stage: Stage,
}

impl Failure {
    fn new(status: AttemptStatus, reason: impl Into<String>) -> Failure {
        Failure {
            status,
            reason: reason.into(),
            evidence: Vec::new(),
            wait_until: None,
            stage: Stage::Unknown,
        }
    }

    fn at(mut self, stage: Stage) -> Failure {
        self.stage = stage;
        self
    }

    fn crash(err: impl std::fmt::Display) -> Failure {
        Failure::new(AttemptStatus::Crash, one_line(&err.to_string()))
    }
}

/// The kv key holding an attempt's workspace (for resuming verification after a restart).
fn workspace_key(task_id: &str, attempt: u32) -> String {
    format!("workspace:{task_id}:{attempt}")
}

/// The kv key holding an attempt's landing commit (made once; verified and pushed by sha).
fn commit_key(task_id: &str, attempt: u32) -> String {
    format!("commit:{task_id}:{attempt}")
}

/// The kv key counting how often an attempt was resumed after a restart.
fn resumes_key(task_id: &str, attempt: u32) -> String {
    format!("resumes:{task_id}:{attempt}")
}

/// Resumes of one attempt after restarts before it is given up (issue 11: an attempt that
/// hangs the daemon must not hang every restart too).
const MAX_RESUMES: u32 = 3;

/// The kv key holding the agent chain a task was routed to.
fn chain_key(task_id: &str) -> String {
    format!("chain:{task_id}")
}

struct Attempt<'a> {
    orch: &'a Orchestrator,
    /// Behind a mutex so the attempt future is `Send` (a `Connection` is not `Sync`); never
    /// held across an await.
    store: Mutex<Store>,
    opts: &'a RunOptions,
    task: Task,
    state: TaskState,
    attempt: u32,
    chain: Vec<String>,
    agent: String,
    ws: Option<Workspace>,
    spec: Option<RunSpec>,
    result: Option<RunResult>,
    scrubber: Arc<Scrubber>,
    started: Instant,
}

impl Orchestrator {
    /// Runs one attempt of a task the store has just claimed (state CLAIMED).
    pub async fn run_claimed(&self, task: Task, opts: &RunOptions) -> anyhow::Result<AttemptEnd> {
        anyhow::ensure!(
            task.state == TaskState::Claimed,
            "task {} is {}, not CLAIMED",
            task.id,
            task.state
        );
        let mut run = Attempt::new(self, task, opts)?;
        let outcome = run.fresh().await;
        run.conclude(outcome).await
    }

    /// Resumes an attempt after a daemon restart: re-attaches to its container (running
    /// or exited) without duplicating events, or re-runs verification, then lands.
    pub async fn resume(
        &self,
        task: Task,
        record: AttemptRecord,
        opts: &RunOptions,
    ) -> anyhow::Result<AttemptEnd> {
        let mut run = Attempt::new(self, task, opts)?;
        let outcome = run.resumed(record).await;
        run.conclude(outcome).await
    }
}

impl<'a> Attempt<'a> {
    fn new(orch: &'a Orchestrator, task: Task, opts: &'a RunOptions) -> anyhow::Result<Self> {
        let store = Mutex::new(Store::open(&orch.db_path())?);
        let state = task.state;
        let attempt = task.attempts + 1;
        Ok(Attempt {
            orch,
            store,
            opts,
            task,
            state,
            attempt,
            chain: Vec::new(),
            agent: String::new(),
            ws: None,
            spec: None,
            result: None,
            scrubber: Arc::new(Scrubber::new(Vec::<String>::new())),
            started: Instant::now(),
        })
    }

    fn db(&self) -> MutexGuard<'_, Store> {
        // A panic while holding the lock cannot leave the connection half-used: each
        // store call is one transaction.
        self.store
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn move_to(&mut self, to: TaskState, reason: &str) -> Result<(), Failure> {
        let reason = self.scrubber.scrub_line(reason).into_owned();
        let moved = self
            .db()
            .transition(&self.task.id, self.state, to, &reason, Utc::now());
        self.task = moved.map_err(Failure::crash)?;
        self.state = to;
        self.opts.progress.state(&self.task.id, to, &reason);
        Ok(())
    }

    fn token(&self) -> Option<&str> {
        match self.task.source {
            SourceKind::Github => self.orch.github_token.as_ref().map(|t| t.secret()),
            SourceKind::Local => None,
        }
    }

    // ------------------------------------------------------------------ fresh attempt

    async fn fresh(&mut self) -> Result<AttemptEnd, Failure> {
        let ws = self.prepare_workspace().await?;
        self.ws = Some(ws.clone());
        if self.attempt > 1 {
            let previous = workspace_key(&self.task.id, self.attempt - 1);
            quota::continue_after_limit(
                self.orch,
                &self.store,
                &self.task.id,
                self.attempt,
                &ws,
                &previous,
            )
            .await;
        }
        let decision = self.route(&ws).await?;
        if let Some(end) = self.claim_at_source().await? {
            return Ok(end);
        }
        self.move_to(
            TaskState::Routed,
            &format!(
                "rule `{}`: agent {} (chain {})",
                decision.rule,
                self.agent,
                self.chain.join(" -> ")
            ),
        )?;
        let spec = self.build_spec(&decision, &ws).await?;
        self.db()
            .start_attempt(&spec, Utc::now())
            .map_err(Failure::crash)?;
        self.spec = Some(spec.clone());
        self.move_to(
            TaskState::Provisioned,
            &format!(
                "attempt {} in {} on image {}",
                self.attempt,
                ws.path.display(),
                spec.image
            ),
        )?;
        let exec = self.run_agent(&spec, None).await?;
        self.after_run(exec).await
    }

    async fn prepare_workspace(&mut self) -> Result<Workspace, Failure> {
        let key = workspace::task_key(&self.task.id).map_err(Failure::crash)?;
        let branch = workspace::branch_name(
            &self.orch.config.global().git.branch_prefix,
            &key,
            self.attempt,
        );
        let base_ref = self.task.base_ref.clone().or_else(|| {
            self.orch
                .config
                .base_ref_for(&self.task.repo)
                .map(String::from)
        });
        let owner = match &self.orch.config.default_limits().user {
            Some(user) => Some(workspace::parse_owner(user).map_err(Failure::crash)?),
            None => None,
        };
        let req = PrepareRequest {
            repo: self.task.repo.clone(),
            task_id: self.task.id.clone(),
            attempt: self.attempt,
            base_ref,
            branch,
            token: self.token().map(String::from),
            owner,
        };
        let manager = self.orch.workspaces.clone();
        // An attempt number is reused when no attempt row was written for it (the daemon
        // died before the container existed). Its half-made directory is a leftover of that
        // run, never another attempt's work; without this every retry would fail on it.
        let leftover = self
            .orch
            .config
            .workspace_root()
            .join(&key)
            .join(self.attempt.to_string());
        let recorded = self
            .db()
            .attempt(&self.task.id, self.attempt)
            .map_err(Failure::crash)?
            .is_some();
        let ws = tokio::task::spawn_blocking(move || {
            if !recorded && leftover.exists() {
                tracing::info!(path = %leftover.display(), "removing the workspace of an interrupted attempt");
                manager.remove(&leftover)?;
            }
            manager.prepare(&req)
        })
            .await
            .map_err(Failure::crash)?
            .map_err(|e| {
                Failure::new(
                    AttemptStatus::Crash,
                    format!("cannot prepare the workspace: {}", one_line(&e.to_string())),
                )
                .at(Stage::Workspace)
            })?;
        if let Ok(json) = serde_json::to_string(&ws) {
            let _ = self.db().kv_set(
                &workspace_key(&self.task.id, self.attempt),
                &json,
                Utc::now(),
            );
        }
        Ok(ws)
    }

    async fn route(&mut self, ws: &Workspace) -> Result<routing::RouteDecision, Failure> {
        let task = self.task.clone();
        let dir = ws.path.clone();
        let (facts, score) =
            tokio::task::spawn_blocking(move || routing::analyze(gather_facts(&task, Some(&dir))))
                .await
                .map_err(Failure::crash)?;
        routing::facts::enrich_task(&mut self.task, &facts);
        let _ = self.db().set_task_facts(
            &self.task.id,
            self.task.task_type,
            self.task.scope,
            self.task.risk,
            self.task.context_tokens,
        );
        let input = routing::route_input(&self.task, &facts, &score);
        let decision = self.orch.router.route(&input);
        // Issue 12: a prompt larger than the agent's context window cannot succeed.
        let config = &self.orch.config;
        let decision = match routing::fit_context(decision, facts.context_tokens, |agent| {
            config.agent(agent).map(|a| a.context_window_tokens)
        }) {
            routing::ContextFit::Fits(d) => d,
            routing::ContextFit::Rerouted(d) => {
                tracing::info!(task = %self.task.id, "{}", d.context.as_deref().unwrap_or(""));
                d
            }
            // No attempt can pass while the text stays this long: a configuration-class
            // failure, so the task is BLOCKED at once with the reason.
            routing::ContextFit::TooLarge { reason } => {
                return Err(Failure::new(AttemptStatus::Failed, reason).at(Stage::Config))
            }
        };
        self.chain = decision.chain().into_iter().map(String::from).collect();
        let _ = self
            .db()
            .kv_set(&chain_key(&self.task.id), &self.chain.join(","), Utc::now());
        // Issue 14: an agent out of quota under the identity it would use is skipped at
        // once; with the whole chain out the task waits for the earliest reset.
        let now = Utc::now();
        let choice = quota::choose(
            &self.db(),
            &self.orch.config,
            &self.task.id,
            decision.identity.as_deref(),
            &self.chain,
            now,
        );
        self.agent = match choice.map_err(Failure::crash)? {
            quota::Choice::Agent(agent) => agent,
            quota::Choice::Park(wait) => {
                let mut parked = Failure::new(AttemptStatus::Quota, quota::park_reason(&wait, now));
                parked.wait_until = Some(wait.until);
                return Err(parked);
            }
            quota::Choice::NoAgent => {
                return Err(Failure::new(
                    AttemptStatus::Quota,
                    format!(
                        "every agent of the chain ({}) refused its login",
                        self.chain.join(", ")
                    ),
                ))
            }
        };
        Ok(decision)
    }

    /// The agents this task must not try again (they refused their login).
    fn exhausted(&self) -> BTreeSet<String> {
        quota::refused(&self.db(), &self.task.id).unwrap_or_default()
    }

    /// Claims the issue at the source and freezes its text. `Some(end)` when another
    /// instance owns it.
    async fn claim_at_source(&mut self) -> Result<Option<AttemptEnd>, Failure> {
        if self.task.source != SourceKind::Github {
            return Ok(None);
        }
        let github = self.orch.github().map_err(Failure::crash)?;
        let info = ClaimInfo {
            agent: self.agent.clone(),
            attempt: self.attempt,
            claimant: self.orch.home_label.clone(),
        };
        // Recorded before anything is written at GitHub; a claim this home left half-done
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
                Utc::now(),
            )
            .map_err(Failure::crash)?;
        let claim = github
            .claim_issue_resuming(&self.task, &info, resuming)
            .await;
        if matches!(claim, Ok(_) | Err(ClaimError::NoLongerReady { .. })) {
            self.db()
                .complete_intent(&self.task.id, IntentKind::Claim, self.attempt, Utc::now())
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
                    let _ = self.db().record_comment(
                        &self.task.id,
                        &format!("claim-{}", self.attempt),
                        id,
                        Utc::now(),
                    );
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
                    }),
                };
                let settled = self
                    .db()
                    .settle_failure(&self.task.id, self.state, &reason, &settlement, Utc::now())
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
                format!("cannot claim {} at GitHub: {e}", self.task.source_ref),
            )
            .at(Stage::Source)),
        }
    }

    async fn build_spec(
        &mut self,
        decision: &routing::RouteDecision,
        ws: &Workspace,
    ) -> Result<RunSpec, Failure> {
        let config = &self.orch.config;
        let profile = config.agent(&self.agent).ok_or_else(|| {
            Failure::crash(format!("agent `{}` is not in agents.yaml", self.agent))
                .at(Stage::Config)
        })?;
        let named = decision.identity.is_some()
            || profile.identity.is_some()
            || config.global().default_identity.is_some();
        let mut brokered = if config.identities().is_empty() && !named {
            // No identities.yaml at all: run without credentials rather than refuse; the
            // agent reports its own authentication error if it needs one.
            tracing::warn!(
                agent = %profile.name,
                "no identity is configured (identities.yaml): running the agent without credentials"
            );
            identity::Brokered {
                identity: "(none)".into(),
                volume_mounts: Vec::new(),
                env_overlay: Vec::new(),
                cost_ceiling_usd_per_day: None,
            }
        } else {
            let ident = identity::resolve(
                decision.identity.as_deref(),
                profile,
                config.global().default_identity.as_deref(),
                config.identities(),
            )
            .map_err(|e| Failure::crash(e).at(Stage::Config))?;
            identity::broker(ident, profile.agent_type)
                .map_err(|e| Failure::crash(e).at(Stage::Config))?
        };
        // A login directory that does not exist on this host cannot be mounted (Docker
        // refuses the bind); run without it and say so: the agent then reports its own
        // authentication error, and `polyphony doctor` names the missing path.
        brokered.volume_mounts.retain(|m| {
            let present = m.host_path.exists();
            if !present {
                tracing::warn!(
                    identity = %brokered.identity,
                    path = %m.host_path.display(),
                    "credential path does not exist; running the agent without it"
                );
            }
            present
        });
        // Cost ceiling (per identity, per UTC day): wait for tomorrow without counting.
        if let Some(ceiling) = brokered.cost_ceiling_usd_per_day {
            let now = Utc::now();
            let day_start = now
                .date_naive()
                .and_hms_opt(0, 0, 0)
                .map(|t| t.and_utc())
                .unwrap_or(now);
            let spent = self
                .db()
                .cost_spent_since(&brokered.identity, day_start)
                .map_err(Failure::crash)?;
            if spent >= ceiling {
                // Name the attempt whose figure weighs most, so one forged or runaway
                // report never holds an identity silently.
                let largest = self
                    .db()
                    .largest_cost_since(&brokered.identity, day_start)
                    .ok()
                    .flatten()
                    .map(|(task, attempt, cost)| {
                        format!(" (largest: {task} attempt {attempt}, ${cost:.2}; check it with `polyphony status {task}`)")
                    })
                    .unwrap_or_default();
                tracing::warn!(identity = %brokered.identity, spent, ceiling, "{largest}");
                let mut failure = Failure::new(
                    AttemptStatus::Cancelled,
                    format!(
                        "identity `{}` spent ${spent:.2} of its ${ceiling:.2} daily ceiling; waits until 00:00 UTC{largest}",
                        brokered.identity
                    ),
                );
                failure.wait_until = Some(day_start + chrono::Duration::days(1));
                return Err(failure);
            }
        }
        // The project's checks come from the BASE commit, never from the agent's branch.
        let manager = self.orch.workspaces.clone();
        let repo = self.task.repo.clone();
        let base = ws.base_sha.clone();
        let token = self.token().map(String::from);
        let text = tokio::task::spawn_blocking(move || {
            manager.read_at_base(&repo, Some(&base), ".polyphony.yaml", token.as_deref())
        })
        .await
        .map_err(Failure::crash)?
        .map_err(|e| Failure::crash(format!("cannot read .polyphony.yaml at the base: {e}")))?;
        let project = match text {
            Some(text) => Some(
                routing::run_spec::verification_from_polyphony_yaml(&text).map_err(|e| {
                    Failure::crash(format!("{e} (in the base branch)")).at(Stage::Config)
                })?,
            ),
            None => None,
        };
        self.scrub_secrets_of(&brokered.env_overlay, &brokered.volume_mounts);
        build_run_spec(RunSpecInputs {
            task: &self.task,
            decision,
            profile,
            identity: &brokered,
            global: config.global(),
            attempt: self.attempt,
            workspace: ws.path.clone(),
            branch: ws.branch.clone(),
            project_verify: project.as_ref(),
        })
        .map(|mut spec| {
            // A shared clone's alternates name the mirror's object directory: the agent sees
            // it read-only at that same path (issue 18), so git inside works and can never
            // write, repack or prune the mirror.
            if let Some(objects) = &ws.mirror_objects {
                spec.volume_mounts.push(crate::domain::VolumeMount {
                    host_path: objects.clone(),
                    container_path: objects.display().to_string(),
                    read_only: true,
                });
            }
            spec
        })
        .map_err(Failure::crash)
    }

    /// Scrubs, from everything stored from now on, the secrets the agent could echo: the
    /// values of its env overlay, the GitHub token and the tokens in its credential files.
    fn scrub_secrets_of(&mut self, overlay: &[EnvVar], mounts: &[VolumeMount]) {
        let mut secrets: Vec<String> = overlay
            .iter()
            .filter_map(|v| (self.orch.env)(&v.from_host))
            .collect();
        if let Some(token) = &self.orch.github_token {
            secrets.push(token.secret().to_string());
        }
        secrets.extend(super::secrets::credential_tokens(mounts));
        self.scrubber = Arc::new(Scrubber::new(secrets));
    }

    fn previous_failures(&self) -> Vec<CheckEvidence> {
        self.db()
            .attempts(&self.task.id)
            .ok()
            .and_then(|a| a.into_iter().rfind(|r| r.attempt < self.attempt))
            .map(|r| r.evidence.into_iter().filter(|e| !e.passed).collect())
            .unwrap_or_default()
    }

    async fn run_agent(
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
        let container = agent_spec(
            spec,
            &invocation,
            &self.orch.home_label,
            &self.orch.default_user,
        );
        let config = &self.orch.config;
        let limits = RunLimits {
            deadline: Duration::from_secs(spec.deadline_seconds),
            idle_timeout: Duration::from_secs(spec.idle_timeout_seconds),
            max_output_bytes: config.max_output_bytes(),
            max_workspace_bytes: Some(config.max_workspace_bytes()),
            max_cost_usd: config.max_cost_usd_per_attempt(),
        };
        let transcript = TranscriptPaths::under(self.orch.home(), &self.task.id, spec.attempt);
        let scrubber = self.scrubber.clone();
        let scrub: execute::Scrub<'_> = scrubber.as_ref();
        let mut sink = StoreSink {
            store: &self.store,
            task_id: self.task.id.clone(),
            attempt: spec.attempt,
            agent: spec.agent.clone(),
            adapter: adapter.as_ref(),
            progress: self.opts.progress.clone(),
            live: AgentOutcome::default(),
            mark_running: reattach.is_none(),
            error: None,
        };
        if reattach.is_none() {
            // Before `docker create`: a kill before the id is recorded leaves a container
            // the next start finds by its labels and removes (issue 19).
            self.db()
                .record_intent(
                    &self.task.id,
                    IntentKind::Container,
                    spec.attempt,
                    &serde_json::json!({ "name": container.name }),
                    Utc::now(),
                )
                .map_err(Failure::crash)?;
        }
        let exec = match reattach {
            None => {
                execute::run_attempt(
                    self.orch.runtime.as_ref(),
                    &container,
                    adapter.as_ref(),
                    &mut sink,
                    limits,
                    Some(&transcript),
                    scrub,
                    self.opts.cancel.clone(),
                )
                .await
            }
            Some((id, recorded)) => {
                execute::reattach(
                    self.orch.runtime.as_ref(),
                    &id,
                    adapter.as_ref(),
                    &mut sink,
                    limits,
                    Some(&transcript),
                    scrub,
                    self.opts.cancel.clone(),
                    recorded,
                )
                .await
            }
        };
        let sink_error = sink.error.take();
        if self.state == TaskState::Provisioned && self.task_state_now() == Some(TaskState::Running)
        {
            self.state = TaskState::Running;
        }
        let exec = exec.map_err(|e| {
            Failure::new(
                AttemptStatus::Crash,
                format!("the container failed: {}", one_line(&e.to_string())),
            )
            .at(Stage::Container)
        })?;
        if let Some(err) = sink_error.or(exec.sink_error.clone()) {
            return Err(Failure::crash(format!("cannot record the run: {err}")));
        }
        Ok(exec)
    }

    fn task_state_now(&self) -> Option<TaskState> {
        self.db()
            .get_task(&self.task.id)
            .ok()
            .flatten()
            .map(|t| t.state)
    }

    fn run_result(&self, exec: &AttemptExecution) -> RunResult {
        let spec = self.spec.as_ref();
        RunResult {
            task_id: self.task.id.clone(),
            attempt: self.attempt,
            agent: spec.map(|s| s.agent.clone()).unwrap_or_default(),
            status: exec.status,
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
        }
    }

    /// Everything after the agent's container ended: record, verify, land.
    async fn after_run(&mut self, exec: AttemptExecution) -> Result<AttemptEnd, Failure> {
        let result = self.run_result(&exec);
        let gate = proof::result_gate(exec.status, result.reason.as_deref());
        self.db()
            .finish_attempt(&result, std::slice::from_ref(&gate), Utc::now())
            .map_err(Failure::crash)?;
        self.result = Some(result.clone());
        if exec.status == AttemptStatus::Quota {
            self.record_quota(&exec, &result)?;
        }
        if exec.status != AttemptStatus::Succeeded {
            let reason = match &result.reason {
                Some(r) => format!("agent {} ended {}: {r}", result.agent, exec.status),
                None => format!("agent {} ended {}", result.agent, exec.status),
            };
            let mut failure = Failure::new(exec.status, reason).at(Stage::Agent);
            failure.evidence = vec![gate];
            return Err(failure);
        }
        self.move_to(
            TaskState::Verifying,
            &format!(
                "agent {} succeeded in {} turn(s){}",
                result.agent,
                result.turns,
                result
                    .cost_usd
                    .map(|c| format!(", ${c:.4}"))
                    .unwrap_or_default()
            ),
        )?;
        self.verify_and_land(gate).await
    }

    /// Issue 14: the limit this attempt met holds for every task using its agent and
    /// identity.
    fn record_quota(&self, exec: &AttemptExecution, result: &RunResult) -> Result<(), Failure> {
        let Some(spec) = &self.spec else {
            return Ok(());
        };
        quota::record_hit(
            &self.db(),
            &self.orch.config.quota_settings(),
            &spec.identity,
            &spec.agent,
            exec.outcome.quota.as_ref(),
            result.reason.as_deref().unwrap_or("usage limit"),
            &self.task.id,
            self.attempt,
            Utc::now(),
        )
        .map(|_| ())
        .map_err(Failure::crash)
    }

    async fn verify_and_land(&mut self, gate: CheckEvidence) -> Result<AttemptEnd, Failure> {
        let (sha, evidence) = self.verify(gate).await?;
        self.land(sha, evidence).await
    }

    /// Proof of work (spec §10, issue 11): one commit, its sha recorded; the gates and each
    /// check judge that sha only (see `verify`).
    async fn verify(
        &mut self,
        gate: CheckEvidence,
    ) -> Result<(String, Vec<CheckEvidence>), Failure> {
        let ws = self
            .ws
            .clone()
            .ok_or_else(|| Failure::crash("no workspace"))?;
        let spec = self
            .spec
            .clone()
            .ok_or_else(|| Failure::crash("no run spec"))?;
        let Some(sha) = self.landing_commit(&ws, &spec).await? else {
            let evidence = vec![gate, proof::diff_gate(&[])];
            return Err(verify::verification_failure(evidence).into());
        };
        let rules = verify::GateRules {
            settings: self.orch.config.verify_for(&self.task.repo),
            check_commands: spec
                .verification
                .iter()
                .map(|c| c.command.clone())
                .collect(),
            secrets: Arc::new(self.named_secrets(&spec.env_overlay, &spec.volume_mounts)),
        };
        let mut evidence = vec![gate];
        evidence.extend(
            verify::gates(self.orch.workspaces.clone(), ws.clone(), sha.clone(), rules).await?,
        );
        if !proof::all_passed(&evidence) {
            return Err(verify::verification_failure(evidence).into());
        }
        // The check copy belongs to the user the check container runs as (as `prepare` does
        // for the workspace); a named, non-numeric user keeps the daemon's ownership.
        let owner = spec
            .limits
            .user
            .as_deref()
            .or(self.orch.config.default_limits().user.as_deref())
            .and_then(|user| workspace::parse_owner(user).ok());
        let scrubber = self.scrubber.clone();
        let scrub: execute::Scrub<'_> = scrubber.as_ref();
        let progress = self.opts.progress.clone();
        let task_id = self.task.id.clone();
        let on_check = move |e: &CheckEvidence| {
            progress.state(
                &task_id,
                TaskState::Verifying,
                &format!(
                    "{} `{}`: {}",
                    e.name,
                    e.command,
                    if e.passed { "passed" } else { "FAILED" }
                ),
            );
        };
        let checks = verify::run_checks(verify::CheckRun {
            runtime: self.orch.runtime.as_ref(),
            workspaces: self.orch.workspaces.clone(),
            ws: &ws,
            sha: &sha,
            spec: &spec,
            home_label: &self.orch.home_label,
            default_user: &self.orch.default_user,
            owner,
            scrub,
            cancel: self.opts.cancel.clone(),
            on_check: &on_check,
        })
        .await;
        match checks {
            Ok(passed) => {
                evidence.extend(passed);
                Ok((sha, evidence))
            }
            Err(verify::ChecksStopped::Failed(failed)) => {
                evidence.extend(failed);
                Err(verify::verification_failure(evidence).into())
            }
            Err(verify::ChecksStopped::Crashed(reason)) => Err(Failure::crash(reason)),
            Err(verify::ChecksStopped::Cancelled) => Err(Failure::new(
                AttemptStatus::Cancelled,
                "cancelled during verification",
            )),
        }
    }

    /// The attempt's one landing commit: made once after the agent exited and recorded, so a
    /// verification resumed after a restart judges (and pushes) the same sha.
    async fn landing_commit(
        &mut self,
        ws: &Workspace,
        spec: &RunSpec,
    ) -> Result<Option<String>, Failure> {
        let key = commit_key(&self.task.id, self.attempt);
        if let Some(sha) = self.db().kv_get(&key).ok().flatten() {
            return Ok(Some(sha));
        }
        let git = &self.orch.config.global().git;
        let author = Author {
            name: git.author_name.clone(),
            email: git.author_email.clone(),
        };
        let message = format!(
            "{}\n\nPolyphony task {} ({}), attempt {} by {}.",
            one_line(&self.task.title),
            self.task.id,
            self.task.source_ref,
            self.attempt,
            spec.agent
        );
        let commit =
            verify::commit(self.orch.workspaces.clone(), ws.clone(), author, message).await?;
        if let Some(sha) = &commit.sha {
            self.db()
                .kv_set(&key, sha, Utc::now())
                .map_err(Failure::crash)?;
        }
        Ok(commit.sha)
    }

    /// The secrets a landing commit must not carry, by name: the env overlay's values and
    /// the GitHub token.
    fn named_secrets(&self, overlay: &[EnvVar], mounts: &[VolumeMount]) -> verify::NamedSecrets {
        let mut pairs: Vec<(String, String)> = overlay
            .iter()
            .filter_map(|v| (self.orch.env)(&v.from_host).map(|value| (v.name.clone(), value)))
            .collect();
        if let Some(token) = &self.orch.github_token {
            pairs.push(("the GitHub token".into(), token.secret().to_string()));
        }
        for value in super::secrets::credential_tokens(mounts) {
            pairs.push(("a token from the identity's credential files".into(), value));
        }
        verify::NamedSecrets::new(pairs)
    }

    async fn land(
        &mut self,
        sha: String,
        evidence: Vec<CheckEvidence>,
    ) -> Result<AttemptEnd, Failure> {
        let ws = self
            .ws
            .clone()
            .ok_or_else(|| Failure::crash("no workspace"))?;
        // Push, PR, comment and labels are redone idempotently by the resumed verification
        // until LANDED completes this intent (issue 19).
        self.db()
            .record_intent(
                &self.task.id,
                IntentKind::Land,
                self.attempt,
                &serde_json::json!({ "sha": sha, "branch": ws.branch }),
                Utc::now(),
            )
            .map_err(Failure::crash)?;
        // The attempt's branch name may already exist upstream with unrelated history (a
        // reset home, another instance): push under a name of this home's instead of
        // failing the verified work. Never force.
        let fallback_name = format!(
            "{}-{}",
            ws.branch,
            &self.orch.home_label[..self.orch.home_label.len().min(6)]
        );
        let branch = land::push(
            self.orch.workspaces.clone(),
            ws.clone(),
            sha.clone(),
            fallback_name,
            self.token().map(String::from),
        )
        .await
        .map_err(|r| Failure::from(r.with_evidence(evidence.clone())))?;
        let mut pr_url = None;
        if self.task.source == SourceKind::Github {
            let github = self.orch.github().map_err(Failure::crash)?;
            let landed = land::landed(&branch, &ws, self.attempt, self.result.as_ref(), &evidence);
            pr_url = land::open_pull_request(github, &self.task, &landed).await?;
        }
        if let Some(result) = &self.result {
            self.db()
                .finish_attempt(result, &evidence, Utc::now())
                .map_err(Failure::crash)?;
        }
        self.db()
            .set_attempt_landing(
                &self.task.id,
                self.attempt,
                &sha,
                &branch,
                pr_url.as_deref(),
                Utc::now(),
            )
            .map_err(Failure::crash)?;
        let reason = match &pr_url {
            Some(url) => format!(
                "pushed {} ({}); pull request {url}",
                branch,
                &sha[..sha.len().min(10)]
            ),
            None => format!(
                "pushed {} ({}) to {}",
                branch,
                &sha[..sha.len().min(10)],
                ws.upstream
            ),
        };
        let reason = self.scrubber.scrub_line(&reason).into_owned();
        let landed = self
            .db()
            .transition_completing(
                &self.task.id,
                self.state,
                TaskState::Landed,
                &reason,
                (IntentKind::Land, self.attempt),
                Utc::now(),
            )
            .map_err(Failure::crash)?;
        self.task = landed;
        self.state = TaskState::Landed;
        self.opts
            .progress
            .state(&self.task.id, TaskState::Landed, &reason);
        Ok(AttemptEnd::Landed { branch, pr_url })
    }

    // ------------------------------------------------------------------ resume

    async fn resumed(&mut self, record: AttemptRecord) -> Result<AttemptEnd, Failure> {
        self.attempt = record.attempt;
        let spec = record.spec().map_err(Failure::crash)?;
        self.agent = spec.agent.clone();
        let ws = self
            .db()
            .kv_get(&workspace_key(&self.task.id, record.attempt))
            .ok()
            .flatten()
            .and_then(|json| serde_json::from_str(&json).ok());
        self.ws = ws;
        if self.ws.is_none() {
            return Err(Failure::crash(
                "the attempt's workspace record is missing; starting over",
            ));
        }
        let chain = self
            .db()
            .kv_get(&chain_key(&self.task.id))
            .ok()
            .flatten()
            .map(|c| c.split(',').map(String::from).collect())
            .unwrap_or_else(|| vec![spec.agent.clone()]);
        self.chain = chain;
        self.scrub_secrets_of(&spec.env_overlay, &spec.volume_mounts);
        self.spec = Some(spec.clone());
        let key = resumes_key(&self.task.id, record.attempt);
        let resumes = self
            .db()
            .kv_get(&key)
            .ok()
            .flatten()
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or(0)
            + 1;
        self.db()
            .kv_set(&key, &resumes.to_string(), Utc::now())
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
                self.after_run(exec).await
            }
            TaskState::Verifying => {
                let status = record.status.unwrap_or(AttemptStatus::Succeeded);
                let gate = proof::result_gate(status, record.reason.as_deref());
                self.result = Some(RunResult {
                    task_id: self.task.id.clone(),
                    attempt: record.attempt,
                    agent: record.agent.clone(),
                    status,
                    turns: record.turns.unwrap_or(0),
                    duration_seconds: record.duration_seconds.unwrap_or(0.0),
                    cost_usd: record.cost_usd,
                    tokens: record.tokens.unwrap_or_default(),
                    exit_code: record.exit_code,
                    final_message: record.final_message.clone(),
                    reason: record.reason.clone(),
                    events: 0,
                    artifacts: Vec::new(),
                });
                self.opts.progress.state(
                    &self.task.id,
                    TaskState::Verifying,
                    "verification restarted after a restart",
                );
                self.verify_and_land(gate).await
            }
            other => Err(Failure::crash(format!("cannot resume a task in {other}"))),
        }
    }

    // ------------------------------------------------------------------ failure

    async fn discard_workspace(&mut self) {
        if let Some(ws) = self.ws.take() {
            let manager = self.orch.workspaces.clone();
            let _ = tokio::task::spawn_blocking(move || manager.remove(&ws.path)).await;
        }
    }

    /// Turns the outcome into the task's next state.
    async fn conclude(
        &mut self,
        outcome: Result<AttemptEnd, Failure>,
    ) -> anyhow::Result<AttemptEnd> {
        let failure = match outcome {
            Ok(end) => return Ok(end),
            Err(failure) => failure,
        };
        if crate::store::damaged() {
            // A damaged database is never a task failure (issue 12): record nothing.
            return Err(crate::store::DatabaseDamaged {
                path: self.orch.db_path(),
                detail: one_line(&failure.reason),
            }
            .into());
        }
        let now = Utc::now();
        let mut reason = self.scrubber.scrub_line(&failure.reason).into_owned();
        // A permanent failure carries its fix everywhere it is shown: the attempt, the
        // transitions and the report at the source.
        let class = failure::classify(
            failure.stage,
            failure.status,
            &reason,
            &self.agent,
            &self.task.repo,
        );
        if let Class::Permanent { fix, .. } = &class {
            let fix = fix.replace("retry TASK", &format!("retry {}", self.task.id));
            reason = failure::permanent_reason(&reason, &fix);
        }
        tracing::info!(task = %self.task.id, attempt = self.attempt, status = %failure.status, "{reason}");
        // Record the attempt's evidence when the attempt row exists.
        if self.spec.is_some() {
            let result = match self.result.clone() {
                Some(mut r) => {
                    r.status = failure.status;
                    r.reason = Some(reason.clone());
                    r
                }
                None => RunResult {
                    task_id: self.task.id.clone(),
                    attempt: self.attempt,
                    agent: self.agent.clone(),
                    status: failure.status,
                    turns: 0,
                    duration_seconds: self.started.elapsed().as_secs_f64(),
                    cost_usd: None,
                    tokens: Default::default(),
                    exit_code: None,
                    final_message: None,
                    reason: Some(reason.clone()),
                    events: 0,
                    artifacts: Vec::new(),
                },
            };
            let mut evidence = failure.evidence.clone();
            if evidence.is_empty() {
                evidence.push(proof::gate("result", false, reason.clone()));
            }
            self.db()
                .finish_attempt(&result, &evidence, now)
                .context("cannot record the attempt")?;
        } else {
            // No attempt row: this number is reused, so its directory must go.
            self.discard_workspace().await;
        }
        // Decide first, then write FAILED, the failure count, the retry time and (when it
        // gives up) BLOCKED with its pending report in one transaction (issue 19).
        let (end, settlement) = self.settlement(&failure, &class, &reason, now)?;
        let from = self.state;
        let settled = self
            .db()
            .settle_failure(&self.task.id, from, &reason, &settlement, now)
            .with_context(|| format!("cannot move {} to FAILED", self.task.id))?;
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

    /// What follows a failure: the attempt end and what the store records with FAILED.
    fn settlement(
        &mut self,
        failure: &Failure,
        class: &Class,
        reason: &str,
        now: DateTime<Utc>,
    ) -> anyhow::Result<(AttemptEnd, Settlement)> {
        let reason = reason.to_string();
        let failures = self.task.failures;
        let retry = |at: DateTime<Utc>, failures: u32| Settlement {
            failures,
            next_attempt_at: Some(at),
            block: None,
        };
        if let Some(at) = failure.wait_until {
            return Ok((AttemptEnd::Retry { at, reason }, retry(at, failures)));
        }
        if failure.status == AttemptStatus::Cancelled && self.opts.cancel_means_retry {
            return Ok((AttemptEnd::Retry { at: now, reason }, retry(now, failures)));
        }
        let mut exhausted = self.exhausted();
        let auth = matches!(
            class,
            Class::Permanent {
                cause: failure::Cause::AgentAuth,
                ..
            }
        );
        let chain = if self.chain.is_empty() {
            vec![self.agent.clone()]
        } else {
            self.chain.clone()
        };
        if (failure.status == AttemptStatus::Quota || auth) && !self.agent.is_empty() {
            if auth {
                quota::refuse(&self.db(), &self.task.id, &self.agent, now)?;
            }
            exhausted.insert(self.agent.clone());
            // Issue 14: the next agent that is neither out nor refused, else wait for the
            // earliest reset; neither counts a failure.
            match quota::after_attempt(&self.db(), &self.orch.config, &self.task.id, &chain, now)? {
                quota::Choice::Agent(next_agent) => {
                    return Ok((
                        AttemptEnd::Fallback { next_agent, reason },
                        retry(now, failures),
                    ))
                }
                quota::Choice::Park(wait) => {
                    let reason = format!("{reason}; {}", quota::park_reason(&wait, now));
                    return Ok((
                        AttemptEnd::Retry {
                            at: wait.until,
                            reason,
                        },
                        retry(wait.until, failures),
                    ));
                }
                quota::Choice::NoAgent => exhausted.extend(chain.iter().cloned()),
            }
        }
        let decision = match class {
            Class::Permanent { cause, fix } => {
                retry::after_permanent(cause, fix, &chain, &exhausted)
            }
            Class::Transient => retry::after_attempt(
                &self.orch.policy,
                failure.status,
                failures,
                &chain,
                &exhausted,
                now,
            ),
        };
        Ok(match decision {
            AfterAttempt::Retry { at, failures } => {
                (AttemptEnd::Retry { at, reason }, retry(at, failures))
            }
            AfterAttempt::Fallback { next_agent } => (
                AttemptEnd::Fallback { next_agent, reason },
                retry(now, failures),
            ),
            AfterAttempt::Hold => (
                AttemptEnd::Held { reason },
                Settlement {
                    failures,
                    next_attempt_at: None,
                    block: None,
                },
            ),
            AfterAttempt::Block { reason: why } => {
                let failures = if failure.status == AttemptStatus::Quota {
                    failures
                } else {
                    failures + 1
                };
                let block_reason = if class.is_permanent() {
                    reason.clone()
                } else {
                    format!("{why}; last: {reason}")
                };
                let settlement = Settlement {
                    failures,
                    next_attempt_at: None,
                    block: Some(BlockSettlement {
                        reason: block_reason.clone(),
                        report: self.task.source == SourceKind::Github,
                    }),
                };
                (
                    AttemptEnd::Blocked {
                        reason: block_reason,
                    },
                    settlement,
                )
            }
        })
    }

    async fn report_blocked(&self) {
        if self.task.source != SourceKind::Github {
            return;
        }
        let attempts = self.db().attempts(&self.task.id).unwrap_or_default();
        let blocked = intents::blocked_of(&attempts);
        // Done only once GitHub has it; otherwise the next start finishes the report.
        if intents::report_blocked(self.orch, &self.task, &blocked).await {
            // From now on the ready label on the issue can only be a person's: re-labelling
            // brings the task back as a new generation (`orchestrator::generation`).
            let _ = self.db().mark_block_reported(&self.task.id, Utc::now());
            let _ = self.db().complete_intent(
                &self.task.id,
                IntentKind::Block,
                self.task.attempts,
                Utc::now(),
            );
        }
    }
}

impl From<verify::Refusal> for Failure {
    fn from(r: verify::Refusal) -> Failure {
        Failure {
            status: r.status,
            reason: r.reason,
            evidence: r.evidence,
            wait_until: None,
            // A secret in the diff is classified permanent from the reason's text.
            stage: Stage::Verify,
        }
    }
}

impl From<crate::store::StoreError> for Failure {
    fn from(e: crate::store::StoreError) -> Failure {
        Failure::crash(e)
    }
}

/// The reason an outcome is printed with.
pub fn describe(end: &AttemptEnd) -> String {
    match end {
        AttemptEnd::Landed { branch, pr_url } => match pr_url {
            Some(url) => format!("LANDED: {url} (branch {branch})"),
            None => format!("LANDED: branch {branch} pushed"),
        },
        AttemptEnd::Retry { at, reason } => {
            format!(
                "FAILED ({reason}); next attempt at {}",
                at.format("%H:%M:%S UTC")
            )
        }
        AttemptEnd::Fallback { next_agent, reason } => {
            format!("FAILED ({reason}); falling back to {next_agent}")
        }
        AttemptEnd::Held { reason } => format!("FAILED ({reason}); held"),
        AttemptEnd::Blocked { reason } => format!("BLOCKED: {reason}"),
        AttemptEnd::Released { reason } => format!("released: {reason}"),
    }
}
