//! 300 Server-Sent-Events streams against `polyphony daemon --listen` (issue 24): the
//! latency of `GET /api/v1/health` idle and while 300 clients follow ten live attempts
//! (30 each, events written meanwhile), the daemon's CPU over that window, and how many of
//! 300 streams the default caps admit.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use chrono::Utc;
use polyphony::domain::{EventKind, EventStream, SourceKind, Task, TaskEvent, TaskState};
use polyphony::store::Store;

use super::{median, ms, Config};

const STREAMS: usize = 300;
const ATTEMPTS: usize = 10;
const WINDOW: Duration = Duration::from_secs(5);

fn get(addr: SocketAddr, path: &str) -> anyhow::Result<u16> {
    let mut s = TcpStream::connect(addr)?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let head = String::from_utf8_lossy(&buf[..buf.len().min(64)]).into_owned();
    Ok(head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0))
}

/// Median and 95th percentile of `n` health requests.
fn health(addr: SocketAddr, n: usize) -> anyhow::Result<(f64, f64)> {
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let code = get(addr, "/api/v1/health")?;
        if code != 200 {
            bail!("health answered {code}");
        }
        times.push(t.elapsed().as_secs_f64());
        std::thread::sleep(Duration::from_millis(20));
    }
    times.sort_by(f64::total_cmp);
    let p95 = times[(times.len() * 95 / 100).min(times.len() - 1)];
    Ok((median(&mut times), p95))
}

/// utime + stime of `pid`, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = fields
        .get(11..13)
        .map(|f| f.iter().filter_map(|v| v.parse::<f64>().ok()).sum())
        .unwrap_or(0.0);
    ticks / 100.0
}

fn event(seq: u64) -> TaskEvent {
    TaskEvent {
        seq,
        kind: EventKind::Message,
        stream: EventStream::Stdout,
        summary: format!("working on step {seq}"),
        data: serde_json::json!({"type": "assistant", "text": format!("step {seq}")}),
        at: Utc::now(),
    }
}

fn live_task(store: &Store, id: &str) -> anyhow::Result<()> {
    let now = Utc::now();
    store.insert_task(&Task::new(
        id,
        SourceKind::Local,
        format!("local:{id}"),
        "/nonexistent",
        "live",
        now,
    ))?;
    for to in [
        TaskState::Claimed,
        TaskState::Routed,
        TaskState::Provisioned,
        TaskState::Running,
    ] {
        let from = store.get_task(id)?.map(|t| t.state).context("live task")?;
        store.transition(id, from, to, "bench", now)?;
    }
    store.start_attempt(&super::http::spec(id), now)?;
    let first: Vec<TaskEvent> = (0..100).map(event).collect();
    store.append_events(id, 1, &first)?;
    Ok(())
}

fn start_daemon(cfg: &Config, home: &Path) -> anyhow::Result<(Child, SocketAddr)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let daemon = Command::new(&cfg.bin)
        .arg("--home")
        .arg(home)
        .args(["daemon", "--listen", &addr.to_string()])
        .env_remove("POLYPHONY_HTTP_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting the daemon")?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !matches!(get(addr, "/api/v1/health"), Ok(200)) {
        if Instant::now() > deadline {
            bail!("the daemon did not serve on {addr} within 30 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok((daemon, addr))
}

fn stop(mut daemon: Child) {
    let _ = Command::new("kill").arg(daemon.id().to_string()).status();
    let _ = daemon.wait();
}

/// Opens `n` streams spread over the live attempts; returns how many were admitted (200)
/// and the reader threads (they stop when `stop` is set).
fn open_streams(
    addr: SocketAddr,
    prefix: &str,
    n: usize,
    stop: &Arc<AtomicBool>,
    received: &Arc<AtomicU64>,
) -> anyhow::Result<(usize, usize, Vec<std::thread::JoinHandle<()>>)> {
    let mut admitted = 0;
    let mut refused = 0;
    let mut threads = Vec::new();
    for i in 0..n {
        let mut s = TcpStream::connect(addr)?;
        write!(
            s,
            "GET /api/v1/tasks/{prefix}-{}/events HTTP/1.1\r\nHost: {addr}\r\n\r\n",
            i % ATTEMPTS
        )?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut head = [0u8; 12];
        s.read_exact(&mut head)?;
        if &head[9..12] == b"200" {
            admitted += 1;
        } else {
            refused += 1;
            continue;
        }
        s.set_read_timeout(Some(Duration::from_millis(200)))?;
        let (stop, received) = (stop.clone(), received.clone());
        threads.push(std::thread::spawn(move || {
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
        }));
    }
    Ok((admitted, refused, threads))
}

pub fn sse(cfg: &Config) -> anyhow::Result<String> {
    let dir = cfg.scratch("sse")?;
    let home = dir.join("home");
    std::fs::create_dir_all(&home)?;
    let db = home.join("queue.db");
    drop(Store::open(&db)?);
    // The live tasks are made after each daemon start: its recovery pass would end an
    // attempt that has no container.
    let live = |prefix: &str| -> anyhow::Result<()> {
        let store = Store::open(&db)?;
        for i in 0..ATTEMPTS {
            live_task(&store, &format!("{prefix}-{i}"))?;
        }
        Ok(())
    };
    let reps = (cfg.reps * 10).max(50);

    // The second start retries the first one's live attempts (their containers are gone),
    // and their repository does not exist: with `egress: none` those retries make no Docker
    // network (one made beside the clone outlives the stopped daemon; this home has no
    // next start to remove it).
    const NO_EGRESS: &str = "egress:\n  mode: none\n";
    // Caps raised so all 300 are served.
    std::fs::write(
        home.join("config.yaml"),
        format!("{NO_EGRESS}http:\n  max_streams: 1000\n  max_streams_per_client: 1000\n"),
    )?;
    let (daemon, addr) = start_daemon(cfg, &home)?;
    let pid = daemon.id();
    let result = (|| -> anyhow::Result<_> {
        std::thread::sleep(Duration::from_secs(1));
        live("bench-live")?;
        let idle = health(addr, reps)?;
        let cpu_idle_start = cpu_seconds(pid);
        std::thread::sleep(WINDOW);
        let cpu_idle = cpu_seconds(pid) - cpu_idle_start;

        // Live attempts: 10 events per attempt every 100 ms while the clients follow.
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (stop, db) = (stop.clone(), db.clone());
            std::thread::spawn(move || -> anyhow::Result<u64> {
                let store = Store::open(&db)?;
                let mut seq = 100;
                let mut written = 0;
                while !stop.load(Ordering::Relaxed) {
                    let batch: Vec<TaskEvent> = (seq..seq + 10).map(event).collect();
                    for i in 0..ATTEMPTS {
                        store.append_events(&format!("bench-live-{i}"), 1, &batch)?;
                        written += 10;
                    }
                    seq += 10;
                    std::thread::sleep(Duration::from_millis(100));
                }
                Ok(written)
            })
        };
        let received = Arc::new(AtomicU64::new(0));
        let (admitted, refused, readers) =
            open_streams(addr, "bench-live", STREAMS, &stop, &received)?;
        std::thread::sleep(Duration::from_secs(1));
        let cpu_start = cpu_seconds(pid);
        let window = Instant::now();
        let loaded = health(addr, reps)?;
        let rest = WINDOW.saturating_sub(window.elapsed());
        std::thread::sleep(rest);
        let cpu = (cpu_seconds(pid) - cpu_start) / window.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            let _ = r.join();
        }
        let written = writer
            .join()
            .map_err(|_| anyhow::anyhow!("writer panicked"))??;
        Ok((
            idle,
            cpu_idle / WINDOW.as_secs_f64(),
            loaded,
            cpu,
            admitted,
            refused,
            received.load(Ordering::Relaxed),
            written,
        ))
    })();
    stop(daemon);
    let (idle, cpu_idle, loaded, cpu, admitted, refused, received, written) = result?;
    if admitted != STREAMS {
        bail!("only {admitted} of {STREAMS} streams were admitted with the caps raised ({refused} refused)");
    }

    // The default caps: how many of 300 streams from one address get in.
    std::fs::write(home.join("config.yaml"), NO_EGRESS)?;
    let (daemon, addr) = start_daemon(cfg, &home)?;
    std::thread::sleep(Duration::from_secs(1));
    let stop_flag = Arc::new(AtomicBool::new(false));
    let counted = live("bench-default").and_then(|()| {
        open_streams(
            addr,
            "bench-default",
            STREAMS,
            &stop_flag,
            &Arc::new(AtomicU64::new(0)),
        )
    });
    stop_flag.store(true, Ordering::Relaxed);
    let (default_admitted, default_refused) = match counted {
        Ok((a, r, readers)) => {
            for t in readers {
                let _ = t.join();
            }
            (a, r)
        }
        Err(e) => {
            stop(daemon);
            return Err(e);
        }
    };
    stop(daemon);

    let ratio = loaded.0 / idle.0;
    let mut md = String::new();
    writeln!(md, "{ATTEMPTS} running attempts, each written 10 events every 100 ms; {STREAMS} clients (one loopback address) follow them, {} each; `GET /api/v1/health` over a fresh connection {reps} times, 20 ms apart; daemon CPU from /proc/PID/stat over {} s.\n", STREAMS / ATTEMPTS, WINDOW.as_secs())?;
    writeln!(md, "| | health median | health p95 | daemon CPU |")?;
    writeln!(md, "|---|---|---|---|")?;
    writeln!(
        md,
        "| idle (no streams) | {} | {} | {:.1}% |",
        ms(idle.0),
        ms(idle.1),
        cpu_idle * 100.0
    )?;
    writeln!(
        md,
        "| {STREAMS} streams (caps raised to 1000) | {} ({ratio:.2}x) | {} | {:.1}% |",
        ms(loaded.0),
        ms(loaded.1),
        cpu * 100.0
    )?;
    writeln!(md)?;
    writeln!(
        md,
        "Events written meanwhile: {written}; bytes the clients received: {received}."
    )?;
    writeln!(md, "With the default caps (`http.max_streams: 128`, `max_streams_per_client: 16`), {default_admitted} of {STREAMS} streams from one address were admitted and {default_refused} answered 429.\n")?;
    writeln!(
        md,
        "Target (issue 24): health within 2x its idle latency with {STREAMS} streams: **{}**.",
        if ratio <= 2.0 { "met" } else { "missed" }
    )?;
    Ok(md)
}
