//! Review feedback on a pull request (issue 15): reviews, inline review comments and the
//! conversation's issue comments, and our replies to them.
//!
//! Owns: reading feedback with conditional requests (every page; an unchanged list costs
//! `304`s) into plain structs, posting a reply in a review thread or a conversation comment,
//! and finding a reply we already posted (by a hidden marker, only in our own comments) so a
//! restart never replies twice.
//! Must not: judge feedback (who is trusted, what is new, what is addressed to us): the
//! shepherd does, over these values.

use serde::Deserialize;
use serde_json::json;

use super::client::{GithubClient, GithubError, Repeat};
use super::model::User;
use super::IssueRef;

/// A review's `state`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReviewState {
    Approved,
    ChangesRequested,
    Commented,
    Dismissed,
    /// Not submitted yet (only its author sees it).
    Pending,
    Other(String),
}

impl ReviewState {
    pub fn parse(value: &str) -> ReviewState {
        match value {
            "APPROVED" => ReviewState::Approved,
            "CHANGES_REQUESTED" => ReviewState::ChangesRequested,
            "COMMENTED" => ReviewState::Commented,
            "DISMISSED" => ReviewState::Dismissed,
            "PENDING" => ReviewState::Pending,
            other => ReviewState::Other(other.to_string()),
        }
    }
}

/// A submitted (or pending) review.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Review {
    pub id: u64,
    pub author: Option<String>,
    pub state: ReviewState,
    /// The review's summary text (empty when the reviewer wrote none).
    pub body: String,
    /// The head sha the review was made on.
    pub commit_id: Option<String>,
    pub submitted_at: Option<String>,
    pub html_url: Option<String>,
}

/// Which side of the diff an inline comment sits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The base (deleted lines).
    Left,
    /// The head (added and context lines).
    Right,
}

/// An inline review comment (one per thread root; replies carry `in_reply_to_id`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewComment {
    pub id: u64,
    pub review_id: Option<u64>,
    /// The root comment of the thread this one replies to.
    pub in_reply_to_id: Option<u64>,
    pub author: Option<String>,
    pub body: String,
    pub path: String,
    /// The line in the file (of `side`) as of `commit_id`; `None` when the line is no
    /// longer in the diff (outdated), then `original_line` still says where it was.
    pub line: Option<u64>,
    pub original_line: Option<u64>,
    /// First line of a multi-line comment.
    pub start_line: Option<u64>,
    pub side: Option<Side>,
    /// The diff hunk up to the commented line, as GitHub shows it above the thread.
    pub diff_hunk: String,
    pub commit_id: String,
    pub original_commit_id: String,
    pub created_at: Option<String>,
    pub html_url: Option<String>,
}

impl ReviewComment {
    /// The id of the thread this comment belongs to (its root comment).
    pub fn thread_id(&self) -> u64 {
        self.in_reply_to_id.unwrap_or(self.id)
    }
}

/// A comment in the pull request's conversation (an issue comment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssueComment {
    pub id: u64,
    pub author: Option<String>,
    pub body: String,
    pub created_at: Option<String>,
    pub html_url: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RawReview {
    id: u64,
    #[serde(default)]
    user: Option<User>,
    #[serde(default)]
    state: String,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    commit_id: Option<String>,
    #[serde(default)]
    submitted_at: Option<String>,
    #[serde(default)]
    html_url: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RawReviewComment {
    id: u64,
    #[serde(default)]
    pull_request_review_id: Option<u64>,
    #[serde(default)]
    in_reply_to_id: Option<u64>,
    #[serde(default)]
    user: Option<User>,
    #[serde(default)]
    body: String,
    #[serde(default)]
    path: String,
    #[serde(default)]
    line: Option<u64>,
    #[serde(default)]
    original_line: Option<u64>,
    #[serde(default)]
    start_line: Option<u64>,
    #[serde(default)]
    side: Option<String>,
    #[serde(default)]
    diff_hunk: String,
    #[serde(default)]
    commit_id: String,
    #[serde(default)]
    original_commit_id: String,
    #[serde(default)]
    created_at: Option<String>,
    #[serde(default)]
    html_url: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RawIssueComment {
    id: u64,
    #[serde(default)]
    user: Option<User>,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    created_at: Option<String>,
    #[serde(default)]
    html_url: Option<String>,
}

impl From<RawReview> for Review {
    fn from(raw: RawReview) -> Review {
        Review {
            id: raw.id,
            author: raw.user.map(|u| u.login),
            state: ReviewState::parse(&raw.state),
            body: raw.body.unwrap_or_default(),
            commit_id: raw.commit_id,
            submitted_at: raw.submitted_at,
            html_url: raw.html_url,
        }
    }
}

impl From<RawReviewComment> for ReviewComment {
    fn from(raw: RawReviewComment) -> ReviewComment {
        ReviewComment {
            id: raw.id,
            review_id: raw.pull_request_review_id,
            in_reply_to_id: raw.in_reply_to_id,
            author: raw.user.map(|u| u.login),
            body: raw.body,
            path: raw.path,
            line: raw.line,
            original_line: raw.original_line,
            start_line: raw.start_line,
            side: match raw.side.as_deref() {
                Some("LEFT") => Some(Side::Left),
                Some("RIGHT") => Some(Side::Right),
                _ => None,
            },
            diff_hunk: raw.diff_hunk,
            commit_id: raw.commit_id,
            original_commit_id: raw.original_commit_id,
            created_at: raw.created_at,
            html_url: raw.html_url,
        }
    }
}

impl From<RawIssueComment> for IssueComment {
    fn from(raw: RawIssueComment) -> IssueComment {
        IssueComment {
            id: raw.id,
            author: raw.user.map(|u| u.login),
            body: raw.body.unwrap_or_default(),
            created_at: raw.created_at,
            html_url: raw.html_url,
        }
    }
}

fn pulls_path(pull: &IssueRef) -> String {
    format!("{}/pulls/{}", pull.repo.api_path(), pull.number)
}

/// Every review of the pull request, oldest first.
pub async fn list_reviews(
    client: &GithubClient,
    pull: &IssueRef,
) -> Result<Vec<Review>, GithubError> {
    let raw: Vec<RawReview> = client
        .get_all_pages_cached(
            &format!("listing reviews of {pull}"),
            &format!("{}/reviews?per_page=100", pulls_path(pull)),
        )
        .await?;
    Ok(raw.into_iter().map(Review::from).collect())
}

/// Every inline review comment of the pull request (thread roots and replies), oldest first.
pub async fn list_review_comments(
    client: &GithubClient,
    pull: &IssueRef,
) -> Result<Vec<ReviewComment>, GithubError> {
    let raw: Vec<RawReviewComment> = client
        .get_all_pages_cached(
            &format!("listing review comments of {pull}"),
            &format!("{}/comments?per_page=100", pulls_path(pull)),
        )
        .await?;
    Ok(raw.into_iter().map(ReviewComment::from).collect())
}

/// The conversation comments of the pull request with an id above `after_id` (all when
/// `None`), oldest first. Ids grow with time on GitHub, so the last id handled is a cursor.
pub async fn list_issue_comments(
    client: &GithubClient,
    pull: &IssueRef,
    after_id: Option<u64>,
) -> Result<Vec<IssueComment>, GithubError> {
    let raw: Vec<RawIssueComment> = client
        .get_all_pages_cached(
            &format!("listing comments of {pull}"),
            &format!("{}/comments?per_page=100", pull.api_path()),
        )
        .await?;
    Ok(raw
        .into_iter()
        .filter(|c| after_id.is_none_or(|after| c.id > after))
        .map(IssueComment::from)
        .collect())
}

/// Reply in the thread of review comment `comment_id` (a reply to a reply goes to the
/// thread's root, as GitHub does). Not repeated on an unknown outcome: see
/// [`ensure_review_reply`].
pub async fn reply_to_review_comment(
    client: &GithubClient,
    pull: &IssueRef,
    comment_id: u64,
    body: &str,
) -> Result<ReviewComment, GithubError> {
    let raw: RawReviewComment = client
        .post_json(
            &format!("replying to review comment {comment_id} on {pull}"),
            &format!("{}/comments/{comment_id}/replies", pulls_path(pull)),
            &json!({ "body": body }),
            Repeat::Never,
        )
        .await?;
    Ok(raw.into())
}

/// Post `body` in the conversation of the pull request. Not repeated on an unknown
/// outcome: `claim::ensure_comment` is the marker-checked form.
pub async fn comment_on_pull(
    client: &GithubClient,
    pull: &IssueRef,
    body: &str,
) -> Result<IssueComment, GithubError> {
    let raw: RawIssueComment = client
        .post_json(
            &format!("commenting on {pull}"),
            &format!("{}/comments", pull.api_path()),
            &json!({ "body": body }),
            Repeat::Never,
        )
        .await?;
    Ok(raw.into())
}

/// Our reply in the thread of `comment_id` holding `marker`, if one exists. Pure.
pub fn find_own_reply<'a>(
    comments: &'a [ReviewComment],
    thread_id: u64,
    me: &str,
    marker: &str,
) -> Option<&'a ReviewComment> {
    comments.iter().find(|c| {
        c.in_reply_to_id == Some(thread_id)
            && c.author
                .as_deref()
                .is_some_and(|a| a.eq_ignore_ascii_case(me))
            && super::claim::has_marker(&c.body, marker)
    })
}

/// Reply in the thread of `comment_id` unless our reply holding `marker` is there already;
/// returns the reply's id and whether it was posted now. When the POST's outcome is unknown
/// (5xx, timeout) the thread is read again before a second and last try, so a reply never
/// appears twice.
pub async fn ensure_review_reply(
    client: &GithubClient,
    pull: &IssueRef,
    comment_id: u64,
    marker: &str,
    body: &str,
) -> Result<(u64, bool), GithubError> {
    let me = client.viewer_login().await?.to_string();
    let mut retried = false;
    loop {
        let comments = list_review_comments(client, pull).await?;
        let thread_id = comments
            .iter()
            .find(|c| c.id == comment_id)
            .map(ReviewComment::thread_id)
            .unwrap_or(comment_id);
        if let Some(existing) = find_own_reply(&comments, thread_id, &me, marker) {
            return Ok((existing.id, false));
        }
        match reply_to_review_comment(client, pull, comment_id, body).await {
            Ok(reply) => return Ok((reply.id, true)),
            Err(e) if e.outcome_unknown() && !retried => {
                tracing::warn!(%pull, comment_id, error = %e, "reply outcome unknown: looking before retrying");
                retried = true;
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comment(id: u64, reply_to: Option<u64>, author: &str, body: &str) -> ReviewComment {
        ReviewComment::from(
            serde_json::from_value::<RawReviewComment>(json!({
                "id": id, "in_reply_to_id": reply_to, "user": {"login": author},
                "body": body, "path": "src/lib.rs", "line": 3, "side": "RIGHT",
                "diff_hunk": "@@ -1,2 +1,3 @@", "commit_id": "a", "original_commit_id": "a",
            }))
            .unwrap(),
        )
    }

    #[test]
    fn own_replies_are_found_by_thread_author_and_marker() {
        let comments = [
            comment(1, None, "alice", "rename this"),
            comment(2, Some(1), "mallory", "<!-- polyphony:reply:m:1 -->"),
            // Quoted or inline, a marker is text, not ours (issue 24).
            comment(
                5,
                Some(1),
                "polyphony-bot",
                "> <!-- polyphony:reply:m:1 -->",
            ),
            comment(
                6,
                Some(1),
                "polyphony-bot",
                "x <!-- polyphony:reply:m:1 -->",
            ),
            comment(
                3,
                Some(1),
                "Polyphony-Bot",
                "done\n\n<!-- polyphony:reply:m:1 -->",
            ),
            comment(4, Some(9), "polyphony-bot", "<!-- polyphony:reply:m:1 -->"),
        ];
        let marker = "<!-- polyphony:reply:m:1 -->";
        assert_eq!(
            find_own_reply(&comments, 1, "polyphony-bot", marker).map(|c| c.id),
            Some(3)
        );
        assert_eq!(
            find_own_reply(
                &comments,
                1,
                "polyphony-bot",
                "<!-- polyphony:reply:m:2 -->"
            ),
            None
        );
        assert_eq!(comments[1].thread_id(), 1);
        assert_eq!(comments[0].thread_id(), 1);
        assert_eq!(comments[0].side, Some(Side::Right));
    }

    #[test]
    fn review_states_parse() {
        for (s, state) in [
            ("APPROVED", ReviewState::Approved),
            ("CHANGES_REQUESTED", ReviewState::ChangesRequested),
            ("COMMENTED", ReviewState::Commented),
            ("DISMISSED", ReviewState::Dismissed),
            ("PENDING", ReviewState::Pending),
            ("NEW", ReviewState::Other("NEW".into())),
        ] {
            assert_eq!(ReviewState::parse(s), state);
        }
    }
}
