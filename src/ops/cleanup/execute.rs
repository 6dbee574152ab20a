//! Carries out a [`CleanupPlan`]: removes (or, in a dry run, measures) what it names.
//! Failures do not stop the rest; they are listed in the [`Report`].

use std::path::Path;

use serde::Serialize;

use super::gather::try_hold;
use super::*;
use crate::runtime::WorkerRuntime;
use crate::workspace::WorkspaceManager;

/// One thing removed (or, in a dry run, that would be).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Removed<T> {
    #[serde(flatten)]
    pub item: T,
    /// Bytes on disk freed (workspaces and lock files; containers report 0).
    pub bytes: u64,
}

/// What [`execute`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    pub dry_run: bool,
    pub containers: Vec<Removed<ContainerRemoval>>,
    /// Egress networks (issue 25).
    pub networks: Vec<Removed<ContainerRemoval>>,
    pub workspaces: Vec<Removed<WorkspaceRemoval>>,
    pub locks: Vec<Removed<LockRemoval>>,
    /// Egress proxy images of other polyphony binaries (`plan_images`); `bytes` is the
    /// image's size, freed with its last tag.
    pub images: Vec<Removed<ImageRemoval>>,
    pub kept: Vec<Kept>,
    pub bytes_freed: u64,
    /// Removals that failed, one line each with the fix where there is one.
    pub errors: Vec<String>,
}

/// Carries out `plan` (or, with `dry_run`, only measures it). Failures do not stop the
/// rest; they are listed in [`Report::errors`]. Containers are skipped when `runtime` is
/// `None` (the caller reports why).
pub async fn execute(
    plan: CleanupPlan,
    runtime: Option<&dyn WorkerRuntime>,
    workspaces: &WorkspaceManager,
    dry_run: bool,
) -> Report {
    let mut report = Report {
        dry_run,
        kept: plan.kept,
        ..Report::default()
    };
    for c in plan.containers {
        match runtime {
            _ if dry_run => report.containers.push(Removed { item: c, bytes: 0 }),
            Some(rt) => match rt.remove(&c.id).await {
                Ok(()) => report.containers.push(Removed { item: c, bytes: 0 }),
                Err(e) => report.errors.push(format!("container {}: {e}", c.name)),
            },
            None => report.errors.push(format!(
                "container {}: not removed, the Docker engine is unreachable",
                c.name
            )),
        }
    }
    for n in plan.networks {
        match runtime {
            _ if dry_run => report.networks.push(Removed { item: n, bytes: 0 }),
            Some(rt) => match rt.remove_network(&n.id).await {
                Ok(()) => report.networks.push(Removed { item: n, bytes: 0 }),
                Err(e) => report.errors.push(format!("network {}: {e}", n.name)),
            },
            None => report.errors.push(format!(
                "network {}: not removed, the Docker engine is unreachable",
                n.name
            )),
        }
    }
    remove_workspaces(plan.workspaces, workspaces, dry_run, &mut report);
    for l in plan.locks {
        match remove_lock(&l.path, dry_run) {
            Ok(Some(bytes)) => {
                report.bytes_freed += bytes;
                report.locks.push(Removed { item: l, bytes });
            }
            Ok(None) => report.kept.push(Kept {
                what: format!("lock {}", l.path.display()),
                why: "a process took it since it was checked".to_string(),
            }),
            Err(e) => report
                .errors
                .push(format!("lock {}: {e}", l.path.display())),
        }
    }
    report
}

/// Removes (or, with `dry_run`, measures) `removals` into `report`: each freed byte count,
/// or the error. Synchronous: the daemon's retention sweep calls it from a blocking thread.
pub fn remove_workspaces(
    removals: Vec<WorkspaceRemoval>,
    workspaces: &WorkspaceManager,
    dry_run: bool,
    report: &mut Report,
) {
    for w in removals {
        let result = if dry_run {
            Ok(crate::workspace::disk_usage(&w.path))
        } else {
            workspaces.remove(&w.path)
        };
        match result {
            Ok(bytes) => {
                report.bytes_freed += bytes;
                report.workspaces.push(Removed { item: w, bytes });
            }
            Err(e) => report
                .errors
                .push(format!("workspace {}: {e}", w.path.display())),
        }
    }
}

/// Removes a lock file while holding it, so a process that opened it earlier cannot take
/// it between our check and the unlink. `None` when someone holds it now.
fn remove_lock(path: &Path, dry_run: bool) -> std::io::Result<Option<u64>> {
    let Some(file) = try_hold(path) else {
        return Ok(None);
    };
    let bytes = file.metadata().map(|m| {
        use std::os::unix::fs::MetadataExt;
        m.blocks() * 512
    })?;
    if !dry_run {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    drop(file);
    Ok(Some(bytes))
}
