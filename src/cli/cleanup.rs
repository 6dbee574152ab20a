//! `polyphony cleanup`: gathers facts about this home (store, containers labelled for it,
//! workspace directories, lock files), plans with `cleanup::plan` and carries the plan out
//! (or, with `--dry-run`, only measures it). Exit 1 when any removal failed or Docker was
//! unreachable, so a script knows leftovers may remain.

use anyhow::Context as _;

use super::{print_json, Context, Outcome};
use crate::config::Config;
use crate::ops::cleanup::{self, Facts, Report};
use crate::ops::report::human_bytes;
use crate::runtime::{home_label, DockerRuntime, WorkerRuntime};
use crate::workspace::WorkspaceManager;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only print what would be removed.
    #[arg(long)]
    dry_run: bool,
    /// Also FAILED tasks' workspaces, directories no attempt recorded, and (with no daemon
    /// running) containers of RUNNING attempts.
    #[arg(long)]
    all: bool,
    /// Also remove the egress proxy images (`polyphony-egress:*`) of other polyphony
    /// binaries: one is left per upgrade. Images are shared by every home on the engine:
    /// one a container uses is kept, one an idle daemon of another binary uses is built
    /// again by its next attempt.
    #[arg(long)]
    images: bool,
    /// Print JSON: {dry_run, containers, networks, workspaces, locks, images, kept,
    /// bytes_freed, errors}.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args, ctx: &Context) -> anyhow::Result<Outcome> {
    let config = Config::load(&ctx.home)?;
    // Issue 24: what a SIGKILLed `backup` left (its process gone).
    if !args.dry_run {
        let stale = super::backup::remove_stale(&ctx.home);
        if stale > 0 {
            eprintln!("removed {stale} temporary file(s) of interrupted backups");
        }
    }
    let db = crate::store::StoreHandle::for_config(&config, |n| std::env::var(n).ok())?;
    let tasks = if db.exists() {
        cleanup::task_facts(&db.open()?)?
    } else {
        Vec::new()
    };
    let label = home_label(&ctx.home);
    let resolve = |p: &std::path::Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let (runtime, containers, networks, docker_error) = super::block_on(async {
        match DockerRuntime::connect().await {
            Ok(rt) => match cleanup::container_facts(&rt, &label).await {
                Ok(c) => match cleanup::network_facts(&rt, &label).await {
                    Ok(n) => (Some(rt), c, n, None),
                    Err(e) => (Some(rt), c, Vec::new(), Some(e.to_string())),
                },
                Err(e) => (None, Vec::new(), Vec::new(), Some(e.to_string())),
            },
            Err(e) => (None, Vec::new(), Vec::new(), Some(e.to_string())),
        }
    })?;
    let facts = Facts {
        home_label: label,
        workspace_root: resolve(config.workspace_root()),
        mirror_root: resolve(config.mirror_root()),
        tasks,
        containers,
        networks,
        workspace_dirs: cleanup::workspace_dirs(config.workspace_root())?,
        locks: cleanup::lock_facts(&ctx.home, config.mirror_root())?,
        daemon_running: crate::home::DaemonLock::is_held(&ctx.home),
    };
    let plan = cleanup::plan(&facts, args.all);
    let kept = cleanup::kept_attempt_prefixes(&facts, &plan);
    let workspaces = WorkspaceManager::new(config.workspace_root(), config.mirror_root());
    let mut report = super::block_on(cleanup::execute(
        plan,
        runtime.as_ref().map(|r| r as &dyn WorkerRuntime),
        &workspaces,
        args.dry_run,
    ))?;
    // Issue 25/26: a gateway key a killed daemon left before its proxy read it, and the
    // gateway directories of attempts that are over. Only with no daemon running (it may be
    // starting a proxy) and with the engine answering (so the live attempts are known).
    if !args.dry_run && !facts.daemon_running && docker_error.is_none() {
        let swept = crate::orchestrator::gateway::sweep_stale(&ctx.home, |name| {
            kept.iter().any(|prefix| name.starts_with(prefix))
        });
        if !swept.is_empty() {
            eprintln!(
                "removed {} leftover(s) of the model-API gateway under {}",
                swept.len(),
                ctx.home.join("run").join("gateway").display()
            );
        }
    }
    // Egress proxy images of other binaries (issue 25: one per upgrade would pile up).
    if let Some(rt) = runtime.as_ref().filter(|_| args.images) {
        super::block_on(remove_proxy_images(rt, args.dry_run, &mut report))?;
    }
    if let Some(e) = docker_error {
        report.errors.push(format!(
            "containers not checked: {e}; start the engine and run cleanup again"
        ));
    }
    if args.json {
        print_json(&report)?;
    } else {
        print!("{}", render(&report, facts.daemon_running));
    }
    if report.errors.is_empty() {
        Ok(Outcome::Success)
    } else {
        Err(anyhow::anyhow!(
            "{} cleanup step(s) failed",
            report.errors.len()
        ))
        .context("cleanup is incomplete; see the errors above")
    }
}

/// Plans with `cleanup::plan_images` against this binary's proxy image and removes (or,
/// in a dry run, lists) the rest into `report`.
async fn remove_proxy_images(rt: &DockerRuntime, dry_run: bool, report: &mut Report) {
    let images = match rt.proxy_images().await {
        Ok(images) => images,
        Err(e) => {
            report
                .errors
                .push(format!("egress proxy images not checked: {e}"));
            return;
        }
    };
    let current = crate::runtime::proxy_image::current_tag();
    let (removals, kept) = cleanup::plan_images(&images, current.as_deref());
    report.kept.extend(kept);
    for removal in removals {
        // Its size counted once, with the first of its tags.
        let last = !report.images.iter().any(|r| r.item.id == removal.id);
        let bytes = if last {
            images
                .iter()
                .find(|i| i.id == removal.id)
                .map_or(0, |i| i.bytes)
        } else {
            0
        };
        let removed = if dry_run {
            Ok(true)
        } else {
            rt.remove_image(&removal.reference).await
        };
        match removed {
            Ok(true) => {
                report.bytes_freed += bytes;
                report.images.push(cleanup::Removed { item: removal, bytes });
            }
            Ok(false) => report.kept.push(cleanup::Kept {
                what: format!("image {}", removal.reference),
                why: "a container still uses it (another home's attempt, or a leftover that home's cleanup removes)".to_string(),
            }),
            Err(e) => report
                .errors
                .push(format!("image {}: {e}", removal.reference)),
        }
    }
}

fn render(r: &Report, daemon_running: bool) -> String {
    let verb = if r.dry_run { "would remove" } else { "removed" };
    let mut out = String::new();
    for c in &r.containers {
        let running = if c.item.running { " (running)" } else { "" };
        out.push_str(&format!(
            "{verb} container {}{running} — {}\n",
            c.item.name, c.item.why
        ));
    }
    for n in &r.networks {
        out.push_str(&format!(
            "{verb} network {} — {}\n",
            n.item.name, n.item.why
        ));
    }
    for w in &r.workspaces {
        out.push_str(&format!(
            "{verb} workspace {} ({}) — {}\n",
            w.item.path.display(),
            human_bytes(w.bytes),
            w.item.why
        ));
    }
    for l in &r.locks {
        out.push_str(&format!("{verb} stale lock {}\n", l.item.path.display()));
    }
    for i in &r.images {
        out.push_str(&format!(
            "{verb} image {} ({}) — {}\n",
            i.item.reference,
            human_bytes(i.bytes),
            i.item.why
        ));
    }
    for k in &r.kept {
        out.push_str(&format!("kept {} — {}\n", k.what, k.why));
    }
    for e in &r.errors {
        out.push_str(&format!("error: {e}\n"));
    }
    let n =
        r.containers.len() + r.networks.len() + r.workspaces.len() + r.locks.len() + r.images.len();
    if n == 0 {
        out.push_str("nothing to clean up");
    } else {
        out.push_str(&format!(
            "{}: {} container(s), {} workspace(s), {} lock(s), {} image(s); {} {}",
            if r.dry_run { "dry run" } else { "done" },
            r.containers.len(),
            r.workspaces.len(),
            r.locks.len(),
            r.images.len(),
            human_bytes(r.bytes_freed),
            if r.dry_run { "would be freed" } else { "freed" }
        ));
    }
    out.push_str(if daemon_running {
        " (a daemon is running: its live attempts were left alone)\n"
    } else {
        "\n"
    });
    out
}
