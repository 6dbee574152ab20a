//! The store's error type: callers branch on `NotFound`, `StaleState`,
//! `InvalidTransition` and `AttemptExists`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use rusqlite::ErrorCode;

use crate::domain::{InvalidTransition, TaskState};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    #[error("cannot create the directory of the queue database {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The home is on a read-only filesystem or not writable by this user (issue 24: it
    /// was reported as "cannot create the directory"). SQLite writes its lock and log
    /// beside the file even to read, so no verb that opens the queue can work there.
    #[error("the Polyphony home {} is read-only (the queue database {} needs its write-ahead log and lock beside it, even to read) — fix: remount it read-write or make it writable for this user, or point --home (POLYPHONY_HOME) at a writable copy (`cp -a {} NEW_HOME`)", dir.display(), path.display(), dir.display())]
    ReadOnly { dir: PathBuf, path: PathBuf },
    #[error("cannot open the queue database {path}: {source}")]
    Open { path: PathBuf, source: DriverError },
    #[error("queue database error: {0}")]
    Sqlite(DriverError),
    /// The file is damaged (SQLITE_CORRUPT, SQLITE_NOTADB or a failed integrity check).
    #[error("the queue database {} is damaged: {detail}", path.display())]
    Damaged { path: PathBuf, detail: String },
    #[error("task `{0}` not found")]
    NotFound(String),
    #[error("attempt {attempt} of task `{task_id}` not found")]
    AttemptNotFound { task_id: String, attempt: u32 },
    #[error("attempt {attempt} of task `{task_id}` already exists")]
    AttemptExists { task_id: String, attempt: u32 },
    #[error("task `{task_id}`: {source}")]
    InvalidTransition {
        task_id: String,
        source: InvalidTransition,
    },
    /// The task is not in the state the caller last saw: another worker moved it.
    #[error("task `{task_id}` is {actual}, expected {expected}: another worker moved it")]
    StaleState {
        task_id: String,
        expected: TaskState,
        actual: TaskState,
    },
    #[error("the queue database {path} has schema version {found}, newer than this polyphony supports ({supported}); upgrade polyphony")]
    SchemaTooNew {
        path: PathBuf,
        found: i64,
        supported: i64,
    },
    /// A stored value that does not parse (a hand-edited row, or a newer binary's data).
    #[error("corrupt value in the queue database: {0}")]
    Corrupt(String),
    /// `store.url` / `POLYPHONY_STORE_URL` is not a usable URL (shown without password).
    #[error("the store URL {shown} is not usable: {detail}")]
    BadUrl { shown: String, detail: String },
    /// The backend at `shown` does not do this yet.
    #[error("the store at {shown}: {what}")]
    Unsupported { shown: String, what: &'static str },
    /// The PostgreSQL server could not be reached or refused the login.
    #[error("cannot connect to the store {shown}: {detail}")]
    Unreachable { shown: String, detail: String },
    /// The PostgreSQL server refused or failed a statement, or the connection broke.
    #[error("PostgreSQL store error: {0}")]
    Database(DriverError),
    /// A task recorded the most transitions its key range holds (SQLite schema 13).
    #[error("task `{task_id}` has {most} transitions, the most one task can record")]
    TooManyTransitions { task_id: String, most: i64 },
    #[error("cannot encode {what} as JSON: {source}")]
    Json {
        what: &'static str,
        source: serde_json::Error,
    },
}

/// A driver's error, opaque outside the store (its type is the store's business).
#[derive(Debug)]
pub struct DriverError {
    inner: Box<dyn std::error::Error + Send + Sync>,
    damage: bool,
    full: bool,
}

impl DriverError {
    /// Whether the database file is damaged (SQLITE_CORRUPT, SQLITE_NOTADB).
    pub fn is_damage(&self) -> bool {
        self.damage
    }
}

impl From<rusqlite::Error> for DriverError {
    fn from(e: rusqlite::Error) -> DriverError {
        DriverError {
            damage: is_damage(&e),
            full: matches!(e.sqlite_error_code(), Some(ErrorCode::DiskFull)),
            inner: Box::new(e),
        }
    }
}

impl StoreError {
    /// Whether the store failed for want of disk space: SQLite's (SQLITE_FULL, which a
    /// write of the database, its log or a temporary file can meet) or the PostgreSQL
    /// server's (SQLSTATE 53100, `disk_full`).
    pub fn is_full(&self) -> bool {
        match self {
            StoreError::Sqlite(d)
            | StoreError::Database(d)
            | StoreError::Open { source: d, .. } => d.full,
            _ => false,
        }
    }
}

impl std::fmt::Display for DriverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl std::error::Error for DriverError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner.source()
    }
}

impl From<postgres::Error> for StoreError {
    fn from(e: postgres::Error) -> StoreError {
        StoreError::Database(DriverError {
            full: e.code() == Some(&postgres::error::SqlState::DISK_FULL),
            inner: Box::new(e),
            damage: false,
        })
    }
}

/// Every SQLite error passes here, so a damaged file is noticed wherever it is met
/// (`store::damaged`).
impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> StoreError {
        StoreError::Sqlite(DriverError::from(e))
    }
}

/// Set once any store call in this process met a damaged database (`store::health`).
static DAMAGED: AtomicBool = AtomicBool::new(false);

/// Whether this process has met a damaged database.
pub fn damaged() -> bool {
    DAMAGED.load(Ordering::SeqCst)
}

/// Whether `e` says the file is damaged or not a database; remembers it for [`damaged`].
pub fn is_damage(e: &rusqlite::Error) -> bool {
    let hit = matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase)
    );
    if hit {
        mark_damaged();
    }
    hit
}

/// Remembers for [`damaged`] that this process met a damaged database.
pub(super) fn mark_damaged() {
    DAMAGED.store(true, Ordering::SeqCst);
}
