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
