//! `polyphony route --explain TASK [--json]`: how a task would be routed and why.
//!
//! Glue only: the caller (cli/mod.rs) loads the config and the task, and picks the
//! repository directory (the task's local path or its mirror); the work is
//! `orchestrator::facts::gather_facts` (the repository read), `routing::explain_task` and the
//! rendering `routing::explain`.

use std::path::Path;

use crate::config::model::RoutingFile;
use crate::domain::Task;

/// Arguments of `polyphony route`.
#[derive(Debug, Clone, clap::Args)]
pub struct RouteArgs {
    /// Task id (`local-3`, `owner/repo#42`).
    pub task: String,
    /// Show the complexity score with its evidence and why each earlier rule did not match.
    #[arg(long)]
    pub explain: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Routes `task` and returns what to print: the full explanation with `--explain` or
/// `--json`, otherwise one line naming the rule and agent chain.
pub fn execute(
    args: &RouteArgs,
    task: &Task,
    routing: &RoutingFile,
    repo_dir: Option<&Path>,
    window_of: &dyn Fn(&str) -> Option<u64>,
) -> anyhow::Result<String> {
    let facts = crate::orchestrator::facts::gather_facts(task, repo_dir);
    let mut explanation = crate::routing::explain_task(task, routing, facts)
        .map_err(|e| anyhow::anyhow!("routing.yaml: {e}"))?;
    let tokens = explanation.facts.context_tokens;
    match crate::routing::fit_context(explanation.decision.clone(), tokens, window_of) {
        crate::routing::ContextFit::Fits(d) | crate::routing::ContextFit::Rerouted(d) => {
            explanation.decision = d
        }
        crate::routing::ContextFit::TooLarge { reason } => {
            explanation.decision.context = Some(format!("cannot run: {reason}"))
        }
    }
    if args.explain || args.json {
        return Ok(explanation.render(task, args.json));
    }
    let d = &explanation.decision;
    Ok(format!(
        "{}: rule `{}` -> {} (complexity {}/10){}\n",
        task.id,
        d.rule,
        d.chain().join(" -> "),
        explanation.score.total,
        d.context
            .as_deref()
            .map(|c| format!("; {c}"))
            .unwrap_or_default()
    ))
}

/// Runs the verb: loads the task and routing config and explains (or states) the route.
pub fn run(args: RouteArgs, ctx: &super::Context) -> anyhow::Result<super::Outcome> {
    use anyhow::Context as _;
    let config = crate::config::Config::load(&ctx.home)?;
    let db = crate::store::StoreHandle::for_config(&config, |n| std::env::var(n).ok())?;
    let store = db.open()?;
    let task = store.get_task(&args.task)?.ok_or_else(|| {
        super::UsageError::new(
            format!("no task `{}` in {db}", args.task),
            "list the tasks with `polyphony status`",
        )
    })?;
    let workspaces =
        crate::workspace::WorkspaceManager::new(config.workspace_root(), config.mirror_root());
    // A local repository is read in place; a remote one through its mirror, if one exists.
    let local = Path::new(&task.repo);
    let mirror = workspaces.mirror_path(&task.repo).ok();
    let repo_dir = if local.is_dir() {
        Some(local.to_path_buf())
    } else {
        mirror.filter(|m| m.is_dir())
    };
    let window_of = |agent: &str| config.agent(agent).map(|a| a.context_window_tokens);
    let text = execute(
        &args,
        &task,
        config.routing(),
        repo_dir.as_deref(),
        &window_of,
    )
    .with_context(|| format!("cannot route task {}", task.id))?;
    // JSON escapes control characters itself and is printed byte for byte.
    if args.json {
        print!("{text}");
    } else {
        print!("{}", crate::ops::report::printable(&text));
    }
    Ok(super::Outcome::Success)
}
