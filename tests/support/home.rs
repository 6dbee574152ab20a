//! The home harness: a Polyphony home (`POLYPHONY_HOME`) in a temp dir whose config files
//! the test writes, driven through the BUILT binary (`CARGO_BIN_EXE_polyphony`) with a
//! clean environment, optionally pointed at a fake GitHub. Dropping a [`Home`] removes every
//! container labelled for it, also after a panic.
//!
//! Also the sample project as a bare origin ([`Origin`]) and the output helpers the tests
//! print on failure.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use polyphony::demo::write_sample_repo;
use polyphony::runtime::home_label;
use serde_json::Value;
use tokio::process::{Child, Command};

use super::docker::{containers_of, remove_networks_of};
use super::fake_github::FakeGithub;
use super::git::{git, polyphony_branches};

/// The built binary.
pub const BIN: &str = env!("CARGO_BIN_EXE_polyphony");
/// No single binary run may take longer by default (a hang is a failure, not a stall).
pub const RUN_LIMIT: Duration = Duration::from_secs(180);

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Exit code, stdout and stderr of a finished run, for a failure message.
pub fn output(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    )
}

/// A Polyphony home at `DIR/home` in a temp dir `DIR`.
pub struct Home {
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
    /// The home's `polyphony.home` container label.
    pub label: String,
    github: Option<(String, String)>,
    env: Vec<(String, String)>,
    run_limit: Duration,
    logs: AtomicU32,
}

impl Home {
    /// A new temp dir and the (not yet written) home path inside it.
    pub fn temp() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("home");
        (dir, path)
    }

    /// The harness for the home at `path` (inside `dir`), whose files the caller wrote;
    /// with `github`, every run gets its URL and token.
    pub fn at(dir: tempfile::TempDir, path: PathBuf, github: Option<&FakeGithub>) -> Home {
        Home {
            label: home_label(&path),
            dir,
            path,
            github: github.map(|g| (g.base_url().to_string(), g.token())),
            env: Vec::new(),
            run_limit: RUN_LIMIT,
            logs: AtomicU32::new(0),
        }
    }

    /// Every run also gets `key=value` (after the harness's own environment).
    pub fn with_env(mut self, key: &str, value: &str) -> Home {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// A run may take at most `limit` (default [`RUN_LIMIT`]).
    pub fn with_run_limit(mut self, limit: Duration) -> Home {
        self.run_limit = limit;
        self
    }

    /// The binary on this home: no `RUST_LOG`, no GitHub token or URL but the fake's, stdin
    /// closed, killed when dropped.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .env("POLYPHONY_HOME", &self.path)
            .env_remove("RUST_LOG")
            .env_remove("GH_TOKEN")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        match &self.github {
            Some((url, token)) => {
                cmd.env("GITHUB_API_URL", url).env("GITHUB_TOKEN", token);
            }
            None => {
                cmd.env_remove("GITHUB_TOKEN").env_remove("GITHUB_API_URL");
            }
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }

    /// Runs `cmd` to completion (at most the run limit), its output captured.
    pub async fn finish(&self, mut cmd: Command, args: &[&str]) -> Output {
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn polyphony");
        match tokio::time::timeout(self.run_limit, child.wait_with_output()).await {
            Ok(out) => out.expect("wait for polyphony"),
            Err(_) => panic!(
                "polyphony {args:?} did not finish within {:?}",
                self.run_limit
            ),
        }
    }

    /// Runs the binary to completion (at most the run limit).
    pub async fn run(&self, args: &[&str]) -> Output {
        self.finish(self.cmd(args), args).await
    }

    /// Enqueues a local task on the repository at `repo` and returns its id.
    pub async fn enqueue(&self, repo: impl AsRef<Path>, body: &str, title: &str) -> String {
        let out = self
            .run(&[
                "enqueue",
                "--repo",
                &repo.as_ref().display().to_string(),
                "--body",
                body,
                title,
            ])
            .await;
        assert!(out.status.success(), "{}", output(&out));
        text(&out.stdout).trim().to_string()
    }

    /// Starts a long-running verb (daemon) with stdout and stderr in a log file of the
    /// temp dir (see [`Home::logs`]).
    pub fn start(&self, args: &[&str]) -> Daemon {
        self.start_cmd(self.cmd(args), args)
    }

    /// [`Home::start`] for a command the caller adjusted (an extra variable, say).
    pub fn start_cmd(&self, mut cmd: Command, args: &[&str]) -> Daemon {
        let n = self.logs.fetch_add(1, Ordering::SeqCst);
        let log = self.dir.path().join(format!("{}-{n}.log", args[0]));
        let file = std::fs::File::create(&log).expect("log file");
        let child = cmd
            .stdout(file.try_clone().expect("dup log"))
            .stderr(file)
            .spawn()
            .expect("spawn polyphony");
        Daemon { child, log }
    }

    /// Every log file of the verbs started on this home, each under a header.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for entry in std::fs::read_dir(self.dir.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let p = entry.path();
            if p.extension().is_some_and(|e| e == "log") {
                out.push_str(&format!("--- {}\n", p.display()));
                out.push_str(&std::fs::read_to_string(&p).unwrap_or_default());
            }
        }
        out
    }

    /// `status TASK --json`.
    pub async fn task(&self, id: &str) -> Value {
        let out = self.run(&["status", id, "--json"]).await;
        assert!(out.status.success(), "status {id}: {}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("status TASK --json")
    }

    /// `status --json`.
    pub async fn tasks(&self) -> Vec<Value> {
        let out = self.run(&["status", "--json"]).await;
        assert!(out.status.success(), "status: {}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("status --json")
    }

    /// Polls `status TASK --json` until `done` holds (panics after `limit`, with `context`).
    pub async fn wait_for(
        &self,
        id: &str,
        limit: Duration,
        context: &dyn Fn() -> String,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let started = Instant::now();
        loop {
            let out = self.run(&["status", id, "--json"]).await;
            if out.status.success() {
                let v: Value = serde_json::from_slice(&out.stdout).expect("json");
                if done(&v) {
                    return v;
                }
                if started.elapsed() > limit {
                    panic!(
                        "{id} did not reach the expected state within {limit:?}: {}\n{}",
                        serde_json::to_string_pretty(&v["task"]).unwrap_or_default(),
                        context()
                    );
                }
            } else if started.elapsed() > limit {
                panic!(
                    "{id} never appeared within {limit:?}: {}\n{}",
                    text(&out.stderr),
                    context()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The home's store.
    pub fn db(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(self.path.join("queue.db")).expect("open queue.db")
    }

    /// Ids of containers labelled for this home (any state).
    pub fn containers(&self) -> Vec<String> {
        containers_of(&self.label, "")
    }

    /// Ids of this home's containers matching an extra `docker ps` filter.
    pub fn containers_where(&self, filter: &str) -> Vec<String> {
        containers_of(&self.label, filter)
    }

    /// Attempt directories left under the workspace root.
    pub fn workspace_dirs(&self) -> Vec<PathBuf> {
        let root = self.path.join("workspaces");
        let mut out = Vec::new();
        for task in std::fs::read_dir(&root).into_iter().flatten().flatten() {
            for attempt in std::fs::read_dir(task.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                out.push(attempt.path());
            }
        }
        out
    }

    /// Replaces `from` by `to` in the home's file `name`, which must contain `from`.
    pub fn edit(&self, name: &str, from: &str, to: &str) {
        let path = self.path.join(name);
        let now = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(now.contains(from), "{name} lacks {from:?}:\n{now}");
        std::fs::write(&path, now.replace(from, to)).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        // Its agents' and proxies' containers, and the egress networks of its attempts.
        remove_networks_of(&self.label);
    }
}

/// A verb (daemon, spawn) running in the background, its output in a log file.
pub struct Daemon {
    pub child: Child,
    pub log: PathBuf,
}

impl Daemon {
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> i32 {
        self.child.id().expect("running child") as i32
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(self.pid(), sig) };
        assert_eq!(rc, 0, "kill {sig}");
    }

    pub async fn wait(&mut self, limit: Duration) -> std::process::ExitStatus {
        match tokio::time::timeout(limit, self.child.wait()).await {
            Ok(status) => status.expect("wait"),
            Err(_) => panic!(
                "{} did not exit within {limit:?}; log:\n{}",
                self.log.display(),
                self.log()
            ),
        }
    }
}

/// The sample project (`add` subtracts, `sh test.sh` fails) as a bare origin.
pub struct Origin {
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
}

impl Origin {
    pub fn new() -> Origin {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = write_sample_repo(dir.path()).expect("sample repo");
        Origin { dir, path }
    }

    pub fn url(&self) -> String {
        format!("file://{}", self.path.display())
    }

    /// Branches under `polyphony/` in the origin.
    pub fn branches(&self) -> Vec<String> {
        polyphony_branches(&self.path)
    }

    /// Commits `text` as the file `name` on `main` (through a clone, pushed).
    pub fn commit_file(&self, name: &str, text: &str, message: &str) {
        let work = self.path.with_extension("edit");
        git(
            self.path.parent().expect("parent"),
            &[
                "clone",
                "-q",
                &self.path.display().to_string(),
                &work.display().to_string(),
            ],
        );
        super::git::write(&work, name, text);
        git(&work, &["add", "-A"]);
        git(&work, &["commit", "-qm", message]);
        git(&work, &["push", "-q", "origin", "main"]);
        std::fs::remove_dir_all(&work).expect("rm");
    }

    /// `git show REV:PATH` in the origin.
    pub fn show(&self, rev_path: &str) -> String {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(&self.path)
            .args(["show", rev_path])
            .output()
            .expect("git show");
        assert!(out.status.success(), "git show {rev_path}");
        text(&out.stdout)
    }
}

impl AsRef<Path> for Origin {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl Default for Origin {
    fn default() -> Self {
        Origin::new()
    }
}
