//! End to end (issue 7 "Done when"): the BUILT binary (`CARGO_BIN_EXE_polyphony`) against
//! the real Docker engine and the offline test image, the stateful fake GitHub
//! (tests/support/fake_github.rs) and local bare origins made by `demo::write_sample_repo`.
//!
//! Each test has its own homes (so its own `polyphony.home` container label), its own
//! sample origin and, for GitHub, its own repository on a fake. Assertions read real state:
//! the fake's issues, comments, labels and pull requests, branches of the bare origin,
//! `polyphony status [TASK] --json`, the store's SQLite file and `docker ps`.
//!
//! Without an engine: fails when `CI` is set, otherwise prints `SKIPPED: <why>`.
//!
//! Policies that need no engine (quota fallback, running without identities, a taken
//! branch name, and the rest of the attempt outcomes) are asserted fast over the scripted
//! runtime in tests/orchestrator.rs; this file keeps what needs the real engine and binary.

use crate::support;

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures_util::FutureExt as _;
use polyphony::demo::{write_home, FIX_DIRECTIVE};
use serde_json::Value;
use support::docker::{test_image as image, TagGuard};
use support::fake_github::{FakeGithub, NewIssue};
use support::home::{output, text, Daemon, Home, Origin, BIN, RUN_LIMIT};
use support::wait::wait_until;
use tokio::process::Command;

/// Knobs of a test home's config.yaml.
struct Conf<'a> {
    poll: &'a str,
    deadline: &'a str,
    max_concurrent: u32,
    /// Default agent of routing.yaml (its fallback chain is `[codex]` unless it is codex).
    agent: &'a str,
    repos: Vec<String>,
}

impl Default for Conf<'_> {
    fn default() -> Self {
        Conf {
            poll: "30s",
            deadline: "2m",
            max_concurrent: 4,
            agent: "claude",
            repos: Vec::new(),
        }
    }
}

impl Home {
    /// The demo home (`write_home`) on `image` with `conf`'s config.yaml and routing.yaml.
    fn new(image: &str, conf: Conf<'_>, github: Option<&FakeGithub>) -> Home {
        let (dir, path) = Home::temp();
        write_home(&path, dir.path(), image).expect("home");
        let repos = if conf.repos.is_empty() {
            String::new()
        } else {
            format!("github:\n  repos: [{}]\n", conf.repos.join(", "))
        };
        std::fs::write(
            path.join("config.yaml"),
            format!(
                "poll_interval: {}\nmax_concurrent_agents: {}\nevent_idle_timeout: 1m\nmax_attempts: 3\ndefault_identity: demo\negress:\n  mode: none\ncontainer:\n  image: {image}\n  deadline: {}\n  memory: 512m\n  cpus: 1\n{repos}",
                conf.poll, conf.max_concurrent, conf.deadline
            ),
        )
        .expect("config.yaml");
        let fallback = if conf.agent == "codex" {
            "[]"
        } else {
            "[codex]"
        };
        std::fs::write(
            path.join("routing.yaml"),
            format!(
                "default:\n  agent: {}\n  fallback: {fallback}\n",
                conf.agent
            ),
        )
        .expect("routing.yaml");
        Home::at(dir, path, github)
    }
}

fn state(v: &Value) -> &str {
    v["task"]["state"].as_str().unwrap_or("")
}

fn transitions(v: &Value) -> Vec<(String, String)> {
    v["transitions"]
        .as_array()
        .expect("transitions")
        .iter()
        .map(|t| {
            (
                t["from"].as_str().unwrap_or("").to_string(),
                t["to"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn chain(states: &[&str]) -> Vec<(String, String)> {
    states
        .windows(2)
        .map(|w| (w[0].to_string(), w[1].to_string()))
        .collect()
}

const HAPPY: &[&str] = &[
    "DISCOVERED",
    "CLAIMED",
    "ROUTED",
    "PROVISIONED",
    "RUNNING",
    "VERIFYING",
    "LANDED",
];

fn attempts(v: &Value) -> &Vec<Value> {
    v["attempts"].as_array().expect("attempts")
}

fn time(v: &Value) -> DateTime<Utc> {
    v.as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|| panic!("not a timestamp: {v}"))
}

fn count_containing(items: &[String], needle: &str) -> usize {
    items.iter().filter(|c| c.contains(needle)).count()
}

/// An issue body that makes the fake agents apply the fix under `scenario`.
fn text_of(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim().to_string()
}

fn body_with(scenario: &str) -> String {
    format!("`add 2 3` prints -1; test.sh fails.\n\n{scenario}\n{FIX_DIRECTIVE}\n")
}

/// A repository `acme/<name>` on the fake, cloned from `origin`.
fn github_repo(fake: &FakeGithub, name: &str, origin: &Origin) -> String {
    let full = format!("acme/{name}");
    fake.add_repo(&full, &origin.url(), "main");
    full
}

fn ready_issue(fake: &FakeGithub, repo: &str, title: &str, body: &str) -> u64 {
    fake.add_issue(
        repo,
        NewIssue::new(title).body(body).labels(&["agent-ready"]),
    )
}

/// No two events of one attempt share a seq.
fn duplicate_seqs(home: &Home) -> Vec<(String, i64, i64, i64)> {
    let db = home.db();
    let mut stmt = db
        .prepare(
            "SELECT task_id, attempt, seq, COUNT(*) FROM events \
             GROUP BY task_id, attempt, seq HAVING COUNT(*) > 1",
        )
        .expect("prepare");
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows")
}

// ---------------------------------------------------------------------------- tests

/// Labelled issue -> `spawn owner/repo#N` -> PR with the evidence table, one claim and one
/// landed comment, labels swapped, the branch with the fix in the origin, every
/// transition recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawn_lands_a_labelled_issue_as_a_pull_request() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let fake = FakeGithub::start().await;
    let origin = Origin::new();
    let repo = github_repo(&fake, "calc-spawn", &origin);
    let n = ready_issue(
        &fake,
        &repo,
        "Fix add(): it subtracts",
        &body_with("polyphony-fake: succeed"),
    );
    let home = Home::new(&image, Conf::default(), Some(&fake));
    let issue = format!("{repo}#{n}");

    let out = home.run(&["spawn", &issue]).await;
    assert!(out.status.success(), "spawn: {}", output(&out));

    let pulls = fake.pulls(&repo);
    assert_eq!(pulls.len(), 1, "{pulls:?}");
    let pr = &pulls[0];
    assert!(
        pr.head.starts_with("polyphony/") && pr.head.ends_with("-a1"),
        "{pr:?}"
    );
    assert_eq!(pr.base, "main");
    assert!(
        pr.body
            .contains("| Check | Command | Exit | Duration | Result |")
            && pr.body.contains("sh test.sh")
            && pr.body.contains("sh -n calc.sh"),
        "evidence table missing from the PR body:\n{}",
        pr.body
    );
    let comments = fake.comments(&repo, n);
    assert_eq!(
        count_containing(&comments, "polyphony:claim"),
        1,
        "{comments:#?}"
    );
    assert_eq!(
        count_containing(&comments, "polyphony:landed"),
        1,
        "{comments:#?}"
    );
    let landed = comments
        .iter()
        .find(|c| c.contains("polyphony:landed"))
        .expect("landed comment");
    assert!(
        landed.contains(&format!("/pull/{}", pr.number)),
        "the landed comment links the PR: {landed}"
    );
    let labels = fake.issue_labels(&repo, n);
    assert!(labels.iter().any(|l| l == "agent-landed"), "{labels:?}");
    assert!(
        !labels
            .iter()
            .any(|l| l == "agent-ready" || l == "agent-claimed"),
        "{labels:?}"
    );
    assert_eq!(origin.branches(), vec![pr.head.clone()]);
    assert!(origin
        .show(&format!("{}:calc.sh", pr.head))
        .contains("a + b"));

    let v = home.task(&issue).await;
    assert_eq!(state(&v), "LANDED");
    assert_eq!(transitions(&v), chain(HAPPY));
    let a = attempts(&v);
    assert_eq!(a.len(), 1);
    assert_eq!(a[0]["status"], "succeeded");
    let pr_url = v["landing"]["pr_url"].as_str().expect("pr_url");
    assert!(landed.contains(pr_url), "{landed} vs {pr_url}");
    assert!(home.containers().is_empty(), "containers left behind");
    println!("spawn_lands_a_labelled_issue: {:?}", started.elapsed());
}

/// Verification fails on attempt 1, the repair attempt gets the failure in its prompt and
/// lands (`spawn --task` on a locally enqueued task; gemini echoes its prompt).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verification_failure_is_repaired_on_the_retry() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let origin = Origin::new();
    let home = Home::new(
        &image,
        Conf {
            agent: "gemini",
            ..Conf::default()
        },
        None,
    );
    let out = home
        .run(&[
            "enqueue",
            "--repo",
            &origin.path.display().to_string(),
            "--type",
            "bugfix",
            "--body",
            &body_with("polyphony-fake: fix-on-retry"),
            "Fix add() (needs a repair round)",
        ])
        .await;
    assert!(out.status.success(), "{}", output(&out));
    let id = text(&out.stdout).trim().to_string();

    let out = home.run(&["spawn", "--task", &id]).await;
    assert!(out.status.success(), "spawn: {}", output(&out));

    let v = home.task(&id).await;
    assert_eq!(state(&v), "LANDED");
    assert_eq!(v["task"]["failures"], 1);
    let a = attempts(&v);
    assert_eq!(a.len(), 2, "{a:#?}");
    let test1 = a[0]["evidence"]
        .as_array()
        .expect("evidence")
        .iter()
        .find(|e| e["name"] == "test")
        .expect("attempt 1 ran the test check");
    assert_eq!(test1["exit_code"], 1);
    assert_eq!(test1["passed"], false);
    assert!(test1["output_tail"]
        .as_str()
        .unwrap_or("")
        .contains("FAIL: add 2 3 gave -1"));
    assert_eq!(a[1]["status"], "succeeded");
    assert!(a[1]["commit_sha"].is_string());
    assert_eq!(v["landing"]["branch"], a[1]["branch"]);
    let mut states = HAPPY[..6].to_vec();
    states.extend(["FAILED", "CLAIMED", "ROUTED", "PROVISIONED", "RUNNING"]);
    states.extend(["VERIFYING", "LANDED"]);
    assert_eq!(transitions(&v), chain(&states));

    // The repair prompt carried attempt 1's failing check and its output.
    let dir = home.path.join("transcripts").join(&id);
    let t1 = std::fs::read_to_string(dir.join("1.ndjson")).expect("transcript 1");
    let t2 = std::fs::read_to_string(dir.join("2.ndjson")).expect("transcript 2");
    assert!(t1.contains("None: this is the first attempt."), "{t1}");
    assert!(
        t2.contains("failed verification") && t2.contains("FAIL: add 2 3 gave -1"),
        "{t2}"
    );
    let branch = a[1]["branch"].as_str().expect("branch");
    assert_eq!(origin.branches(), vec![branch.to_string()]);
    assert!(origin.show(&format!("{branch}:calc.sh")).contains("a + b"));
    println!("verification_failure_is_repaired: {:?}", started.elapsed());
}

/// A token GitHub refuses is a configuration error: `spawn` exits 2 and says which
/// variable the token came from, never its value; the daemon refuses to start the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_token_exits_2_naming_the_variable() {
    let Some(image) = image().await else { return };
    let fake = FakeGithub::start().await;
    let origin = Origin::new();
    let repo = github_repo(&fake, "calc-token", &origin);
    let n = ready_issue(
        &fake,
        &repo,
        "Fix add()",
        &body_with("polyphony-fake: succeed"),
    );
    let home = Home::new(&image, Conf::default(), Some(&fake));
    let sent = fake.token();
    fake.set_token("a-different-token");
    let out = home.run(&["spawn", &format!("{repo}#{n}")]).await;
    assert_eq!(out.status.code(), Some(2), "{}", output(&out));
    let err = text(&out.stderr);
    assert!(err.contains("GITHUB_TOKEN"), "{err}");
    assert!(!err.contains(&sent), "the token leaked: {err}");
    // Nothing was claimed or changed at the source.
    assert_eq!(fake.issue_labels(&repo, n), vec!["agent-ready"]);
    assert!(fake.comments(&repo, n).is_empty());
}

/// An identity that has spent its daily cost ceiling waits (spec: the scheduler holds its
/// tasks) without spending an attempt, and `status` says why and when it goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_over_its_daily_ceiling_waits_and_status_says_so() {
    let Some(image) = image().await else { return };
    let origin = Origin::new();
    let home = Home::new(
        &image,
        Conf {
            max_concurrent: 1,
            ..Conf::default()
        },
        None,
    );
    // The fake claude reports $0.0421 per run: the first task spends the ceiling.
    let identities = home.path.join("identities.yaml");
    let written = std::fs::read_to_string(&identities).expect("identities.yaml");
    std::fs::write(
        &identities,
        written.replace(
            "  - name: demo\n",
            "  - name: demo\n    cost_ceiling_usd_per_day: 0.04\n",
        ),
    )
    .expect("write identities.yaml");
    let mut ids = Vec::new();
    for title in ["Fix add() first", "Fix add() second"] {
        let out = home
            .run(&[
                "enqueue",
                "--repo",
                &origin.path.display().to_string(),
                "--body",
                &body_with("polyphony-fake: succeed"),
                title,
            ])
            .await;
        assert!(out.status.success(), "{}", output(&out));
        ids.push(text_of(&out.stdout));
    }
    let mut daemon = home.start(&["daemon"]);
    let log = || daemon_log(&home);
    home.wait_for(&ids[0], Duration::from_secs(60), &log, |v| {
        state(v) == "LANDED"
    })
    .await;
    let v = home
        .wait_for(&ids[1], Duration::from_secs(60), &log, |v| {
            state(v) == "FAILED"
        })
        .await;
    let last = transitions(&v).last().cloned().expect("a transition");
    assert_eq!(last.1, "FAILED");
    let reasons: Vec<String> = v["transitions"]
        .as_array()
        .expect("transitions")
        .iter()
        .filter_map(|t| t["reason"].as_str().map(String::from))
        .collect();
    assert!(
        reasons.iter().any(|r| r.contains("daily ceiling")),
        "{reasons:?}"
    );
    // The hold names the attempt whose figure weighs most (issue 11).
    assert!(
        reasons
            .iter()
            .any(|r| r.contains(&format!("largest: {} attempt 1, $0.04", ids[0]))),
        "{reasons:?}"
    );
    assert_eq!(v["task"]["failures"], 0, "waiting is not a failure");
    assert_eq!(v["task"]["attempts"], 0, "no attempt was spent");
    let next = time(&v["task"]["next_attempt_at"]);
    assert!(next > chrono::Utc::now() + chrono::Duration::minutes(1));
    assert!(next.format("%H:%M:%S").to_string() == "00:00:00", "{next}");
    let out = home.run(&["status"]).await;
    assert!(out.status.success());
    let table = text(&out.stdout);
    assert!(table.contains("retry in"), "{table}");
    daemon.signal(libc::SIGTERM);
    let status = daemon.wait(Duration::from_secs(20)).await;
    assert!(status.success(), "{}", daemon.log());
}

/// An agent that never gets it right: three attempts, then BLOCKED with one comment and
/// the blocked label on the issue; spawn exits 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_failing_issue_ends_blocked_with_one_comment() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let fake = FakeGithub::start().await;
    let origin = Origin::new();
    let repo = github_repo(&fake, "calc-blocked", &origin);
    let n = ready_issue(
        &fake,
        &repo,
        "Fix add() (never right)",
        "`add 2 3` prints -1.\n\npolyphony-fake: fail-tests\n",
    );
    let home = Home::new(&image, Conf::default(), Some(&fake));
    let issue = format!("{repo}#{n}");

    let out = home.run(&["spawn", &issue]).await;
    assert_eq!(out.status.code(), Some(1), "spawn: {}", output(&out));

    let v = home.task(&issue).await;
    assert_eq!(state(&v), "BLOCKED");
    assert_eq!(v["task"]["attempts"], 3);
    assert_eq!(v["task"]["failures"], 3);
    assert!(v["task"]["next_attempt_at"].is_null());
    let a = attempts(&v);
    assert_eq!(a.len(), 3);
    for x in a {
        assert_eq!(x["status"], "failed", "{x:#}");
    }
    // Backoff 10 s then 20 s between the attempts.
    let gap1 = time(&a[1]["started_at"]) - time(&a[0]["finished_at"]);
    let gap2 = time(&a[2]["started_at"]) - time(&a[1]["finished_at"]);
    assert!((9..=14).contains(&gap1.num_seconds()), "gap 1: {gap1}");
    assert!((19..=24).contains(&gap2.num_seconds()), "gap 2: {gap2}");

    let comments = fake.comments(&repo, n);
    assert_eq!(
        count_containing(&comments, "polyphony:blocked"),
        1,
        "{comments:#?}"
    );
    assert_eq!(count_containing(&comments, "polyphony:landed"), 0);
    let labels = fake.issue_labels(&repo, n);
    assert!(labels.iter().any(|l| l == "agent-blocked"), "{labels:?}");
    assert!(
        !labels
            .iter()
            .any(|l| l == "agent-ready" || l == "agent-claimed" || l == "agent-landed"),
        "{labels:?}"
    );
    assert!(fake.pulls(&repo).is_empty());
    assert!(origin.branches().is_empty(), "nothing is pushed");
    println!("always_failing_blocked: {:?}", started.elapsed());
}

/// A hanging agent is killed at its deadline; the attempt ends `timeout` and the retry is
/// scheduled 10 s later. The task is enqueued while the daemon waits on a 30 s poll
/// interval: the wake socket must start it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_times_out_and_schedules_a_retry() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let origin = Origin::new();
    let home = Home::new(
        &image,
        Conf {
            deadline: "4s",
            ..Conf::default()
        },
        None,
    );
    let mut daemon = home.start(&["daemon"]);
    let sock = home.path.join("daemon.sock");
    wait_until(
        Duration::from_secs(20),
        "no wake socket",
        || format!("log:\n{}", daemon.log()),
        || sock.exists(),
    )
    .await;
    let enqueued = Instant::now();
    let out = home
        .run(&[
            "enqueue",
            "--repo",
            &origin.path.display().to_string(),
            "--body",
            "polyphony-fake: hang\n",
            "Hang forever",
        ])
        .await;
    assert!(out.status.success(), "{}", output(&out));
    let id = text(&out.stdout).trim().to_string();

    let log = || daemon_log(&home);
    let v = home
        .wait_for(&id, Duration::from_secs(15), &log, |v| {
            state(v) != "DISCOVERED"
        })
        .await;
    assert!(
        enqueued.elapsed() < Duration::from_secs(10),
        "enqueue did not wake the daemon (took {:?}): {}",
        enqueued.elapsed(),
        state(&v)
    );
    let v = home
        .wait_for(&id, Duration::from_secs(40), &log, |v| {
            state(v) == "FAILED" && !v["task"]["next_attempt_at"].is_null()
        })
        .await;
    daemon.signal(libc::SIGTERM);
    let status = daemon.wait(Duration::from_secs(20)).await;
    assert!(status.success(), "daemon: {status:?}\n{}", daemon.log());

    let a = attempts(&v);
    assert_eq!(a.len(), 1);
    assert_eq!(a[0]["status"], "timeout", "{:#}", a[0]);
    let took = time(&a[0]["finished_at"]) - time(&a[0]["started_at"]);
    assert!(
        took.num_milliseconds() <= 9_000,
        "a 4 s deadline took {took}"
    );
    let failed_at = v["transitions"]
        .as_array()
        .expect("transitions")
        .iter()
        .rev()
        .find(|t| t["to"] == "FAILED")
        .map(|t| time(&t["at"]))
        .expect("FAILED transition");
    let backoff = time(&v["task"]["next_attempt_at"]) - failed_at;
    assert!(
        (9_000..=11_500).contains(&backoff.num_milliseconds()),
        "retry due {backoff} after the failure"
    );
    assert_eq!(v["task"]["failures"], 1);
    assert!(home.containers().is_empty(), "containers left behind");
    println!("deadline_timeout_retry: {:?}", started.elapsed());
}

fn daemon_log(home: &Home) -> String {
    home.logs()
}

/// The JSON summary line a `daemon --json` printed, found by its `field` (a number).
fn json_summary(daemon: &Daemon, field: &str) -> Value {
    daemon
        .log()
        .lines()
        .find_map(|l| {
            serde_json::from_str(l)
                .ok()
                .filter(|v: &Value| v[field].is_number())
        })
        .expect("JSON summary")
}

/// Starts `polyphony ARGS` (a daemon, `spawn`) and returns it once task `id` is RUNNING.
async fn start_until_running(home: &Home, id: &str, args: &[&str]) -> Daemon {
    let started = home.start(args);
    home.wait_for(id, Duration::from_secs(40), &|| daemon_log(home), |v| {
        state(v) == "RUNNING"
    })
    .await;
    started
}

/// How many `Progress i/N` events of `id`'s first attempt the store holds.
fn progress_events(home: &Home, id: &str) -> i64 {
    home.db()
        .query_row(
            "SELECT COUNT(*) FROM events WHERE task_id = ?1 AND attempt = 1 AND data LIKE '%Progress %'",
            [id],
            |r| r.get(0),
        )
        .unwrap_or(0)
}

/// Waits until the daemon has polled the fake's issues `n` more times from now.
async fn wait_for_polls(fake: &FakeGithub, n: usize, log: &dyn Fn() -> String) {
    let polls = || fake.count_requests("GET", "/issues?");
    let seen = polls();
    wait_until(
        Duration::from_secs(30),
        &format!("{n} more polls"),
        log,
        || polls() >= seen + n,
    )
    .await;
}

/// `kill -9` of the daemon while the agent runs; the restarted daemon re-attaches to the
/// still-running container and lands exactly once without duplicate events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_run_then_restart_lands_exactly_once() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let fake = FakeGithub::start().await;
    let origin = Origin::new();
    let repo = github_repo(&fake, "calc-kill9", &origin);
    let n = ready_issue(
        &fake,
        &repo,
        "Fix add() slowly",
        &body_with("polyphony-fake: slow\npolyphony-fake-sleep: 8"),
    );
    let home = polling_home(&image, &fake, &repo);
    let id = format!("{repo}#{n}");
    let mut first = start_until_running(&home, &id, &["daemon"]).await;
    let log = || daemon_log(&home);
    // A few progress events are stored before the crash.
    wait_until(
        Duration::from_secs(20),
        "three progress events stored",
        log,
        || progress_events(&home, &id) >= 3,
    )
    .await;
    first.child.start_kill().expect("kill -9");
    first.wait(Duration::from_secs(10)).await;
    let running = home.containers();
    assert_eq!(running.len(), 1, "the agent container outlives the daemon");
    let before: i64 = home
        .db()
        .query_row(
            "SELECT COUNT(*) FROM events WHERE task_id = ?1",
            [&id],
            |r| r.get(0),
        )
        .expect("count");
    assert!(before > 0, "events were stored before the crash");

    let mut second = home.start(&["daemon", "--exit-when-idle", "--json"]);
    let status = second.wait(Duration::from_secs(120)).await;
    assert!(status.success(), "daemon: {}", second.log());
    let summary = json_summary(&second, "resumed");
    assert_eq!(summary["resumed"], 1, "{summary}");
    assert_eq!(summary["attempts"], 0, "{summary}");

    let v = home.task(&id).await;
    assert_eq!(state(&v), "LANDED", "{}", second.log());
    assert_eq!(v["task"]["attempts"], 1);
    assert_eq!(transitions(&v), chain(HAPPY));
    assert_eq!(fake.pulls(&repo).len(), 1);
    let comments = fake.comments(&repo, n);
    assert_eq!(count_containing(&comments, "polyphony:landed"), 1);
    assert_eq!(count_containing(&comments, "polyphony:claim"), 1);
    assert!(
        duplicate_seqs(&home).is_empty(),
        "{:?}",
        duplicate_seqs(&home)
    );
    let db = home.db();
    for i in 1..=8 {
        let copies: i64 = db
            .query_row(
                "SELECT COUNT(*) FROM events WHERE task_id = ?1 AND attempt = 1 AND data LIKE ?2",
                rusqlite::params![id, format!("%Progress {i}/8%")],
                |r| r.get(0),
            )
            .expect("count");
        assert_eq!(copies, 1, "Progress {i}/8 stored {copies} times");
    }
    // What a person reads says the same: the transcript file and `logs`.
    let transcript = std::fs::read_to_string(
        home.path
            .join("transcripts")
            .join(polyphony::runtime::container_spec::container_key(&id))
            .join("1.ndjson"),
    )
    .expect("transcript");
    let out = home.run(&["logs", &id, "--attempt", "1"]).await;
    assert!(out.status.success(), "logs: {}", output(&out));
    let logs = text(&out.stdout);
    for i in 1..=8 {
        let needle = format!("Progress {i}/8");
        assert_eq!(
            transcript.matches(&needle).count(),
            1,
            "{needle} in:\n{transcript}"
        );
        assert_eq!(logs.matches(&needle).count(), 1, "{needle} in:\n{logs}");
    }
    assert_eq!(origin.branches().len(), 1);
    assert!(home.containers().is_empty(), "containers left behind");
    println!("kill_9_restart_lands_once: {:?}", started.elapsed());
}

/// Two daemons with separate homes on one fake GitHub: every issue is landed by exactly
/// one of them, the one whose claim comment came first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_daemons_handle_every_issue_exactly_once() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let fake = FakeGithub::start().await;
    let origin = Origin::new();
    let repo = github_repo(&fake, "calc-two", &origin);
    let issues: Vec<u64> = (1..=6)
        .map(|i| {
            ready_issue(
                &fake,
                &repo,
                &format!("Fix add() #{i}"),
                &body_with("polyphony-fake: succeed"),
            )
        })
        .collect();
    let conf = || Conf {
        poll: "1s",
        max_concurrent: 3,
        repos: vec![repo.clone()],
        ..Conf::default()
    };
    let a = Home::new(&image, conf(), Some(&fake));
    let b = Home::new(&image, conf(), Some(&fake));
    let mut da = a.start(&["daemon", "--exit-when-idle"]);
    let mut db = b.start(&["daemon", "--exit-when-idle"]);
    let sa = da.wait(Duration::from_secs(150)).await;
    let sb = db.wait(Duration::from_secs(150)).await;
    assert!(sa.success(), "daemon A: {}", da.log());
    assert!(sb.success(), "daemon B: {}", db.log());

    let pulls = fake.pulls(&repo);
    assert_eq!(pulls.len(), 6, "{pulls:#?}");
    let mut heads: Vec<&str> = pulls.iter().map(|p| p.head.as_str()).collect();
    heads.sort();
    heads.dedup();
    assert_eq!(heads.len(), 6);
    let (ta, tb) = (a.tasks().await, b.tasks().await);
    let state_in = |tasks: &[Value], id: &str| {
        tasks
            .iter()
            .find(|t| t["id"] == id)
            .map(|t| t["state"].as_str().unwrap_or("").to_string())
    };
    let mut landed_by = [0, 0];
    for n in &issues {
        let id = format!("{repo}#{n}");
        let comments = fake.comments(&repo, *n);
        assert_eq!(
            count_containing(&comments, "polyphony:landed"),
            1,
            "{id}: {comments:#?}"
        );
        let (sa, sb) = (state_in(&ta, &id), state_in(&tb, &id));
        let winner = match (sa.as_deref(), sb.as_deref()) {
            (Some("LANDED"), other) => {
                assert!(matches!(other, None | Some("BLOCKED")), "{id}: B {other:?}");
                0
            }
            (other, Some("LANDED")) => {
                assert!(matches!(other, None | Some("BLOCKED")), "{id}: A {other:?}");
                1
            }
            other => panic!("{id} landed nowhere: {other:?}"),
        };
        landed_by[winner] += 1;
        // The lander is the first claimant.
        let label = [&a.label, &b.label][winner];
        let first_claim = comments
            .iter()
            .find(|c| c.contains("polyphony:claim"))
            .expect("claim comment");
        assert!(
            first_claim.contains(&format!("by={label}")),
            "{id}: landed by {label} but first claimed: {first_claim}"
        );
        let labels = fake.issue_labels(&repo, *n);
        assert!(labels.iter().any(|l| l == "agent-landed"), "{labels:?}");
        assert!(!labels.iter().any(|l| l == "agent-claimed"), "{labels:?}");
    }
    assert_eq!(landed_by[0] + landed_by[1], 6);
    assert_eq!(origin.branches().len(), 6);
    assert!(a.containers().is_empty() && b.containers().is_empty());
    println!(
        "two_daemons: {:?} (A landed {}, B landed {})",
        started.elapsed(),
        landed_by[0],
        landed_by[1]
    );
}

/// SIGTERM (no --drain) while an attempt runs (issue 29: a restart loses nothing): the
/// daemon stops promptly and leaves the container running; the next start re-attaches the
/// same container and lands the task with one attempt and no failure counted. (This test
/// asserted the old rule, "SIGTERM kills the attempt and the restart runs attempt 2": every
/// `systemctl restart` threw away a paid agent run. The rule was wrong, not the product.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_leaves_the_attempt_running_and_a_restart_reattaches_it() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let fake = FakeGithub::start().await;
    let origin = Origin::new();
    let repo = github_repo(&fake, "calc-term", &origin);
    let n = ready_issue(
        &fake,
        &repo,
        "Fix add() slowly",
        &body_with("polyphony-fake: slow\npolyphony-fake-sleep: 6"),
    );
    let home = polling_home(&image, &fake, &repo);
    let id = format!("{repo}#{n}");
    let mut first = start_until_running(&home, &id, &["daemon", "--json"]).await;
    let log = || daemon_log(&home);
    // The agent is under way (its container started and printed), as a person's restart
    // would find it; RUNNING alone is recorded just before the container starts.
    wait_until(
        Duration::from_secs(20),
        "two progress events stored",
        log,
        || progress_events(&home, &id) >= 2,
    )
    .await;
    let running = home.containers();
    assert_eq!(running.len(), 1, "one agent container runs");
    let signalled = Instant::now();
    first.signal(libc::SIGTERM);
    let status = first.wait(Duration::from_secs(20)).await;
    let stop = signalled.elapsed();
    assert!(status.success(), "daemon: {status:?}\n{}", first.log());
    assert!(stop < Duration::from_secs(5), "SIGTERM took {stop:?}");
    let summary = json_summary(&first, "left_running");
    assert_eq!(summary["left_running"], 1, "{summary}");
    assert_eq!(
        home.containers(),
        running,
        "the same container runs on after the daemon stopped"
    );
    let v = home.task(&id).await;
    assert_eq!(
        state(&v),
        "RUNNING",
        "nothing was recorded as ended: {}",
        first.log()
    );
    assert_eq!(v["task"]["failures"], 0);

    let mut second = home.start(&["daemon", "--exit-when-idle", "--json"]);
    let status = second.wait(Duration::from_secs(120)).await;
    assert!(status.success(), "daemon: {}", second.log());
    let summary = json_summary(&second, "resumed");
    assert_eq!(
        summary["resumed"], 1,
        "the attempt was re-attached: {summary}"
    );
    assert_eq!(
        summary["attempts"], 0,
        "no new attempt was started: {summary}"
    );
    let v = home.task(&id).await;
    assert_eq!(state(&v), "LANDED", "{}", second.log());
    assert_eq!(v["task"]["attempts"], 1, "one attempt, the re-attached one");
    assert_eq!(v["task"]["failures"], 0, "a restart is not a failure");
    assert_eq!(transitions(&v), chain(HAPPY));
    let pulls = fake.pulls(&repo);
    assert_eq!(pulls.len(), 1);
    assert!(pulls[0].head.ends_with("-a1"), "{pulls:?}");
    let comments = fake.comments(&repo, n);
    assert_eq!(count_containing(&comments, "polyphony:landed"), 1);
    assert!(home.containers().is_empty(), "containers left behind");
    println!(
        "sigterm_reattach_lands: {:?} (stopped in {stop:?})",
        started.elapsed()
    );
}

/// The README's main-job command, then `cleanup` leaves no container or workspace of the
/// demo's home behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_runs_and_cleanup_leaves_nothing_behind() {
    let Some(_image) = image().await else { return };
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("temp dir");
    let out = Command::new(BIN)
        .args(["demo", "--json", "--dir"])
        .arg(dir.path())
        .env_remove("RUST_LOG")
        .env_remove("GITHUB_TOKEN")
        .env_remove("GH_TOKEN")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(RUN_LIMIT, out)
        .await
        .expect("demo finished in time")
        .expect("run demo");
    assert!(out.status.success(), "demo: {}", output(&out));
    // The demo stages its own logins: no warning about them (issue 29: there were 16).
    let warnings: Vec<&str> = std::str::from_utf8(&out.stderr)
        .unwrap_or("")
        .lines()
        .filter(|l| l.contains(" WARN "))
        .collect();
    assert!(
        warnings.is_empty(),
        "the demo warned:\n{}",
        warnings.join("\n")
    );
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).expect("demo --json");
    let states: Vec<&str> = rows
        .iter()
        .map(|r| r["state"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(states, ["LANDED", "LANDED", "LANDED", "BLOCKED"]);
    assert!(rows.iter().all(|r| r["as_promised"] == true));
    let path = dir.path().join("home").canonicalize().expect("demo home");
    let home = Home::at(dir, path, None);
    assert!(home.containers().is_empty(), "the demo left containers");
    assert!(
        !home.workspace_dirs().is_empty(),
        "the demo kept its workspaces"
    );

    let out = home.run(&["cleanup", "--json"]).await;
    assert!(out.status.success(), "cleanup: {}", output(&out));
    let report: Value = serde_json::from_slice(&out.stdout).expect("cleanup --json");
    assert!(
        report["bytes_freed"].as_u64().unwrap_or(0) > 0,
        "{report:#}"
    );
    assert!(
        home.workspace_dirs().is_empty(),
        "workspaces left: {:?}\n{report:#}",
        home.workspace_dirs()
    );
    assert!(home.containers().is_empty());
    println!("demo_and_cleanup: {:?}", started.elapsed());
}

/// A GitHub home polling `repo` every second.
fn polling_home(image: &str, fake: &FakeGithub, repo: &str) -> Home {
    Home::new(
        image,
        Conf {
            poll: "1s",
            repos: vec![repo.to_string()],
            ..Conf::default()
        },
        Some(fake),
    )
}

/// Asserts the task landed once: one PR, one landed comment, one branch, no containers,
/// no duplicate events.
async fn assert_landed_once(home: &Home, fake: &FakeGithub, repo: &str, n: u64, origin: &Origin) {
    let id = format!("{repo}#{n}");
    let v = home.task(&id).await;
    assert_eq!(
        state(&v),
        "LANDED",
        "{}\n{}\n{}",
        serde_json::to_string_pretty(&v["transitions"]).unwrap_or_default(),
        serde_json::to_string_pretty(&v["attempts"]).unwrap_or_default(),
        daemon_log(home)
    );
    let pulls = fake.pulls(repo);
    assert_eq!(pulls.len(), 1, "{pulls:#?}");
    let comments = fake.comments(repo, n);
    assert_eq!(
        count_containing(&comments, "polyphony:landed"),
        1,
        "{comments:#?}"
    );
    assert_eq!(origin.branches(), vec![pulls[0].head.clone()]);
    assert!(
        duplicate_seqs(home).is_empty(),
        "{:?}",
        duplicate_seqs(home)
    );
    assert!(home.containers().is_empty(), "containers left behind");
}

/// `kill -9` while the agent runs, and the container finishes before the restart: the
/// restarted daemon collects the exited container's output and carries it on to
/// verification and landing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_then_container_exits_then_restart_collects_and_lands() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let fake = FakeGithub::start().await;
    let origin = Origin::new();
    let repo = github_repo(&fake, "calc-exited", &origin);
    let n = ready_issue(
        &fake,
        &repo,
        "Fix add() slowly",
        &body_with("polyphony-fake: slow\npolyphony-fake-sleep: 4"),
    );
    let home = polling_home(&image, &fake, &repo);
    let id = format!("{repo}#{n}");
    let mut first = start_until_running(&home, &id, &["daemon"]).await;
    let log = || daemon_log(&home);
    // The agent is under way (it streams progress) when the daemon dies.
    wait_until(
        Duration::from_secs(20),
        "a progress event stored",
        log,
        || progress_events(&home, &id) >= 1,
    )
    .await;
    first.child.start_kill().expect("kill -9");
    first.wait(Duration::from_secs(10)).await;
    wait_until(
        Duration::from_secs(30),
        "the agent never exited",
        log,
        || !home.containers_where("status=exited").is_empty(),
    )
    .await;
    let mut second = home.start(&["daemon", "--exit-when-idle"]);
    let status = second.wait(Duration::from_secs(120)).await;
    assert!(status.success(), "daemon: {}", second.log());
    assert_landed_once(&home, &fake, &repo, n, &origin).await;
    let v = home.task(&id).await;
    assert_eq!(v["task"]["attempts"], 1);
    assert_eq!(transitions(&v), chain(HAPPY));
    let db = home.db();
    for i in 1..=4 {
        let copies: i64 = db
            .query_row(
                "SELECT COUNT(*) FROM events WHERE task_id = ?1 AND attempt = 1 AND data LIKE ?2",
                rusqlite::params![id, format!("%Progress {i}/4%")],
                |r| r.get(0),
            )
            .expect("count");
        assert_eq!(copies, 1, "Progress {i}/4 stored {copies} times");
    }
    println!("kill_9_exited_collect: {:?}", started.elapsed());
}

/// `kill -9` during verification (a slow check): the restart removes the orphaned check
/// container, re-runs verification and lands once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_verification_reverifies_and_lands_once() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let fake = FakeGithub::start().await;
    let origin = Origin::new();
    origin.commit_file(
        ".polyphony.yaml",
        "test: sleep 6 && sh test.sh\n",
        "slower checks",
    );
    let repo = github_repo(&fake, "calc-verify", &origin);
    let n = ready_issue(
        &fake,
        &repo,
        "Fix add()",
        &body_with("polyphony-fake: succeed"),
    );
    let home = polling_home(&image, &fake, &repo);
    let id = format!("{repo}#{n}");
    let mut first = home.start(&["daemon"]);
    let log = || daemon_log(&home);
    home.wait_for(&id, Duration::from_secs(40), &log, |v| {
        state(v) == "VERIFYING"
    })
    .await;
    wait_until(Duration::from_secs(20), "no check container", log, || {
        !home
            .containers_where("label=polyphony.role=verify")
            .is_empty()
    })
    .await;
    first.child.start_kill().expect("kill -9");
    first.wait(Duration::from_secs(10)).await;
    let mut second = home.start(&["daemon", "--exit-when-idle", "--json"]);
    let status = second.wait(Duration::from_secs(120)).await;
    assert!(status.success(), "daemon: {}", second.log());
    assert_landed_once(&home, &fake, &repo, n, &origin).await;
    let v = home.task(&id).await;
    assert_eq!(v["task"]["attempts"], 1);
    assert_eq!(transitions(&v), chain(HAPPY));
    let evidence = attempts(&v)[0]["evidence"]
        .as_array()
        .expect("evidence")
        .clone();
    let tests: Vec<&Value> = evidence.iter().filter(|e| e["name"] == "test").collect();
    assert_eq!(tests.len(), 1, "{evidence:#?}");
    assert_eq!(tests[0]["passed"], true);
    println!("kill_9_during_verification: {:?}", started.elapsed());
}

/// `kill -9` while the pull request is being opened (GitHub is slow to answer; the
/// branch is already pushed): the restart finds the branch and the PR (or opens it) and
/// comments once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_landing_opens_one_pull_request() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let fake = FakeGithub::start().await;
    let origin = Origin::new();
    let repo = github_repo(&fake, "calc-landing", &origin);
    let n = ready_issue(
        &fake,
        &repo,
        "Fix add()",
        &body_with("polyphony-fake: succeed"),
    );
    fake.inject(
        Some("POST"),
        "/pulls",
        1,
        support::fake_github::FaultKind::Delay(Duration::from_secs(3)),
    );
    let home = polling_home(&image, &fake, &repo);
    let id = format!("{repo}#{n}");
    let mut first = home.start(&["daemon"]);
    wait_until(
        Duration::from_secs(60),
        "never pushed",
        || first.log(),
        || !origin.branches().is_empty(),
    )
    .await;
    // The kill lands inside the 3 s the fake holds the pull request back.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    first.child.start_kill().expect("kill -9");
    first.wait(Duration::from_secs(10)).await;
    let v = home.task(&id).await;
    assert_eq!(state(&v), "VERIFYING", "killed mid-landing");
    // Whatever GitHub did with the request in flight is done before the restart. A fixed
    // wait: the fake drops a request whose client died, and records only answered ones, so
    // there is nothing to observe (the fake would need to expose requests in flight).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut second = home.start(&["daemon", "--exit-when-idle"]);
    let status = second.wait(Duration::from_secs(120)).await;
    assert!(status.success(), "daemon: {}", second.log());
    assert_landed_once(&home, &fake, &repo, n, &origin).await;
    println!("kill_9_while_landing: {:?}", started.elapsed());
}

/// Ctrl-C during `spawn`: the container is killed and removed, the cancellation is
/// recorded, the task is held (not retried on its own) and spawn exits 1; a second
/// `spawn --task` picks it up and lands it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_during_spawn_cancels_cleanly() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let origin = Origin::new();
    let home = Home::new(&image, Conf::default(), None);
    let id = home
        .enqueue(
            &origin,
            &body_with("polyphony-fake: slow\npolyphony-fake-sleep: 5"),
            "Fix add() slowly",
        )
        .await;
    let mut spawn = start_until_running(&home, &id, &["spawn", "--task", &id]).await;
    spawn.signal(libc::SIGINT);
    let status = spawn.wait(Duration::from_secs(20)).await;
    assert_eq!(status.code(), Some(1), "{}", spawn.log());
    assert!(home.containers().is_empty(), "the container was removed");
    let v = home.task(&id).await;
    assert_eq!(state(&v), "FAILED");
    assert!(v["task"]["next_attempt_at"].is_null(), "held, not retried");
    assert_eq!(v["task"]["failures"], 0);
    assert_eq!(attempts(&v)[0]["status"], "cancelled");

    let out = home.run(&["spawn", "--task", &id]).await;
    assert!(out.status.success(), "spawn again: {}", output(&out));
    let v = home.task(&id).await;
    assert_eq!(state(&v), "LANDED");
    assert_eq!(v["task"]["attempts"], 2);
    println!("ctrl_c_spawn: {:?}", started.elapsed());
}

/// One daemon per home: a second one (or a spawn) gets a clear error naming the pid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_daemon_on_one_home_is_refused() {
    let Some(image) = image().await else { return };
    let home = Home::new(&image, Conf::default(), None);
    let mut first = home.start(&["daemon"]);
    let sock = home.path.join("daemon.sock");
    wait_until(
        Duration::from_secs(20),
        "no wake socket",
        || first.log(),
        || sock.exists(),
    )
    .await;
    let out = home.run(&["daemon", "--exit-when-idle"]).await;
    assert!(!out.status.success(), "{}", output(&out));
    let err = text(&out.stderr);
    assert!(err.contains(&first.pid().to_string()), "{err}");
    assert!(
        sock.exists(),
        "the refused daemon must not remove the wake socket"
    );
    let out = home.run(&["spawn", "--task", "local-1"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", output(&out));
    first.signal(libc::SIGTERM);
    let status = first.wait(Duration::from_secs(20)).await;
    assert!(status.success(), "{}", first.log());
    assert!(!sock.exists(), "the socket goes with the daemon");
}

/// `kill -9` before the container exists (GitHub is slow to take the claim comment): the
/// restart sends the stranded task back for an immediate retry, which lands once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_before_the_container_exists_retries_and_lands_once() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let fake = FakeGithub::start().await;
    let origin = Origin::new();
    let repo = github_repo(&fake, "calc-stranded", &origin);
    let n = ready_issue(
        &fake,
        &repo,
        "Fix add()",
        &body_with("polyphony-fake: succeed"),
    );
    fake.inject(
        Some("POST"),
        "/comments",
        1,
        support::fake_github::FaultKind::Delay(Duration::from_secs(3)),
    );
    let home = polling_home(&image, &fake, &repo);
    let id = format!("{repo}#{n}");
    let mut first = home.start(&["daemon"]);
    let log = || daemon_log(&home);
    home.wait_for(&id, Duration::from_secs(40), &log, |v| {
        state(v) == "CLAIMED"
    })
    .await;
    // The kill lands inside the 3 s the fake holds the claim comment back.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    first.child.start_kill().expect("kill -9");
    first.wait(Duration::from_secs(10)).await;
    let v = home.task(&id).await;
    assert_eq!(state(&v), "CLAIMED", "killed before the container existed");
    // Whatever GitHub did with the comment in flight is done before the restart (a fixed
    // wait, as in `kill_9_while_landing_opens_one_pull_request`).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut second = home.start(&["daemon", "--exit-when-idle"]);
    let status = second.wait(Duration::from_secs(120)).await;
    assert!(status.success(), "daemon: {}", second.log());
    assert_landed_once(&home, &fake, &repo, n, &origin).await;
    let v = home.task(&id).await;
    assert_eq!(v["task"]["failures"], 0, "an interruption is not a failure");
    let comments = fake.comments(&repo, n);
    assert!(
        count_containing(&comments, "polyphony:claim") <= 2,
        "{comments:#?}"
    );
    let labels = fake.issue_labels(&repo, n);
    assert!(labels.iter().any(|l| l == "agent-landed"), "{labels:?}");
    assert!(!labels.iter().any(|l| l == "agent-claimed"), "{labels:?}");
    println!("kill_9_before_container: {:?}", started.elapsed());
}

/// SIGTERM with `--drain`: no new claims, the running attempt finishes and lands, then
/// the daemon exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_drain_lets_the_attempt_land() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let fake = FakeGithub::start().await;
    let origin = Origin::new();
    let repo = github_repo(&fake, "calc-drain", &origin);
    let n = ready_issue(
        &fake,
        &repo,
        "Fix add() slowly",
        &body_with("polyphony-fake: slow\npolyphony-fake-sleep: 4"),
    );
    let home = polling_home(&image, &fake, &repo);
    let id = format!("{repo}#{n}");
    let mut daemon = start_until_running(&home, &id, &["daemon", "--drain"]).await;
    // Labelled after the signal: must not be claimed.
    daemon.signal(libc::SIGTERM);
    let late = ready_issue(&fake, &repo, "Late", &body_with("polyphony-fake: succeed"));
    let status = daemon.wait(Duration::from_secs(60)).await;
    assert!(status.success(), "{}", daemon.log());
    let v = home.task(&id).await;
    let story = || {
        format!(
            "{}\n{}\n{}",
            serde_json::to_string_pretty(&v["transitions"]).unwrap_or_default(),
            serde_json::to_string_pretty(&v["attempts"]).unwrap_or_default(),
            daemon.log()
        )
    };
    assert_eq!(state(&v), "LANDED", "{}", story());
    assert_eq!(v["task"]["attempts"], 1, "{}", story());
    assert_eq!(fake.pulls(&repo).len(), 1);
    assert!(
        fake.comments(&repo, late).is_empty(),
        "the late issue was not claimed"
    );
    assert!(home.containers().is_empty());
    println!("sigterm_drain: {:?}", started.elapsed());
}

/// `kill -9`, and the agent's container is gone too (engine restarted, removed by hand):
/// the restart records attempt 1 as ended (not "running" forever), retries without
/// counting a failure, and lands on attempt 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_and_container_lost_retries_and_closes_the_attempt() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let origin = Origin::new();
    let home = Home::new(&image, Conf::default(), None);
    let id = home
        .enqueue(
            &origin,
            &body_with("polyphony-fake: slow\npolyphony-fake-sleep: 4"),
            "Fix add() slowly",
        )
        .await;
    let mut first = start_until_running(&home, &id, &["daemon"]).await;
    first.child.start_kill().expect("kill -9");
    first.wait(Duration::from_secs(10)).await;
    let ids = home.containers();
    assert_eq!(ids.len(), 1);
    let rm = std::process::Command::new("docker")
        .args(["rm", "-f", &ids[0]])
        .output()
        .expect("docker rm");
    assert!(rm.status.success());

    let mut second = home.start(&["daemon", "--exit-when-idle"]);
    let status = second.wait(Duration::from_secs(120)).await;
    assert!(status.success(), "daemon: {}", second.log());
    let v = home.task(&id).await;
    assert_eq!(state(&v), "LANDED", "{}", second.log());
    assert_eq!(v["task"]["failures"], 0);
    let a = attempts(&v);
    assert_eq!(a.len(), 2, "{a:#?}");
    assert!(
        a[0]["status"].is_string() && a[0]["finished_at"].is_string(),
        "attempt 1 must not stay `running`: {:#}",
        a[0]
    );
    assert_ne!(a[0]["status"], "succeeded");
    assert_eq!(a[1]["status"], "succeeded");
    assert!(home.containers().is_empty());

    // Nothing of this home is live any more: cleanup removes both attempts' workspaces.
    let out = home.run(&["cleanup", "--json"]).await;
    assert!(out.status.success(), "cleanup: {}", output(&out));
    assert!(
        home.workspace_dirs().is_empty(),
        "workspaces left: {:?}\n{}",
        home.workspace_dirs(),
        text(&out.stdout)
    );
    println!("kill_9_container_lost: {:?}", started.elapsed());
}

/// Issue 11 "results come from the agent CLI": a tool subprocess forges a final report
/// with a $1,000,000 cost through PID 1's stdout, and another run reports $1,000,000
/// itself. Neither holds the identity: the forged line is not counted, the real-but-absurd
/// figure is clamped to `container.max_cost_usd_per_attempt` with a warning in `status`,
/// the next task still runs, no container is left and the daemon stops cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_and_absurd_costs_never_hold_the_identity() {
    let Some(image) = image().await else { return };
    let origin = Origin::new();
    let home = Home::new(
        &image,
        Conf {
            max_concurrent: 1,
            ..Conf::default()
        },
        None,
    );
    let config = home.path.join("config.yaml");
    let text_conf = std::fs::read_to_string(&config).expect("config.yaml");
    std::fs::write(
        &config,
        text_conf.replace("  cpus: 1\n", "  cpus: 1\n  max_cost_usd_per_attempt: 1\n"),
    )
    .expect("write config.yaml");
    let identities = home.path.join("identities.yaml");
    let written = std::fs::read_to_string(&identities).expect("identities.yaml");
    std::fs::write(
        &identities,
        written.replace(
            "  - name: demo\n",
            "  - name: demo\n    cost_ceiling_usd_per_day: 5\n",
        ),
    )
    .expect("write identities.yaml");
    let mut ids = Vec::new();
    for (title, scenario) in [
        ("Forged report", "polyphony-fake: forge-result"),
        (
            "Absurd cost",
            "polyphony-fake: forge-cost\npolyphony-fake-cost: 1000000",
        ),
        ("Plain run", "polyphony-fake: succeed"),
    ] {
        ids.push(home.enqueue(&origin, &body_with(scenario), title).await);
    }
    let mut daemon = home.start(&["daemon"]);
    let log = || daemon_log(&home);
    let mut costs = Vec::new();
    for id in &ids {
        let v = home
            .wait_for(id, Duration::from_secs(90), &log, |v| {
                matches!(state(v), "LANDED" | "FAILED" | "BLOCKED")
            })
            .await;
        assert_eq!(state(&v), "LANDED", "{id}: {v}");
        let a = &attempts(&v)[0];
        costs.push(a["cost_usd"].as_f64().expect("a cost"));
        if id == &ids[1] {
            let reason = a["reason"].as_str().unwrap_or_default();
            assert!(reason.contains("max_cost_usd_per_attempt"), "{reason}");
            let out = home.run(&["status", id]).await;
            assert!(
                text(&out.stdout).contains("max_cost_usd_per_attempt"),
                "status shows the warning: {}",
                text(&out.stdout)
            );
        }
    }
    assert_eq!(
        costs,
        vec![0.0421, 1.0, 0.0421],
        "forged line ignored, absurd cost clamped"
    );
    daemon.signal(libc::SIGTERM);
    let status = daemon.wait(Duration::from_secs(20)).await;
    assert!(status.success(), "{}", daemon.log());
    assert!(home.containers().is_empty(), "{:?}", home.containers());
}

/// Issue 11 "resource caps": an agent that floods its output and one that fills the
/// workspace are killed at the configured caps; each attempt ends `failed` with the reason
/// in `status`, nothing is pushed, no container is left and the daemon stops cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flooding_and_filling_agents_are_killed_at_their_caps() {
    let Some(image) = image().await else { return };
    let origin = Origin::new();
    let home = Home::new(&image, Conf::default(), None);
    let config = home.path.join("config.yaml");
    let text_conf = std::fs::read_to_string(&config).expect("config.yaml");
    std::fs::write(
        &config,
        text_conf
            .replace("max_attempts: 3", "max_attempts: 1")
            .replace(
                "  cpus: 1\n",
                "  cpus: 1\n  max_output: 1m\n  max_workspace_size: 8m\n",
            ),
    )
    .expect("write config.yaml");
    let flood = home
        .enqueue(&origin, &body_with("polyphony-fake: flood"), "Flood")
        .await;
    let fill = home
        .enqueue(
            &origin,
            &body_with("polyphony-fake: fill-workspace\npolyphony-fake-fill-mb: 32"),
            "Fill",
        )
        .await;
    let mut daemon = home.start(&["daemon"]);
    let log = || daemon_log(&home);
    for (id, why) in [
        (&flood, "container.max_output"),
        (&fill, "container.max_workspace_size"),
    ] {
        let v = home
            .wait_for(id, Duration::from_secs(90), &log, |v| {
                matches!(state(v), "BLOCKED" | "FAILED" | "LANDED")
            })
            .await;
        assert_ne!(state(&v), "LANDED", "{id}");
        let a = &attempts(&v)[0];
        assert_eq!(a["status"], "failed", "{a:#}");
        let reason = a["reason"].as_str().unwrap_or_default();
        assert!(reason.contains(why), "{id}: {reason}");
        let out = home.run(&["status", id]).await;
        assert!(text(&out.stdout).contains(why), "{}", text(&out.stdout));
    }
    let transcripts: u64 = walk_bytes(&home.path.join("transcripts"));
    assert!(
        transcripts < 3 * 1024 * 1024,
        "transcripts hold {transcripts} bytes"
    );
    assert!(origin.branches().is_empty(), "nothing is pushed");
    daemon.signal(libc::SIGTERM);
    let status = daemon.wait(Duration::from_secs(20)).await;
    assert!(status.success(), "{}", daemon.log());
    assert!(home.containers().is_empty(), "{:?}", home.containers());
}

fn walk_bytes(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if meta.is_dir() {
        std::fs::read_dir(path)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| walk_bytes(&e.path()))
            .sum()
    } else {
        meta.len()
    }
}

// ------------------------------------------------ permanent failures and `retry` (issue 12)

/// A tag no engine has, unique to this home; `config.yaml` points the workers at it.
fn use_missing_image(home: &Home, image: &str) -> String {
    let tag = format!("polyphony-missing-{}:not-built", &home.label[..8]);
    let path = home.path.join("config.yaml");
    let conf = std::fs::read_to_string(&path).expect("config.yaml");
    std::fs::write(
        &path,
        conf.replace(&format!("image: {image}"), &format!("image: {tag}")),
    )
    .expect("config.yaml");
    tag
}

/// A missing image is permanent: BLOCKED after one attempt with no backoff wait, the fix
/// named; `retry` then makes generation 2 (the old record untouched), which lands once the
/// image exists. Retrying the BLOCKED task again is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_image_blocks_at_once_and_retry_lands_once_built() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let origin = Origin::new();
    let home = Home::new(&image, Conf::default(), None);
    let missing = use_missing_image(&home, &image);
    let id = home
        .enqueue(&origin, &body_with("polyphony-fake: succeed"), "Fix add()")
        .await;

    let t0 = Instant::now();
    let out = home.run(&["spawn", "--task", &id]).await;
    let took = t0.elapsed();
    assert_eq!(out.status.code(), Some(1), "spawn: {}", output(&out));
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("waiting"), "no backoff wait: {stderr}");
    assert!(
        took < Duration::from_secs(8),
        "one attempt, no wait: {took:?}"
    );
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&format!("fix: build the image: `docker build -t {missing}"))
            && stdout.contains(&format!("polyphony retry {id}")),
        "{stdout}"
    );
    let v = home.task(&id).await;
    assert_eq!(state(&v), "BLOCKED");
    assert_eq!(v["task"]["attempts"], 1);
    assert_eq!(v["task"]["failures"], 1);
    assert_eq!(v["generation"], 1);
    assert!(
        v["retried_as"].is_null() && v["retry_of"].is_null(),
        "{v:#}"
    );
    let a = attempts(&v);
    assert_eq!(a.len(), 1);
    assert!(
        a[0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("permanent, not retried")),
        "{:#}",
        a[0]
    );

    let _built = TagGuard::create(&image, &missing);
    let out = home.run(&["retry", &id, "--json"]).await;
    assert!(out.status.success(), "retry: {}", output(&out));
    let r: Value = serde_json::from_slice(&out.stdout).expect("retry --json");
    let next = format!("{id}.2");
    assert_eq!(r["retried"][0]["from"], id.as_str(), "{r:#}");
    assert_eq!(r["retried"][0]["task"], next.as_str(), "{r:#}");
    assert_eq!(r["retried"][0]["generation"], 2, "{r:#}");
    let old = home.task(&id).await;
    assert_eq!(old["retried_as"], next.as_str());
    assert_eq!(
        old["transitions"], v["transitions"],
        "the old record is untouched"
    );
    assert_eq!(old["attempts"], v["attempts"]);
    assert_eq!(old["task"], v["task"]);

    let out = home.run(&["spawn", "--task", &next]).await;
    assert!(out.status.success(), "spawn {next}: {}", output(&out));
    let w = home.task(&next).await;
    assert_eq!(state(&w), "LANDED");
    assert_eq!(w["retry_of"], id.as_str());
    assert_eq!(w["generation"], 2);
    let branches = origin.branches();
    assert_eq!(branches, vec![format!("polyphony/{next}-a1")]);
    assert!(origin
        .show(&format!("{}:calc.sh", branches[0]))
        .contains("a + b"));

    let out = home.run(&["retry", &id]).await;
    assert_eq!(out.status.code(), Some(2), "{}", output(&out));
    assert!(text(&out.stderr).contains("LANDED"), "{}", output(&out));
    let out = home.run(&["status"]).await;
    assert!(
        text(&out.stdout).contains(&format!("retried as {next}")),
        "{}",
        output(&out)
    );
    assert!(home.containers().is_empty(), "containers left behind");
    println!("missing_image_retry: {:?}", started.elapsed());
}

/// An agent that is not logged in is permanent for that agent only: the chain's next agent
/// takes over at once, without a failure counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_not_logged_in_falls_back_to_the_next_agent() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let origin = Origin::new();
    let home = Home::new(&image, Conf::default(), None);
    let id = home
        .enqueue(
            &origin,
            &body_with("polyphony-fake[claude]: not-logged-in\npolyphony-fake[codex]: succeed"),
            "Fix add()",
        )
        .await;
    let out = home.run(&["spawn", "--task", &id]).await;
    assert!(out.status.success(), "spawn: {}", output(&out));
    assert!(!text(&out.stderr).contains("waiting"), "{}", output(&out));
    let v = home.task(&id).await;
    assert_eq!(state(&v), "LANDED");
    assert_eq!(v["task"]["failures"], 0);
    let a = attempts(&v);
    assert_eq!(a.len(), 2, "{a:#?}");
    assert_eq!(
        (a[0]["agent"].as_str(), a[1]["agent"].as_str()),
        (Some("claude"), Some("codex"))
    );
    assert!(
        a[0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("run `claude` and `/login` on the host")),
        "{:#}",
        a[0]
    );
    println!("not_logged_in_fallback: {:?}", started.elapsed());
}

/// A BLOCKED issue labelled `agent-ready` again comes back in the daemon's poll as exactly
/// one new generation, which lands as the issue's one pull request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relabelling_a_blocked_issue_brings_it_back_once() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let fake = FakeGithub::start().await;
    let origin = Origin::new();
    let repo = github_repo(&fake, "calc-relabel", &origin);
    let n = ready_issue(
        &fake,
        &repo,
        "Fix add(): it subtracts",
        &body_with("polyphony-fake: succeed"),
    );
    let home = polling_home(&image, &fake, &repo);
    let missing = use_missing_image(&home, &image);
    let id = format!("{repo}#{n}");
    let next = format!("{id}.2");
    let mut daemon = home.start(&["daemon"]);
    let log = || daemon_log(&home);
    let v = home
        .wait_for(&id, Duration::from_secs(60), &log, |v| {
            state(v) == "BLOCKED"
        })
        .await;
    assert_eq!(v["task"]["attempts"], 1, "{v:#}");
    // BLOCKED is stored first, then reported (issue 19): wait for the report.
    wait_until(
        Duration::from_secs(20),
        "the blocked label and comment",
        || format!("{:?}\n{}", fake.issue_labels(&repo, n), log()),
        || {
            fake.issue_labels(&repo, n)
                .iter()
                .any(|l| l == "agent-blocked")
                && count_containing(&fake.comments(&repo, n), "polyphony:blocked") > 0
        },
    )
    .await;
    let labels = fake.issue_labels(&repo, n);
    assert!(labels.iter().any(|l| l == "agent-blocked"), "{labels:?}");
    let comments = fake.comments(&repo, n);
    let blocked: Vec<&String> = comments
        .iter()
        .filter(|c| c.contains("polyphony:blocked"))
        .collect();
    assert_eq!(blocked.len(), 1, "{comments:#?}");
    assert!(blocked[0].contains("build the image"), "{}", blocked[0]);
    // Polls go on; nothing comes back without a person.
    wait_for_polls(&fake, 3, &log).await;
    assert!(
        home.db()
            .query_row("SELECT COUNT(*) FROM tasks", [], |r| r.get::<_, i64>(0))
            .expect("count")
            == 1
    );

    let _built = TagGuard::create(&image, &missing);
    fake.unlabel_issue(&repo, n, "agent-blocked", "maintainer");
    fake.label_issue(&repo, n, "agent-ready", "maintainer");
    let w = home
        .wait_for(&next, Duration::from_secs(90), &log, |v| {
            state(v) == "LANDED"
        })
        .await;
    assert_eq!(w["retry_of"], id.as_str());
    // Several more polls: no third generation, the old record as it was.
    wait_for_polls(&fake, 4, &log).await;
    let ids: Vec<String> = home
        .tasks()
        .await
        .iter()
        .map(|t| t["id"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(ids, vec![next.clone(), id.clone()]);
    let old = home.task(&id).await;
    assert_eq!(state(&old), "BLOCKED");
    assert_eq!(old["retried_as"], next.as_str());
    assert_eq!(old["transitions"], v["transitions"]);
    let pulls = fake.pulls(&repo);
    assert_eq!(pulls.len(), 1, "{pulls:#?}");
    assert!(
        pulls[0].head.contains(&format!("_{n}.2-")),
        "one branch per generation: {pulls:#?}"
    );
    let labels = fake.issue_labels(&repo, n);
    assert!(labels.iter().any(|l| l == "agent-landed"), "{labels:?}");
    daemon.signal(libc::SIGTERM);
    let status = daemon.wait(Duration::from_secs(30)).await;
    assert!(status.success(), "daemon: {status:?}\n{}", daemon.log());
    assert!(home.containers().is_empty(), "containers left behind");
    println!("relabel_blocked_issue: {:?}", started.elapsed());
}

/// `polyphony retry` of a BLOCKED issue labels it ready again (blocked label off), and the
/// new generation claims and lands it; the blocked comment says how to come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_of_a_blocked_issue_relabels_it_and_lands() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let fake = FakeGithub::start().await;
    let origin = Origin::new();
    let repo = github_repo(&fake, "calc-retry", &origin);
    let n = ready_issue(
        &fake,
        &repo,
        "Fix add(): it subtracts",
        &body_with("polyphony-fake: succeed"),
    );
    let home = Home::new(&image, Conf::default(), Some(&fake));
    let missing = use_missing_image(&home, &image);
    let id = format!("{repo}#{n}");
    let out = home.run(&["spawn", &id]).await;
    assert_eq!(out.status.code(), Some(1), "spawn: {}", output(&out));
    let comments = fake.comments(&repo, n);
    assert!(
        comments.iter().any(
            |c| c.contains("polyphony:blocked") && c.contains(&format!("polyphony retry {id}"))
        ),
        "{comments:#?}"
    );
    let out = home.run(&["spawn", &id]).await;
    assert!(
        text(&out.stderr).contains(&format!("polyphony retry {id}")),
        "{}",
        output(&out)
    );

    let _built = TagGuard::create(&image, &missing);
    let out = home.run(&["retry", "--blocked"]).await;
    assert!(out.status.success(), "retry: {}", output(&out));
    let next = format!("{id}.2");
    assert!(text(&out.stdout).contains(&next), "{}", output(&out));
    let labels = fake.issue_labels(&repo, n);
    assert!(labels.iter().any(|l| l == "agent-ready"), "{labels:?}");
    assert!(!labels.iter().any(|l| l == "agent-blocked"), "{labels:?}");
    // Nothing left to retry.
    let out = home.run(&["retry", "--blocked", "--json"]).await;
    assert!(out.status.success(), "{}", output(&out));
    let r: Value = serde_json::from_slice(&out.stdout).expect("retry --json");
    assert_eq!(r["retried"].as_array().map(Vec::len), Some(0), "{r:#}");

    let out = home.run(&["spawn", "--task", &next]).await;
    assert!(out.status.success(), "spawn {next}: {}", output(&out));
    assert_eq!(fake.pulls(&repo).len(), 1);
    let labels = fake.issue_labels(&repo, n);
    assert!(labels.iter().any(|l| l == "agent-landed"), "{labels:?}");
    println!("retry_blocked_issue: {:?}", started.elapsed());
}

// ------------------------------------------------------------ issue 19: crash windows
//
// Each test arms one failpoint (`POLYPHONY_FAILPOINT`, src/failpoint.rs) in a first daemon,
// which then kills itself with SIGKILL at exactly that point, and lets a second daemon
// (unarmed) finish the work. The chaos test kills at random points and moments.

/// Starts `polyphony ARGS` on `home` with the failpoint `point` armed.
fn start_armed(home: &Home, args: &[&str], point: &str) -> Daemon {
    let mut cmd = home.cmd(args);
    cmd.env(polyphony::failpoint::ENV, point);
    home.start_cmd(cmd, args)
}

/// Waits for an armed daemon to die at its failpoint (SIGKILL, the point named in its log).
async fn died_at(daemon: &mut Daemon, point: &str) {
    use std::os::unix::process::ExitStatusExt;
    let status = daemon.wait(Duration::from_secs(150)).await;
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "expected a kill at `{point}`: {status:?}\n{}",
        daemon.log()
    );
    let name = point.split('@').next().unwrap_or(point);
    assert!(
        daemon.log().contains(&format!("failpoint `{name}`")),
        "{}",
        daemon.log()
    );
}

/// Rewrites `max_attempts` in the home's config.yaml.
fn set_max_attempts(home: &Home, n: u32) {
    let path = home.path.join("config.yaml");
    let text = std::fs::read_to_string(&path).expect("config.yaml");
    assert!(text.contains("max_attempts: 3"), "{text}");
    std::fs::write(
        &path,
        text.replace("max_attempts: 3", &format!("max_attempts: {n}")),
    )
    .expect("config.yaml");
}

/// The `agent-*` labels of an issue, sorted.
fn agent_labels(fake: &FakeGithub, repo: &str, n: u64) -> Vec<String> {
    let mut labels: Vec<String> = fake
        .issue_labels(repo, n)
        .into_iter()
        .filter(|l| l.starts_with("agent-"))
        .collect();
    labels.sort();
    labels
}

/// Hidden markers (`<!-- polyphony:… -->`) that appear in more than one comment.
fn duplicate_markers(comments: &[String]) -> Vec<String> {
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    for c in comments {
        for (start, _) in c.match_indices("<!-- polyphony:") {
            let rest = &c[start..];
            let end = rest.find("-->").map_or(rest.len(), |e| e + 3);
            *seen.entry(rest[..end].to_string()).or_default() += 1;
        }
    }
    seen.into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(m, _)| m)
        .collect()
}

/// Window 1: killed between the two label writes of the claim. The restart recognises
/// its own claim (marker and store), finishes the label swap and lands; the issue is never
/// treated as released by someone else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_19_kill_between_the_claim_labels_still_lands() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let fake = FakeGithub::start().await;
    let origin = Origin::new();
    let repo = github_repo(&fake, "calc-fp-claim", &origin);
    let n = ready_issue(
        &fake,
        &repo,
        "Fix add()",
        &body_with("polyphony-fake: succeed"),
    );
    let home = polling_home(&image, &fake, &repo);
    let mut first = start_armed(&home, &["daemon"], "claim-labels");
    died_at(&mut first, "claim-labels").await;
    let labels = agent_labels(&fake, &repo, n);
    assert!(
        !labels.is_empty(),
        "no instant without a label: the issue carries neither ready nor claimed"
    );
    let mut second = home.start(&["daemon", "--exit-when-idle"]);
    let status = second.wait(Duration::from_secs(150)).await;
    assert!(status.success(), "daemon: {}", second.log());
    assert_landed_once(&home, &fake, &repo, n, &origin).await;
    let v = home.task(&format!("{repo}#{n}")).await;
    assert_eq!(v["task"]["failures"], 0);
    assert_eq!(agent_labels(&fake, &repo, n), vec!["agent-landed"]);
    let comments = fake.comments(&repo, n);
    assert!(duplicate_markers(&comments).is_empty(), "{comments:#?}");
    println!("issue_19_claim_labels: {:?}", started.elapsed());
}

/// Window 2: killed after the task was committed BLOCKED, before the blocked comment and
/// labels. The restart finishes the pending report: one blocked comment, the blocked label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_19_kill_before_the_blocked_report_still_reports() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let fake = FakeGithub::start().await;
    let origin = Origin::new();
    let repo = github_repo(&fake, "calc-fp-blocked", &origin);
    let n = ready_issue(
        &fake,
        &repo,
        "Fix add() (never right)",
        "`add 2 3` prints -1.\n\npolyphony-fake: fail-tests\n",
    );
    let home = polling_home(&image, &fake, &repo);
    set_max_attempts(&home, 1);
    let mut first = start_armed(&home, &["daemon"], "blocked-report");
    died_at(&mut first, "blocked-report").await;
    let id = format!("{repo}#{n}");
    assert_eq!(state(&home.task(&id).await), "BLOCKED");
    let mut second = home.start(&["daemon", "--exit-when-idle"]);
    let status = second.wait(Duration::from_secs(150)).await;
    assert!(status.success(), "daemon: {}", second.log());
    let comments = fake.comments(&repo, n);
    assert_eq!(
        count_containing(&comments, "polyphony:blocked"),
        1,
        "{comments:#?}\n{}",
        daemon_log(&home)
    );
    assert_eq!(agent_labels(&fake, &repo, n), vec!["agent-blocked"]);
    assert!(duplicate_markers(&comments).is_empty(), "{comments:#?}");
    let v = home.task(&id).await;
    assert_eq!(v["task"]["failures"], 1);
    assert!(home.containers().is_empty());
    println!("issue_19_blocked_report: {:?}", started.elapsed());
}

/// Window 3: killed after `docker create`, before the container was recorded (issue 19)
/// or started. The restart finds the created container by its labels, records and starts
/// it (issue 29): the same container runs the attempt, which lands as the task's only
/// attempt, and no failure is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_19_kill_after_container_create_is_not_a_failure() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let origin = Origin::new();
    let home = Home::new(&image, Conf::default(), None);
    let id = home
        .enqueue(&origin, &body_with("polyphony-fake: succeed"), "Fix add()")
        .await;
    let mut first = start_armed(&home, &["daemon"], "container-created");
    died_at(&mut first, "container-created").await;
    let created = home.containers();
    assert_eq!(created.len(), 1, "the created container outlives the kill");
    let mut second = home.start(&["daemon", "--exit-when-idle", "--json"]);
    let status = second.wait(Duration::from_secs(150)).await;
    assert!(status.success(), "daemon: {}", second.log());
    let summary = json_summary(&second, "resumed");
    assert_eq!(summary["resumed"], 1, "the attempt went on: {summary}");
    assert_eq!(
        summary["attempts"], 0,
        "no new attempt was started: {summary}"
    );
    let v = home.task(&id).await;
    assert_eq!(state(&v), "LANDED", "{}", daemon_log(&home));
    assert_eq!(v["task"]["failures"], 0, "a kill is not a failure");
    assert_eq!(
        v["task"]["attempts"], 1,
        "one attempt, the one created before the kill"
    );
    let a = attempts(&v);
    assert_eq!(a.len(), 1, "{a:#?}");
    assert_eq!(a[0]["status"], "succeeded", "{a:#?}");
    assert_eq!(
        a[0]["container_id"].as_str(),
        Some(created[0].as_str()),
        "the container created before the kill ran the attempt: {a:#?}"
    );
    assert!(home.containers().is_empty(), "containers left behind");
    println!("issue_19_container_created: {:?}", started.elapsed());
}

/// Window 4: killed right after an attempt was recorded FAILED. The retry time is written
/// with the state, so the restart retries when due and lands; the one real failure is
/// counted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_19_kill_after_failed_keeps_the_retry_time() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let origin = Origin::new();
    let home = Home::new(
        &image,
        Conf {
            agent: "gemini",
            ..Conf::default()
        },
        None,
    );
    let id = home
        .enqueue(
            &origin,
            &body_with("polyphony-fake: fix-on-retry"),
            "Fix add() (needs a repair round)",
        )
        .await;
    let mut first = start_armed(&home, &["daemon"], "failed");
    died_at(&mut first, "failed").await;
    let v = home.task(&id).await;
    assert_eq!(state(&v), "FAILED");
    assert!(
        !v["task"]["next_attempt_at"].is_null(),
        "FAILED without a retry time is stuck forever: {:#}",
        v["task"]
    );
    let mut second = home.start(&["daemon", "--exit-when-idle"]);
    let status = second.wait(Duration::from_secs(150)).await;
    assert!(status.success(), "daemon: {}", second.log());
    let v = home.task(&id).await;
    assert_eq!(state(&v), "LANDED", "{}", daemon_log(&home));
    assert_eq!(v["task"]["failures"], 1);
    assert_eq!(attempts(&v).len(), 2);
    assert!(home.containers().is_empty());
    println!("issue_19_failed_retry_time: {:?}", started.elapsed());
}

/// The landing's label swap: killed between adding `agent-landed` and removing
/// `agent-claimed`, the issue still carries a label, and the restart (verification again,
/// then the idempotent landing) leaves exactly `agent-landed`, one PR, one comment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_19_kill_between_the_landing_labels_lands_once() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let fake = FakeGithub::start().await;
    let origin = Origin::new();
    let repo = github_repo(&fake, "calc-fp-land", &origin);
    let n = ready_issue(
        &fake,
        &repo,
        "Fix add()",
        &body_with("polyphony-fake: succeed"),
    );
    let home = polling_home(&image, &fake, &repo);
    let mut first = start_armed(&home, &["daemon"], "land-labels");
    died_at(&mut first, "land-labels").await;
    assert!(
        !agent_labels(&fake, &repo, n).is_empty(),
        "no instant without a label"
    );
    let mut second = home.start(&["daemon", "--exit-when-idle"]);
    let status = second.wait(Duration::from_secs(150)).await;
    assert!(status.success(), "daemon: {}", second.log());
    assert_landed_once(&home, &fake, &repo, n, &origin).await;
    assert_eq!(agent_labels(&fake, &repo, n), vec!["agent-landed"]);
    let comments = fake.comments(&repo, n);
    assert!(duplicate_markers(&comments).is_empty(), "{comments:#?}");
    println!("issue_19_landing_labels: {:?}", started.elapsed());
}

/// Issue 24: killed right after the pull request was opened, then after the landed comment,
/// then after the landed label — four daemons in a row at each point — the attempt's
/// pending landing is finished at every start before anything else: the pull request is
/// found (never opened again), the comment found by its marker, and no restart is counted
/// against the attempt (the old resume cap gave it up at the fourth and attempt 2 opened a
/// second pull request).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_24_kills_after_the_pr_comment_and_labels_never_duplicate_the_landing() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let fake = FakeGithub::start().await;
    let origin = Origin::new();
    let repo = github_repo(&fake, "calc-fp-pr", &origin);
    let n = ready_issue(
        &fake,
        &repo,
        "Fix add()",
        &body_with("polyphony-fake: succeed"),
    );
    let home = polling_home(&image, &fake, &repo);
    let id = format!("{repo}#{n}");
    for point in ["land-pr", "land-comment", "land-labels"] {
        for _ in 0..4 {
            let mut daemon = start_armed(&home, &["daemon"], point);
            died_at(&mut daemon, point).await;
            assert_eq!(fake.pulls(&repo).len(), 1, "{point}: {}", daemon.log());
        }
    }
    let mut last = home.start(&["daemon", "--exit-when-idle"]);
    let status = last.wait(Duration::from_secs(150)).await;
    assert!(status.success(), "daemon: {}", last.log());
    assert_landed_once(&home, &fake, &repo, n, &origin).await;
    let v = home.task(&id).await;
    assert_eq!(v["task"]["failures"], 0, "{:#}", v["attempts"]);
    assert_eq!(attempts(&v).len(), 1, "{:#}", v["attempts"]);
    assert_eq!(agent_labels(&fake, &repo, n), vec!["agent-landed"]);
    let comments = fake.comments(&repo, n);
    assert!(duplicate_markers(&comments).is_empty(), "{comments:#?}");
    println!("issue_24_landing_restarts: {:?}", started.elapsed());
}

/// Issue 24: a daemon that dies while handling an attempt's output (the `agent-output`
/// failpoint: the first line it has not stored kills it, as a line the parser chokes on
/// would) strikes that attempt at each start; after three strikes in a row the attempt is
/// given up as an interruption — not the agent's failure — and the next attempt runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_24_a_daemon_dying_on_an_attempts_output_gives_it_up_without_a_failure() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let origin = Origin::new();
    let home = Home::new(&image, Conf::default(), None);
    let id = home
        .enqueue(&origin, &body_with("polyphony-fake: succeed"), "Fix add()")
        .await;
    let strikes = || -> Option<String> {
        home.db()
            .query_row(
                "SELECT value FROM kv WHERE key = ?1",
                [format!("strikes:{id}:1")],
                |r| r.get(0),
            )
            .ok()
    };
    // The first run, then three resumes that strike, then the give-up (whose daemon dies
    // on attempt 2's first line in turn).
    for round in 0..5 {
        let mut daemon = start_armed(&home, &["daemon"], "agent-output");
        died_at(&mut daemon, "agent-output").await;
        let expected = match round {
            0 => None,
            1..=3 => Some(round.to_string()),
            _ => strikes(),
        };
        assert_eq!(strikes(), expected, "round {round}: {}", daemon.log());
        let v = home.task(&id).await;
        assert_eq!(
            v["task"]["failures"], 0,
            "round {round}: {:#}",
            v["attempts"]
        );
    }
    let mut last = home.start(&["daemon", "--exit-when-idle"]);
    let status = last.wait(Duration::from_secs(150)).await;
    assert!(status.success(), "daemon: {}", last.log());
    let v = home.task(&id).await;
    assert_eq!(
        state(&v),
        "LANDED",
        "{:#}\n{}",
        v["attempts"],
        daemon_log(&home)
    );
    assert_eq!(v["task"]["failures"], 0, "{:#}", v["attempts"]);
    let a = attempts(&v);
    assert_eq!(a.len(), 2, "{a:#?}");
    assert_eq!(a[0]["status"], "crash", "{a:#?}");
    let why = a[0]["reason"].as_str().unwrap_or("");
    assert!(
        why.contains("given up") && why.contains("not counted as the agent's failure"),
        "{why}"
    );
    assert_eq!(a[1]["status"], "succeeded", "{a:#?}");
    assert!(home.containers().is_empty(), "containers left behind");
    println!("issue_24_output_strikes: {:?}", started.elapsed());
}

/// A small seeded generator (splitmix64): the chaos schedule replays from its seed.
struct ChaosRng(u64);

impl ChaosRng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// Every point a chaos round may arm (the four windows and the label swaps around them).
const CHAOS_POINTS: &[&str] = &[
    "claim-labels",
    "container-created",
    "failed",
    "blocked-report",
    "block-labels",
    "land-pr",
    "land-comment",
    "land-labels",
];

/// Chaos (issue 19): eight issues of mixed outcomes (five land, three can never pass their
/// checks) go through daemons killed with SIGKILL again and again — at a random armed
/// failpoint (claim, container, failure, block and land paths) or after a random time
/// (mid-clone, mid-run, mid-verification, mid-push) — then one daemon runs them to the end.
/// Every issue must end LANDED or BLOCKED with exactly one PR or blocked report, the right
/// labels, no failure counted for a kill, no duplicate comment or event, no pending intent,
/// and no container after `cleanup`. The seed is printed; `POLYPHONY_CHAOS_SEED` replays it
/// (timing under load varies, the schedule does not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_19_chaos_kill_9_at_random_moments_loses_nothing() -> Result<(), Told> {
    let Some(image) = image().await else {
        return Ok(());
    };
    let started = Instant::now();
    let seed = std::env::var("POLYPHONY_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(19, |d| d.as_nanos() as u64)
        });
    println!("chaos seed: {seed} (replay with POLYPHONY_CHAOS_SEED={seed})");
    let mut rng = ChaosRng(seed);
    let fake = FakeGithub::start().await;
    let origin = Origin::new();
    let repo = github_repo(&fake, "calc-chaos", &origin);
    let mut issues: Vec<(u64, bool)> = Vec::new();
    for i in 1..=5 {
        let scenario = if i % 2 == 0 {
            "polyphony-fake: slow\npolyphony-fake-sleep: 2"
        } else {
            "polyphony-fake: succeed"
        };
        let n = ready_issue(
            &fake,
            &repo,
            &format!("Fix add() {i}"),
            &body_with(scenario),
        );
        issues.push((n, true));
    }
    for i in 1..=3 {
        let n = ready_issue(
            &fake,
            &repo,
            &format!("Fix add() (never right) {i}"),
            "`add 2 3` prints -1.\n\npolyphony-fake: fail-tests\n",
        );
        issues.push((n, false));
    }
    let home = polling_home(&image, &fake, &repo);
    set_max_attempts(&home, 2);

    let mut kills = 0;
    let mut schedule: Vec<String> = Vec::new();
    for round in 0..14 {
        if started.elapsed() > Duration::from_secs(75) {
            break;
        }
        let armed = rng.range(0, 9) < 6;
        let point = if armed {
            let p = CHAOS_POINTS[rng.range(0, CHAOS_POINTS.len() as u64 - 1) as usize];
            Some(format!("{p}@{}", rng.range(1, 2)))
        } else {
            None
        };
        // An armed daemon lives long enough to reach its point, most of the time.
        let lifetime = if armed {
            Duration::from_millis(rng.range(4000, 12000))
        } else {
            Duration::from_millis(rng.range(300, 5000))
        };
        let mut daemon = match &point {
            Some(p) => start_armed(&home, &["daemon"], p),
            None => home.start(&["daemon"]),
        };
        let how = tokio::select! {
            status = daemon.child.wait() => format!("died at its failpoint ({:?})", status.ok()),
            _ = tokio::time::sleep(lifetime) => {
                let _ = daemon.child.start_kill();
                let _ = daemon.child.wait().await;
                format!("kill -9 after {lifetime:?}")
            }
        };
        kills += 1;
        schedule.push(format!("{round}: {point:?}, {how}"));
        let states: Vec<String> = {
            // A daemon killed before its first open committed the schema leaves a home
            // with no queue or no tables yet (the next daemon makes them): nothing to
            // count, and the test's look must not make the file itself.
            let db = home
                .path
                .join("queue.db")
                .exists()
                .then(|| home.db())
                .filter(|db| {
                    db.query_row(
                        "SELECT COUNT(*) > 0 FROM sqlite_master WHERE name = 'tasks'",
                        [],
                        |r| r.get::<_, bool>(0),
                    )
                    .expect("sqlite_master")
                });
            let Some(db) = db else {
                println!("chaos round {round}: point {point:?}, {how}; no queue yet");
                continue;
            };
            let mut stmt = db
                .prepare("SELECT state, COUNT(*) FROM tasks GROUP BY state ORDER BY state")
                .expect("prepare");
            stmt.query_map([], |r| {
                Ok(format!(
                    "{}={}",
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)?
                ))
            })
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows")
        };
        println!(
            "chaos round {round}: point {point:?}, {how}; tasks {}",
            states.join(" ")
        );
    }

    let checked = AssertUnwindSafe(chaos_outcome(&home, &fake, &repo, &issues, seed))
        .catch_unwind()
        .await;
    if let Err(panic) = checked {
        // The panic printed its whole message (the daemon's log) and a backtrace above.
        // A CI log keeps the tail of a failing run: the seed, the kills and the first
        // lines of what failed come last.
        let what = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        let head: Vec<String> = what
            .lines()
            .take(12)
            .map(|l| l.chars().take(300).collect())
            .collect();
        return Err(Told(format!(
            "chaos seed {seed} (replay with POLYPHONY_CHAOS_SEED={seed}); kills: {}\n{}",
            schedule.join("; "),
            head.join("\n")
        )));
    }
    println!(
        "issue_19_chaos: {kills} kills, seed {seed}, {:?}",
        started.elapsed()
    );
    Ok(())
}

/// A test's failure as text, shown as it is (a `String` error would be shown quoted, its
/// newlines escaped).
struct Told(String);

impl std::fmt::Debug for Told {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The chaos test's end: one daemon runs every issue to its end, then each must be LANDED
/// or BLOCKED exactly once (see the test).
async fn chaos_outcome(
    home: &Home,
    fake: &FakeGithub,
    repo: &str,
    issues: &[(u64, bool)],
    seed: u64,
) {
    let mut last = home.start(&["daemon", "--exit-when-idle"]);
    let status = last.wait(Duration::from_secs(180)).await;
    assert!(status.success(), "daemon: {}", daemon_log(home));
    let out = home.run(&["cleanup"]).await;
    assert!(out.status.success(), "cleanup: {}", output(&out));

    let context = || format!("seed {seed}\n{}", daemon_log(home));
    let pulls = fake.pulls(repo);
    for (n, lands) in issues {
        let id = format!("{repo}#{n}");
        let v = home.task(&id).await;
        let comments = fake.comments(repo, *n);
        let expected = if *lands { "LANDED" } else { "BLOCKED" };
        assert_eq!(
            state(&v),
            expected,
            "{id}: {}\n{comments:#?}\n{}",
            serde_json::to_string_pretty(&v["transitions"]).unwrap_or_default(),
            context()
        );
        assert!(
            duplicate_markers(&comments).is_empty(),
            "{id}: {comments:#?}"
        );
        let failed = attempts(&v)
            .iter()
            .filter(|a| a["status"] == "failed")
            .count() as u64;
        // Issue 24: a kill counts no failure and gives nothing up. Every failure counted is
        // an attempt that failed (the old rule let the fourth restart in one attempt give it
        // up as a failure; a restart the attempt did not cause is never counted).
        let given_up = attempts(&v)
            .iter()
            .filter(|a| a["reason"].as_str().is_some_and(|r| r.contains("given up")))
            .count();
        assert_eq!(
            given_up, 0,
            "{id}: a kill gave an attempt up: {:#}",
            v["attempts"]
        );
        assert_eq!(
            v["task"]["failures"].as_u64(),
            Some(failed),
            "{id}: a failure counted for a kill: {:#}",
            v["attempts"]
        );
        if *lands {
            assert_eq!(
                v["task"]["failures"].as_u64(),
                Some(0),
                "{id}: {:#}",
                v["attempts"]
            );
            let branch = v["landing"]["branch"].as_str().expect("landing branch");
            assert_eq!(
                pulls.iter().filter(|p| p.head == branch).count(),
                1,
                "{id}: {pulls:#?}"
            );
            assert_eq!(count_containing(&comments, "polyphony:landed"), 1, "{id}");
            assert_eq!(count_containing(&comments, "polyphony:blocked"), 0, "{id}");
            assert_eq!(agent_labels(fake, repo, *n), vec!["agent-landed"], "{id}");
        } else {
            assert_eq!(v["task"]["failures"], 2, "{id}: {:#}", v["attempts"]);
            assert_eq!(count_containing(&comments, "polyphony:blocked"), 1, "{id}");
            assert_eq!(count_containing(&comments, "polyphony:landed"), 0, "{id}");
            assert_eq!(agent_labels(fake, repo, *n), vec!["agent-blocked"], "{id}");
        }
    }
    assert_eq!(pulls.len(), 5, "{pulls:#?}");
    assert!(
        duplicate_seqs(home).is_empty(),
        "{:?}",
        duplicate_seqs(home)
    );
    let pending: i64 = home
        .db()
        .query_row(
            "SELECT COUNT(*) FROM intents WHERE done_at IS NULL",
            [],
            |r| r.get(0),
        )
        .expect("intents");
    assert_eq!(pending, 0, "pending intents left\n{}", context());
    assert!(
        home.containers().is_empty(),
        "containers left after cleanup"
    );
}

/// Issue 18: with `clone_mode: shared` (the default) the agent sees the mirror's object
/// directory read-only at the path its alternates name. Reading works; writing a file, adding
/// a loose object, "repacking" (a new pack renamed over the old one), truncating, chmod and
/// deleting all fail inside the container; the mirror's fsck stays clean and the attempt
/// still lands a complete branch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_cannot_write_repack_or_delete_the_shared_mirror() {
    let Some(image) = image().await else { return };
    let origin = Origin::new();
    let home = Home::new(&image, Conf::default(), None);
    let id = home
        .enqueue(
            &origin,
            &body_with("polyphony-fake: vandal-mirror"),
            "Fix add()",
        )
        .await;
    let out = home.run(&["spawn", "--task", &id]).await;
    assert!(out.status.success(), "spawn: {}", output(&out));
    let v = home.task(&id).await;
    assert_eq!(state(&v), "LANDED");

    let branches = origin.branches();
    assert_eq!(branches.len(), 1, "{branches:?}");
    let note = origin.show(&format!("{}:POLYPHONY_FAKE.md", branches[0]));
    let report = note
        .lines()
        .find(|l| l.contains("mirror vandal:"))
        .unwrap_or_else(|| panic!("no vandal report in {note}"));
    assert!(report.contains("read:done"), "{report}");
    for op in [
        "write",
        "loose",
        "repack",
        "truncate",
        "chmod",
        "delete",
        "delete-all",
    ] {
        assert!(
            report.contains(&format!(" {op}:refused")),
            "{op} was not refused: {report}"
        );
    }

    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .output()
            .expect("git");
        assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    let mirrors: Vec<PathBuf> = std::fs::read_dir(home.path.join("mirrors"))
        .expect("mirrors")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("objects").is_dir())
        .collect();
    assert_eq!(mirrors.len(), 1, "{mirrors:?}");
    let mirror = mirrors[0].display().to_string();
    git(&["--git-dir", &mirror, "fsck", "--full", "--strict"]);
    assert!(!mirrors[0].join("objects/polyphony-fake-was-here").exists());
    assert!(!mirrors[0].join("objects/ff").exists());
    let origin_dir = origin.path.display().to_string();
    git(&["--git-dir", &origin_dir, "fsck", "--full", "--strict"]);
}

/// Issue 11 "Scrubbing that holds": an agent that leaks its API key and the access token
/// of its mounted credential file as base64, base64url, hex, URL-encoded, wrapped base64,
/// split across two lines and across two writes of one line. None of those spellings may
/// reach the store (queue.db and its WAL), the transcripts, `logs` or the binary's output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaked_secret_encodings_never_reach_db_transcripts_or_logs() {
    use base64::Engine as _;
    let Some(image) = image().await else { return };
    let origin = Origin::new();
    let home = Home::new(&image, Conf::default(), None);
    let api_key = format!("pk-e2e-{}-Zq8/+r~x.y_9KpW3", std::process::id());
    let access = format!("sk-ant-oat01-e2e{}AbCdEf+/Gh", std::process::id());
    let login = home.dir.path().join("logins/claude");
    std::fs::write(
        login.join(".credentials.json"),
        format!(r#"{{"claudeAiOauth":{{"accessToken":"{access}","refreshToken":"rt-unused-0123456789","expiresAt":1767225600000}}}}"#),
    )
    .expect("credentials");
    std::fs::write(
        home.path.join("identities.yaml"),
        format!(
            "identities:\n  - name: demo\n    volumes:\n      claude: {}\n    api_keys:\n      FAKE_API_KEY: POLYPHONY_E2E_LEAKED_KEY\n",
            login.display()
        ),
    )
    .expect("identities.yaml");
    let id = home
        .enqueue(
            &origin,
            &body_with(
                "polyphony-fake: echo-secret-encoded\npolyphony-fake-echo: FAKE_API_KEY\npolyphony-fake-cat: .credentials.json",
            ),
            "Fix add()",
        )
        .await;
    let run = |args: &[&str]| {
        let mut cmd = home.cmd(args);
        cmd.env("POLYPHONY_E2E_LEAKED_KEY", &api_key)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        async move {
            let child = cmd.spawn().expect("spawn polyphony");
            tokio::time::timeout(RUN_LIMIT, child.wait_with_output())
                .await
                .expect("polyphony finished in time")
                .expect("wait")
        }
    };
    let spawned = run(&["spawn", "--task", &id]).await;
    let readable = run(&["logs", &id]).await.stdout;
    let raw = run(&["logs", &id, "--raw"]).await.stdout;
    assert!(text(&raw).contains("title  clear  end"), "{}", text(&raw));
    for printed in [&readable, &raw] {
        let printed = text(printed);
        assert!(
            !printed.contains(['\u{1b}', '\u{7}']),
            "logs passed a terminal control through:\n{printed}"
        );
    }
    let mut seen = vec![
        ("spawn output".to_string(), output(&spawned).into_bytes()),
        (
            "logs".to_string(),
            run(&["logs", &id, "--raw"]).await.stdout,
        ),
        ("logs (readable)".to_string(), readable),
        (
            "logs --json".to_string(),
            run(&["logs", &id, "--json"]).await.stdout,
        ),
    ];
    let v = home.task(&id).await;
    assert_eq!(
        v["attempts"][0]["status"],
        "succeeded",
        "{}",
        output(&spawned)
    );
    let logs_raw = text(&seen[1].1);
    assert!(
        logs_raw.contains("split ***") && logs_raw.contains("*** end"),
        "the split secret was not masked on both sides:\n{logs_raw}"
    );
    for shown in [
        "base64: ***",
        "base64url: ***",
        "hex: ***",
        "url: ***",
        "in base64 inside: ",
    ] {
        assert!(
            logs_raw.contains(shown),
            "the agent never printed `{shown}`:\n{logs_raw}"
        );
    }
    for name in ["queue.db", "queue.db-wal"] {
        if let Ok(bytes) = std::fs::read(home.path.join(name)) {
            seen.push((name.to_string(), bytes));
        }
    }
    let mut dirs = vec![home.path.join("transcripts")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                use std::os::unix::fs::PermissionsExt;
                let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
                assert_eq!(mode & 0o777, 0o600, "{}", path.display());
                seen.push((
                    path.display().to_string(),
                    std::fs::read(&path).expect("transcript"),
                ));
            }
        }
    }
    assert!(seen.len() >= 5, "no transcripts written: {seen:?}");
    for secret in [&api_key, &access] {
        let b64 = base64::engine::general_purpose::STANDARD_NO_PAD.encode(secret);
        let b64url = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret);
        let hex: String = secret.bytes().map(|b| format!("{b:02x}")).collect();
        let url: String = secret.bytes().map(|b| format!("%{b:02x}")).collect();
        let half = secret.len() / 2;
        let forms = [
            ("plain", secret.clone()),
            ("base64", b64[..b64.len() - 2].to_string()),
            ("base64url", b64url[..b64url.len() - 2].to_string()),
            ("hex", hex),
            ("url-encoded", url),
            ("first half", format!("split {}", &secret[..half])),
            ("second half", format!("{} end", &secret[half..])),
            ("chunked", format!("chunked {}", &secret[..half])),
        ];
        for (where_, bytes) in &seen {
            let haystack = String::from_utf8_lossy(bytes);
            for (form, needle) in &forms {
                assert!(
                    !haystack.contains(needle.as_str()),
                    "the secret ({form}) reached {where_}"
                );
            }
        }
    }
    assert!(home.containers().is_empty(), "containers left behind");
}

/// Issue 11 "Low": the agent's final message reaches the pull request body quoted and
/// defused: its closing keyword, @mention and hidden marker are gone, ours remain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_final_message_is_quoted_and_defused_in_the_pr_body() {
    let Some(image) = image().await else { return };
    let fake = FakeGithub::start().await;
    let origin = Origin::new();
    let repo = github_repo(&fake, "calc-final", &origin);
    let n = ready_issue(
        &fake,
        &repo,
        "Fix add(): it subtracts",
        &body_with(
            "polyphony-fake: succeed\npolyphony-fake-final: All done. Fixes #99, cc @octocat <!-- polyphony:landed task=x -->",
        ),
    );
    let home = Home::new(&image, Conf::default(), Some(&fake));
    let out = home.run(&["spawn", &format!("{repo}#{n}")]).await;
    assert!(out.status.success(), "spawn: {}", output(&out));
    let pulls = fake.pulls(&repo);
    assert_eq!(pulls.len(), 1, "{pulls:?}");
    let body = &pulls[0].body;
    assert!(
        body.contains("> All done. [closing keyword removed] issue 99, cc octocat"),
        "{body}"
    );
    assert!(
        !body.contains("@octocat") && !body.contains("#99"),
        "{body}"
    );
    assert!(!body.contains("polyphony:landed"), "{body}");
    assert_eq!(body.matches("Closes #").count(), 1, "{body}");
    assert!(body.contains(&format!("Closes #{n}")), "{body}");
}

/// Issue 11 "Low": the default identity names its own token variable, which is unset;
/// `GITHUB_TOKEN` holds a valid token for another account. `spawn` exits 2 naming the
/// identity's variable and touches nothing: a named account never becomes another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unset_identity_token_variable_is_an_error_not_a_fallback() {
    let Some(image) = image().await else { return };
    let fake = FakeGithub::start().await;
    let origin = Origin::new();
    let repo = github_repo(&fake, "calc-named", &origin);
    let n = ready_issue(
        &fake,
        &repo,
        "Fix add()",
        &body_with("polyphony-fake: succeed"),
    );
    let home = Home::new(&image, Conf::default(), Some(&fake));
    let identities = home.path.join("identities.yaml");
    let text_now = std::fs::read_to_string(&identities).expect("identities.yaml");
    std::fs::write(
        &identities,
        text_now.replace(
            "  - name: demo\n",
            "  - name: demo\n    github_token_env: POLYPHONY_E2E_UNSET_WORK_TOKEN\n",
        ),
    )
    .expect("write");
    let out = home.run(&["spawn", &format!("{repo}#{n}")]).await;
    assert_eq!(out.status.code(), Some(2), "{}", output(&out));
    let err = text(&out.stderr);
    assert!(err.contains("POLYPHONY_E2E_UNSET_WORK_TOKEN"), "{err}");
    assert!(!err.contains(&fake.token()), "the token leaked: {err}");
    assert_eq!(fake.issue_labels(&repo, n), vec!["agent-ready"]);
    assert!(fake.comments(&repo, n).is_empty());
}

/// Issue 24: with the workspace on a 1 MiB filesystem and a 3 MB file in the repository,
/// git's parallel checkout exits 0 without the file; the attempt went on, the commit
/// recorded the file as deleted and landed. Now the checkout is verified before the agent
/// starts: the task is BLOCKED at once (a full disk is no agent's fault and the next attempt
/// on it fails the same way), nothing lands, and once the disk has room `retry` lands with
/// the file intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_at_prepare_blocks_and_never_lands_a_deletion() {
    let Some(image) = image().await else { return };
    let origin = Origin::new();
    let big: String = (0..60_000).map(|i| format!("{i:049}\n")).collect();
    origin.commit_file("big.txt", &big, "a 3 MB file");
    let home = Home::new(&image, Conf::default(), None);
    let Some(disk) = support::tmpfs::Tmpfs::mount(&home.path.join("small"), "1m") else {
        return;
    };
    let config = home.path.join("config.yaml");
    let mut conf = std::fs::read_to_string(&config).expect("config.yaml");
    conf.push_str(&format!("workspace_root: {}/ws\n", disk.path().display()));
    std::fs::write(&config, conf).expect("config.yaml");
    let id = home
        .enqueue(&origin, &body_with("polyphony-fake: succeed"), "Fix add()")
        .await;

    let out = home.run(&["spawn", "--task", &id]).await;
    assert_eq!(out.status.code(), Some(1), "spawn: {}", output(&out));
    let v = home.task(&id).await;
    assert_eq!(state(&v), "BLOCKED", "{v:#}");
    assert_eq!(v["task"]["attempts"], 0, "no agent ran: {v:#}");
    let reason = v["transitions"]
        .as_array()
        .and_then(|t| t.last())
        .and_then(|t| t["reason"].as_str())
        .unwrap_or("")
        .to_string();
    assert!(
        reason.contains("big.txt")
            && reason.contains("permanent, not retried")
            && reason.contains("polyphony cleanup"),
        "names the lost file, the cause and the fix: {reason}"
    );
    assert!(
        origin.branches().is_empty(),
        "nothing landed: {:?}",
        origin.branches()
    );
    assert!(home.containers().is_empty(), "no agent ran on the cut tree");

    disk.resize("100m");
    let out = home.run(&["retry", &id, "--json"]).await;
    assert!(out.status.success(), "retry: {}", output(&out));
    let next = format!("{id}.2");
    let out = home.run(&["spawn", "--task", &next]).await;
    assert!(out.status.success(), "spawn {next}: {}", output(&out));
    assert_eq!(state(&home.task(&next).await), "LANDED");
    let branches = origin.branches();
    assert_eq!(branches.len(), 1, "{branches:?}");
    assert!(
        origin.show(&format!("{}:big.txt", branches[0])) == big,
        "the landed branch keeps the file whole"
    );
}

/// The last transition's reason.
fn last_reason(v: &Value) -> String {
    v["transitions"]
        .as_array()
        .and_then(|t| t.last())
        .and_then(|t| t["reason"].as_str())
        .unwrap_or("")
        .to_string()
}

/// Issue 29: `polyphony cancel` of a running attempt goes through the daemon: its
/// container is killed, the task is CANCELLED with no failure counted, who did it is
/// recorded, the issue is told once and its claim released (claimed and ready labels
/// off). The daemon runs on, and a second cancel is refused with exit 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_through_the_daemon_kills_the_attempt_and_releases_the_claim() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let fake = FakeGithub::start().await;
    let origin = Origin::new();
    let repo = github_repo(&fake, "calc-cancel", &origin);
    let n = ready_issue(
        &fake,
        &repo,
        "Fix add() very slowly",
        &body_with("polyphony-fake: slow\npolyphony-fake-sleep: 60"),
    );
    let home = polling_home(&image, &fake, &repo);
    let id = format!("{repo}#{n}");
    let mut daemon = start_until_running(&home, &id, &["daemon", "--json"]).await;
    let log = || daemon_log(&home);
    wait_until(Duration::from_secs(20), "the agent printed", log, || {
        progress_events(&home, &id) >= 1
    })
    .await;
    assert_eq!(home.containers().len(), 1, "one agent container runs");
    let asked = Instant::now();
    let out = home.run(&["cancel", &id, "--by", "alice", "--json"]).await;
    assert!(out.status.success(), "cancel: {}\n{}", output(&out), log());
    let answer: Value = serde_json::from_slice(&out.stdout).expect("cancel --json");
    assert_eq!(answer["state"], "CANCELLED", "{answer}");
    assert_eq!(answer["was"], "RUNNING", "{answer}");
    assert_eq!(answer["by"], "alice (cli)", "{answer}");
    assert_eq!(answer["pending"], false, "{answer}");
    assert!(
        asked.elapsed() < Duration::from_secs(20),
        "the cancel took {:?}",
        asked.elapsed()
    );
    wait_until(Duration::from_secs(10), "no container left", log, || {
        home.containers().is_empty()
    })
    .await;
    let v = home.task(&id).await;
    assert_eq!(state(&v), "CANCELLED");
    assert_eq!(
        v["task"]["failures"], 0,
        "a cancel is not the agent's failure"
    );
    assert!(v["task"]["next_attempt_at"].is_null());
    assert_eq!(last_reason(&v), "cancelled by alice (cli)");
    let a = attempts(&v);
    assert_eq!(a.len(), 1, "{a:#?}");
    assert_eq!(a[0]["status"], "cancelled", "{a:#?}");
    // The daemon tells the issue right after it settled the task.
    wait_until(
        Duration::from_secs(10),
        "the cancelled comment",
        log,
        || count_containing(&fake.comments(&repo, n), "polyphony:cancelled") > 0,
    )
    .await;
    let comments = fake.comments(&repo, n);
    assert_eq!(
        count_containing(&comments, "polyphony:cancelled"),
        1,
        "{comments:#?}"
    );
    assert!(
        comments.iter().any(|c| c.contains("alice (cli)")),
        "the comment names who: {comments:#?}"
    );
    let labels = fake.issue_labels(&repo, n);
    assert!(
        !labels
            .iter()
            .any(|l| l == "agent-ready" || l.contains("claimed") || l.contains("progress")),
        "the claim is released and the issue no longer offered: {labels:?}"
    );
    // Over: a second cancel is refused.
    let again = home.run(&["cancel", &id]).await;
    assert_eq!(again.status.code(), Some(2), "{}", output(&again));
    assert!(
        text(&again.stderr).contains("already CANCELLED"),
        "{}",
        output(&again)
    );
    // The daemon ran on; polls do not take the issue again.
    wait_for_polls(&fake, 2, &log).await;
    assert_eq!(state(&home.task(&id).await), "CANCELLED");
    daemon.signal(libc::SIGTERM);
    let status = daemon.wait(Duration::from_secs(20)).await;
    assert!(status.success(), "daemon: {}", daemon.log());
    println!("cancel_through_daemon: {:?}", started.elapsed());
}

/// Issue 29: with no daemon running (a SIGTERM left the attempt's container running for
/// the next start), `polyphony cancel` takes the home's lock and removes the container
/// itself; the next daemon start has nothing to re-attach or run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_without_a_daemon_removes_the_container_a_restart_would_reattach() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let origin = Origin::new();
    let home = Home::new(&image, Conf::default(), None);
    let id = home
        .enqueue(
            &origin,
            &body_with("polyphony-fake: slow\npolyphony-fake-sleep: 60"),
            "Fix add() very slowly",
        )
        .await;
    let mut daemon = start_until_running(&home, &id, &["daemon"]).await;
    let log = || daemon_log(&home);
    wait_until(Duration::from_secs(20), "the agent printed", log, || {
        progress_events(&home, &id) >= 1
    })
    .await;
    daemon.signal(libc::SIGTERM);
    let status = daemon.wait(Duration::from_secs(20)).await;
    assert!(status.success(), "daemon: {}", daemon.log());
    assert_eq!(home.containers().len(), 1, "the container runs on");
    let out = home.run(&["cancel", &id, "--json"]).await;
    assert!(out.status.success(), "cancel: {}", output(&out));
    let answer: Value = serde_json::from_slice(&out.stdout).expect("cancel --json");
    assert_eq!(
        (answer["state"].as_str(), answer["was"].as_str()),
        (Some("CANCELLED"), Some("RUNNING")),
        "{answer}"
    );
    assert!(home.containers().is_empty(), "the container was removed");
    let v = home.task(&id).await;
    assert_eq!(state(&v), "CANCELLED");
    assert_eq!(v["task"]["failures"], 0);
    assert_eq!(attempts(&v)[0]["status"], "cancelled");
    let mut next = home.start(&["daemon", "--exit-when-idle", "--json"]);
    let status = next.wait(Duration::from_secs(60)).await;
    assert!(status.success(), "daemon: {}", next.log());
    let summary = json_summary(&next, "resumed");
    assert_eq!(
        (summary["resumed"].as_u64(), summary["attempts"].as_u64()),
        (Some(0), Some(0)),
        "{summary}"
    );
    // `retry` brings a CANCELLED task back as its next generation.
    let out = home.run(&["retry", &id, "--json"]).await;
    assert!(out.status.success(), "retry: {}", output(&out));
    let retried: Value = serde_json::from_slice(&out.stdout).expect("retry --json");
    assert_eq!(retried["retried"][0]["generation"], 2, "{retried}");
    println!("cancel_without_daemon: {:?}", started.elapsed());
}

/// Issue 29: a `spawn` in the foreground owns its task: `polyphony cancel` pokes it and it
/// stops its attempt; spawn exits 1 with the task CANCELLED, not held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_a_spawn_in_the_foreground() {
    let Some(image) = image().await else { return };
    let origin = Origin::new();
    let home = Home::new(&image, Conf::default(), None);
    let id = home
        .enqueue(
            &origin,
            &body_with("polyphony-fake: slow\npolyphony-fake-sleep: 60"),
            "Fix add() very slowly",
        )
        .await;
    let mut spawn = start_until_running(&home, &id, &["spawn", "--task", &id]).await;
    let out = home.run(&["cancel", &id, "--by", "bob"]).await;
    assert!(
        out.status.success(),
        "cancel: {}\n{}",
        output(&out),
        spawn.log()
    );
    assert!(text(&out.stdout).contains("CANCELLED"), "{}", output(&out));
    let status = spawn.wait(Duration::from_secs(20)).await;
    assert_eq!(status.code(), Some(1), "{}", spawn.log());
    assert!(home.containers().is_empty(), "the container was removed");
    let v = home.task(&id).await;
    assert_eq!(state(&v), "CANCELLED");
    assert_eq!(last_reason(&v), "cancelled by bob (cli)");
    assert_eq!(v["task"]["failures"], 0);
}

/// Issue 29: `spawn --task` of a task parked on a usage limit 55 minutes away runs it now
/// (as `retry --now` does: the limit is taken as over, the action recorded) instead of
/// waiting the hour out; it lands on its first counted attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawn_task_runs_a_parked_task_now() {
    use polyphony::domain::{AgentQuota, AgentReset, QuotaWait, TaskState};
    let Some(image) = image().await else { return };
    let origin = Origin::new();
    let home = Home::new(&image, Conf::default(), None).with_run_limit(Duration::from_secs(90));
    let id = home
        .enqueue(
            &origin,
            &body_with("polyphony-fake: succeed"),
            "Fix add() (parked)",
        )
        .await;
    let later = Utc::now() + chrono::Duration::minutes(55);
    {
        let store = polyphony::store::Store::open(&home.path.join("queue.db")).unwrap();
        let now = Utc::now();
        store.claim(&id, now).unwrap().unwrap();
        store
            .transition(&id, TaskState::Claimed, TaskState::Failed, "parked", now)
            .unwrap();
        store.set_retry(&id, 0, Some(later)).unwrap();
        store
            .update_quota("demo", "claude", |_| AgentQuota {
                identity: "demo".into(),
                agent: "claude".into(),
                resets_at: later,
                reported: true,
                message: "limit".into(),
                task_id: Some(id.clone()),
                attempt: Some(1),
                hit_at: now,
            })
            .unwrap();
        let reset = AgentReset {
            agent: "claude".into(),
            identity: "demo".into(),
            resets_at: later,
        };
        store
            .set_quota_wait(&QuotaWait {
                task_id: id.clone(),
                until: later,
                agent: "claude".into(),
                identity: "demo".into(),
                resets: vec![reset],
                parked_at: now,
            })
            .unwrap();
    }
    let started = Instant::now();
    let out = home.run(&["spawn", "--task", &id]).await;
    assert!(out.status.success(), "spawn: {}", output(&out));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("{id}: running now (it was waiting until")),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(90));
    let v = home.task(&id).await;
    assert_eq!(state(&v), "LANDED", "{v}");
    assert_eq!(v["task"]["failures"], 0);
    let actions = v["actions"].as_array().expect("the action log");
    assert_eq!(actions.last().unwrap()["action"], "run-now", "{actions:?}");
    assert_eq!(actions.last().unwrap()["via"], "cli");
}
