//! The retention policy the daemon applies every `retention.every` (issue 24, a daemon
//! that runs for weeks; `config::retention` for the settings and their defaults):
//!
//! - **Workspaces** of a task that ended LANDED, BLOCKED or CANCELLED more than
//!   `retention.workspaces` ago (24h): each attempt's clone with its check checkouts
//!   (`N.check-K`) and the orchestrator's `N.land.git`, then every note the task left in
//!   the store (`store::retention`: per task `chain:`, `giveups:`, `agents_refused:`,
//!   `quota_chain:`, `quota_fallback:`, `cancel_request:`; per attempt `workspace:`,
//!   `commit:`, `handling:`, `strikes:`, `quota_handoff:`), found by their keys, so a task
//!   BLOCKED before it was routed (no `chain:`) loses its notes too. Its history rows stay
//!   (generation links, `block_reported:`, `released:`, the action log). Which workspaces may go is `cleanup`'s own plan
//!   ([`cleanup::plan`]), fed only those tasks, and they are removed by its code
//!   ([`cleanup::remove_workspaces`]): inside `workspace_root` only, never a live attempt's.
//! - **Events** of attempts that ended more than `retention.events` ago (30 days), and
//!   **transcript** files last written that long ago. The attempt rows (results,
//!   evidence, cost), transitions and landings stay: `status` keeps the history.
//! - Then `queue.db` gives the free pages those deletions left back to the filesystem
//!   (`Store::reclaim_space`; why incremental vacuum and not `VACUUM` is in
//!   `store::retention`).
//! - Then it **measures** the disk the home uses (workspaces, mirrors, transcripts,
//!   queue) and stores the figure for `status`; `doctor` measures it live.
//!
//! What is never removed, and why:
//! - FAILED tasks (waiting for a retry, or parked on a usage limit): `quota_handoff:
//!   continue` carries the limited attempt's workspace into the next one, and a resumed
//!   attempt needs its own. CLAIMED…VERIFYING tasks are live.
//! - A BLOCKED task's workspace lives out the same grace, to be looked at: `retry` makes a
//!   new generation with a fresh clone, so nothing later reads the old one.
//! - A landed task's pull request may get shepherd follow-ups for weeks; each is a task of
//!   its own on a fresh clone of the PR branch, so the landed attempt's clone is not needed.
//! - Mirrors: shared by every task of a repository, kept small by `git gc` (issue 23).
//! - Workspaces no attempt recorded: `cleanup --all` decides those, with no daemon running.
//!
//! Every decision takes `now` from the caller (the orchestrator's clock).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::cleanup::{self, CleanupError, Facts, Report};
use crate::config::Config;
use crate::orchestrator::daemon::{Upkeep, UpkeepRound};
use crate::orchestrator::Orchestrator;
use crate::store::{DiskUsage, Reclaimed, Store};
use crate::workspace::WorkspaceManager;

/// Finished tasks (or attempts) handled per store query.
const BATCH: usize = 500;

/// What one sweep did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sweep {
    pub workspaces_removed: usize,
    pub bytes_freed: u64,
    /// Tasks whose per-attempt notes were removed, and how many rows went.
    pub tasks_forgotten: usize,
    pub notes_removed: usize,
    /// Attempts whose events were removed, and how many events went.
    pub attempts_pruned: usize,
    pub events_removed: usize,
    pub transcripts_removed: usize,
    /// The free pages `queue.db` gave back (`store::retention`, SQLite).
    pub reclaimed: Reclaimed,
    /// Removals that failed (retried at the next sweep).
    pub errors: Vec<String>,
    pub disk: DiskUsage,
}

fn ago(now: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    now - chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

/// Applies `config`'s retention policy at `now` and measures the disk. Blocking (disk and
/// store): the daemon runs it on a blocking thread.
pub fn sweep(store: &Store, config: &Config, now: DateTime<Utc>) -> Result<Sweep, CleanupError> {
    let settings = config.retention();
    let workspaces = WorkspaceManager::new(config.workspace_root(), config.mirror_root());
    let mut report = Report::default();
    let (mut tasks_forgotten, mut notes_removed) = (0, 0);
    if let Some(grace) = settings.workspaces {
        (tasks_forgotten, notes_removed) =
            finished_workspaces(store, config, &workspaces, ago(now, grace), &mut report)?;
    }
    let (mut attempts_pruned, mut events_removed, mut transcripts_removed) = (0, 0, 0);
    if let Some(keep) = settings.events {
        let cutoff = ago(now, keep);
        loop {
            let batch = store.attempts_with_events_before(cutoff, BATCH)?;
            for (task, attempt) in &batch {
                events_removed += store.delete_attempt_events(task, *attempt)?;
                attempts_pruned += 1;
            }
            if batch.len() < BATCH {
                break;
            }
        }
        transcripts_removed = old_transcripts(&config.transcripts_dir(), cutoff, &mut report);
    }
    // What was deleted leaves free pages in the file: give them back (before measuring).
    let reclaimed = store.reclaim_space(crate::workspace::disk::free_bytes(&config.db_path()))?;
    let disk = measure(config, now);
    store.note_disk_usage(&disk)?;
    Ok(Sweep {
        workspaces_removed: report.workspaces.len(),
        bytes_freed: report.bytes_freed,
        tasks_forgotten,
        notes_removed,
        attempts_pruned,
        events_removed,
        transcripts_removed,
        reclaimed,
        errors: report.errors,
        disk,
    })
}

/// The workspaces and notes of tasks that ended before `cutoff`; returns (tasks, notes)
/// forgotten. A task whose workspace could not be removed keeps its notes, so the next
/// sweep tries again.
fn finished_workspaces(
    store: &Store,
    config: &Config,
    workspaces: &WorkspaceManager,
    cutoff: DateTime<Utc>,
    report: &mut Report,
) -> Result<(usize, usize), CleanupError> {
    let resolve = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let (mut tasks, mut notes) = (0, 0);
    loop {
        let ended = store.ended_tasks_with_notes(cutoff, BATCH)?;
        let mut facts = Facts {
            home_label: crate::runtime::home_label(config.home()),
            workspace_root: resolve(config.workspace_root()),
            mirror_root: resolve(config.mirror_root()),
            tasks: Vec::new(),
            containers: Vec::new(),
            networks: Vec::new(),
            workspace_dirs: Vec::new(),
            locks: Vec::new(),
            // Never `cleanup --all`'s reach: a daemon is (or may be) running.
            daemon_running: true,
        };
        for t in &ended {
            facts
                .tasks
                .push(cleanup::task_fact(store, t.id.clone(), t.state)?);
        }
        let plan = cleanup::plan(&facts, false);
        let mut failed: Vec<String> = Vec::new();
        for w in plan.workspaces {
            let task = w.task.clone();
            let mut one = Report::default();
            cleanup::remove_workspaces(vec![w], workspaces, false, &mut one);
            if !one.errors.is_empty() {
                tracing::warn!(errors = ?one.errors, "retention: cannot remove a finished workspace; retried at the next sweep");
                failed.extend(task);
            }
            report.bytes_freed += one.bytes_freed;
            report.workspaces.extend(one.workspaces);
            report.errors.extend(one.errors);
        }
        let mut progress = false;
        for t in ended.iter().filter(|t| !failed.contains(&t.id)) {
            notes += store.forget_task_notes(&t.id)?;
            tasks += 1;
            progress = true;
        }
        if ended.len() < BATCH || !progress {
            break;
        }
    }
    Ok((tasks, notes))
}

/// Removes transcript files under `dir` (`<key>/<n>.ndjson`, `.stderr.log`) last written
/// before `cutoff`, and key directories left empty. Returns how many files went.
fn old_transcripts(dir: &Path, cutoff: DateTime<Utc>, report: &mut Report) -> usize {
    let cutoff: SystemTime = cutoff.into();
    let Ok(keys) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for key in keys.flatten() {
        if !key.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let Ok(files) = std::fs::read_dir(key.path()) else {
            continue;
        };
        for f in files.flatten() {
            let Ok(meta) = f.metadata() else { continue };
            let old = meta.is_file() && meta.modified().is_ok_and(|m| m < cutoff);
            if !old {
                continue;
            }
            match std::fs::remove_file(f.path()) {
                Ok(()) => removed += 1,
                Err(e) => report
                    .errors
                    .push(format!("transcript {}: {e}", f.path().display())),
            }
        }
        // Fails harmlessly while files remain.
        let _ = std::fs::remove_dir(key.path());
    }
    removed
}

/// The disk this home uses now.
pub fn measure(config: &Config, now: DateTime<Utc>) -> DiskUsage {
    let db = config.db_path();
    let queue = [
        db.clone(),
        PathBuf::from(format!("{}-wal", db.display())),
        PathBuf::from(format!("{}-shm", db.display())),
    ]
    .iter()
    .map(|p| crate::workspace::disk_usage(p))
    .sum();
    DiskUsage {
        workspaces: crate::workspace::disk_usage(config.workspace_root()),
        mirrors: crate::workspace::disk_usage(config.mirror_root()),
        transcripts: crate::workspace::disk_usage(&config.transcripts_dir()),
        queue,
        measured_at: now,
    }
}

/// One line for people: `workspaces 1.2 GiB · mirrors 310 MiB · transcripts 12 MiB ·
/// queue 8.0 MiB`.
pub fn disk_line(d: &DiskUsage) -> String {
    use super::report::human_bytes;
    format!(
        "workspaces {} · mirrors {} · transcripts {} · queue {}",
        human_bytes(d.workspaces),
        human_bytes(d.mirrors),
        human_bytes(d.transcripts),
        human_bytes(d.queue)
    )
}

/// The daemon's housekeeping round: [`sweep`] at the orchestrator's clock, on a blocking
/// thread with its own store handle, logged. Run every `every`.
pub fn upkeep(every: Duration) -> Upkeep {
    let round: UpkeepRound = Arc::new(|orch: Arc<Orchestrator>| {
        Box::pin(async move {
            let now = orch.now();
            let config = orch.config.clone();
            let db = orch.store.clone();
            let swept = tokio::task::spawn_blocking(move || {
                let store = db.open()?;
                sweep(&store, &config, now)
            })
            .await;
            match swept {
                Ok(Ok(s)) => {
                    let removed = s.workspaces_removed + s.attempts_pruned + s.transcripts_removed;
                    if removed > 0 || !s.errors.is_empty() {
                        tracing::info!(
                            workspaces = s.workspaces_removed,
                            freed = s.bytes_freed,
                            tasks_forgotten = s.tasks_forgotten,
                            attempts_pruned = s.attempts_pruned,
                            events = s.events_removed,
                            transcripts = s.transcripts_removed,
                            errors = s.errors.len(),
                            "retention: {}",
                            disk_line(&s.disk)
                        );
                    }
                    for e in &s.errors {
                        tracing::warn!(error = %e, "retention: not removed; retried at the next sweep");
                    }
                    if s.reclaimed.pages > 0 {
                        tracing::info!(
                            pages = s.reclaimed.pages,
                            before = s.reclaimed.file_before,
                            after = s.reclaimed.file_after,
                            converted = s.reclaimed.converted,
                            "retention: the queue gave its free pages back"
                        );
                    }
                    if let Some(why) = &s.reclaimed.not_converted {
                        tracing::warn!("retention: {why}");
                    }
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "retention sweep failed"),
                Err(e) => tracing::warn!(error = %e, "retention sweep panicked"),
            }
        })
    });
    Upkeep { every, round }
}
