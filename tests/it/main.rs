//! The integration tests, one test binary (`cargo test --test it`). Each file under
//! `tests/it/` is a module here instead of a crate of its own: every test binary links the
//! whole crate (~48 MB, 10–30 s each on two cores), and one binary lets the tests that wait
//! on Docker overlap instead of running file after file.
//!
//! A test in this process shares it with all the others: process-global state (env vars,
//! the current dir, statics such as the test image's `OnceCell`) must be unique per test or
//! safe to share. `tests/queue_health.rs` stays a binary of its own for that reason: a
//! damaged database is remembered process-wide (`polyphony::store::damaged`) and would stop
//! the pipeline tests here from recording. An inherent `impl` on a `support` type is
//! crate-wide here: name such helpers after their module (`Home::for_landing`), not `new`.
//!
//! `support` lives in `tests/support/` (not a test target of its own: Cargo only
//! discovers `tests/*.rs` and `tests/*/main.rs`), shared with `tests/queue_health.rs`.

#[path = "../support/mod.rs"]
mod support;

mod adapters;
mod bad_input;
mod cli;
mod dashboard_browser;
mod e2e;
mod egress;
mod fleet;
mod fleet_pg;
mod gateway;
mod github;
mod github_pulls;
mod http;
mod inspect;
mod landing;
mod landing_own;
mod orchestrator;
mod quota;
mod real_cli;
mod retention;
mod routing_explain;
mod routing_sample;
mod runtime;
mod shepherd;
mod store;
mod store_contract;
mod workspace;
