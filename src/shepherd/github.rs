//! The GitHub calls the shepherd makes, as the shepherd's values: a pull request's look
//! (with its ETag), its feedback and checks, and the replies. A thin adapter over
//! `sources::github` (issue 15's client functions): the decision never sees GitHub's JSON.

use serde::Deserialize;
use serde_json::json;

use crate::sources::github::client::Repeat;
use crate::sources::github::model::User;
use crate::sources::github::{GithubClient, GithubError, IssueRef};

/// A review comment as listed (`GET /repos/{o}/{r}/pulls/{n}/comments`).
#[derive(Debug, Clone, Deserialize)]
struct ReviewComment {
    id: u64,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    user: Option<User>,
    #[serde(default)]
    in_reply_to_id: Option<u64>,
}

/// Replies in the thread of review comment `thread` unless our reply carrying `marker` is
/// there; returns its id. When the POST's outcome is unknown the thread is read again before
/// a second and last try, so a reply never appears twice.
pub async fn ensure_thread_reply(
    client: &GithubClient,
    pull: &IssueRef,
    thread: u64,
    marker: &str,
    body: &str,
) -> Result<u64, GithubError> {
    let mut retried = false;
    loop {
        let comments: Vec<ReviewComment> = client
            .get_all_pages(
                &format!("listing review comments of {pull}"),
                &format!(
                    "{}/pulls/{}/comments?per_page=100",
                    pull.repo.api_path(),
                    pull.number
                ),
            )
            .await?;
        let me = client.viewer_login().await?;
        if let Some(existing) = comments.iter().find(|c| {
            c.in_reply_to_id == Some(thread)
                && c.user
                    .as_ref()
                    .is_some_and(|u| u.login.eq_ignore_ascii_case(me))
                && c.body.as_deref().is_some_and(|b| b.contains(marker))
        }) {
            return Ok(existing.id);
        }
        let posted = client
            .post_json::<ReviewComment>(
                &format!("replying to review comment {thread} on {pull}"),
                &format!(
                    "{}/pulls/{}/comments/{thread}/replies",
                    pull.repo.api_path(),
                    pull.number
                ),
                &json!({ "body": body }),
                Repeat::Never,
            )
            .await;
        match posted {
            Ok(reply) => return Ok(reply.id),
            Err(e) if e.outcome_unknown() && !retried => {
                tracing::warn!(%pull, thread, error = %e, "reply outcome unknown: looking before retrying");
                retried = true;
            }
            Err(e) => return Err(e),
        }
    }
}

// ------------------------------------------------------------------ reading a pull request

use super::decide::{Check, Feedback, Place, PullState, PullView};

#[derive(Debug, Clone, Deserialize)]
struct PullJson {
    state: String,
    #[serde(default)]
    merged: Option<bool>,
    #[serde(default)]
    merged_at: Option<String>,
    head: RefJson,
    base: RefJson,
    #[serde(default)]
    labels: Vec<LabelJson>,
    #[serde(default)]
    mergeable: Option<bool>,
    #[serde(default)]
    mergeable_state: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
struct RefJson {
    #[serde(rename = "ref")]
    name: String,
    #[serde(default)]
    sha: String,
}

#[derive(Debug, Clone, Deserialize)]
struct LabelJson {
    name: String,
}

/// What one read of the pull request gave.
#[derive(Debug, Clone, PartialEq)]
pub struct Look {
    pub view: PullView,
    pub base: String,
    /// `mergeable_state` as GitHub says it (`clean`, `dirty`, `behind`, `blocked`, …).
    pub mergeable_state: Option<String>,
}

/// The pull request now.
pub async fn look(client: &GithubClient, pull: &IssueRef) -> Result<Look, GithubError> {
    let json: PullJson = client
        .get_json(
            &format!("reading pull request {pull}"),
            &format!("{}/pulls/{}", pull.repo.api_path(), pull.number),
        )
        .await?;
    let merged = json.merged.unwrap_or(false) || json.merged_at.is_some();
    let state = match (json.state.as_str(), merged) {
        (_, true) => PullState::Merged,
        ("open", _) => PullState::Open,
        _ => PullState::Closed,
    };
    let behind = json.mergeable_state.as_deref() == Some("behind");
    Ok(Look {
        view: PullView {
            state,
            head_sha: json.head.sha,
            labels: json.labels.into_iter().map(|l| l.name).collect(),
            mergeable: json.mergeable,
            behind,
        },
        base: json.base.name,
        mergeable_state: json.mergeable_state,
    })
}

#[derive(Debug, Clone, Deserialize)]
struct ReviewJson {
    id: u64,
    #[serde(default)]
    user: Option<User>,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    state: String,
}

#[derive(Debug, Clone, Deserialize)]
struct InlineJson {
    id: u64,
    #[serde(default)]
    user: Option<User>,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    path: String,
    #[serde(default)]
    line: Option<u64>,
    #[serde(default)]
    original_line: Option<u64>,
    #[serde(default)]
    diff_hunk: Option<String>,
    #[serde(default)]
    in_reply_to_id: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
struct IssueCommentJson {
    id: u64,
    #[serde(default)]
    user: Option<User>,
    #[serde(default)]
    body: Option<String>,
}

fn login(user: &Option<User>) -> String {
    user.as_ref().map(|u| u.login.clone()).unwrap_or_default()
}

/// Reviews, inline review comments and conversation comments, in that order.
pub async fn feedback(
    client: &GithubClient,
    pull: &IssueRef,
) -> Result<Vec<Feedback>, GithubError> {
    let base = format!("{}/pulls/{}", pull.repo.api_path(), pull.number);
    let reviews: Vec<ReviewJson> = client
        .get_all_pages(
            &format!("listing reviews of {pull}"),
            &format!("{base}/reviews?per_page=100"),
        )
        .await?;
    let inline: Vec<InlineJson> = client
        .get_all_pages(
            &format!("listing review comments of {pull}"),
            &format!("{base}/comments?per_page=100"),
        )
        .await?;
    let conversation: Vec<IssueCommentJson> = client
        .get_all_pages(
            &format!("listing comments of {pull}"),
            &format!("{}/comments?per_page=100", pull.api_path()),
        )
        .await?;
    let mut out = Vec::new();
    for r in reviews {
        out.push(Feedback {
            id: r.id,
            author: login(&r.user),
            body: r.body.unwrap_or_default(),
            place: Place::Review { state: r.state },
        });
    }
    for c in inline {
        out.push(Feedback {
            id: c.id,
            author: login(&c.user),
            body: c.body.unwrap_or_default(),
            place: Place::Inline {
                thread: c.in_reply_to_id.unwrap_or(c.id),
                path: c.path,
                line: c.line.or(c.original_line),
                diff_hunk: c.diff_hunk.unwrap_or_default(),
            },
        });
    }
    for c in conversation {
        out.push(Feedback {
            id: c.id,
            author: login(&c.user),
            body: c.body.unwrap_or_default(),
            place: Place::Conversation,
        });
    }
    Ok(out)
}

#[derive(Debug, Clone, Deserialize)]
struct CheckRunsJson {
    #[serde(default)]
    check_runs: Vec<CheckRunJson>,
}

#[derive(Debug, Clone, Deserialize)]
struct CheckRunJson {
    name: String,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    conclusion: Option<String>,
    #[serde(default)]
    output: Option<CheckOutputJson>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct CheckOutputJson {
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    summary: Option<String>,
    #[serde(default)]
    text: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
struct CombinedJson {
    #[serde(default)]
    statuses: Vec<StatusJson>,
}

#[derive(Debug, Clone, Deserialize)]
struct StatusJson {
    context: String,
    state: String,
    #[serde(default)]
    description: Option<String>,
}

/// The check runs and commit statuses of `sha`.
pub async fn checks(
    client: &GithubClient,
    pull: &IssueRef,
    sha: &str,
) -> Result<Vec<Check>, GithubError> {
    let repo = pull.repo.api_path();
    let runs: CheckRunsJson = client
        .get_json(
            &format!("listing check runs of {sha}"),
            &format!("{repo}/commits/{sha}/check-runs?per_page=100"),
        )
        .await?;
    let combined: CombinedJson = client
        .get_json(
            &format!("reading the combined status of {sha}"),
            &format!("{repo}/commits/{sha}/status"),
        )
        .await?;
    let mut out = Vec::new();
    for run in runs.check_runs {
        let output = run.output.unwrap_or_default();
        let summary = [output.title, output.summary]
            .into_iter()
            .flatten()
            .filter(|s| !s.trim().is_empty())
            .collect::<Vec<_>>()
            .join("\n\n");
        let conclusion = match run.status.as_deref() {
            Some("completed") | None => run.conclusion,
            Some(_) => None,
        };
        out.push(Check {
            name: run.name,
            conclusion,
            summary,
            text: output.text,
        });
    }
    for status in combined.statuses {
        let conclusion = (status.state != "pending").then_some(status.state);
        out.push(Check {
            name: status.context,
            conclusion,
            summary: status.description.unwrap_or_default(),
            text: None,
        });
    }
    Ok(out)
}

#[derive(Debug, Clone, Deserialize)]
struct PermissionJson {
    #[serde(default)]
    permission: Option<String>,
    #[serde(default)]
    role_name: Option<String>,
}

/// `login`'s permissions on the repository: the role name (`maintain`, `triage`, …) and
/// the legacy permission (`admin`, `write`, `read`, `none`). A user who is no collaborator
/// has none.
pub async fn permissions(
    client: &GithubClient,
    pull: &IssueRef,
    login: &str,
) -> Result<Vec<String>, GithubError> {
    let path = format!(
        "{}/collaborators/{}/permission",
        pull.repo.api_path(),
        crate::sources::github::client::encode_component(login)
    );
    match client
        .get_json::<PermissionJson>(&format!("reading {login}'s permission"), &path)
        .await
    {
        Ok(p) => Ok([p.role_name, p.permission].into_iter().flatten().collect()),
        Err(GithubError::NotFound { .. }) => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}
