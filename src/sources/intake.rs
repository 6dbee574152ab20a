//! Local-queue intake (spec §2): checking a task someone enqueues and storing it. One path
//! for `polyphony enqueue` and `POST /api/v1/tasks`, so both refuse the same inputs with the
//! same reasons (issue 12): everything is checked before the store is opened, so a refused
//! task leaves the home exactly as it was.
//!
//! Must not: store a repository URL that embeds credentials, or echo them (they are shown
//! as `***`).

use std::path::Path;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use crate::domain::text::{check_body, check_not_option, check_title, TextError};
use crate::domain::{Risk, Scope, SourceKind, Task, TaskType};
use crate::store::{Store, StoreError};

/// A task as a person or a script asks for it (the JSON body of `POST /api/v1/tasks`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewTask {
    pub repo: String,
    pub title: String,
    #[serde(default)]
    pub base: Option<String>,
    #[serde(default, rename = "type")]
    pub task_type: TaskType,
    #[serde(default)]
    pub risk: Risk,
    #[serde(default)]
    pub scope: Scope,
    #[serde(default)]
    pub labels: Vec<String>,
    #[serde(default)]
    pub body: String,
    #[serde(default)]
    pub requires_web: bool,
    /// Skip the `git ls-remote` check of a URL `repo`.
    #[serde(default)]
    pub no_check: bool,
}

/// How a field is named in a refusal: the CLI's flag or the API's JSON key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    Cli,
    Api,
}

impl Surface {
    fn name(self, field: &str) -> String {
        match self {
            Surface::Cli => format!("--{field}"),
            Surface::Api => format!("`{field}`"),
        }
    }
}

/// Why a task was not stored: what is wrong and the fix (exit 2, HTTP 400).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message} — fix: {fix}")]
pub struct Refused {
    pub message: String,
    pub fix: String,
}

impl Refused {
    fn new(message: impl Into<String>, fix: impl Into<String>) -> Refused {
        Refused {
            message: message.into(),
            fix: fix.into(),
        }
    }
}

impl From<TextError> for Refused {
    fn from(e: TextError) -> Refused {
        Refused::new(e.message, e.fix)
    }
}

/// Checks `new` (title, repository, base, labels, body within `body_limit`, and that the
/// repository and base exist) and returns it with the repository normalized (a local path
/// made absolute, a URL trimmed). Touches no store.
pub fn check(mut new: NewTask, body_limit: u64, surface: Surface) -> Result<NewTask, Refused> {
    check_title(&new.title)?;
    new.title = new.title.trim().to_string();
    check_repo_text(&new.repo, surface)?;
    if let Some(base) = &new.base {
        check_not_option(&surface.name("base"), base)?;
        if base.trim().is_empty() || base.contains(['\0', '\n', '\r']) {
            return Err(Refused::new(
                format!(
                    "{} `{}` is not a ref name",
                    surface.name("base"),
                    base.escape_debug()
                ),
                "pass a branch, tag or commit such as `main`",
            ));
        }
    }
    new.repo = normalize_repo(&new.repo, surface)?;
    check_body(&new.body, body_limit)?;
    check_label_bounds(&new.labels, surface)?;
    for label in &new.labels {
        if label.trim().is_empty() {
            return Err(Refused::new(
                format!("a {} is empty", surface.name("label")),
                "remove it or give the label a name",
            ));
        }
        check_not_option(&surface.name("label"), label)?;
    }
    check_source(&new.repo, new.base.as_deref(), new.no_check, surface)?;
    Ok(new)
}

/// At most this many labels on one task (issue 24: 400 KB of labels were accepted).
pub const MAX_LABELS: usize = 64;
/// At most this many bytes in one task's labels together.
pub const MAX_LABEL_BYTES: usize = 4096;

fn check_label_bounds(labels: &[String], surface: Surface) -> Result<(), Refused> {
    let field = match surface {
        Surface::Cli => surface.name("label"),
        Surface::Api => surface.name("labels"),
    };
    if labels.len() > MAX_LABELS {
        return Err(Refused::new(
            format!(
                "{} labels ({field}), above the limit of {MAX_LABELS}",
                labels.len()
            ),
            "keep the labels routing rules match and put the rest in the body",
        ));
    }
    let bytes: usize = labels.iter().map(String::len).sum();
    if bytes > MAX_LABEL_BYTES {
        return Err(Refused::new(
            format!(
                "the labels ({field}) take {bytes} bytes, above the limit of {MAX_LABEL_BYTES}"
            ),
            "use short label names and put details in the body",
        ));
    }
    if let Some(l) = labels.iter().find(|l| l.contains(['\0', '\n', '\r'])) {
        return Err(Refused::new(
            format!("a {field} `{}` holds a NUL or newline", l.escape_debug()),
            "give each label one line of text",
        ));
    }
    Ok(())
}

/// Why a checked task could not be stored.
#[derive(Debug, thiserror::Error)]
pub enum StoreFailure {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("task id {id} already exists in {path}: the queue's id counter is out of step")]
    Duplicate { id: String, path: String },
}

/// Stores a task [`check`] accepted under the next `local-N` id, in DISCOVERED. Refuses to
/// write into a damaged queue. A task whose repository is a local path is pinned to
/// `machine` (this home's machine id, issue 27): no other machine of a fleet has the path.
pub fn store(
    store: &Store,
    new: NewTask,
    machine: &str,
    now: DateTime<Utc>,
) -> Result<Task, StoreFailure> {
    store.ensure_sound()?;
    let id = store.next_local_task_id()?;
    let mut task = Task::new(
        &id,
        SourceKind::Local,
        format!("local:{id}"),
        new.repo,
        &new.title,
        now,
    );
    task.base_ref = new.base;
    task.task_type = new.task_type;
    task.risk = new.risk;
    task.scope = new.scope;
    task.labels = new.labels;
    task.requires_web = new.requires_web;
    // About four characters per token: enough for routing to compare context windows.
    task.context_tokens = ((new.title.len() + new.body.len()) / 4) as u64;
    task.body = new.body;
    let pin = (!is_url(&task.repo)).then_some(machine);
    if !store.insert_task_pinned(&task, pin)? {
        return Err(StoreFailure::Duplicate {
            id,
            path: store.path().display().to_string(),
        });
    }
    tracing::info!(task = %task.id, repo = %task.repo, "enqueued");
    Ok(task)
}

/// The repository as typed: not an option, and no credentials in a URL (they would be
/// stored in the queue and shown by `status`). The error shows the URL with the
/// credentials as `***`.
fn check_repo_text(repo: &str, surface: Surface) -> Result<(), Refused> {
    let field = surface.name("repo");
    let trimmed = repo.trim();
    if trimmed.is_empty() {
        return Err(Refused::new(
            format!("{field} is empty"),
            "pass a local clone's path or a clone URL such as https://github.com/owner/name.git",
        ));
    }
    check_not_option(&field, trimmed)?;
    if trimmed.contains(['\0', '\n', '\r']) {
        return Err(Refused::new(
            format!(
                "{field} `{}` holds a NUL or newline",
                trimmed.escape_debug()
            ),
            "pass the repository path or URL on one line",
        ));
    }
    if let Some(shown) = redact_credentials(trimmed) {
        return Err(Refused::new(
            format!("{field} `{shown}` embeds credentials in the URL; they are never stored"),
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
/// for a URL unless `no_check`.
fn check_source(
    repo: &str,
    base: Option<&str>,
    no_check: bool,
    surface: Surface,
) -> Result<(), Refused> {
    use crate::workspace::probe::{self, ProbeError};
    let result = if is_url(repo) {
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
            ProbeError::NoCommits { .. } => {
                "commit something first, or pass --base with an existing ref"
            }
            ProbeError::BaseNotFound { .. } => {
                "pass --base with an existing branch, tag or commit (git branch -a lists them)"
            }
            ProbeError::Unreachable { .. } => {
                "check the URL and your network or credentials, or pass --no-check to store it unchecked"
            }
            ProbeError::Git(_) => "install git (>= 2.32) and put it on PATH",
        };
        Refused::new(format!("{}: {e}", surface.name("repo")), fix)
    })
}

/// URLs (`https://…`, `file://…`, `git@host:path`) are kept; anything else is a local
/// path, which must exist and is made absolute so the daemon can find it from anywhere.
fn normalize_repo(repo: &str, surface: Surface) -> Result<String, Refused> {
    let trimmed = repo.trim();
    if trimmed.contains("://") || is_scp_like(trimmed) {
        return Ok(trimmed.to_string());
    }
    // Issue 24: the daemon's working directory is nobody's choice, so an API path is
    // absolute (the CLI resolves against the caller's own directory).
    if surface == Surface::Api && !Path::new(trimmed).is_absolute() {
        return Err(Refused::new(
            format!(
                "{} `{trimmed}` is a relative path: the daemon would resolve it against its own working directory",
                surface.name("repo")
            ),
            "pass an absolute path (e.g. `/srv/src/app`) or a clone URL such as https://github.com/owner/name.git",
        ));
    }
    std::fs::canonicalize(Path::new(trimmed))
        .map(|p| p.to_string_lossy().into_owned())
        .map_err(|e| {
            Refused::new(
                format!(
                    "{} `{trimmed}` is not a URL and not an existing path ({e})",
                    surface.name("repo")
                ),
                "pass a local clone's path or a clone URL such as https://github.com/owner/name.git",
            )
        })
}

/// `user@host:path`, git's scp-like syntax.
/// A clone URL (or scp-like `host:path`), not a local path.
pub fn is_url(repo: &str) -> bool {
    repo.contains("://") || is_scp_like(repo)
}

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
            assert_eq!(normalize_repo(url, Surface::Cli).unwrap(), url);
        }
        let dir = tempfile::tempdir().unwrap();
        let canonical = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(
            normalize_repo(&dir.path().to_string_lossy(), Surface::Cli).unwrap(),
            canonical.to_string_lossy()
        );
        assert!(normalize_repo("/definitely/not/here", Surface::Cli).is_err());
        assert!(is_scp_like("git@github.com:a/b.git"));
        assert!(!is_scp_like("/srv/a@b:c"));
        assert!(!is_scp_like("relative/dir"));
    }

    #[test]
    fn refusals_name_the_field_as_the_surface_spells_it() {
        let e = check_repo_text("https://me:tok@github.com/a/b.git", Surface::Api).unwrap_err();
        assert!(
            e.message
                .starts_with("`repo` `https://***@github.com/a/b.git`"),
            "{e}"
        );
        assert!(!e.message.contains("tok"));
        let e = check_repo_text("", Surface::Cli).unwrap_err();
        assert_eq!(e.message, "--repo is empty");
    }
}
