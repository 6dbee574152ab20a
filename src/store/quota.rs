//! Usage-limit state (issue 14): one row per (identity, agent) out of quota, shared by
//! every task, and the wait of each task parked until the earliest reset of its chain.
//!
//! Must not: decide whether an agent is usable or how two reports combine (that is
//! `orchestrator::quota`); it stores what it is given.

use super::sql::{params, Row};
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

use super::{json_col, time_col, to_json, ts, Result, Store};
use crate::domain::{AgentQuota, QuotaWait};

/// kv: the `(agent, identity)` pairs of a task's routed chain (JSON), written by routing.
pub fn chain_key(task_id: &str) -> String {
    format!("quota_chain:{task_id}")
}

/// kv: the agents a task found refusing their login (comma-separated). Migration 4 moved
/// the old per-task `quota_exhausted:{task}` rows here.
pub fn refused_key(task_id: &str) -> String {
    format!("agents_refused:{task_id}")
}

/// kv: the fallback a task runs on while its preferred agent is out (JSON: preferred,
/// agent, identity, because, since), `null` once it is back.
pub fn fallback_key(task_id: &str) -> String {
    format!("quota_fallback:{task_id}")
}

/// kv: the handoff note of one attempt's prompt (`quota_handoff: continue`).
pub fn handoff_key(task_id: &str, attempt: u32) -> String {
    format!("quota_handoff:{task_id}:{attempt}")
}

const QUOTA_COLS: &str = "identity, agent, resets_at, reported, message, task_id, attempt, hit_at";
const WAIT_COLS: &str = "task_id, until, agent, identity, resets, parked_at";

impl Store {
    /// Replaces the quota row of (`identity`, `agent`) with what `merge` makes of the
    /// stored one, in one IMMEDIATE transaction (two attempts hitting the same limit at once
    /// both see each other). Returns the row written.
    pub fn update_quota(
        &self,
        identity: &str,
        agent: &str,
        merge: impl FnOnce(Option<AgentQuota>) -> AgentQuota,
    ) -> Result<AgentQuota> {
        self.immediate(|tx| {
            let stored = tx.query_opt(
                &format!("SELECT {QUOTA_COLS} FROM quota WHERE identity = ?1 AND agent = ?2"),
                params![identity, agent],
                quota_from_row,
            )?;
            let row = merge(stored);
            tx.execute(
                &format!(
                    "INSERT INTO quota ({QUOTA_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) \
                     ON CONFLICT (identity, agent) DO UPDATE SET resets_at = excluded.resets_at, \
                     reported = excluded.reported, message = excluded.message, \
                     task_id = excluded.task_id, attempt = excluded.attempt, hit_at = excluded.hit_at"
                ),
                params![
                    row.identity,
                    row.agent,
                    ts(row.resets_at),
                    row.reported,
                    row.message,
                    row.task_id,
                    row.attempt,
                    ts(row.hit_at),
                ],
            )?;
            Ok(row)
        })
    }

    /// Every quota row, out or not any more, by identity then agent (a handful: one per
    /// pair that ever met a limit).
    pub fn quota_rows(&self) -> Result<Vec<AgentQuota>> {
        self.db.query_map(
            &format!("SELECT {QUOTA_COLS} FROM quota ORDER BY identity, agent"),
            params![],
            quota_from_row,
        )
    }

    /// The pairs still out at `now`.
    pub fn quota_out(&self, now: DateTime<Utc>) -> Result<Vec<AgentQuota>> {
        self.db.query_map(
            &format!(
                "SELECT {QUOTA_COLS} FROM quota WHERE resets_at > ?1 ORDER BY identity, agent"
            ),
            params![ts(now)],
            quota_from_row,
        )
    }

    /// Records why a task waits (written before the task is settled FAILED with
    /// `next_attempt_at = wait.until`).
    pub fn set_quota_wait(&self, wait: &QuotaWait) -> Result<()> {
        let resets = to_json("quota resets", &wait.resets)?;
        self.atomic(|conn| {
            conn.execute(
                &format!(
                    "INSERT INTO quota_waits ({WAIT_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
                     ON CONFLICT (task_id) DO UPDATE SET until = excluded.until, \
                     agent = excluded.agent, identity = excluded.identity, \
                     resets = excluded.resets, parked_at = excluded.parked_at"
                ),
                params![
                    wait.task_id,
                    ts(wait.until),
                    wait.agent,
                    wait.identity,
                    resets,
                    ts(wait.parked_at),
                ],
            )?;
            super::refresh_summary(conn, &wait.task_id)
        })
    }

    /// The task's quota wait, if it was parked (and not routed since).
    pub fn quota_wait(&self, task_id: &str) -> Result<Option<QuotaWait>> {
        self.db.query_opt(
            &format!("SELECT {WAIT_COLS} FROM quota_waits WHERE task_id = ?1"),
            params![task_id],
            wait_from_row,
        )
    }

    /// Every quota wait, by task id (for `status` listings).
    pub fn quota_waits(&self) -> Result<BTreeMap<String, QuotaWait>> {
        let rows = self.db.query_map(
            &format!("SELECT {WAIT_COLS} FROM quota_waits"),
            params![],
            wait_from_row,
        )?;
        Ok(rows.into_iter().map(|w| (w.task_id.clone(), w)).collect())
    }

    /// What `status TASK --json` says of a task's usage limits: its wait (or null), each
    /// agent of its routed chain with its identity and the last limit it met under it
    /// (`resets_at`: out while in the future; null when it never met one), and the fallback
    /// it runs on while its preferred agent is out (or null).
    pub fn quota_detail_json(&self, task_id: &str) -> Result<serde_json::Value> {
        let wait = self.quota_wait(task_id)?;
        let chain: Vec<(String, String)> = self
            .kv_get(&chain_key(task_id))?
            .and_then(|j| serde_json::from_str(&j).ok())
            .unwrap_or_default();
        let rows = self.quota_rows()?;
        let agents: Vec<serde_json::Value> = chain
            .iter()
            .map(|(agent, identity)| {
                let row = rows
                    .iter()
                    .find(|q| &q.agent == agent && &q.identity == identity);
                serde_json::json!({
                    "agent": agent,
                    "identity": identity,
                    "resets_at": row.map(|q| q.resets_at),
                    "reported": row.map(|q| q.reported),
                    "message": row.map(|q| q.message.as_str()),
                })
            })
            .collect();
        let fallback = self
            .kv_get(&fallback_key(task_id))?
            .and_then(|j| serde_json::from_str::<serde_json::Value>(&j).ok())
            .unwrap_or(serde_json::Value::Null);
        Ok(serde_json::json!({ "wait": wait, "agents": agents, "fallback": fallback }))
    }

    /// Forgets a task's wait: it was routed to an agent again.
    pub fn clear_quota_wait(&self, task_id: &str) -> Result<()> {
        self.atomic(|conn| {
            conn.execute(
                "DELETE FROM quota_waits WHERE task_id = ?1",
                params![task_id],
            )?;
            super::refresh_summary(conn, task_id)
        })
    }
}

fn quota_from_row(r: &Row<'_>) -> Result<AgentQuota> {
    Ok(AgentQuota {
        identity: r.get(0)?,
        agent: r.get(1)?,
        resets_at: time_col(r, 2)?,
        reported: r.get(3)?,
        message: r.get(4)?,
        task_id: r.get(5)?,
        attempt: r.get(6)?,
        hit_at: time_col(r, 7)?,
    })
}

fn wait_from_row(r: &Row<'_>) -> Result<QuotaWait> {
    Ok(QuotaWait {
        task_id: r.get(0)?,
        until: time_col(r, 1)?,
        agent: r.get(2)?,
        identity: r.get(3)?,
        resets: json_col(r, 4)?,
        parked_at: time_col(r, 5)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::AgentReset;
    use chrono::TimeZone;

    fn at(minute: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 30, 14, minute, 0).unwrap()
    }

    fn row(agent: &str, until: DateTime<Utc>) -> AgentQuota {
        AgentQuota {
            identity: "personal".into(),
            agent: agent.into(),
            resets_at: until,
            reported: true,
            message: "usage limit".into(),
            task_id: Some("local-1".into()),
            attempt: Some(1),
            hit_at: at(0),
        }
    }

    #[test]
    fn quota_rows_are_shared_and_expire() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("queue.db")).unwrap();
        let written = store
            .update_quota("personal", "claude", |stored| {
                assert_eq!(stored, None);
                row("claude", at(30))
            })
            .unwrap();
        assert_eq!(written, row("claude", at(30)));
        // The merge sees the stored row; what it returns is written.
        store
            .update_quota("personal", "claude", |stored| {
                assert_eq!(stored, Some(row("claude", at(30))));
                row("claude", at(45))
            })
            .unwrap();
        store
            .update_quota("personal", "codex", |_| row("codex", at(10)))
            .unwrap();
        assert_eq!(store.quota_rows().unwrap().len(), 2);
        let out: Vec<String> = store
            .quota_out(at(20))
            .unwrap()
            .into_iter()
            .map(|q| format!("{}@{}", q.agent, q.resets_at.format("%H:%M")))
            .collect();
        assert_eq!(out, ["claude@14:45"]);
        assert!(store.quota_out(at(45)).unwrap().is_empty());
    }

    #[test]
    fn waits_are_kept_until_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("queue.db")).unwrap();
        let task = crate::domain::Task::new(
            "local-1",
            crate::domain::SourceKind::Local,
            "local:local-1",
            "/r",
            "t",
            at(0),
        );
        store.insert_task(&task).unwrap();
        let wait = QuotaWait {
            task_id: "local-1".into(),
            until: at(5),
            agent: "codex".into(),
            identity: "personal".into(),
            resets: vec![
                AgentReset {
                    agent: "claude".into(),
                    identity: "personal".into(),
                    resets_at: at(30),
                },
                AgentReset {
                    agent: "codex".into(),
                    identity: "personal".into(),
                    resets_at: at(5),
                },
            ],
            parked_at: at(0),
        };
        store.set_quota_wait(&wait).unwrap();
        assert_eq!(store.quota_wait("local-1").unwrap(), Some(wait.clone()));
        assert_eq!(store.quota_waits().unwrap().len(), 1);
        let detail = store.quota_detail_json("local-1").unwrap();
        assert_eq!(detail["wait"]["agent"], "codex");
        assert_eq!(detail["agents"], serde_json::json!([]));
        store.clear_quota_wait("local-1").unwrap();
        assert_eq!(store.quota_wait("local-1").unwrap(), None);
    }

    /// Migration 4 turns the per-task `quota_exhausted:` rows into refused agents and
    /// rebuilds every summary with `quota_wait`.
    #[test]
    fn migration_4_moves_the_per_task_exhausted_agents() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("queue.db");
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            for sql in &super::super::schema::MIGRATIONS[..3] {
                conn.execute_batch(sql).unwrap();
            }
            conn.pragma_update(None, "user_version", 3).unwrap();
            conn.execute(
                "INSERT INTO kv (key, value, updated_at) VALUES ('quota_exhausted:local-1', 'claude,codex', 'x'), ('chain:local-1', 'claude,codex', 'x')",
                [],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO tasks VALUES ('local-1', 't', 'b', 'local', 'local:local-1', '/r', NULL, 'FAILED', \
                 'bugfix', 'small', 'medium', 3, 0, '[]', '{}', 1, 0, \
                 '2026-11-30T01:00:00.000000Z', '2026-11-30T01:30:00.000000Z', NULL)",
                [],
            )
            .unwrap();
        }
        let store = Store::open(&path).unwrap();
        assert_eq!(
            store.kv_get(&refused_key("local-1")).unwrap().as_deref(),
            Some("claude,codex")
        );
        assert_eq!(store.kv_get("quota_exhausted:local-1").unwrap(), None);
        assert_eq!(
            store.kv_get("chain:local-1").unwrap().as_deref(),
            Some("claude,codex")
        );
        let mut json = Vec::new();
        store
            .for_each_summary_json(None, None, |j| -> Result<()> {
                json.push(String::from_utf8_lossy(j).into_owned());
                Ok(())
            })
            .unwrap();
        assert!(
            json[0].contains(r#""next_attempt_at":null,"quota_wait":null"#),
            "{json:?}"
        );
    }
}
