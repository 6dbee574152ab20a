//! The PostgreSQL backend of the store port (issue 27): where the full [`Store`] lives
//! when several daemons on several machines share one queue. The statements are the
//! store's own (`sql` renders them for PostgreSQL); this file holds what only PostgreSQL
//! has: connecting, its schema ([`MIGRATIONS`], tracked in `polyphony_schema` and applied
//! under an advisory lock, so daemons starting together migrate once), and the server's
//! version and settings for `doctor`. Timestamps are the same fixed-width RFC 3339 text as
//! on SQLite (they sort as text, bytewise: `COLLATE "C"`).
//!
//! The client is the synchronous `postgres` crate; like a SQLite store, a PostgreSQL
//! `Store` is one connection, used from a blocking thread (the client runs its own
//! runtime: do not call it on an async worker thread).
//!
//! Must not: hold a password beyond connecting, or print one.

use std::path::PathBuf;

use postgres::NoTls;

use super::sql::{params, Db, Dialect};
use super::{Result, Store, StoreError};

/// Version `i + 1` is reached by running `MIGRATIONS[i]` (append-only, as on SQLite).
pub const MIGRATIONS: &[&str] = &[
    // 1: the queue core: tasks, transitions, summaries, owned claims, pins, usage limits.
    r#"
CREATE TABLE tasks (
    seq             BIGSERIAL PRIMARY KEY,
    id              TEXT NOT NULL UNIQUE,
    title           TEXT NOT NULL,
    body            TEXT NOT NULL,
    source          TEXT NOT NULL,
    source_ref      TEXT NOT NULL,
    repo            TEXT NOT NULL,
    base_ref        TEXT,
    state           TEXT NOT NULL,
    task_type       TEXT NOT NULL,
    scope           TEXT NOT NULL,
    risk            TEXT NOT NULL,
    context_tokens  BIGINT NOT NULL,
    requires_web    BOOLEAN NOT NULL,
    labels          TEXT NOT NULL,
    metadata        TEXT NOT NULL,
    attempts        BIGINT NOT NULL,
    failures        BIGINT NOT NULL,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    next_attempt_at TEXT
);
CREATE INDEX tasks_state ON tasks(state);
CREATE INDEX tasks_discovered ON tasks(seq) WHERE state = 'DISCOVERED';
CREATE INDEX tasks_retry ON tasks(next_attempt_at) WHERE state = 'FAILED' AND next_attempt_at IS NOT NULL;
CREATE TABLE transitions (
    id         BIGSERIAL PRIMARY KEY,
    task_id    TEXT NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    from_state TEXT NOT NULL,
    to_state   TEXT NOT NULL,
    reason     TEXT NOT NULL,
    at         TEXT NOT NULL
);
CREATE INDEX transitions_task ON transitions(task_id, id);
CREATE TABLE task_summaries (
    seq  BIGINT PRIMARY KEY,
    id   TEXT NOT NULL UNIQUE,
    json TEXT NOT NULL
);
CREATE TABLE claims (
    task_id     TEXT PRIMARY KEY REFERENCES tasks(id) ON DELETE CASCADE,
    machine     TEXT NOT NULL,
    owner       TEXT NOT NULL,
    lease_until TEXT NOT NULL
);
CREATE INDEX claims_owner ON claims(owner);
CREATE TABLE pins (
    task_id TEXT PRIMARY KEY REFERENCES tasks(id) ON DELETE CASCADE,
    machine TEXT NOT NULL
);
CREATE TABLE quota (
    identity  TEXT NOT NULL,
    agent     TEXT NOT NULL,
    resets_at TEXT NOT NULL,
    reported  BOOLEAN NOT NULL,
    message   TEXT NOT NULL,
    task_id   TEXT,
    attempt   BIGINT,
    hit_at    TEXT NOT NULL,
    PRIMARY KEY (identity, agent)
);
"#,
    // 2: the rest of the store (issue 27: the daemon and every verb run on PostgreSQL):
    // attempts, events, landings, comments, counters, kv, intents, quota waits, pull
    // requests and follow-ups, as SQLite's schema 1-8 has them. Integers are BIGINT,
    // SQLite's REAL is DOUBLE PRECISION; text that is compared in order (timestamps, kv
    // key ranges) sorts bytewise (`COLLATE "C"`), as on SQLite. `pulls.seq` is SQLite's
    // rowid (`sql::render_postgres`).
    r#"
ALTER TABLE tasks ALTER COLUMN created_at TYPE TEXT COLLATE "C";
ALTER TABLE tasks ALTER COLUMN updated_at TYPE TEXT COLLATE "C";
ALTER TABLE tasks ALTER COLUMN next_attempt_at TYPE TEXT COLLATE "C";
ALTER TABLE transitions ALTER COLUMN at TYPE TEXT COLLATE "C";
ALTER TABLE claims ALTER COLUMN lease_until TYPE TEXT COLLATE "C";
ALTER TABLE quota ALTER COLUMN resets_at TYPE TEXT COLLATE "C";
CREATE INDEX tasks_source_ref ON tasks(source_ref);
CREATE TABLE attempts (
    task_id          TEXT NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    attempt          BIGINT NOT NULL,
    agent            TEXT NOT NULL,
    identity         TEXT NOT NULL,
    run_spec         TEXT NOT NULL,
    container_id     TEXT,
    workspace        TEXT NOT NULL,
    branch           TEXT NOT NULL,
    status           TEXT,
    turns            BIGINT,
    tokens_in        BIGINT,
    tokens_out       BIGINT,
    tokens_cached    BIGINT,
    cost_usd         DOUBLE PRECISION,
    exit_code        BIGINT,
    duration_seconds DOUBLE PRECISION,
    final_message    TEXT,
    reason           TEXT,
    evidence         TEXT NOT NULL DEFAULT '[]',
    commit_sha       TEXT,
    pr_url           TEXT,
    started_at       TEXT COLLATE "C" NOT NULL,
    finished_at      TEXT COLLATE "C",
    PRIMARY KEY (task_id, attempt)
);
CREATE INDEX attempts_identity ON attempts(identity, started_at);
CREATE TABLE events (
    task_id  TEXT NOT NULL,
    attempt  BIGINT NOT NULL,
    seq      BIGINT NOT NULL,
    kind     TEXT NOT NULL,
    stream   TEXT NOT NULL,
    summary  TEXT NOT NULL,
    data     TEXT NOT NULL,
    at       TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (task_id, attempt, seq),
    FOREIGN KEY (task_id, attempt) REFERENCES attempts(task_id, attempt) ON DELETE CASCADE
);
CREATE TABLE landings (
    task_id     TEXT PRIMARY KEY REFERENCES tasks(id) ON DELETE CASCADE,
    attempt     BIGINT NOT NULL,
    branch      TEXT NOT NULL,
    commit_sha  TEXT NOT NULL,
    pr_url      TEXT,
    updated_at  TEXT COLLATE "C" NOT NULL
);
CREATE TABLE source_comments (
    task_id     TEXT NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    purpose     TEXT NOT NULL,
    comment_id  BIGINT NOT NULL,
    at          TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (task_id, purpose)
);
CREATE TABLE counters (
    name   TEXT PRIMARY KEY,
    value  BIGINT NOT NULL
);
INSERT INTO counters (name, value) VALUES ('local_task', 0);
CREATE TABLE kv (
    key         TEXT COLLATE "C" PRIMARY KEY,
    value       TEXT NOT NULL,
    updated_at  TEXT COLLATE "C" NOT NULL
);
CREATE TABLE intents (
    task_id     TEXT NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    kind        TEXT NOT NULL,
    attempt     BIGINT NOT NULL,
    payload     TEXT NOT NULL,
    created_at  TEXT COLLATE "C" NOT NULL,
    done_at     TEXT COLLATE "C",
    PRIMARY KEY (task_id, kind, attempt)
);
CREATE INDEX intents_pending ON intents(task_id) WHERE done_at IS NULL;
CREATE TABLE quota_waits (
    task_id    TEXT PRIMARY KEY REFERENCES tasks(id) ON DELETE CASCADE,
    until      TEXT COLLATE "C" NOT NULL,
    agent      TEXT NOT NULL,
    identity   TEXT NOT NULL,
    resets     TEXT NOT NULL,
    parked_at  TEXT COLLATE "C" NOT NULL
);
CREATE TABLE pulls (
    seq         BIGSERIAL NOT NULL UNIQUE,
    task_id     TEXT PRIMARY KEY REFERENCES tasks(id) ON DELETE CASCADE,
    repo        TEXT NOT NULL,
    number      BIGINT NOT NULL,
    branch      TEXT NOT NULL,
    base        TEXT NOT NULL,
    head_sha    TEXT NOT NULL,
    state       TEXT NOT NULL,
    checks      TEXT,
    review      TEXT,
    mergeable   TEXT,
    followups   BIGINT NOT NULL DEFAULT 0,
    watching    BIGINT NOT NULL DEFAULT 1,
    updated_at  TEXT COLLATE "C" NOT NULL,
    UNIQUE (repo, number)
);
CREATE INDEX pulls_watching ON pulls(task_id) WHERE watching = 1;
CREATE TABLE pull_handled (
    pull_task_id TEXT NOT NULL REFERENCES pulls(task_id) ON DELETE CASCADE,
    key          TEXT NOT NULL,
    followup     TEXT,
    at           TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (pull_task_id, key)
);
CREATE TABLE followups (
    task_id      TEXT PRIMARY KEY REFERENCES tasks(id) ON DELETE CASCADE,
    pull_task_id TEXT NOT NULL REFERENCES pulls(task_id) ON DELETE CASCADE,
    seq          BIGINT NOT NULL,
    plan         TEXT NOT NULL,
    created_at   TEXT COLLATE "C" NOT NULL,
    UNIQUE (pull_task_id, seq)
);
CREATE TABLE followup_replies (
    task_id     TEXT NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    key         TEXT NOT NULL,
    comment_id  BIGINT NOT NULL,
    at          TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (task_id, key)
);
"#,
    // 3: each attempt records its reservation against its identity's daily ceiling, as
    // SQLite's schema 10 (NULL on rows started before: counted at the checker's cap).
    "ALTER TABLE attempts ADD COLUMN reserve_usd DOUBLE PRECISION;",
    // 4: SQLite's schema 11 (issue 27): the claim's owner and lease and a task's pin are
    // columns of its row (views keep `claims` and `pins` readable), a summary is found by
    // its task's `seq` alone, and a task's transitions are numbered per task, keyed by
    // (task seq, number). On PostgreSQL a claim then writes one heap row and its indexes
    // fewer; the statements are the same on both backends.
    r#"
ALTER TABLE tasks ADD COLUMN machine TEXT, ADD COLUMN owner TEXT,
    ADD COLUMN lease_until TEXT COLLATE "C", ADD COLUMN pinned_to TEXT;
UPDATE tasks SET machine = c.machine, owner = c.owner, lease_until = c.lease_until
    FROM claims c WHERE c.task_id = tasks.id;
UPDATE tasks SET pinned_to = p.machine FROM pins p WHERE p.task_id = tasks.id;
DROP TABLE claims;
DROP TABLE pins;
CREATE VIEW claims AS
    SELECT id AS task_id, machine, owner, lease_until FROM tasks WHERE owner IS NOT NULL;
CREATE VIEW pins AS SELECT id AS task_id, pinned_to AS machine FROM tasks WHERE pinned_to IS NOT NULL;
ALTER TABLE task_summaries DROP COLUMN id;
ALTER TABLE transitions ADD COLUMN task_seq BIGINT, ADD COLUMN n BIGINT;
UPDATE transitions tr SET task_seq = t.seq, n = x.n
    FROM tasks t, (SELECT id, row_number() OVER (PARTITION BY task_id ORDER BY id) AS n
                   FROM transitions) x
    WHERE t.id = tr.task_id AND x.id = tr.id;
ALTER TABLE transitions DROP COLUMN id;
ALTER TABLE transitions ALTER COLUMN task_seq SET NOT NULL, ALTER COLUMN n SET NOT NULL,
    ADD PRIMARY KEY (task_seq, n);
"#,
    // 5: an attempt's egress events as its proxy logs them (issue 25; SQLite's schema 12).
    r#"
CREATE TABLE egress_events (
    task_id  TEXT NOT NULL,
    attempt  BIGINT NOT NULL,
    seq      BIGINT NOT NULL,
    what     TEXT NOT NULL,
    summary  TEXT NOT NULL,
    data     TEXT NOT NULL,
    at       TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (task_id, attempt, seq),
    FOREIGN KEY (task_id, attempt) REFERENCES attempts(task_id, attempt) ON DELETE CASCADE
);
"#,
    // 6: SQLite's schema 13 (issue 27): a task's summary is a column of its row (a view
    // keeps `task_summaries` readable), so a claim writes the summary into the row version
    // it writes anyway, not a second table. The transitions keep their (task seq, number)
    // key: a heap and a B-tree index, where SQLite's 13 re-keys its table.
    r#"
ALTER TABLE tasks ADD COLUMN summary TEXT;
UPDATE tasks SET summary = s.json FROM task_summaries s WHERE s.seq = tasks.seq;
DROP TABLE task_summaries;
CREATE VIEW task_summaries AS SELECT seq, summary AS json FROM tasks;
"#,
];

/// Every table of the store on PostgreSQL (`doctor`'s check reads each; tests wipe them).
/// `claims` and `pins` are views of `tasks` since version 4, `task_summaries` since 6.
pub const TABLES: &[&str] = &[
    "tasks",
    "transitions",
    "quota",
    "attempts",
    "events",
    "egress_events",
    "landings",
    "source_comments",
    "counters",
    "kv",
    "intents",
    "quota_waits",
    "pulls",
    "pull_handled",
    "followups",
    "followup_replies",
];

/// The advisory lock key under which migrations run (any fixed number; "poly" in ASCII).
const MIGRATION_LOCK: i64 = 0x706f_6c79;

/// A parsed PostgreSQL URL. The text with its password is kept only to connect.
pub(super) struct PgTarget {
    pub(super) config: postgres::Config,
    /// `postgresql://user@host:port/db`: what messages and `doctor` show.
    pub(super) shown: String,
}

/// Connects (the password from the URL, else `PGPASSWORD`) and migrates: the full
/// [`Store`] on PostgreSQL.
pub(super) fn connect(target: &PgTarget) -> Result<Store> {
    let store = Store {
        db: Db::postgres(client(target)?),
        path: PathBuf::from(&target.shown),
    };
    store.migrate()?;
    Ok(store)
}

/// A connection to the server (the password from the URL, else `PGPASSWORD`).
pub(super) fn client(target: &PgTarget) -> Result<postgres::Client> {
    let mut config = target.config.clone();
    if config.get_password().is_none() {
        if let Ok(password) = std::env::var("PGPASSWORD") {
            config.password(password);
        }
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(std::time::Duration::from_secs(10));
    }
    super::sql::off_runtime(|| config.connect(NoTls)).map_err(|e| StoreError::Unreachable {
        shown: target.shown.clone(),
        detail: e.to_string(),
    })
}

/// The schema version of the server's store (0 before the first migration).
pub(super) fn schema_version(db: &Db) -> Result<i64> {
    let exists: bool = db.query_row(
        "SELECT to_regclass('polyphony_schema') IS NOT NULL",
        params![],
        |r| r.get(0),
    )?;
    if !exists {
        return Ok(0);
    }
    Ok(db
        .query_opt(
            "SELECT version FROM polyphony_schema WHERE id = 1",
            params![],
            |r| r.get(0),
        )?
        .unwrap_or(0))
}

/// Brings the server's schema up to date, under an advisory lock so daemons starting
/// together migrate once.
pub(super) fn migrate(db: &Db, shown: &std::path::Path) -> Result<()> {
    let latest = MIGRATIONS.len() as i64;
    if schema_version(db)? == latest {
        return Ok(());
    }
    db.begin_write()?;
    let done = (|| {
        db.execute("SELECT pg_advisory_xact_lock(?1)", params![MIGRATION_LOCK])?;
        db.batch(
            "CREATE TABLE IF NOT EXISTS polyphony_schema (id INT PRIMARY KEY, version BIGINT NOT NULL)",
        )?;
        let current: i64 = db
            .query_opt(
                "SELECT version FROM polyphony_schema WHERE id = 1",
                params![],
                |r| r.get(0),
            )?
            .unwrap_or(0);
        if current > latest {
            return Err(StoreError::SchemaTooNew {
                path: shown.to_path_buf(),
                found: current,
                supported: latest,
            });
        }
        for sql in MIGRATIONS.iter().skip(current as usize) {
            db.batch(sql)?;
        }
        if current < latest {
            db.execute(
                "INSERT INTO polyphony_schema (id, version) VALUES (1, ?1) \
                 ON CONFLICT (id) DO UPDATE SET version = excluded.version",
                params![latest],
            )?;
        }
        Ok(())
    })();
    match done {
        Ok(()) => db.commit(),
        Err(e) => {
            db.rollback();
            Err(e)
        }
    }
}

impl Store {
    /// The PostgreSQL server's version (`server_version`) and whether it is one this store
    /// supports (PostgreSQL 12 or newer): what `doctor` reports. `None` on SQLite.
    pub fn server_version(&self) -> Result<Option<(String, bool)>> {
        if self.db.dialect() != Dialect::Postgres {
            return Ok(None);
        }
        let version: String =
            self.db
                .query_row("SELECT current_setting('server_version')", params![], |r| {
                    r.get(0)
                })?;
        let num: String = self.db.query_row(
            "SELECT current_setting('server_version_num')",
            params![],
            |r| r.get(0),
        )?;
        let num: i64 = num.trim().parse().unwrap_or(0);
        Ok(Some((version, num >= 120000)))
    }

    /// Server settings `doctor` shows for a PostgreSQL store (name, value): durability
    /// (`fsync`, `synchronous_commit`, `full_page_writes`) and capacity
    /// (`max_connections`). Empty on SQLite.
    pub fn server_settings(&self) -> Result<Vec<(String, String)>> {
        if self.db.dialect() != Dialect::Postgres {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for name in [
            "fsync",
            "synchronous_commit",
            "full_page_writes",
            "max_connections",
        ] {
            let value: String =
                self.db
                    .query_row("SELECT current_setting(?1)", params![name], |r| r.get(0))?;
            out.push((name.to_string(), value));
        }
        Ok(out)
    }

    /// Removes every row (tests and benchmarks on a throwaway server only); on SQLite,
    /// nothing.
    pub fn wipe_for_tests(&self) -> Result<()> {
        if self.db.dialect() != Dialect::Postgres {
            return Ok(());
        }
        self.db.batch(&format!(
            "TRUNCATE {} RESTART IDENTITY CASCADE; INSERT INTO counters (name, value) VALUES ('local_task', 0)",
            TABLES.join(", ")
        ))
    }
}
