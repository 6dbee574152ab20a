//! Running one attempt or one check in a container, and re-attaching to a running one
//! (spec §8 lifecycle, §9 event protocol).
//!
//! Owns: following output while the agent runs, splitting it into lines, scrubbing each
//! line of secret values BEFORE anything is stored, classifying stdout lines through the
//! adapter (stderr is kept apart and never feeds the outcome), batching events into an
//! [`EventSink`] and the transcript files, the deadline / idle / cancel kills, collecting
//! the exit code and OOM flag, deciding the [`AttemptStatus`] ([`decide`], pure) and
//! removing the container.
//!
//! Must not: decide task state transitions, touch the store directly, or log line text
//! before it is scrubbed.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chrono::Utc;
use futures_util::StreamExt;
use serde_json::json;
use tokio::sync::watch;

use super::container_spec::{container_key, ContainerSpec};
use super::stream::{Line, LineSplitter, MAX_LINE_BYTES};
use super::{RuntimeError, WorkerRuntime};
use crate::agents::scrub::{Scrubber, StreamScrub};
use crate::agents::{AgentAdapter, AgentOutcome};
use crate::domain::{AttemptStatus, EventKind, EventStream, TaskEvent};

/// Flush the pending batch to the sink at this many events …
const BATCH_EVENTS: usize = 50;
/// … or at least this often.
const BATCH_INTERVAL: Duration = Duration::from_millis(200);
/// After a kill, how long the log stream may take to end before we stop waiting.
const DRAIN_AFTER_KILL: Duration = Duration::from_secs(10);
/// Bytes of combined output a check keeps.
const CHECK_TAIL_BYTES: usize = 4096;

/// Where events go as they arrive (the store's batched insert, in production).
pub trait EventSink: Send {
    /// Stores a batch. On error the same events are offered again at the next flush.
    fn record(&mut self, events: &[TaskEvent]) -> Result<(), String>;

    /// Called once the container exists, before it starts, so the caller can persist the
    /// id for recovery.
    fn container_created(&mut self, _container_id: &str) {}
}

/// An [`EventSink`] that keeps everything in memory (tests, `replay`).
#[derive(Debug, Default)]
pub struct VecSink {
    pub events: Vec<TaskEvent>,
    pub batches: usize,
    pub container_id: Option<String>,
}

impl EventSink for VecSink {
    fn record(&mut self, events: &[TaskEvent]) -> Result<(), String> {
        self.events.extend_from_slice(events);
        self.batches += 1;
        Ok(())
    }

    fn container_created(&mut self, container_id: &str) {
        self.container_id = Some(container_id.to_string());
    }
}

/// What scrubs output before anything stores it: in production a [`Scrubber`] (every
/// spelling, and a secret split across lines is masked on both sides); any
/// `Fn(&str) -> String` works too and is applied to each line on its own (tests).
pub trait ScrubOutput: Send + Sync {
    /// `text` (one line or several) scrubbed.
    fn scrub_text(&self, text: &str) -> String;
    /// The scrubber, when there is one: lines are then scrubbed as a stream.
    fn scrubber(&self) -> Option<&Scrubber> {
        None
    }
}

impl<F: Fn(&str) -> String + Send + Sync> ScrubOutput for F {
    fn scrub_text(&self, text: &str) -> String {
        self(text)
    }
}

impl ScrubOutput for Scrubber {
    fn scrub_text(&self, text: &str) -> String {
        Scrubber::scrub_text(self, text)
    }

    fn scrubber(&self) -> Option<&Scrubber> {
        Some(self)
    }
}

/// Secret scrubber handed to [`run_attempt`], [`reattach`] and [`run_check`].
pub type Scrub<'a> = &'a dyn ScrubOutput;

/// Time and size limits of one attempt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunLimits {
    /// Wall clock from container start; then kill -> `timeout`.
    pub deadline: Duration,
    /// No output on either stream for this long; then kill -> `stalled`.
    pub idle_timeout: Duration,
    /// Bytes of output (both streams) stored as events and transcript; past it the
    /// container is killed -> `failed`, and nothing more is stored.
    pub max_output_bytes: u64,
    /// Size of the workspace (checked every [`WORKSPACE_CHECK_EVERY`]); past it the
    /// container is killed -> `failed`. `None`: unchecked.
    pub max_workspace_bytes: Option<u64>,
    /// Largest cost one attempt may report; figures outside `0..=max` are clamped.
    pub max_cost_usd: f64,
}

impl RunLimits {
    /// 30 min, 5 min idle, 64 MiB of output, a 10 GiB workspace, $100.
    pub const DEFAULT: RunLimits = RunLimits {
        deadline: Duration::from_secs(30 * 60),
        idle_timeout: Duration::from_secs(5 * 60),
        max_output_bytes: 64 * 1024 * 1024,
        max_workspace_bytes: Some(10 * 1024 * 1024 * 1024),
        max_cost_usd: crate::agents::DEFAULT_MAX_COST_USD,
    };

    /// The default caps with these time limits.
    pub const fn new(deadline: Duration, idle_timeout: Duration) -> Self {
        RunLimits {
            deadline,
            idle_timeout,
            ..RunLimits::DEFAULT
        }
    }
}

/// How often the workspace size is measured while an agent runs.
pub const WORKSPACE_CHECK_EVERY: Duration = Duration::from_secs(5);

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

/// Why we killed the container ourselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Deadline,
    Idle,
    Cancel,
    /// More output than `max_output_bytes`.
    OutputCap,
    /// The workspace grew past `max_workspace_bytes` (the size measured).
    WorkspaceCap(u64),
    /// The agent's stream said the run cannot succeed (a refused API key).
    Hopeless,
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

/// The result of one proof-of-work command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRun {
    pub exit_code: Option<i64>,
    /// The last ~4 KB of combined output, scrubbed, starting at a line boundary.
    pub output_tail: String,
    pub duration: Duration,
    pub timed_out: bool,
}

/// Runs one attempt: create (replacing a leftover), start, follow, collect, remove.
///
/// Errors are for the container never getting going (image missing, engine down) or the
/// engine vanishing mid-run; in the latter case the container is left for `reattach`.
#[allow(clippy::too_many_arguments)]
pub async fn run_attempt(
    rt: &dyn WorkerRuntime,
    spec: &ContainerSpec,
    adapter: &dyn AgentAdapter,
    sink: &mut dyn EventSink,
    limits: RunLimits,
    transcript: Option<&TranscriptPaths>,
    scrub: Scrub<'_>,
    cancel: watch::Receiver<bool>,
) -> Result<AttemptExecution, RuntimeError> {
    let spec = &with_deadline(spec, limits.deadline);
    let id = rt.create(spec).await?;
    sink.container_created(&id);
    let started = Instant::now();
    if let Err(e) = rt.start(&id).await {
        let _ = rt.remove(&id).await;
        return Err(e);
    }
    let deadline_at = tokio::time::Instant::from_std(started) + limits.deadline;
    let workspace = workspace_of(spec);
    let result = follow_and_collect(
        rt,
        &id,
        adapter,
        sink,
        limits,
        deadline_at,
        started,
        transcript,
        scrub,
        cancel,
        0,
        workspace,
    )
    .await;
    discard_on_error(rt, &id, result).await
}

/// `spec` labelled with its deadline, so the watchdog can enforce it even when nobody
/// follows the container any more.
fn with_deadline(spec: &ContainerSpec, deadline: Duration) -> ContainerSpec {
    let mut spec = spec.clone();
    spec.labels.insert(
        super::watchdog::LABEL_DEADLINE.to_string(),
        super::watchdog::deadline_label(Utc::now(), deadline),
    );
    spec
}

/// The host path bound at `/workspace`, if any.
fn workspace_of(spec: &ContainerSpec) -> Option<PathBuf> {
    spec.mounts
        .iter()
        .find(|m| m.container_path == super::container_spec::WORKSPACE_DIR)
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
/// the logs are re-read from the start, every stdout line still feeds the adapter (so
/// turns and cost are whole), and only lines from seq `recorded` on are stored. The
/// deadline counts from the container's own start time.
#[allow(clippy::too_many_arguments)]
pub async fn reattach(
    rt: &dyn WorkerRuntime,
    container_id: &str,
    adapter: &dyn AgentAdapter,
    sink: &mut dyn EventSink,
    limits: RunLimits,
    transcript: Option<&TranscriptPaths>,
    scrub: Scrub<'_>,
    cancel: watch::Receiver<bool>,
    recorded: u64,
) -> Result<AttemptExecution, RuntimeError> {
    let info = rt.inspect(container_id).await?;
    let ran_for = info
        .started_at
        .and_then(|t| (Utc::now() - t).to_std().ok())
        .unwrap_or_default();
    let now = Instant::now();
    let started = now.checked_sub(ran_for).unwrap_or(now);
    let remaining = limits.deadline.saturating_sub(ran_for);
    let deadline_at = tokio::time::Instant::now() + remaining;
    let workspace = info
        .mounts
        .iter()
        .find(|(target, _)| target == super::container_spec::WORKSPACE_DIR)
        .map(|(_, source)| PathBuf::from(source));
    let result = follow_and_collect(
        rt,
        &info.id,
        adapter,
        sink,
        limits,
        deadline_at,
        started,
        transcript,
        scrub,
        cancel,
        recorded,
        workspace,
    )
    .await;
    discard_on_error(rt, &info.id, result).await
}

/// Runs `spec` (a `/bin/sh -c CMD` verification container) to completion or `timeout`
/// and keeps the scrubbed tail of its output. The container is always removed.
pub async fn run_check(
    rt: &dyn WorkerRuntime,
    spec: &ContainerSpec,
    timeout: Duration,
    scrub: Scrub<'_>,
) -> Result<CheckRun, RuntimeError> {
    let spec = &with_deadline(spec, timeout);
    let id = rt.create(spec).await?;
    let started = Instant::now();
    let result = run_check_inner(rt, &id, timeout, scrub, started).await;
    if result.is_err() {
        let _ = rt.kill(&id).await;
    }
    if let Err(e) = rt.remove(&id).await {
        tracing::warn!(container = %id, error = %e, "cannot remove the check container; the watchdog will");
    }
    result
}

async fn run_check_inner(
    rt: &dyn WorkerRuntime,
    id: &str,
    timeout: Duration,
    scrub: Scrub<'_>,
    started: Instant,
) -> Result<CheckRun, RuntimeError> {
    rt.start(id).await?;
    let mut tail: Vec<u8> = Vec::new();
    let mut truncated = false;
    let mut logs = rt.logs(id, None);
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut timed_out = false;
    loop {
        tokio::select! {
            chunk = logs.next() => match chunk {
                Some(Ok(c)) => {
                    tail.extend_from_slice(&c.bytes);
                    // Keep twice the tail so scrubbing sees whole lines around the cut.
                    if tail.len() > 2 * CHECK_TAIL_BYTES {
                        let drop = tail.len() - 2 * CHECK_TAIL_BYTES;
                        tail.drain(..drop);
                        truncated = true;
                    }
                }
                Some(Err(e)) => return Err(e),
                None => break,
            },
            _ = &mut deadline, if !timed_out => {
                timed_out = true;
                rt.kill(id).await?;
                break;
            }
        }
    }
    let exit_code = match tokio::time::timeout(DRAIN_AFTER_KILL, rt.wait(id)).await {
        Ok(Ok(code)) => Some(code),
        Ok(Err(e)) => return Err(e),
        Err(_) => None,
    };
    Ok(CheckRun {
        exit_code,
        output_tail: scrubbed_tail(&tail, truncated, scrub),
        duration: started.elapsed(),
        timed_out,
    })
}

/// The last [`CHECK_TAIL_BYTES`] of `raw`, scrubbed. When `raw` was truncated its first
/// (partial) line is dropped first, so a secret cut in half is never shown half-scrubbed.
fn scrubbed_tail(raw: &[u8], truncated: bool, scrub: Scrub<'_>) -> String {
    let mut start = 0;
    if truncated {
        if let Some(i) = raw.iter().position(|b| *b == b'\n') {
            start = i + 1;
        }
    }
    let text = scrub.scrub_text(&String::from_utf8_lossy(&raw[start..]));
    if text.len() <= CHECK_TAIL_BYTES {
        return text;
    }
    let mut cut = text.len() - CHECK_TAIL_BYTES;
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    text[cut..].to_string()
}

/// Decides how an attempt ended. Pure; the order matters: our own kills first (we know
/// why), then a structured quota report (so the next agent gets the task), then the
/// engine's OOM flag, then the agent's own result and exit code.
pub fn decide(
    stop: Option<Stop>,
    limits: RunLimits,
    oom_killed: bool,
    exit_code: Option<i64>,
    outcome: &AgentOutcome,
) -> (AttemptStatus, Option<String>) {
    if stop == Some(Stop::Cancel) {
        return (
            AttemptStatus::Cancelled,
            Some("cancelled; container killed".into()),
        );
    }
    if let Some(q) = &outcome.quota {
        let resets = q
            .resets_at
            .as_deref()
            .map(|r| format!(" (resets {r})"))
            .unwrap_or_default();
        return (
            AttemptStatus::Quota,
            Some(format!("usage limit: {}{resets}", q.message)),
        );
    }
    match stop {
        Some(Stop::Hopeless) => {
            let why = outcome
                .error
                .clone()
                .unwrap_or_else(|| "the agent reported an unrecoverable error".into());
            return (
                AttemptStatus::Failed,
                Some(format!("{why}; container stopped")),
            );
        }
        Some(Stop::Idle) if outcome.api_retry.is_some() => {
            let r = outcome.api_retry.as_ref().map_or_else(String::new, |r| {
                let status = r.status.map_or_else(String::new, |s| format!("{s} "));
                format!(
                    "{status}{}, the CLI's retry {} of {}",
                    r.error, r.attempt, r.max_retries
                )
            });
            return (
                AttemptStatus::Stalled,
                Some(format!(
                    "the model API kept failing ({r}): no progress for {}s; container killed",
                    limits.idle_timeout.as_secs()
                )),
            );
        }
        Some(Stop::Deadline) => {
            return (
                AttemptStatus::Timeout,
                Some(format!(
                    "deadline of {}s passed; container killed",
                    limits.deadline.as_secs()
                )),
            )
        }
        Some(Stop::Idle) => {
            return (
                AttemptStatus::Stalled,
                Some(format!(
                    "no output for {}s; container killed",
                    limits.idle_timeout.as_secs()
                )),
            )
        }
        Some(Stop::OutputCap) => {
            return (
                AttemptStatus::Failed,
                Some(format!(
                    "the agent printed more than {} bytes (container.max_output); container killed",
                    limits.max_output_bytes
                )),
            )
        }
        Some(Stop::WorkspaceCap(size)) => {
            return (
                AttemptStatus::Failed,
                Some(format!(
                    "the workspace grew to {size} bytes, over {} (container.max_workspace_size); container killed",
                    limits.max_workspace_bytes.unwrap_or(0)
                )),
            )
        }
        _ => {}
    }
    if oom_killed {
        return (
            AttemptStatus::Crash,
            Some("out of memory: the container hit its memory limit and was OOM-killed".into()),
        );
    }
    let code = exit_code.unwrap_or(-1);
    if outcome.completed && outcome.succeeded && code == 0 {
        return (AttemptStatus::Succeeded, None);
    }
    if !outcome.completed && !(0..128).contains(&code) {
        let why = if code >= 128 {
            format!("killed by signal {} (exit code {code})", code - 128)
        } else {
            "no exit code".to_string()
        };
        return (
            AttemptStatus::Crash,
            Some(format!("the agent died without a result: {why}")),
        );
    }
    let reason = if outcome.completed && outcome.succeeded {
        format!("the agent reported success but exited with code {code}")
    } else if let Some(err) = &outcome.error {
        format!("{err} (exit code {code})")
    } else if outcome.completed {
        format!("the agent reported failure (exit code {code})")
    } else {
        format!("the agent exited with code {code} without a result")
    };
    (AttemptStatus::Failed, Some(reason))
}

/// Line handling shared by `run_attempt` and `reattach`.
struct Follower<'a> {
    adapter: &'a dyn AgentAdapter,
    sink: &'a mut dyn EventSink,
    scrub: Scrub<'a>,
    outcome: AgentOutcome,
    /// Next seq to assign (counts every line of both streams).
    seq: u64,
    /// Lines below this seq are already stored (re-attach).
    skip: u64,
    recorded: u64,
    cut_lines: u64,
    pending: Vec<TaskEvent>,
    stdout_file: Option<BufWriter<File>>,
    stderr_file: Option<BufWriter<File>>,
    sink_error: Option<String>,
    /// Per stream: lines held back while they may end in the first part of a secret.
    held_stdout: StreamScrub<Option<usize>>,
    held_stderr: StreamScrub<Option<usize>>,
    /// The CLI's final report was seen: later lines are stored but not folded.
    final_seen: bool,
    lines_after_result: u64,
    /// Output bytes taken so far (line text as received, both streams).
    output_bytes: u64,
    max_output_bytes: u64,
    /// Set once `max_output_bytes` is passed; nothing more is stored.
    over_cap: bool,
    /// Lines that were progress (everything but the CLI retrying a failed API call).
    progress: u64,
}

impl Follower<'_> {
    /// Scrubs `line` together with its neighbours (a secret split across lines is masked
    /// on both sides) and handles whatever that releases.
    fn line(&mut self, stream: EventStream, line: Line) {
        if self.over_cap {
            return;
        }
        self.output_bytes += line.text.len() as u64 + 1;
        if self.output_bytes > self.max_output_bytes {
            self.over_cap = true;
            return;
        }
        let held = match stream {
            EventStream::Stdout => &mut self.held_stdout,
            EventStream::Stderr => &mut self.held_stderr,
        };
        let cut = line.cut;
        let Some(scrubber) = self.scrub.scrubber() else {
            let text = self.scrub.scrub_text(&line.text);
            return self.scrubbed_line(stream, text, cut);
        };
        for (text, cut) in held.push(scrubber, line.text, cut.is_some(), cut) {
            self.scrubbed_line(stream, text, cut);
        }
    }

    /// Releases the lines still held at the end of the streams.
    fn finish_lines(&mut self) {
        let Some(scrubber) = self.scrub.scrubber() else {
            return;
        };
        for (text, cut) in self.held_stdout.finish(scrubber) {
            self.scrubbed_line(EventStream::Stdout, text, cut);
        }
        for (text, cut) in self.held_stderr.finish(scrubber) {
            self.scrubbed_line(EventStream::Stderr, text, cut);
        }
    }

    fn scrubbed_line(&mut self, stream: EventStream, text: String, cut: Option<usize>) {
        let seq = self.seq;
        self.seq += 1;
        if cut.is_some() {
            self.cut_lines += 1;
        }
        let (kind, summary, data) = match (stream, cut) {
            (_, Some(total)) => (
                EventKind::Unknown,
                format!("line cut at {MAX_LINE_BYTES} of {total} bytes"),
                json!({"raw": text, "cut": true, "bytes": total}),
            ),
            (EventStream::Stdout, None) => {
                let c = self.adapter.classify(&text);
                if self.final_seen {
                    // Only the CLI's first report counts (see `AgentAdapter::is_final`).
                    self.lines_after_result += 1;
                } else {
                    self.adapter.observe(&mut self.outcome, &c);
                    self.final_seen = self.adapter.is_final(&c);
                }
                if self.outcome.api_retry.is_none() {
                    self.progress += 1;
                }
                (c.kind, c.summary, c.data)
            }
            // stderr is diagnostics, never protocol: it must not decide the outcome.
            (EventStream::Stderr, None) => {
                self.progress += 1;
                (
                    EventKind::Unknown,
                    format!("stderr: {}", first_chars(&text, 200)),
                    json!({ "raw": text }),
                )
            }
        };
        if seq < self.skip {
            return;
        }
        let file = match stream {
            EventStream::Stdout => &mut self.stdout_file,
            EventStream::Stderr => &mut self.stderr_file,
        };
        if let Some(f) = file {
            if let Err(e) = writeln!(f, "{text}") {
                tracing::warn!(error = %e, "cannot append to the transcript");
            }
        }
        self.pending.push(TaskEvent {
            seq,
            kind,
            stream,
            summary,
            data,
            at: Utc::now(),
        });
    }

    fn flush(&mut self) {
        for f in [&mut self.stdout_file, &mut self.stderr_file]
            .into_iter()
            .flatten()
        {
            let _ = f.flush();
        }
        if self.pending.is_empty() {
            return;
        }
        match self.sink.record(&self.pending) {
            Ok(()) => {
                self.recorded += self.pending.len() as u64;
                self.pending.clear();
                self.sink_error = None;
            }
            Err(e) => {
                tracing::warn!(error = %e, pending = self.pending.len(), "event sink failed; will retry");
                self.sink_error = Some(e);
            }
        }
    }
}

fn first_chars(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

fn open_append(path: &Path) -> Result<BufWriter<File>, RuntimeError> {
    if let Some(dir) = path.parent() {
        crate::private::create_dir(dir).map_err(|e| {
            RuntimeError::Io(format!(
                "cannot create transcript dir {}: {e}",
                dir.display()
            ))
        })?;
    }
    crate::private::open_append(path)
        .map(BufWriter::new)
        .map_err(|e| RuntimeError::Io(format!("cannot open transcript {}: {e}", path.display())))
}

#[allow(clippy::too_many_arguments)]
async fn follow_and_collect(
    rt: &dyn WorkerRuntime,
    id: &str,
    adapter: &dyn AgentAdapter,
    sink: &mut dyn EventSink,
    limits: RunLimits,
    deadline_at: tokio::time::Instant,
    started: Instant,
    transcript: Option<&TranscriptPaths>,
    scrub: Scrub<'_>,
    mut cancel: watch::Receiver<bool>,
    skip: u64,
    workspace: Option<PathBuf>,
) -> Result<AttemptExecution, RuntimeError> {
    let (stdout_file, stderr_file) = match transcript {
        Some(t) => (Some(open_append(&t.stdout)?), Some(open_append(&t.stderr)?)),
        None => (None, None),
    };
    let mut f = Follower {
        adapter,
        sink,
        scrub,
        outcome: AgentOutcome::default(),
        seq: 0,
        skip,
        recorded: 0,
        cut_lines: 0,
        pending: Vec::new(),
        stdout_file,
        stderr_file,
        sink_error: None,
        held_stdout: StreamScrub::default(),
        held_stderr: StreamScrub::default(),
        final_seen: false,
        lines_after_result: 0,
        output_bytes: 0,
        max_output_bytes: limits.max_output_bytes,
        over_cap: false,
        progress: 0,
    };
    let mut size_tick = tokio::time::interval(WORKSPACE_CHECK_EVERY);
    let size_cap = limits.max_workspace_bytes.zip(workspace);
    let mut out = LineSplitter::default();
    let mut err = LineSplitter::default();
    let mut logs = rt.logs(id, None);
    let mut idle_at = tokio::time::Instant::now() + limits.idle_timeout;
    let mut tick = tokio::time::interval(BATCH_INTERVAL);
    let mut stop: Option<Stop> = None;
    let mut drain_until: Option<tokio::time::Instant> = None;
    let mut cancel_open = true;
    if *cancel.borrow() {
        rt.kill(id).await?;
        stop = Some(Stop::Cancel);
        drain_until = Some(tokio::time::Instant::now() + DRAIN_AFTER_KILL);
    }
    loop {
        let running = stop.is_none();
        tokio::select! {
            chunk = logs.next() => match chunk {
                Some(Ok(c)) => {
                    let (splitter, stream) = match c.stream {
                        EventStream::Stdout => (&mut out, EventStream::Stdout),
                        EventStream::Stderr => (&mut err, EventStream::Stderr),
                    };
                    let progress = f.progress;
                    let lines = splitter.push(&c.bytes);
                    let whole = !lines.is_empty();
                    for line in lines {
                        f.line(stream, line);
                    }
                    // A CLI retrying a failing API call is not making progress; a partial
                    // line still is (it ends later).
                    if f.progress > progress || !whole {
                        idle_at = tokio::time::Instant::now() + limits.idle_timeout;
                    }
                    if running && f.outcome.hopeless {
                        stop = Some(Stop::Hopeless);
                    }
                    if f.pending.len() >= BATCH_EVENTS {
                        f.flush();
                    }
                    if f.over_cap && running {
                        stop = Some(Stop::OutputCap);
                    }
                }
                Some(Err(e)) => {
                    f.flush();
                    return Err(e);
                }
                None => break,
            },
            _ = tokio::time::sleep_until(deadline_at), if running => {
                stop = Some(Stop::Deadline);
            }
            _ = tokio::time::sleep_until(idle_at), if running => {
                stop = Some(Stop::Idle);
            }
            changed = cancel.changed(), if running && cancel_open => {
                match changed {
                    Ok(()) if *cancel.borrow() => stop = Some(Stop::Cancel),
                    Ok(()) => {}
                    Err(_) => cancel_open = false,
                }
            }
            _ = tokio::time::sleep_until(drain_until.unwrap_or_else(tokio::time::Instant::now)), if drain_until.is_some() => {
                tracing::warn!(container = id, "log stream did not end after the kill; collecting anyway");
                break;
            }
            _ = tick.tick() => f.flush(),
            _ = size_tick.tick(), if running && size_cap.is_some() => {
                if let Some((cap, path)) = &size_cap {
                    let path = path.clone();
                    let size = tokio::task::spawn_blocking(move || tree_size(&path))
                        .await
                        .unwrap_or(0);
                    if size > *cap {
                        stop = Some(Stop::WorkspaceCap(size));
                    }
                }
            }
        }
        if running && stop.is_some() {
            rt.kill(id).await?;
            drain_until = Some(tokio::time::Instant::now() + DRAIN_AFTER_KILL);
        }
    }
    if let Some(line) = out.finish() {
        f.line(EventStream::Stdout, line);
    }
    if let Some(line) = err.finish() {
        f.line(EventStream::Stderr, line);
    }
    f.finish_lines();
    f.flush();
    let exit_code = match tokio::time::timeout(DRAIN_AFTER_KILL, rt.wait(id)).await {
        Ok(Ok(code)) => Some(code),
        Ok(Err(e)) => return Err(e),
        Err(_) => None,
    };
    let info = rt.inspect(id).await?;
    let exit_code = exit_code.or(info.exit_code);
    if stop.is_none() {
        // The agent may have filled the disk after the last measurement.
        if let Some((cap, path)) = &size_cap {
            let path = path.clone();
            let size = tokio::task::spawn_blocking(move || tree_size(&path))
                .await
                .unwrap_or(0);
            if size > *cap {
                stop = Some(Stop::WorkspaceCap(size));
            }
        }
    }
    let mut warnings = Vec::new();
    if let Some(w) = f.outcome.clamp_cost(limits.max_cost_usd) {
        tracing::warn!(container = id, "{w}");
        warnings.push(w);
    }
    if f.lines_after_result > 0 {
        warnings.push(format!(
            "{} stdout line(s) after the CLI's final report were recorded but not counted",
            f.lines_after_result
        ));
    }
    let (status, reason) = decide(stop, limits, info.oom_killed, exit_code, &f.outcome);
    let duration = match (info.started_at, info.finished_at) {
        (Some(s), Some(e)) if e > s => (e - s).to_std().unwrap_or_else(|_| started.elapsed()),
        _ => started.elapsed(),
    };
    rt.remove(id).await?;
    Ok(AttemptExecution {
        container_id: id.to_string(),
        status,
        exit_code,
        outcome: f.outcome,
        reason,
        events: f.recorded,
        next_seq: f.seq,
        cut_lines: f.cut_lines,
        oom_killed: info.oom_killed,
        duration,
        sink_error: f.sink_error,
        lines_after_result: f.lines_after_result,
        warnings,
    })
}

/// Bytes of regular files below `path` (symlinks not followed, unreadable parts skipped).
/// Hard links count once per link: a cap is about what the agent made appear.
pub fn tree_size(path: &Path) -> u64 {
    let mut total = 0u64;
    let mut stack = vec![path.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if meta.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&p) {
                stack.extend(entries.flatten().map(|e| e.path()));
            }
        } else if meta.is_file() {
            // Allocated size: a sparse file of 1 TB holds no disk, a full one does.
            use std::os::unix::fs::MetadataExt;
            total = total.saturating_add(meta.blocks().saturating_mul(512));
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::QuotaHit;

    const LIMITS: RunLimits = RunLimits::new(Duration::from_secs(60), Duration::from_secs(10));

    fn outcome(completed: bool, succeeded: bool) -> AgentOutcome {
        AgentOutcome {
            completed,
            succeeded,
            ..Default::default()
        }
    }

    fn quota() -> AgentOutcome {
        AgentOutcome {
            completed: true,
            quota: Some(QuotaHit {
                message: "limit".into(),
                resets_at: Some("5am".into()),
                reset: None,
            }),
            ..Default::default()
        }
    }

    fn check(
        stop: Option<Stop>,
        oom: bool,
        code: Option<i64>,
        o: AgentOutcome,
        expected: AttemptStatus,
        reason_has: &str,
    ) {
        let (status, reason) = decide(stop, LIMITS, oom, code, &o);
        assert_eq!(status, expected, "{stop:?} oom={oom} code={code:?} {o:?}");
        let reason = reason.unwrap_or_default();
        assert!(
            reason.contains(reason_has),
            "reason {reason:?} lacks {reason_has:?}"
        );
    }

    #[test]
    fn success_needs_result_and_exit_zero() {
        check(
            None,
            false,
            Some(0),
            outcome(true, true),
            AttemptStatus::Succeeded,
            "",
        );
        check(
            None,
            false,
            Some(1),
            outcome(true, true),
            AttemptStatus::Failed,
            "exited with code 1",
        );
        check(
            None,
            false,
            Some(0),
            outcome(true, false),
            AttemptStatus::Failed,
            "reported failure",
        );
        check(
            None,
            false,
            Some(0),
            outcome(false, false),
            AttemptStatus::Failed,
            "without a result",
        );
    }

    #[test]
    fn a_refused_key_stops_the_attempt_as_an_auth_failure() {
        let o = AgentOutcome {
            error: Some("authentication failed: the model API answered 401".into()),
            failure_kind: Some(crate::agents::FailureKind::Auth),
            hopeless: true,
            ..Default::default()
        };
        check(
            Some(Stop::Hopeless),
            false,
            Some(137),
            o,
            AttemptStatus::Failed,
            "authentication failed: the model API answered 401",
        );
    }

    #[test]
    fn idle_while_the_cli_retries_names_the_api_failure() {
        let o = AgentOutcome {
            api_retry: Some(crate::agents::ApiRetry {
                attempt: 4,
                max_retries: 10,
                status: Some(500),
                error: "server_error".into(),
            }),
            ..Default::default()
        };
        check(
            Some(Stop::Idle),
            false,
            Some(137),
            o,
            AttemptStatus::Stalled,
            "the model API kept failing (500 server_error, the CLI's retry 4 of 10): no progress for 10s",
        );
    }

    #[test]
    fn kills_win() {
        check(
            Some(Stop::Cancel),
            false,
            Some(137),
            quota(),
            AttemptStatus::Cancelled,
            "cancelled",
        );
        check(
            Some(Stop::Deadline),
            false,
            Some(137),
            outcome(false, false),
            AttemptStatus::Timeout,
            "60s",
        );
        check(
            Some(Stop::Idle),
            false,
            Some(137),
            outcome(false, false),
            AttemptStatus::Stalled,
            "10s",
        );
    }

    #[test]
    fn quota_beats_timeouts_and_failures() {
        check(
            None,
            false,
            Some(1),
            quota(),
            AttemptStatus::Quota,
            "resets 5am",
        );
        check(
            Some(Stop::Idle),
            false,
            Some(137),
            quota(),
            AttemptStatus::Quota,
            "limit",
        );
    }

    #[test]
    fn oom_and_signals_are_crashes() {
        check(
            None,
            true,
            Some(137),
            outcome(false, false),
            AttemptStatus::Crash,
            "out of memory",
        );
        check(
            None,
            false,
            Some(137),
            outcome(false, false),
            AttemptStatus::Crash,
            "signal 9",
        );
        check(
            None,
            false,
            None,
            outcome(false, false),
            AttemptStatus::Crash,
            "no exit code",
        );
        check(
            None,
            false,
            Some(137),
            outcome(true, false),
            AttemptStatus::Failed,
            "137",
        );
    }

    #[test]
    fn adapter_error_is_the_reason() {
        let o = AgentOutcome {
            completed: true,
            error: Some("max turns".into()),
            ..Default::default()
        };
        check(
            None,
            false,
            Some(1),
            o,
            AttemptStatus::Failed,
            "max turns (exit code 1)",
        );
    }

    #[test]
    fn check_tail_is_bounded_scrubbed_and_line_aligned() {
        let no_scrub = Scrubber::new(["SECRET"]);
        assert_eq!(scrubbed_tail(b"ok SECRET\n", false, &no_scrub), "ok ***\n");
        let raw = format!("CRET partial\n{}", "x".repeat(100));
        // Split across the tail's lines: masked on both sides.
        assert_eq!(
            scrubbed_tail(b"a SEC\nRET b\n", false, &no_scrub),
            "a ***\n*** b\n"
        );
        assert_eq!(
            scrubbed_tail(raw.as_bytes(), true, &no_scrub),
            "x".repeat(100)
        );
        let big = "y".repeat(3 * CHECK_TAIL_BYTES);
        assert_eq!(
            scrubbed_tail(big.as_bytes(), false, &no_scrub).len(),
            CHECK_TAIL_BYTES
        );
    }

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
