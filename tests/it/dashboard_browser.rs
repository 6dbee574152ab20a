//! The console in a real headless Chromium (Debian's `chromium`, installed by .ci/run),
//! driven over the DevTools protocol (`support::cdp`): real clicks, real form posts with
//! the browser's own `Origin`, cookies and SameSite rules, and real time.
//!
//! - the task page tails a running attempt live through the SSE stream and follows it to
//!   LANDED; hostile text stays text in the rendered DOM;
//! - the attention list shows a blocked and a parked task with their next steps, also at
//!   420 px;
//! - Retry and Run now work when signed in, and are refused without the token, with a
//!   wrong CSRF value, and from another origin's page;
//! - a running attempt's counters move live, without reloading;
//! - the pictures show the seeded home's numbers.
//!
//! Without `chromium` on PATH this prints SKIPPED, and fails under `CI=true`.

use crate::support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::middleware::{self, Next};
use chrono::Utc;
use polyphony::domain::{
    AttemptStatus, CheckEvidence, RunResult, RunSpec, SourceKind, Task, TaskEvent, TaskState,
    TokenUsage,
};
use polyphony::http::{self, ServerSettings};
use polyphony::store::Store;
use support::cdp::{chromium, Browser};
use support::console_seed;
use support::spec::{message_event, run_spec};

const TOKEN: &str = "console-test-token-0123456789";

fn browser_or_skip() -> Option<PathBuf> {
    match chromium() {
        Some(b) => Some(b),
        None => {
            assert!(
                std::env::var_os("CI").is_none(),
                "chromium is not installed (apt-get install -y chromium)"
            );
            eprintln!("SKIPPED: chromium is not installed (apt-get install -y chromium)");
            None
        }
    }
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

fn settings(dir: &Path, token: Option<&str>) -> ServerSettings {
    ServerSettings {
        home: dir.to_path_buf(),
        db: polyphony::store::StoreHandle::sqlite(dir.join("queue.db")),
        body_limit: 256 * 1024,
        machine: "test-machine".into(),
        token: token.map(str::to_string),
        token_for_reads: false,
        slots: 2,
        identities: console_seed::identities(),
        hosts: http::HostPolicy::loopback(),
        streams: http::StreamLimits::default(),
    }
}

async fn serve(app: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });
    addr
}

/// Runs `f` with a browser on a blocking thread (the servers keep the runtime).
async fn with_browser<T: Send + 'static>(
    binary: PathBuf,
    width: u32,
    f: impl FnOnce(&mut Browser) -> T + Send + 'static,
) -> T {
    tokio::task::spawn_blocking(move || {
        let mut b = Browser::launch(&binary, width, 900);
        f(&mut b)
    })
    .await
    .unwrap()
}

const SECONDS: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_task_page_tails_a_running_attempt_and_follows_it_to_landed() {
    let Some(binary) = browser_or_skip() else {
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
    let app = http::router(settings(dir.path(), None)).layer(middleware::from_fn(
        move |req: Request, next: Next| {
            let seen = seen.clone();
            async move {
                if req.uri().path().ends_with("/events") {
                    seen.store(true, Ordering::SeqCst);
                }
                next.run(req).await
            }
        },
    ));
    let addr = serve(app).await;

    // While the page holds the stream open, the attempt prints one more line, is verified
    // and lands; the stream then ends and the page shows LANDED without a reload.
    let writer = tokio::spawn(async move {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !streaming.load(Ordering::SeqCst) {
            assert!(
                std::time::Instant::now() < deadline,
                "the page never opened the stream"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
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

    let (dom, queue) = with_browser(binary, 1280, move |b| {
        b.goto(&format!("http://{addr}/tasks/local-1"));
        assert!(
            b.wait_for(
                "document.getElementById('tail-state').textContent === 'ended' && document.getElementById('state').textContent === 'LANDED'",
                Duration::from_secs(30)
            ),
            "the page did not follow the attempt: {}",
            b.html()
        );
        let dom = b.html();
        b.goto(&format!("http://{addr}/"));
        (dom, b.html())
    })
    .await;
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

    // The front page lists the task with its state.
    assert!(queue.contains("local-1"), "{queue}");
    assert!(queue.contains(">LANDED<"), "{queue}");
    assert!(!queue.contains("<img src=\"x\""), "{queue}");
}

/// A seeded home served with a token.
async fn seeded(token: Option<&str>) -> (tempfile::TempDir, SocketAddr, console_seed::Seeded) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("queue.db")).unwrap();
    let seeded = console_seed::seed(&store, Utc::now(), dir.path());
    let addr = serve(http::router(settings(dir.path(), token))).await;
    (dir, addr, seeded)
}

fn card(kind: &str, task: &str) -> String {
    format!("#attention li.card[data-kind=\"{kind}\"][data-task=\"{task}\"]")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attention_list_shows_a_blocked_and_a_parked_task_with_next_steps() {
    let Some(binary) = browser_or_skip() else {
        return;
    };
    let (_dir, addr, seeded) = seeded(Some(TOKEN)).await;
    // The console says a clock time today and adds the date on another day (the reset is 52
    // minutes ahead, so from 23:08 UTC it falls tomorrow).
    let until = if seeded.parked_until.date_naive() == Utc::now().date_naive() {
        seeded.parked_until.format("%H:%M UTC").to_string()
    } else {
        seeded.parked_until.format("%b %-d %H:%M UTC").to_string()
    };
    for width in [1280u32, 420] {
        let (blocked, parked, pull, first, overflow, buttons_inside) =
            with_browser(binary.clone(), width, move |b| {
                b.goto(&format!("http://{addr}/"));
                let blocked = b.text(&card("blocked", "local-3")).unwrap_or_default();
                let parked = b.text(&card("parked", "local-4")).unwrap_or_default();
                let pull = b.text(&card("pull", "local-1")).unwrap_or_default();
                // The attention list is the first section of the page.
                let first = b
                    .eval("document.querySelector('main section').id")
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let overflow = b
                    .eval("document.documentElement.scrollWidth - window.innerWidth")
                    .as_i64()
                    .unwrap();
                let inside = b
                    .eval(
                        "Array.from(document.querySelectorAll('#attention button, #queue td:nth-child(4)')).every(function(e){var r=e.getBoundingClientRect();return r.right <= window.innerWidth + 0.5 && r.width > 0})",
                    )
                    .as_bool()
                    .unwrap();
                (blocked, parked, pull, first, overflow, inside)
            })
            .await;
        assert_eq!(first, "attention", "width {width}");
        // BLOCKED: the reason in one line, and Retry.
        assert!(
            blocked.contains("verification failed 3 times: `pytest -q` exited 1"),
            "{blocked}"
        );
        assert!(blocked.contains("fix the cause, then retry"), "{blocked}");
        assert!(blocked.contains("Retry"), "{blocked}");
        // Parked: the agent, the identity, the reset as a clock time and a countdown, Run now.
        assert!(
            parked.contains(&format!("waits for claude@demo's limit, resumes {until}")),
            "{parked}"
        );
        assert!(
            parked.contains("(in 52 min)") || parked.contains("(in 53 min)"),
            "{parked}"
        );
        assert!(parked.contains("Run now"), "{parked}");
        assert!(
            !parked.contains(&seeded.parked_until.timestamp().to_string()),
            "{parked}"
        );
        assert!(
            !parked.contains("T0") && !parked.contains("+00:00"),
            "{parked}"
        );
        // The pull request with failing checks and changes requested.
        assert!(pull.contains("checks failing, changes requested"), "{pull}");
        // At phone width nothing runs off the screen: no sideways scroll, every button
        // and the queue's NEXT column inside the window.
        assert!(
            overflow <= 0,
            "width {width}: the page is {overflow} px too wide"
        );
        assert!(
            buttons_inside,
            "width {width}: a button or NEXT cell is off screen"
        );
    }
}

/// Whether local-3 was retried (its next generation exists).
fn retried(dir: &Path) -> bool {
    let store = Store::open(&dir.join("queue.db")).unwrap();
    store.get_task("local-3.2").unwrap().is_some()
}

fn next_attempt_of(dir: &Path, id: &str) -> Option<chrono::DateTime<Utc>> {
    let store = Store::open(&dir.join("queue.db")).unwrap();
    store.get_task(id).unwrap().unwrap().next_attempt_at
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_and_run_now_work_and_are_refused_without_the_token_and_from_another_origin() {
    let Some(binary) = browser_or_skip() else {
        return;
    };
    let (dir, addr, seeded) = seeded(Some(TOKEN)).await;
    let home = dir.path().to_path_buf();
    // Another site's page (same host, another port: the browser sends the SameSite
    // cookie, so only the Origin check stands between it and the action) that submits
    // a Retry form to the daemon as soon as it loads.
    let evil_target = format!("http://{addr}/tasks/local-3/retry");
    let evil = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let target = evil_target.clone();
            async move {
                axum::response::Html(format!(
                    "<form id=f method=post action=\"{target}\"><input name=csrf value=guess><input name=back value=/></form>\
                     <script>document.getElementById('f').submit()</script>"
                ))
            }
        }),
    );
    let evil_addr = serve(evil).await;

    // 1. Not signed in: the buttons are disabled, and a form sent anyway is refused.
    let (disabled, refused_status) = with_browser(binary.clone(), 1280, move |b| {
        b.goto(&format!("http://{addr}/"));
        let disabled = b
            .eval(&format!(
                "document.querySelector('{} button').disabled",
                card("blocked", "local-3").replace('\'', "\\'")
            ))
            .as_bool()
            .unwrap();
        b.navigate_by(&format!(
            "document.querySelector('{} form').submit()",
            card("blocked", "local-3").replace('\'', "\\'")
        ));
        let body = b.text("body").unwrap_or_default();
        (disabled, body)
    })
    .await;
    assert!(disabled);
    assert!(
        refused_status.contains("a bearer token is required"),
        "{refused_status}"
    );
    assert!(!retried(&home), "an action without the token went through");

    // 2. Signed in; then another origin's page posts Retry: refused.
    let (evil_body, wrong_csrf) = with_browser(binary.clone(), 1280, move |b| {
        b.goto(&format!("http://{addr}/login?next=/"));
        b.eval("document.querySelector('input[name=token]').value = 'wrong'");
        b.click_through("form.login button");
        assert!(b.text("#login-error").is_some(), "a wrong token signed in: {}", b.html());
        b.eval(&format!("document.querySelector('input[name=token]').value = '{TOKEN}'"));
        b.eval("document.querySelector('input[name=name]').value = 'ana'");
        b.click_through("form.login button");
        assert_eq!(b.text("#who").as_deref(), Some("signed in as ana"));
        // A same-origin request with a wrong CSRF value (a script, not the form).
        let wrong = b
            .eval(
                "fetch('/tasks/local-4/run-now',{method:'POST',body:new URLSearchParams({csrf:'nope',back:'/'})}).then(function(r){return r.status})",
            )
            .as_i64()
            .unwrap();
        // The evil page submits itself on load: wait for the daemon's answer to show.
        b.goto(&format!("http://{evil_addr}/"));
        assert!(
            b.wait_for(&format!("location.port === '{}'", addr.port()), Duration::from_secs(30)),
            "the evil page did not post"
        );
        b.wait_loaded();
        (b.text("body").unwrap_or_default(), wrong)
    })
    .await;
    assert_eq!(wrong_csrf, 403);
    assert!(
        evil_body.contains("another site"),
        "the cross-origin post was not refused: {evil_body}"
    );
    assert!(!retried(&home), "a cross-origin post retried the task");
    assert_eq!(next_attempt_of(&home, "local-4"), Some(seeded.parked_until));

    // 3. Signed in, on the page: Retry and Run now work, and the log names ana.
    let (notice_retry, notice_run) = with_browser(binary.clone(), 1280, move |b| {
        b.goto(&format!("http://{addr}/login?next=/"));
        b.eval(&format!(
            "document.querySelector('input[name=token]').value = '{TOKEN}'"
        ));
        b.eval("document.querySelector('input[name=name]').value = 'ana'");
        b.click_through("form.login button");
        b.click_through(&format!("{} button", card("blocked", "local-3")));
        let retry = b.text("#notice").unwrap_or_default();
        b.click_through(&format!(
            "{} form[action$=\"/run-now\"] button",
            card("parked", "local-4")
        ));
        let run = b.text("#notice").unwrap_or_default();
        (retry, run)
    })
    .await;
    assert!(
        notice_retry.contains("local-3 is back as local-3.2"),
        "{notice_retry}"
    );
    assert!(notice_run.contains("local-4 runs now"), "{notice_run}");
    assert!(retried(&home));
    let next = next_attempt_of(&home, "local-4").unwrap();
    assert!(next <= Utc::now(), "run now left it waiting until {next}");
    let store = Store::open(&home.join("queue.db")).unwrap();
    assert!(store.quota_wait("local-4").unwrap().is_none());
    let log = polyphony::ops::actions::actions(&store, "local-4").unwrap();
    let done: Vec<_> = log.iter().filter(|r| r.outcome == "ok").collect();
    assert_eq!(done.len(), 1, "{log:?}");
    assert_eq!(
        (
            done[0].action.as_str(),
            done[0].by.as_str(),
            done[0].via.as_str()
        ),
        ("run-now", "ana", "console")
    );
    let log3 = polyphony::ops::actions::actions(&store, "local-3").unwrap();
    assert!(
        log3.iter()
            .any(|r| r.action == "retry" && r.by == "ana" && r.outcome == "ok"),
        "{log3:?}"
    );

    // The API twins: the token, not the cookie; never from another origin.
    let api = |path: &'static str, headers: Vec<(&'static str, String)>| async move {
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<http_body_util::Full<hyper::body::Bytes>>();
        let mut req = hyper::Request::builder()
            .method("POST")
            .uri(format!("http://{addr}{path}"));
        for (k, v) in &headers {
            req = req.header(*k, v.as_str());
        }
        let res = client
            .request(
                req.body(http_body_util::Full::new(hyper::body::Bytes::new()))
                    .unwrap(),
            )
            .await
            .unwrap();
        res.status().as_u16()
    };
    let bearer = format!("Bearer {TOKEN}");
    assert_eq!(api("/api/v1/tasks/local-5/hold", vec![]).await, 401);
    assert_eq!(
        api(
            "/api/v1/tasks/local-5/hold",
            vec![
                ("authorization", bearer.clone()),
                ("origin", format!("http://{evil_addr}"))
            ]
        )
        .await,
        403
    );
    assert_eq!(
        api(
            "/api/v1/tasks/local-5/hold",
            vec![
                ("authorization", bearer.clone()),
                ("x-polyphony-actor", "bo".into())
            ]
        )
        .await,
        200
    );
    assert_eq!(next_attempt_of(&home, "local-5"), None);
    assert_eq!(
        api(
            "/api/v1/tasks/local-5/hold",
            vec![("authorization", bearer.clone())]
        )
        .await,
        409
    );
    assert_eq!(
        api(
            "/api/v1/tasks/local-5/release",
            vec![("authorization", bearer.clone())]
        )
        .await,
        200
    );
    assert!(next_attempt_of(&home, "local-5").is_some());
    let log5 = polyphony::ops::actions::actions(&store, "local-5").unwrap();
    assert_eq!(log5[0].by, "bo");
    assert_eq!(log5[0].via, "api");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_running_attempts_counters_move_live() {
    let Some(binary) = browser_or_skip() else {
        return;
    };
    let (dir, addr, _) = seeded(None).await;
    let db = dir.path().join("queue.db");
    let slot = "#now li.slot.busy[data-task=\"local-2\"]";
    let (before, after, elapsed) = with_browser(binary, 1280, move |b| {
        b.goto(&format!("http://{addr}/"));
        let read = |b: &mut Browser| {
            (
                b.text(&format!("{slot} .turns")).unwrap_or_default(),
                b.text(&format!("{slot} .tokens")).unwrap_or_default(),
                b.text(&format!("{slot} .activity")).unwrap_or_default(),
            )
        };
        let before = read(b);
        let e1 = b.text(&format!("{slot} .elapsed")).unwrap_or_default();
        // The attempt goes on: two more turns.
        let store = Store::open(&db).unwrap();
        store
            .append_events(
                "local-2",
                1,
                &[
                    console_seed::assistant(3, "m4", "Running pytest", 7000, 400),
                    console_seed::assistant(4, "m5", "All 15 tests pass", 7600, 300),
                ],
            )
            .unwrap();
        assert!(
            b.wait_for(
                &format!(
                    "document.querySelector('{} .turns').textContent === '5'",
                    slot.replace('\'', "\\'")
                ),
                SECONDS
            ),
            "the turns did not move: {}",
            b.html()
        );
        let after = read(b);
        std::thread::sleep(Duration::from_millis(1200));
        let e2 = b.text(&format!("{slot} .elapsed")).unwrap_or_default();
        (before, after, (e1, e2))
    })
    .await;
    assert_eq!(before.0, "3");
    assert_eq!(before.1, "16.7k", "{before:?}");
    assert_eq!(before.2, "assistant: Editing calc/parse.py");
    assert_eq!(after.0, "5");
    assert_eq!(after.1, "32.0k", "{after:?}");
    assert_eq!(after.2, "assistant: All 15 tests pass");
    assert!(elapsed.0.starts_with("4m"), "{elapsed:?}");
    assert_ne!(elapsed.0, elapsed.1, "the elapsed time stands still");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pictures_render_the_right_numbers_for_a_seeded_home() {
    let Some(binary) = browser_or_skip() else {
        return;
    };
    let (_dir, addr, seeded) = seeded(None).await;
    let now = Utc::now();
    let labels: Vec<String> = (0..7)
        .rev()
        .map(|back| {
            (now - chrono::Duration::days(back))
                .format("%m-%d")
                .to_string()
        })
        .collect();
    let today = labels[6].clone();
    let (values, ceiling, landed, blocked, agents, drawn) = with_browser(binary, 1280, move |b| {
        b.goto(&format!("http://{addr}/"));
        let values = b.eval(
            "Array.from(document.querySelectorAll('#cost-demo-7 rect[data-value]')).map(function(r){return [r.getAttribute('data-group'), parseFloat(r.getAttribute('data-value'))]})",
        );
        let ceiling = b.eval("parseFloat(document.querySelector('#cost-demo-7 line.ceiling').getAttribute('data-value'))");
        let group = |b: &mut Browser, series: &str| {
            b.eval(&format!(
                "parseFloat(document.querySelector('#throughput rect[data-series=\"{series}\"][data-group=\"{today}\"]').getAttribute('data-value'))"
            ))
        };
        let landed = group(b, "landed");
        let blocked = group(b, "blocked");
        let agents = b.text("#agents").unwrap_or_default();
        // The SVG is drawn: the bars have a size on screen.
        let drawn = b
            .eval("document.querySelector('#cost-demo-7').getBoundingClientRect().height > 50")
            .as_bool()
            .unwrap();
        (values, ceiling, landed, blocked, agents, drawn)
    })
    .await;
    let values = values.as_array().unwrap().clone();
    assert_eq!(values.len(), 7);
    for (i, v) in values.iter().enumerate() {
        assert_eq!(v[0].as_str().unwrap(), labels[i]);
        let got = v[1].as_f64().unwrap();
        assert!(
            (got - seeded.demo_cost_7[i]).abs() < 1e-6,
            "day {}: {got} != {}",
            labels[i],
            seeded.demo_cost_7[i]
        );
    }
    assert_eq!(ceiling.as_f64(), Some(5.0));
    assert_eq!(landed.as_f64(), Some(seeded.landed_today as f64));
    assert_eq!(blocked.as_f64(), Some(seeded.blocked_today as f64));
    // claude: 6 historic + local-1 succeeded, local-5 failed (local-4's usage limit is not
    // counted) = 7 of 8; codex: 3 work + 0 of hist-b and local-3's 3 = 3 of 7.
    assert!(agents.contains("claude88% of 8"), "{agents}");
    assert!(agents.contains("codex43% of 7"), "{agents}");
    assert!(drawn);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_task_page_shows_the_timeline_the_diff_the_pull_request_and_links_both_ways() {
    let Some(binary) = browser_or_skip() else {
        return;
    };
    let (_dir, addr, _) = seeded(Some(TOKEN)).await;
    // local-3 is retried through the API: the generations link to each other.
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<hyper::body::Bytes>>();
    let res = client
        .request(
            hyper::Request::builder()
                .method("POST")
                .uri(format!("http://{addr}/api/v1/tasks/local-3/retry"))
                .header("authorization", format!("Bearer {TOKEN}"))
                .body(http_body_util::Full::new(hyper::body::Bytes::new()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let (landed, blocked, next_gen) = with_browser(binary, 420, move |b| {
        let mut read = |path: &str| {
            b.goto(&format!("http://{addr}{path}"));
            let js = "JSON.stringify({pull: (document.querySelector('#pull')||{}).textContent||'', \
                diff: (document.querySelector('#diff pre')||{}).textContent||'', \
                rows: Array.from(document.querySelectorAll('#timeline tbody tr[data-attempt]')).map(function(r){return r.textContent}), \
                transcript: (document.querySelector('#transcript pre')||{}).textContent||'', \
                links: Array.from(document.querySelectorAll('#links a')).map(function(a){return a.getAttribute('href')}), \
                egress: (document.querySelector('#attempts ul.egress')||{}).textContent||'', \
                overflow: document.documentElement.scrollWidth - window.innerWidth})";
            serde_json::from_str::<serde_json::Value>(b.eval(js).as_str().unwrap()).unwrap()
        };
        (
            read("/tasks/local-1"),
            read("/tasks/local-3"),
            read("/tasks/local-3.2"),
        )
    })
    .await;
    // The pull request with checks, review and mergeable.
    let pull = landed["pull"].as_str().unwrap();
    for want in ["#12", "failing", "changes_requested", "yes", "watching"] {
        assert!(pull.contains(want), "{want}: {pull}");
    }
    // The diff that landed, read from the attempt's workspace.
    let diff = landed["diff"].as_str().unwrap();
    assert!(diff.contains("+++ b/calc/parse.py"), "{diff}");
    assert!(diff.contains("+        return -int(text[1:])"), "{diff}");
    assert!(
        diff.contains("-    return int(text)") || diff.contains(" return int(text)"),
        "{diff}"
    );
    // What the attempt's egress proxy refused.
    let egress = landed["egress"].as_str().unwrap();
    assert!(egress.contains("egress refused pypi.org:443"), "{egress}");
    // The stored transcript.
    let transcript = landed["transcript"].as_str().unwrap();
    assert!(
        transcript.contains("Ran pytest -q: 14 passed"),
        "{transcript}"
    );
    // The timeline: one attempt for local-1; three failed ones for local-3.
    assert_eq!(landed["rows"].as_array().unwrap().len(), 1);
    let rows = blocked["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "{rows:?}");
    for r in rows {
        let r = r.as_str().unwrap();
        assert!(
            r.contains("codex@demo") && r.contains("failed") && r.contains("2m 20s"),
            "{r}"
        );
    }
    // Generations link both ways.
    assert!(
        blocked["links"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l == "/tasks/local-3.2"),
        "{blocked}"
    );
    assert!(
        next_gen["links"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l == "/tasks/local-3"),
        "{next_gen}"
    );
    // At 420 px the page does not scroll sideways.
    for page in [&landed, &blocked, &next_gen] {
        assert!(page["overflow"].as_i64().unwrap() <= 0, "{page}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_on_a_running_slot_records_the_request_with_who_asked() {
    let Some(binary) = browser_or_skip() else {
        return;
    };
    let (dir, addr, _) = seeded(Some(TOKEN)).await;
    let (unsigned_disabled, notice) = with_browser(binary, 1280, move |b| {
        let slot = "#now li.slot.busy[data-task=\"local-2\"] form[action$=\"/cancel\"] button";
        b.goto(&format!("http://{addr}/"));
        let disabled = b
            .eval(&format!(
                "document.querySelector({}).disabled",
                serde_json::to_string(slot).unwrap()
            ))
            .as_bool()
            .unwrap();
        b.goto(&format!("http://{addr}/login?next=/"));
        b.eval(&format!(
            "document.querySelector('input[name=token]').value = '{TOKEN}'"
        ));
        b.eval("document.querySelector('input[name=name]').value = 'ana'");
        b.click_through("form.login button");
        b.click_through(slot);
        (disabled, b.text("#notice").unwrap_or_default())
    })
    .await;
    assert!(unsigned_disabled);
    // No daemon owns the attempt here: the request is recorded for the owner to apply.
    assert!(notice.contains("local-2: cancel recorded"), "{notice}");
    let store = Store::open(&dir.path().join("queue.db")).unwrap();
    let request = store.cancel_request("local-2").unwrap().expect("recorded");
    assert!(request.by.contains("ana"), "{request:?}");
    let log = polyphony::ops::actions::actions(&store, "local-2").unwrap();
    assert!(
        log.iter()
            .any(|r| r.action == "cancel" && r.by == "ana" && r.via == "console"),
        "{log:?}"
    );
}

/// Issue 29: once there is a fleet (a running attempt claimed by another machine's
/// daemon), the Now panel shows the agent slots per machine, this one first, each with
/// its busy and idle slots; a home of one machine shows one list without headings.
/// Issue 27: every machine whose daemon's heartbeat runs has a group in the Now panel, idle
/// ones too (before, a machine appeared only while it held a claim); one whose heartbeat
/// stopped (recorded alive until a minute ago) does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_now_panel_shows_every_live_machine_of_a_fleet_idle_or_not() {
    let Some(binary) = browser_or_skip() else {
        return;
    };
    let (dir, addr, _) = seeded(None).await;
    let db = dir.path().join("queue.db");
    const READ: &str = "JSON.stringify({heads: Array.from(document.querySelectorAll('#now h3.machine')).map(function(e){return e.textContent.trim()}), lists: Array.from(document.querySelectorAll('#now ul.slots')).map(function(u){return {machine: u.getAttribute('data-machine'), slots: Array.from(u.querySelectorAll('li.slot')).map(function(l){return l.getAttribute('data-task') || 'idle'})}}), summary: document.getElementById('summary').textContent})";
    let fleet = with_browser(binary, 1280, move |b| {
        let store = Store::open(&db).unwrap();
        let now = Utc::now();
        // `idle-box` beats and runs nothing; `gone` stopped beating a minute ago.
        store.set_machine_slots("idle-box", 2, now).unwrap();
        store
            .set_machine_alive("idle-box", std::time::Duration::from_secs(30), now)
            .unwrap();
        store.set_machine_slots("gone", 4, now).unwrap();
        store
            .set_machine_alive(
                "gone",
                std::time::Duration::from_secs(60),
                now - chrono::Duration::minutes(2),
            )
            .unwrap();
        b.goto(&format!("http://{addr}/"));
        b.eval(READ).as_str().unwrap_or_default().to_string()
    })
    .await;
    let fleet: serde_json::Value = serde_json::from_str(&fleet).unwrap();
    assert_eq!(
        fleet["heads"],
        serde_json::json!([
            "test-machine 1 of 2 slots busy",
            "idle-box 0 of 2 slots busy"
        ]),
        "{fleet}"
    );
    assert_eq!(
        fleet["lists"],
        serde_json::json!([
            {"machine": "test-machine", "slots": ["local-2", "idle"]},
            {"machine": "idle-box", "slots": ["idle", "idle"]},
        ]),
        "{fleet}"
    );
    assert!(
        fleet["summary"]
            .as_str()
            .unwrap_or_default()
            .contains("1 of 4 agent slots busy on 2 machines"),
        "{fleet}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_now_panel_shows_agent_slots_per_machine_in_a_fleet() {
    use polyphony::store::Owner;
    let Some(binary) = browser_or_skip() else {
        return;
    };
    let (dir, addr, _) = seeded(None).await;
    let db = dir.path().join("queue.db");
    // What the Now panel shows: each group's heading, and each list's slots as
    // `task` (busy) or `idle`.
    const READ: &str = "JSON.stringify({heads: Array.from(document.querySelectorAll('#now h3.machine')).map(function(e){return e.textContent.trim()}), lists: Array.from(document.querySelectorAll('#now ul.slots')).map(function(u){return {machine: u.getAttribute('data-machine'), slots: Array.from(u.querySelectorAll('li.slot')).map(function(l){return l.getAttribute('data-task') || 'idle'})}}), summary: document.getElementById('summary').textContent})";
    let (alone, fleet) = with_browser(binary, 1280, move |b| {
        b.goto(&format!("http://{addr}/"));
        let alone = b.eval(READ).as_str().unwrap_or_default().to_string();
        // local-2 is this machine's; a second machine, `far`, runs 3 slots and one attempt.
        let store = Store::open(&db).unwrap();
        let now = Utc::now();
        let lease = std::time::Duration::from_secs(10 * 60);
        store
            .take_over("local-2", &Owner::this_process("test-machine"), lease, now)
            .unwrap();
        console_seed::task(
            &store,
            "far-1",
            "Port the lexer",
            now - chrono::Duration::minutes(3),
        );
        console_seed::walk(
            &store,
            "far-1",
            &[
                TaskState::Claimed,
                TaskState::Routed,
                TaskState::Provisioned,
                TaskState::Running,
            ],
            "seed",
            now - chrono::Duration::minutes(2),
        );
        store
            .start_attempt(
                &console_seed::spec("far-1", 1, "codex", "work"),
                now - chrono::Duration::minutes(2),
            )
            .unwrap();
        store
            .take_over("far-1", &Owner::this_process("far"), lease, now)
            .unwrap();
        store.set_machine_slots("far", 3, now).unwrap();
        b.goto(&format!("http://{addr}/"));
        let fleet = b.eval(READ).as_str().unwrap_or_default().to_string();
        (alone, fleet)
    })
    .await;
    let alone: serde_json::Value = serde_json::from_str(&alone).unwrap();
    assert_eq!(alone["heads"], serde_json::json!([]), "{alone}");
    assert_eq!(
        alone["lists"],
        serde_json::json!([{"machine": null, "slots": ["local-2", "idle"]}]),
        "{alone}"
    );
    let fleet: serde_json::Value = serde_json::from_str(&fleet).unwrap();
    assert_eq!(
        fleet["heads"],
        serde_json::json!(["test-machine 1 of 2 slots busy", "far 1 of 3 slots busy"]),
        "{fleet}"
    );
    assert_eq!(
        fleet["lists"],
        serde_json::json!([
            {"machine": "test-machine", "slots": ["local-2", "idle"]},
            {"machine": "far", "slots": ["far-1", "idle", "idle"]},
        ]),
        "{fleet}"
    );
    assert!(
        fleet["summary"]
            .as_str()
            .unwrap_or_default()
            .contains("2 of 5 agent slots busy on 2 machines"),
        "{fleet}"
    );
}
