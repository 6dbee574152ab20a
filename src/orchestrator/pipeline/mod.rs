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
//! evidence; [`super::retry::after_failure`] then decides retry (backoff), a wait (cost
//! ceiling), fallback (quota), hold (cancelled) or BLOCKED (reported where the task came
//! from).
//!
//! An [`AttemptRun`] is the attempt's context; its stages live one file per stretch:
//! `prepare` (workspace, route, RunSpec), `claim` (the source), `agent` (the container),
//! `landing` (commit, then the `verify` and `land` stages), `resume` (after a restart) and
//! `conclude` (FAILED and what follows). Within an attempt only this module writes to the
//! store or moves the task (the daemon's reconciliation, `generation`, the shepherd,
//! intake and the HTTP API write too, each through `Store`); the stages in `verify` and
//! `land` return evidence or a refusal. The source of the task is asked through the
//! `sources::Source` port (`Orchestrator::sources`): claim, landing report, blocked report,
//! push credential; nothing here names a tracker (`scripts/invariants.py`).
//!
//! Must not: decide transitions itself (the store checks the state machine), or let a
//! secret reach the store, a log line or a transcript (everything passes the scrubber).

mod agent;
mod claim;
mod conclude;
mod egress;
mod landing;
mod prepare;
mod resume;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use chrono::{DateTime, Utc};
use tokio::sync::watch;

use super::execute::AttemptExecution;
use crate::agents::scrub::Scrubber;
use crate::domain::{AttemptStatus, CheckEvidence, RunResult, RunSpec, Task, TaskState};
use crate::store::{AttemptRecord, Store};
use crate::workspace::Workspace;

use super::failure::FailureKind;
use super::shepherd::followup::FollowUpRun;
use super::verify::{self, first_line};
use super::{proof, quota, Orchestrator, Progress};

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
    /// A person cancelled it (`polyphony cancel`): CANCELLED, no failure counted.
    Cancelled { reason: String },
    /// This daemon no longer (safely) holds the task's lease (issue 27): it stopped before
    /// any push and recorded nothing; the daemon holding the lease, or the one taking the
    /// expired lease over, goes on with the task.
    LeaseLost { reason: String },
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
                | AttemptEnd::Cancelled { .. }
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
    /// What failed, as its layer typed it: [`super::failure::classify`] decides from it.
    kind: FailureKind,
    /// Not the agent's doing (issue 24): the attempt was interrupted and given up (restarts
    /// it caused, a lost lease). The next attempt runs at once; no failure is counted.
    interrupted: bool,
    /// This daemon's lease on the task is gone or about to expire (issue 27): nothing is
    /// recorded, the task is another daemon's to go on with.
    lease_lost: bool,
}

impl Failure {
    fn new(status: AttemptStatus, reason: impl Into<String>) -> Failure {
        Failure {
            status,
            reason: reason.into(),
            evidence: Vec::new(),
            wait_until: None,
            kind: FailureKind::Other,
            interrupted: false,
            lease_lost: false,
        }
    }

    fn lease_lost(lost: super::lease::LeaseLost) -> Failure {
        Failure {
            lease_lost: true,
            ..Failure::new(AttemptStatus::Crash, lost.to_string())
        }
    }

    fn interrupted(reason: impl Into<String>) -> Failure {
        Failure {
            interrupted: true,
            ..Failure::new(AttemptStatus::Crash, reason)
        }
    }

    fn of_kind(mut self, kind: FailureKind) -> Failure {
        self.kind = kind;
        self
    }

    /// A crash of our own with no bearing on a retry ([`FailureKind::Other`]).
    fn crash(err: impl std::fmt::Display) -> Failure {
        Failure::new(AttemptStatus::Crash, first_line(&err.to_string()))
    }

    /// A crash caused by a typed error, its kind taken from the error.
    fn caused<E>(err: E) -> Failure
    where
        E: std::fmt::Display,
        for<'e> FailureKind: From<&'e E>,
    {
        let kind = FailureKind::from(&err);
        Failure::crash(err).of_kind(kind)
    }

    /// Says what was being done: "{what}: {reason}".
    fn during(mut self, what: &str) -> Failure {
        self.reason = format!("{what}: {}", self.reason);
        self
    }
}

/// What the agent's stage hands to verification: the attempt's workspace, its RunSpec, the
/// agent's result and the gate over it (issue 30: stages pass values, not optional fields).
struct Ran {
    ws: Workspace,
    spec: RunSpec,
    result: RunResult,
    gate: CheckEvidence,
}

struct AttemptRun<'a> {
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
    /// A follow-up on a pull request this home opened (issue 15): see `shepherd::followup`.
    followup: Option<FollowUpRun>,
    /// Issue 25: the attempt's egress network, made while the workspace is prepared
    /// (`agent::EarlyNetwork`); the agent's stage takes it.
    early_network: Option<agent::EarlyNetwork>,
    /// Removals of the attempt's egress proxy and network, begun once the proxy's log is
    /// read and finished before the attempt returns ([`AttemptRun::settle`]).
    teardowns: Mutex<Vec<tokio::task::JoinHandle<()>>>,
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
        let mut run = AttemptRun::new(self, task, opts)?;
        let outcome = run.fresh().await;
        let end = run.conclude(outcome).await;
        // The result is recorded (and the task landed): the network goes after it.
        run.settle().await;
        end
    }

    /// Resumes an attempt after a daemon restart: re-attaches to its container (running
    /// or exited) without duplicating events, or re-runs verification, then lands.
    pub async fn resume(
        &self,
        task: Task,
        record: AttemptRecord,
        opts: &RunOptions,
    ) -> anyhow::Result<AttemptEnd> {
        let mut run = AttemptRun::new(self, task, opts)?;
        let outcome = run.resumed(record).await;
        let end = run.conclude(outcome).await;
        run.settle().await;
        end
    }

    /// Ends an attempt that will not go on (issue 24; a lease another instance found
    /// expired, issue 27): its pending intents are finished first, so a verified landing
    /// lands and a pull request that exists is found, never opened again; otherwise its
    /// container is removed and the task's next attempt is due at once, with no failure
    /// counted (after `max_attempts` such ends the task is BLOCKED). `why` is recorded as
    /// the attempt's reason. `task` is as the store has it (any active state).
    pub async fn finish_interrupted(
        &self,
        task: Task,
        record: AttemptRecord,
        why: String,
        opts: &RunOptions,
    ) -> anyhow::Result<AttemptEnd> {
        let mut run = AttemptRun::new(self, task, opts)?;
        let outcome = run.interrupted(record, why).await;
        let end = run.conclude(outcome).await;
        run.settle().await;
        end
    }
}

impl Orchestrator {
    /// Goes on with an attempt of a lost machine whose expired lease this daemon took over
    /// (issue 27): a landing it pushed is finished (the pull request found, not opened
    /// again); otherwise the next attempt is due at once, not counted as a failure.
    pub async fn adopt_lost(
        &self,
        task: Task,
        record: AttemptRecord,
        why: String,
        opts: &RunOptions,
    ) -> anyhow::Result<AttemptEnd> {
        let mut run = AttemptRun::new(self, task, opts)?;
        let outcome = run.adopted(record, why).await;
        run.conclude(outcome).await
    }
}

impl<'a> AttemptRun<'a> {
    fn new(orch: &'a Orchestrator, task: Task, opts: &'a RunOptions) -> anyhow::Result<Self> {
        let store = orch.store.open()?;
        let followup = super::shepherd::followup::load(&store, &task.id)?;
        let store = Mutex::new(store);
        let state = task.state;
        let attempt = task.attempts + 1;
        Ok(AttemptRun {
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
            followup,
            early_network: None,
            teardowns: Mutex::default(),
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
            .transition(&self.task.id, self.state, to, &reason, self.orch.now());
        self.task = moved?;
        self.state = to;
        self.opts.progress.state(&self.task.id, to, &reason);
        Ok(())
    }

    /// The credential a push to (or a clone from) the task's remote takes: its source's.
    fn token(&self) -> Option<&str> {
        self.orch
            .sources
            .of(&self.task)
            .ok()
            .and_then(|source| source.push_token())
    }

    /// Whether the claim and the outcome are reported at the task's source: not for a
    /// follow-up (its pull request is the shepherd's) nor for a source that keeps no record
    /// of its own (the local queue). A source that is not configured now is one that
    /// reports back (only the local queue is always there): its report waits as an intent.
    fn reports_back(&self) -> bool {
        self.followup.is_none()
            && self
                .orch
                .sources
                .of(&self.task)
                .map_or(true, |source| source.reports_back())
    }

    // ------------------------------------------------------------------ fresh attempt

    async fn fresh(&mut self) -> Result<AttemptEnd, Failure> {
        self.egress_early();
        let ws = self.prepare_workspace().await?;
        self.ws = Some(ws.clone());
        if self.attempt > 1 {
            quota::continue_after_limit(self.orch, &self.store, &self.task.id, self.attempt, &ws)
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
        self.start_attempt(&spec)?;
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
        self.after_run(ws, spec, exec).await
    }

    async fn after_run(
        &mut self,
        ws: Workspace,
        spec: RunSpec,
        exec: AttemptExecution,
    ) -> Result<AttemptEnd, Failure> {
        let result = self.run_result(&spec, &exec);
        let gate = proof::result_gate(exec.status, result.reason.as_deref());
        self.result = Some(result.clone());
        self.record_attempt(std::slice::from_ref(&gate))?;
        // The agent's output is all handled: progress (issue 24).
        self.db().clear_handling(&self.task.id, self.attempt)?;
        if exec.status == AttemptStatus::Quota {
            self.record_quota(&spec, &exec, &result)?;
        }
        if exec.status != AttemptStatus::Succeeded {
            let reason = match &result.reason {
                Some(r) => format!("agent {} ended {}: {r}", result.agent, exec.status),
                None => format!("agent {} ended {}", result.agent, exec.status),
            };
            // The agent CLI's own words are the only text read (foreign text, issue 30),
            // never our reason around them; what the adapter read from the CLI's
            // structured lines decides first (issue 28).
            let kind = FailureKind::of_agent_outcome(
                &exec.outcome,
                self.spec
                    .as_ref()
                    .map_or(crate::domain::AgentType::Claude, |s| s.agent_type),
            );
            let mut failure = Failure::new(exec.status, reason).of_kind(kind);
            failure.evidence = vec![gate];
            if exec.status == AttemptStatus::Budget {
                // Issue 26: not a failure of the work; the task waits for the budget's reset.
                failure.wait_until =
                    Some(crate::orchestrator::gateway::next_day((self.orch.clock)()));
            }
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
        self.verify_and_land(Ran {
            ws,
            spec,
            result,
            gate,
        })
        .await
    }

    /// Issue 14: the limit this attempt met holds for every task using its agent and
    /// identity.
    fn record_quota(
        &self,
        spec: &RunSpec,
        exec: &AttemptExecution,
        result: &RunResult,
    ) -> Result<(), Failure> {
        quota::record_hit(
            &self.db(),
            &self.orch.config.quota_settings(),
            quota::LimitMet {
                identity: &spec.identity,
                agent: &spec.agent,
                hit: exec.outcome.quota.as_ref(),
                message: result.reason.as_deref().unwrap_or("usage limit"),
                task_id: &self.task.id,
                attempt: self.attempt,
            },
            self.orch.now(),
        )
        .map(|_| ())
        .map_err(Failure::crash)
    }

    /// Records the attempt's result with `evidence` on its row (the one place a
    /// [`RunResult`] is written): after the agent, so a restart resumes verification from
    /// it; on landing, with the whole proof; on failure, with the failure's evidence.
    /// Without a result (no attempt row yet) there is nothing to record.
    fn record_attempt(&self, evidence: &[CheckEvidence]) -> crate::store::Result<()> {
        match &self.result {
            Some(result) => self.db().finish_attempt(result, evidence, self.orch.now()),
            None => Ok(()),
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
            kind: r.kind,
            interrupted: false,
            lease_lost: false,
        }
    }
}

macro_rules! typed_failures {
    ($($error:ty),* $(,)?) => {$(
        impl From<$error> for Failure {
            fn from(e: $error) -> Failure {
                Failure::caused(e)
            }
        }
    )*};
}

typed_failures!(
    crate::store::StoreError,
    crate::workspace::WorkspaceError,
    crate::runtime::RuntimeError,
    crate::sources::SourceError,
    crate::identity::IdentityError,
    crate::routing::run_spec::RunSpecError,
);

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
        AttemptEnd::Cancelled { reason } => format!("CANCELLED: {reason}"),
        AttemptEnd::LeaseLost { reason } => format!("stopped, nothing recorded: {reason}"),
    }
}
