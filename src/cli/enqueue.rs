//! `polyphony enqueue`: adds a task to the local queue (spec §2) and prints its id.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use chrono::Utc;

use super::{print_json, Context, Outcome, UsageError};
use crate::domain::{Risk, Scope, TaskType};
use crate::sources::intake::{self, NewTask, Refused, Surface};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Repository to work on: a local path (made absolute) or a clone URL.
    #[arg(long, value_name = "PATH|URL")]
    repo: String,
    /// Branch or ref to start from (default: the repository's default branch).
    #[arg(long, value_name = "REF")]
    base: Option<String>,
    /// bugfix, feature, docs, refactor, research, migration or review.
    #[arg(long = "type", value_name = "TYPE", default_value = "feature")]
    task_type: TaskType,
    /// low, medium or high.
    #[arg(long, value_name = "RISK", default_value = "low")]
    risk: Risk,
    /// small (0-1 files), medium (2-4) or large (5+).
    #[arg(long, value_name = "SCOPE", default_value = "small")]
    scope: Scope,
    /// A label routing rules can match (repeatable).
    #[arg(long = "label", value_name = "LABEL")]
    labels: Vec<String>,
    /// Task description.
    #[arg(long, conflicts_with = "body_file")]
    body: Option<String>,
    /// Read the task description from a file.
    #[arg(long, value_name = "FILE")]
    body_file: Option<PathBuf>,
    /// The task needs web access (routing can send it to an agent that searches).
    #[arg(long)]
    requires_web: bool,
    /// Print `{"id": …}` instead of the bare id.
    #[arg(long)]
    json: bool,
    /// Skip the `git ls-remote` check of a URL --repo (and its --base) before storing.
    #[arg(long)]
    no_check: bool,
    /// One-line title of the task.
    title: String,
}

pub fn run(args: Args, ctx: &Context) -> anyhow::Result<Outcome> {
    let refused = |e: Refused| UsageError::new(e.message, e.fix);
    // Issue 24: the queue's limits live in config.yaml, so a broken one refuses (exit 2,
    // the file and field named) instead of storing under defaults nobody chose.
    let config = crate::config::Config::load(&ctx.home)?;
    let limit = config.global().max_body_bytes;
    let machine = crate::orchestrator::lease::machine_id(&config);
    let body = match (&args.body, &args.body_file) {
        (Some(text), _) => text.clone(),
        (None, Some(path)) => read_body_file(path, limit)?,
        (None, None) => String::new(),
    };
    let new = NewTask {
        repo: args.repo,
        title: args.title,
        base: args.base,
        task_type: args.task_type,
        risk: args.risk,
        scope: args.scope,
        labels: args.labels,
        body,
        requires_web: args.requires_web,
        no_check: args.no_check,
    };
    // Everything is checked before the store is opened: a refused task leaves the home
    // exactly as it was (issue 12).
    let new = intake::check(new, limit, Surface::Cli).map_err(refused)?;
    let db = crate::store::StoreHandle::for_home(&ctx.home)?;
    let store = db
        .open()
        .with_context(|| format!("opening the queue {db}"))?;
    // The store's own error (a damaged file is `DatabaseDamaged`, exit 2), not a wrapper.
    let task = intake::store(&store, new, &machine, Utc::now()).map_err(|e| match e {
        intake::StoreFailure::Store(e) => anyhow::Error::new(e),
        other => anyhow::Error::new(other),
    })?;
    if args.json {
        print_json(&serde_json::json!({ "id": task.id }))?;
    } else {
        println!("{}", task.id);
    }
    // A running daemon picks the task up at once instead of at its next poll.
    crate::orchestrator::daemon::wake(&ctx.home);
    Ok(Outcome::Success)
}

/// Reads `--body-file`, refusing a file above `limit` before reading it all.
fn read_body_file(path: &Path, limit: u64) -> Result<String, UsageError> {
    let unreadable = |e: String| {
        UsageError::new(
            format!("cannot read --body-file {}: {e}", path.display()),
            "pass a readable UTF-8 text file",
        )
    };
    let meta = std::fs::metadata(path).map_err(|e| unreadable(e.to_string()))?;
    if meta.is_file() && meta.len() > limit {
        return Err(UsageError::new(
            format!(
                "--body-file {} is {} bytes, above the limit of {limit} bytes (max_body_bytes)",
                path.display(),
                meta.len()
            ),
            "shorten the body, link to the long material instead, or raise `max_body_bytes` in config.yaml",
        ));
    }
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut std::io::Read::take(
            std::fs::File::open(path).map_err(|e| unreadable(e.to_string()))?,
            limit + 1,
        ),
        &mut text,
    )
    .map_err(|e| unreadable(e.to_string()))?;
    Ok(text)
}
