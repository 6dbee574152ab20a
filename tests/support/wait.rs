//! Waiting on a condition instead of sleeping a fixed time: a test states what it waits
//! for and how long that may take at most; it goes on as soon as the condition holds.

use std::time::{Duration, Instant};

/// How often a condition is checked.
pub const POLL: Duration = Duration::from_millis(100);

/// Checks `cond` every [`POLL`] until it holds; panics after `limit` with `what` and the
/// text of `context` (a log, say), read only then.
pub async fn wait_until(
    limit: Duration,
    what: &str,
    context: impl Fn() -> String,
    mut cond: impl FnMut() -> bool,
) {
    let started = Instant::now();
    while !cond() {
        if started.elapsed() > limit {
            panic!("{what}: not within {limit:?}\n{}", context());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// [`wait_until`] for a blocking (non-async) test.
pub fn wait_until_blocking(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let started = Instant::now();
    while !cond() {
        assert!(started.elapsed() <= limit, "{what}: not within {limit:?}");
        std::thread::sleep(POLL);
    }
}
