//! The daemon's HTTP surface (issue 16) against a real queue file: the API's shapes equal
//! the CLI's `--json`, auth, the SSE stream and its resume, escaping on the dashboard, and
//! a `/metrics` scrape read by a Prometheus text parser.

use crate::support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use chrono::Utc;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use polyphony::domain::{
    AttemptStatus, CheckEvidence, RunResult, RunSpec, SourceKind, Task, TaskEvent, TaskState,
    TokenUsage,
};
use polyphony::http::{self, ServerSettings};
use polyphony::store::Store;
use serde_json::Value;
use support::git::git;
use support::spec::{message_event, run_spec};

fn polyphony(home: &Path) -> Command {
    let mut cmd = Command::cargo_bin("polyphony").unwrap();
    cmd.env("POLYPHONY_HOME", home)
        .env_remove("POLYPHONY_HTTP_TOKEN")
        .env("NO_COLOR", "1");
    cmd
}

pub(crate) fn settings(db: PathBuf, token: Option<&str>, token_for_reads: bool) -> ServerSettings {
    ServerSettings {
        home: db.parent().unwrap().to_path_buf(),
        db: polyphony::store::StoreHandle::sqlite(db),
        body_limit: 256 * 1024,
        machine: "test-machine".into(),
        token: token.map(str::to_string),
        token_for_reads,
        slots: 4,
        identities: vec![("personal".into(), Some(5.0))],
        hosts: http::HostPolicy::loopback(),
        streams: http::StreamLimits::default(),
    }
}

/// Serves `settings` on a free loopback port until the test ends.
pub(crate) async fn start(settings: ServerSettings) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(http::serve(listener, settings, std::future::pending()));
    addr
}

pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) headers: hyper::HeaderMap,
    pub(crate) body: String,
}

impl Answer {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

pub(crate) async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::new(Bytes::from(body.to_string()))).unwrap();
    let res = client.request(req).await.unwrap();
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

pub(crate) async fn get(addr: SocketAddr, path: &str) -> Answer {
    request(addr, "GET", path, &[], "").await
}

fn stdout_json(cmd: &mut Command) -> Value {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn spec(task_id: &str, attempt: u32) -> RunSpec {
    run_spec(task_id, attempt)
}

fn event(seq: u64, summary: &str) -> TaskEvent {
    message_event(
        seq,
        summary,
        serde_json::json!({"type": "assistant", "text": summary}),
    )
}

/// A task in RUNNING with attempt 1 started and `events` stored.
fn running_task(store: &Store, id: &str, title: &str, events: &[TaskEvent]) {
    let now = Utc::now();
    let task = Task::new(
        id,
        SourceKind::Local,
        format!("local:{id}"),
        "/srv/repo",
        title,
        now,
    );
    store.insert_task(&task).unwrap();
    for to in [
        TaskState::Claimed,
        TaskState::Routed,
        TaskState::Provisioned,
        TaskState::Running,
    ] {
        let from = store.get_task(id).unwrap().unwrap().state;
        store.transition(id, from, to, "test", now).unwrap();
    }
    store.start_attempt(&spec(id, 1), now).unwrap();
    store.append_events(id, 1, events).unwrap();
}

fn finish(store: &Store, id: &str) {
    finish_as(store, id, "claude")
}

fn finish_as(store: &Store, id: &str, agent: &str) {
    let result = RunResult {
        task_id: id.into(),
        attempt: 1,
        agent: agent.into(),
        status: AttemptStatus::Succeeded,
        turns: 3,
        duration_seconds: 42.0,
        cost_usd: Some(0.5),
        tokens: TokenUsage {
            input: 100,
            output: 20,
            cached_input: 0,
        },
        exit_code: Some(0),
        final_message: Some("done".into()),
        reason: None,
        events: 3,
        artifacts: vec![],
    };
    let evidence = vec![CheckEvidence {
        name: "test".into(),
        command: "sh test.sh <script>".into(),
        passed: true,
        exit_code: Some(0),
        duration_ms: 1200,
        output_tail: "ok <img src=x onerror=alert(1)>".into(),
    }];
    store
        .finish_attempt(&result, &evidence, Utc::now())
        .unwrap();
}

#[tokio::test]
async fn tasks_endpoints_return_the_cli_json_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let repo = dir.path().join("repo");
    repo_with_a_commit(&repo);
    for title in ["First task", "Second task", "Third task"] {
        polyphony(&home)
            .args(["enqueue", "--repo"])
            .arg(&repo)
            .arg(title)
            .assert()
            .success();
    }
    let addr = start(settings(home.join("queue.db"), None, false)).await;

    let cli = stdout_json(polyphony(&home).args(["status", "--json"]));
    let api = get(addr, "/api/v1/tasks").await;
    assert_eq!(api.status, 200, "{}", api.body);
    assert_eq!(api.json(), cli);

    let cli = stdout_json(polyphony(&home).args(["status", "local-2", "--json"]));
    let api = get(addr, "/api/v1/tasks/local-2").await;
    assert_eq!(api.status, 200, "{}", api.body);
    assert_eq!(api.json(), cli);

    // Filters and pages.
    let page = get(addr, "/api/v1/tasks?limit=1&offset=1").await.json();
    assert_eq!(page.as_array().unwrap().len(), 1);
    assert_eq!(page[0]["id"], "local-2");
    let page = get(addr, "/api/v1/tasks?state=discovered&source=local")
        .await
        .json();
    assert_eq!(page.as_array().unwrap().len(), 3);
    let page = get(addr, "/api/v1/tasks?state=LANDED").await.json();
    assert_eq!(page, serde_json::json!([]));
    let page = get(addr, "/api/v1/tasks?agent=claude").await.json();
    assert_eq!(page, serde_json::json!([]));

    // Mistakes are 400/404 with the parameter named and a fix.
    let bad = get(addr, "/api/v1/tasks?state=DONE").await;
    assert_eq!(bad.status, 400);
    assert!(bad.json()["error"].as_str().unwrap().contains("state=DONE"));
    assert!(bad.json()["fix"].as_str().unwrap().contains("RUNNING"));
    let bad = get(addr, "/api/v1/tasks?colour=red").await;
    assert_eq!(bad.status, 400);
    let missing = get(addr, "/api/v1/tasks/local-99").await;
    assert_eq!(missing.status, 404);
    assert!(missing.json()["error"]
        .as_str()
        .unwrap()
        .contains("local-99"));

    let health = get(addr, "/api/v1/health").await.json();
    assert_eq!(health["status"], "ok");

    let state = get(addr, "/api/v1/state").await.json();
    assert_eq!(state["slots"]["max"], 4);
    assert_eq!(state["counts"]["DISCOVERED"], 3);
    assert_eq!(state["identities"][0]["identity"], "personal");
    assert_eq!(state["identities"][0]["cost_ceiling_usd_per_day"], 5.0);
}

#[tokio::test]
async fn mutations_need_the_token_and_reads_follow_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("queue.db");
    Store::open(&db).unwrap();

    // No token configured: reads open on loopback, every mutation refused.
    let open = start(settings(db.clone(), None, false)).await;
    assert_eq!(get(open, "/api/v1/tasks").await.status, 200);
    let post = request(open, "POST", "/api/v1/tasks", &[], "{}").await;
    assert_eq!(post.status, 401);
    assert!(post.json()["fix"].as_str().unwrap().contains("Bearer"));
    assert_eq!(post.headers["www-authenticate"], "Bearer");

    // A token for reads too: nothing without it, everything with it.
    let closed = start(settings(db, Some("s3cret-token"), true)).await;
    assert_eq!(get(closed, "/api/v1/tasks").await.status, 401);
    assert_eq!(get(closed, "/").await.status, 401);
    assert_eq!(get(closed, "/metrics").await.status, 401);
    let wrong = request(
        closed,
        "GET",
        "/api/v1/tasks",
        &[("authorization", "Bearer s3cret-tokeN")],
        "",
    )
    .await;
    assert_eq!(wrong.status, 401);
    assert!(!wrong.body.contains("s3cret"), "{}", wrong.body);
    let right = request(
        closed,
        "GET",
        "/api/v1/tasks",
        &[("authorization", "Bearer s3cret-token")],
        "",
    )
    .await;
    assert_eq!(right.status, 200);
}

#[test]
fn a_non_loopback_address_without_a_token_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    polyphony(&home).arg("init").assert().success();
    let out = polyphony(&home)
        .args(["daemon", "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("POLYPHONY_HTTP_TOKEN"), "{err}");
    assert!(err.contains("fix"), "{err}");

    let out = polyphony(&home)
        .args(["daemon", "--listen", "localhost-ish"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("localhost-ish"));
}

/// Reads SSE frames from `path` until an `end` event or `max` events.
pub(crate) async fn sse(
    addr: SocketAddr,
    path: &str,
    last_id: Option<&str>,
) -> Vec<(String, String, String)> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut req = hyper::Request::get(format!("http://{addr}{path}"));
    if let Some(id) = last_id {
        req = req.header("last-event-id", id);
    }
    let res = client
        .request(req.body(Full::new(Bytes::new())).unwrap())
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let mut body = res.into_body();
    let mut text = String::new();
    let mut events = Vec::new();
    while let Some(frame) = tokio::time::timeout(std::time::Duration::from_secs(20), body.frame())
        .await
        .expect("the stream stalled")
    {
        if let Ok(data) = frame.unwrap().into_data() {
            text.push_str(&String::from_utf8_lossy(&data));
        }
        while let Some(end) = text.find("\n\n") {
            let block: String = text.drain(..end + 2).collect();
            let (mut id, mut kind, mut data) = (String::new(), String::new(), String::new());
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id:") {
                    id = v.trim().to_string();
                } else if let Some(v) = line.strip_prefix("event:") {
                    kind = v.trim().to_string();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data = v.trim().to_string();
                }
            }
            if !kind.is_empty() {
                events.push((id, kind, data));
            }
        }
        if events.iter().any(|(_, k, _)| k == "end") {
            break;
        }
    }
    events
}

#[tokio::test]
async fn events_stream_live_resume_after_the_last_id_and_end_with_the_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("queue.db");
    let store = Store::open(&db).unwrap();
    running_task(
        &store,
        "local-1",
        "Stream me",
        &[event(0, "zero"), event(1, "one"), event(2, "two")],
    );
    let addr = start(settings(db.clone(), None, false)).await;

    // A client that saw up to id 1 gets 2 and then what arrives live, then the end.
    let reader =
        tokio::spawn(async move { sse(addr, "/api/v1/tasks/local-1/events", Some("1")).await });
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    store
        .append_events("local-1", 1, &[event(3, "three <script>x</script>")])
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    finish(&store, "local-1");
    let events = reader.await.unwrap();
    let ids: Vec<&str> = events
        .iter()
        .filter(|(_, k, _)| k == "event")
        .map(|(id, _, _)| id.as_str())
        .collect();
    assert_eq!(ids, ["2", "3"], "{events:?}");
    let last: Value = serde_json::from_str(&events[1].2).unwrap();
    assert_eq!(last["task"], "local-1");
    assert_eq!(last["attempt"], 1);
    assert_eq!(last["summary"], "three <script>x</script>");
    assert_eq!(events.last().unwrap().1, "end");

    // After the end, a fresh client gets everything at once and the end.
    let all = sse(addr, "/api/v1/tasks/local-1/events?attempt=1", None).await;
    assert_eq!(all.len(), 5, "{all:?}");

    let bad = request(
        addr,
        "GET",
        "/api/v1/tasks/local-1/events",
        &[("last-event-id", "yesterday")],
        "",
    )
    .await;
    assert_eq!(bad.status, 400);
    assert_eq!(get(addr, "/api/v1/tasks/nope/events").await.status, 404);
}

/// Issue 25: the attempt's egress refusals, stored as its proxy logs them (a sequence of
/// their own), come live on the event stream as `egress` events among the stream's own;
/// a client resuming from an id naming both places gets neither again.
#[tokio::test]
async fn egress_events_stream_live_and_a_resume_repeats_none() {
    use polyphony::domain::{EventKind, TaskEvent};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("queue.db");
    let store = Store::open(&db).unwrap();
    running_task(&store, "local-1", "Stream me", &[event(0, "zero")]);
    let refusal = |line: u64, host: &str| TaskEvent {
        kind: EventKind::Egress,
        data: serde_json::json!({ "egress": "refused", "host": host }),
        ..event(line, &format!("refused {host}:443"))
    };
    let addr = start(settings(db.clone(), None, false)).await;
    let reader = tokio::spawn(async move { sse(addr, "/api/v1/tasks/local-1/events", None).await });
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    store
        .record_egress("local-1", 1, &[refusal(3, "evil.example")], None)
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    store
        .append_events("local-1", 1, &[event(1, "one")])
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    store
        .record_egress("local-1", 1, &[refusal(7, "other.example")], None)
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    finish(&store, "local-1");
    let events = reader.await.unwrap();
    let seen: Vec<(&str, &str)> = events
        .iter()
        .filter(|(_, k, _)| k != "end")
        .map(|(id, k, _)| (id.as_str(), k.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            ("0", "event"),
            ("0~6", "egress"),
            ("1~6", "event"),
            ("1~14", "egress")
        ],
        "{events:?}"
    );
    let refused: Value = serde_json::from_str(&events[1].2).unwrap();
    assert_eq!(refused["kind"], "egress");
    assert_eq!(refused["summary"], "refused evil.example:443");
    // Resumed after the first refusal: the stream's next event and the second refusal.
    let resumed = sse(addr, "/api/v1/tasks/local-1/events", Some("0~6")).await;
    let ids: Vec<&str> = resumed
        .iter()
        .filter(|(_, k, _)| k != "end")
        .map(|(id, _, _)| id.as_str())
        .collect();
    assert_eq!(ids, ["1~6", "1~14"], "{resumed:?}");
}

#[tokio::test]
async fn agent_and_issue_text_renders_inert_on_the_dashboard() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("queue.db");
    let store = Store::open(&db).unwrap();
    let hostile = "<script>alert(1)</script><img src=x onerror=alert(2)>";
    running_task(&store, "octo/w#7", hostile, &[event(0, hostile)]);
    finish(&store, "octo/w#7");
    store
        .set_attempt_landing(
            "octo/w#7",
            1,
            "abc123",
            "polyphony/x\"><script>",
            Some("javascript:alert(3)"),
            Utc::now(),
        )
        .unwrap();
    let addr = start(settings(db, None, false)).await;

    let queue = get(addr, "/").await;
    assert_eq!(queue.status, 200);
    assert!(queue.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    let task = get(addr, "/tasks/octo%2Fw%237").await;
    assert_eq!(task.status, 200, "{}", task.body);
    for page in [&queue.body, &task.body] {
        assert!(!page.contains("<script>alert"), "{page}");
        assert!(!page.contains("<img src=x"), "{page}");
        // askama's HTML escaper writes numeric entities (`<` is `&#60;`).
        assert!(
            page.contains("&#60;script&#62;alert(1)&#60;/script&#62;"),
            "{page}"
        );
    }
    assert!(queue.body.contains("href=\"/tasks/octo%2Fw%237\""));
    // The PR link is shown as text, never as a javascript: href; evidence is escaped.
    assert!(!task.body.contains("href=\"javascript"), "{}", task.body);
    assert!(task.body.contains("&#60;img src=x onerror=alert(1)&#62;"));
    assert!(task.body.contains("polyphony/x&#34;&#62;&#60;script&#62;"));
    // Nothing of the hostile text reaches the page unescaped, anywhere.
    for page in [&queue.body, &task.body] {
        assert!(!page.contains("onerror=alert(2)>"), "{page}");
        assert!(!page.contains("x\"><script>"), "{page}");
    }
}

#[tokio::test]
async fn metrics_parse_as_exposition_format_and_count_attempts() {
    // The counters are process-wide and other tests of this binary finish `claude`
    // attempts at the same time: this test's attempts carry an agent label of their own.
    const AGENT: &str = "claude-metrics-test";
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("queue.db");
    let store = Store::open(&db).unwrap();
    let addr = start(settings(db, None, false)).await;

    let value = |text: &str, name: &str, labels: &[(&str, &str)]| -> f64 {
        let lines = text.lines().map(|l| Ok(l.to_string()));
        let scrape = prometheus_parse::Scrape::parse(lines).expect("valid exposition text");
        scrape
            .samples
            .iter()
            .filter(|s| s.metric == name)
            .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => 0.0,
            })
            .sum()
    };
    let before = get(addr, "/metrics").await;
    assert_eq!(before.status, 200);
    assert!(before.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/openmetrics-text"));
    let attempts_before = value(
        &before.body,
        "polyphony_attempts_total",
        &[("agent", AGENT), ("outcome", "succeeded")],
    );
    assert_eq!(
        value(&before.body, "polyphony_tasks", &[("state", "RUNNING")]),
        0.0
    );

    running_task(&store, "local-1", "Count me", &[]);
    let during = get(addr, "/metrics").await.body;
    assert_eq!(
        value(&during, "polyphony_tasks", &[("state", "RUNNING")]),
        1.0
    );
    finish_as(&store, "local-1", AGENT);
    let after = get(addr, "/metrics").await.body;
    assert_eq!(
        value(
            &after,
            "polyphony_attempts_total",
            &[("agent", AGENT), ("outcome", "succeeded")]
        ),
        attempts_before + 1.0
    );
    assert!(
        value(
            &after,
            "polyphony_cost_usd_total",
            &[("identity", "personal"), ("agent", AGENT)]
        ) >= 0.5
    );
    assert!(after.contains("polyphony_store_write_duration_seconds_bucket"));
}

/// A git repository with one commit at `dir`.
fn repo_with_a_commit(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["commit", "-q", "--allow-empty", "-m", "start"]);
}

fn tree_bytes(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.clone(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn post_tasks_enqueues_with_the_cli_checks_and_retry_brings_back_a_blocked_task() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let repo = dir.path().join("repo");
    repo_with_a_commit(&repo);
    polyphony(&home).arg("init").assert().success();
    let db = home.join("queue.db");
    Store::open(&db).unwrap();
    let addr = start(settings(db.clone(), Some("tok-123"), false)).await;
    let auth = [
        ("authorization", "Bearer tok-123"),
        ("content-type", "application/json"),
    ];

    let task = serde_json::json!({
        "repo": repo, "title": "Fix the parser", "type": "bugfix", "labels": ["parser"],
        "body": "The parser drops the last line."
    })
    .to_string();
    // Without the token nothing is stored.
    assert_eq!(
        request(addr, "POST", "/api/v1/tasks", &[], &task)
            .await
            .status,
        401
    );
    let made = request(addr, "POST", "/api/v1/tasks", &auth, &task).await;
    assert_eq!(made.status, 201, "{}", made.body);
    assert_eq!(made.json()["id"], "local-1");
    let cli = stdout_json(polyphony(&home).args(["status", "local-1", "--json"]));
    assert_eq!(cli["task"]["task_type"], "bugfix");
    assert_eq!(cli["task"]["labels"], serde_json::json!(["parser"]));
    assert_eq!(cli["task"]["body"], "The parser drops the last line.");

    // The CLI's refusals, with the field named as the API spells it, and nothing stored.
    let before = tree_bytes(&home);
    for (body, names) in [
        (
            serde_json::json!({"repo": "https://me:ghp_s3cret@github.com/a/b.git", "title": "x"}),
            "`repo`",
        ),
        (
            serde_json::json!({"repo": repo, "title": "two\nlines"}),
            "title",
        ),
        (
            serde_json::json!({"repo": repo, "title": "x", "base": "--upload-pack=evil"}),
            "`base`",
        ),
        (
            serde_json::json!({"repo": repo, "title": "x", "base": "no-such-branch"}),
            "`repo`",
        ),
        (
            serde_json::json!({"repo": dir.path().join("nowhere"), "title": "x"}),
            "`repo`",
        ),
        (
            serde_json::json!({"repo": repo, "title": "x", "colour": "red"}),
            "colour",
        ),
        (serde_json::json!({"title": "x"}), "repo"),
        // Issue 24: a relative path would resolve against the daemon's working directory
        // (here this crate's own git repository), and labels are bounded.
        (
            serde_json::json!({"repo": ".", "title": "x"}),
            "relative path",
        ),
        (
            serde_json::json!({"repo": repo, "title": "x", "labels": vec!["x".repeat(3_000); 2]}),
            "6000 bytes",
        ),
        (
            serde_json::json!({"repo": repo, "title": "x", "labels": (0..65).map(|i| format!("l{i}")).collect::<Vec<_>>()}),
            "65 labels (`labels`)",
        ),
    ] {
        let refused = request(addr, "POST", "/api/v1/tasks", &auth, &body.to_string()).await;
        assert_eq!(refused.status, 400, "{body}: {}", refused.body);
        let answer = refused.json();
        let error = answer["error"].as_str().unwrap();
        assert!(error.contains(names), "{body}: {error}");
        assert!(!answer["fix"].as_str().unwrap().is_empty());
        assert!(!refused.body.contains("ghp_s3cret"), "{}", refused.body);
    }
    let not_json = request(addr, "POST", "/api/v1/tasks", &auth, "title=x").await;
    assert_eq!(not_json.status, 400);
    assert_eq!(tree_bytes(&home), before, "a refused task changed the home");

    // retry: only a BLOCKED task comes back, once, as its next generation.
    let store = Store::open(&db).unwrap();
    let retry = |id: &'static str| async move {
        let path = format!("/api/v1/tasks/{id}/retry");
        request(
            addr,
            "POST",
            &path,
            &[("authorization", "Bearer tok-123")],
            "",
        )
        .await
    };
    let early = retry("local-1").await;
    assert_eq!(early.status, 409, "{}", early.body);
    for to in [TaskState::Claimed, TaskState::Failed, TaskState::Blocked] {
        let from = store.get_task("local-1").unwrap().unwrap().state;
        store
            .transition("local-1", from, to, "test", Utc::now())
            .unwrap();
    }
    assert_eq!(
        request(addr, "POST", "/api/v1/tasks/local-1/retry", &[], "")
            .await
            .status,
        401
    );
    let back = retry("local-1").await;
    assert_eq!(back.status, 200, "{}", back.body);
    assert_eq!(back.json()["task"], "local-1.2");
    assert_eq!(back.json()["generation"], 2);
    let again = retry("local-1").await;
    assert_eq!(again.status, 409, "{}", again.body);
    assert_eq!(retry("local-9").await.status, 404);
    let detail = get(addr, "/api/v1/tasks/local-1.2").await.json();
    assert_eq!(detail["task"]["state"], "DISCOVERED");
    assert_eq!(detail["retry_of"], "local-1");
}

/// Issue 29: a fresh daemon that never talked to GitHub exposes every documented metric
/// (zero series, docs/metrics.md) but no GitHub rate-limit gauge, whose 0 would fire the
/// low-rate-limit alert forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_daemon_exposes_every_documented_metric_but_no_rate_limit() {
    if support::docker::engine().await.is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    polyphony(&home).arg("init").assert().success();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut daemon = std::process::Command::new(assert_cmd::cargo::cargo_bin("polyphony"))
        .env("POLYPHONY_HOME", &home)
        .env_remove("POLYPHONY_HTTP_TOKEN")
        .env_remove("GITHUB_TOKEN")
        .env_remove("GH_TOKEN")
        .args(["daemon", "--listen", &addr.to_string()])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let text = loop {
        let up = tokio::net::TcpStream::connect(addr).await.is_ok();
        if up {
            break get(addr, "/metrics").await.body;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the daemon did not listen"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    let _ = daemon.wait();
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md")).unwrap();
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .expect("valid exposition text");
    let documented: Vec<String> = docs
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .filter(|n| n.starts_with("polyphony_"))
        .map(str::to_string)
        .collect();
    assert!(documented.len() >= 12, "{documented:?}");
    for name in &documented {
        let present = scrape.samples.iter().any(|s| &s.metric == name);
        if name == "polyphony_github_rate_limit_remaining" {
            assert!(!present, "no GitHub answer yet, no gauge:\n{text}");
        } else {
            assert!(present, "{name} has no series on a fresh daemon:\n{text}");
        }
    }
}

/// Issue 29: docs/api.md's health example gives the schema version a new store has (it
/// said 2 while the store was at 6).
#[tokio::test]
async fn the_documented_health_answer_is_the_real_one() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("queue.db");
    Store::open(&db).unwrap();
    let addr = start(settings(db, None, false)).await;
    let health = get(addr, "/api/v1/health").await.json();
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/api.md")).unwrap();
    let documented = format!(
        "{{\"schema_version\":{},\"status\":\"ok\",\"version\":\"{}\"}}",
        health["schema_version"],
        env!("CARGO_PKG_VERSION")
    );
    assert!(
        docs.contains(&documented),
        "docs/api.md should show {documented} (the health answer is {health})"
    );
}

/// Issue 24: every route, the fallback included, refuses a foreign `Host` (DNS
/// rebinding) with 421 `{error, fix}`; framework errors (404, 405, 413) are JSON; a bad
/// query parameter is named; the `Bearer` scheme is case-insensitive.
#[tokio::test]
async fn foreign_hosts_are_refused_and_every_error_is_json() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("queue.db");
    let store = Store::open(&db).unwrap();
    running_task(&store, "local-1", "Fix it", &[event(0, "hello")]);
    let addr = start(settings(db.clone(), Some("s3cret-token"), false)).await;
    let auth = ("authorization", "Bearer s3cret-token");
    for (method, path) in [
        ("GET", "/api/v1/tasks"),
        ("GET", "/api/v1/tasks/local-1"),
        ("GET", "/api/v1/tasks/local-1/events"),
        ("GET", "/api/v1/health"),
        ("GET", "/"),
        ("GET", "/metrics"),
        ("GET", "/no/such/route"),
        ("POST", "/api/v1/tasks"),
    ] {
        for host in [
            "rebound.example",
            "rebound.example:8787",
            "127.0.0.1.evil.example",
        ] {
            let a = request(addr, method, path, &[("host", host), auth], "{}").await;
            assert_eq!(a.status, 421, "{method} {path} Host {host}: {}", a.body);
            let v = a.json();
            assert!(v["error"].as_str().unwrap().contains(host), "{v}");
            assert!(v["fix"].as_str().unwrap().contains("allowed_hosts"), "{v}");
        }
    }
    for host in ["localhost", "127.0.0.1", "[::1]:1"] {
        let a = request(addr, "GET", "/api/v1/health", &[("host", host)], "").await;
        assert_eq!(a.status, 200, "Host {host}: {}", a.body);
    }

    let unknown = get(addr, "/api/v1/nope").await;
    assert_eq!(unknown.status, 404);
    assert!(unknown.json()["error"]
        .as_str()
        .unwrap()
        .contains("/api/v1/nope"));
    assert!(unknown.json()["fix"].is_string());
    let wrong_method = request(addr, "DELETE", "/api/v1/tasks", &[auth], "").await;
    assert_eq!(wrong_method.status, 405);
    assert!(
        wrong_method.json()["fix"].is_string(),
        "{}",
        wrong_method.body
    );

    for (path, named) in [
        ("/api/v1/tasks?bogus=1", "bogus"),
        ("/api/v1/tasks?limit=lots", "limit"),
        ("/api/v1/tasks?offset=-1", "offset"),
        ("/api/v1/tasks/local-1/events?atempt=1", "atempt"),
        ("/api/v1/tasks/local-1/events?attempt=x", "attempt"),
    ] {
        let a = get(addr, path).await;
        assert_eq!(a.status, 400, "{path}: {}", a.body);
        let error = a.json()["error"].as_str().unwrap().to_string();
        assert!(error.contains(named), "{path}: {error}");
    }

    let huge = format!(
        r#"{{"repo":"/srv/x","title":"t","body":"{}"}}"#,
        "x".repeat(2 * 1024 * 1024)
    );
    let too_big = request(addr, "POST", "/api/v1/tasks", &[auth], &huge).await;
    assert_eq!(too_big.status, 413, "{}", too_big.body);
    assert!(too_big.json()["fix"]
        .as_str()
        .unwrap()
        .contains("max_body_bytes"));

    // The scheme is case-insensitive (RFC 9110 §11.1).
    let closed = start(settings(db, Some("s3cret-token"), true)).await;
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let header = format!("{scheme} s3cret-token");
        let a = request(
            closed,
            "GET",
            "/api/v1/tasks",
            &[("authorization", &header)],
            "",
        )
        .await;
        assert_eq!(a.status, 200, "{scheme}: {}", a.body);
    }
}

/// Issue 25: a client of the event stream that vanishes while its `egress` events come
/// (its socket reset mid-stream, so the server's next writes meet a closed pipe) costs
/// nothing: the server neither fails nor holds its place (the one place the cap allows
/// comes back), and the next client gets every egress event, none lost or repeated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_client_of_the_egress_stream_gives_its_place_back_and_loses_nothing() {
    use polyphony::domain::{EventKind, TaskEvent};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("queue.db");
    let store = Store::open(&db).unwrap();
    running_task(&store, "local-1", "Vanish", &[event(0, "zero")]);
    let refusal = |line: u64| TaskEvent {
        kind: EventKind::Egress,
        data: serde_json::json!({ "egress": "refused", "host": format!("h{line}.example") }),
        ..event(line, &format!("refused h{line}.example:443"))
    };
    let mut s = settings(db.clone(), None, false);
    s.streams = http::StreamLimits {
        total: 1,
        per_client: 1,
    };
    let addr = start(s).await;
    store
        .record_egress("local-1", 1, &[refusal(1)], None)
        .unwrap();
    let mut gone = tokio::net::TcpStream::connect(addr).await.unwrap();
    gone.write_all(
        format!("GET /api/v1/tasks/local-1/events HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("h1.example") {
        let n = tokio::time::timeout(std::time::Duration::from_secs(10), gone.read(&mut buf))
            .await
            .expect("the first egress event in time")
            .unwrap();
        assert!(n > 0, "{}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    // Reset, not closed: the server's next write fails at once (a zero linger does not
    // block the drop).
    #[allow(deprecated)]
    gone.set_linger(Some(std::time::Duration::ZERO)).unwrap();
    drop(gone);
    let writer = {
        let db = db.clone();
        tokio::task::spawn_blocking(move || {
            let store = Store::open(&db).unwrap();
            for line in 2..=40 {
                store
                    .record_egress("local-1", 1, &[refusal(line)], None)
                    .unwrap();
                std::thread::sleep(std::time::Duration::from_millis(25));
            }
        })
    };
    // The one place comes back while the rows keep coming.
    let started = std::time::Instant::now();
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    loop {
        let req = hyper::Request::get(format!("http://{addr}/api/v1/tasks/local-1/events"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let probe = client.request(req).await.unwrap();
        if probe.status() == 200 {
            break;
        }
        assert_eq!(probe.status(), 429);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "a vanished client's place never came back"
        );
        tokio::time::sleep(support::wait::POLL).await;
    }
    writer.await.unwrap();
    finish(&store, "local-1");
    let events = sse(addr, "/api/v1/tasks/local-1/events", None).await;
    let egress: Vec<String> = events
        .iter()
        .filter(|(_, k, _)| k == "egress")
        .map(|(_, _, data)| {
            let v: Value = serde_json::from_str(data).unwrap();
            v["summary"].as_str().unwrap().to_string()
        })
        .collect();
    let expected: Vec<String> = (1..=40)
        .map(|l| format!("refused h{l}.example:443"))
        .collect();
    assert_eq!(egress, expected);
    assert_eq!(get(addr, "/api/v1/health").await.status, 200);
}

/// Issue 24: event streams are capped per client and in total (429 with `Retry-After`
/// and `{error, fix}`), and a closed stream gives its place back.
#[tokio::test]
async fn event_streams_are_capped_and_places_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("queue.db");
    let store = Store::open(&db).unwrap();
    running_task(&store, "local-1", "Live", &[event(0, "working")]);
    let mut s = settings(db, None, false);
    s.streams = http::StreamLimits {
        total: 3,
        per_client: 2,
    };
    let addr = start(s).await;
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let open = |client: Client<_, Full<Bytes>>| async move {
        let req = hyper::Request::get(format!("http://{addr}/api/v1/tasks/local-1/events"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        client.request(req).await.unwrap()
    };
    let first = open(client.clone()).await;
    let second = open(client.clone()).await;
    assert_eq!(
        (first.status().as_u16(), second.status().as_u16()),
        (200, 200)
    );
    let third = open(client.clone()).await;
    assert_eq!(third.status(), 429);
    assert_eq!(third.headers()["retry-after"], "5");
    let body = third.into_body().collect().await.unwrap().to_bytes();
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("max_streams_per_client"),
        "{v}"
    );
    assert!(v["fix"].is_string());
    // Both open streams get the stored event from the one shared reader.
    let mut got = Vec::new();
    for res in [first, second] {
        let mut body = res.into_body();
        let mut text = String::new();
        while !text.contains("working") {
            let frame = tokio::time::timeout(std::time::Duration::from_secs(10), body.frame())
                .await
                .expect("the event in time")
                .expect("a frame")
                .unwrap();
            if let Ok(data) = frame.into_data() {
                text.push_str(&String::from_utf8_lossy(&data));
            }
        }
        got.push(body);
    }
    drop(got.pop());
    let started = std::time::Instant::now();
    loop {
        let res = open(client.clone()).await;
        if res.status() == 200 {
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "a closed stream's place never came back"
        );
        tokio::time::sleep(support::wait::POLL).await;
    }
}

/// Issue 29: `POST /api/v1/tasks/{id}/cancel` is `polyphony cancel` over HTTP: token
/// required, a waiting task CANCELLED at once with who did it (`X-Polyphony-Actor`), a
/// running one with no daemon to stop it answered 202 with the request recorded for the
/// next start, unknown 404 and over 409, every refusal `{error, fix}`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_over_http_needs_the_token_and_records_who() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    polyphony(&home).arg("init").assert().success();
    let db = home.join("queue.db");
    let store = Store::open(&db).unwrap();
    let waiting = Task::new(
        "local-1",
        SourceKind::Local,
        "local:local-1",
        "/srv/repo",
        "Waiting",
        Utc::now(),
    );
    store.insert_task(&waiting).unwrap();
    running_task(&store, "local-2", "Running", &[]);
    let addr = start(settings(db.clone(), Some("tok-123"), false)).await;
    let cancel = |id: &'static str, actor: &'static str| async move {
        let mut headers = vec![("authorization", "Bearer tok-123")];
        if !actor.is_empty() {
            headers.push(("x-polyphony-actor", actor));
        }
        request(
            addr,
            "POST",
            &format!("/api/v1/tasks/{id}/cancel"),
            &headers,
            "",
        )
        .await
    };
    let refused = request(addr, "POST", "/api/v1/tasks/local-1/cancel", &[], "").await;
    assert_eq!(refused.status, 401, "{}", refused.body);
    assert_eq!(
        store.get_task("local-1").unwrap().unwrap().state,
        TaskState::Discovered
    );
    let done = cancel("local-1", "carol").await;
    assert_eq!(done.status, 200, "{}", done.body);
    let answer = done.json();
    assert_eq!(answer["task"], "local-1");
    assert_eq!(answer["state"], "CANCELLED");
    assert_eq!(answer["was"], "DISCOVERED");
    assert_eq!(answer["by"], "carol (api)");
    assert_eq!(answer["pending"], false);
    let last = store.transitions("local-1").unwrap().pop().unwrap();
    assert_eq!(last.reason, "cancelled by carol (api)");
    let detail = get(addr, "/api/v1/tasks/local-1").await.json();
    assert_eq!(detail["task"]["state"], "CANCELLED");

    let again = cancel("local-1", "").await;
    assert_eq!(again.status, 409, "{}", again.body);
    assert!(again.json()["error"]
        .as_str()
        .unwrap()
        .contains("already CANCELLED"));
    let unknown = cancel("local-9", "").await;
    assert_eq!(unknown.status, 404, "{}", unknown.body);

    // Running, and no daemon holds the home: recorded for the next start.
    let pending = cancel("local-2", "").await;
    assert_eq!(pending.status, 202, "{}", pending.body);
    assert_eq!(pending.json()["pending"], true);
    assert_eq!(pending.json()["by"], "api");
    assert_eq!(
        store.get_task("local-2").unwrap().unwrap().state,
        TaskState::Running
    );
    assert_eq!(
        store.cancel_request("local-2").unwrap().map(|r| r.by),
        Some("api".to_string())
    );
}

/// Issue 24: the disk the home used, as the daemon's last retention sweep measured it, is
/// in `GET /api/v1/state` (`status --json` is an array and cannot gain it) and on the
/// console's front page of the seeded home, as `status` prints it; `null` and no line
/// before the first sweep.
#[tokio::test]
async fn the_disk_figure_is_in_the_state_and_on_the_front_page() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("queue.db");
    let store = Store::open(&db).unwrap();
    support::console_seed::seed(&store, Utc::now(), dir.path());
    let addr = start(settings(db, None, false)).await;
    assert!(get(addr, "/api/v1/state").await.json()["disk"].is_null());
    let front = get(addr, "/").await;
    assert_eq!(front.status, 200);
    assert!(!front.body.contains("id=\"disk\""), "{}", front.body);

    let measured_at = chrono::DateTime::parse_from_rfc3339("2026-11-30T12:00:02Z")
        .unwrap()
        .with_timezone(&Utc);
    store
        .note_disk_usage(&polyphony::store::DiskUsage {
            workspaces: 3 << 30,
            mirrors: 5 << 20,
            transcripts: 7 << 10,
            queue: 9 << 20,
            measured_at,
        })
        .unwrap();
    let state = get(addr, "/api/v1/state").await.json();
    assert_eq!(state["disk"]["workspaces"], 3u64 << 30, "{state:#}");
    assert_eq!(state["disk"]["mirrors"], 5u64 << 20);
    assert_eq!(state["disk"]["transcripts"], 7u64 << 10);
    assert_eq!(state["disk"]["queue"], 9u64 << 20);
    assert_eq!(state["disk"]["measured_at"], "2026-11-30T12:00:02Z");
    let front = get(addr, "/").await;
    assert!(
        front.body.contains(
            "<p class=\"muted\" id=\"disk\">disk: workspaces 3.0 GiB · mirrors 5.0 MiB · \
             transcripts 7.0 KiB · queue 9.0 MiB (measured 2026-11-30 12:00 UTC)</p>"
        ),
        "{}",
        front.body
    );
}
