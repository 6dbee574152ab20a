//! The sections that run real attempts on the Docker engine: `spawn` (orchestration
//! overhead of one no-op attempt beside the bare git and docker steps, issue 8 item 1) and
//! `daemon` (the daemon's resident memory idle and with 16 concurrent fake agents streaming
//! output, issue 8 item 4).
//!
//! Both use the offline test image `polyphony-test:latest` (built here when missing) and a
//! bare origin made like `demo::write_sample_repo`, whose `.polyphony.yaml` verifies with
//! `true`. Task ids carry this process id, so container names (`polyphony-<id>-<n>`) never
//! clash with other homes sharing the engine; every container is removed by its run.
//!
//! Environment: `BENCH_REPS` (spawn: 7 pairs by default, one warm-up pair first),
//! `BENCH_DAEMON_SECS` (daemon: how long each fake agent streams in the first loaded phase,
//! default 10; the second phase streams 10 times as long).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use chrono::{DateTime, Utc};
use polyphony::domain::{SourceKind, Task, TaskState, TaskType};
use polyphony::store::Store;

use super::{bytes, env_or, median, polyphony_db, Config};

const IMAGE: &str = "polyphony-test:latest";

/// Makes sure the offline test image exists (building it takes a few seconds, no registry).
pub(super) fn ensure_image() -> anyhow::Result<()> {
    let present = Command::new("docker")
        .args(["image", "inspect", IMAGE])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if present {
        return Ok(());
    }
    eprintln!("building {IMAGE} ...");
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let docker = polyphony::runtime::DockerRuntime::connect().await?;
        polyphony::runtime::ensure_test_image(docker.client()).await?;
        anyhow::Ok(())
    })
}

fn git(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=Polyphony Bench",
            "-c",
            "user.email=bench@polyphony.invalid",
            "-c",
            "init.defaultBranch=main",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .with_context(|| format!("running git {args:?}"))?;
    ensure!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// `dir/origin.git`: a bare origin on `main` whose checks are `test: "true"`.
pub(super) fn write_origin(dir: &Path) -> anyhow::Result<PathBuf> {
    let work = dir.join("origin-src");
    std::fs::create_dir_all(&work)?;
    std::fs::write(work.join("calc.sh"), "add() {\n    echo $(($1 + $2))\n}\n")?;
    std::fs::write(work.join("README.md"), "# calc\n\nA benchmark project.\n")?;
    std::fs::write(
        work.join(".polyphony.yaml"),
        "# The no-op attempt's only check.\ntest: \"true\"\n",
    )?;
    git(&work, &["init", "-q"])?;
    git(&work, &["add", "-A"])?;
    git(&work, &["commit", "-qm", "calc"])?;
    let origin = dir.join("origin.git");
    git(
        dir,
        &[
            "clone",
            "-q",
            "--bare",
            &work.to_string_lossy(),
            &origin.to_string_lossy(),
        ],
    )?;
    std::fs::remove_dir_all(&work)?;
    Ok(origin)
}

pub(super) fn insert_task(
    store: &Store,
    id: &str,
    origin: &Path,
    body: &str,
) -> anyhow::Result<()> {
    let mut task = Task::new(
        id,
        SourceKind::Local,
        format!("local:{id}"),
        origin.to_string_lossy(),
        format!("Benchmark task {id}"),
        Utc::now(),
    );
    task.body = body.to_string();
    task.task_type = TaskType::Bugfix;
    store.insert_task(&task)?;
    Ok(())
}

// ---------------------------------------------------------------------- spawn

/// The polyphony steps, from the task's transition timestamps.
const POLY_STEPS: [&str; 7] = [
    "process start, config, Docker connect, claim",
    "mirror fetch + reference clone + branch, route (CLAIMED -> ROUTED)",
    "identity, .polyphony.yaml at the base, attempt row (ROUTED -> PROVISIONED)",
    "create the agent container, record its id (PROVISIONED -> RUNNING)",
    "start, agent runs, events stored, exit collected, container removed (RUNNING -> VERIFYING)",
    "commit, gates, check container, push (VERIFYING -> LANDED)",
    "print the result, exit",
];
const BARE_STEPS: [&str; 5] = ["clone", "agent", "commit", "check", "push"];

pub fn spawn(cfg: &Config) -> anyhow::Result<String> {
    ensure_image()?;
    let dir = cfg.scratch("spawn")?;
    let origin = write_origin(&dir)?;
    let home = dir.join("home");
    polyphony::demo::write_home(&home, &dir, IMAGE)?;
    let creds = dir.join("logins").join("claude");
    let mirror = dir.join("bare-mirror.git");
    git(
        &dir,
        &[
            "clone",
            "-q",
            "--mirror",
            &origin.to_string_lossy(),
            &mirror.to_string_lossy(),
        ],
    )?;
    let bare_script = std::env::current_dir()?.join("bench/bare_attempt.sh");
    ensure!(
        bare_script.is_file(),
        "{} is missing (run from the repository root)",
        bare_script.display()
    );
    let store = Store::open(&polyphony_db(&home))?;
    let pid = std::process::id();
    let body =
        "A no-op task: the fake agent appends a note and exits.\n\npolyphony-fake: succeed\n";
    let reps = env_or("BENCH_REPS", 7)?.max(1);

    let run_poly = |n: usize| -> anyhow::Result<(f64, Vec<f64>)> {
        let id = format!("bench{pid}-{n}");
        insert_task(&store, &id, &origin, body)?;
        let log = dir.join(format!("{id}.log"));
        let began = Utc::now();
        let t = Instant::now();
        let status = Command::new(&cfg.bin)
            .args(["--home"])
            .arg(&home)
            .args(["spawn", "--task", &id])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .status()?;
        let wall = t.elapsed().as_secs_f64();
        let ended = began + chrono::Duration::from_std(t.elapsed())?;
        ensure!(
            status.success(),
            "polyphony spawn --task {id} did not land (see {})",
            log.display()
        );
        let mut marks: Vec<DateTime<Utc>> = vec![began];
        for to in [
            TaskState::Claimed,
            TaskState::Routed,
            TaskState::Provisioned,
            TaskState::Running,
            TaskState::Verifying,
            TaskState::Landed,
        ] {
            let at = store
                .transitions(&id)?
                .into_iter()
                .find(|r| r.to == to)
                .map(|r| r.at)
                .with_context(|| format!("{id} has no transition to {to}"))?;
            marks.push(at);
        }
        marks.push(ended);
        let steps = marks
            .windows(2)
            .map(|w| (w[1] - w[0]).num_microseconds().unwrap_or(0) as f64 / 1e6)
            .collect();
        Ok((wall, steps))
    };
    let run_bare = |n: usize| -> anyhow::Result<(f64, Vec<f64>)> {
        let steps_file = dir.join(format!("bare-{n}.steps"));
        let t = Instant::now();
        let out = Command::new("sh")
            .arg(&bare_script)
            .arg(&origin)
            .arg(&mirror)
            .arg(dir.join(format!("bare-ws-{n}")))
            .arg(format!("bare/{pid}-{n}"))
            .arg(format!("bench{pid}-bare-{n}"))
            .arg(&creds)
            .arg(body)
            .env("BARE_STEPS", &steps_file)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .stdin(Stdio::null())
            .output()?;
        let wall = t.elapsed().as_secs_f64();
        ensure!(
            out.status.success(),
            "bench/bare_attempt.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(&steps_file)?;
        let steps = BARE_STEPS
            .iter()
            .map(|name| {
                text.lines()
                    .find_map(|l| l.strip_prefix(&format!("{name} ")))
                    .and_then(|v| v.trim().parse::<f64>().ok())
                    .unwrap_or(f64::NAN)
            })
            .collect();
        Ok((wall, steps))
    };

    // Warm-up pair: creates polyphony's mirror and warms the page cache and the engine.
    eprintln!("spawn: warm-up ...");
    run_poly(0)?;
    run_bare(0)?;
    let mut poly = Vec::new();
    let mut bare = Vec::new();
    let mut poly_steps: Vec<Vec<f64>> = vec![Vec::new(); POLY_STEPS.len()];
    let mut bare_steps: Vec<Vec<f64>> = vec![Vec::new(); BARE_STEPS.len()];
    for n in 1..=reps {
        eprintln!("spawn: pair {n}/{reps} ...");
        // Alternate which goes first so neither always runs on a freshly idle engine.
        let order = if n % 2 == 1 {
            [true, false]
        } else {
            [false, true]
        };
        for is_poly in order {
            if is_poly {
                let (wall, steps) = run_poly(n)?;
                poly.push(wall);
                for (i, s) in steps.into_iter().enumerate() {
                    poly_steps[i].push(s);
                }
            } else {
                let (wall, steps) = run_bare(n)?;
                bare.push(wall);
                for (i, s) in steps.into_iter().enumerate() {
                    bare_steps[i].push(s);
                }
            }
        }
    }
    let all = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v.iter()
            .map(|s| format!("{s:.3}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let pm = median(&mut poly.clone());
    let bm = median(&mut bare.clone());
    let min = |v: &[f64]| v.iter().copied().fold(f64::MAX, f64::min);
    let mut md = String::new();
    writeln!(md, "A local task on a bare origin (`file://` path), the fake `claude` in `{IMAGE}` with scenario `succeed` (appends a note to `POLYPHONY_FAKE.md`), one check `test: \"true\"` from `.polyphony.yaml`. Beside it, `bench/bare_attempt.sh` does the same bare steps by hand: `git clone --reference MIRROR --dissociate`, `git checkout -b`, `docker run --rm` of the fake agent (same image, same argv as the claude adapter builds, same hardening and limits, workspace and credentials bind-mounted), `git add -A && git commit`, `docker run --rm --network none` of `/bin/sh -c true`, `git push`. {reps} pairs after one warm-up pair, interleaved (the order alternates), wall time of the whole process.\n")?;
    writeln!(md, "| One no-op attempt | median | min | vs bare steps |")?;
    writeln!(md, "|---|---|---|---|")?;
    writeln!(
        md,
        "| `polyphony spawn --task ID` | {:.3} s | {:.3} s | {:.2}x |",
        pm,
        min(&poly),
        pm / bm
    )?;
    writeln!(
        md,
        "| `bench/bare_attempt.sh` (git + docker CLIs) | {:.3} s | {:.3} s | 1.00x |",
        bm,
        min(&bare)
    )?;
    writeln!(md)?;
    writeln!(
        md,
        "All runs (s): polyphony {}; bare {}.\n",
        all(&poly),
        all(&bare)
    )?;
    writeln!(md, "Where the time goes (medians; polyphony's from the task's transition timestamps, the script's from `date` between steps):\n")?;
    writeln!(md, "| polyphony step | median |")?;
    writeln!(md, "|---|---|")?;
    for (name, v) in POLY_STEPS.iter().zip(&poly_steps) {
        writeln!(md, "| {name} | {:.0} ms |", median(&mut v.clone()) * 1e3)?;
    }
    writeln!(md)?;
    writeln!(md, "| bare step | median |")?;
    writeln!(md, "|---|---|")?;
    for (name, v) in BARE_STEPS.iter().zip(&bare_steps) {
        writeln!(md, "| {name} | {:.0} ms |", median(&mut v.clone()) * 1e3)?;
    }
    writeln!(md)?;
    let ratio = pm / bm;
    writeln!(
        md,
        "Target (issue 8): at most 1.2x the bare steps: **{}** ({ratio:.2}x).",
        if ratio <= 1.2 { "met" } else { "missed" }
    )?;
    Ok(md)
}

// ---------------------------------------------------------------------- daemon

/// VmRSS of `pid` in KiB (None once the process is gone).
pub(super) fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Samples a process's RSS every 100 ms on a thread.
struct Sampler {
    samples: Arc<Mutex<Vec<u64>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    fn start(pid: u32) -> Sampler {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (samples.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                if let Some(kib) = rss_kib(pid) {
                    s.lock().unwrap_or_else(|p| p.into_inner()).push(kib);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Sampler {
            samples,
            stop,
            thread: Some(thread),
        }
    }

    fn mark(&self) -> usize {
        self.samples.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// (median, peak, count) of the samples in `from..to`.
    fn window(&self, from: usize, to: usize) -> (u64, u64, usize) {
        let s = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        let mut w: Vec<u64> = s[from.min(s.len())..to.min(s.len())].to_vec();
        w.sort_unstable();
        if w.is_empty() {
            return (0, 0, 0);
        }
        (w[w.len() / 2], w[w.len() - 1], w.len())
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The daemon of `home`, stopped with SIGTERM when dropped. A stopped daemon leaves its
/// running attempts (their containers and egress networks) for its next start, which a
/// scratch home never has: they are removed too, so a failed run leaves nothing behind
/// (16 leftover networks are enough to exhaust the engine's address pools).
pub(super) struct Daemon {
    pub(super) child: Child,
    pub(super) home: PathBuf,
}

impl Daemon {
    fn stop(&mut self) {
        // SAFETY: kill(2) on our own child's pid touches no memory.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Removes what `docker LIST` names (by this home's label) with `docker REMOVE`.
    fn remove_labelled(&self, list: &[&str], remove: &[&str]) {
        let label = format!(
            "label=polyphony.home={}",
            polyphony::runtime::home_label(&self.home)
        );
        let Ok(out) = Command::new("docker")
            .args(list)
            .args(["--filter", &label])
            .output()
        else {
            return;
        };
        let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(String::from)
            .collect();
        if !ids.is_empty() {
            let _ = Command::new("docker")
                .args(remove)
                .args(&ids)
                .stdout(Stdio::null())
                .status();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
        self.remove_labelled(&["ps", "-aq"], &["rm", "-f"]);
        self.remove_labelled(&["network", "ls", "-q"], &["network", "rm"]);
    }
}

struct Phase {
    label: String,
    secs: f64,
    median_kib: u64,
    peak_kib: u64,
    samples: usize,
    max_running: u64,
    transcript_bytes: u64,
    events: u64,
}

fn mib_k(k: u64) -> String {
    format!("{:.1} MiB", k as f64 / 1024.0)
}

pub fn daemon(cfg: &Config) -> anyhow::Result<String> {
    ensure_image()?;
    let agents = 16usize;
    let base_secs = env_or("BENCH_DAEMON_SECS", 10)?.max(1);
    let dir = cfg.scratch("daemon")?;
    let origin = write_origin(&dir)?;
    let home = dir.join("home");
    polyphony::demo::write_home(&home, &dir, IMAGE)?;
    // 16 attempts at once; generous limits so no fake agent is cut short.
    std::fs::write(
        home.join("config.yaml"),
        format!("poll_interval: 30s\nmax_concurrent_agents: {agents}\nevent_idle_timeout: 5m\nmax_attempts: 1\ndefault_identity: demo\ncontainer:\n  image: {IMAGE}\n  deadline: 30m\n  memory: 256m\n  cpus: 1\n"),
    )?;
    let store = Store::open(&polyphony_db(&home))?;
    let log = dir.join("daemon.log");
    let child = Command::new(&cfg.bin)
        .arg("--home")
        .arg(&home)
        .arg("daemon")
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
    let sampler = Sampler::start(pid);
    let mut phases = Vec::new();

    let idle = |label: &str, secs: u64| -> Phase {
        let from = sampler.mark();
        let t = Instant::now();
        std::thread::sleep(Duration::from_secs(secs));
        let (median_kib, peak_kib, samples) = sampler.window(from, sampler.mark());
        Phase {
            label: label.to_string(),
            secs: t.elapsed().as_secs_f64(),
            median_kib,
            peak_kib,
            samples,
            max_running: 0,
            transcript_bytes: 0,
            events: 0,
        }
    };
    // Let it settle (reconcile, socket, first poll) before calling it idle.
    std::thread::sleep(Duration::from_secs(2));
    phases.push(idle("idle (no tasks)", 5));

    let me = std::process::id();
    for (n, secs) in [base_secs, base_secs * 10].into_iter().enumerate() {
        eprintln!("daemon: {agents} agents streaming for {secs} s ...");
        let ids: Vec<String> = (0..agents).map(|i| format!("bench{me}-d{n}-{i}")).collect();
        let body = format!(
            "Stream progress lines.\n\npolyphony-fake: slow\npolyphony-fake-sleep: {secs}\n"
        );
        let from = sampler.mark();
        let t = Instant::now();
        for id in &ids {
            insert_task(&store, id, &origin, &body)?;
        }
        polyphony::orchestrator::daemon::wake(&home);
        let limit = Duration::from_secs(secs as u64 * 3 + 180);
        let mut max_running = 0;
        loop {
            ensure!(
                rss_kib(pid).is_some(),
                "the daemon exited (see {})",
                log.display()
            );
            let running = store
                .count_by_state()?
                .get(&TaskState::Running)
                .copied()
                .unwrap_or(0);
            max_running = max_running.max(running);
            let mut done = 0;
            for id in &ids {
                let task = store.get_task(id)?.context("task vanished")?;
                if task.state.is_terminal() {
                    ensure!(
                        task.state == TaskState::Landed,
                        "{id} ended {} (see {} and `polyphony --home {} status {id}`)",
                        task.state,
                        log.display(),
                        home.display()
                    );
                    done += 1;
                }
            }
            if done == ids.len() {
                break;
            }
            if t.elapsed() > limit {
                bail!(
                    "phase {n} did not finish within {limit:?} (see {})",
                    log.display()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        let (median_kib, peak_kib, samples) = sampler.window(from, sampler.mark());
        let mut transcript_bytes = 0;
        let mut events = 0;
        for id in &ids {
            let key = polyphony::runtime::container_spec::container_key(id);
            transcript_bytes +=
                super::file_size(&home.join("transcripts").join(&key).join("1.ndjson"));
            events += store.event_count(id, 1)?;
        }
        phases.push(Phase {
            label: format!("{agents} agents streaming {secs} s each"),
            secs: t.elapsed().as_secs_f64(),
            median_kib,
            peak_kib,
            samples,
            max_running,
            transcript_bytes: transcript_bytes / agents as u64,
            events: events / agents as u64,
        });
    }
    phases.push(idle("idle again (all landed)", 5));
    drop(sampler);
    drop(daemon);

    let mut md = String::new();
    writeln!(md, "`polyphony daemon` with `max_concurrent_agents: {agents}`, its VmRSS read from `/proc/PID/status` every 100 ms. Each loaded phase enqueues {agents} local tasks at once (the daemon is woken through its socket); each fake `claude` runs scenario `slow` (`polyphony-fake-sleep: N`: an assistant event every second for N seconds, then a successful result), and every attempt is verified (`true`) and lands. The second loaded phase streams 10 times as long (a transcript holds a fixed start and end besides the progress lines, so it grows a little less than 10 times).\n")?;
    writeln!(md, "| Phase | wall | most attempts RUNNING at once | transcript per attempt | events per attempt | RSS median | RSS peak |")?;
    writeln!(md, "|---|---|---|---|---|---|---|")?;
    for p in &phases {
        let loaded = p.transcript_bytes > 0;
        writeln!(
            md,
            "| {} | {:.0} s | {} | {} | {} | {} | {} |",
            p.label,
            p.secs,
            if loaded {
                p.max_running.to_string()
            } else {
                "-".into()
            },
            if loaded {
                bytes(p.transcript_bytes)
            } else {
                "-".into()
            },
            if loaded {
                p.events.to_string()
            } else {
                "-".into()
            },
            mib_k(p.median_kib),
            mib_k(p.peak_kib),
        )?;
        let _ = p.samples;
    }
    writeln!(md)?;
    let (small, large) = (&phases[1], &phases[2]);
    let growth = large.peak_kib as f64 / small.peak_kib.max(1) as f64;
    writeln!(
        md,
        "Peak RSS with {:.1}x the transcript bytes and events per attempt: {:.2}x ({} vs {}); steady (median) {} vs {}. Target (issue 8): flat, not growing with transcript size: **{}**.",
        large.transcript_bytes as f64 / small.transcript_bytes.max(1) as f64,
        growth,
        mib_k(large.peak_kib),
        mib_k(small.peak_kib),
        mib_k(large.median_kib),
        mib_k(small.median_kib),
        if growth <= 1.25 { "met" } else { "missed" }
    )?;
    Ok(md)
}

// ---------------------------------------------------------------------- egress

/// `egress` (issue 25): one no-op attempt with `egress: allowlist` (its own internal network
/// and egress proxy, created and removed around the agent) beside the same attempt with
/// `egress: open` (Docker's bridge, no proxy), in one run, interleaved; plus the network and
/// proxy setup the daemon logs (`egress network and proxy up ... elapsed_ms`).
/// The CPU time the whole machine has spent busy (user, nice, system, irq, softirq: every
/// process, the engine's included, and the kernel) since boot, in seconds; `None` where
/// there is no `/proc/stat`.
fn machine_busy() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<u64> = text
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    let ticks: u64 = [0, 1, 2, 5, 6].iter().filter_map(|&i| fields.get(i)).sum();
    // USER_HZ, 100 on every Linux this runs on.
    Some(ticks as f64 / 100.0)
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

pub fn egress(cfg: &Config) -> anyhow::Result<String> {
    ensure_image()?;
    let dir = cfg.scratch("egress")?;
    let origin = write_origin(&dir)?;
    let pid = std::process::id();
    let body =
        "A no-op task: the fake agent appends a note and exits.\n\npolyphony-fake: succeed\n";
    let reps = env_or("BENCH_REPS", 7)?.max(1);
    // Two homes, the same but for their egress mode.
    let mut homes = Vec::new();
    for (name, yaml) in [
        ("allowlist", "egress:\n  mode: allowlist\n"),
        ("open", "allow_unsafe: true\negress:\n  mode: open\n"),
    ] {
        let home = dir.join(format!("home-{name}"));
        polyphony::demo::write_home(&home, &dir.join(format!("logins-{name}")), IMAGE)?;
        let path = home.join("config.yaml");
        let text = std::fs::read_to_string(&path)?;
        ensure!(
            text.contains("egress:\n  mode: none\n"),
            "demo::write_home no longer writes `egress: mode: none`; update this bench"
        );
        std::fs::write(&path, text.replace("egress:\n  mode: none\n", yaml))?;
        homes.push((name, home));
    }
    // Seconds from the daemon's `field=` (milliseconds) of the first log line containing `what`.
    let ms_field = |log: &str, what: &str, field: &str| -> Option<f64> {
        let field = format!("{field}=");
        log.lines().filter(|l| l.contains(what)).find_map(|l| {
            let at = l.find(&field)? + field.len();
            l[at..]
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse::<f64>()
                .ok()
                .map(|ms| ms / 1e3)
        })
    };
    let elapsed = |log: &str, what: &str| ms_field(log, what, "elapsed_ms");
    // The `steps=` of the runtime's debug line containing `what`: `(step, seconds)` in order.
    let steps_of = |log: &str, what: &str| -> Vec<(String, f64)> {
        let Some(line) = log.lines().find(|l| l.contains(what)) else {
            return Vec::new();
        };
        let Some(at) = line.find("steps=") else {
            return Vec::new();
        };
        line[at + "steps=".len()..]
            .split(", ")
            .filter_map(|part| {
                let part = part.trim().strip_suffix(" ms")?;
                let (name, ms) = part.rsplit_once(' ')?;
                Some((name.to_string(), ms.parse::<f64>().ok()? / 1e3))
            })
            .collect()
    };
    let steps = std::cell::RefCell::new(Vec::<(&'static str, String, Vec<f64>)>::new());
    let run = |home: &Path,
               mode: &str,
               n: usize|
     -> anyhow::Result<(f64, Option<f64>, [Option<f64>; 6])> {
        let store = Store::open(&polyphony_db(home))?;
        let id = format!("bench{pid}-{mode}-{n}");
        insert_task(&store, &id, &origin, body)?;
        let log = dir.join(format!("{id}.log"));
        let busy = machine_busy();
        let t = Instant::now();
        let status = Command::new(&cfg.bin)
            .args(["--home"])
            .arg(home)
            .args(["spawn", "--task", &id])
            // The runtime's per-call step timings are at debug.
            .env("RUST_LOG", "info,polyphony::runtime::docker=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .status()?;
        let wall = t.elapsed().as_secs_f64();
        let cpu = busy
            .zip(machine_busy())
            .map(|(before, after)| after - before);
        ensure!(
            status.success(),
            "polyphony spawn --task {id} ({mode}) did not land (see {})",
            log.display()
        );
        let text = std::fs::read_to_string(&log)?;
        if mode == "allowlist" && n > 0 {
            let mut all = steps.borrow_mut();
            for (phase, what) in [
                (
                    "setup, beside the clone",
                    "egress network and proxy made proxy=",
                ),
                (
                    "setup, the proxy's start beside the agent's",
                    "egress proxy started proxy=",
                ),
                ("teardown, critical path", "egress proxy stopped proxy="),
                (
                    "teardown, beside verification",
                    "egress proxy and network removed proxy=",
                ),
            ] {
                for (name, secs) in steps_of(&text, what) {
                    match all.iter_mut().find(|(p, s, _)| *p == phase && *s == name) {
                        Some((_, _, v)) => v.push(secs),
                        None => all.push((phase, name, vec![secs])),
                    }
                }
            }
        }
        Ok((
            wall,
            cpu,
            [
                elapsed(
                    &text,
                    "egress network and proxy started beside the workspace",
                ),
                elapsed(&text, "egress network and proxy up"),
                elapsed(&text, "egress proxy and network removed"),
                ms_field(&text, "egress network and proxy awaited", "waited_ms"),
                elapsed(&text, "egress proxy stopped and its log read"),
                elapsed(&text, "the agent released: its egress proxy listens"),
            ],
        ))
    };
    eprintln!("egress: warm-up (builds the proxy image once) ...");
    for (mode, home) in &homes {
        run(home, mode, 0)?;
    }
    let mut allow = Vec::new();
    let mut open = Vec::new();
    let mut network = Vec::new();
    let mut setup = Vec::new();
    let mut teardown = Vec::new();
    let mut waited = Vec::new();
    let mut stop = Vec::new();
    let mut released = Vec::new();
    // The machine's CPU time per attempt, by mode (allowlist, open).
    let mut cpu: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for n in 1..=reps {
        eprintln!("egress: pair {n}/{reps} ...");
        let order: Vec<&(&str, PathBuf)> = if n % 2 == 1 {
            homes.iter().collect()
        } else {
            homes.iter().rev().collect()
        };
        for (mode, home) in order {
            let (wall, busy, [net, s, down, wait, stopped, release]) = run(home, mode, n)?;
            if let Some(busy) = busy {
                cpu[usize::from(*mode != "allowlist")].push(busy);
            }
            if *mode == "allowlist" {
                allow.push(wall);
                network.push(net.context(
                    "no `egress network and proxy started beside the workspace` line in the log",
                )?);
                setup.push(s.context("no `egress network and proxy up` line in the log")?);
                teardown
                    .push(down.context("no `egress proxy and network removed` line in the log")?);
                waited.push(wait.context("no `egress network and proxy awaited` line in the log")?);
                stop.push(
                    stopped
                        .context("no `egress proxy stopped and its log read` line in the log")?,
                );
                // Absent when the image cannot hold its command (the old order).
                if let Some(r) = release {
                    released.push(r);
                }
            } else {
                open.push(wall);
            }
        }
    }
    let am = median(&mut allow.clone());
    let om = median(&mut open.clone());
    let sm = median(&mut setup.clone());
    let nm = median(&mut network.clone());
    let tm = median(&mut teardown.clone());
    let wm = median(&mut waited.clone());
    let pm = median(&mut stop.clone());
    let rm = (!released.is_empty()).then(|| median(&mut released.clone()));
    // Per attempt: what the attempt waited for (the early setup's rest, then the config and
    // `ready`), and the whole setup, early part and critical part together.
    let mut on_path: Vec<f64> = waited.iter().zip(&setup).map(|(w, s)| w + s).collect();
    let mut in_all: Vec<f64> = network.iter().zip(&setup).map(|(n, s)| n + s).collect();
    let cm = median(&mut on_path.clone());
    let im = median(&mut in_all.clone());
    on_path.sort_by(f64::total_cmp);
    in_all.sort_by(f64::total_cmp);
    let ratio = am / om;
    let all = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v.iter()
            .map(|s| format!("{s:.3}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut md = String::new();
    writeln!(md, "The spawn section's no-op attempt (fake `claude` in `{IMAGE}`, scenario `succeed`, one check `test: \"true\"`) in two homes that differ only in `egress`: `allowlist` (the attempt's own `--internal` network and its egress proxy container, from the `polyphony-egress` image made of this binary, the network and the proxy's container made while the workspace is cloned, the proxy at an address fixed before either exists and started at once, waiting for its config file; the config written once the attempt is routed; the agent's container, held by its entrypoint, created and started beside the proxy's start and released once the proxy said `ready`; after the agent, the proxy killed and its log read to its end; the proxy and the network removed while the attempt is verified and landed) and `open` (Docker's bridge, no proxy). {reps} pairs after one warm-up pair, interleaved (the order alternates), wall time of `polyphony spawn --task ID`; the setup and teardown figures are the daemon's own (its log at info, `polyphony::runtime::docker` at debug: `elapsed_ms`, `waited_ms`, `steps=`), medians per row.\n")?;
    writeln!(md, "| One no-op attempt | median | vs open |")?;
    writeln!(md, "|---|---|---|")?;
    writeln!(md, "| `egress: allowlist` | {am:.3} s | {ratio:.2}x |")?;
    writeln!(md, "| `egress: open` | {om:.3} s | 1.00x |")?;
    writeln!(
        md,
        "| **network + proxy setup in all** (the early part beside the clone, plus writing the config and creating the agent's container) | {:.0} ms | |",
        im * 1e3
    )?;
    writeln!(
        md,
        "| early part: create the network and the proxy (at once), connect it to the outbound network, start it, check its address; begun with the workspace's clone | {:.0} ms | |",
        nm * 1e3
    )?;
    writeln!(
        md,
        "| of it, what the attempt still waited for after the clone and routing (a held agent: the network and the proxy's container made, not the proxy's start) | {:.0} ms | |",
        wm * 1e3
    )?;
    writeln!(
        md,
        "| write the proxy's config, create the agent's container (a held agent's proxy says `ready` later, beside the agent's start) | {:.0} ms | |",
        sm * 1e3
    )?;
    writeln!(
        md,
        "| **setup on the critical path** (the wait for the early part, plus the config and the agent's create) | {:.0} ms | |",
        cm * 1e3
    )?;
    writeln!(
        md,
        "| teardown on the critical path: stop the proxy (SIGTERM), read its log to its last line (`end`) | {:.0} ms | |",
        pm * 1e3
    )?;
    if let Some(rm) = rm {
        writeln!(
            md,
            "| the held agent released, after its container's create (its start takes about as long; the entrypoint waits for the rest) | {:.0} ms | |",
            rm * 1e3
        )?;
    }
    writeln!(
        md,
        "| teardown off the critical path: remove the proxy and the network, beside verification and landing | {:.0} ms | |",
        tm * 1e3
    )?;
    if cpu.iter().all(|v| v.len() == reps) {
        let (ac, oc) = (median(&mut cpu[0].clone()), median(&mut cpu[1].clone()));
        writeln!(
            md,
            "| the machine's CPU time per attempt (every process and the kernel, `/proc/stat`, over the wall time above): allowlist / open | {ac:.2} / {oc:.2} s ({:.0}% / {:.0}% of {} cores) | {:.2}x |",
            100.0 * ac / am / cores() as f64,
            100.0 * oc / om / cores() as f64,
            cores(),
            ac / oc
        )?;
    }
    writeln!(md)?;
    writeln!(md, "Engine calls, from the runtime's own step timings (`polyphony::runtime::docker` at debug; steps under one phase that run at once each count from the same start):\n")?;
    writeln!(md, "| phase | step | median | runs |")?;
    writeln!(md, "|---|---|---|---|")?;
    for (phase, name, v) in steps.borrow().iter() {
        writeln!(
            md,
            "| {phase} | {name} | {:.0} ms | {} |",
            median(&mut v.clone()) * 1e3,
            v.len()
        )?;
    }
    writeln!(md)?;
    writeln!(
        md,
        "All runs (s): allowlist {}; open {}; setup in all {}; setup on the critical path {}; early part {}; waited for it {}; config and create {}; stop and log {}; removal {}; released after create {}.\n",
        all(&allow),
        all(&open),
        all(&in_all),
        all(&on_path),
        all(&network),
        all(&waited),
        all(&setup),
        all(&stop),
        all(&teardown),
        all(&released)
    )?;
    writeln!(
        md,
        "Targets (issue 25): at most 1.2x `open`: **{}** ({ratio:.2}x); network + proxy setup under 300 ms: **{}** ({:.0} ms in all, {:.0} ms of it on the critical path).",
        if ratio <= 1.2 { "met" } else { "missed" },
        if im < 0.3 { "met" } else { "missed" },
        im * 1e3,
        cm * 1e3
    )?;
    Ok(md)
}
