//! The worker runtime: where one attempt's container runs (spec §8).
//!
//! Owns the [`WorkerRuntime`] trait (the seam where a cluster backend plugs in later), its
//! Docker implementation ([`docker::DockerRuntime`], the only bollard user in the crate),
//! the pure RunSpec -> [`ContainerSpec`] mapping ([`container_spec`]), line splitting
//! ([`stream`]), credential staging ([`staging`]), the deadline watchdog ([`watchdog`]) and
//! the offline test image ([`test_image`]). Following an attempt's output and deciding when
//! to kill it is the orchestrator's (`orchestrator::execute`), over this seam; nothing here
//! knows the agents.
//!
//! Architecture Invariant: secret values never pass through this module's types. A
//! [`ContainerSpec`] names host variables; their values are read only inside
//! `DockerRuntime::create` and go straight into the engine request.
//! Architecture Invariant: `container_spec` and `stream` are pure (no Docker, disk, clock).
//! API Boundary: [`WorkerRuntime`], [`DockerRuntime`], [`ContainerSpec`].

pub mod container_spec;
pub mod docker;
pub mod proxy_image;
pub mod scripted;
pub mod seccomp;
pub mod staging;
pub mod stream;
pub mod subnet;
pub mod test_image;
pub mod watchdog;

use std::collections::BTreeMap;
use std::path::Path;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use sha2::{Digest, Sha256};

use crate::domain::EventStream;

pub use container_spec::{ContainerSpec, Role};
pub use docker::{DockerRuntime, EngineVersion};
pub use test_image::ensure_test_image;

/// The variable the egress proxy container reads its JSON config from (`egress::proxy`).
pub const PROXY_CONFIG_ENV: &str = "POLYPHONY_EGRESS_CONFIG";

/// Label keys every Polyphony container carries (cleanup and recovery select on them).
pub const LABEL_TASK: &str = "polyphony.task";
pub const LABEL_ATTEMPT: &str = "polyphony.attempt";
pub const LABEL_HOME: &str = "polyphony.home";
pub const LABEL_ROLE: &str = "polyphony.role";

/// Errors a caller branches on: a missing container is not the same as a dead engine.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("cannot reach the Docker engine ({0}); is it running and is DOCKER_HOST right?")]
    Connect(String),
    /// The socket exists but this user may not open it (issue 12: this read "cannot reach").
    #[error("permission denied on the Docker socket {socket}; add your user to the `docker` group (`sudo usermod -aG docker $USER`, then log in again) or point DOCKER_HOST at a socket you can use")]
    PermissionDenied { socket: String },
    #[error("container `{0}` does not exist")]
    NotFound(String),
    #[error(
        "container name `{name}` is taken by a container of another Polyphony home \
         (label {LABEL_HOME}={other}); remove it or use that home"
    )]
    NameTakenByOtherHome { name: String, other: String },
    #[error("host variable `{host_var}` (for container variable `{name}`) is not set; export it or fix the identity's api_keys")]
    MissingHostEnv { name: String, host_var: String },
    #[error("image `{image}` is missing from the engine: {hint}")]
    ImageMissing { image: String, hint: String },
    #[error("building the test image failed: {0}")]
    Build(String),
    #[error("Docker engine error during {op}: {message}")]
    Engine { op: &'static str, message: String },
    #[error("{0}")]
    Io(String),
}

/// One frame of container output, tagged with its stream. Not a line: see [`stream`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogChunk {
    pub stream: EventStream,
    pub bytes: Bytes,
}

/// One line of an egress proxy's log ([`WorkerRuntime::egress_follow`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyLine {
    /// Its place in the log: 0 for the proxy's first line.
    pub number: u64,
    /// The line, without its newline.
    pub text: String,
}

/// A container's run state as the engine reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    Created,
    Running,
    Exited,
    /// Paused, restarting, removing or dead: nothing Polyphony starts on purpose.
    Other,
}

/// What `inspect` tells about one container.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerInfo {
    pub id: String,
    pub name: String,
    pub state: RunState,
    pub exit_code: Option<i64>,
    pub oom_killed: bool,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub labels: BTreeMap<String, String>,
    /// The hardening the engine actually applied (read back, not what we asked for).
    pub cap_drop: Vec<String>,
    pub security_opt: Vec<String>,
    pub pids_limit: Option<i64>,
    pub memory_bytes: Option<i64>,
    pub nano_cpus: Option<i64>,
    pub init: Option<bool>,
    pub user: Option<String>,
    pub network_mode: Option<String>,
    pub readonly_rootfs: bool,
    /// `(name, soft, hard)` as applied.
    pub ulimits: Vec<(String, i64, i64)>,
    /// The log driver as `type` plus its options.
    pub log_config: BTreeMap<String, String>,
    /// Container path -> tmpfs options.
    pub tmpfs: BTreeMap<String, String>,
    /// `(container path, host source)` of every mount.
    pub mounts: Vec<(String, String)>,
}

/// One container found by label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerSummary {
    pub id: String,
    pub name: String,
    pub state: RunState,
    pub labels: BTreeMap<String, String>,
}

/// One attempt's egress (issue 25): an internal network of its own and the proxy
/// container that is its only way out, created before the agent's container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressPlan {
    /// The attempt's internal network (`--internal`: no route out); the agent's only one.
    pub network: String,
    /// The network the proxy also joins to reach the outside (Docker's `bridge` by default).
    pub outbound: String,
    pub proxy_name: String,
    /// Home, task, attempt and role `egress`: on the network and the proxy alike.
    pub labels: BTreeMap<String, String>,
    /// The proxy's `egress::ProxyConfig` as JSON (no secret in it).
    pub config_json: String,
    /// `name:address` lines for the proxy container's own `/etc/hosts`: what its system
    /// resolver answers (tests inject DNS answers this way; still policy-checked).
    pub resolver_hosts: Vec<String>,
    /// Host directories bind-mounted read-only into the proxy (`host path`, `container
    /// path`): the gateway's private directory (issue 26, `gateway::spec`).
    pub mounts: Vec<(String, String)>,
    /// The proxy's `uid:gid` (`None`: `nobody`, 65534:65534).
    pub user: Option<String>,
    /// A path inside the proxy (below one of `mounts`) it reads its config from instead of
    /// `config_json`, waiting until the daemon writes it: so the proxy can start beside the
    /// workspace's clone, before the attempt's allowlist is known. `egress_up` of such a
    /// plan returns once the proxy runs (its address known), not once it listens:
    /// [`WorkerRuntime::egress_ready`] waits for that.
    pub config_file: Option<String>,
}

/// Where an attempt's agent finds its proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressEndpoint {
    pub proxy_id: String,
    /// The proxy's address on the attempt's internal network: fixed before the proxy starts
    /// ([`subnet`]), so the agent can be given it before then.
    pub proxy_ip: std::net::IpAddr,
}

/// A network found by label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkSummary {
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

/// A container backend. Object safe: the orchestrator holds `Arc<dyn WorkerRuntime>`.
///
/// Every method takes a container id or name. `create` replaces a leftover container of
/// the same name from this home (a crash mid-attempt) instead of failing.
pub trait WorkerRuntime: Send + Sync {
    /// Creates (does not start) the container; returns its id.
    fn create<'a>(&'a self, spec: &'a ContainerSpec)
        -> BoxFuture<'a, Result<String, RuntimeError>>;

    fn start<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>>;

    /// Follows stdout and stderr (kept apart) until the container exits. `since` is a Unix
    /// time in seconds; `None` reads from the container's first byte.
    fn logs<'a>(
        &'a self,
        id: &'a str,
        since: Option<i64>,
    ) -> BoxStream<'a, Result<LogChunk, RuntimeError>>;

    /// Waits until the container is not running and returns its exit code.
    fn wait<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<i64, RuntimeError>>;

    /// Sends SIGKILL. Killing a container that already exited is not an error.
    fn kill<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>>;

    /// Sends SIGTERM: a stop the process may answer (the egress proxy writes its last line
    /// and exits). One that already exited is not an error. A runtime that cannot signal
    /// kills.
    fn terminate<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
        self.kill(id)
    }

    /// Force-removes the container. Removing a missing container is not an error.
    fn remove<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>>;

    /// Containers (any state) carrying every given `key=value` label.
    fn list_by_labels<'a>(
        &'a self,
        labels: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<Vec<ContainerSummary>, RuntimeError>>;

    fn inspect<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<ContainerInfo, RuntimeError>>;

    /// Creates the attempt's internal network and starts its proxy (replacing leftovers of
    /// this home under the same names); returns once the proxy listens (or, for a plan
    /// with a `config_file`, once it runs: [`WorkerRuntime::egress_ready`]).
    fn egress_up<'a>(
        &'a self,
        plan: &'a EgressPlan,
    ) -> BoxFuture<'a, Result<EgressEndpoint, RuntimeError>> {
        let _ = plan;
        Box::pin(async {
            Err(RuntimeError::Engine {
                op: "egress",
                message: "this runtime cannot make networks; use `egress: none`".into(),
            })
        })
    }

    /// The first half of [`WorkerRuntime::egress_up`]: the attempt's internal network and
    /// its proxy's container, made but not started, the proxy at an address fixed before
    /// either exists ([`subnet`]); [`WorkerRuntime::egress_start`] starts it. A runtime
    /// that cannot split the two does all of `egress_up` here.
    fn egress_make<'a>(
        &'a self,
        plan: &'a EgressPlan,
    ) -> BoxFuture<'a, Result<EgressEndpoint, RuntimeError>> {
        self.egress_up(plan)
    }

    /// Starts the proxy [`WorkerRuntime::egress_make`] made; returns once it listens (for
    /// a plan with a `config_file`: once it runs, [`WorkerRuntime::egress_ready`]). On
    /// failure the proxy and the network are removed.
    fn egress_start<'a>(
        &'a self,
        plan: &'a EgressPlan,
        endpoint: &'a EgressEndpoint,
    ) -> BoxFuture<'a, Result<(), RuntimeError>> {
        let _ = (plan, endpoint);
        Box::pin(async { Ok(()) })
    }

    /// Whether `image`'s entrypoint holds its command until [`WorkerRuntime::release`]
    /// (the image carries [`container_spec::HOLD_LABEL`]): only then may a container of it
    /// be started before its egress proxy listens ([`ContainerSpec::hold`]).
    fn holds<'a>(&'a self, image: &'a str) -> BoxFuture<'a, Result<bool, RuntimeError>> {
        let _ = image;
        Box::pin(async { Ok(false) })
    }

    /// Releases the command of container `id`, created with [`ContainerSpec::hold`]: its
    /// entrypoint waits for this. Works for a container another process created (a
    /// re-attached attempt) and is harmless twice.
    fn release<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
        let _ = id;
        Box::pin(async { Ok(()) })
    }

    /// Waits until the proxy `proxy`, started by `egress_up` of a plan with a
    /// `config_file`, listens (it says `ready` once it read the file the daemon wrote).
    fn egress_ready<'a>(&'a self, proxy: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
        let _ = proxy;
        Box::pin(async { Ok(()) })
    }

    /// Follows the egress proxy `proxy`'s log (issue 25) from its first line as the proxy
    /// writes it: each complete stdout line with its number (0 for the first; the same
    /// number on every read, so a reader after a restart knows which lines it has), until
    /// the proxy exits. A proxy that cannot be followed ends the stream with the error.
    fn egress_follow<'a>(
        &'a self,
        proxy: &'a str,
    ) -> BoxStream<'a, Result<ProxyLine, RuntimeError>> {
        use futures_util::StreamExt;
        let mut splitter = stream::LineSplitter::default();
        let mut next = 0u64;
        self.logs(proxy, None)
            .filter_map(move |chunk| {
                let lines: Vec<Result<ProxyLine, RuntimeError>> = match chunk {
                    Ok(c) if c.stream == EventStream::Stdout => splitter
                        .push(&c.bytes)
                        .into_iter()
                        .map(|line| {
                            next += 1;
                            Ok(ProxyLine {
                                number: next - 1,
                                text: line.text,
                            })
                        })
                        .collect(),
                    Ok(_) => Vec::new(),
                    Err(e) => vec![Err(e)],
                };
                std::future::ready(Some(futures_util::stream::iter(lines)))
            })
            .flatten()
            .boxed()
    }

    /// Stops the proxy and returns its log (stdout: one JSON event per line), leaving the
    /// container and the network for [`WorkerRuntime::egress_remove`]. Returns once the
    /// log has ended (the proxy's process is gone), which may be before the engine has
    /// finished stopping the container. A missing proxy is not an error (an empty log then).
    fn egress_stop<'a>(&'a self, proxy: &'a str) -> BoxFuture<'a, Result<Vec<u8>, RuntimeError>> {
        let _ = proxy;
        Box::pin(async { Ok(Vec::new()) })
    }

    /// Removes the (stopped) proxy and the network. Missing pieces are not an error.
    fn egress_remove<'a>(
        &'a self,
        proxy: &'a str,
        network: &'a str,
    ) -> BoxFuture<'a, Result<(), RuntimeError>> {
        let _ = (proxy, network);
        Box::pin(async { Ok(()) })
    }

    /// [`WorkerRuntime::egress_stop`], then [`WorkerRuntime::egress_remove`]: the log.
    fn egress_down<'a>(
        &'a self,
        proxy: &'a str,
        network: &'a str,
    ) -> BoxFuture<'a, Result<Vec<u8>, RuntimeError>> {
        Box::pin(async move {
            let log = self.egress_stop(proxy).await?;
            self.egress_remove(proxy, network).await?;
            Ok(log)
        })
    }

    /// Networks carrying every given `key=value` label.
    fn list_networks<'a>(
        &'a self,
        labels: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<Vec<NetworkSummary>, RuntimeError>> {
        let _ = labels;
        Box::pin(async { Ok(Vec::new()) })
    }

    /// Removes a network (first the containers of this home still attached to it).
    /// Removing a missing network is not an error.
    fn remove_network<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
        let _ = name;
        Box::pin(async { Ok(()) })
    }

    /// The host address a container on `network` reaches the host at (a bridge network's
    /// gateway; loopback for `host`), where the model-API gateway listens (issue 26).
    /// `None`: the container reaches no host address (`none`), or the runtime cannot say.
    fn host_address<'a>(
        &'a self,
        _network: &'a crate::domain::NetworkMode,
    ) -> BoxFuture<'a, Result<Option<std::net::IpAddr>, RuntimeError>> {
        Box::pin(async { Ok(None) })
    }
}

/// The `polyphony.home` label value: a short hex hash of the canonical home path, so two
/// homes on one engine never adopt each other's containers.
pub fn home_label(home: &Path) -> String {
    let canonical = std::fs::canonicalize(home).unwrap_or_else(|_| home.to_path_buf());
    let digest = Sha256::digest(canonical.to_string_lossy().as_bytes());
    hex::encode(&digest[..8])
}

/// `uid:gid` of this process.
pub fn daemon_user() -> String {
    // SAFETY: getuid/getgid cannot fail and touch no memory.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    format!("{uid}:{gid}")
}

/// The container user when `container.user` is unset: the daemon's own `uid:gid` (files
/// the agent writes belong to whoever runs Polyphony), except that a root daemon never
/// hands out uid 0: its containers run as [`container_spec::UNPRIVILEGED_USER`] and the
/// workspace is shared with that group (`staging`).
pub fn default_container_user() -> String {
    container_user_for(&daemon_user())
}

/// [`default_container_user`] for a given daemon `uid:gid` (pure).
pub fn container_user_for(daemon: &str) -> String {
    match container_spec::numeric_user(daemon) {
        Some((0, _)) => container_spec::UNPRIVILEGED_USER.to_string(),
        _ => daemon.to_string(),
    }
}
