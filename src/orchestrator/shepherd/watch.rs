//! Watching the pull requests this home opened (the IO shell around `decide`): once per
//! daemon poll, each watched pull request is read, its new feedback and the head's checks
//! gathered, the authors' permissions asked, and the decision carried out — a follow-up
//! task inserted (with its handled keys, one transaction), a report or the hand-off posted
//! once (hidden markers), watching ended when it is merged or closed.
//!
//! Must not: run an agent or push (follow-ups go through the pipeline like any task), or
//! act while a person holds the pull request (the hold label).

use std::collections::BTreeSet;

use super::decide::{self, Action, PullState, Situation};
use super::followup;
use super::github;
use super::text;
use crate::domain::TaskState;
use crate::orchestrator::Orchestrator;
use crate::sources::github::claim::ensure_comment;
use crate::sources::github::{GithubSource, IssueRef, RepoSlug};
use crate::store::{PullLook, PullRecord, Store};

/// What one round did, for the log and the tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Round {
    /// Follow-up tasks inserted.
    pub followups: Vec<String>,
    /// Pull requests no longer watched.
    pub finished: Vec<String>,
}

/// Looks at every watched pull request once. Errors are logged per pull request: one bad
/// answer never stops the others or the daemon.
pub async fn round(orch: &Orchestrator, store: &Store) -> Round {
    let mut out = Round::default();
    let config = &orch.config.global().shepherd;
    if !config.enabled {
        return out;
    }
    let pulls = match store.watched_pulls() {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(error = %e, "cannot list the watched pull requests");
            return out;
        }
    };
    if pulls.is_empty() {
        return out;
    }
    let github = match orch.github() {
        Ok(g) => g,
        Err(e) => {
            tracing::warn!(error = %e, "pull requests are watched but GitHub is not configured");
            return out;
        }
    };
    for pull in pulls {
        match watch_one(orch, github, store, &pull).await {
            Ok(Some(Action::StopWatching(_))) => out.finished.push(pull.task_id.clone()),
            Ok(Some(Action::FollowUp(_))) => {
                out.followups
                    .push(format!("{}-f{}", pull.task_id, pull.followups + 1))
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(pull = %format!("{}#{}", pull.repo, pull.number), error = %e, "cannot watch the pull request")
            }
        }
    }
    out
}

/// One pull request: read, decide, act. Returns the main action taken, if any.
async fn watch_one(
    orch: &Orchestrator,
    github: &GithubSource,
    store: &Store,
    pull: &PullRecord,
) -> anyhow::Result<Option<Action>> {
    let client = github.client();
    let config = &orch.config.global().shepherd;
    let pr = IssueRef {
        repo: RepoSlug::parse(&pull.repo)?,
        number: pull.number,
    };
    let look = github::look(client, &pr).await?;
    let feedback = if look.view.state == PullState::Open {
        github::feedback(client, &pr).await?
    } else {
        Vec::new()
    };
    let checks = if look.view.state == PullState::Open && !look.view.head_sha.is_empty() {
        github::checks(client, &pr, &look.view.head_sha).await?
    } else {
        Vec::new()
    };
    let bot = client.viewer_login().await?.to_string();
    let handled = store.handled_keys(&pull.task_id)?;

    // Ask for permissions only for authors of feedback not handled yet.
    let mut trusted = BTreeSet::new();
    let authors: BTreeSet<&str> = feedback
        .iter()
        .filter(|f| !handled.contains(&f.key()) && !f.author.eq_ignore_ascii_case(&bot))
        .map(|f| f.author.as_str())
        .collect();
    for author in authors {
        let permission = github::permission(client, &pr, author).await?;
        if decide::is_trusted(permission, config) {
            trusted.insert(author.to_string());
        }
    }

    let followups = store.followups_of(&pull.task_id)?;
    let running = followups
        .iter()
        .any(|f| !matches!(f.state, TaskState::Landed | TaskState::Blocked));
    let mut blocked = Vec::new();
    for f in followups.iter().filter(|f| f.state == TaskState::Blocked) {
        let why = store
            .transitions(&f.task_id)?
            .last()
            .map(|t| t.reason.clone())
            .unwrap_or_default();
        blocked.push((f.task_id.clone(), why));
    }

    let actions = decide::decide(&Situation {
        pull: &look.view,
        feedback: &feedback,
        checks: &checks,
        trusted: &trusted,
        bot: &bot,
        handled: &handled,
        followups: pull.followups,
        followup_running: running,
        blocked_followups: &blocked,
        config,
    });

    let mut main = None;
    let mut watching = true;
    for action in actions {
        match &action {
            Action::StopWatching(state) => {
                tracing::info!(pull = %pr, state = state.as_str(), "pull request finished: no longer watched");
                watching = false;
            }
            Action::Ignore(keys) => store.mark_handled(&pull.task_id, keys, orch.now())?,
            Action::FollowUp(plan) => {
                let landing = store
                    .get_task(&pull.task_id)?
                    .ok_or_else(|| anyhow::anyhow!("the landing task {} is gone", pull.task_id))?;
                let mut current = pull.clone();
                current.head_sha = look.view.head_sha.clone();
                current.base = look.base.clone();
                let task =
                    followup::new_task(&landing, &current, plan, pull.followups + 1, orch.now());
                let json = serde_json::to_value(plan)?;
                if store.insert_followup(&pull.task_id, &task, &json, &plan.keys, orch.now())? {
                    tracing::info!(pull = %pr, task = %task.id, "follow-up task: {}", task.title);
                }
            }
            Action::ReportRepeated { checks, keys } => {
                let marker_key = keys.join(",");
                let body = text::repeated_report(checks, &marker_key);
                let marker = format!("<!-- polyphony:report:{marker_key} -->");
                ensure_comment(client, &pr, &marker, &body, None).await?;
                store.mark_handled(&pull.task_id, keys, orch.now())?;
            }
            Action::HandOff { reasons } => {
                let body = text::hand_off(reasons, &config.hold_label);
                ensure_comment(client, &pr, &text::hand_off_marker(), &body, None).await?;
                store.mark_handled(&pull.task_id, &[decide::HANDED_OFF.to_string()], orch.now())?;
            }
        }
        if !matches!(action, Action::Ignore(_)) {
            main = Some(action);
        }
    }
    store.update_pull(
        &pull.task_id,
        &PullLook {
            head_sha: look.view.head_sha.clone(),
            state: look.view.state.as_str().to_string(),
            checks: Some(checks_summary(&checks).to_string()),
            review: review_summary(&feedback).map(String::from),
            mergeable: Some(
                match look.view.mergeable {
                    Some(true) => "yes",
                    Some(false) => "no",
                    None => "unknown",
                }
                .to_string(),
            ),
            watching,
        },
        orch.now(),
    )?;
    Ok(main)
}

/// `failing`, `pending`, `passing` or `none`, for `status` (pure).
pub fn checks_summary(checks: &[decide::Check]) -> &'static str {
    if checks.iter().any(decide::Check::failed) {
        "failing"
    } else if checks.iter().any(|c| c.conclusion.is_none()) {
        "pending"
    } else if checks.is_empty() {
        "none"
    } else {
        "passing"
    }
}

/// The latest review verdict (`approved`, `changes_requested`), for `status` (pure).
pub fn review_summary(feedback: &[decide::Feedback]) -> Option<&'static str> {
    feedback.iter().rev().find_map(|f| match &f.place {
        decide::Place::Review { state } if state.eq_ignore_ascii_case("APPROVED") => {
            Some("approved")
        }
        decide::Place::Review { state } if state.eq_ignore_ascii_case("CHANGES_REQUESTED") => {
            Some("changes_requested")
        }
        _ => None,
    })
}
