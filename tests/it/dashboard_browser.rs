//! The dashboard in a real headless Chromium (Debian's `chromium`, installed by .ci/run):
//! the task page tails a running attempt live through the SSE stream, the page refreshes
//! itself to show the new state, and hostile text stays text in the rendered DOM.
//!
//! Without `chromium` on PATH this prints SKIPPED, and fails under `CI=true`.

use crate::support;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::Request;
use axum::middleware::{self, Next};
use chrono::Utc;
use polyphony::domain::{
    AttemptStatus, CheckEvidence, RunResult, RunSpec, SourceKind, Task, TaskEvent, TaskState,
    TokenUsage,
};
use polyphony::http::{self, ServerSettings};
use polyphony::store::Store;
use support::spec::{message_event, run_spec};

fn chromium() -> Option<PathBuf> {
    for name in ["chromium", "chromium-browser"] {
        let found = std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|p| p.join(name))
                .find(|p| p.is_file())
        });
        if found.is_some() {
            return found;
        }
    }
    None
}

fn event(seq: u64, summary: &str) -> TaskEvent {
    message_event(seq, summary, serde_json::json!({"type": "assistant"}))
}

fn spec(task_id: &str) -> RunSpec {
    RunSpec {
        workspace: PathBuf::from("/ws/local-1/1"),
        branch: "polyphony/local-1-a1".into(),
        image: "polyphony-test:latest".into(),
        verify_image: "polyphony-test:latest".into(),
        ..run_spec(task_id, 1)
    }
}

fn advance(store: &Store, id: &str, to: TaskState) {
    let from = store.get_task(id).unwrap().unwrap().state;
    store.transition(id, from, to, "test", Utc::now()).unwrap();
}

/// Runs Chromium on `url` with a virtual-time budget and returns the DOM it rendered.
async fn dump_dom(browser: &PathBuf, url: &str, budget_ms: u32) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(90),
        tokio::process::Command::new(browser)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-dev-shm-usage",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(format!("--virtual-time-budget={budget_ms}"))
            .arg("--dump-dom")
            .arg(url)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("chromium did not finish in 90 s")
    .unwrap();
    assert!(out.status.success(), "chromium failed: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_task_page_tails_a_running_attempt_and_follows_it_to_landed() {
    let Some(browser) = chromium() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "chromium is not installed (apt-get install -y chromium)"
        );
        eprintln!("SKIPPED: chromium is not installed (apt-get install -y chromium)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("queue.db");
    let store = Store::open(&db).unwrap();
    let hostile =
        "<img src=x onerror=\"document.title='pwned'\"><script>document.title='pwned'</script>";
    let task = Task::new(
        "local-1",
        SourceKind::Local,
        "local:local-1",
        "/srv/repo",
        format!("Fix the parser {hostile}"),
        Utc::now(),
    );
    store.insert_task(&task).unwrap();
    for s in [
        TaskState::Claimed,
        TaskState::Routed,
        TaskState::Provisioned,
        TaskState::Running,
    ] {
        advance(&store, "local-1", s);
    }
    store.start_attempt(&spec("local-1"), Utc::now()).unwrap();
    store
        .append_events(
            "local-1",
            1,
            &[event(0, "reading src/parser.rs"), event(1, hostile)],
        )
        .unwrap();

    // The server, with a layer that says when the browser opened the event stream.
    let streaming = Arc::new(AtomicBool::new(false));
    let seen = streaming.clone();
    let app = http::router(ServerSettings {
        home: dir.path().to_path_buf(),
        db: polyphony::store::StoreHandle::sqlite(db.clone()),
        body_limit: 256 * 1024,
        token: None,
        token_for_reads: false,
        slots: 2,
        identities: vec![],
        hosts: http::HostPolicy::loopback(),
        streams: http::StreamLimits::default(),
    })
    .layer(middleware::from_fn(move |req: Request, next: Next| {
        let seen = seen.clone();
        async move {
            if req.uri().path().ends_with("/events") {
                seen.store(true, Ordering::SeqCst);
            }
            next.run(req).await
        }
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });

    // While the page holds the stream open, the attempt prints one more line, is verified
    // and lands; the stream then ends and the page's refresh shows LANDED.
    let writer = tokio::spawn(async move {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !streaming.load(Ordering::SeqCst) {
            assert!(
                std::time::Instant::now() < deadline,
                "the page never opened the stream"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        store
            .append_events("local-1", 1, &[event(2, "all 12 tests pass")])
            .unwrap();
        advance(&store, "local-1", TaskState::Verifying);
        store
            .finish_attempt(
                &RunResult {
                    task_id: "local-1".into(),
                    attempt: 1,
                    agent: "claude".into(),
                    status: AttemptStatus::Succeeded,
                    turns: 4,
                    duration_seconds: 30.0,
                    cost_usd: Some(0.04),
                    tokens: TokenUsage::default(),
                    exit_code: Some(0),
                    final_message: None,
                    reason: None,
                    events: 3,
                    artifacts: vec![],
                },
                &[CheckEvidence {
                    name: "test".into(),
                    command: "sh test.sh".into(),
                    passed: true,
                    exit_code: Some(0),
                    duration_ms: 800,
                    output_tail: "12 passed".into(),
                }],
                Utc::now(),
            )
            .unwrap();
        advance(&store, "local-1", TaskState::Landed);
    });

    let dom = dump_dom(&browser, &format!("http://{addr}/tasks/local-1"), 8000).await;
    writer.await.unwrap();

    // The live tail (filled only by the page's script from the SSE stream).
    let tail_start = dom
        .find("<pre id=\"tail\">")
        .expect("the tail is on the page");
    let tail = &dom[tail_start..dom[tail_start..].find("</pre>").unwrap() + tail_start];
    assert!(tail.contains("reading src/parser.rs"), "{tail}");
    assert!(
        tail.contains("all 12 tests pass"),
        "live line missing: {tail}"
    );
    assert!(dom.contains("id=\"tail-state\">ended<"), "{dom}");
    // The refreshed <main> shows the landed state and the evidence.
    assert!(dom.contains("id=\"state\">LANDED<"), "{dom}");
    assert!(dom.contains("12 passed"), "{dom}");
    // Hostile text is text: no element was made from it and no script of it ran.
    assert!(!dom.contains("<img src=\"x\""), "{dom}");
    assert!(!dom.contains("pwned</title>"), "{dom}");
    assert!(tail.contains("&lt;img src=x"), "{tail}");

    // The queue page lists the task with its state.
    let queue = dump_dom(&browser, &format!("http://{addr}/"), 1000).await;
    assert!(queue.contains("local-1"), "{queue}");
    assert!(queue.contains(">LANDED<"), "{queue}");
    assert!(!queue.contains("<img src=\"x\""), "{queue}");
}
