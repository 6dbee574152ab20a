//! A [`WorkerRuntime`] with no engine, for fast orchestrator tests (issue 17): an agent
//! container plays a scripted transcript (real stream-json lines, e.g. from
//! `tests/fixtures/`) and exits with the scripted code, after writing the scripted files
//! into its workspace as the agent would; a check container runs its command with
//! `/bin/sh -c` on the host, in the check's clean checkout, so the project's real checks
//! judge the agent's real commit.
//!
//! No isolation, no limits: only for tests over trusted sample repositories. A script may
//! hang until the container is killed (deadline, idle or cancel paths).
//!
//! Must not: be used outside tests and the benchmarks (the CLI always connects Docker).

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use chrono::Utc;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use tokio::sync::watch;

use super::container_spec::{ContainerSpec, Role, WORKSPACE_DIR};
use super::{ContainerInfo, ContainerSummary, LogChunk, RunState, RuntimeError, WorkerRuntime};
use crate::domain::EventStream;

/// What one agent container does.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentScript {
    /// Files written into the workspace (relative path, contents) when the container starts.
    pub files: Vec<(String, String)>,
    /// Stdout lines, in order (each gets its newline).
    pub stdout: Vec<String>,
    pub stderr: Vec<String>,
    pub exit_code: i64,
    /// Keep running after the output until killed (exit 137).
    pub hang: bool,
}

impl AgentScript {
    /// Plays `transcript`'s lines (an `.ndjson` file of a CLI's stdout) and exits 0.
    pub fn transcript(transcript: &Path) -> std::io::Result<AgentScript> {
        let text = std::fs::read_to_string(transcript)?;
        Ok(AgentScript {
            stdout: text.lines().map(String::from).collect(),
            ..AgentScript::default()
        })
    }

    /// Writes `contents` at `path` in the workspace first.
    pub fn writes(mut self, path: &str, contents: &str) -> AgentScript {
        self.files.push((path.to_string(), contents.to_string()));
        self
    }

    pub fn exits(mut self, code: i64) -> AgentScript {
        self.exit_code = code;
        self
    }

    pub fn hangs(mut self) -> AgentScript {
        self.hang = true;
        self
    }
}

/// The exit code of a container killed with SIGKILL.
const KILLED: i64 = 137;

struct Fake {
    spec: ContainerSpec,
    state: RunState,
    exit_code: Option<i64>,
    output: Vec<LogChunk>,
    /// The agent's script (agents only).
    script: Option<AgentScript>,
    /// Flips to true on kill.
    killed: watch::Sender<bool>,
    started_at: Option<chrono::DateTime<Utc>>,
    finished_at: Option<chrono::DateTime<Utc>>,
}

/// The scripted runtime: agent scripts are used in the order agent containers are created.
#[derive(Clone, Default)]
pub struct ScriptedRuntime {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    scripts: Mutex<VecDeque<AgentScript>>,
    containers: Mutex<BTreeMap<String, Fake>>,
    /// Every spec created, in order (agents and checks).
    created: Mutex<Vec<ContainerSpec>>,
    /// Every egress plan, in order.
    egress: Mutex<Vec<super::EgressPlan>>,
    next: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ScriptedRuntime {
    pub fn new() -> ScriptedRuntime {
        ScriptedRuntime::default()
    }

    /// Queues the script of the next agent container.
    pub fn push(&self, script: AgentScript) -> &Self {
        lock(&self.inner.scripts).push_back(script);
        self
    }

    /// Every container spec created so far, in order.
    pub fn created(&self) -> Vec<ContainerSpec> {
        lock(&self.inner.created).clone()
    }

    /// Every egress plan an attempt asked for, in order.
    pub fn egress_plans(&self) -> Vec<super::EgressPlan> {
        lock(&self.inner.egress).clone()
    }

    /// Containers not removed yet.
    pub fn live(&self) -> Vec<String> {
        lock(&self.inner.containers).keys().cloned().collect()
    }

    fn with<T>(&self, id: &str, f: impl FnOnce(&mut Fake) -> T) -> Result<T, RuntimeError> {
        let mut all = lock(&self.inner.containers);
        let key = resolve(&all, id).ok_or_else(|| RuntimeError::NotFound(id.to_string()))?;
        let fake = all
            .get_mut(&key)
            .ok_or_else(|| RuntimeError::NotFound(id.to_string()))?;
        Ok(f(fake))
    }
}

/// The id of the container with this id or name.
fn resolve(all: &BTreeMap<String, Fake>, id: &str) -> Option<String> {
    if all.contains_key(id) {
        return Some(id.to_string());
    }
    all.iter()
        .find(|(_, f)| f.spec.name == id)
        .map(|(k, _)| k.clone())
}

fn workspace_of(spec: &ContainerSpec) -> Option<PathBuf> {
    spec.mounts
        .iter()
        .find(|m| m.container_path == WORKSPACE_DIR)
        .map(|m| m.host_path.clone())
}

fn io(e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::Io(e.to_string())
}

fn chunk(stream: EventStream, line: &str) -> LogChunk {
    LogChunk {
        stream,
        bytes: Bytes::from(format!("{line}\n")),
    }
}

/// Runs a check's command on the host in its checkout; returns its output and exit code.
fn run_check(spec: &ContainerSpec) -> Result<(Vec<LogChunk>, i64), RuntimeError> {
    let dir = workspace_of(spec).ok_or_else(|| io("a check container without a workspace"))?;
    let (program, args) = spec
        .cmd
        .split_first()
        .ok_or_else(|| io("a check container without a command"))?;
    let out = std::process::Command::new(program)
        .args(args)
        .current_dir(&dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", &dir)
        .envs(&spec.env)
        .output()
        .map_err(io)?;
    let mut output = Vec::new();
    for (stream, bytes) in [
        (EventStream::Stdout, out.stdout),
        (EventStream::Stderr, out.stderr),
    ] {
        if !bytes.is_empty() {
            output.push(LogChunk {
                stream,
                bytes: Bytes::from(bytes),
            });
        }
    }
    Ok((output, i64::from(out.status.code().unwrap_or(1))))
}

impl WorkerRuntime for ScriptedRuntime {
    fn create<'a>(
        &'a self,
        spec: &'a ContainerSpec,
    ) -> BoxFuture<'a, Result<String, RuntimeError>> {
        Box::pin(async move {
            lock(&self.inner.created).push(spec.clone());
            let script = match spec.role {
                Role::Agent => Some(lock(&self.inner.scripts).pop_front().ok_or_else(|| {
                    RuntimeError::Engine {
                        op: "create",
                        message: format!("no agent script left for {}", spec.name),
                    }
                })?),
                _ => None,
            };
            let n = self.inner.next.fetch_add(1, Ordering::SeqCst) + 1;
            let id = format!("scripted{n:060}");
            let (killed, _) = watch::channel(false);
            let mut all = lock(&self.inner.containers);
            // As Docker's create here: a leftover of the same name is replaced.
            if let Some(old) = resolve(&all, &spec.name) {
                all.remove(&old);
            }
            all.insert(
                id.clone(),
                Fake {
                    spec: spec.clone(),
                    state: RunState::Created,
                    exit_code: None,
                    output: Vec::new(),
                    script,
                    killed,
                    started_at: None,
                    finished_at: None,
                },
            );
            Ok(id)
        })
    }

    fn start<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
        Box::pin(async move {
            let (spec, script) = self.with(id, |f| (f.spec.clone(), f.script.clone()))?;
            let (output, exit_code, running) = match script {
                Some(script) => {
                    if let Some(dir) = workspace_of(&spec) {
                        for (path, contents) in &script.files {
                            let path = dir.join(path);
                            if let Some(parent) = path.parent() {
                                std::fs::create_dir_all(parent).map_err(io)?;
                            }
                            std::fs::write(&path, contents).map_err(io)?;
                        }
                    }
                    let mut output: Vec<LogChunk> = script
                        .stdout
                        .iter()
                        .map(|l| chunk(EventStream::Stdout, l))
                        .collect();
                    output.extend(script.stderr.iter().map(|l| chunk(EventStream::Stderr, l)));
                    let exit = (!script.hang).then_some(script.exit_code);
                    (output, exit, script.hang)
                }
                None => {
                    let spec = spec.clone();
                    let (output, code) = tokio::task::spawn_blocking(move || run_check(&spec))
                        .await
                        .map_err(io)??;
                    (output, Some(code), false)
                }
            };
            self.with(id, |f| {
                f.output = output;
                f.started_at = Some(Utc::now());
                f.exit_code = exit_code;
                if running {
                    f.state = RunState::Running;
                } else {
                    f.state = RunState::Exited;
                    f.finished_at = Some(Utc::now());
                }
            })
        })
    }

    fn logs<'a>(
        &'a self,
        id: &'a str,
        _since: Option<i64>,
    ) -> BoxStream<'a, Result<LogChunk, RuntimeError>> {
        let found = self.with(id, |f| (f.output.clone(), f.killed.subscribe(), f.state));
        match found {
            Err(e) => futures_util::stream::once(async move { Err(e) }).boxed(),
            Ok((output, mut killed, state)) => {
                let lines = futures_util::stream::iter(output.into_iter().map(Ok));
                // A running (hanging) container's stream ends only when it is killed.
                let end = futures_util::stream::once(async move {
                    if state == RunState::Running {
                        let _ = killed.wait_for(|k| *k).await;
                    }
                })
                .filter_map(|_| async { None });
                lines.chain(end).boxed()
            }
        }
    }

    fn wait<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<i64, RuntimeError>> {
        Box::pin(async move {
            let (mut killed, code) = self.with(id, |f| (f.killed.subscribe(), f.exit_code))?;
            if let Some(code) = code {
                return Ok(code);
            }
            let _ = killed.wait_for(|k| *k).await;
            Ok(self.with(id, |f| f.exit_code)?.unwrap_or(KILLED))
        })
    }

    fn kill<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
        Box::pin(async move {
            let _ = self.with(id, |f| {
                if f.state == RunState::Running {
                    f.state = RunState::Exited;
                    f.exit_code = Some(KILLED);
                    f.finished_at = Some(Utc::now());
                }
                let _ = f.killed.send(true);
            });
            Ok(())
        })
    }

    fn remove<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
        Box::pin(async move {
            let mut all = lock(&self.inner.containers);
            if let Some(key) = resolve(&all, id) {
                if let Some(f) = all.remove(&key) {
                    let _ = f.killed.send(true);
                }
            }
            Ok(())
        })
    }

    fn list_by_labels<'a>(
        &'a self,
        labels: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<Vec<ContainerSummary>, RuntimeError>> {
        Box::pin(async move {
            let all = lock(&self.inner.containers);
            Ok(all
                .iter()
                .filter(|(_, f)| labels.iter().all(|(k, v)| f.spec.labels.get(k) == Some(v)))
                .map(|(id, f)| ContainerSummary {
                    id: id.clone(),
                    name: f.spec.name.clone(),
                    state: f.state,
                    labels: f.spec.labels.clone(),
                })
                .collect())
        })
    }

    /// No network and no proxy: a scripted agent makes no connections. The plan is kept
    /// for tests ([`ScriptedRuntime::egress_plans`]).
    fn egress_up<'a>(
        &'a self,
        plan: &'a super::EgressPlan,
    ) -> BoxFuture<'a, Result<super::EgressEndpoint, RuntimeError>> {
        Box::pin(async move {
            lock(&self.inner.egress).push(plan.clone());
            Ok(super::EgressEndpoint {
                proxy_id: format!("scripted-{}", plan.proxy_name),
                proxy_ip: std::net::IpAddr::from([127, 0, 0, 1]),
            })
        })
    }

    fn inspect<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<ContainerInfo, RuntimeError>> {
        Box::pin(async move {
            let mut all = lock(&self.inner.containers);
            let key = resolve(&all, id).ok_or_else(|| RuntimeError::NotFound(id.to_string()))?;
            let f = all
                .get_mut(&key)
                .ok_or_else(|| RuntimeError::NotFound(id.to_string()))?;
            Ok(ContainerInfo {
                id: key.clone(),
                name: f.spec.name.clone(),
                state: f.state,
                exit_code: f.exit_code,
                oom_killed: false,
                started_at: f.started_at,
                finished_at: f.finished_at,
                labels: f.spec.labels.clone(),
                cap_drop: Vec::new(),
                security_opt: Vec::new(),
                pids_limit: None,
                memory_bytes: None,
                nano_cpus: None,
                init: None,
                user: None,
                network_mode: None,
                readonly_rootfs: false,
                ulimits: Vec::new(),
                log_config: BTreeMap::new(),
                tmpfs: BTreeMap::new(),
                mounts: f
                    .spec
                    .mounts
                    .iter()
                    .map(|m| (m.container_path.clone(), m.host_path.display().to_string()))
                    .collect(),
            })
        })
    }
}
