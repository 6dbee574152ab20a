//! Verification, the proof of work (spec §10, DESIGN.md "Proof of work", issue 11): ONE
//! commit is made after the agent exits, and everything that judges the attempt judges that
//! commit only. The gates read its objects (diff, protected paths, submodules, filter
//! attributes, file sizes, known secrets); each check command runs in a fresh container
//! over a clean checkout of it in a directory this module creates, so nothing the agent
//! left in its workspace (`.git`, hooks, config, ignored or `.git/info/exclude`d files)
//! reaches a check, and nothing a check writes reaches what lands.
//!
//! Functions take what they need and return evidence or a [`Refusal`]; they never touch the
//! store or the task's state (the pipeline records what comes back).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::execute;
use super::failure::{self, FailureKind};
use crate::agents::scrub::Scrubber;
use crate::config::VerifySettings;
use crate::domain::{AttemptStatus, CheckEvidence, RunSpec};
use crate::runtime::container_spec::verify_spec;
use crate::runtime::WorkerRuntime;
use crate::workspace::{Author, CommitOutcome, TreeChange, Workspace, WorkspaceManager};

use super::proof::{self, ProtectedPaths};

/// Why verification (or landing) refused the attempt.
#[derive(Debug)]
pub struct Refusal {
    pub status: AttemptStatus,
    pub reason: String,
    pub evidence: Vec<CheckEvidence>,
    /// What failed, for `failure::classify`.
    pub kind: FailureKind,
}

impl Refusal {
    pub fn new(status: AttemptStatus, reason: impl Into<String>) -> Refusal {
        Refusal {
            status,
            reason: reason.into(),
            evidence: Vec::new(),
            kind: FailureKind::Other,
        }
    }

    pub fn of_kind(mut self, kind: FailureKind) -> Refusal {
        self.kind = kind;
        self
    }

    pub fn crash(err: impl std::fmt::Display) -> Refusal {
        Refusal::new(AttemptStatus::Crash, first_line(&err.to_string()))
    }

    /// A refusal over the agent's work (not an orchestrator fault): FAILED, retried.
    pub fn failed(err: impl std::fmt::Display) -> Refusal {
        Refusal::new(AttemptStatus::Failed, first_line(&err.to_string()))
    }

    pub fn with_evidence(mut self, evidence: Vec<CheckEvidence>) -> Refusal {
        self.evidence = evidence;
        self
    }
}

/// The secrets a landing commit must not carry, each with the name it is reported under.
pub struct NamedSecrets {
    // One matcher per value, so a hit names its variable (never its value).
    secrets: Vec<(String, Scrubber)>,
}

impl NamedSecrets {
    /// `(name, value)` pairs; values shorter than the scrubber's minimum are ignored.
    pub fn new(pairs: impl IntoIterator<Item = (String, String)>) -> NamedSecrets {
        NamedSecrets {
            secrets: pairs
                .into_iter()
                .map(|(name, value)| (name, Scrubber::new([value])))
                .filter(|(_, s)| !s.is_empty())
                .collect(),
        }
    }

    /// `text` with every known secret's value masked (for paths shown in evidence).
    pub fn mask(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (_, s) in &self.secrets {
            out = s.scrub_line(&out).into_owned();
        }
        out
    }

    /// The name of the first secret whose value occurs in `text`.
    pub fn find(&self, text: &str) -> Option<&str> {
        self.secrets
            .iter()
            .find(|(_, s)| s.find_secret(text).is_some())
            .map(|(name, _)| name.as_str())
    }
}

/// Makes the one landing commit of the attempt (see `WorkspaceManager::commit_once`). A
/// workspace git refuses to read (a FIFO, a symlinked `.git`) fails the attempt, not the
/// daemon.
pub async fn commit(
    workspaces: Arc<WorkspaceManager>,
    ws: Workspace,
    author: Author,
    message: String,
    max_changed_files: usize,
) -> Result<CommitOutcome, Refusal> {
    tokio::task::spawn_blocking(move || {
        workspaces.commit_once(&ws, &author, &message, max_changed_files)
    })
    .await
    .map_err(Refusal::crash)?
    .map_err(|e| {
        let kind = FailureKind::from(&e);
        match e {
            crate::workspace::WorkspaceError::InvalidInput { .. }
            | crate::workspace::WorkspaceError::TooManyChanges { .. } => {
                Refusal::failed(format!("cannot commit the agent's work: {e}"))
            }
            e => Refusal::crash(format!("cannot commit the agent's work: {e}")),
        }
        .of_kind(kind)
    })
}

/// What the gates judge besides the commit.
pub struct GateRules {
    pub settings: VerifySettings,
    /// The commands the checks will run (their scripts are protected when
    /// `verify.protect_check_scripts` is set).
    pub check_commands: Vec<String>,
    pub secrets: Arc<NamedSecrets>,
}

/// The gates over commit `sha` in order: diff, protected paths, submodules, attributes,
/// file size, secrets. A failed secrets gate makes the refusal
/// [`FailureKind::SecretInDiff`], which `failure::classify` decides is permanent (BLOCKED at
/// once, no retry).
pub async fn gates(
    workspaces: Arc<WorkspaceManager>,
    ws: Workspace,
    sha: String,
    rules: GateRules,
) -> Result<Vec<CheckEvidence>, Refusal> {
    tokio::task::spawn_blocking(move || gates_blocking(&workspaces, &ws, &sha, &rules))
        .await
        .map_err(Refusal::crash)?
}

fn gates_blocking(
    workspaces: &WorkspaceManager,
    ws: &Workspace,
    sha: &str,
    rules: &GateRules,
) -> Result<Vec<CheckEvidence>, Refusal> {
    let changes = workspaces
        .changes(ws, sha)
        .map_err(|e| Refusal::crash(format!("cannot list the changes of {sha}: {e}")))?;
    let paths: Vec<String> = changes.iter().map(|c| c.path.clone()).collect();
    let settings = &rules.settings;
    let mut globs = settings.protected_paths.clone();
    if settings.protect_check_scripts {
        for command in &rules.check_commands {
            globs.extend(proof::check_entry_points(command));
        }
    }
    let protected = ProtectedPaths::new(&globs)
        .map_err(|e| Refusal::crash(format!("verify.protected_paths: {e}")))?;
    // Names first (issue 23): a file or directory named after a secret lands the secret as
    // surely as a file holding it. Every path shown in evidence is masked then.
    let named = changes.iter().find_map(|c| {
        rules
            .secrets
            .find(&c.path)
            .map(|name| (name.to_string(), c))
    });
    let masked = |p: &str| rules.secrets.mask(p);
    let in_a_name = named.is_some();
    let shown: Vec<String> = match in_a_name {
        true => paths.iter().map(|p| masked(p)).collect(),
        false => paths.clone(),
    };
    // One batched read for every blob the gates look into: the `.gitattributes` files and
    // each file small enough for the secret scan.
    let wanted: Vec<&TreeChange> = changes
        .iter()
        .filter(|c| {
            c.has_blob()
                && (proof::is_attributes_file(&c.path)
                    || c.size.is_some_and(|s| s <= settings.max_file_bytes))
        })
        .collect();
    let mut attributes = Vec::new();
    let mut found = named.map(|(name, c)| (name, format!("the name {}", masked(&c.path))));
    let oids = wanted.iter().map(|c| c.new_oid.clone()).collect();
    workspaces
        .read_blobs(ws, oids, &mut |i, bytes| {
            let c = wanted[i];
            let text = String::from_utf8_lossy(bytes);
            if proof::is_attributes_file(&c.path) {
                attributes.push((masked(&c.path), text.clone().into_owned()));
            }
            if found.is_none() && c.size.is_some_and(|s| s <= settings.max_file_bytes) {
                if let Some(name) = rules.secrets.find(&text) {
                    found = Some((name.to_string(), masked(&c.path)));
                }
            }
            true
        })
        .map_err(|e| Refusal::crash(format!("cannot read the blobs of {sha}: {e}")))?;
    let sized: Vec<TreeChange> = match in_a_name {
        true => changes
            .iter()
            .map(|c| TreeChange {
                path: masked(&c.path),
                ..c.clone()
            })
            .collect(),
        false => changes.clone(),
    };
    Ok(vec![
        proof::diff_gate(&shown),
        proof::protected_gate(&protected, &shown),
        proof::submodule_gate(&sized, settings.allow_submodules),
        proof::attributes_gate(&attributes, settings.allow_attribute_filters),
        proof::size_gate(&sized, settings.max_file_bytes),
        proof::secret_gate(found.as_ref().map(|(n, p)| (n.as_str(), p.as_str()))),
    ])
}

/// Everything a check run needs from the attempt.
pub struct CheckContext<'a> {
    pub runtime: &'a dyn WorkerRuntime,
    pub workspaces: Arc<WorkspaceManager>,
    pub ws: &'a Workspace,
    pub sha: &'a str,
    pub spec: &'a RunSpec,
    pub home_label: &'a str,
    pub default_user: &'a str,
    /// `(uid, gid)` the clean checkout is chowned to (the container user).
    pub owner: Option<(u32, u32)>,
    pub scrub: execute::Scrub<'a>,
    pub cancel: watch::Receiver<bool>,
    /// Told each check's evidence as it completes.
    pub on_check: &'a (dyn Fn(&CheckEvidence) + Send + Sync),
    /// The wall clock each check's deadline label counts from.
    pub clock: super::Clock,
}

/// Where check `n`'s clean checkout goes: beside the attempt's workspace, so cleanup and the
/// workspace root's guards cover it.
pub fn check_dir(ws: &Workspace, n: u32) -> std::path::PathBuf {
    let name = ws
        .path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    ws.path.with_file_name(format!("{name}.check-{n}"))
}

/// Why the checks stopped short of passing.
#[derive(Debug)]
pub enum ChecksStopped {
    /// A check failed or timed out: the evidence so far, the failed check last.
    Failed(Vec<CheckEvidence>),
    /// The checkout or the engine failed (not the agent's fault).
    Crashed(String, FailureKind),
    Cancelled,
}

/// Runs each check of `run.spec` in its own container over its own clean checkout of
/// `run.sha` (removed afterwards); stops at the first failure. Returns the checks' evidence.
pub async fn run_checks(run: CheckContext<'_>) -> Result<Vec<CheckEvidence>, ChecksStopped> {
    let mut evidence = Vec::new();
    for (n, check) in run.spec.verification.iter().enumerate() {
        let n = n as u32 + 1;
        if *run.cancel.borrow() {
            return Err(ChecksStopped::Cancelled);
        }
        let dir = check_dir(run.ws, n);
        let made = prepare_check_dir(&run, &dir).await;
        let outcome = match made {
            Ok(()) => {
                let mut spec = run.spec.clone();
                spec.workspace = dir.clone();
                let container =
                    verify_spec(&spec, n, &check.command, run.home_label, run.default_user);
                execute::run_check(
                    run.runtime,
                    &container,
                    Duration::from_secs(check.timeout_seconds),
                    run.scrub,
                    (run.clock)(),
                )
                .await
                .map_err(|e| {
                    (
                        format!("cannot run check `{}`: {e}", check.name),
                        FailureKind::from(&e),
                    )
                })
            }
            Err(e) => Err(e),
        };
        remove_dir(&run.workspaces, &dir).await;
        let r = outcome.map_err(|(reason, kind)| ChecksStopped::Crashed(reason, kind))?;
        let passed = !r.timed_out && r.exit_code == Some(0);
        let mut tail = r.output_tail;
        if r.timed_out {
            tail.push_str(&format!(
                "\n(killed after the {}s timeout)",
                check.timeout_seconds
            ));
        }
        let e = CheckEvidence {
            name: check.name.clone(),
            command: check.command.clone(),
            exit_code: r.exit_code,
            duration_ms: r.duration.as_millis() as u64,
            passed,
            output_tail: tail,
        };
        (run.on_check)(&e);
        let passed = e.passed;
        evidence.push(e);
        if !passed {
            return Err(ChecksStopped::Failed(evidence));
        }
    }
    Ok(evidence)
}

async fn prepare_check_dir(
    run: &CheckContext<'_>,
    dir: &std::path::Path,
) -> Result<(), (String, FailureKind)> {
    // A leftover of a run the daemon did not finish: never reused.
    remove_dir(&run.workspaces, dir).await;
    let workspaces = run.workspaces.clone();
    let ws = run.ws.clone();
    let sha = run.sha.to_string();
    let owner = run.owner;
    let dest = dir.to_path_buf();
    tokio::task::spawn_blocking(move || workspaces.checkout(&ws, &sha, &dest, owner))
        .await
        .map_err(|e| (e.to_string(), FailureKind::Other))?
        .map_err(|e| {
            (
                format!("cannot check out the commit for the checks: {e}"),
                FailureKind::from(&e),
            )
        })
}

async fn remove_dir(workspaces: &Arc<WorkspaceManager>, dir: &std::path::Path) {
    let workspaces = workspaces.clone();
    let dir = dir.to_path_buf();
    let _ = tokio::task::spawn_blocking(move || {
        if let Err(e) = workspaces.remove(&dir) {
            tracing::warn!(path = %dir.display(), error = %e, "cannot remove a check directory");
        }
        let _ = std::fs::remove_file(dir.with_extension("index"));
    })
    .await;
}

/// The verify stage over one attempt's commit (spec §10): the gates, then each check in
/// its own container, stopping at the first failure. Returns all the evidence, led by
/// `result_gate` (the agent's own outcome), or the refusal that carries it. Writes nothing
/// to the store: the pipeline records what comes back.
pub async fn prove(
    result_gate: CheckEvidence,
    rules: GateRules,
    checks: CheckContext<'_>,
) -> Result<Vec<CheckEvidence>, Refusal> {
    let mut evidence = vec![result_gate];
    evidence.extend(
        gates(
            checks.workspaces.clone(),
            checks.ws.clone(),
            checks.sha.to_string(),
            rules,
        )
        .await?,
    );
    if !proof::all_passed(&evidence) {
        return Err(verification_failure(evidence));
    }
    match run_checks(checks).await {
        Ok(passed) => {
            evidence.extend(passed);
            Ok(evidence)
        }
        Err(ChecksStopped::Failed(failed)) => {
            evidence.extend(failed);
            Err(verification_failure(evidence))
        }
        Err(ChecksStopped::Crashed(reason, kind)) => Err(Refusal::crash(reason).of_kind(kind)),
        Err(ChecksStopped::Cancelled) => Err(Refusal::new(
            AttemptStatus::Cancelled,
            "cancelled during verification",
        )),
    }
}

/// The refusal for failed evidence: names each failed gate or check.
pub fn verification_failure(evidence: Vec<CheckEvidence>) -> Refusal {
    let failed: Vec<String> = evidence
        .iter()
        .filter(|e| !e.passed)
        .map(|e| match e.exit_code {
            Some(code) if !e.command.is_empty() => format!("{} exited {code}", e.name),
            None if !e.command.is_empty() => format!("{} timed out", e.name),
            _ => format!("{}: {}", e.name, first_line(&e.output_tail)),
        })
        .collect();
    let secret = evidence
        .iter()
        .any(|e| !e.passed && e.name == proof::SECRETS_GATE);
    let missing = evidence.iter().find(|e| {
        !e.passed
            && !e.command.is_empty()
            && failure::check_command_missing(&e.command, e.exit_code, &e.output_tail)
    });
    let kind = match (secret, missing) {
        (true, _) => FailureKind::SecretInDiff,
        (false, Some(e)) => FailureKind::CheckCommandMissing {
            check: e.name.clone(),
            command: e.command.clone(),
        },
        (false, None) => FailureKind::Other,
    };
    Refusal {
        status: AttemptStatus::Failed,
        reason: format!("verification failed: {}", failed.join("; ")),
        evidence,
        kind,
    }
}

/// The first non-empty line of a message (at most 300 characters, ` …` when more lines
/// followed), for transition reasons.
pub fn first_line(text: &str) -> String {
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let mut out: String = line.trim().chars().take(300).collect();
    if text.lines().filter(|l| !l.trim().is_empty()).count() > 1 {
        out.push_str(" …");
    }
    out
}
