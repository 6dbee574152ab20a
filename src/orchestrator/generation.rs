//! Bringing a BLOCKED task back as its next generation (`domain::generation`): by
//! `polyphony retry`, or by a person re-labelling the issue ready, which the daemon's poll
//! notices.
//!
//! Exactly once: [`Store::insert_generation`] links old and new in one transaction, and a
//! re-labelled issue only counts when its BLOCKED generation was reported at the source
//! (the ready label was taken off by us) before the poll listed the issue, so a label we
//! have not removed yet, or a block we could not report, never spawns generations.

use chrono::{DateTime, Utc};

use crate::config::Config;
use crate::domain::{generation, SourceKind, Task, TaskState};
use crate::sources::github::{FaultPolicy, GithubClient, GithubSettings, GithubSource};
use crate::store::{GenerationInsert, Store};

/// What a retry made.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Retried {
    /// The BLOCKED task.
    pub from: String,
    /// Its next generation, DISCOVERED.
    pub task: String,
    pub generation: u32,
}

/// Why a task could not be retried, for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotRetryable(pub String);

/// Retries the newest generation of `id`: for a GitHub task the issue is offered again
/// first (ready label on, blocked off), then the new generation is recorded. `github` is
/// the source, or why there is none.
pub async fn retry(
    store: &Store,
    github: Result<&GithubSource, &str>,
    id: &str,
    now: DateTime<Utc>,
) -> anyhow::Result<Result<Retried, NotRetryable>> {
    let Some(newest) = store.newest_generation(id)? else {
        return Ok(Err(NotRetryable(format!("no task `{id}`"))));
    };
    if let Err(why) = generation::may_retry(&newest) {
        let why = if newest.id == id {
            why
        } else {
            format!("{id} was retried as {}; {why}", newest.id)
        };
        return Ok(Err(NotRetryable(why)));
    }
    if let Some(f) = store.followup(&newest.id)? {
        // A follow-up works on a pull request, not an issue: a new generation would claim
        // and open a pull request of its own. The shepherd hands the PR over instead.
        return Ok(Err(NotRetryable(format!(
            "{} is a follow-up of {}'s pull request: it is not retried; the shepherd hands              the pull request to people, who can ask again with a new review comment",
            newest.id, f.pull_task_id
        ))));
    }
    if newest.source == SourceKind::Github {
        // A task released to another Polyphony instance (pipeline `claim_at_source`) is
        // that instance's issue: labelling it ready here would take it back.
        if store.released_at(&newest.id)?.is_some() {
            return Ok(Err(NotRetryable(format!(
                "{} was released to another Polyphony instance, which owns {}",
                newest.id, newest.source_ref
            ))));
        }
        let github = match github {
            Ok(github) => github,
            Err(why) => {
                return Ok(Err(NotRetryable(format!(
                    "{} is a GitHub task: retrying it labels the issue ready again, which \
                     needs GitHub: {why}",
                    newest.id
                ))))
            }
        };
        // Before the new generation exists: if this fails nothing changed here, and the
        // command can be repeated.
        if let Err(e) = github.offer_again(&newest).await {
            return Ok(Err(NotRetryable(format!(
                "cannot label {} ready again: {e}",
                newest.source_ref
            ))));
        }
    }
    let next = generation::next(&newest, None, now);
    match store.insert_generation(&newest.id, &next, now)? {
        GenerationInsert::Created => {}
        // Issue 24: only the retry that made the generation reports it. Another `retry`
        // (or the daemon's poll, seeing the label put back) made it between our read and
        // our write: that one happened, this one did not.
        GenerationInsert::AlreadyRetried(other) => {
            return Ok(Err(NotRetryable(format!(
                "{} was retried as {other} meanwhile (by another `polyphony retry` or the \
                 daemon's poll); nothing more to do",
                newest.id
            ))))
        }
        GenerationInsert::NotBlocked(state) => {
            return Ok(Err(NotRetryable(format!(
                "{} is {state} now, not BLOCKED",
                newest.id
            ))))
        }
    }
    Ok(Ok(Retried {
        from: newest.id,
        generation: generation::number(&next),
        task: next.id,
    }))
}

/// A polled issue whose task is known: when its newest generation is BLOCKED and was
/// reported before this poll listed the issue, a person put the ready label back, so the
/// next generation is made (from the issue as read now). Returns its id.
pub fn reopen_if_relabelled(
    store: &Store,
    polled: &Task,
    now: DateTime<Utc>,
) -> anyhow::Result<Option<String>> {
    let Some(newest) = store.find_by_source_ref(&polled.source_ref)? else {
        return Ok(None);
    };
    if !matches!(newest.state, TaskState::Blocked | TaskState::Cancelled) {
        return Ok(None);
    }
    // `polled.created_at` is when this poll started listing.
    match store.block_reported_at(&newest.id)? {
        Some(reported) if reported < polled.created_at => {}
        _ => return Ok(None),
    }
    let next = generation::next(&newest, Some(polled), now);
    match store.insert_generation(&newest.id, &next, now)? {
        GenerationInsert::Created => {
            tracing::info!(
                task = %next.id,
                retry_of = %newest.id,
                "{} was labelled ready again: new generation",
                polled.source_ref
            );
            Ok(Some(next.id))
        }
        _ => Ok(None),
    }
}

/// A GitHub source from the configuration and the environment, without Docker (for verbs
/// that only talk to GitHub).
pub fn github_source(config: &Config) -> anyhow::Result<GithubSource> {
    let token_var = super::github_token_var(config);
    let client = GithubClient::from_env(
        token_var.as_deref(),
        |n| std::env::var(n).ok(),
        FaultPolicy::default(),
    )?;
    let settings = GithubSettings::from_config(&config.global().github, &config.global().repos)?;
    Ok(GithubSource::new(client, settings))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration;

    fn issue(id: &str, at: DateTime<Utc>) -> Task {
        Task::new(id, SourceKind::Github, id, "https://x/r.git", "Fix it", at)
    }

    fn block(store: &Store, id: &str, at: DateTime<Utc>) {
        store.claim(id, at).unwrap().unwrap();
        store
            .transition(id, TaskState::Claimed, TaskState::Failed, "x", at)
            .unwrap();
        store
            .transition(id, TaskState::Failed, TaskState::Blocked, "y", at)
            .unwrap();
    }

    #[test]
    fn a_relabelled_issue_comes_back_once_and_only_after_its_report() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("queue.db")).unwrap();
        let t0 = chrono::TimeZone::with_ymd_and_hms(&Utc, 2026, 3, 1, 12, 0, 0).unwrap();
        store.insert_task(&issue("o/r#1", t0)).unwrap();
        // Not BLOCKED: a poll finding the ready label changes nothing.
        let polled = issue("o/r#1", t0 + Duration::seconds(1));
        assert_eq!(reopen_if_relabelled(&store, &polled, t0).unwrap(), None);
        block(&store, "o/r#1", t0);
        // BLOCKED but the report (which takes the label off) has not happened: the label
        // is still ours, not a person's.
        assert_eq!(reopen_if_relabelled(&store, &polled, t0).unwrap(), None);
        // Reported after this poll listed the issue: still not a re-label.
        store
            .mark_block_reported("o/r#1", t0 + Duration::seconds(2))
            .unwrap();
        assert_eq!(reopen_if_relabelled(&store, &polled, t0).unwrap(), None);
        // A later poll sees the label again: one new generation, fresh text.
        let mut later = issue("o/r#1", t0 + Duration::seconds(3));
        later.body = "clarified".into();
        assert_eq!(
            reopen_if_relabelled(&store, &later, t0).unwrap(),
            Some("o/r#1.2".into())
        );
        let g2 = store.get_task("o/r#1.2").unwrap().unwrap();
        assert_eq!(
            (g2.state, g2.body.as_str()),
            (TaskState::Discovered, "clarified")
        );
        // The next polls find generation 2 (not BLOCKED): nothing more.
        let again = issue("o/r#1", t0 + Duration::seconds(4));
        assert_eq!(reopen_if_relabelled(&store, &again, t0).unwrap(), None);
        assert_eq!(store.list_tasks(None, None).unwrap().len(), 2);
    }

    #[tokio::test]
    async fn a_blocked_follow_up_is_not_retried() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("queue.db")).unwrap();
        let t0 = chrono::TimeZone::with_ymd_and_hms(&Utc, 2026, 3, 1, 12, 0, 0).unwrap();
        store.insert_task(&issue("o/r#1", t0)).unwrap();
        store
            .record_pull(&crate::store::PullRecord::opened(
                "o/r#1",
                "o/r",
                2,
                "polyphony/o_r_1-a1",
                "main",
                &"a".repeat(40),
                t0,
            ))
            .unwrap();
        let keys = vec!["review-comment:3".to_string()];
        let plan = serde_json::json!({});
        assert!(store
            .insert_followup("o/r#1", &issue("o/r#1-f1", t0), &plan, &keys, t0)
            .unwrap());
        block(&store, "o/r#1-f1", t0);
        let refused = retry(&store, Err("no token"), "o/r#1-f1", t0)
            .await
            .unwrap();
        assert!(refused.unwrap_err().0.contains("follow-up of o/r#1"));
        assert!(store.get_task("o/r#1-f1.2").unwrap().is_none());
    }

    #[tokio::test]
    async fn retry_makes_the_next_generation_but_never_takes_back_a_released_issue() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("queue.db")).unwrap();
        let t0 = chrono::TimeZone::with_ymd_and_hms(&Utc, 2026, 3, 1, 12, 0, 0).unwrap();
        let local = Task::new("local-1", SourceKind::Local, "local:local-1", "/r", "t", t0);
        store.insert_task(&local).unwrap();
        block(&store, "local-1", t0);
        let done = retry(&store, Err("no token"), "local-1", t0).await.unwrap();
        assert_eq!(
            done,
            Ok(Retried {
                from: "local-1".into(),
                task: "local-1.2".into(),
                generation: 2
            })
        );
        // Naming the old generation again means the newest, which is not BLOCKED.
        let again = retry(&store, Err("no token"), "local-1", t0).await.unwrap();
        assert!(again.unwrap_err().0.contains("retried as local-1.2"));

        store.insert_task(&issue("o/r#2", t0)).unwrap();
        store.claim("o/r#2", t0).unwrap().unwrap();
        // Released is data on the settlement, whatever the reason's words (issue 30).
        let released = crate::store::Settlement {
            failures: 0,
            next_attempt_at: None,
            block: Some(crate::store::BlockSettlement {
                reason: "another instance has it".into(),
                report: false,
                released: true,
            }),
        };
        store
            .settle_failure("o/r#2", TaskState::Claimed, "x", &released, t0)
            .unwrap();
        // A block whose reason happens to start with "released:" is not a release.
        store.insert_task(&issue("o/r#4", t0)).unwrap();
        store.claim("o/r#4", t0).unwrap().unwrap();
        store
            .transition(
                "o/r#4",
                TaskState::Claimed,
                TaskState::Failed,
                "released: x",
                t0,
            )
            .unwrap();
        store
            .transition(
                "o/r#4",
                TaskState::Failed,
                TaskState::Blocked,
                "released: x",
                t0,
            )
            .unwrap();
        let not_released = retry(&store, Err("no token"), "o/r#4", t0).await.unwrap();
        assert!(not_released
            .unwrap_err()
            .0
            .contains("needs GitHub: no token"));
        let refused = retry(&store, Err("no token"), "o/r#2", t0).await.unwrap();
        assert!(refused
            .unwrap_err()
            .0
            .contains("another Polyphony instance"));
        store.insert_task(&issue("o/r#3", t0)).unwrap();
        block(&store, "o/r#3", t0);
        let no_token = retry(&store, Err("no token"), "o/r#3", t0).await.unwrap();
        assert!(no_token.unwrap_err().0.contains("needs GitHub: no token"));
        assert!(store.get_task("o/r#3.2").unwrap().is_none());
    }
}
