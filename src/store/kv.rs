//! A small key-value table for state that has no typed home yet.

use super::sql::params;
use chrono::{DateTime, Utc};

use super::{ts, Result, Store};

impl Store {
    pub fn kv_get(&self, key: &str) -> Result<Option<String>> {
        self.db
            .query_opt("SELECT value FROM kv WHERE key = ?1", params![key], |r| {
                r.get(0)
            })
    }

    pub fn kv_set(&self, key: &str, value: &str, now: DateTime<Utc>) -> Result<()> {
        self.db.execute(
            "INSERT INTO kv (key, value, updated_at) VALUES (?1, ?2, ?3) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
            params![key, value, ts(now)],
        )?;
        Ok(())
    }
}
