//! The durable queue: SQLite at `$POLYPHONY_HOME/queue.db` holding tasks, attempts,
//! transitions, events and landing records (spec §2, §4; DESIGN.md "Durability").
//!
//! Architecture Invariant: only `store` writes SQL, and every task state change goes
//! through [`Store::transition`] (or a claim, [`Store::settle_failure`],
//! [`Store::transition_completing`]), which checks `domain::transition` and writes the
//! transition row in the same IMMEDIATE transaction.
//! Architecture Invariant: a side effect outside the store is an intent (`intents`)
//! recorded before it is attempted, so whoever runs next can finish it (issue 19).
//! Architecture Invariant: claims are atomic across processes: `BEGIN IMMEDIATE` takes
//! the write lock before the candidate is read, so two daemons never claim one task.
//! API Boundary: [`Store`].
//!
//! The API is synchronous. A `Store` owns one connection; `Connection` is `Send` but not
//! `Sync`, so each thread (or `spawn_blocking` worker) opens its own `Store`. Opening is
//! cheap once the schema is current: a few pragmas and one `user_version` read.
//!
//! One file per concern, each an `impl Store` block: `tasks` (rows, facts, retry schedule,
//! transitions), `claims`, `attempts`, `events`, `landings`, `comments`, `intents`,
//! `generations`, `views` (listings), `kv`, `attempt_notes` (typed notes over `kv`); `rows`
//! holds the column codecs they share and `schema` the migrations. This file keeps the type, opening and migrating.
//!
//! Text is stored with each NUL as U+FFFD on every backend (`sql::stored_text`):
//! PostgreSQL refuses a NUL in text, and foreign text (an issue's title or body, an
//! agent's output line) may hold one. JSON columns keep theirs (JSON escapes it).
//!
//! Must not: decide what happens next (that is the orchestrator), or store secret values
//! (RunSpecs carry variable names only).

mod attempt_notes;
mod attempts;
mod cancels;
mod claims;
mod comments;
mod core;
mod error;
mod events;
mod generations;
mod handle;
pub mod health;
mod intents;
mod kv;
mod landings;
mod owners;
mod pg;
mod pulls;
pub mod quota;
mod retention;
mod rows;
pub mod schema;
mod sql;
mod tasks;
mod views;
mod wake;

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::Connection;

use sql::Db;

pub use attempt_notes::Handling;
pub use attempts::{AttemptRecord, DailyLimit, SpendHeld};
pub use cancels::CancelRequest;
pub use core::{host_machine_id, Claim, Owner, QueueCore, Reconcilable};
pub use error::{DriverError, StoreError};
pub use generations::{GenerationInsert, GenerationLinks};
pub use handle::{StoreHandle, STORE_URL_VAR};
pub use health::{damage_in, damaged, DatabaseDamaged, Sound};
pub use intents::{BlockSettlement, Intent, IntentKind, Settlement};
pub use landings::Landing;
pub use retention::{DiskUsage, EndedTask, Reclaimed};
pub use tasks::TransitionRecord;
pub use views::{
    FollowUpOf, Label, PullBrief, QuotaWaitBrief, RunningAttempt, TaskFilter, TaskSummary,
};
pub use wake::WakeListener;

// The shared row helpers, importable as `super::…` by every file of the store.
pub use pulls::{FollowUpRecord, PullLook, PullRecord};
use rows::{
    conversion, enum_col, json_col, opt_str_col, opt_time_col, parse_col, str_col, time_col,
    to_json, ts,
};
use tasks::{current_state, get_task, write_transition};
use views::refresh_summary;

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// How long a writer waits for another process's transaction before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// A handle on the queue database. See the module docs for threading.
pub struct Store {
    db: Db,
    path: PathBuf,
}

impl Store {
    /// Opens (creating if needed) the database at `path` and brings its schema up to date.
    pub fn open(path: &Path) -> Result<Store> {
        Store::open_writable(path).map_err(|e| health::read_only_home(e, path))
    }

    fn open_writable(path: &Path) -> Result<Store> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // The store's directory is the home: owner-only (issue 11).
            crate::private::create_dir(dir).map_err(|source| StoreError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        crate::private::create_file_if_missing(path).map_err(|source| StoreError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let open_err = |source: rusqlite::Error| StoreError::Open {
            path: path.to_path_buf(),
            source: source.into(),
        };
        let conn = Connection::open(path).map_err(open_err)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
        // Issue 24: a new queue gives the pages retention frees back (`retention.rs`). Only
        // possible before the first table, and before WAL mode writes the header; set only
        // on an empty file (on an existing one the pragma is a write).
        let pages: i64 = conn
            .query_row("PRAGMA page_count", [], |r| r.get(0))
            .map_err(open_err)?;
        if pages == 0 {
            conn.execute_batch("PRAGMA auto_vacuum = INCREMENTAL")
                .map_err(open_err)?;
        }
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(open_err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Corrupt(format!(
                "{} refused WAL mode (journal_mode is {mode})",
                path.display()
            )));
        }
        conn.execute_batch("PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;")
            .map_err(open_err)?;
        // SQLite gives -wal and -shm the database's mode; older files may predate that.
        for suffix in ["-wal", "-shm"] {
            let mut side = path.as_os_str().to_owned();
            side.push(suffix);
            let side = std::path::PathBuf::from(side);
            crate::private::restrict(&side, crate::private::FILE_MODE)
                .map_err(|source| StoreError::Io { path: side, source })?;
        }
        conn.set_prepared_statement_cache_capacity(64);
        let store = Store {
            db: Db::Sqlite(conn),
            path: path.to_path_buf(),
        };
        store.migrate()?;
        Ok(store)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema version of the open database.
    pub fn schema_version(&self) -> Result<i64> {
        match self.db.sqlite() {
            Some(conn) => Ok(conn.query_row("PRAGMA user_version", [], |r| r.get(0))?),
            None => pg::schema_version(&self.db),
        }
    }

    /// `"sqlite"` or `"postgresql"`.
    pub fn backend(&self) -> &'static str {
        match self.db.dialect() {
            sql::Dialect::Sqlite => "sqlite",
            sql::Dialect::Postgres => "postgresql",
        }
    }

    /// The SQLite connection, for what only SQLite has (pragmas, integrity checks,
    /// backups); `None` on PostgreSQL.
    fn sqlite(&self) -> Option<&Connection> {
        self.db.sqlite()
    }

    fn migrate(&self) -> Result<()> {
        let Some(conn) = self.db.sqlite() else {
            return pg::migrate(&self.db, &self.path);
        };
        let latest = schema::latest();
        if self.schema_version()? == latest {
            return Ok(());
        }
        // Re-read under the write lock: another process may have migrated meanwhile.
        self.immediate(|db| {
            let current: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
            if current > latest {
                return Err(StoreError::SchemaTooNew {
                    path: self.path.clone(),
                    found: current,
                    supported: latest,
                });
            }
            for (i, sql) in schema::MIGRATIONS.iter().enumerate().skip(current as usize) {
                conn.execute_batch(sql)?;
                conn.pragma_update(None, "user_version", i as i64 + 1)?;
            }
            if schema::SUMMARY_REBUILDS.iter().any(|v| current < *v) {
                // The triggers are gone (7), or the summaries gained fields (9): the store
                // writes every summary, in the same transaction, once the schema is the
                // one its statements are written for.
                views::rebuild_summaries(db)?;
            }
            Ok(())
        })
    }

    /// Runs `f` atomically: in a new writing transaction, or inside the one already open
    /// on this connection (a store method called from another's transaction).
    fn atomic<T>(&self, f: impl FnOnce(&Db) -> Result<T>) -> Result<T> {
        if self.db.in_transaction() {
            f(&self.db)
        } else {
            self.immediate(f)
        }
    }

    /// Runs `f` in a writing transaction (`sql::Db::begin_write`: `BEGIN IMMEDIATE` on
    /// SQLite): what `f` reads cannot change before it writes. Rolls back on error.
    fn immediate<T>(&self, f: impl FnOnce(&Db) -> Result<T>) -> Result<T> {
        self.transaction(Db::begin_write, f)
    }

    fn transaction<T>(
        &self,
        begin: fn(&Db) -> Result<()>,
        f: impl FnOnce(&Db) -> Result<T>,
    ) -> Result<T> {
        let started = std::time::Instant::now();
        begin(&self.db)?;
        let value = match f(&self.db) {
            Ok(v) => v,
            Err(e) => {
                self.db.rollback();
                return Err(e);
            }
        };
        if let Err(e) = self.db.commit() {
            self.db.rollback();
            return Err(e);
        }
        crate::metrics::store_write(started.elapsed());
        Ok(value)
    }
}
