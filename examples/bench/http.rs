//! The daemon's HTTP surface at 100k tasks (issue 16): `polyphony daemon --listen` on a
//! home of `BENCH_STATUS_TASKS` finished tasks (nothing to claim, so the daemon idles and
//! only serves), each endpoint timed over loopback beside `sqlite3` reading the same rows;
//! then the daemon's VmRSS with 50 Server-Sent-Events clients following a running
//! attempt, and whether those clients slow the attempt's event writes.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use chrono::Utc;
use polyphony::domain::{
    AgentType, EventKind, EventStream, NetworkMode, ResourceLimits, RunSpec, SourceKind, Task,
    TaskEvent, TaskState,
};
use polyphony::store::Store;

use super::{checkpoint, median, mib, ms, sample_task, time_command, Config};

/// One GET over a fresh connection; returns the status line's code and the body bytes.
fn get(addr: SocketAddr, path: &str) -> anyhow::Result<(u16, usize)> {
    let mut s = TcpStream::connect(addr)?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let head = String::from_utf8_lossy(&buf[..buf.len().min(64)]).into_owned();
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((code, buf.len()))
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

pub fn spec(task_id: &str) -> RunSpec {
    RunSpec {
        task_id: task_id.into(),
        attempt: 1,
        agent: "claude".into(),
        agent_type: AgentType::Claude,
        cli_command: "claude".into(),
        fallback: vec![],
        identity: "bench".into(),
        workspace: "/nonexistent/bench".into(),
        branch: "polyphony/bench-a1".into(),
        base_ref: None,
        image: "none".into(),
        model: None,
        max_turns: None,
        args: Vec::new(),
        env_overlay: vec![],
        volume_mounts: vec![],
        deadline_seconds: 3600,
        idle_timeout_seconds: 3600,
        network: NetworkMode::None,
        egress: Default::default(),
        limits: ResourceLimits::default(),
        verification: vec![],
        verify_image: "none".into(),
        rule: "default".into(),
    }
}

fn event(seq: u64) -> TaskEvent {
    TaskEvent {
        seq,
        kind: EventKind::Message,
        stream: EventStream::Stdout,
        summary: format!("line {seq}: editing src/parser.rs and running the tests"),
        data: serde_json::json!({"type": "assistant", "n": seq}),
        at: Utc::now(),
    }
}

/// Median time to append `n` events one batch of 10 at a time.
fn append_time(store: &Store, task: &str, from: u64, n: u64) -> anyhow::Result<f64> {
    let mut times = Vec::new();
    let mut seq = from;
    while seq < from + n {
        let batch: Vec<TaskEvent> = (seq..seq + 10).map(event).collect();
        let t = Instant::now();
        store.append_events(task, 1, &batch)?;
        times.push(t.elapsed().as_secs_f64());
        seq += 10;
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(median(&mut times))
}

pub fn http(cfg: &Config) -> anyhow::Result<String> {
    let n = cfg.status_tasks;
    let dir = cfg.dir.join("http");
    let home = dir.join("home");
    let db = home.join("queue.db");
    let marker = dir.join(format!("populated-{n}"));
    if !marker.exists() {
        let dir = cfg.scratch("http")?;
        std::fs::create_dir_all(&home)?;
        eprintln!("http: populating {n} finished tasks ...");
        let store = Store::open(&db)?;
        for i in 0..n {
            // Nothing the daemon could claim: it only serves.
            let state = if i % 5 == 0 {
                TaskState::Blocked
            } else {
                TaskState::Landed
            };
            store.insert_task(&sample_task(i, state))?;
        }
        drop(store);
        checkpoint(&db)?;
        std::fs::File::create(dir.join(format!("populated-{n}")))?;
    }
    // The bench's running attempt, fresh each run.
    {
        let store = Store::open(&db)?;
        if store.get_task("bench-live")?.is_some() {
            bail!(
                "{} holds a previous run's live task: remove {}",
                db.display(),
                dir.display()
            );
        }
    }

    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let mut daemon = Command::new(&cfg.bin)
        .arg("--home")
        .arg(&home)
        .args(["daemon", "--listen", &addr.to_string()])
        .env_remove("POLYPHONY_HTTP_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting the daemon")?;
    let pid = daemon.id();
    let result = measure(cfg, addr, pid, &db, n);
    let _ = Command::new("kill").arg(pid.to_string()).status();
    let _ = daemon.wait();
    // Leave the home as populated: drop the live task for the next run.
    if let Ok(c) = rusqlite::Connection::open(&db) {
        let _ = c.execute_batch(
            "DELETE FROM events WHERE task_id = 'bench-live'; \
             DELETE FROM attempts WHERE task_id = 'bench-live'; \
             DELETE FROM transitions WHERE task_id = 'bench-live'; \
             DELETE FROM tasks WHERE id = 'bench-live';",
        );
    }
    result
}

fn measure(
    cfg: &Config,
    addr: SocketAddr,
    pid: u32,
    db: &Path,
    n: usize,
) -> anyhow::Result<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !matches!(get(addr, "/api/v1/health"), Ok((200, _))) {
        if Instant::now() > deadline {
            bail!("the daemon did not serve on {addr} within 30 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let reps = (cfg.reps * 4).max(9);
    let db_s = db.to_string_lossy().into_owned();
    let cases: Vec<(String, String, Option<String>)> = vec![
        (
            "`GET /api/v1/tasks` (100 newest, the default page)".into(),
            "/api/v1/tasks".into(),
            Some("SELECT json FROM task_summaries ORDER BY seq DESC LIMIT 100".into()),
        ),
        (
            format!("`GET /api/v1/tasks?limit=0` (all {n}, streamed)"),
            "/api/v1/tasks?limit=0".into(),
            Some("SELECT json FROM task_summaries ORDER BY seq DESC".into()),
        ),
        (
            "`GET /api/v1/tasks?state=BLOCKED&limit=100`".into(),
            "/api/v1/tasks?state=BLOCKED&limit=100".into(),
            None,
        ),
        (
            "`GET /api/v1/tasks/local-50000`".into(),
            format!("/api/v1/tasks/local-{}", n / 2),
            None,
        ),
        ("`GET /api/v1/state`".into(), "/api/v1/state".into(), None),
        (
            "`GET /metrics`".into(),
            "/metrics".into(),
            Some("SELECT state, COUNT(*) FROM tasks GROUP BY state".into()),
        ),
        ("`GET /` (dashboard, 200 newest)".into(), "/".into(), None),
    ];
    let mut md = String::new();
    writeln!(md, "{n} finished tasks (80% LANDED, 20% BLOCKED), database {}; `polyphony daemon --listen` (release build) idle but serving; each request over a fresh loopback connection, {reps} times after one warm-up, medians. The `sqlite3` column runs the same rows' query in the shell (process start included).\n", mib(std::fs::metadata(db).map(|m| m.len()).unwrap_or(0)))?;
    writeln!(
        md,
        "| Request | median | min | bytes | `sqlite3` same rows |"
    )?;
    writeln!(md, "|---|---|---|---|---|")?;
    let mut worst_page = 0.0f64;
    for (label, path, sql) in &cases {
        eprintln!("http: {label} ...");
        let (code, size) = get(addr, path)?;
        if code != 200 {
            bail!("{path} answered {code}");
        }
        let mut times = Vec::new();
        for _ in 0..reps {
            let t = Instant::now();
            get(addr, path)?;
            times.push(t.elapsed().as_secs_f64());
        }
        let min = times.iter().copied().fold(f64::MAX, f64::min);
        let med = median(&mut times);
        if !path.contains("limit=0") {
            worst_page = worst_page.max(med);
        }
        let shell = match sql {
            Some(q) => {
                let mut t = Vec::new();
                for _ in 0..reps.min(5) {
                    t.push(time_command(
                        Command::new("sqlite3")
                            .arg(&db_s)
                            .arg(q)
                            .stdout(Stdio::null()),
                    )?);
                }
                ms(median(&mut t))
            }
            None => "-".into(),
        };
        writeln!(
            md,
            "| {label} | {} | {} | {size} | {shell} |",
            ms(med),
            ms(min)
        )?;
    }
    writeln!(md)?;
    writeln!(md, "Target (issue 16): `GET /tasks` and `/metrics` at {n} tasks under 50 ms: **{}** (slowest paged request {}).\n", if worst_page < 0.05 { "met" } else { "missed" }, ms(worst_page))?;

    // A running attempt, 50 SSE clients on it, and the writes it makes meanwhile.
    let store = Store::open(db)?;
    let now = Utc::now();
    let task = Task::new(
        "bench-live",
        SourceKind::Local,
        "local:bench-live",
        "/nonexistent",
        "live",
        now,
    );
    store.insert_task(&task)?;
    for to in [
        TaskState::Claimed,
        TaskState::Routed,
        TaskState::Provisioned,
        TaskState::Running,
    ] {
        let from = store
            .get_task("bench-live")?
            .map(|t| t.state)
            .context("live task")?;
        store.transition("bench-live", from, to, "bench", now)?;
    }
    store.start_attempt(&spec("bench-live"), now)?;
    let rss_idle = rss_kib(pid);
    let alone = append_time(&store, "bench-live", 0, 1000)?;

    let stop = Arc::new(AtomicBool::new(false));
    let received = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for _ in 0..50 {
        let stop = stop.clone();
        let received = received.clone();
        clients.push(std::thread::spawn(move || -> anyhow::Result<()> {
            let mut s = TcpStream::connect(addr)?;
            s.set_read_timeout(Some(Duration::from_millis(200)))?;
            write!(
                s,
                "GET /api/v1/tasks/bench-live/events HTTP/1.1\r\nHost: {addr}\r\n\r\n"
            )?;
            let mut buf = [0u8; 16384];
            while !stop.load(Ordering::Relaxed) {
                match s.read(&mut buf) {
                    Ok(0) => break,
                    Ok(k) => {
                        received.fetch_add(k as u64, Ordering::Relaxed);
                    }
                    Err(_) => {}
                }
            }
            Ok(())
        }));
    }
    std::thread::sleep(Duration::from_secs(2));
    let mut peak = rss_kib(pid);
    let with_clients = append_time(&store, "bench-live", 1000, 1000)?;
    peak = peak.max(rss_kib(pid));
    std::thread::sleep(Duration::from_secs(1));
    peak = peak.max(rss_kib(pid));
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        let _ = c.join();
    }
    let bytes = received.load(Ordering::Relaxed);
    writeln!(md, "| Daemon with the server on | value |")?;
    writeln!(md, "|---|---|")?;
    writeln!(
        md,
        "| VmRSS idle, after the requests above | {} |",
        super::kib(rss_idle)
    )?;
    writeln!(
        md,
        "| VmRSS peak with 50 SSE clients following a running attempt | {} |",
        super::kib(peak)
    )?;
    writeln!(
        md,
        "| Bytes the 50 clients received (2,000 events each) | {} |",
        mib(bytes)
    )?;
    writeln!(
        md,
        "| Median time to store a batch of 10 events, no clients | {} |",
        super::secs(alone)
    )?;
    writeln!(
        md,
        "| The same with 50 SSE clients reading the attempt | {} ({:.2}x) |",
        super::secs(with_clients),
        with_clients / alone
    )?;
    Ok(md)
}
