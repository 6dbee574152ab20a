//! Usage limits end to end (issue 14 "Done means"): the BUILT binary's daemon against the
//! real Docker engine and the offline test image, whose fake `claude` and `codex` print
//! their CLI's real usage-limit stream (Claude: a rejected `rate_limit_event` with
//! `resetsAt` and the `Claude AI usage limit reached|<epoch>` result; Codex: `error` +
//! `turn.failed` "… try again in 4 days 2 hours 13 minutes"). With
//! `polyphony-fake-reset-at: EPOCH` the fake's limit holds until then and its session
//! succeeds after.
//!
//! Without an engine: fails when `CI` is set, otherwise prints `SKIPPED: <why>`.

use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use polyphony::demo::{write_home, write_sample_repo, FIX_DIRECTIVE};
use polyphony::runtime::{ensure_test_image, home_label, DockerRuntime};
use serde_json::Value;
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_polyphony");
/// No single binary run may take longer (a hang is a failure, not a stall).
const RUN_LIMIT: Duration = Duration::from_secs(180);

/// The test image tag, or `None` after printing SKIPPED (a failure under CI).
async fn image() -> Option<String> {
    let rt = match DockerRuntime::connect().await {
        Ok(rt) => rt,
        Err(e) => {
            if std::env::var_os("CI").is_some() {
                panic!("Docker is required under CI: {e}");
            }
            println!("SKIPPED: no Docker engine ({e})");
            return None;
        }
    };
    Some(
        ensure_test_image(rt.client())
            .await
            .unwrap_or_else(|e| panic!("building the test image: {e}")),
    )
}

/// A home in a temp dir whose routing sends everything to claude, then codex. Dropping it
/// removes every container labelled for it.
struct Home {
    dir: tempfile::TempDir,
    path: PathBuf,
    origin: PathBuf,
    label: String,
}

impl Home {
    /// `extra`: more config.yaml lines; `fallback`: the agent after claude.
    fn new(image: &str, extra: &str, fallback: &str) -> Home {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("home");
        write_home(&path, dir.path(), image).expect("home");
        std::fs::write(
            path.join("config.yaml"),
            format!(
                "poll_interval: 30s\nmax_concurrent_agents: 2\nevent_idle_timeout: 1m\nmax_attempts: 3\ndefault_identity: demo\nquota_default_cooldown: 10m\negress:\n  mode: none\ncontainer:\n  image: {image}\n  deadline: 2m\n  memory: 512m\n  cpus: 1\n{extra}"
            ),
        )
        .expect("config.yaml");
        std::fs::write(
            path.join("routing.yaml"),
            format!("default:\n  agent: claude\n  fallback: [{fallback}]\n"),
        )
        .expect("routing.yaml");
        let origin = write_sample_repo(&dir.path().join("origin")).expect("sample repo");
        let label = home_label(&path);
        Home {
            dir,
            path,
            origin,
            label,
        }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .env("POLYPHONY_HOME", &self.path)
            .env_remove("RUST_LOG")
            .env_remove("GH_TOKEN")
            .env_remove("GITHUB_TOKEN")
            .env_remove("GITHUB_API_URL")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        cmd
    }

    async fn run(&self, args: &[&str]) -> Output {
        let child = self
            .cmd(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn polyphony");
        match tokio::time::timeout(RUN_LIMIT, child.wait_with_output()).await {
            Ok(out) => out.expect("wait for polyphony"),
            Err(_) => panic!("polyphony {args:?} did not finish within {RUN_LIMIT:?}"),
        }
    }

    async fn enqueue(&self, title: &str, directives: &str) -> String {
        let body =
            format!("`add 2 3` prints -1; test.sh fails.\n\n{directives}\n{FIX_DIRECTIVE}\n");
        let repo = self.origin.display().to_string();
        let out = self
            .run(&["enqueue", "--repo", &repo, "--body", &body, title])
            .await;
        assert!(out.status.success(), "enqueue: {}", text(&out.stderr));
        text(&out.stdout).trim().to_string()
    }

    /// Starts the daemon with its output in a log file.
    fn daemon(&self, n: u32) -> Daemon {
        let log = self.dir.path().join(format!("daemon-{n}.log"));
        let file = std::fs::File::create(&log).expect("log file");
        let child = self
            .cmd(&["daemon", "--exit-when-idle"])
            .stdout(file.try_clone().expect("dup log"))
            .stderr(file)
            .spawn()
            .expect("spawn daemon");
        Daemon { child, log }
    }

    async fn task(&self, id: &str) -> Value {
        let out = self.run(&["status", id, "--json"]).await;
        assert!(out.status.success(), "status {id}: {}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("status TASK --json")
    }

    /// The `status --json` summary of `id`.
    async fn summary(&self, id: &str) -> Value {
        let out = self.run(&["status", "--json"]).await;
        assert!(out.status.success(), "status: {}", text(&out.stderr));
        let all: Vec<Value> = serde_json::from_slice(&out.stdout).expect("status --json");
        all.into_iter()
            .find(|t| t["id"] == id)
            .unwrap_or_else(|| panic!("{id} is not listed"))
    }

    /// Polls the summary of `id` until `done` holds (panics after `limit`).
    async fn wait_for(
        &self,
        id: &str,
        limit: Duration,
        log: &dyn Fn() -> String,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let started = Instant::now();
        loop {
            let v = self.summary(id).await;
            if done(&v) {
                return v;
            }
            assert!(
                started.elapsed() < limit,
                "{id} did not get there within {limit:?}: {v}\n{}",
                log()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    fn db(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(self.path.join("queue.db")).expect("open queue.db")
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        let out = std::process::Command::new("docker")
            .args([
                "ps",
                "-aq",
                "--filter",
                &format!("label=polyphony.home={}", self.label),
            ])
            .output();
        let ids: Vec<String> = out
            .map(|o| text(&o.stdout).lines().map(str::to_string).collect())
            .unwrap_or_default();
        if !ids.is_empty() {
            let _ = std::process::Command::new("docker")
                .args(["rm", "-f"])
                .args(&ids)
                .output();
        }
    }
}

struct Daemon {
    child: Child,
    log: PathBuf,
}

impl Daemon {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn kill9(&mut self) {
        let pid = self.child.id().expect("running daemon") as i32;
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    }

    async fn wait(&mut self, limit: Duration) -> std::process::ExitStatus {
        match tokio::time::timeout(limit, self.child.wait()).await {
            Ok(status) => status.expect("wait"),
            Err(_) => panic!(
                "the daemon did not exit within {limit:?}; log:\n{}",
                self.log()
            ),
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn time(v: &Value) -> DateTime<Utc> {
    v.as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|| panic!("not a timestamp: {v}"))
}

fn attempts(v: &Value) -> Vec<(String, String, DateTime<Utc>)> {
    v["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .map(|a| {
            (
                a["agent"].as_str().unwrap_or("").to_string(),
                a["status"].as_str().unwrap_or("running").to_string(),
                time(&a["started_at"]),
            )
        })
        .collect()
}

fn states(v: &Value) -> Vec<String> {
    v["transitions"]
        .as_array()
        .expect("transitions")
        .iter()
        .map(|t| t["to"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Every agent of the chain out with claude's reset seconds away: the task waits (never
/// BLOCKED, no attempt and no failure counted for the wait), a task queued meanwhile does
/// not start an agent known to be out, a `kill -9` of the daemon while both wait keeps the
/// quota state and the wake-up times, and both land after the earliest reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_out_of_quota_waits_for_the_earliest_reset_across_a_restart() {
    let Some(image) = image().await else { return };
    let started = Instant::now();
    let home = Home::new(&image, "", "codex");
    // Long enough for two attempts (claude's limit, then codex's) on a loaded machine.
    let reset = Utc::now().timestamp() + 45;
    let first = home
        .enqueue(
            "Fix add() (every agent is out)",
            &format!(
                "polyphony-fake[claude]: quota\npolyphony-fake-reset-at[claude]: {reset}\npolyphony-fake[codex]: quota\npolyphony-fake: succeed"
            ),
        )
        .await;
    let mut daemon = home.daemon(1);
    let log = || daemon_logs(&home);

    // Claude's limit, codex's limit: then the task waits for claude's reset.
    let parked = home
        .wait_for(&first, Duration::from_secs(40), &log, |t| {
            !t["quota_wait"].is_null()
        })
        .await;
    assert_eq!(parked["state"], "FAILED", "{parked}");
    assert_eq!(parked["quota_wait"]["agent"], "claude");
    assert_eq!(parked["quota_wait"]["identity"], "demo");
    assert_eq!(time(&parked["quota_wait"]["until"]).timestamp(), reset);
    assert_eq!(time(&parked["next_attempt_at"]).timestamp(), reset);
    assert_eq!(
        (parked["attempts"].as_u64(), parked["failures"].as_u64()),
        (Some(2), Some(0))
    );
    let detail = home.task(&first).await;
    let tried: Vec<(String, String)> = attempts(&detail)
        .into_iter()
        .map(|(a, s, _)| (a, s))
        .collect();
    assert_eq!(
        tried,
        [
            ("claude".into(), "quota".into()),
            ("codex".into(), "quota".into())
        ]
    );
    let agents = detail["quota"]["agents"]
        .as_array()
        .expect("quota agents")
        .clone();
    assert_eq!(agents.len(), 2, "{}", detail["quota"]);
    assert_eq!(time(&agents[0]["resets_at"]).timestamp(), reset);
    assert_eq!(agents[0]["reported"], true);
    // Codex said "try again in 4 days 2 hours 13 minutes".
    let codex_out = time(&agents[1]["resets_at"]) - time(&parked["updated_at"]);
    assert!(
        (codex_out.num_minutes() - (4 * 24 * 60 + 2 * 60 + 13)).abs() <= 2,
        "codex is out for {codex_out}"
    );
    let table = home.run(&["status"]).await;
    let table = text(&table.stdout);
    assert!(table.contains("quota: claude resets"), "{table}");
    assert!(table.contains("quota: codex@demo out until"), "{table}");
    let show = text(&home.run(&["status", &first]).await.stdout);
    assert!(show.contains("waiting for claude resets"), "{show}");
    // The reset is said as a time, never as the epoch seconds the CLI ended its message
    // with (issue 29: `reached|1796154199 (resets …)`).
    assert!(!show.contains(&reset.to_string()), "{show}");
    let reason = detail["attempts"][0]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("usage limit: Claude AI usage limit reached (resets ")
            && !reason.contains('|'),
        "{reason}"
    );
    assert!(show.contains("out:      codex@demo until"), "{show}");

    // A task queued meanwhile starts no agent: it waits for the same reset at once.
    let second = home
        .enqueue("Fix add() (queued meanwhile)", "polyphony-fake: succeed")
        .await;
    let waiting = home
        .wait_for(&second, Duration::from_secs(30), &log, |t| {
            !t["quota_wait"].is_null()
        })
        .await;
    assert_eq!(
        (waiting["state"].as_str(), waiting["attempts"].as_u64()),
        (Some("FAILED"), Some(0))
    );
    assert_eq!(time(&waiting["next_attempt_at"]).timestamp(), reset);
    assert!(
        Utc::now().timestamp() < reset,
        "the reset passed before the test could check the wait; raise the margin"
    );

    // kill -9 while both wait: the quota state and the wake-up times survive.
    daemon.kill9();
    daemon.wait(Duration::from_secs(10)).await;
    let db = home.db();
    let out: Vec<(String, String, String)> = db
        .prepare("SELECT identity, agent, resets_at FROM quota ORDER BY agent")
        .and_then(|mut s| {
            s.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect::<Result<_, _>>()
        })
        .expect("quota rows");
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!(
        time(&Value::from(out[0].2.clone())).timestamp(),
        reset,
        "{out:?}"
    );
    for id in [&first, &second] {
        let next: String = db
            .query_row(
                "SELECT next_attempt_at FROM tasks WHERE id = ?1",
                [id],
                |r| r.get(0),
            )
            .expect("next_attempt_at");
        assert_eq!(time(&Value::from(next)).timestamp(), reset);
    }
    drop(db);

    let mut daemon = home.daemon(2);
    let status = daemon.wait(Duration::from_secs(150)).await;
    assert!(status.success(), "daemon: {status}\n{}", daemon_logs(&home));

    for id in [&first, &second] {
        let v = home.task(id).await;
        assert_eq!(v["task"]["state"], "LANDED", "{id}: {}", daemon_logs(&home));
        assert_eq!(v["task"]["failures"], 0, "{id}");
        assert!(
            !states(&v).iter().any(|s| s == "BLOCKED"),
            "{id}: {:?}",
            states(&v)
        );
        // Whatever ran after the wait ran after the reset, on claude again.
        let tried = attempts(&v);
        let (agent, status, at) = tried.last().expect("an attempt").clone();
        assert_eq!(
            (agent.as_str(), status.as_str()),
            ("claude", "succeeded"),
            "{id}"
        );
        assert!(
            at.timestamp() >= reset,
            "{id} started {at}, before the reset"
        );
        assert!(v["quota"]["wait"].is_null(), "{id}: {}", v["quota"]);
    }
    // The queued task never started an agent that was out.
    let tried = attempts(&home.task(&second).await);
    assert_eq!(tried.len(), 1, "{tried:?}");
    assert_eq!(attempts(&home.task(&first).await).len(), 3);
    println!("quota wait across a restart: {:?}", started.elapsed());
}

fn daemon_logs(home: &Home) -> String {
    let mut out = String::new();
    for n in 1..=2 {
        let p = home.dir.path().join(format!("daemon-{n}.log"));
        if let Ok(t) = std::fs::read_to_string(&p) {
            out.push_str(&format!("--- {}\n{t}", p.display()));
        }
    }
    out
}

/// `quota_handoff: continue`: claude edits, then meets its limit mid-run; gemini starts from
/// that work (its prompt, which Gemini's stream echoes, names the diff so far) and, changing
/// nothing itself, lands it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_handoff_continue_carries_the_work_to_the_next_agent() {
    let Some(image) = image().await else { return };
    let home = Home::new(&image, "quota_handoff: continue\n", "gemini");
    let id = home
        .enqueue(
            "Fix add() (claude stops at its limit mid-run)",
            "polyphony-fake[claude]: quota\npolyphony-fake-edit-first[claude]: yes\npolyphony-fake[gemini]: no-change",
        )
        .await;
    let mut daemon = home.daemon(1);
    let status = daemon.wait(Duration::from_secs(150)).await;
    assert!(status.success(), "daemon: {status}\n{}", daemon_logs(&home));
    let v = home.task(&id).await;
    assert_eq!(v["task"]["state"], "LANDED", "{}", daemon_logs(&home));
    let tried: Vec<(String, String)> = attempts(&v).into_iter().map(|(a, s, _)| (a, s)).collect();
    assert_eq!(
        tried,
        [
            ("claude".into(), "quota".into()),
            ("gemini".into(), "succeeded".into())
        ]
    );
    // Gemini's prompt named the work it continued.
    let t2 = std::fs::read_to_string(home.path.join("transcripts").join(&id).join("2.ndjson"))
        .expect("gemini's transcript");
    assert!(
        t2.contains("Attempt 1 (claude) stopped at its usage limit"),
        "{t2}"
    );
    assert!(t2.contains("M calc.sh"), "{t2}");
    assert_eq!(v["quota"]["fallback"]["agent"], "gemini", "{}", v["quota"]);
    assert_eq!(v["quota"]["fallback"]["preferred"], "claude");
}
