//! Claiming an issue for one attempt (spec §2 `mark_claimed`).
//!
//! Owns: re-reading the issue (still open, still offered), the one claim comment per (task,
//! attempt), found again by its hidden marker, then the label swap ready -> claimed.
//! Also the shared "comment once" helper landing uses.
//! Must not: post a comment without first looking for its marker; freeze anything but the
//! title and body read here.

use super::model::{Comment, Issue};
use serde_json::json;

use super::client::{encode_component, GithubClient, GithubError, Repeat};
use super::{IssueRef, Labels};
use crate::sources::{ClaimError, ClaimInfo, ClaimedTask};

/// Hidden marker of the claim comment for one attempt by one claimant.
pub fn claim_marker(task_id: &str, attempt: u32, claimant: &str) -> String {
    format!("<!-- polyphony:claim task={task_id} attempt={attempt} by={claimant} -->")
}

/// The hidden markers of a comment body in the exact form the bot writes them: a line of
/// its own that is one `<!-- polyphony:… -->` comment, outside fenced code blocks and
/// outside quoted text or tables (issue 24: a marker an agent planted inside the text the
/// bot quotes never counts, whatever it says). Pure.
pub fn marker_lines(body: &str) -> Vec<&str> {
    let mut fence: Option<(char, usize)> = None;
    let mut out = Vec::new();
    for line in body.lines() {
        let trimmed = line.trim_start();
        let run = |c: char| trimmed.chars().take_while(|&x| x == c).count();
        if let Some((c, n)) = fence {
            if trimmed.starts_with(c)
                && run(c) >= n
                && trimmed.trim_start_matches(c).trim().is_empty()
            {
                fence = None;
            }
            continue;
        }
        for c in ['`', '~'] {
            if run(c) >= 3 {
                fence = Some((c, run(c)));
            }
        }
        if fence.is_some() {
            continue;
        }
        let exact = line.trim_end();
        if exact.starts_with("<!-- polyphony:")
            && exact.ends_with(" -->")
            && exact.matches("<!--").count() == 1
            && exact.matches("-->").count() == 1
        {
            out.push(exact);
        }
    }
    out
}

/// Whether `body` holds `marker` in the exact form (see [`marker_lines`]).
pub fn has_marker(body: &str, marker: &str) -> bool {
    marker_lines(body).contains(&marker)
}

/// The claimant named by the earliest claim comment of the task, if any. Comment ids
/// grow monotonically, so every reader agrees on which claim came first.
pub fn first_claimant(comments: &[Comment], task_id: &str) -> Option<String> {
    let prefix = claim_marker_prefix(task_id);
    comments
        .iter()
        .filter_map(|c| {
            let body = c.body.as_deref()?;
            let rest = marker_lines(body)
                .into_iter()
                .find_map(|m| m.strip_prefix(prefix.as_str()))?;
            let end = rest.find("-->")?;
            let claimant = rest[..end]
                .split_whitespace()
                .find_map(|word| word.strip_prefix("by="))
                .unwrap_or("")
                .to_string();
            Some((c.id, claimant))
        })
        .min_by_key(|(id, _)| *id)
        .map(|(_, claimant)| claimant)
}

/// Prefix shared by every claim marker of a task (any attempt).
fn claim_marker_prefix(task_id: &str) -> String {
    format!("<!-- polyphony:claim task={task_id} attempt=")
}

/// Re-read the issue, swap labels, comment once; return the frozen title and body.
///
/// Idempotent: claiming the same attempt again finds the claimed label and the marker and
/// changes nothing. A later attempt of a task we already hold (claimed label + one of our
/// claim markers) is accepted without the ready label.
pub async fn claim_issue(
    client: &GithubClient,
    labels: &Labels,
    issue: &IssueRef,
    task_id: &str,
    info: &ClaimInfo,
) -> Result<ClaimedTask, ClaimError> {
    claim_issue_resuming(client, labels, issue, task_id, info, false).await
}

/// [`claim_issue`], told by the caller's store whether a claim of this task was left
/// half-done (a pending claim intent, issue 19). Then our own first claim marker is proof
/// enough that the issue is ours, whatever labels the interrupted swap left: a task's own
/// claim is never mistaken for someone else's release.
pub async fn claim_issue_resuming(
    client: &GithubClient,
    labels: &Labels,
    issue: &IssueRef,
    task_id: &str,
    info: &ClaimInfo,
    resuming: bool,
) -> Result<ClaimedTask, ClaimError> {
    let found: Issue = client
        .get_json(&format!("reading issue {issue}"), &issue.api_path())
        .await?;
    let no_longer = |reason: String| ClaimError::NoLongerReady {
        task_id: task_id.to_string(),
        reason,
    };
    if !found.is_open() {
        return Err(no_longer(format!("{issue} was closed")));
    }
    if found.pull_request.is_some() {
        return Err(no_longer(format!("{issue} is a pull request")));
    }
    if found.locked {
        return Err(no_longer(format!("{issue} was locked")));
    }
    let has = |name: &str| {
        found
            .labels
            .iter()
            .any(|l| l.name.eq_ignore_ascii_case(name))
    };
    let comments = list_comments(client, issue).await?;
    let first = first_claimant(&comments, task_id);
    if let Some(owner) = first.as_deref() {
        if owner != info.claimant {
            return Err(no_longer(format!(
                "{issue} is already claimed by another Polyphony instance ({owner})"
            )));
        }
    }
    let ours = first.as_deref() == Some(info.claimant.as_str());
    let held = ours && (has(&labels.claimed) || resuming);
    if !has(&labels.ready) && !held {
        return Err(no_longer(format!(
            "{issue} no longer carries the `{}` label",
            labels.ready
        )));
    }
    // The comment is the record of ownership, so it goes first and the labels follow:
    // a crash between the two leaves the issue offered with our marker (the retry
    // finishes the swap), never claimed-labelled with no owner (which nobody would take
    // again), and an instance that lost the race never touches the labels. The claimed
    // label is added before the ready label goes: no instant has neither (issue 19).
    let marker = claim_marker(task_id, info.attempt, &info.claimant);
    let body = format!(
        "Polyphony claimed this issue as task `{task_id}`: attempt {} by agent `{}`.\n\n{marker}",
        info.attempt, info.agent
    );
    let (comment_id, created) =
        ensure_comment(client, issue, &marker, &body, Some(comments)).await?;
    if created && first.is_none() {
        // Another instance may have read the issue as ready at the same moment: whoever
        // commented first owns it.
        let after = list_comments(client, issue).await?;
        if let Some(owner) = first_claimant(&after, task_id) {
            if owner != info.claimant {
                return Err(no_longer(format!(
                    "{issue} was claimed by another Polyphony instance ({owner}) at the same time"
                )));
            }
        }
    }
    if !has(&labels.claimed) {
        add_labels(client, issue, &[labels.claimed.as_str()]).await?;
    }
    crate::failpoint::hit("claim-labels");
    if has(&labels.ready) {
        remove_label(client, issue, &labels.ready).await?;
    }
    Ok(ClaimedTask {
        task_id: task_id.to_string(),
        title: found.title,
        body: found.body.unwrap_or_default(),
        comment_id: Some(comment_id),
    })
}

/// The comments of the issue (all pages) written by the token's own user. Hidden markers
/// decide ownership and idempotency, and anyone who can comment on the issue can type one:
/// only ours count (issue 11).
pub async fn list_comments(
    client: &GithubClient,
    issue: &IssueRef,
) -> Result<Vec<Comment>, GithubError> {
    let all: Vec<Comment> = client
        .get_all_pages(
            &format!("listing comments of {issue}"),
            &format!("{}/comments?per_page=100", issue.api_path()),
        )
        .await?;
    let me = client.viewer_login().await?;
    Ok(own_comments(all, me))
}

/// The comments whose author is `login` (GitHub logins are case-insensitive). Pure.
pub fn own_comments(comments: Vec<Comment>, login: &str) -> Vec<Comment> {
    comments
        .into_iter()
        .filter(|c| {
            c.user
                .as_ref()
                .is_some_and(|u| u.login.eq_ignore_ascii_case(login))
        })
        .collect()
}

/// Post `body` unless a comment containing `marker` exists; returns its id and whether it
/// was created now. When the POST's outcome is unknown (5xx, timeout), the comments are
/// listed again before a second and last try, so a comment never appears twice.
pub async fn ensure_comment(
    client: &GithubClient,
    issue: &IssueRef,
    marker: &str,
    body: &str,
    known: Option<Vec<Comment>>,
) -> Result<(u64, bool), GithubError> {
    let mut known = known;
    let mut retried = false;
    loop {
        let comments = match known.take() {
            Some(comments) => comments,
            None => list_comments(client, issue).await?,
        };
        if let Some(existing) = comments
            .iter()
            .find(|c| c.body.as_deref().is_some_and(|b| has_marker(b, marker)))
        {
            return Ok((existing.id, false));
        }
        let posted = client
            .post_json::<Comment>(
                &format!("commenting on {issue}"),
                &format!("{}/comments", issue.api_path()),
                &json!({ "body": body }),
                Repeat::Never,
            )
            .await;
        match posted {
            Ok(comment) => return Ok((comment.id, true)),
            Err(e) if e.outcome_unknown() && !retried => {
                tracing::warn!(%issue, error = %e, "comment outcome unknown: looking before retrying");
                retried = true;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Remove a label; already absent is fine.
pub async fn remove_label(
    client: &GithubClient,
    issue: &IssueRef,
    label: &str,
) -> Result<(), GithubError> {
    let path = format!("{}/labels/{}", issue.api_path(), encode_component(label));
    client
        .delete(&format!("removing label `{label}` from {issue}"), &path)
        .await
        .map(|_| ())
}

/// Add labels (GitHub creates unknown labels; adding a present one changes nothing, so this
/// is safe to repeat).
pub async fn add_labels(
    client: &GithubClient,
    issue: &IssueRef,
    names: &[&str],
) -> Result<(), GithubError> {
    client
        .post_json::<serde_json::Value>(
            &format!("labelling {issue} with {}", names.join(", ")),
            &format!("{}/labels", issue.api_path()),
            &json!({ "labels": names }),
            Repeat::Safe,
        )
        .await
        .map(|_| ())
}
