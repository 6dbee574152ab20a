//! What an attempt notes for itself so a restart can pick it up (DESIGN.md "Attempts",
//! issue 11): the attempt's workspace, the agent chain its task was routed to, the one
//! landing commit made after the agent exited, and how often the attempt was resumed.
//!
//! Rows of the `kv` table under the keys `workspace:<task>:<n>`, `chain:<task>`,
//! `commit:<task>:<n>` (and, before issue 24, `resumes:<task>:<n>`), exactly as homes made before these
//! methods existed wrote them: an upgraded home resumes its attempts (no migration).
//!
//! Issue 24: `handling:<task>:<n>` is the breadcrumb of a window in which the daemon
//! handles the attempt's own output (its first new line after a start, its working tree
//! at the commit): raised on entering, removed with `strikes:<task>:<n>` once the window
//! made progress. A breadcrumb found at a restart means the daemon died inside that
//! window with nothing stored since: a strike (see `orchestrator::restarts`).
//!
//! Must not: hold anything a person reads (status shows attempts, not notes), or a secret.

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::sql::params;
use super::{Result, Store};

pub(super) fn workspace_key(task_id: &str, attempt: u32) -> String {
    format!("workspace:{task_id}:{attempt}")
}

pub(super) fn chain_key(task_id: &str) -> String {
    format!("chain:{task_id}")
}

pub(super) fn commit_key(task_id: &str, attempt: u32) -> String {
    format!("commit:{task_id}:{attempt}")
}

pub(super) fn handling_key(task_id: &str, attempt: u32) -> String {
    format!("handling:{task_id}:{attempt}")
}

pub(super) fn strikes_key(task_id: &str, attempt: u32) -> String {
    format!("strikes:{task_id}:{attempt}")
}

pub(super) fn giveups_key(task_id: &str) -> String {
    format!("giveups:{task_id}")
}

/// The breadcrumb of a window in which the daemon was handling an attempt's own output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Handling {
    /// Which window (`output`, `commit`).
    pub window: String,
    /// The machine's boot id when it was raised: a breadcrumb from another boot was cut
    /// by the machine restarting, not by the attempt.
    pub boot: String,
}

impl Store {
    /// Notes the attempt's workspace (a `workspace::Workspace`, kept as JSON so the store
    /// does not depend on `workspace`).
    pub fn note_workspace<W: Serialize>(
        &self,
        task_id: &str,
        attempt: u32,
        workspace: &W,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let json = super::to_json("workspace", workspace)?;
        self.kv_set(&workspace_key(task_id, attempt), &json, now)
    }

    /// The attempt's workspace; `None` when it was never noted or no longer reads.
    pub fn workspace_of<W: DeserializeOwned>(
        &self,
        task_id: &str,
        attempt: u32,
    ) -> Result<Option<W>> {
        Ok(self
            .kv_get(&workspace_key(task_id, attempt))?
            .and_then(|json| serde_json::from_str(&json).ok()))
    }

    /// Notes the agent chain the task was routed to (the routed agent, then its fallbacks).
    pub fn note_chain(&self, task_id: &str, chain: &[String], now: DateTime<Utc>) -> Result<()> {
        self.kv_set(&chain_key(task_id), &chain.join(","), now)
    }

    /// The task's routed chain, if one was noted.
    pub fn chain_of(&self, task_id: &str) -> Result<Option<Vec<String>>> {
        Ok(self
            .kv_get(&chain_key(task_id))?
            .map(|c| c.split(',').map(String::from).collect()))
    }

    /// Notes the attempt's landing commit (made once; verified and pushed by sha).
    pub fn note_landing_commit(
        &self,
        task_id: &str,
        attempt: u32,
        sha: &str,
        now: DateTime<Utc>,
    ) -> Result<()> {
        self.kv_set(&commit_key(task_id, attempt), sha, now)
    }

    /// The attempt's landing commit, if it was made.
    pub fn landing_commit_of(&self, task_id: &str, attempt: u32) -> Result<Option<String>> {
        self.kv_get(&commit_key(task_id, attempt))
    }

    /// Raises the attempt's breadcrumb: the daemon enters `window`.
    pub fn raise_handling(
        &self,
        task_id: &str,
        attempt: u32,
        handling: &Handling,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let json = super::to_json("handling", handling)?;
        self.kv_set(&handling_key(task_id, attempt), &json, now)
    }

    /// The window made progress: the breadcrumb and the attempt's strikes go.
    pub fn clear_handling(&self, task_id: &str, attempt: u32) -> Result<()> {
        self.db.execute(
            "DELETE FROM kv WHERE key IN (?1, ?2)",
            params![
                handling_key(task_id, attempt),
                strikes_key(task_id, attempt),
            ],
        )?;
        Ok(())
    }

    /// At a restart: takes the attempt's breadcrumb (the daemon that raised it died inside
    /// its window) and its strikes so far. The breadcrumb is removed: the resumed run
    /// raises its own.
    pub fn take_handling(&self, task_id: &str, attempt: u32) -> Result<(Option<Handling>, u32)> {
        let key = handling_key(task_id, attempt);
        let handling = self
            .kv_get(&key)?
            .and_then(|json| serde_json::from_str(&json).ok());
        self.db
            .execute("DELETE FROM kv WHERE key = ?1", params![&key])?;
        let strikes = self
            .kv_get(&strikes_key(task_id, attempt))?
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        Ok((handling, strikes))
    }

    /// Records the attempt's strikes.
    pub fn set_strikes(
        &self,
        task_id: &str,
        attempt: u32,
        strikes: u32,
        now: DateTime<Utc>,
    ) -> Result<()> {
        self.kv_set(&strikes_key(task_id, attempt), &strikes.to_string(), now)
    }

    /// Attempts of the task given up because the daemon kept dying on their output.
    pub fn giveups_of(&self, task_id: &str) -> Result<u32> {
        Ok(self
            .kv_get(&giveups_key(task_id))?
            .and_then(|n| n.parse().ok())
            .unwrap_or(0))
    }

    /// Counts one more such give-up; returns the new count.
    pub fn count_giveup(&self, task_id: &str, now: DateTime<Utc>) -> Result<u32> {
        let n = self.giveups_of(task_id)? + 1;
        self.kv_set(&giveups_key(task_id), &n.to_string(), now)?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        "2026-11-30T12:00:00Z".parse().expect("a timestamp")
    }

    #[test]
    fn notes_read_back_and_keep_the_old_keys() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let store = Store::open(&dir.path().join("state.db")).expect("a store");
        assert_eq!(store.chain_of("t1").expect("read"), None);
        store
            .note_chain("t1", &["claude".into(), "codex".into()], now())
            .expect("write");
        assert_eq!(
            store.chain_of("t1").expect("read"),
            Some(vec!["claude".to_string(), "codex".to_string()])
        );
        // A home written before these methods existed reads the same.
        assert_eq!(
            store.kv_get("chain:t1").expect("read").as_deref(),
            Some("claude,codex")
        );
        store
            .note_landing_commit("t1", 2, "abc123", now())
            .expect("write");
        assert_eq!(
            store.landing_commit_of("t1", 2).expect("read").as_deref(),
            Some("abc123")
        );
        assert_eq!(store.landing_commit_of("t1", 1).expect("read"), None);
        store
            .note_workspace("t1", 2, &vec!["a".to_string()], now())
            .expect("write");
        let ws: Option<Vec<String>> = store.workspace_of("t1", 2).expect("read");
        assert_eq!(ws, Some(vec!["a".to_string()]));
        store
            .kv_set("workspace:t1:3", "not json", now())
            .expect("write");
        let ws: Option<Vec<String>> = store.workspace_of("t1", 3).expect("read");
        assert_eq!(ws, None);
    }

    #[test]
    fn a_breadcrumb_is_taken_once_and_progress_clears_the_strikes() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let store = Store::open(&dir.path().join("state.db")).expect("a store");
        assert_eq!(store.take_handling("t1", 1).expect("take"), (None, 0));
        let crumb = Handling {
            window: "output".into(),
            boot: "b1".into(),
        };
        store.raise_handling("t1", 1, &crumb, now()).expect("raise");
        store.set_strikes("t1", 1, 2, now()).expect("strikes");
        assert_eq!(
            store.take_handling("t1", 1).expect("take"),
            (Some(crumb.clone()), 2)
        );
        // Taken: the next restart finds none unless the resumed run raised its own.
        assert_eq!(store.take_handling("t1", 1).expect("take"), (None, 2));
        store.raise_handling("t1", 1, &crumb, now()).expect("raise");
        store.clear_handling("t1", 1).expect("clear");
        assert_eq!(store.take_handling("t1", 1).expect("take"), (None, 0));
        assert_eq!(store.giveups_of("t1").expect("read"), 0);
        assert_eq!(store.count_giveup("t1", now()).expect("count"), 1);
        assert_eq!(store.giveups_of("t1").expect("read"), 1);
    }
}
