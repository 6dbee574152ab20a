//! Task generations: how a BLOCKED task comes back (issue 12 "A way back"; DESIGN.md
//! "After landing").
//!
//! Spec §4 keeps BLOCKED terminal, so `polyphony retry` (or re-labelling the issue) never
//! reopens a task: it makes a NEW task, the next generation, linked to the old one, whose
//! record, attempts and evidence stay as they were. Ids: generation 1 is the task as it was
//! discovered (`local-7`, `owner/repo#42`); generation `n > 1` is `<root>.<n>` (`local-7.2`,
//! `owner/repo#42.3`), where the root is generation 1's id. Every id-derived name (workspace
//! key, branch `polyphony/local-7.2-a1`, container, claim markers) is therefore unique per
//! generation, and the source reference (`owner/repo#42`) stays the same, so the newest
//! generation is the one the source finds.
//!
//! Pure: the store writes the links, the callers pass `now`.

use chrono::{DateTime, Utc};

use super::{Task, TaskState};

/// Metadata key: this task's generation number (absent means 1).
pub const GENERATION: &str = "generation";
/// Metadata key: generation 1's id (absent on generation 1).
pub const ROOT: &str = "generation_root";
/// Metadata key: the BLOCKED task this one retries (absent on generation 1).
pub const RETRY_OF: &str = "retry_of";

/// The task's generation number: 1 unless it was made by [`next`].
pub fn number(task: &Task) -> u32 {
    task.metadata
        .get(GENERATION)
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

/// Generation 1's id.
pub fn root(task: &Task) -> &str {
    task.metadata
        .get(ROOT)
        .map(String::as_str)
        .unwrap_or(&task.id)
}

/// The id generation `n` of the task rooted at `root` has.
pub fn id_of(root: &str, n: u32) -> String {
    if n <= 1 {
        root.to_string()
    } else {
        format!("{root}.{n}")
    }
}

/// The next generation of `blocked`: a DISCOVERED task with no attempts. Title, body and
/// labels come from `fresh` when the source has just been read again (a re-labelled issue),
/// else from `blocked`; routing facts are recomputed by the next attempt.
pub fn next(blocked: &Task, fresh: Option<&Task>, now: DateTime<Utc>) -> Task {
    let from = fresh.unwrap_or(blocked);
    let n = number(blocked) + 1;
    let root = root(blocked).to_string();
    let mut task = Task::new(
        id_of(&root, n),
        blocked.source,
        blocked.source_ref.clone(),
        from.repo.clone(),
        from.title.clone(),
        now,
    );
    task.body = from.body.clone();
    task.base_ref = from.base_ref.clone();
    task.labels = from.labels.clone();
    task.task_type = from.task_type;
    task.risk = from.risk;
    task.requires_web = from.requires_web;
    task.context_tokens = from.context_tokens;
    task.metadata = from.metadata.clone();
    task.metadata.insert(GENERATION.into(), n.to_string());
    task.metadata.insert(ROOT.into(), root);
    task.metadata.insert(RETRY_OF.into(), blocked.id.clone());
    task
}

/// Whether `task` may get a next generation now, or why not.
pub fn may_retry(task: &Task) -> Result<(), String> {
    match task.state {
        TaskState::Blocked | TaskState::Cancelled => Ok(()),
        TaskState::Landed => Err(format!("{} is LANDED: there is nothing to retry", task.id)),
        TaskState::Failed if task.next_attempt_at.is_some() => Err(format!(
            "{} is FAILED with a retry already scheduled; it runs again by itself",
            task.id
        )),
        TaskState::Failed => Err(format!(
            "{} is FAILED and held, not BLOCKED: `polyphony spawn --task {}` runs it again",
            task.id, task.id
        )),
        state => Err(format!("{} is {state}, not BLOCKED", task.id)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::SourceKind;
    use chrono::TimeZone;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap()
    }

    fn blocked(id: &str, source: SourceKind, source_ref: &str) -> Task {
        let mut t = Task::new(id, source, source_ref, "/srv/r.git", "Fix it", now());
        t.state = TaskState::Blocked;
        t.attempts = 3;
        t.failures = 3;
        t.body = "body".into();
        t.metadata.insert("number".into(), "42".into());
        t
    }

    #[test]
    fn ids_and_links_across_generations() {
        for (id, source, source_ref, second, third) in [
            (
                "local-7",
                SourceKind::Local,
                "local:local-7",
                "local-7.2",
                "local-7.3",
            ),
            (
                "octo/widgets#42",
                SourceKind::Github,
                "octo/widgets#42",
                "octo/widgets#42.2",
                "octo/widgets#42.3",
            ),
        ] {
            let first = blocked(id, source, source_ref);
            assert_eq!(number(&first), 1);
            assert_eq!(root(&first), id);
            let mut g2 = next(&first, None, now());
            assert_eq!(g2.id, second);
            assert_eq!(number(&g2), 2);
            assert_eq!(root(&g2), id);
            assert_eq!(g2.metadata[RETRY_OF], id);
            assert_eq!(g2.metadata["number"], "42");
            assert_eq!(g2.source_ref, source_ref);
            assert_eq!(g2.source, source);
            assert_eq!(
                (g2.state, g2.attempts, g2.failures, g2.next_attempt_at),
                (TaskState::Discovered, 0, 0, None)
            );
            assert_eq!((g2.title.as_str(), g2.body.as_str()), ("Fix it", "body"));
            g2.state = TaskState::Blocked;
            let g3 = next(&g2, None, now());
            assert_eq!(g3.id, third);
            assert_eq!(root(&g3), id);
            assert_eq!(g3.metadata[RETRY_OF], second);
        }
    }

    #[test]
    fn a_fresh_read_of_the_source_wins() {
        let old = blocked("o/r#1", SourceKind::Github, "o/r#1");
        let mut fresh = Task::new(
            "o/r#1",
            SourceKind::Github,
            "o/r#1",
            "/srv/r.git",
            "New",
            now(),
        );
        fresh.body = "clarified".into();
        fresh.labels = vec!["agent-ready".into()];
        let g2 = next(&old, Some(&fresh), now());
        assert_eq!(g2.id, "o/r#1.2");
        assert_eq!((g2.title.as_str(), g2.body.as_str()), ("New", "clarified"));
        assert_eq!(g2.labels, vec!["agent-ready".to_string()]);
    }

    #[test]
    fn only_blocked_tasks_come_back() {
        let mut t = blocked("local-1", SourceKind::Local, "local:local-1");
        assert!(may_retry(&t).is_ok());
        for state in [TaskState::Landed, TaskState::Running, TaskState::Discovered] {
            t.state = state;
            assert!(may_retry(&t).is_err(), "{state}");
        }
        t.state = TaskState::Failed;
        assert!(may_retry(&t).unwrap_err().contains("spawn --task"));
    }
}
