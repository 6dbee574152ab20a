//! A home with a day's worth of everything the console shows, written through the store's
//! ordinary calls: a landed task whose pull request has failing checks and changes
//! requested, a running attempt, a BLOCKED task, a task parked on claude@demo's usage
//! limit, one in backoff, one waiting, and 30 days of history with known costs for the
//! pictures. Used by the browser tests and by `examples/console_screens.rs` (the README's
//! screenshots), so the pictures in docs/ are the ones the tests check.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use chrono::{DateTime, Duration, Utc};
use polyphony::domain::{
    AgentQuota, AgentReset, AgentType, AttemptStatus, CheckEvidence, EventKind, EventStream,
    NetworkMode, QuotaWait, ResourceLimits, RunResult, RunSpec, SourceKind, Task, TaskEvent,
    TaskState, TokenUsage,
};
use polyphony::store::{PullLook, PullRecord, Store};

/// The identities the seeded home has, with their daily ceilings.
pub fn identities() -> Vec<(String, Option<f64>)> {
    vec![("demo".into(), Some(5.0)), ("work".into(), Some(20.0))]
}

pub fn spec(task: &str, attempt: u32, agent: &str, identity: &str) -> RunSpec {
    RunSpec {
        task_id: task.into(),
        attempt,
        agent: agent.into(),
        agent_type: if agent == "codex" {
            AgentType::Codex
        } else {
            AgentType::Claude
        },
        cli_command: agent.into(),
        fallback: vec![],
        identity: identity.into(),
        workspace: PathBuf::from(format!("/nonexistent/ws/{task}/{attempt}")),
        branch: format!("polyphony/{task}-a{attempt}"),
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

pub fn task(store: &Store, id: &str, title: &str, at: DateTime<Utc>) {
    let mut t = Task::new(
        id,
        SourceKind::Local,
        format!("local:{id}"),
        "/srv/calc",
        title,
        at,
    );
    t.created_at = at;
    store.insert_task(&t).unwrap();
}

pub fn walk(store: &Store, id: &str, to: &[TaskState], reason: &str, at: DateTime<Utc>) {
    for s in to {
        let from = store.get_task(id).unwrap().unwrap().state;
        store.transition(id, from, *s, reason, at).unwrap();
    }
}

/// An attempt from `at` lasting `secs`, ending `status` at `cost`.
#[allow(clippy::too_many_arguments)]
pub fn attempt(
    store: &Store,
    id: &str,
    n: u32,
    agent: &str,
    identity: &str,
    at: DateTime<Utc>,
    secs: f64,
    status: AttemptStatus,
    cost: f64,
    evidence: &[CheckEvidence],
) {
    attempt_in(
        store, id, n, agent, identity, at, secs, status, cost, evidence, None,
    )
}

/// [`attempt`] with its workspace at `workspace`.
#[allow(clippy::too_many_arguments)]
pub fn attempt_in(
    store: &Store,
    id: &str,
    n: u32,
    agent: &str,
    identity: &str,
    at: DateTime<Utc>,
    secs: f64,
    status: AttemptStatus,
    cost: f64,
    evidence: &[CheckEvidence],
    workspace: Option<&Path>,
) {
    let mut spec = spec(id, n, agent, identity);
    if let Some(w) = workspace {
        spec.workspace = w.to_path_buf();
    }
    store.start_attempt(&spec, at).unwrap();
    store
        .finish_attempt(
            &RunResult {
                task_id: id.into(),
                attempt: n,
                agent: agent.into(),
                status,
                turns: 6,
                duration_seconds: secs,
                cost_usd: Some(cost),
                tokens: TokenUsage {
                    input: 18_000,
                    output: 2_400,
                    cached_input: 0,
                },
                exit_code: Some(if status == AttemptStatus::Succeeded {
                    0
                } else {
                    1
                }),
                final_message: None,
                reason: (status != AttemptStatus::Succeeded)
                    .then(|| "verification failed: `pytest -q` exited 1".to_string()),
                events: 10,
                artifacts: vec![],
            },
            evidence,
            at + Duration::milliseconds((secs * 1000.0) as i64),
        )
        .unwrap();
}

pub fn assistant(seq: u64, id: &str, text: &str, input: u64, output: u64) -> TaskEvent {
    TaskEvent {
        seq,
        kind: EventKind::Message,
        stream: EventStream::Stdout,
        summary: format!("assistant: {text}"),
        data: serde_json::json!({"type": "assistant", "message": {"id": id, "role": "assistant",
            "content": [{"type": "text", "text": text}],
            "usage": {"input_tokens": input, "output_tokens": output}}}),
        at: Utc::now(),
    }
}

fn evidence(passed: bool) -> Vec<CheckEvidence> {
    vec![CheckEvidence {
        name: "test".into(),
        command: "pytest -q".into(),
        passed,
        exit_code: Some(if passed { 0 } else { 1 }),
        duration_ms: 2300,
        output_tail: if passed {
            "14 passed in 2.1s".into()
        } else {
            "FAILED tests/test_parse.py::test_negative - assert -2 == 2".into()
        },
    }]
}

/// What the seed put where (the numbers the pictures must show).
pub struct Seeded {
    /// demo's cost on each of the last 7 days, oldest first.
    pub demo_cost_7: Vec<f64>,
    pub landed_today: u32,
    pub blocked_today: u32,
    /// When local-4's usage-limit wait ends.
    pub parked_until: DateTime<Utc>,
}

/// A git repository at `dir` whose last commit changes `calc/parse.py`; its SHA.
fn landed_repo(dir: &Path) -> String {
    let repo = git2::Repository::init(dir).unwrap();
    let sig = git2::Signature::now("polyphony", "polyphony@example.com").unwrap();
    let mut parent: Option<git2::Oid> = None;
    let versions = [
        ("calc: parse integers", "def parse(text):\n    return int(text)\n"),
        (
            "Fix the parser's negative numbers (local-1)",
            "def parse(text):\n    text = text.strip()\n    if text.startswith(\"-\"):\n        return -int(text[1:])\n    return int(text)\n",
        ),
    ];
    for (message, body) in versions {
        std::fs::create_dir_all(dir.join("calc")).unwrap();
        std::fs::write(dir.join("calc/parse.py"), body).unwrap();
        let mut index = repo.index().unwrap();
        index.add_path(Path::new("calc/parse.py")).unwrap();
        index.write().unwrap();
        let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
        let parents: Vec<git2::Commit> = parent
            .iter()
            .map(|p| repo.find_commit(*p).unwrap())
            .collect();
        let refs: Vec<&git2::Commit> = parents.iter().collect();
        parent = Some(
            repo.commit(Some("HEAD"), &sig, &sig, message, &tree, &refs)
                .unwrap(),
        );
    }
    parent.unwrap().to_string()
}

/// Seeds `store` as of `now`; workspaces that must exist go under `dir`.
pub fn seed(store: &Store, now: DateTime<Utc>, dir: &Path) -> Seeded {
    use TaskState::*;
    let day = |back: i64, hour: u32| {
        let d = (now - Duration::days(back)).date_naive();
        d.and_hms_opt(hour, 0, 0)
            .unwrap()
            .and_utc()
            .min(now - Duration::minutes(30))
    };
    // History: one landed task per day on the last 6 days (demo, claude), and on days 2
    // and 4 a second one under `work` with codex; one blocked on day 3.
    let mut demo_cost_7 = vec![0.0; 7];
    let today = now.date_naive();
    let slot = |at: DateTime<Utc>| 6 - (today - at.date_naive()).num_days() as usize;
    for back in 1..=6i64 {
        let id = format!("hist-{back}");
        let at = day(back, 9);
        task(
            store,
            &id,
            &format!("Historic change {back}"),
            at - Duration::minutes(3 * back),
        );
        walk(
            store,
            &id,
            &[Claimed, Routed, Provisioned, Running],
            "seed",
            at,
        );
        let cost = 0.40 + 0.10 * back as f64;
        attempt(
            store,
            &id,
            1,
            "claude",
            "demo",
            at,
            180.0 + 20.0 * back as f64,
            AttemptStatus::Succeeded,
            cost,
            &evidence(true),
        );
        walk(
            store,
            &id,
            &[Verifying, Landed],
            "landed",
            at + Duration::minutes(5),
        );
        demo_cost_7[slot(at)] += cost;
        if back % 2 == 0 {
            let id = format!("work-{back}");
            task(
                store,
                &id,
                &format!("Work item {back}"),
                at - Duration::minutes(10),
            );
            walk(
                store,
                &id,
                &[Claimed, Routed, Provisioned, Running],
                "seed",
                at,
            );
            attempt(
                store,
                &id,
                1,
                "codex",
                "work",
                at,
                95.0,
                AttemptStatus::Succeeded,
                1.5,
                &evidence(true),
            );
            walk(
                store,
                &id,
                &[Verifying, Landed],
                "landed",
                at + Duration::minutes(3),
            );
        }
    }
    let at = day(3, 11);
    task(
        store,
        "hist-b",
        "Flaky migration",
        at - Duration::minutes(1),
    );
    walk(
        store,
        "hist-b",
        &[Claimed, Routed, Provisioned, Running],
        "seed",
        at,
    );
    attempt(
        store,
        "hist-b",
        1,
        "codex",
        "demo",
        at,
        400.0,
        AttemptStatus::Failed,
        0.25,
        &evidence(false),
    );
    walk(
        store,
        "hist-b",
        &[Failed, Blocked],
        "verification failed 3 times",
        at + Duration::minutes(8),
    );
    demo_cost_7[slot(at)] += 0.25;

    // Today. local-1 landed this morning; its pull request has failing checks and changes
    // requested.
    let t0 = now - Duration::minutes(25);
    task(
        store,
        "local-1",
        "Fix the parser's negative numbers",
        t0 - Duration::minutes(2),
    );
    walk(
        store,
        "local-1",
        &[Claimed, Routed, Provisioned, Running],
        "seed",
        t0,
    );
    let ws = dir.join("ws-local-1");
    let sha = landed_repo(&ws);
    attempt_in(
        store,
        "local-1",
        1,
        "claude",
        "demo",
        t0,
        212.0,
        AttemptStatus::Succeeded,
        0.84,
        &evidence(true),
        Some(&ws),
    );
    store
        .append_events(
            "local-1",
            1,
            &[
                assistant(0, "m1", "Reading calc/parse.py", 3900, 180),
                assistant(
                    1,
                    "m2",
                    "A leading minus sign is read as part of the number",
                    4400,
                    260,
                ),
                assistant(
                    2,
                    "m3",
                    "Editing calc/parse.py: negate after a leading '-'",
                    5200,
                    480,
                ),
                assistant(3, "m4", "Ran pytest -q: 14 passed", 6100, 120),
                TaskEvent {
                    seq: 4,
                    kind: EventKind::Egress,
                    stream: EventStream::Stdout,
                    summary: "egress refused pypi.org:443 (not in the profile's allowlist): add `pypi.org` to egress.allow".into(),
                    data: serde_json::json!({"host": "pypi.org", "port": 443, "outcome": "refused"}),
                    at: Utc::now(),
                },
            ],
        )
        .unwrap();
    walk(
        store,
        "local-1",
        &[Verifying, Landed],
        "landed: pushed and opened a pull request",
        t0 + Duration::minutes(4),
    );
    store
        .set_attempt_landing(
            "local-1",
            1,
            &sha,
            "polyphony/local-1-a1",
            Some("https://github.com/octo/calc/pull/12"),
            t0 + Duration::minutes(4),
        )
        .unwrap();
    store
        .record_pull(&PullRecord::opened(
            "local-1",
            "octo/calc",
            12,
            "polyphony/local-1-a1",
            "main",
            &sha,
            t0 + Duration::minutes(4),
        ))
        .unwrap();
    store
        .update_pull(
            "local-1",
            &PullLook {
                head_sha: sha.clone(),
                state: "open".into(),
                checks: Some("failing".into()),
                review: Some("changes_requested".into()),
                mergeable: Some("yes".into()),
                watching: true,
            },
            now - Duration::minutes(5),
        )
        .unwrap();
    demo_cost_7[slot(t0)] += 0.84;

    // local-3: BLOCKED after three failed attempts.
    let t3 = now - Duration::minutes(50);
    task(
        store,
        "local-3",
        "Add a --precision flag",
        t3 - Duration::minutes(1),
    );
    for n in 1..=3u32 {
        let at = t3 + Duration::minutes(6 * (n as i64 - 1));
        walk(
            store,
            "local-3",
            &[Claimed, Routed, Provisioned, Running],
            "seed",
            at,
        );
        attempt(
            store,
            "local-3",
            n,
            "codex",
            "demo",
            at,
            140.0,
            AttemptStatus::Failed,
            0.30,
            &evidence(false),
        );
        walk(
            store,
            "local-3",
            &[Failed],
            "verification failed: `pytest -q` exited 1 (tests/test_parse.py::test_negative)",
            at + Duration::minutes(3),
        );
        demo_cost_7[slot(at)] += 0.30;
    }
    walk(
        store,
        "local-3",
        &[Blocked],
        "verification failed 3 times: `pytest -q` exited 1 (tests/test_parse.py::test_negative)",
        t3 + Duration::minutes(16),
    );

    // local-4: parked on claude@demo's usage limit, which resets in 52 minutes.
    // The store keeps microseconds.
    let parked_until =
        chrono::SubsecRound::trunc_subsecs(now + Duration::minutes(52) + Duration::seconds(20), 6);
    let t4 = now - Duration::minutes(68);
    task(
        store,
        "local-4",
        "Document the CLI flags",
        t4 - Duration::minutes(1),
    );
    walk(
        store,
        "local-4",
        &[Claimed, Routed, Provisioned, Running],
        "seed",
        t4,
    );
    attempt(
        store,
        "local-4",
        1,
        "claude",
        "demo",
        t4,
        30.0,
        AttemptStatus::Quota,
        0.05,
        &[],
    );
    walk(
        store,
        "local-4",
        &[Failed],
        "claude@demo hit its usage limit",
        t4 + Duration::minutes(1),
    );
    store.set_retry("local-4", 0, Some(parked_until)).unwrap();
    store
        .update_quota("demo", "claude", |_| AgentQuota {
            identity: "demo".into(),
            agent: "claude".into(),
            resets_at: parked_until,
            reported: true,
            message: "Claude AI usage limit reached".into(),
            task_id: Some("local-4".into()),
            attempt: Some(1),
            hit_at: t4 + Duration::minutes(1),
        })
        .unwrap();
    store
        .set_quota_wait(&QuotaWait {
            task_id: "local-4".into(),
            until: parked_until,
            agent: "claude".into(),
            identity: "demo".into(),
            resets: vec![AgentReset {
                agent: "claude".into(),
                identity: "demo".into(),
                resets_at: parked_until,
            }],
            parked_at: t4 + Duration::minutes(1),
        })
        .unwrap();
    demo_cost_7[slot(t4)] += 0.05;

    // local-5: one failure, retrying in 2 minutes.
    let t5 = now - Duration::minutes(9);
    task(
        store,
        "local-5",
        "Speed up tokenizer",
        t5 - Duration::minutes(1),
    );
    walk(
        store,
        "local-5",
        &[Claimed, Routed, Provisioned, Running],
        "seed",
        t5,
    );
    attempt(
        store,
        "local-5",
        1,
        "claude",
        "work",
        t5,
        260.0,
        AttemptStatus::Failed,
        0.61,
        &evidence(false),
    );
    walk(
        store,
        "local-5",
        &[Failed],
        "verification failed: `pytest -q` exited 1",
        t5 + Duration::minutes(5),
    );
    store
        .set_retry("local-5", 1, Some(now + Duration::minutes(2)))
        .unwrap();

    // local-2: running for 4 minutes, three turns so far.
    let t2 = now - Duration::minutes(4) - Duration::seconds(12);
    task(
        store,
        "local-2",
        "Handle empty input",
        t2 - Duration::seconds(40),
    );
    walk(
        store,
        "local-2",
        &[Claimed, Routed, Provisioned, Running],
        "seed",
        t2,
    );
    store
        .start_attempt(&spec("local-2", 1, "claude", "demo"), t2)
        .unwrap();
    store
        .append_events(
            "local-2",
            1,
            &[
                assistant(0, "m1", "Reading calc/parse.py", 4100, 220),
                assistant(1, "m2", "The tokenizer drops an empty string", 5200, 310),
                assistant(2, "m3", "Editing calc/parse.py", 6300, 540),
            ],
        )
        .unwrap();

    // local-6: waiting for a slot.
    task(
        store,
        "local-6",
        "Add a README example",
        now - Duration::minutes(1),
    );

    Seeded {
        demo_cost_7,
        landed_today: 1,
        blocked_today: 1,
        parked_until,
    }
}
