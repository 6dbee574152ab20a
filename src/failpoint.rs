//! Test-only crash injection (issue 19): `POLYPHONY_FAILPOINT=name` (or `name@N`, the Nth
//! time that point is reached) makes the process kill itself with SIGKILL at the named
//! point, exactly as `kill -9` from outside would: no destructor, no flush, no cleanup.
//!
//! Compiled in, inert unless the variable is set: the variable is read once, and an unset
//! variable costs one atomic load per point. Points are named after the window they
//! expose (`claim-labels`, `container-created`, `agent-output`, `commit-tree`, `failed`,
//! `blocked-report`, `block-labels`, `land-pr`, `land-comment`, `land-labels`,
//! `followup-reply`, `egress-up`); `tests/it/e2e.rs` has one test per crash window and a seeded chaos
//! test that kills at random points and moments.
//!
//! Must not: be set by anything but a test or a person reproducing a crash.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// The variable naming the point to crash at.
pub const ENV: &str = "POLYPHONY_FAILPOINT";

/// The armed point and on which hit it fires.
struct Armed {
    name: String,
    nth: u32,
    hits: AtomicU32,
}

fn armed() -> Option<&'static Armed> {
    static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let value = std::env::var(ENV).ok()?;
            let value = value.trim();
            if value.is_empty() {
                return None;
            }
            let (name, nth) = match value.split_once('@') {
                Some((name, n)) => (name, n.trim().parse().unwrap_or(1).max(1)),
                None => (value, 1),
            };
            Some(Armed {
                name: name.trim().to_string(),
                nth,
                hits: AtomicU32::new(0),
            })
        })
        .as_ref()
}

/// Crashes the process here if `name` is the armed point and this is its Nth hit.
pub fn hit(name: &str) {
    let Some(armed) = armed() else { return };
    if armed.name != name {
        return;
    }
    let n = armed.hits.fetch_add(1, Ordering::SeqCst) + 1;
    if n == armed.nth {
        eprintln!("polyphony: failpoint `{name}` (hit {n}): killing the process");
        // SAFETY: raise(2) on this process with a signal that cannot be caught.
        unsafe {
            libc::raise(libc::SIGKILL);
        }
        std::process::abort();
    }
}
