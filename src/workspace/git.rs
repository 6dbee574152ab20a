//! Runs the git CLI with a hermetic environment: argv only (never a shell), no prompts, no
//! system or global config, no hooks, no credential helpers, and the token (when any) only in
//! the child's environment, answered through `GIT_ASKPASS`.
//!
//! Why `GIT_ASKPASS` and not `-c http.extraHeader=...`: command-line arguments are readable by
//! every user in `/proc/<pid>/cmdline`; a process environment is readable only by its owner and
//! root. The askpass script holds no secret (it echoes `$POLYPHONY_GIT_TOKEN`), so it can live
//! on disk. Must not log arguments that could carry secrets; every error text passes `scrub`.
//!
//! Every child has a deadline (issue 11: a FIFO at `.git/index` hung an attempt forever): it
//! runs in its own process group, and on expiry the whole group is killed with SIGKILL.

use super::key::scrub;
use super::WorkspaceError;
use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Deadline of a git child that talks to the network (clone, fetch, push, ls-remote).
pub(crate) const NETWORK_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// Deadline of every other git child (local reads and writes in one repository).
pub(crate) const LOCAL_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// Env var the askpass script reads the token from (only ever set on one child process).
const TOKEN_ENV: &str = "POLYPHONY_GIT_TOKEN";

/// Env var naming the one host (`host[:port]`) the askpass script answers for.
const HOST_ENV: &str = "POLYPHONY_GIT_HOST";

// Git asks "Username for 'https://host': " and "Password for 'https://user@host': ". The
// script answers only when that host is the remote's (issue 11): a redirect, an
// `insteadOf` or a second remote the agent wrote into the repository never gets the token.
const ASKPASS_SCRIPT: &str = "#!/bin/sh\n\
# Polyphony's git askpass: answers the token login for one host only. Holds no secret.\n\
url=${1#*\\'}\n\
url=${url%%\\'*}\n\
rest=${url#*://}\n\
rest=${rest%%/*}\n\
host=$(printf '%s' \"${rest##*@}\" | tr 'A-Z' 'a-z')\n\
want=$(printf '%s' \"$POLYPHONY_GIT_HOST\" | tr 'A-Z' 'a-z')\n\
if [ -z \"$want\" ] || [ \"$host\" != \"$want\" ]; then\n\
  echo \"polyphony askpass: not answering for '$host' (the token is for '$want')\" >&2\n\
  exit 1\n\
fi\n\
case \"$1\" in\n\
  Username*) printf '%s\\n' x-access-token ;;\n\
  *) printf '%s\\n' \"$POLYPHONY_GIT_TOKEN\" ;;\n\
esac\n";

/// `host[:port]` of an http(s) remote URL, lower-cased; `None` for anything else (a local
/// path or an ssh remote never uses the token). Pure.
pub(crate) fn remote_host(url: &str) -> Option<String> {
    let lower = url.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit('@').next().unwrap_or("");
    (!host.is_empty()).then(|| host.to_string())
}

/// Variables from the daemon's environment that would redirect or reconfigure git.
const CLEARED_ENV: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_CEILING_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "GIT_PROXY_COMMAND",
    "GIT_EXTERNAL_DIFF",
    "GIT_EXEC_PATH",
    "GIT_TRACE",
    "GIT_TRACE_CURL",
    "GIT_TRACE_PACKET",
    "GIT_REDACT_COOKIES",
];

/// `-c` options applied to every invocation. Command-line config outranks the repository's
/// own `.git/config`, which the agent controlled.
const SAFE_CONFIG: &[&str] = &[
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.sshCommand=ssh",
    "credential.helper=",
    "safe.directory=*",
    "protocol.ext.allow=never",
    "http.lowSpeedLimit=1000",
    "http.lowSpeedTime=60",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "advice.detachedHead=false",
    "core.useReplaceRefs=false",
    "core.untrackedCache=false",
];

/// One git invocation under construction.
pub(crate) struct Git<'a> {
    cmd: Command,
    op: String,
    token: Option<&'a str>,
    timeout: Duration,
}

impl<'a> Git<'a> {
    /// `git <safe -c options> <args...>`, run in `cwd` when given.
    pub(crate) fn new(op: &str) -> Git<'a> {
        let mut cmd = Command::new("git");
        for kv in SAFE_CONFIG {
            cmd.arg("-c").arg(kv);
        }
        for var in CLEARED_ENV {
            cmd.env_remove(var);
        }
        // Every other `GIT_*` the daemon inherited too (issue 23: no `GIT_DIR` tricks, no
        // `GIT_REPLACE_REF_BASE`, nothing a future git reads from the environment).
        for (var, _) in std::env::vars_os() {
            if var.as_encoded_bytes().starts_with(b"GIT_") {
                cmd.env_remove(var);
            }
        }
        cmd.env("GIT_TERMINAL_PROMPT", "0")
            // Replace objects off for good measure: the orchestrator's repositories have no
            // `refs/replace/`, and git must never substitute an object it reads.
            .env("GIT_NO_REPLACE_OBJECTS", "1")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_PAGER", "cat")
            .env("LC_ALL", "C")
            .env("LANGUAGE", "C")
            .env_remove(TOKEN_ENV)
            .env_remove(HOST_ENV)
            .stdin(Stdio::null());
        let network = ["clone", "fetch", "push", "ls-remote"]
            .iter()
            .any(|w| op.split_whitespace().next() == Some(w));
        Git {
            cmd,
            op: op.to_string(),
            token: None,
            timeout: if network {
                NETWORK_TIMEOUT
            } else {
                LOCAL_TIMEOUT
            },
        }
    }

    /// Replaces the default deadline (network or local, chosen from `op`).
    #[allow(dead_code)]
    pub(crate) fn timeout(mut self, limit: Duration) -> Self {
        self.timeout = limit;
        self
    }

    pub(crate) fn arg(mut self, a: impl AsRef<OsStr>) -> Self {
        self.cmd.arg(a);
        self
    }

    pub(crate) fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.cmd.args(args);
        self
    }

    pub(crate) fn env(mut self, k: &str, v: impl AsRef<OsStr>) -> Self {
        self.cmd.env(k, v);
        self
    }

    /// Runs inside `dir` (`git -C dir` semantics without putting the path before options).
    pub(crate) fn current_dir(mut self, dir: &Path) -> Self {
        self.cmd.current_dir(dir);
        self
    }

    /// Authenticates https as `x-access-token` with `token` through the askpass script,
    /// for the host of `remote` only (nothing is handed over for a remote without one).
    pub(crate) fn token(mut self, askpass: &Path, token: Option<&'a str>, remote: &str) -> Self {
        let host = remote_host(remote);
        if let (Some(t), Some(host)) = (token.filter(|t| !t.is_empty()), host) {
            self.cmd
                .env("GIT_ASKPASS", askpass)
                .env(TOKEN_ENV, t)
                .env(HOST_ENV, host);
            self.token = Some(t);
        }
        self
    }

    /// Runs to completion; a non-zero exit is `WorkspaceError::Git` with scrubbed stderr.
    pub(crate) fn run(self) -> Result<Output, WorkspaceError> {
        let dir = self.cmd.get_current_dir().map(Path::to_path_buf);
        let (out, op, token) = self.output()?;
        if out.status.success() {
            Ok(out)
        } else {
            Err(super::disk::said_full(
                git_error(&op, &out, token),
                dir.as_deref(),
            ))
        }
    }

    /// Runs and returns the raw output whatever the exit status (for `--quiet` probes).
    pub(crate) fn output(mut self) -> Result<(Output, String, Option<&'a str>), WorkspaceError> {
        let out = run_with_deadline(&mut self.cmd, self.timeout).map_err(|e| match e {
            Spawn::Unavailable(e) => WorkspaceError::GitUnavailable {
                reason: e.to_string(),
            },
            Spawn::TimedOut => WorkspaceError::Git {
                op: scrub(&self.op, self.token),
                code: None,
                stderr: format!(
                    "killed after {:?} without finishing (a hung git process; the workspace may hold a FIFO or a huge file)",
                    self.timeout
                ),
            },
        })?;
        Ok((out, self.op, self.token))
    }

    /// The prepared command, for callers that need to spawn and wait themselves.
    pub(crate) fn command(&mut self) -> &mut Command {
        &mut self.cmd
    }

    /// Runs and returns trimmed stdout.
    pub(crate) fn stdout(self) -> Result<String, WorkspaceError> {
        let out = self.run()?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}

impl Git<'_> {
    /// Runs with `feed` writing the child's stdin on a thread of its own while `read` consumes
    /// its stdout as it comes (one batched process for any number of objects: `cat-file
    /// --batch`, `fast-import`), under the same deadline as `run`. An error of `feed` (a file
    /// it could not read) wins over git's, which wins over `read`'s.
    pub(crate) fn stream<T>(
        mut self,
        feed: impl FnOnce(&mut dyn Write) -> Result<(), WorkspaceError> + Send + 'static,
        read: impl FnOnce(&mut dyn std::io::BufRead) -> Result<T, WorkspaceError>,
    ) -> Result<T, WorkspaceError> {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{Arc, Condvar, Mutex};
        let limit = self.timeout;
        self.cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        dies_with_the_daemon(&mut self.cmd);
        let mut child = self
            .cmd
            .spawn()
            .map_err(|e| WorkspaceError::GitUnavailable {
                reason: e.to_string(),
            })?;
        let pid = child.id() as i32;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let err_reader = std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = stderr {
                let _ = std::io::Read::read_to_end(&mut p, &mut buf);
            }
            buf
        });
        let writer = std::thread::spawn(move || -> Result<(), WorkspaceError> {
            let Some(stdin) = stdin else { return Ok(()) };
            let mut w = std::io::BufWriter::with_capacity(1 << 16, stdin);
            let fed = feed(&mut w);
            let flushed = w.flush();
            match (fed, flushed) {
                (Err(e), _) => Err(e),
                // The child stopped reading (it failed, or `read` had all it wanted).
                (Ok(()), Err(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                (Ok(()), Err(e)) => Err(WorkspaceError::Io {
                    op: "write to git",
                    path: PathBuf::from("git"),
                    source: e,
                }),
                (Ok(()), Ok(())) => Ok(()),
            }
        });
        let done = Arc::new((Mutex::new(false), Condvar::new()));
        let timed_out = Arc::new(AtomicBool::new(false));
        let watchdog = {
            let done = done.clone();
            let timed_out = timed_out.clone();
            std::thread::spawn(move || {
                let (lock, cvar) = &*done;
                let guard = lock.lock().unwrap_or_else(|p| p.into_inner());
                let (guard, _) = cvar
                    .wait_timeout_while(guard, limit, |finished| !*finished)
                    .unwrap_or_else(|p| p.into_inner());
                if !*guard {
                    timed_out.store(true, Ordering::SeqCst);
                    // SAFETY: kill(2) on the process group this child leads (set above).
                    unsafe {
                        libc::kill(-pid, libc::SIGKILL);
                    }
                }
            })
        };
        let result = match stdout {
            Some(out) => {
                let mut reader = std::io::BufReader::with_capacity(1 << 16, out);
                let r = read(&mut reader);
                // Whatever `read` left unread: drained, so the child can finish.
                let _ = std::io::copy(&mut reader, &mut std::io::sink());
                r
            }
            None => read(&mut std::io::empty()),
        };
        let status = child.wait();
        {
            let (lock, cvar) = &*done;
            *lock.lock().unwrap_or_else(|p| p.into_inner()) = true;
            cvar.notify_all();
        }
        let _ = watchdog.join();
        let fed = writer.join().unwrap_or(Ok(()));
        let stderr = err_reader.join().unwrap_or_default();
        if timed_out.load(Ordering::SeqCst) {
            return Err(WorkspaceError::Git {
                op: scrub(&self.op, self.token),
                code: None,
                stderr: format!(
                    "killed after {limit:?} without finishing (a hung git process; the workspace may hold a FIFO or a huge file)"
                ),
            });
        }
        fed?;
        let status = status.map_err(|e| WorkspaceError::GitUnavailable {
            reason: e.to_string(),
        })?;
        if !status.success() {
            let out = Output {
                status,
                stdout: Vec::new(),
                stderr,
            };
            let dir = self.cmd.get_current_dir();
            return Err(super::disk::said_full(
                git_error(&self.op, &out, self.token),
                dir,
            ));
        }
        result
    }
}

/// Issue 24: git dies with the daemon. A `kill -9` of the daemon must not leave a git
/// still writing a workspace, a check's checkout or the landing commit that the next start
/// prepares again (the chaos test saw a check's checkout vanish under the resumed
/// verification). The SIGKILL leaves git's lock files behind: `stale_locks` removes them
/// where no live git can hold them. The signal follows the thread that spawned the child,
/// which waits for it.
fn dies_with_the_daemon(cmd: &mut Command) {
    // SAFETY: prctl(2) only, between fork and exec; it allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

enum Spawn {
    Unavailable(std::io::Error),
    TimedOut,
}

/// Runs `cmd` in its own process group, collecting stdout and stderr; kills the group when
/// `limit` passes first.
fn run_with_deadline(cmd: &mut Command, limit: Duration) -> Result<Output, Spawn> {
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    dies_with_the_daemon(cmd);
    let mut child = cmd.spawn().map_err(Spawn::Unavailable)?;
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out_reader = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let err_reader = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let started = Instant::now();
    let mut pause = Duration::from_millis(1);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < limit => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Ok(None) | Err(_) => {
                // SAFETY: kill(2) on the process group this child leads (its pid, set above).
                unsafe {
                    libc::kill(-(child.id() as i32), libc::SIGKILL);
                }
                let _ = child.kill();
                let _ = child.wait();
                return Err(Spawn::TimedOut);
            }
        }
    };
    // A grandchild that kept the pipes open is in the same group; it is gone or done.
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

pub(crate) fn git_error(op: &str, out: &Output, token: Option<&str>) -> WorkspaceError {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let text = if stderr.trim().is_empty() {
        stdout.trim().to_string()
    } else {
        stderr.trim().to_string()
    };
    WorkspaceError::Git {
        op: scrub(op, token),
        code: out.status.code(),
        stderr: scrub(&text, token),
    }
}

/// Writes the askpass script under `dir` (atomically, mode 0700) unless an identical one exists.
pub(crate) fn ensure_askpass(dir: &Path) -> Result<PathBuf, WorkspaceError> {
    let path = dir.join(".polyphony-askpass.sh");
    if let Ok(existing) = std::fs::read_to_string(&path) {
        if existing == ASKPASS_SCRIPT {
            return Ok(path);
        }
    }
    let io = |op: &'static str, p: &Path| {
        let p = p.to_path_buf();
        move |source| WorkspaceError::Io {
            op,
            path: p,
            source,
        }
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".askpass")
        .tempfile_in(dir)
        .map_err(io("create askpass script in", dir))?;
    tmp.write_all(ASKPASS_SCRIPT.as_bytes())
        .map_err(io("write askpass script", tmp.path()))?;
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o700))
        .map_err(io("chmod askpass script", tmp.path()))?;
    tmp.persist(&path).map_err(|e| WorkspaceError::Io {
        op: "install askpass script",
        path: path.clone(),
        source: e.error,
    })?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_hosts() {
        let check =
            |url: &str, want: Option<&str>| assert_eq!(remote_host(url).as_deref(), want, "{url}");
        check("https://github.com/o/r.git", Some("github.com"));
        check("https://x-access-token@GitHub.com/o/r", Some("github.com"));
        check("http://127.0.0.1:8080/o/r", Some("127.0.0.1:8080"));
        check("https://ghe.example.com?x", Some("ghe.example.com"));
        check("/srv/repos/r.git", None);
        check("file:///srv/r.git", None);
        check("git@github.com:o/r.git", None);
        check("https:///nohost", None);
    }

    /// The script answers for its host only, whatever the case or user in the prompt.
    #[test]
    fn askpass_answers_only_for_its_host() {
        let dir = tempfile::tempdir().unwrap();
        let script = ensure_askpass(dir.path()).unwrap();
        let ask = |prompt: &str, host: Option<&str>| {
            let mut cmd = Command::new(&script);
            cmd.arg(prompt)
                .env(TOKEN_ENV, "tok-123")
                .env_remove(HOST_ENV);
            if let Some(h) = host {
                cmd.env(HOST_ENV, h);
            }
            let out = cmd.output().unwrap();
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
            )
        };
        let gh = Some("github.com");
        assert_eq!(
            ask("Username for 'https://github.com': ", gh),
            (true, "x-access-token\n".into())
        );
        assert_eq!(
            ask("Password for 'https://x-access-token@GitHub.com': ", gh),
            (true, "tok-123\n".into())
        );
        for (prompt, host) in [
            ("Password for 'https://x-access-token@evil.example': ", gh),
            ("Password for 'https://github.com.evil.example': ", gh),
            ("Password for 'https://github.com:8443': ", gh),
            ("Password for 'https://github.com': ", None),
        ] {
            let (ok, out) = ask(prompt, host);
            assert!(!ok && out.is_empty(), "{prompt} {host:?}: answered {out:?}");
        }
    }

    /// Issue 11: a git child blocked on a FIFO is killed at its deadline, not waited for.
    #[test]
    fn a_hung_git_is_killed_at_its_deadline() {
        let dir = tempfile::tempdir().expect("tmp");
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.display().to_string()).expect("path");
        // SAFETY: mkfifo(3) on a NUL-terminated path in our temp dir.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let started = Instant::now();
        let err = Git::new("hash-object")
            .args(["hash-object", "--no-filters"])
            .arg(&fifo)
            .timeout(Duration::from_millis(300))
            .run()
            .expect_err("killed");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert!(err.to_string().contains("killed after 300ms"), "{err}");
    }

    #[test]
    fn a_quick_git_returns_its_output() {
        let out = Git::new("version").args(["version"]).stdout().expect("git");
        assert!(out.starts_with("git version"), "{out}");
    }
}
