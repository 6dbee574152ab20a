//! A follow-up task (issue 15): its making, and what the pipeline does differently for one.
//!
//! A follow-up is a GitHub task of its own (LANDED stays terminal, spec §4) whose id is the
//! landing task's plus `-f<n>`, whose source reference is the pull request and whose base is
//! the pull request's branch. The pipeline runs it like any task — routing, identity and
//! its cost ceiling, container, verification — with these differences, each a call into
//! this module: nothing is claimed at the source; the workspace is a fresh clone of the PR
//! branch and its branch keeps the PR branch's name (with the base merged in, markers left,
//! when the plan says so; or put on the base with `shepherd.conflicts: rebase` when the
//! branch is ours alone); `.polyphony.yaml` is read at the PR's base; the push goes on top
//! of the PR branch (a fast-forward, or for a rebase `--force-with-lease` to the head read;
//! a moved branch fails the attempt); no
//! pull request is opened; each piece of feedback gets one reply naming the commit; and a
//! block is never reported on the issue (the watcher hands the PR over instead).
//!
//! Exactly once: the follow-up task and its handled keys are one transaction
//! (`Store::insert_followup`); its commit is made once and recorded (kv `commit:`); push
//! and replies run under the attempt's `land` intent, so a kill is finished by the resumed
//! verification, and each reply is found again by its hidden marker before it is posted.

use chrono::{DateTime, Utc};

use super::decide::{Feedback, FollowUp, Place};
use super::text;
use crate::domain::{SourceKind, Task};
use crate::sources::github::IssueRef;
use crate::sources::{ReplyPlace, Source, SourceError};
use crate::store::{PullRecord, Store};

/// Metadata key: the landing task whose pull request this follow-up works on.
pub const FOLLOWUP_OF: &str = "followup_of";
/// Metadata key: the pull request's number.
pub const PULL_NUMBER: &str = "pull_number";

/// What the pipeline needs to run a follow-up.
#[derive(Debug, Clone, PartialEq)]
pub struct FollowUpRun {
    pub pull: PullRecord,
    pub plan: FollowUp,
}

impl FollowUpRun {
    /// The branch the workspace keeps and the push goes to: the pull request's.
    pub fn branch(&self) -> &str {
        &self.pull.branch
    }

    /// The base to merge in before the agent runs, when the plan says so.
    pub fn merge_base(&self) -> Option<String> {
        self.plan.merge_base.then(|| self.pull.base.clone())
    }

    /// Where `.polyphony.yaml` is read: the pull request's base, never its branch.
    pub fn config_ref(&self) -> &str {
        &self.pull.base
    }
}

/// The follow-up `task_id` is, with its pull request and plan; `None` for any other task.
pub fn load(store: &Store, task_id: &str) -> anyhow::Result<Option<FollowUpRun>> {
    let Some(record) = store.followup(task_id)? else {
        return Ok(None);
    };
    let Some(pull) = store.pull(&record.pull_task_id)? else {
        return Ok(None);
    };
    let plan: FollowUp = serde_json::from_value(record.plan)?;
    Ok(Some(FollowUpRun { pull, plan }))
}

/// The follow-up task for `plan` on `pull` (pure): the `seq`-th of the pull request.
pub fn new_task(
    landing: &Task,
    pull: &PullRecord,
    plan: &FollowUp,
    seq: u32,
    now: DateTime<Utc>,
) -> Task {
    let mut task = Task::new(
        format!("{}-f{seq}", pull.task_id),
        SourceKind::Github,
        format!("{}#{}", pull.repo, pull.number),
        landing.repo.clone(),
        text::title(pull.number, plan),
        now,
    );
    task.body = text::body(pull.number, &pull.branch, &pull.base, plan);
    task.base_ref = Some(pull.branch.clone());
    task.labels = landing.labels.clone();
    task.metadata
        .insert(FOLLOWUP_OF.into(), pull.task_id.clone());
    task.metadata
        .insert(PULL_NUMBER.into(), pull.number.to_string());
    task
}

/// The pull request number at the end of its URL (`…/pull/7`).
pub fn number_of(pr_url: &str) -> Option<u64> {
    let (_, tail) = pr_url.trim_end_matches('/').rsplit_once('/')?;
    tail.parse().ok()
}

/// Records the pull request a GitHub task just opened, so the daemon watches it.
pub fn record_landed(
    store: &Store,
    task: &Task,
    pr_url: &str,
    branch: &str,
    base: &str,
    sha: &str,
    now: DateTime<Utc>,
) -> anyhow::Result<()> {
    let Some(number) = number_of(pr_url) else {
        tracing::warn!(task = %task.id, pr_url, "no pull request number in the URL: not watched");
        return Ok(());
    };
    let Ok(issue) = IssueRef::parse(&task.source_ref) else {
        return Ok(());
    };
    store.record_pull(&PullRecord::opened(
        &task.id,
        &issue.repo.to_string(),
        number,
        branch,
        base,
        sha,
        now,
    ))?;
    Ok(())
}

/// Where the reply to `item` goes.
pub fn reply_to(item: &Feedback) -> ReplyPlace {
    match item.place {
        Place::Inline { thread, .. } => ReplyPlace::Thread(thread),
        Place::Review { .. } | Place::Conversation => ReplyPlace::Conversation,
    }
}

/// What a follow-up pushed, as its replies describe it.
#[derive(Debug, Clone, Copy)]
pub struct Pushed<'a> {
    pub sha: &'a str,
    /// The agent's final message.
    pub summary: Option<&'a str>,
    /// The paths the commit changed, read from our own repository (None: not readable).
    pub changed: Option<&'a [String]>,
}

/// Posts one reply per piece of feedback the follow-up carried, naming the pushed commit;
/// each is recorded, and found again by its marker when a kill came between post and
/// record. Errors leave the rest for the resumed landing. Posted through the follow-up's
/// [`Source`] (GitHub's: on its pull request).
pub async fn post_replies(
    source: &dyn Source,
    store: &std::sync::Mutex<Store>,
    task: &Task,
    run: &FollowUpRun,
    pushed: &Pushed<'_>,
    now: DateTime<Utc>,
) -> Result<(), SourceError> {
    let Pushed {
        sha,
        summary,
        changed,
    } = *pushed;
    let task_id = task.id.as_str();
    for item in &run.plan.feedback {
        let key = item.key();
        let recorded = lock(store).reply_id(task_id, &key).ok().flatten();
        if recorded.is_some() {
            continue;
        }
        let body = text::reply(item, sha, task_id, summary, changed);
        let marker = text::reply_marker(item);
        let id = source.reply(task, reply_to(item), &marker, &body).await?;
        // A kill here leaves the reply posted but unrecorded: its marker finds it again.
        crate::failpoint::hit("followup-reply");
        if let Err(e) = lock(store).record_reply(task_id, &key, id, now) {
            // Posted but unrecorded, as after a kill here: its marker finds it again.
            tracing::warn!(task = %task_id, error = %e, "cannot record a posted reply");
        }
    }
    Ok(())
}

fn lock(store: &std::sync::Mutex<Store>) -> std::sync::MutexGuard<'_, Store> {
    store.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_numbers_come_from_the_url() {
        assert_eq!(number_of("https://github.com/o/r/pull/12"), Some(12));
        assert_eq!(number_of("http://127.0.0.1:9/o/r/pull/3/"), Some(3));
        assert_eq!(number_of("https://github.com/o/r/pull/x"), None);
    }

    #[test]
    fn a_follow_up_task_works_on_the_pull_requests_branch() {
        let now = chrono::TimeZone::with_ymd_and_hms(&Utc, 2026, 3, 1, 12, 0, 0).unwrap();
        let landing = Task::new(
            "o/r#1",
            SourceKind::Github,
            "o/r#1",
            "https://x/o/r",
            "t",
            now,
        );
        let pull = PullRecord::opened(
            "o/r#1",
            "o/r",
            4,
            "polyphony/o_r_1-a1",
            "main",
            &"a".repeat(40),
            now,
        );
        let plan = FollowUp {
            merge_base: true,
            conflict: true,
            ..FollowUp::default()
        };
        let task = new_task(&landing, &pull, &plan, 2, now);
        assert_eq!(task.id, "o/r#1-f2");
        assert_eq!(task.source_ref, "o/r#4");
        assert_eq!(task.base_ref.as_deref(), Some("polyphony/o_r_1-a1"));
        assert_eq!(
            task.metadata.get(FOLLOWUP_OF).map(String::as_str),
            Some("o/r#1")
        );
        let run = FollowUpRun { pull, plan };
        assert_eq!(run.merge_base().as_deref(), Some("main"));
        assert_eq!(run.config_ref(), "main");
    }
}
