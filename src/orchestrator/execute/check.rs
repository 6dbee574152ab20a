//! One proof-of-work command in a verification container: run to completion or its
//! timeout, keep the scrubbed tail of the combined output, always remove the container.

use std::time::{Duration, Instant};

use futures_util::StreamExt;

use super::follow::DRAIN_AFTER_KILL;
use super::sinks::Scrub;
use chrono::{DateTime, Utc};

use super::with_deadline;
use crate::runtime::container_spec::ContainerSpec;
use crate::runtime::{RuntimeError, WorkerRuntime};

/// Bytes of combined output a check keeps.
const CHECK_TAIL_BYTES: usize = 4096;

/// The result of one proof-of-work command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckResult {
    pub exit_code: Option<i64>,
    /// The last ~4 KB of combined output, scrubbed, starting at a line boundary.
    pub output_tail: String,
    pub duration: Duration,
    pub timed_out: bool,
}

/// Runs `spec` (a `/bin/sh -c CMD` verification container) to completion or `timeout`
/// and keeps the scrubbed tail of its output. The container is always removed.
pub async fn run_check(
    rt: &dyn WorkerRuntime,
    spec: &ContainerSpec,
    timeout: Duration,
    scrub: Scrub<'_>,
    now: DateTime<Utc>,
) -> Result<CheckResult, RuntimeError> {
    let spec = &with_deadline(spec, timeout, now);
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
) -> Result<CheckResult, RuntimeError> {
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
    Ok(CheckResult {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::scrub::Scrubber;

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
}
