//! The GitHub reads the shepherd makes, as the shepherd's values: a thin mapping from
//! `sources::github`'s pull, feedback, check and permission calls (conditional GETs: an
//! unchanged answer is a 304 from the client's ETag cache) to `decide`'s types, so the
//! decision never sees GitHub's shapes.

use super::decide::{Check, Feedback, Place, PullState, PullView};
use crate::sources::github::checks::{check_runs_for, combined_status, CheckStatus, StatusState};
use crate::sources::github::collaborators::{permission_of, Permission};
use crate::sources::github::feedback::{
    list_issue_comments, list_review_comments, list_reviews, ReviewState,
};
use crate::sources::github::pulls::{get_pull_settled, MergeableState};
use crate::sources::github::{GithubClient, GithubError, IssueRef};

/// What one read of the pull request gave.
#[derive(Debug, Clone, PartialEq)]
pub struct Look {
    pub view: PullView,
    /// The branch it targets.
    pub base: String,
}

/// Reads of a pull request whose mergeability GitHub is still computing, and their pause:
/// a moved base shows as a conflict within one look instead of one poll later.
const SETTLE_READS: u32 = 4;
const SETTLE_PAUSE: std::time::Duration = std::time::Duration::from_millis(750);

/// The pull request now.
pub async fn look(client: &GithubClient, pull: &IssueRef) -> Result<Look, GithubError> {
    let snap = get_pull_settled(client, pull, SETTLE_READS, SETTLE_PAUSE).await?;
    let state = if snap.merged {
        PullState::Merged
    } else if snap.is_open() {
        PullState::Open
    } else {
        PullState::Closed
    };
    Ok(Look {
        view: PullView {
            state,
            head_sha: snap.head_sha,
            labels: snap.labels,
            mergeable: snap.mergeable,
            behind: snap.mergeable_state == MergeableState::Behind,
        },
        base: snap.base_ref,
    })
}

fn review_state(state: &ReviewState) -> String {
    match state {
        ReviewState::Approved => "APPROVED".into(),
        ReviewState::ChangesRequested => "CHANGES_REQUESTED".into(),
        ReviewState::Commented => "COMMENTED".into(),
        ReviewState::Dismissed => "DISMISSED".into(),
        ReviewState::Pending => "PENDING".into(),
        ReviewState::Other(s) => s.clone(),
    }
}

/// Reviews, inline review comments and conversation comments, in that order.
pub async fn feedback(
    client: &GithubClient,
    pull: &IssueRef,
) -> Result<Vec<Feedback>, GithubError> {
    let mut out = Vec::new();
    for r in list_reviews(client, pull).await? {
        out.push(Feedback {
            id: r.id,
            author: r.author.unwrap_or_default(),
            body: r.body,
            place: Place::Review {
                state: review_state(&r.state),
            },
        });
    }
    for c in list_review_comments(client, pull).await? {
        out.push(Feedback {
            id: c.id,
            author: c.author.clone().unwrap_or_default(),
            body: c.body.clone(),
            place: Place::Inline {
                thread: c.thread_id(),
                path: c.path,
                line: c.line.or(c.original_line),
                diff_hunk: c.diff_hunk,
            },
        });
    }
    for c in list_issue_comments(client, pull, None).await? {
        out.push(Feedback {
            id: c.id,
            author: c.author.unwrap_or_default(),
            body: c.body,
            place: Place::Conversation,
        });
    }
    Ok(out)
}

/// The check runs and commit statuses of `sha`.
pub async fn checks(
    client: &GithubClient,
    pull: &IssueRef,
    sha: &str,
) -> Result<Vec<Check>, GithubError> {
    let mut out = Vec::new();
    for run in check_runs_for(client, &pull.repo, sha).await? {
        let summary = [run.title.clone(), run.summary.clone()]
            .into_iter()
            .flatten()
            .filter(|s| !s.trim().is_empty())
            .collect::<Vec<_>>()
            .join("\n\n");
        let conclusion = match (&run.status, &run.conclusion) {
            (CheckStatus::Completed, Some(c)) => Some(c.as_str().to_string()),
            _ => None,
        };
        out.push(Check {
            name: run.name,
            conclusion,
            summary,
            text: run.text,
        });
    }
    for status in combined_status(client, &pull.repo, sha).await?.statuses {
        let conclusion = match &status.state {
            StatusState::Pending => None,
            StatusState::Success => Some("success".to_string()),
            StatusState::Failure => Some("failure".to_string()),
            StatusState::Error => Some("error".to_string()),
            StatusState::Other(s) => Some(s.clone()),
        };
        out.push(Check {
            name: status.context,
            conclusion,
            summary: status.description.unwrap_or_default(),
            text: None,
        });
    }
    Ok(out)
}

/// `login`'s permission on the repository (`none` for a login GitHub does not know).
pub async fn permission(
    client: &GithubClient,
    pull: &IssueRef,
    login: &str,
) -> Result<Permission, GithubError> {
    match permission_of(client, &pull.repo, login).await {
        Ok(p) => Ok(p),
        Err(GithubError::NotFound { .. }) => Ok(Permission::None),
        Err(e) => Err(e),
    }
}
