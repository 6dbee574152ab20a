//! `polyphony enqueue`: adds a task to the local queue (spec §2) and prints its id.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use chrono::Utc;

use super::{print_json, Context, Outcome, UsageError};
use crate::domain::{Risk, Scope, SourceKind, Task, TaskType};
use crate::store::Store;

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
    /// One-line title of the task.
    title: String,
}

pub fn run(args: Args, ctx: &Context) -> anyhow::Result<Outcome> {
    let title = args.title.trim();
    if title.is_empty() {
        return Err(UsageError::new(
            "the task title is empty",
            "pass a one-line title, e.g. \"Fix the parser\"",
        )
        .into());
    }
    let repo = normalize_repo(&args.repo)?;
    let body = match (&args.body, &args.body_file) {
        (Some(text), _) => text.clone(),
        (None, Some(path)) => std::fs::read_to_string(path).map_err(|e| {
            UsageError::new(
                format!("cannot read --body-file {}: {e}", path.display()),
                "pass a readable UTF-8 text file",
            )
        })?,
        (None, None) => String::new(),
    };
    if args.labels.iter().any(|l| l.trim().is_empty()) {
        return Err(
            UsageError::new("a --label is empty", "remove it or give the label a name").into(),
        );
    }

    let db = crate::config::db_path(&ctx.home);
    let store = Store::open(&db).with_context(|| format!("opening the queue {}", db.display()))?;
    let id = store.next_local_task_id()?;
    let mut task = Task::new(
        &id,
        SourceKind::Local,
        format!("local:{id}"),
        repo,
        title,
        Utc::now(),
    );
    task.base_ref = args.base.clone();
    task.task_type = args.task_type;
    task.risk = args.risk;
    task.scope = args.scope;
    task.labels = args.labels.clone();
    task.requires_web = args.requires_web;
    // About four characters per token: enough for routing to compare context windows.
    task.context_tokens = ((title.len() + body.len()) / 4) as u64;
    task.body = body;
    if !store.insert_task(&task)? {
        anyhow::bail!(
            "task id {id} already exists in {}: the queue's id counter is out of step",
            db.display()
        );
    }
    tracing::info!(task = %id, repo = %task.repo, "enqueued");
    if args.json {
        print_json(&serde_json::json!({ "id": id }))?;
    } else {
        println!("{id}");
    }
    // A running daemon picks the task up at once instead of at its next poll.
    crate::orchestrator::daemon::wake(&ctx.home);
    Ok(Outcome::Success)
}

/// URLs (`https://…`, `file://…`, `git@host:path`) are kept; anything else is a local
/// path, which must exist and is made absolute so the daemon can find it from anywhere.
fn normalize_repo(repo: &str) -> Result<String, UsageError> {
    let trimmed = repo.trim();
    if trimmed.contains("://") || is_scp_like(trimmed) {
        return Ok(trimmed.to_string());
    }
    std::fs::canonicalize(Path::new(trimmed))
        .map(|p| p.to_string_lossy().into_owned())
        .map_err(|e| {
            UsageError::new(
                format!("--repo `{trimmed}` is not a URL and not an existing path ({e})"),
                "pass a local clone's path or a clone URL such as https://github.com/owner/name.git",
            )
        })
}

/// `user@host:path`, git's scp-like syntax.
fn is_scp_like(s: &str) -> bool {
    match (s.find('@'), s.find(':')) {
        (Some(at), Some(colon)) => at < colon && !s[..colon].contains('/'),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_kept_and_paths_must_exist() {
        for url in [
            "https://github.com/a/b.git",
            "file:///srv/b.git",
            "git@github.com:a/b.git",
        ] {
            assert_eq!(normalize_repo(url).unwrap(), url);
        }
        let dir = tempfile::tempdir().unwrap();
        let canonical = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(
            normalize_repo(&dir.path().to_string_lossy()).unwrap(),
            canonical.to_string_lossy()
        );
        assert!(normalize_repo("/definitely/not/here").is_err());
        assert!(is_scp_like("git@github.com:a/b.git"));
        assert!(!is_scp_like("/srv/a@b:c"));
        assert!(!is_scp_like("relative/dir"));
    }
}
