//! The IO that reads `cleanup`'s facts: tasks and attempts from the store, this home's
//! containers (by the `polyphony.home` label), directories under `workspace_root` and lock
//! files. Reads only; removes nothing.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use super::*;
use crate::runtime::{RunState, WorkerRuntime, LABEL_ATTEMPT, LABEL_TASK};
use crate::store::Store;

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CleanupError + '_ {
    move |source| CleanupError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// `path` resolved when it exists, else as given.
fn resolve(path: &Path) -> (PathBuf, bool) {
    match path.canonicalize() {
        Ok(p) => (p, true),
        Err(_) => (path.to_path_buf(), false),
    }
}

/// Every task with its recorded attempt workspaces.
pub fn task_facts(store: &Store) -> Result<Vec<TaskFact>, CleanupError> {
    let mut out = Vec::new();
    for task in store.list_tasks(None, None)? {
        out.push(task_fact(store, task.id, task.state)?);
    }
    Ok(out)
}

/// One task (`id`, in `state`) with its recorded attempt workspaces.
pub fn task_fact(store: &Store, id: String, state: TaskState) -> Result<TaskFact, CleanupError> {
    let attempts = store
        .attempts(&id)?
        .into_iter()
        .map(|a| {
            let (workspace, exists) = resolve(&a.workspace);
            AttemptFact {
                attempt: a.attempt,
                workspace,
                exists,
            }
        })
        .collect();
    Ok(TaskFact {
        id,
        state,
        attempts,
    })
}

/// Containers carrying `polyphony.home=<home_label>`, any state.
pub async fn container_facts(
    runtime: &dyn WorkerRuntime,
    home_label: &str,
) -> Result<Vec<ContainerFact>, CleanupError> {
    let filter = [(LABEL_HOME.to_string(), home_label.to_string())];
    let found = runtime.list_by_labels(&filter).await?;
    Ok(found
        .into_iter()
        .map(|c| ContainerFact {
            home: c.labels.get(LABEL_HOME).cloned(),
            task: c.labels.get(LABEL_TASK).cloned(),
            attempt: c.labels.get(LABEL_ATTEMPT).and_then(|a| a.parse().ok()),
            running: c.state == RunState::Running,
            id: c.id,
            name: c.name,
        })
        .collect())
}

/// This home's egress networks (label `polyphony.role=egress`), as container-like facts.
pub async fn network_facts(
    runtime: &dyn WorkerRuntime,
    home_label: &str,
) -> Result<Vec<ContainerFact>, CleanupError> {
    let filter = [
        (LABEL_HOME.to_string(), home_label.to_string()),
        (crate::runtime::LABEL_ROLE.to_string(), "egress".to_string()),
    ];
    let found = runtime.list_networks(&filter).await?;
    Ok(found
        .into_iter()
        .map(|n| ContainerFact {
            home: n.labels.get(LABEL_HOME).cloned(),
            task: n.labels.get(LABEL_TASK).cloned(),
            attempt: n.labels.get(LABEL_ATTEMPT).and_then(|a| a.parse().ok()),
            running: false,
            id: n.name.clone(),
            name: n.name,
        })
        .collect())
}

/// Attempt directories Polyphony made: real directories `{root}/{key}/{n}` (resolved, `n`
/// a number) whose task directory carries the marker (`workspace::marker`). Nothing else
/// below the root is ever a removal candidate, so a directory someone else put there
/// survives `cleanup --all`. Never follows symlinks. A missing root has none.
pub fn workspace_dirs(root: &Path) -> Result<Vec<PathBuf>, CleanupError> {
    let root = match root.canonicalize() {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err(root)(e)),
    };
    let mut out = Vec::new();
    for key_dir in real_dirs(&root)? {
        if !crate::workspace::marker::is_marked_key_dir(&key_dir) {
            continue;
        }
        out.extend(real_dirs(&key_dir)?.into_iter().filter(|d| {
            d.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        }));
    }
    out.sort();
    Ok(out)
}

fn real_dirs(dir: &Path) -> Result<Vec<PathBuf>, CleanupError> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        // `file_type` does not follow symlinks.
        if entry.file_type().map_err(io_err(&entry.path()))?.is_dir() {
            out.push(entry.path());
        }
    }
    Ok(out)
}

/// `daemon.lock` of the home and `*.lock` files directly under `mirror_root`, each with
/// whether a process holds it now.
pub fn lock_facts(home: &Path, mirror_root: &Path) -> Result<Vec<LockFact>, CleanupError> {
    let mut out = Vec::new();
    let daemon = home.join("daemon.lock");
    if daemon.is_file() {
        out.push(LockFact {
            held: crate::home::DaemonLock::is_held(home),
            path: daemon,
            kind: LockKind::Daemon,
        });
    }
    let entries = match std::fs::read_dir(mirror_root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(io_err(mirror_root)(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io_err(mirror_root))?;
        let path = entry.path();
        let is_file = entry.file_type().map_err(io_err(&path))?.is_file();
        if is_file && path.extension().is_some_and(|e| e == "lock") {
            out.push(LockFact {
                held: try_hold(&path).is_none(),
                path,
                kind: LockKind::Mirror,
            });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// The file locked exclusively by us, or `None` when another process holds it (or it
/// cannot be opened).
pub(super) fn try_hold(path: &Path) -> Option<File> {
    let file = OpenOptions::new().read(true).write(true).open(path).ok()?;
    file.try_lock().ok()?;
    Some(file)
}
