//! The pure domain model: tasks, the task state machine, identities, agent profiles,
//! run specifications, run results and task events (spec §3, §4, §9).
//!
//! Architecture Invariant: nothing in `domain` touches disk, clock, network or Docker.
//! Callers pass `now` in. Only `domain::state` decides which state transitions are legal.

pub mod agent;
pub mod event;
pub mod generation;
pub mod identity;
pub mod quota;
pub mod result;
pub mod run_spec;
pub mod state;
pub mod task;
pub mod terminal;
pub mod text;
pub mod when;

pub use agent::{
    AgentProfile, AgentType, EgressMode, EgressProfile, EgressSpec, Invocation, NetworkMode,
    ResourceLimits,
};
pub use event::{EventKind, EventStream, TaskEvent};
pub use identity::Identity;
pub use quota::{AgentQuota, AgentReset, QuotaWait};
pub use result::{AttemptStatus, CheckEvidence, RunResult, TokenUsage};
pub use run_spec::{EnvVar, RunSpec, VerifyCommand, VolumeMount, CREDENTIAL_STAGING_DIR};
pub use state::{can_transition, transition, InvalidTransition, TaskState};
pub use task::{Risk, Scope, SourceKind, Task, TaskType};
