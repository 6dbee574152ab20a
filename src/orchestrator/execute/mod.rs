//! Running one attempt or one check in a container, and re-attaching to a running one
//! (spec §8 lifecycle, §9 event protocol), over the `runtime::WorkerRuntime` seam.
//!
//! Owns: following output while the agent runs, splitting it into lines, scrubbing each
//! line of secret values BEFORE anything is stored, classifying stdout lines through the
//! adapter (stderr is kept apart and never feeds the outcome), batching events into an
//! [`EventSink`] and the transcript files, the deadline / idle / cancel kills, collecting
//! the exit code and OOM flag, deciding the [`AttemptStatus`] ([`decide`], pure) and
//! removing the container.
//!
//! [`run_attempt`] and [`reattach`] take one [`AgentRun`]: the runtime, adapter, sink,
//! limits, transcript, scrubber and cancel signal a container is followed with.
//!
//! Only the CLI's first final report is folded into the outcome (`AgentAdapter::is_final`):
//! a process in the container can write forged report lines to `/proc/1/fd/1`; later ones
//! are stored and counted in `lines_after_result`. Lines after which the outcome holds an
//! `api_retry` do not restart the idle timer (an API failing forever ends as `stalled`), and
//! a `hopeless` outcome (a refused API key) stops the container at once. The workspace size
//! is measured every 5 s and at exit (`container.max_workspace_size`), stored output is
//! capped (`container.max_output`), and the reported cost is clamped to
//! `0..=max_cost_usd_per_attempt`. Any error after a container started kills and removes it.
//!
//! Must not: decide task state transitions, touch the store directly, or log line text
//! before it is scrubbed.
//!
//! - `follow`: one attempt's output, line by line, into events and transcripts, and when
//!   to kill it (deadline, idle, cancel, output and workspace caps).
//! - `policy`: the limits, why we stopped a container, and [`decide`] (pure): how an
//!   attempt ended.
//! - `sinks`: where events go ([`EventSink`]) and what scrubs them first ([`ScrubOutput`]).
//! - `check`: one verification command to completion, keeping its scrubbed tail.

mod check;
mod follow;
mod policy;
mod sinks;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio::sync::watch;

pub use check::{run_check, CheckResult};
pub use policy::{decide, tree_size, RunLimits, Stop, WORKSPACE_CHECK_EVERY};
pub use sinks::{EventSink, Scrub, ScrubOutput, VecSink};

use crate::agents::{AgentAdapter, AgentOutcome};
use crate::domain::AttemptStatus;
use crate::orchestrator::Clock;
use crate::runtime::container_spec::{container_key, ContainerSpec};
use crate::runtime::{RuntimeError, WorkerRuntime};
use follow::{follow_and_collect, Followed};

/// The transcript files of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TranscriptPaths {
    /// Scrubbed stdout lines, one per line (`<attempt>.ndjson`).
    pub stdout: PathBuf,
    /// Scrubbed stderr lines (`<attempt>.stderr.log`).
    pub stderr: PathBuf,
}

impl TranscriptPaths {
    /// `$POLYPHONY_HOME/transcripts/<key>/<attempt>.ndjson` and `.stderr.log`.
    pub fn under(home: &Path, task_id: &str, attempt: u32) -> Self {
        let dir = home.join("transcripts").join(container_key(task_id));
        TranscriptPaths {
            stdout: dir.join(format!("{attempt}.ndjson")),
            stderr: dir.join(format!("{attempt}.stderr.log")),
        }
    }
}

/// What one attempt did.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptExecution {
    pub container_id: String,
    pub status: AttemptStatus,
    pub exit_code: Option<i64>,
    pub outcome: AgentOutcome,
    /// Why it did not succeed, in one line.
    pub reason: Option<String>,
    /// Events recorded by this call (a re-attach counts only the new ones).
    pub events: u64,
    /// Next seq: events recorded in total for the attempt.
    pub next_seq: u64,
    /// Lines over the limit that were cut.
    pub cut_lines: u64,
    pub oom_killed: bool,
    pub duration: Duration,
    /// The last sink error, when events could not all be stored.
    pub sink_error: Option<String>,
    /// Stdout lines after the CLI's final report: stored, never folded into the outcome.
    pub lines_after_result: u64,
    /// Figures the runtime did not take as reported (a clamped cost), one line each.
    pub warnings: Vec<String>,
}

/// Everything one agent container is run and followed with, the same whether the
/// container is started ([`run_attempt`]) or re-attached to ([`reattach`]).
pub struct AgentRun<'a> {
    pub runtime: &'a dyn WorkerRuntime,
    /// Classifies stdout lines into events and the outcome.
    pub adapter: &'a dyn AgentAdapter,
    /// Where the (scrubbed) events go as they arrive.
    pub sink: &'a mut dyn EventSink,
    pub limits: RunLimits,
    /// Where scrubbed output is also written, if anywhere.
    pub transcript: Option<&'a TranscriptPaths>,
    /// Applied to every line before anything stores it.
    pub scrub: Scrub<'a>,
    /// `true` asks for the container to be killed.
    pub cancel: watch::Receiver<bool>,
    /// The wall clock events are stamped and deadlines are counted by.
    pub clock: Clock,
    /// Told once the container's output ended (its process exited, or was killed and
    /// drained), before it is inspected and removed: the attempt's egress proxy is stopped
    /// then, beside the removal. Dropped unsent on an error before that point.
    pub exited: Option<tokio::sync::oneshot::Sender<()>>,
}

/// Runs one attempt: create `spec` (replacing a leftover), start, follow, collect, remove.
/// The sink is told the container's id before it starts.
///
/// Errors are for the container never getting going (image missing, engine down) or the
/// engine vanishing mid-run; in the latter case the container is left for `reattach`.
pub async fn run_attempt(
    run: AgentRun<'_>,
    spec: &ContainerSpec,
) -> Result<AttemptExecution, RuntimeError> {
    let id = create(run.runtime, spec, run.limits.deadline, (run.clock)()).await?;
    run.sink.container_created(&id);
    start_created(run, spec, &id).await
}

/// Creates the attempt's container from `spec`, labelled with its deadline, without
/// starting it: the caller records the id (and moves the task) before [`start_created`].
/// The deadline label counts from `now`.
pub async fn create(
    rt: &dyn WorkerRuntime,
    spec: &ContainerSpec,
    deadline: Duration,
    now: DateTime<Utc>,
) -> Result<String, RuntimeError> {
    rt.create(&with_deadline(spec, deadline, now)).await
}

/// Starts the container [`create`] made from `spec`, follows it, collects and removes it.
/// A start that fails removes the container.
pub async fn start_created(
    run: AgentRun<'_>,
    spec: &ContainerSpec,
    id: &str,
) -> Result<AttemptExecution, RuntimeError> {
    let rt = run.runtime;
    let started = Instant::now();
    if let Err(e) = rt.start(id).await {
        let _ = rt.remove(id).await;
        return Err(e);
    }
    let followed = Followed {
        id,
        started,
        deadline_at: tokio::time::Instant::from_std(started) + run.limits.deadline,
        skip: 0,
        workspace: workspace_of(spec),
    };
    let result = follow_and_collect(run, followed).await;
    discard_on_error(rt, id, result).await
}

/// `spec` labelled with its deadline, so the watchdog can enforce it even when nobody
/// follows the container any more.
fn with_deadline(spec: &ContainerSpec, deadline: Duration, now: DateTime<Utc>) -> ContainerSpec {
    let mut spec = spec.clone();
    spec.labels.insert(
        crate::runtime::watchdog::LABEL_DEADLINE.to_string(),
        crate::runtime::watchdog::deadline_label(now, deadline),
    );
    spec
}

/// The host path bound at `/workspace`, if any.
fn workspace_of(spec: &ContainerSpec) -> Option<PathBuf> {
    spec.mounts
        .iter()
        .find(|m| m.container_path == crate::runtime::container_spec::WORKSPACE_DIR)
        .map(|m| m.host_path.clone())
}

/// On any error after the container started (engine or stream error, a kill that failed,
/// a transcript that cannot be written), kill and remove it: an attempt that failed must
/// not leave a container running with no deadline.
async fn discard_on_error<T>(
    rt: &dyn WorkerRuntime,
    id: &str,
    result: Result<T, RuntimeError>,
) -> Result<T, RuntimeError> {
    if result.is_err() {
        if let Err(e) = rt.kill(id).await {
            tracing::warn!(container = id, error = %e, "cannot kill the container after an error");
        }
        if let Err(e) = rt.remove(id).await {
            tracing::warn!(container = id, error = %e, "cannot remove the container after an error; the watchdog will");
        }
    }
    result
}

/// Resumes an attempt whose follower died (daemon restart) without duplicating events:
/// the logs of `container_id` are re-read from the start, every stdout line still feeds
/// the adapter (so turns and cost are whole), and only lines from seq `recorded` on are
/// stored. The deadline counts from the container's own start time. A container that was
/// created and never started is started first.
pub async fn reattach(
    run: AgentRun<'_>,
    container_id: &str,
    recorded: u64,
) -> Result<AttemptExecution, RuntimeError> {
    let rt = run.runtime;
    let mut info = rt.inspect(container_id).await?;
    if info.state == crate::runtime::RunState::Created {
        // A daemon killed between `docker create` and `start` (issue 29): the container
        // ran nothing yet; it starts now, its deadline counted from here.
        if let Err(e) = rt.start(container_id).await {
            let _ = rt.remove(container_id).await;
            return Err(e);
        }
        info = rt.inspect(container_id).await?;
    }
    let ran_for = info
        .started_at
        .and_then(|t| ((run.clock)() - t).to_std().ok())
        .unwrap_or_default();
    let now = Instant::now();
    let remaining = run.limits.deadline.saturating_sub(ran_for);
    let followed = Followed {
        id: &info.id,
        started: now.checked_sub(ran_for).unwrap_or(now),
        deadline_at: tokio::time::Instant::now() + remaining,
        skip: recorded,
        workspace: info
            .mounts
            .iter()
            .find(|(target, _)| target == crate::runtime::container_spec::WORKSPACE_DIR)
            .map(|(_, source)| PathBuf::from(source)),
    };
    let result = follow_and_collect(run, followed).await;
    discard_on_error(rt, &info.id, result).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transcript_paths_follow_the_layout() {
        let t = TranscriptPaths::under(Path::new("/h"), "local-3", 2);
        assert_eq!(t.stdout, PathBuf::from("/h/transcripts/local-3/2.ndjson"));
        assert_eq!(
            t.stderr,
            PathBuf::from("/h/transcripts/local-3/2.stderr.log")
        );
    }
}
