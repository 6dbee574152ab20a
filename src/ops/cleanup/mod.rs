//! `polyphony cleanup`: what to remove (a pure plan over gathered facts) and the thin IO
//! that gathers those facts and carries the plan out (issue 7 item 6).
//!
//! Owns the decision of which containers, workspaces and lock files of ONE home are
//! leftovers. [`plan`] is pure (no disk, Docker, clock or store) and table-tested; the IO
//! half ([`task_facts`], [`container_facts`], [`workspace_dirs`], [`lock_facts`],
//! [`execute`]) only reads facts and removes what the plan names.
//!
//! Architecture Invariant: never touches another home's containers: facts are gathered with
//! the `polyphony.home` label filter and [`plan`] refuses any container whose label differs.
//! Architecture Invariant: never removes a path outside `workspace_root`: the plan refuses
//! such paths and `WorkspaceManager::remove` refuses them again after resolving symlinks.
//! Must not: remove a live attempt's container or workspace, or anything under `mirror_root`
//! except an unheld `*.lock` file.
//!
//! Layout: this file holds the facts, the plan and [`plan`]; `gather.rs` reads the facts,
//! `execute.rs` carries a plan out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::domain::TaskState;
use crate::runtime::{RuntimeError, LABEL_HOME};
use crate::store::StoreError;

mod execute;
mod gather;

pub use crate::runtime::proxy_image::ImageFact;
pub use execute::{execute, remove_workspaces, Removed, Report};
pub use gather::{
    container_facts, lock_facts, network_facts, task_fact, task_facts, workspace_dirs,
};

/// Failures while gathering facts. Removal failures are collected in the [`Report`].
#[derive(Debug, thiserror::Error)]
pub enum CleanupError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

// ---------------------------------------------------------------------------- facts

/// One attempt as the store recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptFact {
    pub attempt: u32,
    /// The recorded workspace, resolved when it exists.
    pub workspace: PathBuf,
    /// Whether the workspace directory exists now.
    pub exists: bool,
}

/// One task with its attempts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskFact {
    pub id: String,
    pub state: TaskState,
    pub attempts: Vec<AttemptFact>,
}

impl TaskFact {
    fn latest_attempt(&self) -> u32 {
        self.attempts.iter().map(|a| a.attempt).max().unwrap_or(0)
    }
}

/// One container carrying this home's label (as listed by the engine).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerFact {
    pub id: String,
    pub name: String,
    /// The `polyphony.home` label.
    pub home: Option<String>,
    pub task: Option<String>,
    pub attempt: Option<u32>,
    pub running: bool,
}

/// Which lock a lock file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LockKind {
    /// `$POLYPHONY_HOME/daemon.lock`.
    Daemon,
    /// `<mirror_root>/<mirror>.lock`.
    Mirror,
}

/// One lock file and whether some process holds it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockFact {
    pub path: PathBuf,
    pub kind: LockKind,
    pub held: bool,
}

/// Everything [`plan`] decides on. Paths are resolved (canonical) where they exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// This home's `polyphony.home` label value.
    pub home_label: String,
    pub workspace_root: PathBuf,
    pub mirror_root: PathBuf,
    pub tasks: Vec<TaskFact>,
    pub containers: Vec<ContainerFact>,
    /// This home's per-attempt egress networks (issue 25), as container-like facts: `id`
    /// and `name` are the network's name; kept exactly while their attempt is.
    pub networks: Vec<ContainerFact>,
    /// Attempt directories `{key}/{n}` Polyphony made (marked task directory), real
    /// directories only: the only unrecorded paths cleanup may remove.
    pub workspace_dirs: Vec<PathBuf>,
    pub locks: Vec<LockFact>,
    pub daemon_running: bool,
}

// ---------------------------------------------------------------------------- plan

/// A container to remove and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContainerRemoval {
    pub id: String,
    pub name: String,
    pub task: Option<String>,
    pub attempt: Option<u32>,
    pub running: bool,
    pub why: String,
}

/// A workspace directory to remove and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkspaceRemoval {
    pub path: PathBuf,
    /// `None` for an orphan directory no attempt recorded.
    pub task: Option<String>,
    pub attempt: Option<u32>,
    pub why: String,
}

/// A lock file to remove.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LockRemoval {
    pub path: PathBuf,
    pub kind: LockKind,
}

/// Something left alone on purpose, with the reason (shown so nothing is silently kept).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Kept {
    pub what: String,
    pub why: String,
}

/// What cleanup removes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CleanupPlan {
    pub containers: Vec<ContainerRemoval>,
    /// Egress networks (issue 25), removed after the containers on them.
    pub networks: Vec<ContainerRemoval>,
    pub workspaces: Vec<WorkspaceRemoval>,
    pub locks: Vec<LockRemoval>,
    pub kept: Vec<Kept>,
}

// Only the tests ask whether a plan removes nothing; the verb prints what it did.
#[cfg(test)]
impl CleanupPlan {
    fn is_empty(&self) -> bool {
        self.containers.is_empty()
            && self.networks.is_empty()
            && self.workspaces.is_empty()
            && self.locks.is_empty()
    }
}

/// Decides what to remove. Pure.
///
/// Containers: one is kept only while an attempt owns it — with a daemon holding the lock,
/// the latest attempt of a task in CLAIMED…VERIFYING; with no daemon, the latest attempt of
/// a RUNNING task (recovery re-attaches to it), and with `all` not even that.
/// Workspaces: those recorded for LANDED, BLOCKED and CANCELLED tasks; with `all` also FAILED tasks'
/// and, when no daemon runs (it may be preparing one), marked attempt directories
/// no attempt recorded ([`workspace_dirs`] only lists those Polyphony made).
/// Locks: unheld `daemon.lock`; unheld mirror locks when no daemon runs.
pub fn plan(facts: &Facts, all: bool) -> CleanupPlan {
    let mut out = CleanupPlan::default();
    let (containers, kept) = plan_owned(facts, &facts.containers, "container", all);
    out.containers = containers;
    out.kept.extend(kept);
    let (networks, kept) = plan_owned(facts, &facts.networks, "network", all);
    out.networks = networks;
    out.kept.extend(kept);
    plan_workspaces(facts, all, &mut out);
    for lock in &facts.locks {
        let removable = !lock.held && (lock.kind == LockKind::Daemon || !facts.daemon_running);
        if removable {
            out.locks.push(LockRemoval {
                path: lock.path.clone(),
                kind: lock.kind,
            });
        }
    }
    out
}

/// An image to remove: by `reference` (a tag; the id of an untagged one) and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImageRemoval {
    pub reference: String,
    pub id: String,
    pub why: String,
}

/// Which proxy images to remove: every one but `current`'s (the image of the binary that
/// runs cleanup, which this home's attempts use). An image is shared by the homes of one
/// engine: one another home's daemon still uses is refused by the engine while a
/// container of it exists, and one removed under an idle daemon is built again by its
/// next attempt. Each of an image's tags is a removal (the engine deletes it with its
/// last). Pure.
pub fn plan_images(images: &[ImageFact], current: Option<&str>) -> (Vec<ImageRemoval>, Vec<Kept>) {
    let mut remove = Vec::new();
    let mut kept = Vec::new();
    for image in images {
        if image.is(current) {
            kept.push(Kept {
                what: format!("image {}", current.unwrap_or_default()),
                why: "the egress proxy image of this binary".to_string(),
            });
            continue;
        }
        if image.tags.is_empty() {
            remove.push(ImageRemoval {
                reference: image.id.clone(),
                id: image.id.clone(),
                why: "an egress proxy image left untagged by a rebuild".to_string(),
            });
        }
        for tag in &image.tags {
            remove.push(ImageRemoval {
                reference: tag.clone(),
                id: image.id.clone(),
                why: "the egress proxy image of another polyphony binary".to_string(),
            });
        }
    }
    (remove, kept)
}

/// Name prefixes (`polyphony-<key>-<attempt>-`) of the attempts whose containers `plan`
/// keeps: their directories under `<home>/run/gateway/` stay (issue 25/26). Pure.
pub fn kept_attempt_prefixes(facts: &Facts, plan: &CleanupPlan) -> Vec<String> {
    let removed: BTreeSet<&str> = plan.containers.iter().map(|c| c.id.as_str()).collect();
    let mut out: Vec<String> = facts
        .containers
        .iter()
        .filter(|c| !removed.contains(c.id.as_str()))
        .filter_map(|c| {
            let name = crate::runtime::container_spec::container_name(
                c.task.as_deref()?,
                c.attempt?,
                None,
            );
            Some(format!("{name}-"))
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Which of `items` (containers, or networks) to remove: the same ownership rule for both.
fn plan_owned(
    facts: &Facts,
    items: &[ContainerFact],
    noun: &str,
    all: bool,
) -> (Vec<ContainerRemoval>, Vec<Kept>) {
    let mut removals = Vec::new();
    let mut kept_items = Vec::new();
    let tasks: BTreeMap<&str, &TaskFact> = facts.tasks.iter().map(|t| (t.id.as_str(), t)).collect();
    for c in items {
        if c.home.as_deref() != Some(facts.home_label.as_str()) {
            kept_items.push(Kept {
                what: format!("{noun} {}", c.name),
                why: format!(
                    "labelled for another home ({LABEL_HOME}={})",
                    c.home.as_deref().unwrap_or("<none>")
                ),
            });
            continue;
        }
        let owner = c
            .task
            .as_deref()
            .and_then(|id| tasks.get(id).copied())
            .zip(c.attempt);
        let (keep, why) = match owner {
            None => (false, "no task in the store owns it".to_string()),
            Some((task, attempt)) => {
                let current = attempt >= task.latest_attempt();
                let live = if facts.daemon_running {
                    task.state.is_active()
                } else {
                    !all && task.state == TaskState::Running
                };
                if current && live {
                    let by = if facts.daemon_running {
                        "the running daemon"
                    } else {
                        "recovery (no daemon runs; --all removes it)"
                    };
                    (
                        true,
                        format!(
                            "attempt {attempt} of {} ({}) is live for {by}",
                            task.id, task.state
                        ),
                    )
                } else if !current {
                    (
                        false,
                        format!(
                            "attempt {attempt} of {} was superseded by attempt {}",
                            task.id,
                            task.latest_attempt()
                        ),
                    )
                } else {
                    (false, format!("task {} is {}", task.id, task.state))
                }
            }
        };
        if keep {
            kept_items.push(Kept {
                what: format!("{noun} {}", c.name),
                why,
            });
        } else {
            removals.push(ContainerRemoval {
                id: c.id.clone(),
                name: c.name.clone(),
                task: c.task.clone(),
                attempt: c.attempt,
                running: c.running,
                why,
            });
        }
    }
    (removals, kept_items)
}

/// `a` is `b`, or one contains the other.
fn related(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

fn plan_workspaces(facts: &Facts, all: bool, out: &mut CleanupPlan) {
    let root = &facts.workspace_root;
    let inside = |p: &Path| p != root && p.starts_with(root) && !related(p, &facts.mirror_root);
    for task in &facts.tasks {
        let removable = match task.state {
            TaskState::Landed | TaskState::Blocked | TaskState::Cancelled => true,
            TaskState::Failed => all,
            _ => false,
        };
        if !removable {
            continue;
        }
        for a in task.attempts.iter().filter(|a| a.exists) {
            if !inside(&a.workspace) {
                out.kept.push(Kept {
                    what: format!("workspace {}", a.workspace.display()),
                    why: format!(
                        "recorded for {} attempt {} but outside workspace_root {} (or overlapping mirror_root)",
                        task.id,
                        a.attempt,
                        root.display()
                    ),
                });
                continue;
            }
            out.workspaces.push(WorkspaceRemoval {
                path: a.workspace.clone(),
                task: Some(task.id.clone()),
                attempt: Some(a.attempt),
                why: format!("task {} is {}", task.id, task.state),
            });
        }
    }
    let recorded: Vec<&Path> = facts
        .tasks
        .iter()
        .flat_map(|t| t.attempts.iter().map(|a| a.workspace.as_path()))
        .collect();
    let orphans: BTreeSet<&Path> = facts
        .workspace_dirs
        .iter()
        .map(PathBuf::as_path)
        .filter(|d| inside(d) && !recorded.iter().any(|r| related(d, r)))
        .collect();
    // Only the outermost orphan: removing `root/k` takes `root/k/1` with it.
    let outermost: Vec<&Path> = orphans
        .iter()
        .copied()
        .filter(|d| !orphans.iter().any(|o| o != d && d.starts_with(o)))
        .collect();
    if outermost.is_empty() {
        return;
    }
    if !all || facts.daemon_running {
        let why = if all {
            "no attempt recorded it, but a daemon runs and may be preparing it"
        } else {
            "no attempt recorded it; --all removes it"
        };
        out.kept.extend(outermost.iter().map(|d| Kept {
            what: format!("workspace {}", d.display()),
            why: why.to_string(),
        }));
        return;
    }
    for d in outermost {
        out.workspaces.push(WorkspaceRemoval {
            path: d.to_path_buf(),
            task: None,
            attempt: None,
            why: "Polyphony made it (marked task directory) but no attempt recorded it".to_string(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_images_but_this_binarys_are_removed_each_by_its_tags_or_id() {
        let images = vec![
            ImageFact {
                id: "sha256:cur".into(),
                tags: vec!["polyphony-egress:aaaa".into()],
                bytes: 10,
            },
            ImageFact {
                id: "sha256:old".into(),
                tags: vec![
                    "polyphony-egress:bbbb".into(),
                    "polyphony-egress:cccc".into(),
                ],
                bytes: 20,
            },
            ImageFact {
                id: "sha256:untagged".into(),
                tags: vec![],
                bytes: 30,
            },
        ];
        let (remove, kept) = plan_images(&images, Some("polyphony-egress:aaaa"));
        let refs: Vec<&str> = remove.iter().map(|r| r.reference.as_str()).collect();
        assert_eq!(
            refs,
            [
                "polyphony-egress:bbbb",
                "polyphony-egress:cccc",
                "sha256:untagged"
            ]
        );
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].what, "image polyphony-egress:aaaa");
        // No binary to compare with: every one goes.
        assert_eq!(plan_images(&images, None).0.len(), 4);
    }

    const HOME: &str = "abc123";

    fn task(id: &str, state: TaskState, attempts: &[u32]) -> TaskFact {
        TaskFact {
            id: id.into(),
            state,
            attempts: attempts
                .iter()
                .map(|&n| AttemptFact {
                    attempt: n,
                    workspace: PathBuf::from(format!("/ws/{id}/{n}")),
                    exists: true,
                })
                .collect(),
        }
    }

    fn container(task: &str, attempt: u32) -> ContainerFact {
        ContainerFact {
            id: format!("id-{task}-{attempt}"),
            name: format!("polyphony-{task}-{attempt}"),
            home: Some(HOME.into()),
            task: Some(task.into()),
            attempt: Some(attempt),
            running: true,
        }
    }

    fn facts(tasks: Vec<TaskFact>, containers: Vec<ContainerFact>, daemon: bool) -> Facts {
        Facts {
            home_label: HOME.into(),
            workspace_root: "/ws".into(),
            mirror_root: "/mirrors".into(),
            tasks,
            containers,
            networks: Vec::new(),
            workspace_dirs: Vec::new(),
            locks: Vec::new(),
            daemon_running: daemon,
        }
    }

    /// Names of removed containers and workspaces, for compact expectations.
    fn removed(p: &CleanupPlan) -> (Vec<String>, Vec<String>) {
        (
            p.containers.iter().map(|c| c.name.clone()).collect(),
            p.workspaces
                .iter()
                .map(|w| w.path.display().to_string())
                .collect(),
        )
    }

    fn check(facts: &Facts, all: bool, containers: &[&str], workspaces: &[&str]) {
        let p = plan(facts, all);
        let (c, w) = removed(&p);
        assert_eq!(c, containers, "containers; plan: {p:#?}");
        assert_eq!(w, workspaces, "workspaces; plan: {p:#?}");
    }

    use TaskState::*;

    #[test]
    fn containers_by_state_and_daemon() {
        // (state, daemon running, all, removed?)
        let cases = [
            (Running, true, false, false),
            (Running, true, true, false),
            (Verifying, true, false, false),
            (Claimed, true, false, false),
            (Running, false, false, false),
            (Running, false, true, true),
            (Verifying, false, false, true),
            (Provisioned, false, false, true),
            (Landed, true, false, true),
            (Failed, true, false, true),
            (Blocked, false, false, true),
            (Discovered, true, false, true),
        ];
        for (state, daemon, all, gone) in cases {
            let f = facts(
                vec![task("t", state, &[1])],
                vec![container("t", 1)],
                daemon,
            );
            let p = plan(&f, all);
            assert_eq!(
                p.containers.len() == 1,
                gone,
                "{state} daemon={daemon} all={all}: {p:#?}"
            );
            assert_eq!(p.kept.len() == 1, !gone, "{state}: kept is listed");
        }
    }

    #[test]
    fn superseded_attempt_container_goes_even_while_live() {
        let f = facts(
            vec![task("t", Running, &[1, 2])],
            vec![container("t", 1), container("t", 2)],
            true,
        );
        check(&f, false, &["polyphony-t-1"], &[]);
    }

    #[test]
    fn unowned_and_foreign_containers() {
        let mut foreign = container("t", 1);
        foreign.home = Some("other".into());
        foreign.name = "foreign".into();
        let mut unlabelled = container("x", 1);
        unlabelled.task = None;
        unlabelled.name = "nolabel".into();
        let f = facts(
            vec![task("t", Running, &[1])],
            vec![foreign, unlabelled, container("ghost", 3)],
            true,
        );
        let p = plan(&f, true);
        check(&f, true, &["nolabel", "polyphony-ghost-3"], &[]);
        assert!(p.kept.iter().any(|k| k.what == "container foreign"));
    }

    #[test]
    fn workspaces_by_state() {
        let tasks = vec![
            task("landed", Landed, &[1, 2]),
            task("blocked", Blocked, &[1]),
            task("failed", Failed, &[1]),
            task("running", Running, &[1]),
            task("cancelled", Cancelled, &[1]),
        ];
        let f = facts(tasks, vec![], false);
        check(
            &f,
            false,
            &[],
            &[
                "/ws/landed/1",
                "/ws/landed/2",
                "/ws/blocked/1",
                "/ws/cancelled/1",
            ],
        );
        check(
            &f,
            true,
            &[],
            &[
                "/ws/landed/1",
                "/ws/landed/2",
                "/ws/blocked/1",
                "/ws/failed/1",
                "/ws/cancelled/1",
            ],
        );
    }

    #[test]
    fn missing_and_outside_workspaces_are_not_removed() {
        let mut t = task("t", Landed, &[1, 2, 3]);
        t.attempts[0].exists = false;
        t.attempts[1].workspace = "/etc".into();
        t.attempts[2].workspace = "/ws".into();
        let f = facts(vec![t], vec![], false);
        let p = plan(&f, true);
        check(&f, true, &[], &[]);
        assert_eq!(p.kept.len(), 2, "{p:#?}");
    }

    #[test]
    fn orphans_only_with_all_and_no_daemon() {
        let mut f = facts(vec![task("t", Running, &[1])], vec![], false);
        f.workspace_dirs = [
            "/ws/t",
            "/ws/t/1",
            "/ws/t/9",
            "/ws/old",
            "/ws/old/1",
            "/mirrors",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        check(&f, false, &[], &[]);
        check(&f, true, &[], &["/ws/old", "/ws/t/9"]);
        f.daemon_running = true;
        check(&f, true, &[], &[]);
        assert!(plan(&f, true).kept.iter().any(|k| k.why.contains("daemon")));
    }

    /// Issue 12: `cleanup --all` removed `…/myproject`, a directory Polyphony never made.
    #[test]
    fn only_marked_attempt_directories_are_candidates() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for d in [
            "myproject/1",
            "myproject/src",
            "local-1/1",
            "local-1/x",
            "local-2/3",
        ] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        crate::workspace::marker::mark_key_dir(&root.join("local-1")).unwrap();
        crate::workspace::marker::mark_key_dir(&root.join("local-2")).unwrap();
        assert_eq!(
            workspace_dirs(&root).unwrap(),
            vec![root.join("local-1/1"), root.join("local-2/3")]
        );
    }

    #[test]
    fn mirror_root_inside_workspace_root_is_never_an_orphan() {
        let mut f = facts(vec![], vec![], false);
        f.mirror_root = "/ws/mirrors".into();
        f.workspace_dirs = vec!["/ws/mirrors".into(), "/ws/mirrors/a.git".into()];
        check(&f, true, &[], &[]);
    }

    #[test]
    fn locks() {
        let lock = |p: &str, kind, held| LockFact {
            path: p.into(),
            kind,
            held,
        };
        let mut f = facts(vec![], vec![], false);
        f.locks = vec![
            lock("/h/daemon.lock", LockKind::Daemon, false),
            lock("/m/a.lock", LockKind::Mirror, false),
            lock("/m/b.lock", LockKind::Mirror, true),
        ];
        let paths =
            |p: CleanupPlan| -> Vec<PathBuf> { p.locks.into_iter().map(|l| l.path).collect() };
        assert_eq!(
            paths(plan(&f, false)),
            vec![PathBuf::from("/h/daemon.lock"), PathBuf::from("/m/a.lock")]
        );
        f.daemon_running = true;
        f.locks[0].held = true;
        assert!(paths(plan(&f, false)).is_empty());
    }

    #[test]
    fn empty_facts_plan_nothing() {
        assert!(plan(&facts(vec![], vec![], false), true).is_empty());
    }
}
