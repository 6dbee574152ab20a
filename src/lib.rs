//! Polyphony: a container-isolated multi-agent orchestrator.
//!
//! Layout (docs/ARCHITECTURE.md has the codemap and the invariants):
//! - `domain`: tasks, the state machine, identities, profiles, run specs, results, events (pure)
//! - `config`: YAML files under `$POLYPHONY_HOME` -> validated typed config
//! - `store`: SQLite tasks, attempts, transitions, events, atomic claims
//! - `routing`: complexity scoring, rule evaluation, RunSpec building (pure)
//! - `identity`: named credential bundles -> mounts and env overlay (pure)
//! - `workspace`: mirror cache, clone per attempt, branch, commit, push
//! - `runtime`: the `WorkerRuntime` trait and its Docker implementation
//! - `agents`: one adapter per agent CLI: argv, line classification, outcome (pure)
//! - `sources`: work intake (local queue, GitHub issues) and reporting back
//! - `orchestrator`: attempt pipeline, proof of work, landing, supervisor loop
//! - `ops`: operations on a home: `cleanup` (leftover containers, workspaces, locks),
//!   `doctor` (environment checks), `report` (readable renderings of stored events)
//! - `http`: the daemon's JSON API, live event stream and dashboard (`--listen`)
//! - `metrics`: the process's Prometheus metrics (`/metrics`)
//! - `error`: errors several layers name (`UsageError`: exit 2)
//! - `home`: the home's own files: the daemon lock (one daemon per home)
//! - `private`: owner-only permissions of the home, the store and transcripts
//! - `cli`: one module per verb; no business logic
//! - `failpoint`: test-only crash injection at named points (`POLYPHONY_FAILPOINT`)

pub mod agents;
pub mod cli;
pub mod config;
pub mod demo;
pub mod domain;
pub mod egress;
pub mod error;
pub mod failpoint;
pub mod gateway;
pub mod home;
pub mod http;
pub mod identity;
pub mod identity_policy;
pub mod metrics;
pub mod ops;
pub mod orchestrator;
pub mod private;
pub mod routing;
pub mod runtime;
pub mod scripted_model;
pub mod scripted_openai;
pub mod scripted_server;
pub mod sources;
pub mod store;
pub mod workspace;
