//! `polyphony enqueue`: adds a task to the local queue (spec §2) and prints its id.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use chrono::Utc;

use super::{print_json, Context, Outcome, UsageError};
use crate::domain::text::{check_body, check_not_option, check_title, TextError};
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
    /// Skip the `git ls-remote` check of a URL --repo (and its --base) before storing.
    #[arg(long)]
    no_check: bool,
    /// One-line title of the task.
    title: String,
}

pub fn run(args: Args, ctx: &Context) -> anyhow::Result<Outcome> {
    // Everything is checked before the store is opened: a refused task leaves the home
    // exactly as it was (issue 12).
    let text_error = |e: TextError| UsageError::new(e.message, e.fix);
    check_title(&args.title).map_err(text_error)?;
    let title = args.title.trim();
    check_repo_text(&args.repo)?;
    if let Some(base) = &args.base {
        check_not_option("--base", base).map_err(text_error)?;
        if base.trim().is_empty() || base.contains(['\0', '\n', '\r']) {
            return Err(UsageError::new(
                format!("--base `{}` is not a ref name", base.escape_debug()),
                "pass a branch, tag or commit such as `main`",
            )
            .into());
        }
    }
    let repo = normalize_repo(&args.repo)?;
    let limit = body_limit(ctx);
    let body = match (&args.body, &args.body_file) {
        (Some(text), _) => text.clone(),
        (None, Some(path)) => read_body_file(path, limit)?,
        (None, None) => String::new(),
    };
    check_body(&body, limit).map_err(text_error)?;
    for label in &args.labels {
        if label.trim().is_empty() {
            return Err(UsageError::new(
                "a --label is empty",
                "remove it or give the label a name",
            )
            .into());
        }
        check_not_option("--label", label).map_err(text_error)?;
    }
    check_source(&repo, args.base.as_deref(), args.no_check)?;

    let db = crate::config::db_path(&ctx.home);
    let store = Store::open(&db).with_context(|| format!("opening the queue {}", db.display()))?;
    // Never write into a damaged file (issue 12): check it before adding a row.
    store.ensure_sound()?;
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

/// `max_body_bytes` from config.yaml; the default when the config does not load (enqueue
/// works on a home whose YAML is broken, as `status` does).
fn body_limit(ctx: &Context) -> u64 {
    match crate::config::Config::load(&ctx.home) {
        Ok(config) => config.global.max_body_bytes,
        Err(e) => {
            tracing::debug!(error = %e, "config not loaded; default body limit");
            crate::config::model::DEFAULT_MAX_BODY_BYTES
        }
    }
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

/// `--repo` as typed: not an option, and no credentials in a URL (they would be stored in
/// the queue and shown by `status`). The error shows the URL with the credentials as `***`.
fn check_repo_text(repo: &str) -> Result<(), UsageError> {
    let trimmed = repo.trim();
    if trimmed.is_empty() {
        return Err(UsageError::new(
            "--repo is empty",
            "pass a local clone's path or a clone URL such as https://github.com/owner/name.git",
        ));
    }
    check_not_option("--repo", trimmed).map_err(|e| UsageError::new(e.message, e.fix))?;
    if trimmed.contains(['\0', '\n', '\r']) {
        return Err(UsageError::new(
            format!("--repo `{}` holds a NUL or newline", trimmed.escape_debug()),
            "pass the repository path or URL on one line",
        ));
    }
    if let Some(shown) = redact_credentials(trimmed) {
        return Err(UsageError::new(
            format!("--repo `{shown}` embeds credentials in the URL; they are never stored"),
            "drop the `user:token@` part: Polyphony authenticates with the identity's token (github_token_env) or your git credentials",
        ));
    }
    Ok(())
}

/// The URL with its userinfo replaced by `***` when an http(s) URL carries any, or any URL
/// carries a password; `None` when it holds no credentials.
fn redact_credentials(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let end = rest.find('/').unwrap_or(rest.len());
    let (userinfo, host) = rest[..end].rsplit_once('@')?;
    let http = scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https");
    if http || userinfo.contains(':') {
        Some(format!("{scheme}://***@{host}{}", &rest[end..]))
    } else {
        None
    }
}

/// The repository and base ref exist: checked locally for a path, with `git ls-remote`
/// for a URL unless `--no-check`.
fn check_source(repo: &str, base: Option<&str>, no_check: bool) -> Result<(), UsageError> {
    use crate::workspace::probe::{self, ProbeError};
    let is_url = repo.contains("://") || is_scp_like(repo);
    let result = if is_url {
        if no_check {
            return Ok(());
        }
        probe::check_remote(repo, base, std::time::Duration::from_secs(30))
    } else {
        probe::check_local(Path::new(repo), base)
    };
    result.map_err(|e| {
        let fix = match &e {
            ProbeError::OtherOwner { .. } => {
                "run polyphony as the repository's owner, or enqueue a clone you own"
            }
            ProbeError::NotARepository { .. } => {
                "pass the path of a git clone (a directory holding .git, or a bare repository)"
            }
            ProbeError::NoCommits { .. } => "commit something first, or pass --base with an existing ref",
            ProbeError::BaseNotFound { .. } => {
                "pass --base with an existing branch, tag or commit (git branch -a lists them)"
            }
            ProbeError::Unreachable { .. } => {
                "check the URL and your network or credentials, or pass --no-check to store it unchecked"
            }
            ProbeError::Git(_) => "install git (>= 2.32) and put it on PATH",
        };
        UsageError::new(format!("--repo: {e}"), fix)
    })
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
