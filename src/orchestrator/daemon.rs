//! The supervisor loop (spec §2, DESIGN.md "Durability and recovery").
//!
//! One daemon per home (an OS lock on `daemon.lock`). On start it reconciles: containers
//! labelled for this home are re-attached (running or exited) or removed, and tasks
//! stranded mid-pipeline are resumed or sent back for an immediate retry. Then it polls
//! GitHub every `poll_interval`, wakes at once when `enqueue` pokes `daemon.sock` (and, on
//! a PostgreSQL store, when any process of the fleet notifies `polyphony_wake`), sleeps
//! until the next retry is due, and runs up to `max_concurrent_agents` attempts.
//!
//! Shutdown (issue 29: a restart loses nothing): the first signal stops claiming. Without
//! `--drain` the daemon then leaves at once and its running attempts keep running: their
//! containers stay, nothing is recorded as ended, and the next start re-attaches them
//! exactly as it does after a `kill -9` (every side effect is an intent recorded first, so
//! leaving between any two awaits is safe). With `--drain` running attempts finish first,
//! and a second signal stops them (containers killed, tasks scheduled to retry). Killing
//! one attempt is `polyphony cancel`'s job, not a restart's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::net::UnixListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use crate::domain::{AttemptStatus, RunResult, Task, TaskState};
use crate::runtime::{RunState, LABEL_ATTEMPT, LABEL_HOME, LABEL_ROLE, LABEL_TASK};
use crate::store::{AttemptRecord, Settlement, Store};

use super::pipeline::{describe, AttemptEnd, RunOptions};
use super::{Orchestrator, Progress};
use crate::home::DaemonLock;

/// Daemon knobs from the command line.
#[derive(Debug, Clone, Default)]
pub struct DaemonOptions {
    /// Let running attempts finish on the first signal.
    pub drain: bool,
    /// Exit once nothing is running, claimable or scheduled (demos, tests, cron use).
    pub exit_when_idle: bool,
    /// Housekeeping run at start and then periodically beside the attempts (issue 24:
    /// `ops::retention::upkeep`, which this layer cannot name).
    pub upkeep: Option<Upkeep>,
}

/// One round of housekeeping, given the orchestrator (its config, clock and home).
pub type UpkeepRound =
    Arc<dyn Fn(Arc<Orchestrator>) -> futures_util::future::BoxFuture<'static, ()> + Send + Sync>;

/// Housekeeping the daemon runs at start and then every `every`, on its own task: a slow
/// round never delays a claim. With `exit_when_idle` the daemon waits for the first round
/// before it leaves.
#[derive(Clone)]
pub struct Upkeep {
    pub every: Duration,
    pub round: UpkeepRound,
}

impl std::fmt::Debug for Upkeep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upkeep")
            .field("every", &self.every)
            .finish()
    }
}

/// The longest an idle daemon waits for its first housekeeping round before it exits.
const FIRST_UPKEEP_WAIT: Duration = Duration::from_secs(120);

/// What one daemon run did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct DaemonSummary {
    pub attempts: u64,
    pub landed: u64,
    pub blocked: u64,
    pub resumed: u64,
    /// Attempts left running for the next start to re-attach (a signal without `--drain`).
    pub left_running: u64,
}

/// The socket `enqueue` pokes to wake the daemon.
pub fn wake_socket(home: &Path) -> PathBuf {
    home.join("daemon.sock")
}

/// Wakes a running daemon on this home, if there is one (best effort).
pub fn wake(home: &Path) {
    let _ = std::os::unix::net::UnixStream::connect(wake_socket(home));
}

type Attempts = JoinSet<(String, anyhow::Result<AttemptEnd>)>;

/// Each running attempt's own stop switch, by task id: a person's cancel flips one, a
/// shutdown that stops attempts flips all.
type Stops = std::collections::HashMap<String, watch::Sender<bool>>;

/// The options of one attempt: `base` with a stop switch of its own, registered in `stops`.
fn attempt_opts(base: &RunOptions, stops: &mut Stops, task: &str) -> RunOptions {
    let (tx, rx) = watch::channel(false);
    stops.insert(task.to_string(), tx);
    RunOptions {
        cancel: rx,
        ..base.clone()
    }
}

fn stop_all(stops: &Stops) {
    for tx in stops.values() {
        let _ = tx.send(true);
    }
}

/// Runs the daemon until shutdown. `signals` counts SIGTERM/SIGINT received so far.
pub async fn run(
    orch: Arc<Orchestrator>,
    opts: DaemonOptions,
    progress: Arc<dyn Progress>,
    mut signals: watch::Receiver<u32>,
) -> anyhow::Result<DaemonSummary> {
    let home = orch.home().to_path_buf();
    crate::private::create_dir(&home)?;
    let _lock = DaemonLock::acquire(&home)?;
    let socket_path = wake_socket(&home);
    let _ = std::fs::remove_file(&socket_path);
    let listener = UnixListener::bind(&socket_path)
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", socket_path.display()))?;
    let _socket_guard = RemoveOnDrop(socket_path.clone());
    let store = orch.store.open()?;
    // Issue 27: on PostgreSQL another machine's enqueue wakes this loop too.
    let fleet_wake = Arc::new(tokio::sync::Notify::new());
    listen_for_wakeups(&orch.store, &fleet_wake);
    // Never start work on a damaged queue (issue 12): the whole file, every start.
    store.ensure_sound_now()?;
    // The store answered: this daemon's leases start fresh (issue 27).
    orch.leases.renewed(orch.now());
    let (_never_tx, never_rx) = watch::channel(false);
    let run_opts = RunOptions {
        progress: progress.clone(),
        cancel: never_rx,
        cancel_means_retry: true,
    };
    let mut stops = Stops::new();
    let mut summary = DaemonSummary::default();
    let mut attempts: Attempts = JoinSet::new();
    let max = orch.config.max_concurrent_agents().max(1) as usize;
    let slots = Arc::new(Semaphore::new(max));
    // The console shows each machine's slots (issue 29): this daemon says how many it runs.
    if let Err(e) = store.set_machine_slots(&orch.leases.owner.machine, max as u32, orch.now()) {
        tracing::warn!(error = %e, "cannot record this daemon's agent slots");
    }
    let now = orch.now();
    if let Err(e) = store.set_machine_alive(&orch.leases.owner.machine, orch.leases.lease, now) {
        tracing::warn!(error = %e, "cannot record this daemon's heartbeat");
    }

    reconcile(
        &orch,
        &store,
        &run_opts,
        &slots,
        &mut attempts,
        &mut stops,
        &mut summary,
    )
    .await?;
    tracing::info!(home = %home.display(), max_concurrent = max, owner = %orch.leases.owner, "daemon started");
    // Issue 27: every `store.heartbeat` the leases of this daemon's claims are renewed on a
    // connection of its own, so a slow poll never lets them lapse.
    let beating = AbortOnDrop(tokio::spawn(heartbeat(orch.clone())));
    // Deadlines hold even when a follower lost its container (see runtime::watchdog).
    let watchdog = {
        let runtime = orch.runtime.clone();
        let home_label = orch.home_label.clone();
        let clock = orch.clock.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(crate::runtime::watchdog::SWEEP_EVERY);
            loop {
                every.tick().await;
                if let Err(e) =
                    crate::runtime::watchdog::sweep(runtime.as_ref(), &home_label, clock()).await
                {
                    tracing::debug!(error = %e, "watchdog sweep failed");
                }
            }
        })
    };
    let _abort_watchdog = AbortOnDrop(watchdog);
    // Retention (issue 24): at start, then every `every`; `rounds` counts finished rounds.
    let (rounds_tx, rounds) = watch::channel(0u64);
    let _abort_upkeep = opts.upkeep.clone().map(|upkeep| {
        let orch = orch.clone();
        AbortOnDrop(tokio::spawn(async move {
            loop {
                (upkeep.round)(orch.clone()).await;
                rounds_tx.send_modify(|n| *n += 1);
                tokio::time::sleep(upkeep.every).await;
            }
        }))
    });

    let poll_interval = orch.config.poll_interval();
    let mut next_poll = tokio::time::Instant::now();
    let mut next_beat = tokio::time::Instant::now() + orch.leases.heartbeat;
    let mut stopping = false;
    loop {
        let signal_count = *signals.borrow();
        if crate::store::damaged() && !stopping {
            // A damaged database is never a task failure (issue 12): claim nothing more,
            // stop the running attempts (they record nothing) and exit 2 below.
            tracing::error!(db = %orch.db_path().display(), "the queue database is damaged: no new claims; stopping running attempts");
            stopping = true;
            stop_all(&stops);
        }
        if signal_count >= 1 && !stopping {
            stopping = true;
            tracing::info!(
                running = attempts.len(),
                "shutdown requested: no new claims{}",
                if opts.drain {
                    "; running attempts finish (signal again to stop them)"
                } else {
                    "; running attempts keep running and the next start re-attaches them"
                }
            );
            if !opts.drain {
                // Leave between two awaits, as a kill -9 would anywhere: the containers
                // run on and the next start's reconcile picks each attempt up.
                summary.left_running += attempts.len() as u64;
                attempts.abort_all();
            }
        }
        if stopping && opts.drain && signal_count >= 2 {
            stop_all(&stops);
        }
        if !crate::store::damaged() {
            // A person's cancels (issue 29), after every wake: `polyphony cancel` and the
            // API record them and poke the socket.
            if let Err(e) = apply_cancels(&orch, &store, &stops).await {
                tracing::warn!(error = %format!("{e:#}"), "cannot apply the cancel requests");
            }
        }
        if stopping && attempts.is_empty() {
            break;
        }
        if !stopping {
            if tokio::time::Instant::now() >= next_poll {
                poll_sources(&orch, &store).await;
                // The pull requests this home opened, until merged or closed (issue 15).
                crate::orchestrator::shepherd::watch::round(&orch, &store).await;
                next_poll = tokio::time::Instant::now() + poll_interval;
            }
            if tokio::time::Instant::now() >= next_beat {
                // Another machine's expired leases (a lost machine), as they expire.
                if let Err(e) = adopt_expired(
                    &orch,
                    &store,
                    &run_opts,
                    &mut attempts,
                    &mut stops,
                    &mut summary,
                )
                .await
                {
                    tracing::warn!(error = %format!("{e:#}"), "cannot take over expired leases");
                }
                next_beat = tokio::time::Instant::now() + orch.leases.heartbeat;
            }
            // Issue 24: a signal met during those awaits stops claiming now, not after this
            // round's claims (a drain once ran a retry claimed after its signal).
            if *signals.borrow() > signal_count {
                continue;
            }
            let dispatched = dispatch(
                &orch,
                &store,
                &run_opts,
                &slots,
                &mut attempts,
                &mut stops,
                &mut summary,
            )
            .and_then(|()| Ok(opts.exit_when_idle && attempts.is_empty() && is_idle(&store)?));
            match dispatched {
                Ok(true) => {
                    if opts.upkeep.is_some() && *rounds.borrow() == 0 {
                        let mut first = rounds.clone();
                        let _ = tokio::time::timeout(FIRST_UPKEEP_WAIT, first.changed()).await;
                    }
                    tracing::info!("nothing left to run: exiting");
                    break;
                }
                Ok(false) => {}
                Err(_) if crate::store::damaged() => continue,
                Err(e) => return Err(e),
            }
        }
        let next_retry = match store.next_retry_at() {
            // Stopping: only the attempts and the signals are waited for now.
            Err(_) if crate::store::damaged() => None,
            other => other?,
        };
        let retry_due = next_retry.map(|at| {
            let wait = (at - orch.now()).to_std().unwrap_or(Duration::ZERO);
            tokio::time::Instant::now() + wait + Duration::from_millis(5)
        });
        let wake_at = match retry_due {
            Some(due) if due < next_poll => due,
            _ => next_poll,
        }
        .min(next_beat);
        tokio::select! {
            _ = tokio::time::sleep_until(wake_at), if !stopping => {}
            accepted = listener.accept(), if !stopping => {
                if let Err(e) = accepted {
                    tracing::warn!(error = %e, "wake socket");
                }
            }
            _ = fleet_wake.notified(), if !stopping => {}
            Some(joined) = attempts.join_next(), if !attempts.is_empty() => {
                // Only ended attempts' switches go (a retry at once may run already).
                stops.retain(|_, stop| !stop.is_closed());
                record_end(joined, &mut summary);
            }
            changed = signals.changed() => {
                if changed.is_err() {
                    // The signal source is gone: treat as a stop request.
                    stopping = true;
                }
            }
        }
    }
    while let Some(joined) = attempts.join_next().await {
        record_end(joined, &mut summary);
    }
    if !crate::store::damaged() {
        // Issue 27: a clean stop shows at once. The heartbeat ends first (no beat after
        // this writes the record back), then the machine's alive record goes, so `status`,
        // the API and the console stop listing it now, not when its lease would run out.
        // Its claims stay: an attempt left running is re-attached by the next start here,
        // and a machine that does not come back has them taken over as they expire.
        beating.stop().await;
        if let Err(e) = store.clear_machine_alive(&orch.leases.owner.machine) {
            tracing::warn!(error = %e, "cannot drop this machine's heartbeat record");
        }
    }
    if crate::store::damaged() {
        return Err(crate::store::DatabaseDamaged {
            path: orch.db_path(),
            detail: "met while the daemon ran; it stopped its attempts and exited".into(),
        }
        .into());
    }
    tracing::info!(?summary, "daemon stopped");
    Ok(summary)
}

/// Issue 27: on a PostgreSQL store a thread of its own listens for the fleet's wake-ups
/// (`store::wake`: a task inserted or a cancel requested by any process on any machine)
/// and wakes the daemon's loop through `wake`. It reconnects after an error (the poll
/// covers the gap) and ends soon after the loop drops `wake`. SQLite: nothing (its
/// daemon wakes by the home's socket).
fn listen_for_wakeups(store: &crate::store::StoreHandle, wake: &Arc<tokio::sync::Notify>) {
    /// How often the thread looks whether the daemon is gone.
    const CHECK: Duration = Duration::from_secs(1);
    if store.sqlite_path().is_some() {
        return;
    }
    let (store, wake) = (store.clone(), Arc::downgrade(wake));
    let spawned = std::thread::Builder::new()
        .name("polyphony-wake".into())
        .spawn(move || {
            while wake.strong_count() > 0 {
                match store.wake_listener() {
                    Ok(Some(mut listener)) => loop {
                        match listener.wait(CHECK) {
                            Ok(true) => match wake.upgrade() {
                                Some(w) => w.notify_one(),
                                None => return,
                            },
                            Ok(false) if wake.strong_count() == 0 => return,
                            Ok(false) => {}
                            Err(e) => {
                                tracing::warn!(error = %e, "lost the fleet's wake-ups; reconnecting (the poll still runs)");
                                break;
                            }
                        }
                    },
                    Ok(None) => return,
                    Err(e) => tracing::warn!(error = %e, "cannot listen for the fleet's wake-ups (the poll still runs)"),
                }
                for _ in 0..5 {
                    if wake.strong_count() == 0 {
                        return;
                    }
                    std::thread::sleep(CHECK);
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the wake-up listener (the poll still runs)");
    }
}

/// Stops a background task when the daemon loop returns, however it returns.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl AbortOnDrop {
    /// Aborts the task and waits until it no longer runs (an abort takes effect only at
    /// the task's next await).
    async fn stop(mut self) {
        self.0.abort();
        let _ = (&mut self.0).await;
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Hands the allocator's free pages back to the system (issue 24). The daemon keeps
/// nothing per task (a heap profile of 300 attempts stays flat at about 2 MiB), but each
/// attempt's work runs on tokio's blocking threads, which come and go, and glibc leaves
/// the freed memory of their arenas resident: without this RSS crept up about 4 KiB per
/// task. Called once per attempt that ends; costs well under a millisecond.
fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; no pointer is passed.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn record_end(
    joined: Result<(String, anyhow::Result<AttemptEnd>), tokio::task::JoinError>,
    summary: &mut DaemonSummary,
) {
    release_free_memory();
    match joined {
        Ok((task, Ok(end))) => {
            match &end {
                AttemptEnd::Landed { .. } => summary.landed += 1,
                AttemptEnd::Blocked { .. } => summary.blocked += 1,
                _ => {}
            }
            tracing::info!(task = %task, "{}", describe(&end));
        }
        Ok((task, Err(e))) => {
            tracing::error!(task = %task, error = %format!("{e:#}"), "attempt error")
        }
        Err(e) if e.is_cancelled() => {
            tracing::info!("attempt left running: the next start re-attaches it")
        }
        Err(e) => tracing::error!(error = %e, "attempt task panicked"),
    }
}

/// Nothing running, nothing claimable now or later.
fn is_idle(store: &Store) -> anyhow::Result<bool> {
    let counts = store.count_by_state()?;
    let busy = counts
        .iter()
        .any(|(state, n)| *n > 0 && (state.is_active() || *state == TaskState::Discovered));
    Ok(!busy && store.next_retry_at()?.is_none())
}

async fn poll_sources(orch: &Orchestrator, store: &Store) {
    for source in orch.sources.all() {
        let polled = source.poll_each().await;
        for (place, e) in polled.errors {
            tracing::warn!(source = source.name(), %place, error = %e, "cannot poll the source");
        }
        let mut new = 0;
        for task in polled.tasks {
            match store.insert_task(&task) {
                Ok(true) => new += 1,
                Ok(false) => {
                    match super::generation::reopen_if_relabelled(store, &task, orch.now()) {
                        Ok(reopened) => new += usize::from(reopened.is_some()),
                        Err(e) => {
                            tracing::warn!(task = %task.id, error = %e, "cannot retry a re-labelled issue")
                        }
                    }
                }
                Err(e) => tracing::warn!(task = %task.id, error = %e, "cannot record task"),
            }
        }
        if new > 0 {
            tracing::info!(new, source = source.name(), "new tasks");
        }
    }
}

fn dispatch(
    orch: &Arc<Orchestrator>,
    store: &Store,
    run_opts: &RunOptions,
    slots: &Arc<Semaphore>,
    attempts: &mut Attempts,
    stops: &mut Stops,
    summary: &mut DaemonSummary,
) -> anyhow::Result<()> {
    loop {
        let now = orch.now();
        if !orch.leases.may_start(now) {
            // Issue 27: leases not renewed lately (the store unreachable): no new work.
            if orch.leases.first_refusal() {
                tracing::warn!(
                    "this daemon could not renew its leases lately: claiming nothing until it does"
                );
            }
            return Ok(());
        }
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            return Ok(());
        };
        let leases = &orch.leases;
        let Some(task) = store.claim_next_owned(&leases.owner, leases.lease, now)? else {
            return Ok(());
        };
        run_opts
            .progress
            .state(&task.id, TaskState::Claimed, "claimed from the queue");
        summary.attempts += 1;
        let orch = orch.clone();
        let opts = attempt_opts(run_opts, stops, &task.id);
        attempts.spawn(async move {
            let _permit = permit;
            let id = task.id.clone();
            let end = orch.run_claimed(task, &opts).await;
            (id, end)
        });
    }
}

/// After a restart: re-attach or collect this home's containers, resume or retry
/// stranded tasks, remove leftovers.
async fn reconcile(
    orch: &Arc<Orchestrator>,
    store: &Store,
    run_opts: &RunOptions,
    slots: &Arc<Semaphore>,
    attempts: &mut Attempts,
    stops: &mut Stops,
    summary: &mut DaemonSummary,
) -> anyhow::Result<()> {
    let labels = vec![(LABEL_HOME.to_string(), orch.home_label.clone())];
    let containers = orch.runtime.list_by_labels(&labels).await?;
    let mut live: BTreeMap<(String, u32), (String, RunState)> = BTreeMap::new();
    let mut proxies: BTreeMap<(String, u32), String> = BTreeMap::new();
    let mut resumed: std::collections::BTreeSet<(String, u32)> = Default::default();
    for c in containers {
        let role = c.labels.get(LABEL_ROLE).map(String::as_str).unwrap_or("");
        let task = c.labels.get(LABEL_TASK).cloned().unwrap_or_default();
        let attempt: u32 = c
            .labels
            .get(LABEL_ATTEMPT)
            .and_then(|a| a.parse().ok())
            .unwrap_or(0);
        if role == "agent" {
            live.insert((task, attempt), (c.id.clone(), c.state));
        } else if role == "egress" {
            // Kept for a re-attached attempt (its agent still talks through it).
            proxies.insert((task, attempt), c.id.clone());
        } else {
            // A verification container's run is lost with the daemon: verification restarts.
            discard_container(orch, &c.id).await;
        }
    }
    // Issue 27: only what this daemon may reconcile (its machine's claims, unowned ones,
    // expired leases), each taken over first; another daemon's live claim is left alone.
    let leases = &orch.leases;
    let now = orch.now();
    for found in store.reconcilable(&leases.owner, now)? {
        let task = found.task.clone();
        let state = task.state;
        if !store.take_over(&task.id, &leases.owner, leases.lease, now)? {
            continue;
        }
        if found.expired {
            adopt(orch, store, found, run_opts, attempts, stops, summary).await?;
            continue;
        }
        {
            if let Some(request) = store.cancel_request(&task.id)? {
                // Cancelled while no one ran it (issue 29): nothing is resumed.
                live.remove(&(task.id.clone(), task.attempts));
                proxies.remove(&(task.id.clone(), task.attempts));
                cancel_here(orch, store, &task.id, &request).await?;
                continue;
            }
            let mut record = store.attempt(&task.id, task.attempts)?;
            let container = live.remove(&(task.id.clone(), task.attempts));
            // The attempt's container is re-attached: a started one is followed on, and one
            // a kill left created but never started (between `docker create` and the
            // record, or between the record and the start) is started by the re-attach and
            // run once, the attempt going on as if nothing happened (issue 29). Its id is
            // recorded first when the kill came before the record (the container carries
            // the attempt's labels).
            if let (Some(r), Some((id, RunState::Created))) = (&record, &container) {
                if r.container_id.is_none()
                    && r.status.is_none()
                    && matches!(state, TaskState::Running | TaskState::Provisioned)
                {
                    store.set_container(&task.id, r.attempt, id)?;
                    tracing::info!(task = %task.id, attempt = r.attempt, container = %id,
                        "found the attempt's container created and never started; it starts now");
                    record = store.attempt(&task.id, task.attempts)?;
                }
            }
            let resumable = match (&record, state) {
                (Some(r), TaskState::Running | TaskState::Provisioned) => {
                    container.is_some() && r.container_id.is_some() && r.status.is_none()
                }
                (Some(_), TaskState::Verifying) => true,
                _ => false,
            };
            match (resumable, record) {
                (true, Some(record)) => {
                    let Ok(permit) = slots.clone().try_acquire_owned() else {
                        // More in flight than slots: the rest retry normally.
                        interrupt(store, &task, state, Some(&record), orch.now())?;
                        if let Some((id, _)) = container {
                            discard_container(orch, &id).await;
                        }
                        continue;
                    };
                    summary.resumed += 1;
                    resumed.insert((task.id.clone(), task.attempts));
                    let orch = orch.clone();
                    let opts = attempt_opts(run_opts, stops, &task.id);
                    tracing::info!(task = %task.id, %state, "resuming after a restart");
                    attempts.spawn(async move {
                        let _permit = permit;
                        let id = task.id.clone();
                        let end = orch.resume(task, record, &opts).await;
                        (id, end)
                    });
                }
                (_, record) => {
                    if let Some((id, _)) = container {
                        discard_container(orch, &id).await;
                    }
                    interrupt(store, &task, state, record.as_ref(), orch.now())?;
                }
            }
        }
    }
    // Containers no live task owns (finished tasks, older attempts).
    for ((task, attempt), (id, _)) in live {
        tracing::info!(%task, attempt, "removing an orphan container");
        discard_container(orch, &id).await;
    }
    // Egress proxies and networks (issue 25) of every attempt not re-attached: a resumed
    // attempt removes its own when it ends.
    for ((task, attempt), id) in proxies {
        if !resumed.contains(&(task.clone(), attempt)) {
            tracing::info!(%task, attempt, "removing an orphan egress proxy");
            discard_container(orch, &id).await;
        }
    }
    let egress_labels = vec![
        (LABEL_HOME.to_string(), orch.home_label.clone()),
        (LABEL_ROLE.to_string(), "egress".to_string()),
    ];
    match orch.runtime.list_networks(&egress_labels).await {
        Ok(networks) => {
            for n in networks {
                let task = n.labels.get(LABEL_TASK).cloned().unwrap_or_default();
                let attempt: u32 = n
                    .labels
                    .get(LABEL_ATTEMPT)
                    .and_then(|a| a.parse().ok())
                    .unwrap_or(0);
                if !resumed.contains(&(task.clone(), attempt)) {
                    tracing::info!(%task, attempt, network = %n.name, "removing an orphan egress network");
                    if let Err(e) = orch.runtime.remove_network(&n.name).await {
                        tracing::warn!(network = %n.name, error = %e, "cannot remove an orphan egress network");
                    }
                }
            }
        }
        Err(e) => tracing::warn!(error = %e, "cannot list this home's networks"),
    }
    // The model-API gateway's directories (issue 25/26): a key a killed daemon wrote for a
    // proxy that never started, and the directories of attempts that are over. A resumed
    // attempt keeps its directories (its budget file), without the key.
    let kept: Vec<String> = resumed
        .iter()
        .map(|(task, attempt)| {
            format!(
                "{}-",
                crate::runtime::container_spec::container_name(task, *attempt, None)
            )
        })
        .collect();
    let swept = super::gateway::sweep_stale(orch.home(), |name| {
        kept.iter().any(|prefix| name.starts_with(prefix))
    });
    for path in swept {
        tracing::info!(path = %path.display(), "removed a leftover of the model-API gateway");
    }
    // Side effects at the source a kill left half-done (issue 19).
    if let Err(e) = super::intents::finish_pending(orch, store).await {
        tracing::warn!(error = %format!("{e:#}"), "cannot finish pending intents");
    }
    Ok(())
}

/// Renews this daemon's leases every `store.heartbeat` (issue 27). A failed renewal is
/// logged and retried at the next beat on a fresh connection; after a third of the lease
/// without one the daemon claims nothing and pushes nothing (`lease::Leases`).
async fn heartbeat(orch: Arc<Orchestrator>) {
    let leases = orch.leases.clone();
    let mut every = tokio::time::interval(leases.heartbeat);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut conn: Option<Store> = None;
    // Failed renewals since the last success: the first is a warning, the rest debug lines
    // (a full disk or a lost server fails every beat), the recovery says how many.
    let mut failed: u64 = 0;
    loop {
        every.tick().await;
        let now = orch.now();
        // The machine's own heartbeat too: the console shows every live machine, idle
        // ones included (issue 27).
        let beat = |store: &Store| {
            let n = store.renew_leases(&leases.owner, leases.lease, now)?;
            store.set_machine_alive(&leases.owner.machine, leases.lease, now)?;
            Ok(n)
        };
        let renewed = match conn.as_ref() {
            Some(store) => beat(store),
            None => orch.store.open().and_then(|store| {
                let n = beat(&store);
                conn = Some(store);
                n
            }),
        };
        match renewed {
            Ok(n) => {
                leases.renewed(now);
                if failed > 0 {
                    tracing::info!(failed, "this daemon's leases renewed again");
                    failed = 0;
                }
                tracing::trace!(leases = n, "leases renewed");
            }
            Err(e) => {
                conn = None;
                failed += 1;
                if failed == 1 {
                    tracing::warn!(error = %e, "cannot renew this daemon's leases (retried every heartbeat; said again once renewed)");
                } else {
                    tracing::debug!(error = %e, failed, "cannot renew this daemon's leases");
                }
            }
        }
    }
}

/// Takes over the claims of other machines whose leases expired (a lost machine) and goes
/// on with each ([`adopt`]); run every heartbeat while the daemon claims.
async fn adopt_expired(
    orch: &Arc<Orchestrator>,
    store: &Store,
    run_opts: &RunOptions,
    attempts: &mut Attempts,
    stops: &mut Stops,
    summary: &mut DaemonSummary,
) -> anyhow::Result<()> {
    let leases = &orch.leases;
    let now = orch.now();
    if !leases.may_start(now) {
        return Ok(());
    }
    for found in store.reconcilable(&leases.owner, now)? {
        // This machine's own claims were reconciled at start; the running ones are ours.
        if !found.expired || stops.contains_key(&found.task.id) {
            continue;
        }
        if store.take_over(&found.task.id, &leases.owner, leases.lease, now)? {
            adopt(orch, store, found, run_opts, attempts, stops, summary).await?;
        }
    }
    Ok(())
}

/// A task whose owner's lease expired, now this daemon's (issue 27): its attempt ran on a
/// lost machine (its container and workspace are there, never touched from here). A
/// cancel request settles it; an attempt with a record goes on through
/// [`Orchestrator::adopt_lost`] (a landing it pushed finished, else a new attempt at once);
/// a task stranded before its attempt existed is retried at once. None counts a failure.
async fn adopt(
    orch: &Arc<Orchestrator>,
    store: &Store,
    found: crate::store::Reconcilable,
    run_opts: &RunOptions,
    attempts: &mut Attempts,
    stops: &mut Stops,
    summary: &mut DaemonSummary,
) -> anyhow::Result<()> {
    let task = found.task;
    let lost = found
        .claim
        .as_ref()
        .map(|c| c.owner.clone())
        .unwrap_or_default();
    let why = format!(
        "the machine running it ({lost}) stopped renewing its lease; taken over by {}",
        orch.leases.owner
    );
    tracing::info!(task = %task.id, state = %task.state, %lost, "taking over an expired lease");
    if let Some(request) = store.cancel_request(&task.id)? {
        return cancel_here(orch, store, &task.id, &request).await;
    }
    match store.attempt(&task.id, task.attempts)? {
        Some(record) if record.status.is_none() || task.state == TaskState::Verifying => {
            summary.resumed += 1;
            let orch = orch.clone();
            let opts = attempt_opts(run_opts, stops, &task.id);
            attempts.spawn(async move {
                let id = task.id.clone();
                let end = orch.adopt_lost(task, record, why, &opts).await;
                (id, end)
            });
        }
        record => interrupt_because(store, &task, record.as_ref(), &why, orch.now())?,
    }
    Ok(())
}

/// Applies the pending cancel requests (`orchestrator::cancel`): a running attempt's stop
/// switch is flipped (its conclusion settles CANCELLED); a task no attempt runs for is
/// settled here; the request of a task that ended another way is dropped.
async fn apply_cancels(orch: &Orchestrator, store: &Store, stops: &Stops) -> anyhow::Result<()> {
    for (id, request) in store.cancel_requests()? {
        if let Some(stop) = stops.get(&id) {
            if !*stop.borrow() {
                tracing::info!(task = %id, by = %request.by, "cancel requested: stopping the attempt");
                let _ = stop.send(true);
            }
            continue;
        }
        match store.get_task(&id)? {
            None => store.clear_cancel_request(&id)?,
            Some(task) if task.state.is_terminal() => store.clear_cancel_request(&id)?,
            // Issue 27: an attempt another daemon of the fleet holds the lease of is that
            // daemon's to stop (its own cancel check sees the request).
            Some(task) if task.state.is_active() && held_elsewhere(orch, store, &id)? => {}
            // An attempt that is not this daemon's and no one else holds: stranded like
            // after a crash.
            Some(_) => cancel_here(orch, store, &id, &request).await?,
        }
    }
    Ok(())
}

/// Whether another daemon holds a live lease on `task_id` (issue 27), by the store's clock.
fn held_elsewhere(orch: &Orchestrator, store: &Store, task_id: &str) -> anyhow::Result<bool> {
    let Some(c) = store.claim_of(task_id)? else {
        return Ok(false);
    };
    Ok(c.owner != orch.leases.owner.key()
        && c.machine != orch.leases.owner.machine
        && c.lease_until >= store.lease_clock(orch.now())?)
}

/// Cancels a task no attempt of this process runs, and tells its source.
async fn cancel_here(
    orch: &Orchestrator,
    store: &Store,
    id: &str,
    request: &crate::store::CancelRequest,
) -> anyhow::Result<()> {
    let settled = super::cancel::cancel_unowned(
        store,
        &orch.sources,
        orch.runtime.as_ref(),
        &orch.home_label,
        id,
        request,
        orch.now(),
    )
    .await?;
    if let Some((task, _)) = settled {
        super::cancel::report(&orch.store, &orch.sources, &task, orch.now()).await?;
    }
    Ok(())
}

/// Kills and removes a container nothing will collect (best effort: it may be gone).
async fn discard_container(orch: &Orchestrator, id: &str) {
    let _ = orch.runtime.kill(id).await;
    let _ = orch.runtime.remove(id).await;
}

/// A task stranded before its container existed (or whose container is gone): FAILED
/// and due again at once, without counting a failure.
fn interrupt(
    store: &Store,
    task: &Task,
    state: TaskState,
    record: Option<&AttemptRecord>,
    now: DateTime<Utc>,
) -> anyhow::Result<()> {
    let reason = format!("interrupted: the daemon stopped while the task was {state}");
    interrupt_because(store, task, record, &reason, now)
}

/// [`interrupt`] for `reason`.
fn interrupt_because(
    store: &Store,
    task: &Task,
    record: Option<&AttemptRecord>,
    reason: &str,
    now: DateTime<Utc>,
) -> anyhow::Result<()> {
    let state = task.state;
    // FAILED and due at once in one transaction (issue 19): never FAILED with no retry time.
    let settlement = Settlement {
        failures: task.failures,
        next_attempt_at: Some(now),
        block: None,
    };
    // The attempt row of a run that will never be collected: closed in the same
    // transaction, or `status` shows it running forever and cleanup keeps its workspace
    // as live.
    match record.filter(|r| r.status.is_none()) {
        Some(r) => {
            let result = RunResult {
                duration_seconds: (now - r.started_at).num_milliseconds().max(0) as f64 / 1000.0,
                reason: Some(format!("{reason}; its container was gone")),
                events: store.event_count(&task.id, r.attempt)?,
                ..RunResult::new(&task.id, r.attempt, &r.agent, AttemptStatus::Crash)
            };
            let gate = super::proof::result_gate(AttemptStatus::Crash, result.reason.as_deref());
            store.settle_attempt_failure((&result, &[gate]), state, reason, &settlement, now)?;
        }
        None => {
            store.settle_failure(&task.id, state, reason, &settlement, now)?;
        }
    }
    tracing::info!(task = %task.id, "{reason}; retrying");
    Ok(())
}
