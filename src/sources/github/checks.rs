//! CI on a commit (issue 15): the check runs for a sha and its combined commit status.
//!
//! Owns: reading both with conditional requests (an unchanged head costs `304`s) into plain
//! structs, and what "failed" means for each (pure).
//! Must not: decide which checks are required or what to do about a failure: the shepherd
//! does.

use serde::Deserialize;

use super::client::{encode_component, GithubClient, GithubError};
use super::model::User;
use super::RepoSlug;

/// A check run's `status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckStatus {
    Queued,
    InProgress,
    Completed,
    Waiting,
    Requested,
    Pending,
    Other(String),
}

/// A completed check run's `conclusion`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckConclusion {
    Success,
    Failure,
    Neutral,
    Cancelled,
    Skipped,
    TimedOut,
    ActionRequired,
    Stale,
    Other(String),
}

impl CheckStatus {
    pub fn parse(value: &str) -> CheckStatus {
        match value {
            "queued" => CheckStatus::Queued,
            "in_progress" => CheckStatus::InProgress,
            "completed" => CheckStatus::Completed,
            "waiting" => CheckStatus::Waiting,
            "requested" => CheckStatus::Requested,
            "pending" => CheckStatus::Pending,
            other => CheckStatus::Other(other.to_string()),
        }
    }
}

impl CheckConclusion {
    pub fn parse(value: &str) -> CheckConclusion {
        match value {
            "success" => CheckConclusion::Success,
            "failure" => CheckConclusion::Failure,
            "neutral" => CheckConclusion::Neutral,
            "cancelled" => CheckConclusion::Cancelled,
            "skipped" => CheckConclusion::Skipped,
            "timed_out" => CheckConclusion::TimedOut,
            "action_required" => CheckConclusion::ActionRequired,
            "stale" => CheckConclusion::Stale,
            other => CheckConclusion::Other(other.to_string()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            CheckConclusion::Success => "success",
            CheckConclusion::Failure => "failure",
            CheckConclusion::Neutral => "neutral",
            CheckConclusion::Cancelled => "cancelled",
            CheckConclusion::Skipped => "skipped",
            CheckConclusion::TimedOut => "timed_out",
            CheckConclusion::ActionRequired => "action_required",
            CheckConclusion::Stale => "stale",
            CheckConclusion::Other(s) => s,
        }
    }

    /// A conclusion that blocks a merge as GitHub counts it: failure, timed out, cancelled,
    /// action required. Success, neutral, skipped and stale do not.
    pub fn is_failure(&self) -> bool {
        matches!(
            self,
            CheckConclusion::Failure
                | CheckConclusion::TimedOut
                | CheckConclusion::Cancelled
                | CheckConclusion::ActionRequired
        )
    }
}

/// One check run (the latest of its name for the sha).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRun {
    pub id: u64,
    pub name: String,
    pub head_sha: String,
    pub status: CheckStatus,
    /// Set once `status` is `Completed`.
    pub conclusion: Option<CheckConclusion>,
    /// `output.title`, `output.summary`, `output.text`: what the check said about itself.
    pub title: Option<String>,
    pub summary: Option<String>,
    pub text: Option<String>,
    pub details_url: Option<String>,
    pub html_url: Option<String>,
    pub started_at: Option<String>,
    pub completed_at: Option<String>,
}

impl CheckRun {
    pub fn is_completed(&self) -> bool {
        self.status == CheckStatus::Completed
    }

    pub fn failed(&self) -> bool {
        self.is_completed() && self.conclusion.as_ref().is_some_and(|c| c.is_failure())
    }
}

/// A commit status's (and the combined status's) `state`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatusState {
    Success,
    Pending,
    Failure,
    Error,
    Other(String),
}

impl StatusState {
    pub fn parse(value: &str) -> StatusState {
        match value {
            "success" => StatusState::Success,
            "pending" => StatusState::Pending,
            "failure" => StatusState::Failure,
            "error" => StatusState::Error,
            other => StatusState::Other(other.to_string()),
        }
    }

    pub fn failed(&self) -> bool {
        matches!(self, StatusState::Failure | StatusState::Error)
    }
}

/// One commit status (the latest of its context).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitStatus {
    pub id: u64,
    pub context: String,
    pub state: StatusState,
    pub description: Option<String>,
    pub target_url: Option<String>,
    pub creator: Option<String>,
    pub updated_at: Option<String>,
}

/// The combined status of a sha: `failure` if any status failed or errored, `pending` if
/// any is pending or there is none, else `success`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CombinedStatus {
    pub sha: String,
    pub state: StatusState,
    pub statuses: Vec<CommitStatus>,
}

#[derive(Debug, Deserialize)]
struct RawCheckRuns {
    #[serde(default)]
    total_count: u64,
    #[serde(default)]
    check_runs: Vec<RawCheckRun>,
}

#[derive(Debug, Deserialize)]
struct RawCheckRun {
    id: u64,
    #[serde(default)]
    name: String,
    #[serde(default)]
    head_sha: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    conclusion: Option<String>,
    #[serde(default)]
    output: Option<RawOutput>,
    #[serde(default)]
    details_url: Option<String>,
    #[serde(default)]
    html_url: Option<String>,
    #[serde(default)]
    started_at: Option<String>,
    #[serde(default)]
    completed_at: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct RawOutput {
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    summary: Option<String>,
    #[serde(default)]
    text: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RawCombined {
    #[serde(default)]
    sha: String,
    #[serde(default)]
    state: String,
    #[serde(default)]
    statuses: Vec<RawStatus>,
}

#[derive(Debug, Deserialize)]
struct RawStatus {
    id: u64,
    #[serde(default)]
    context: String,
    #[serde(default)]
    state: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    target_url: Option<String>,
    #[serde(default)]
    creator: Option<User>,
    #[serde(default)]
    updated_at: Option<String>,
}

impl From<RawCheckRun> for CheckRun {
    fn from(raw: RawCheckRun) -> CheckRun {
        let output = raw.output.unwrap_or_default();
        CheckRun {
            id: raw.id,
            name: raw.name,
            head_sha: raw.head_sha,
            status: CheckStatus::parse(&raw.status),
            conclusion: raw.conclusion.as_deref().map(CheckConclusion::parse),
            title: output.title,
            summary: output.summary,
            text: output.text,
            details_url: raw.details_url,
            html_url: raw.html_url,
            started_at: raw.started_at,
            completed_at: raw.completed_at,
        }
    }
}

/// Pages read at most for one sha's check runs (100 each).
const MAX_CHECK_PAGES: u32 = 10;

/// The latest check run of each name for `sha` (a sha, or a branch name).
pub async fn check_runs_for(
    client: &GithubClient,
    repo: &RepoSlug,
    sha: &str,
) -> Result<Vec<CheckRun>, GithubError> {
    let mut runs = Vec::new();
    for page in 1..=MAX_CHECK_PAGES {
        let what = format!("listing check runs of {sha} in {repo} (page {page})");
        let raw: RawCheckRuns = client
            .get_json_cached(
                &what,
                &format!(
                    "{}/commits/{}/check-runs?per_page=100&page={page}",
                    repo.api_path(),
                    encode_component(sha)
                ),
            )
            .await?;
        let got = raw.check_runs.len();
        runs.extend(raw.check_runs.into_iter().map(CheckRun::from));
        if got < 100 || runs.len() as u64 >= raw.total_count {
            break;
        }
    }
    Ok(runs)
}

/// The combined commit status of `sha` (a sha, or a branch name).
pub async fn combined_status(
    client: &GithubClient,
    repo: &RepoSlug,
    sha: &str,
) -> Result<CombinedStatus, GithubError> {
    let raw: RawCombined = client
        .get_json_cached(
            &format!("reading the combined status of {sha} in {repo}"),
            &format!(
                "{}/commits/{}/status?per_page=100",
                repo.api_path(),
                encode_component(sha)
            ),
        )
        .await?;
    Ok(CombinedStatus {
        sha: raw.sha,
        state: StatusState::parse(&raw.state),
        statuses: raw
            .statuses
            .into_iter()
            .map(|s| CommitStatus {
                id: s.id,
                context: s.context,
                state: StatusState::parse(&s.state),
                description: s.description,
                target_url: s.target_url,
                creator: s.creator.map(|u| u.login),
                updated_at: s.updated_at,
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(status: &str, conclusion: Option<&str>) -> CheckRun {
        CheckRun::from(
            serde_json::from_value::<RawCheckRun>(serde_json::json!({
                "id": 1, "name": "ci", "head_sha": "a", "status": status,
                "conclusion": conclusion,
                "output": {"title": "t", "summary": "s", "text": null},
            }))
            .unwrap(),
        )
    }

    #[test]
    fn failed_means_completed_with_a_blocking_conclusion() {
        for (status, conclusion, failed) in [
            ("completed", Some("failure"), true),
            ("completed", Some("timed_out"), true),
            ("completed", Some("cancelled"), true),
            ("completed", Some("action_required"), true),
            ("completed", Some("success"), false),
            ("completed", Some("neutral"), false),
            ("completed", Some("skipped"), false),
            ("in_progress", None, false),
            ("queued", None, false),
        ] {
            assert_eq!(
                run(status, conclusion).failed(),
                failed,
                "{status} {conclusion:?}"
            );
        }
        let r = run("completed", Some("failure"));
        assert_eq!(r.title.as_deref(), Some("t"));
        assert_eq!(r.summary.as_deref(), Some("s"));
        assert_eq!(r.text, None);
    }

    #[test]
    fn status_states_parse() {
        assert!(StatusState::parse("failure").failed());
        assert!(StatusState::parse("error").failed());
        assert!(!StatusState::parse("pending").failed());
        assert_eq!(StatusState::parse("x"), StatusState::Other("x".into()));
    }
}
