//! What an attempt notes for itself so a restart can pick it up (DESIGN.md "Attempts",
//! issue 11): the attempt's workspace, the agent chain its task was routed to, the one
//! landing commit made after the agent exited, and how often the attempt was resumed.
//!
//! Rows of the `kv` table under the keys `workspace:<task>:<n>`, `chain:<task>`,
//! `commit:<task>:<n>` and `resumes:<task>:<n>`, exactly as homes made before these
//! methods existed wrote them: an upgraded home resumes its attempts (no migration).
//!
//! Must not: hold anything a person reads (status shows attempts, not notes), or a secret.

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{Result, Store};

fn workspace_key(task_id: &str, attempt: u32) -> String {
    format!("workspace:{task_id}:{attempt}")
}

fn chain_key(task_id: &str) -> String {
    format!("chain:{task_id}")
}

fn commit_key(task_id: &str, attempt: u32) -> String {
    format!("commit:{task_id}:{attempt}")
}

fn resumes_key(task_id: &str, attempt: u32) -> String {
    format!("resumes:{task_id}:{attempt}")
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

    /// Counts one more resume of the attempt after a restart; returns the new count.
    pub fn count_resume(&self, task_id: &str, attempt: u32, now: DateTime<Utc>) -> Result<u32> {
        let key = resumes_key(task_id, attempt);
        let before = self
            .kv_get(&key)?
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or(0);
        let resumes = before + 1;
        self.kv_set(&key, &resumes.to_string(), now)?;
        Ok(resumes)
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
        assert_eq!(store.count_resume("t1", 2, now()).expect("count"), 1);
        assert_eq!(store.count_resume("t1", 2, now()).expect("count"), 2);
        assert_eq!(
            store.kv_get("resumes:t1:2").expect("read").as_deref(),
            Some("2")
        );
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
}
