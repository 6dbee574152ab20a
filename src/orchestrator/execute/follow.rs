//! Following one attempt's container: its output split into lines, each scrubbed BEFORE
//! anything stores it, stdout classified through the adapter (stderr is kept apart and never
//! feeds the outcome), events batched into the [`EventSink`] and the transcript files; and
//! the kills: deadline, idle, cancel, output and workspace caps, a hopeless stream. Ends by
//! collecting the exit code and OOM flag and removing the container.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::json;

use super::policy::{decide, tree_size, Stop, WORKSPACE_CHECK_EVERY};
use super::sinks::{EventSink, Scrub};
use super::{AgentRun, AttemptExecution};
use crate::agents::scrub::StreamScrub;
use crate::agents::{AgentAdapter, AgentOutcome};
use crate::domain::{EventKind, EventStream, TaskEvent};
use crate::runtime::stream::{Line, LineSplitter, MAX_LINE_BYTES};
use crate::runtime::RuntimeError;

/// Flush the pending batch to the sink at this many events …
const BATCH_EVENTS: usize = 50;
/// … or at least this often.
const BATCH_INTERVAL: Duration = Duration::from_millis(200);
/// After a kill, how long the log stream may take to end before we stop waiting.
pub(super) const DRAIN_AFTER_KILL: Duration = Duration::from_secs(10);

/// Line handling shared by `run_attempt` and `reattach`.
struct Follower<'a> {
    adapter: &'a dyn AgentAdapter,
    sink: &'a mut dyn EventSink,
    scrub: Scrub<'a>,
    /// Stamps each event.
    clock: crate::orchestrator::Clock,
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
    /// The sink was told the follower handles new output (issue 24); flush at once after
    /// the line that raised it, so the window is short.
    raised: bool,
    flush_now: bool,
}

impl Follower<'_> {
    /// Scrubs `line` together with its neighbours (a secret split across lines is masked
    /// on both sides) and handles whatever that releases.
    fn line(&mut self, stream: EventStream, line: Line) {
        if self.over_cap {
            return;
        }
        if !self.raised && self.seq >= self.skip {
            self.raised = true;
            self.flush_now = true;
            self.sink.handling();
            // Tests: a line that kills the daemon while it handles it.
            crate::failpoint::hit("agent-output");
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
                // The same fold as `polyphony replay`: only the CLI's first report counts.
                let (c, folded) = crate::agents::fold(
                    self.adapter,
                    &mut self.outcome,
                    &mut self.final_seen,
                    &text,
                );
                if !folded {
                    self.lines_after_result += 1;
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
        // What the line decodes to is scrubbed again: a value the adapter pieced together
        // (a summary of several blocks, a re-serialised `data`) never reaches the store
        // in a spelling the raw line did not show.
        let summary = self.scrub_decoded(&summary);
        let mut data = data;
        scrub_strings(&mut data, &|s| self.scrub_decoded(s));
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
            at: (self.clock)(),
        });
    }

    /// One decoded string scrubbed (a value split by a decoded line break too).
    fn scrub_decoded(&self, text: &str) -> String {
        match self.scrub.scrubber() {
            Some(s) => s.scrub_line(text).into_owned(),
            None => self.scrub.scrub_text(text),
        }
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
        match self.sink.record(&self.pending, &self.outcome) {
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

/// Every string of `value` (object keys included) passed through `scrub`.
fn scrub_strings(value: &mut serde_json::Value, scrub: &dyn Fn(&str) -> String) {
    use serde_json::Value;
    match value {
        Value::String(s) => {
            let clean = scrub(s);
            if clean != *s {
                *s = clean;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| scrub_strings(v, scrub)),
        Value::Object(map) => {
            let dirty: Vec<String> = map.keys().filter(|k| scrub(k) != **k).cloned().collect();
            for key in dirty {
                if let Some(v) = map.remove(&key) {
                    map.insert(scrub(&key), v);
                }
            }
            map.values_mut().for_each(|v| scrub_strings(v, scrub));
        }
        _ => {}
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

/// The container [`follow_and_collect`] follows, and where following it starts.
pub(super) struct Followed<'a> {
    pub id: &'a str,
    /// When the container started: the duration falls back to the time since.
    pub started: Instant,
    /// When the deadline kill falls.
    pub deadline_at: tokio::time::Instant,
    /// Lines below this seq are already stored by an earlier follower (re-attach).
    pub skip: u64,
    /// The host path bound at `/workspace`, watched for the workspace cap.
    pub workspace: Option<PathBuf>,
}

pub(super) async fn follow_and_collect(
    run: AgentRun<'_>,
    followed: Followed<'_>,
) -> Result<AttemptExecution, RuntimeError> {
    let AgentRun {
        runtime: rt,
        adapter,
        sink,
        limits,
        transcript,
        scrub,
        mut cancel,
        clock,
        exited,
    } = run;
    let Followed {
        id,
        started,
        deadline_at,
        skip,
        workspace,
    } = followed;
    let (stdout_file, stderr_file) = match transcript {
        Some(t) => (Some(open_append(&t.stdout)?), Some(open_append(&t.stderr)?)),
        None => (None, None),
    };
    let mut f = Follower {
        adapter,
        sink,
        scrub,
        clock,
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
        raised: false,
        flush_now: false,
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
                    if f.pending.len() >= BATCH_EVENTS || (f.flush_now && !f.pending.is_empty()) {
                        f.flush_now = false;
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
    // The output ended: the process is gone (or killed and drained).
    if let Some(exited) = exited {
        let _ = exited.send(());
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
    let mut info = rt.inspect(id).await?;
    let exit_code = exit_code.or(info.exit_code);
    // The engine learns of an OOM kill from a separate event, which under load can come
    // after the exit: a SIGKILL (137) under a memory limit with no OOM mark yet is read
    // again for up to a second before it is called a plain crash.
    if stop.is_none()
        && exit_code == Some(137)
        && !info.oom_killed
        && info.memory_bytes.is_some_and(|m| m > 0)
    {
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            info = rt.inspect(id).await?;
            if info.oom_killed {
                break;
            }
        }
    }
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
