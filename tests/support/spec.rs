//! Value builders for what the store records: a local task, a run spec, an event. Tests
//! change the fields they are about with struct update syntax, so a field added to a
//! domain type is filled in here once.

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use polyphony::domain::{
    AgentType, EventKind, EventStream, NetworkMode, ResourceLimits, RunSpec, SourceKind, Task,
    TaskEvent, TaskState,
};

/// The local task `id` ("Fix ID" on `/srv/repo`) discovered at `at`.
pub fn local_task(id: &str, at: DateTime<Utc>) -> Task {
    Task::new(
        id,
        SourceKind::Local,
        format!("local:{id}"),
        "/srv/repo",
        format!("Fix {id}"),
        at,
    )
}

/// Attempt `attempt` of `task_id` as claude under the identity `personal`, in
/// `/ws/TASK/ATTEMPT` on the branch `polyphony/TASK-aATTEMPT`, with the default rule, image
/// and limits, no network and no checks.
pub fn run_spec(task_id: &str, attempt: u32) -> RunSpec {
    RunSpec {
        task_id: task_id.into(),
        attempt,
        agent: "claude".into(),
        agent_type: AgentType::Claude,
        cli_command: "claude".into(),
        fallback: vec![],
        identity: "personal".into(),
        workspace: PathBuf::from(format!("/ws/{task_id}/{attempt}")),
        branch: format!("polyphony/{task_id}-a{attempt}"),
        base_ref: None,
        image: "polyphony-worker:latest".into(),
        model: None,
        max_turns: None,
        args: Vec::new(),
        env_overlay: vec![],
        volume_mounts: vec![],
        deadline_seconds: 1800,
        idle_timeout_seconds: 300,
        network: NetworkMode::None,
        egress: Default::default(),
        limits: ResourceLimits::default(),
        verification: vec![],
        verify_image: "polyphony-worker:latest".into(),
        rule: "default".into(),
    }
}

/// An assistant message event `seq` on stdout, now, carrying `data`.
pub fn message_event(seq: u64, summary: &str, data: serde_json::Value) -> TaskEvent {
    TaskEvent {
        seq,
        kind: EventKind::Message,
        stream: EventStream::Stdout,
        summary: summary.into(),
        data,
        at: Utc::now(),
    }
}

/// The shortest legal path of transitions from DISCOVERED to `state`.
pub fn path_to(state: TaskState) -> &'static [TaskState] {
    use TaskState::*;
    match state {
        Discovered => &[],
        Claimed => &[Claimed],
        Routed => &[Claimed, Routed],
        Provisioned => &[Claimed, Routed, Provisioned],
        Running => &[Claimed, Routed, Provisioned, Running],
        Verifying => &[Claimed, Routed, Provisioned, Running, Verifying],
        Landed => &[Claimed, Routed, Provisioned, Running, Verifying, Landed],
        Failed => &[Claimed, Failed],
        Blocked => &[Claimed, Failed, Blocked],
        Cancelled => &[Cancelled],
    }
}
