//! RunSpec -> ContainerSpec: name, labels, mounts, env names, hardening (spec §8).
//!
//! Architecture Invariant: pure. No Docker, disk, clock or environment reads; the caller
//! passes the home label and the default user in. A [`ContainerSpec`] holds env *names*
//! for secrets (`env_from_host`), never values, so it can be logged and stored.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{LABEL_ATTEMPT, LABEL_HOME, LABEL_ROLE, LABEL_TASK};
use crate::domain::{EnvVar, Invocation, NetworkMode, ResourceLimits, RunSpec, VolumeMount};

/// Where the workspace is mounted and the process starts.
pub const WORKSPACE_DIR: &str = "/workspace";
/// The per-attempt writable HOME (a tmpfs, so nothing survives the container).
pub const HOME_DIR: &str = "/home/worker";
pub use crate::domain::CREDENTIAL_STAGING_DIR;
/// Where `DockerRuntime::create` puts [`ContainerSpec::stdin`] (the entrypoint feeds it).
pub const STDIN_FILE: &str = "/polyphony/input/stdin";
/// The file whose existence releases a held container's command ([`ContainerSpec::hold`]):
/// the daemon writes it into the staging directory, mounted read-only at [`STAGING_ROOT`].
pub const RELEASE_FILE: &str = "/polyphony/released";
/// The variable naming [`RELEASE_FILE`] to the entrypoint, which waits for the file when
/// the variable is set (at most [`HOLD_TIMEOUT_ENV`] seconds).
pub const HOLD_ENV: &str = "POLYPHONY_HOLD_UNTIL";
/// A FIFO beside [`RELEASE_FILE`] the daemon writes a line into once the file exists: an
/// entrypoint that can open it (read-write, so the open never blocks) sleeps in a `read`
/// until then instead of polling for the file (a `sleep` every 10 ms: about 12% of a core
/// on a 2-core machine, beside the proxy's start). Named by [`HOLD_FIFO_ENV`]; an empty
/// value, or an entrypoint that predates it, polls.
pub const RELEASE_FIFO: &str = "/polyphony/release.fifo";
/// The variable naming [`RELEASE_FIFO`] to the entrypoint.
pub const HOLD_FIFO_ENV: &str = "POLYPHONY_HOLD_FIFO";
/// The entrypoint's bound on that wait, in seconds.
pub const HOLD_TIMEOUT_ENV: &str = "POLYPHONY_HOLD_SECONDS";
/// [`HOLD_TIMEOUT_ENV`]'s value: past the daemon's own wait for its proxy's `ready`, so the
/// daemon's clearer error comes first.
pub const HOLD_SECONDS: u64 = 30;
/// The image label saying its entrypoint honours [`HOLD_ENV`] (Polyphony's images carry
/// it; an operator's image without it keeps the old order: the agent's container is
/// created only once its proxy listens).
pub const HOLD_LABEL: &str = "polyphony.entrypoint.hold";
/// The per-container staging directory (credential copies and stdin) is mounted here,
/// read-only (see `staging`).
pub const STAGING_ROOT: &str = "/polyphony";
/// The unprivileged `uid:gid` containers run as when the daemon itself runs as root and
/// `container.user` is unset (the images' `worker` user).
pub const UNPRIVILEGED_USER: &str = "1000:1000";
/// Process limits every container gets (`setrlimit` names, soft = hard): open files,
/// processes of the uid, largest file it may write (bytes), and no core dumps.
pub const ULIMITS: [(&str, i64); 4] = [
    ("nofile", 8192),
    ("nproc", 8192),
    ("fsize", 2 * 1024 * 1024 * 1024),
    ("core", 0),
];
/// The engine keeps at most this much of a container's output on its disk (json-file,
/// one file). Larger than the per-attempt output cap, which kills the container first,
/// so a re-attach always re-reads the whole log.
pub const LOG_MAX_SIZE: &str = "128m";
/// Size of the per-container HOME and /tmp tmpfs.
const TMPFS_SIZE: &str = "size=512m";

/// Why a container exists: `polyphony.role` label value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Agent,
    Verify,
    /// An attempt's egress proxy (and, on networks, the attempt's internal network).
    Egress,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Verify => "verify",
            Role::Egress => "egress",
        }
    }
}

/// Everything the engine needs to create one container. Holds no secret values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContainerSpec {
    pub name: String,
    pub image: String,
    pub role: Role,
    /// Argv handed to the image's entrypoint (never a shell string for agents).
    pub cmd: Vec<String>,
    /// Fed to the command's stdin (through [`STDIN_FILE`]) when set.
    pub stdin: Option<String>,
    pub working_dir: String,
    pub labels: BTreeMap<String, String>,
    pub mounts: Vec<VolumeMount>,
    /// Container path -> tmpfs options.
    pub tmpfs: BTreeMap<String, String>,
    /// Plain, non-secret variables.
    pub env: BTreeMap<String, String>,
    /// Variables whose values are read from the host at creation and never stored.
    pub env_from_host: Vec<EnvVar>,
    pub network: NetworkMode,
    /// The upstream resolvers of the engine's embedded DNS (`--dns`); empty: the engine's
    /// default (the host's). Agents confined to an attempt's network get the container's
    /// own loopback (`egress::AGENT_DNS`), so nothing is forwarded anywhere (issue 25).
    pub dns: Vec<String>,
    /// The image's entrypoint holds the command until the daemon releases it
    /// ([`HOLD_ENV`], `WorkerRuntime::release`): the agent's container starts beside its
    /// egress proxy, and its CLI runs only once the proxy listens (issue 25).
    #[serde(default)]
    pub hold: bool,
    /// Hardening and limits; `limits.user` is always resolved (`Some`).
    pub limits: ResourceLimits,
}

impl ContainerSpec {
    /// A hardened container with the default limits, HOME and /tmp tmpfs, and no mounts.
    /// `default_user` fills `limits.user` (pass [`super::daemon_user`]).
    pub fn new(name: impl Into<String>, image: impl Into<String>, cmd: Vec<String>) -> Self {
        let mut env = BTreeMap::new();
        env.insert("HOME".to_string(), HOME_DIR.to_string());
        env.insert(
            "POLYPHONY_CREDENTIALS".to_string(),
            CREDENTIAL_STAGING_DIR.to_string(),
        );
        // Git inside the container runs as a uid that does not own /workspace (the daemon
        // keeps ownership, see `staging`): without this it refuses "dubious ownership".
        // Command-scope config (GIT_CONFIG_COUNT) is one of the scopes git honours for it.
        env.insert("GIT_CONFIG_COUNT".to_string(), "1".to_string());
        env.insert("GIT_CONFIG_KEY_0".to_string(), "safe.directory".to_string());
        env.insert("GIT_CONFIG_VALUE_0".to_string(), "*".to_string());
        let mut tmpfs = BTreeMap::new();
        // A mode is required: without it a non-root user cannot write (NOTES-crates.md).
        // `limits` narrows HOME to the container's own uid once it is known.
        tmpfs.insert(HOME_DIR.to_string(), home_tmpfs(None));
        tmpfs.insert(
            "/tmp".to_string(),
            format!("rw,exec,nosuid,nodev,mode=1777,{TMPFS_SIZE}"),
        );
        ContainerSpec {
            name: name.into(),
            image: image.into(),
            role: Role::Agent,
            cmd,
            stdin: None,
            working_dir: WORKSPACE_DIR.to_string(),
            labels: BTreeMap::new(),
            mounts: Vec::new(),
            tmpfs,
            env,
            env_from_host: Vec::new(),
            network: NetworkMode::Bridge,
            dns: Vec::new(),
            hold: false,
            limits: ResourceLimits::default(),
        }
    }

    /// Sets the four Polyphony labels.
    pub fn labels_for(mut self, task_id: &str, attempt: u32, home_label: &str, role: Role) -> Self {
        self.role = role;
        self.labels
            .insert(LABEL_TASK.to_string(), task_id.to_string());
        self.labels
            .insert(LABEL_ATTEMPT.to_string(), attempt.to_string());
        self.labels
            .insert(LABEL_HOME.to_string(), home_label.to_string());
        self.labels
            .insert(LABEL_ROLE.to_string(), role.as_str().to_string());
        self
    }

    /// Binds the attempt's clone read-write at `/workspace`.
    pub fn workspace(mut self, host_path: impl Into<std::path::PathBuf>) -> Self {
        self.mounts.push(VolumeMount {
            host_path: host_path.into(),
            container_path: WORKSPACE_DIR.to_string(),
            read_only: false,
        });
        self
    }

    pub fn mount(mut self, mount: VolumeMount) -> Self {
        self.mounts.push(mount);
        self
    }

    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(name.into(), value.into());
        self
    }

    pub fn env_from_host(mut self, var: EnvVar) -> Self {
        self.env_from_host.push(var);
        self
    }

    pub fn stdin(mut self, input: Option<String>) -> Self {
        self.stdin = input;
        self
    }

    pub fn network(mut self, network: NetworkMode) -> Self {
        self.network = network;
        self
    }

    /// Sets limits; a `None` user becomes `default_user`. HOME becomes a tmpfs owned by
    /// that user (mode 0700) when it is numeric.
    pub fn limits(mut self, limits: ResourceLimits, default_user: &str) -> Self {
        let user = limits
            .user
            .clone()
            .unwrap_or_else(|| default_user.to_string());
        self.tmpfs
            .insert(HOME_DIR.to_string(), home_tmpfs(numeric_user(&user)));
        self.limits = ResourceLimits {
            user: Some(user),
            ..limits
        };
        self
    }
}

/// HOME's tmpfs options: private to `owner` when known, else world-writable and sticky.
fn home_tmpfs(owner: Option<(u32, u32)>) -> String {
    match owner {
        Some((uid, gid)) => {
            format!("rw,exec,nosuid,nodev,mode=0700,uid={uid},gid={gid},{TMPFS_SIZE}")
        }
        None => format!("rw,exec,nosuid,nodev,mode=1777,{TMPFS_SIZE}"),
    }
}

/// `task_id` as a Docker-name-safe key: `[A-Za-z0-9_.-]`, other characters become `-`,
/// and a short hash is appended when anything changed so `a/b#1` and `a-b-1` differ.
pub fn container_key(task_id: &str) -> String {
    let cleaned: String = task_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = cleaned.trim_matches(|c| c == '-' || c == '.' || c == '_');
    if trimmed == task_id && !trimmed.is_empty() {
        return trimmed.to_string();
    }
    let digest = Sha256::digest(task_id.as_bytes());
    let short = hex::encode(&digest[..4]);
    if trimmed.is_empty() {
        short
    } else {
        format!("{trimmed}-{short}")
    }
}

/// `polyphony-<key>-<attempt>`, or `polyphony-<key>-<attempt>-verify-<n>`.
pub fn container_name(task_id: &str, attempt: u32, verify: Option<u32>) -> String {
    let key = container_key(task_id);
    match verify {
        None => format!("polyphony-{key}-{attempt}"),
        Some(n) => format!("polyphony-{key}-{attempt}-verify-{n}"),
    }
}

/// The agent container of one attempt: the workspace rw, the identity's credential
/// directories read-only at the staging path, the env overlay by name, the profile's
/// network and limits.
pub fn agent_spec(
    run: &RunSpec,
    invocation: &Invocation,
    home_label: &str,
    default_user: &str,
) -> ContainerSpec {
    let mut spec = ContainerSpec::new(
        container_name(&run.task_id, run.attempt, None),
        run.image.clone(),
        invocation.argv.clone(),
    )
    .labels_for(&run.task_id, run.attempt, home_label, Role::Agent)
    .workspace(run.workspace.clone())
    .stdin(invocation.stdin.clone())
    .network(run.network.clone())
    .limits(run.limits.clone(), default_user)
    .env("POLYPHONY_TASK", run.task_id.clone())
    .env("POLYPHONY_ATTEMPT", run.attempt.to_string());
    for mount in &run.volume_mounts {
        // Credentials are staged, never handed over writable (spec §8, DESIGN "Worker runtime").
        spec = spec.mount(VolumeMount {
            read_only: true,
            ..mount.clone()
        });
    }
    for var in &run.env_overlay {
        spec = spec.env_from_host(var.clone());
    }
    spec
}

/// Verification check `n` of an attempt: `/bin/sh -c COMMAND` over the workspace with no
/// network, no credentials and no env overlay, in the verify image (spec §10). Always
/// fully hardened whatever the agent profile says (`allow_unsafe` covers the agent only);
/// the profile's sizes (memory, CPUs, pids) and user still apply, except uid 0.
pub fn verify_spec(
    run: &RunSpec,
    n: u32,
    command: &str,
    home_label: &str,
    default_user: &str,
) -> ContainerSpec {
    let mut limits = run.limits.clone();
    let hardened = ResourceLimits::default();
    limits.cap_drop_all = hardened.cap_drop_all;
    limits.no_new_privileges = hardened.no_new_privileges;
    limits.init = hardened.init;
    if limits
        .user
        .as_deref()
        .and_then(numeric_user)
        .is_some_and(|(uid, _)| uid == 0)
    {
        limits.user = None;
    }
    let default_user = match numeric_user(default_user) {
        Some((0, _)) => UNPRIVILEGED_USER,
        _ => default_user,
    };
    ContainerSpec::new(
        container_name(&run.task_id, run.attempt, Some(n)),
        run.verify_image.clone(),
        vec!["/bin/sh".to_string(), "-c".to_string(), command.to_string()],
    )
    .labels_for(&run.task_id, run.attempt, home_label, Role::Verify)
    .workspace(run.workspace.clone())
    .network(NetworkMode::None)
    .limits(limits, default_user)
    .env("POLYPHONY_TASK", run.task_id.clone())
    .env("POLYPHONY_ATTEMPT", run.attempt.to_string())
}

/// A numeric `uid:gid`, or `None` for a user given by name (nothing to hand over then).
pub fn numeric_user(user: &str) -> Option<(u32, u32)> {
    let (uid, gid) = user.split_once(':').unwrap_or((user, user));
    Some((uid.trim().parse().ok()?, gid.trim().parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{AgentType, VerifyCommand};
    use std::path::PathBuf;

    #[test]
    fn numeric_users_parse() {
        assert_eq!(numeric_user("1000:1000"), Some((1000, 1000)));
        assert_eq!(numeric_user("5:6"), Some((5, 6)));
        assert_eq!(numeric_user("1000"), Some((1000, 1000)));
        assert_eq!(numeric_user("worker"), None);
        assert_eq!(numeric_user("1000:staff"), None);
    }

    fn check_key(task_id: &str, expected: &str) {
        assert_eq!(container_key(task_id), expected, "key of {task_id:?}");
    }

    #[test]
    fn keys_are_docker_safe_and_distinct() {
        check_key("local-7", "local-7");
        check_key(
            "owner/repo#42",
            &format!("owner-repo-42-{}", short("owner/repo#42")),
        );
        check_key("owner-repo-42", "owner-repo-42");
        check_key("###", &short("###"));
        check_key("", &short(""));
        check_key("-x-", &format!("x-{}", short("-x-")));
    }

    fn short(s: &str) -> String {
        hex::encode(&Sha256::digest(s.as_bytes())[..4])
    }

    #[test]
    fn names_follow_the_convention() {
        assert_eq!(container_name("local-7", 2, None), "polyphony-local-7-2");
        assert_eq!(
            container_name("local-7", 2, Some(1)),
            "polyphony-local-7-2-verify-1"
        );
    }

    fn run_spec() -> RunSpec {
        RunSpec {
            task_id: "o/r#5".into(),
            attempt: 3,
            agent: "claude-main".into(),
            agent_type: AgentType::Claude,
            cli_command: "claude".into(),
            fallback: vec![],
            identity: "work".into(),
            workspace: PathBuf::from("/ws/o-r-5/3"),
            branch: "polyphony/o-r-5-a3".into(),
            base_ref: None,
            image: "agent:1".into(),
            model: None,
            max_turns: None,
            args: Vec::new(),
            env_overlay: vec![EnvVar {
                name: "ANTHROPIC_API_KEY".into(),
                from_host: "WORK_KEY".into(),
            }],
            volume_mounts: vec![VolumeMount {
                host_path: PathBuf::from("/home/me/.claude"),
                container_path: format!("{CREDENTIAL_STAGING_DIR}/.claude"),
                read_only: false,
            }],
            deadline_seconds: 600,
            idle_timeout_seconds: 60,
            network: NetworkMode::Bridge,
            egress: Default::default(),
            limits: ResourceLimits::default(),
            verification: vec![VerifyCommand {
                name: "test".into(),
                command: "make test".into(),
                timeout_seconds: 60,
            }],
            verify_image: "verify:1".into(),
            rule: "default".into(),
        }
    }

    #[test]
    fn agent_spec_mounts_labels_env_and_hardening() {
        let inv = Invocation {
            argv: vec!["claude".into(), "-p".into(), "do it".into()],
            stdin: None,
        };
        let spec = agent_spec(&run_spec(), &inv, "abc", "1000:1000");
        assert_eq!(spec.name, format!("polyphony-o-r-5-{}-3", short("o/r#5")));
        assert_eq!(spec.labels[LABEL_TASK], "o/r#5");
        assert_eq!(spec.labels[LABEL_ATTEMPT], "3");
        assert_eq!(spec.labels[LABEL_HOME], "abc");
        assert_eq!(spec.labels[LABEL_ROLE], "agent");
        assert_eq!(spec.cmd, inv.argv);
        assert_eq!(spec.working_dir, "/workspace");
        assert_eq!(spec.mounts[0].container_path, "/workspace");
        assert!(!spec.mounts[0].read_only);
        assert!(spec.mounts[1].read_only, "credentials are forced read-only");
        assert_eq!(spec.env["HOME"], HOME_DIR);
        assert!(spec.tmpfs[HOME_DIR].contains("mode=0700,uid=1000,gid=1000"));
        assert_eq!(spec.env_from_host[0].from_host, "WORK_KEY");
        assert_eq!(spec.limits.user.as_deref(), Some("1000:1000"));
        assert!(spec.limits.cap_drop_all && spec.limits.no_new_privileges && spec.limits.init);
        assert_eq!(spec.network, NetworkMode::Bridge);
    }

    #[test]
    fn verify_spec_has_no_network_credentials_or_secrets() {
        let mut run = run_spec();
        run.limits.user = Some("5:6".into());
        let spec = verify_spec(&run, 1, "make test", "abc", "1000:1000");
        assert_eq!(spec.network, NetworkMode::None);
        assert_eq!(spec.image, "verify:1");
        assert_eq!(spec.cmd, vec!["/bin/sh", "-c", "make test"]);
        assert_eq!(spec.labels[LABEL_ROLE], "verify");
        assert_eq!(spec.mounts.len(), 1);
        assert!(spec.env_from_host.is_empty());
        assert_eq!(spec.limits.user.as_deref(), Some("5:6"));
        assert!(spec.name.ends_with("-3-verify-1"));
    }

    #[test]
    fn verify_spec_is_hardened_and_never_root_whatever_the_profile() {
        let mut run = run_spec();
        run.network = NetworkMode::Host;
        run.limits.cap_drop_all = false;
        run.limits.no_new_privileges = false;
        run.limits.init = false;
        run.limits.user = Some("0:0".into());
        let spec = verify_spec(&run, 1, "make test", "abc", "0:0");
        assert_eq!(spec.network, NetworkMode::None);
        assert!(spec.limits.cap_drop_all && spec.limits.no_new_privileges && spec.limits.init);
        assert_eq!(spec.limits.user.as_deref(), Some(UNPRIVILEGED_USER));
        assert!(spec.tmpfs[HOME_DIR].contains("uid=1000,gid=1000"));
    }
}
