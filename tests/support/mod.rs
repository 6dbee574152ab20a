//! Shared test support, split by concern. Each integration test binary declares `mod support;`
//! and uses what it needs; unused helpers are type-checked but not built into its code.
//!
//! - [`git`]: git as a hermetic test author, files written with their parents.
//! - [`docker`]: the engine check (SKIPPED, or a failure under CI), the offline test image
//!   built once per binary, a home's containers by label and their removal.
//! - [`spec`]: value builders for tasks, run specs and events as the store records them.
//! - [`home`]: a Polyphony home in a temp dir driven through the built binary.
//! - [`tmpfs`]: a tiny mounted filesystem for full-disk tests (SKIPPED without the right).
//! - [`wait`]: waiting on a condition with a deadline instead of sleeping a fixed time.
//! - [`fake_github`]: the stateful fake GitHub API.
#![allow(dead_code)]

pub mod cdp;
pub mod console_seed;
pub mod docker;
pub mod fake_github;
pub mod git;
pub mod home;
pub mod spec;
pub mod tmpfs;
pub mod wait;
