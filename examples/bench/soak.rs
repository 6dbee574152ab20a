//! A daemon that runs for weeks (issue 24): `polyphony daemon` takes `BENCH_SOAK_TASKS`
//! (1,000) small tasks one after another, `BENCH_SOAK_CONCURRENCY` (4) at a time, and its
//! VmRSS (`/proc/PID/status`) is sampled every 250 ms. What it shows is the slope of
//! resident memory against tasks finished after a warm-up (the first tenth, at least 100
//! tasks): flat means nothing is kept per task in the process.
//!
//! Each task is the fake `claude` of the offline test image with scenario `succeed` (a
//! note appended, a success result), `egress: none`, verified by `true`, landed on a bare
//! `file://` origin: the whole pipeline, Docker included, without a model or a network.
//! The home's retention (`retention.workspaces: 1m`, swept every 30 s) is on, so the disk
//! figure at the end is that of a bounded daemon too.

use std::fmt::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use polyphony::domain::TaskState;
use polyphony::store::Store;

use super::attempts::{ensure_image, insert_task, rss_kib, write_origin, Daemon};
use super::{env_or, polyphony_db, Config};

const IMAGE: &str = "polyphony-test:latest";
/// Finished workspaces go a minute after their task ended, checked every 30 s.
const RETENTION: &str = "retention:\n  workspaces: 1m\n  every: 30s\n";

struct Sample {
    secs: f64,
    done: u64,
    kib: u64,
    /// RssAnon (heap, stacks), RssFile (the binary's pages, mapped files), RssShmem
    /// (SQLite's `-shm`), in KiB.
    anon: u64,
    file: u64,
    shmem: u64,
}

/// RssAnon, RssFile and RssShmem of `pid`, in KiB.
fn rss_parts(pid: u32) -> (u64, u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("RssAnon:"), field("RssFile:"), field("RssShmem:"))
}

/// Bytes under `path` (`du -sb`), 0 when it is missing.
fn du(path: &std::path::Path) -> u64 {
    let Ok(out) = Command::new("du").arg("-sb").arg(path).output() else {
        return 0;
    };
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Least-squares slope of `kib` against `done`.
fn slope(samples: &[&Sample]) -> f64 {
    let n = samples.len() as f64;
    if n < 2.0 {
        return f64::NAN;
    }
    let mx = samples.iter().map(|s| s.done as f64).sum::<f64>() / n;
    let my = samples.iter().map(|s| s.kib as f64).sum::<f64>() / n;
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for s in samples {
        let dx = s.done as f64 - mx;
        sxy += dx * (s.kib as f64 - my);
        sxx += dx * dx;
    }
    sxy / sxx
}

/// The median RSS of the samples taken while `done` was in `lo..=hi`.
fn rss_between(samples: &[Sample], lo: u64, hi: u64, part: fn(&Sample) -> u64) -> u64 {
    let mut w: Vec<u64> = samples
        .iter()
        .filter(|s| s.done >= lo && s.done <= hi)
        .map(part)
        .collect();
    w.sort_unstable();
    w.get(w.len() / 2).copied().unwrap_or(0)
}

pub fn soak(cfg: &Config) -> anyhow::Result<String> {
    ensure_image()?;
    let total = env_or("BENCH_SOAK_TASKS", 1000)?.max(10) as u64;
    let concurrency = env_or("BENCH_SOAK_CONCURRENCY", 4)?.max(1);
    let warmup = (total / 10).max(100).min(total / 2);
    let dir = cfg.scratch("soak")?;
    let origin = write_origin(&dir)?;
    let home = dir.join("home");
    polyphony::demo::write_home(&home, &dir, IMAGE)?;
    std::fs::write(
        home.join("config.yaml"),
        format!(
            "poll_interval: 30s\nmax_concurrent_agents: {concurrency}\nevent_idle_timeout: 1m\n\
             max_attempts: 1\ndefault_identity: demo\negress:\n  mode: none\n{RETENTION}\
             container:\n  image: {IMAGE}\n  deadline: 2m\n  memory: 256m\n  cpus: 1\n"
        ),
    )?;
    let store = Store::open(&polyphony_db(&home))?;
    let log = dir.join("daemon.log");
    let child = Command::new(&cfg.bin)
        .arg("--home")
        .arg(&home)
        .arg("daemon")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .spawn()
        .context("starting polyphony daemon")?;
    let pid = child.id();
    let daemon = Daemon {
        child,
        home: home.clone(),
    };
    std::thread::sleep(Duration::from_secs(2));
    let idle_kib = rss_kib(pid).context("the daemon exited at start")?;
    let idle_parts = rss_parts(pid);

    let me = std::process::id();
    let body =
        "A small task: the fake agent appends a note and exits.\n\npolyphony-fake: succeed\n";
    let mut inserted = 0u64;
    let mut samples: Vec<Sample> = Vec::new();
    let t = Instant::now();
    let limit = Duration::from_secs(total * 20 + 300);
    let mut last_print = Instant::now();
    let (landed, other) = loop {
        let counts = store.count_by_state()?;
        let count = |s: TaskState| counts.get(&s).copied().unwrap_or(0);
        let landed = count(TaskState::Landed);
        let other = count(TaskState::Blocked);
        let done = landed + other;
        let Some(kib) = rss_kib(pid) else {
            bail!("the daemon exited (see {})", log.display());
        };
        let (anon, file, shmem) = rss_parts(pid);
        samples.push(Sample {
            secs: t.elapsed().as_secs_f64(),
            done,
            kib,
            anon,
            file,
            shmem,
        });
        if done >= total {
            break (landed, other);
        }
        // Keep the queue fed, never much more than what runs.
        let mut woke = false;
        while inserted < total && inserted - done < 2 * concurrency as u64 {
            inserted += 1;
            insert_task(&store, &format!("soak{me}-{inserted}"), &origin, body)?;
            woke = true;
        }
        if woke {
            polyphony::orchestrator::daemon::wake(&home);
        }
        if last_print.elapsed() > Duration::from_secs(30) {
            let (anon, file, shmem) = rss_parts(pid);
            eprintln!(
                "soak: {done}/{total} done ({other} not landed) after {:.0} s, VmRSS {kib} KiB (anon {anon}, file {file}, shmem {shmem})",
                t.elapsed().as_secs_f64(),
            );
            last_print = Instant::now();
        }
        if t.elapsed() > limit {
            bail!(
                "{done} of {total} tasks done within {limit:?} (see {})",
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let wall = t.elapsed().as_secs_f64();
    // Let the next retention sweep run before the disk is measured.
    std::thread::sleep(Duration::from_secs(35));
    let end_kib = rss_kib(pid).context("the daemon exited at the end")?;
    let workspaces = du(&home.join("workspaces"));
    let transcripts = du(&home.join("transcripts"));
    let queue =
        du(&polyphony_db(&home)) + du(&home.join("queue.db-wal")) + du(&home.join("queue.db-shm"));
    drop(daemon);
    ensure!(
        other == 0,
        "{other} of {total} tasks did not land (see {} and `polyphony --home {} status`)",
        log.display(),
        home.display()
    );

    let after: Vec<&Sample> = samples.iter().filter(|s| s.done >= warmup).collect();
    let per_task = slope(&after);
    let warm_kib = rss_between(&samples, warmup, warmup + total / 20, |s| s.kib);
    let last_kib = rss_between(&samples, total - total / 20, total, |s| s.kib);
    let mut md = String::new();
    writeln!(md, "`polyphony daemon` with `max_concurrent_agents: {concurrency}` takes {total} local tasks, kept fed two per slot; each is the fake `claude` (`polyphony-fake: succeed`) in `{IMAGE}` with `egress: none`, verified by `true` and landed on a bare `file://` origin. VmRSS (and its parts) from `/proc/PID/status` every 250 ms, each row the median while the next 5% of tasks finished; retention on (`retention.workspaces: 1m`, swept every 30 s). Warm-up: the first {warmup} tasks.\n")?;
    writeln!(
        md,
        "| tasks done | elapsed | VmRSS | RssAnon | RssFile | RssShmem |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|")?;
    writeln!(
        md,
        "| 0 (idle, before the first task) | 0 s | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:.1} MiB |",
        idle_kib as f64 / 1024.0,
        idle_parts.0 as f64 / 1024.0,
        idle_parts.1 as f64 / 1024.0,
        idle_parts.2 as f64 / 1024.0
    )?;
    for k in 1..=10u64 {
        let at = total * k / 10;
        let lo = at
            .saturating_sub(total / 20)
            .max(if k == 10 { 0 } else { at });
        let hi = if k == 10 { total } else { at + total / 20 };
        let secs = samples
            .iter()
            .find(|s| s.done >= at)
            .map_or(wall, |s| s.secs);
        let m = |part: fn(&Sample) -> u64| rss_between(&samples, lo, hi, part) as f64 / 1024.0;
        writeln!(
            md,
            "| {at} | {secs:.0} s | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:.1} MiB |",
            m(|s| s.kib),
            m(|s| s.anon),
            m(|s| s.file),
            m(|s| s.shmem),
        )?;
    }
    writeln!(md)?;
    writeln!(
        md,
        "{landed} landed in {wall:.0} s ({:.2} tasks/s). Slope after warm-up (least squares over {} samples): **{per_task:.2} KiB per task**; VmRSS {:.1} MiB after the warm-up, {:.1} MiB at the end, {:.1} MiB 35 s later. Before (the issue's 10-minute soak): about 17 KiB per task, still rising.\n",
        landed as f64 / wall,
        after.len(),
        warm_kib as f64 / 1024.0,
        last_kib as f64 / 1024.0,
        end_kib as f64 / 1024.0,
    )?;
    writeln!(
        md,
        "Disk at the end: workspaces {:.1} MiB, transcripts {:.1} MiB, queue {:.1} MiB.\n",
        workspaces as f64 / 1048576.0,
        transcripts as f64 / 1048576.0,
        queue as f64 / 1048576.0
    )?;
    let flat = per_task.abs() < 1.0;
    writeln!(
        md,
        "Target (issue 24): RSS flat after warm-up (under 1 KiB per task): **{}**.",
        if flat { "met" } else { "missed" }
    )?;
    Ok(md)
}
