//! Schema migrations, tracked in SQLite's `user_version` (DESIGN.md "Durability").
//!
//! Each entry of [`MIGRATIONS`] moves the schema from version `i` to `i + 1`. Entries are
//! append-only: never edit one that has shipped, add a new one.

/// The columns schema 11 adds to `tasks`: the claim's owner and lease, and the pin. Bare
/// SQLite in `examples/bench.rs` creates its tasks table from schema 1 and these, so both
/// sides of the claim benchmark write the same row.
macro_rules! tasks_claim_columns {
    () => {
        r#"
ALTER TABLE tasks ADD COLUMN machine TEXT;       -- the claim's daemon: its machine id
ALTER TABLE tasks ADD COLUMN owner TEXT;         -- machine/pid/nonce; NULL at rest
ALTER TABLE tasks ADD COLUMN lease_until TEXT;   -- fixed-width RFC 3339 UTC
ALTER TABLE tasks ADD COLUMN pinned_to TEXT;     -- the only machine that may claim it
"#
    };
}

/// The `ALTER TABLE tasks ADD COLUMN`s of schema 11 (the claim's owner and lease, the pin).
pub const TASKS_CLAIM_COLUMNS: &str = tasks_claim_columns!();

/// Version `i + 1` is reached by running `MIGRATIONS[i]`.
pub const MIGRATIONS: &[&str] = &[
    // 1: tasks, transitions, attempts, events, landing records, counters.
    r#"
CREATE TABLE tasks (
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
    context_tokens  INTEGER NOT NULL,
    requires_web    INTEGER NOT NULL,
    labels          TEXT NOT NULL,           -- JSON array of strings
    metadata        TEXT NOT NULL,           -- JSON object of strings
    attempts        INTEGER NOT NULL,
    failures        INTEGER NOT NULL,
    created_at      TEXT NOT NULL,           -- fixed-width RFC 3339 UTC: sorts as text
    updated_at      TEXT NOT NULL,
    next_attempt_at TEXT
);
-- The rowid orders tasks by insertion: `status` lists newest first by walking it
-- backwards, and claims take the oldest first.
CREATE INDEX tasks_state ON tasks(state);
CREATE INDEX tasks_source_ref ON tasks(source_ref);
CREATE INDEX tasks_next_attempt ON tasks(next_attempt_at) WHERE next_attempt_at IS NOT NULL;

-- One row per state change, written in the same transaction as the change.
CREATE TABLE transitions (
    id          INTEGER PRIMARY KEY,
    task_id     TEXT NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    from_state  TEXT NOT NULL,
    to_state    TEXT NOT NULL,
    reason      TEXT NOT NULL,
    at          TEXT NOT NULL
);
CREATE INDEX transitions_task ON transitions(task_id, id);

CREATE TABLE attempts (
    task_id          TEXT NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    attempt          INTEGER NOT NULL,
    agent            TEXT NOT NULL,
    identity         TEXT NOT NULL,
    run_spec         TEXT NOT NULL,          -- JSON RunSpec (names of secrets only)
    container_id     TEXT,
    workspace        TEXT NOT NULL,
    branch           TEXT NOT NULL,
    status           TEXT,                   -- NULL while running
    turns            INTEGER,
    tokens_in        INTEGER,
    tokens_out       INTEGER,
    tokens_cached    INTEGER,
    cost_usd         REAL,
    exit_code        INTEGER,
    duration_seconds REAL,
    final_message    TEXT,
    reason           TEXT,
    evidence         TEXT NOT NULL DEFAULT '[]', -- JSON array of CheckEvidence
    commit_sha       TEXT,
    pr_url           TEXT,
    started_at       TEXT NOT NULL,
    finished_at      TEXT,
    PRIMARY KEY (task_id, attempt)
);
CREATE INDEX attempts_identity ON attempts(identity, started_at);

-- Re-ingesting a transcript after a crash inserts with OR IGNORE: never a duplicate.
CREATE TABLE events (
    task_id  TEXT NOT NULL,
    attempt  INTEGER NOT NULL,
    seq      INTEGER NOT NULL,
    kind     TEXT NOT NULL,
    stream   TEXT NOT NULL,
    summary  TEXT NOT NULL,
    data     TEXT NOT NULL,                  -- JSON
    at       TEXT NOT NULL,
    PRIMARY KEY (task_id, attempt, seq),
    FOREIGN KEY (task_id, attempt) REFERENCES attempts(task_id, attempt) ON DELETE CASCADE
) WITHOUT ROWID;

-- What has been pushed and opened for a task, so a restart never opens a second PR.
CREATE TABLE landings (
    task_id     TEXT PRIMARY KEY REFERENCES tasks(id) ON DELETE CASCADE,
    attempt     INTEGER NOT NULL,
    branch      TEXT NOT NULL,
    commit_sha  TEXT NOT NULL,
    pr_url      TEXT,
    updated_at  TEXT NOT NULL
);

-- Comments posted at the source, one per (task, purpose), so none is posted twice.
CREATE TABLE source_comments (
    task_id     TEXT NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    purpose     TEXT NOT NULL,
    comment_id  INTEGER NOT NULL,
    at          TEXT NOT NULL,
    PRIMARY KEY (task_id, purpose)
);

-- Monotonic counters (local task ids are never reused).
CREATE TABLE counters (
    name   TEXT PRIMARY KEY,
    value  INTEGER NOT NULL
);
INSERT INTO counters (name, value) VALUES ('local_task', 0);

-- Small durable facts: poll cursors and the like.
CREATE TABLE kv (
    key         TEXT PRIMARY KEY,
    value       TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);
"#,
    // 2: `status --json` prints stored text. Each task's summary object (the bytes
    // `serde_json` writes for a `TaskSummary`) lives in a narrow side table kept current by
    // triggers, in the same statement as every insert, update or delete of the task, so no
    // write path can forget it. Listing walks this ~330-byte-a-row table instead of the
    // task rows with their bodies (docs/benchmarks.md "Status: profile and fix").
    // `seq` is the task's insertion order (its rowid at insert): newest first is `seq DESC`.
    r#"
CREATE TABLE task_summaries (
    seq   INTEGER PRIMARY KEY,
    id    TEXT NOT NULL UNIQUE,
    json  TEXT NOT NULL
);
INSERT INTO task_summaries (seq, id, json)
    SELECT rowid, id, json_object('id', tasks.id, 'title', tasks.title, 'source_ref', tasks.source_ref, 'state', tasks.state, 'task_type', tasks.task_type, 'risk', tasks.risk, 'labels', json(tasks.labels), 'attempts', tasks.attempts, 'failures', tasks.failures, 'created_at', tasks.created_at, 'updated_at', tasks.updated_at, 'next_attempt_at', tasks.next_attempt_at) FROM tasks ORDER BY rowid;
CREATE TRIGGER task_summaries_insert AFTER INSERT ON tasks BEGIN
    INSERT INTO task_summaries (seq, id, json) VALUES (NEW.rowid, NEW.id, json_object('id', NEW.id, 'title', NEW.title, 'source_ref', NEW.source_ref, 'state', NEW.state, 'task_type', NEW.task_type, 'risk', NEW.risk, 'labels', json(NEW.labels), 'attempts', NEW.attempts, 'failures', NEW.failures, 'created_at', NEW.created_at, 'updated_at', NEW.updated_at, 'next_attempt_at', NEW.next_attempt_at));
END;
CREATE TRIGGER task_summaries_update AFTER UPDATE OF id, title, source_ref, state, task_type,
    risk, labels, attempts, failures, created_at, updated_at, next_attempt_at ON tasks BEGIN
    UPDATE task_summaries SET id = NEW.id, json = json_object('id', NEW.id, 'title', NEW.title, 'source_ref', NEW.source_ref, 'state', NEW.state, 'task_type', NEW.task_type, 'risk', NEW.risk, 'labels', json(NEW.labels), 'attempts', NEW.attempts, 'failures', NEW.failures, 'created_at', NEW.created_at, 'updated_at', NEW.updated_at, 'next_attempt_at', NEW.next_attempt_at) WHERE id = OLD.id;
END;
CREATE TRIGGER task_summaries_delete AFTER DELETE ON tasks BEGIN
    DELETE FROM task_summaries WHERE id = OLD.id;
END;
"#,
    // 3: intents (issue 19). A side effect outside the store (claim comment and labels,
    // container creation, landing, blocked report) is recorded before it is attempted and
    // marked done after; whoever runs next finishes a pending one. One row per (task,
    // kind, attempt); recording it again makes it pending again.
    r#"
CREATE TABLE intents (
    task_id     TEXT NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    kind        TEXT NOT NULL,           -- claim | container | land | block
    attempt     INTEGER NOT NULL,
    payload     TEXT NOT NULL,           -- JSON, never a secret
    created_at  TEXT NOT NULL,
    done_at     TEXT,                    -- NULL while pending
    PRIMARY KEY (task_id, kind, attempt)
);
CREATE INDEX intents_pending ON intents(task_id) WHERE done_at IS NULL;
"#,
    // 4: usage limits (issue 14). Quota is a property of (identity, agent), shared by every
    // task: one row per pair, out while `resets_at` is in the future. A task whose whole
    // chain is out waits (FAILED, `next_attempt_at` = the earliest reset, nothing counted);
    // `quota_waits` says why, for `status`. The per-task `quota_exhausted:{task}` kv rows
    // this replaces held agents a task found unusable, quota and refused logins alike,
    // with no reset: they become the task's refused agents (`agents_refused:{task}`), so a
    // task in flight during the upgrade keeps the chain position it had.
    r#"
CREATE TABLE quota (
    identity   TEXT NOT NULL,
    agent      TEXT NOT NULL,
    resets_at  TEXT NOT NULL,            -- fixed-width RFC 3339 UTC: out until then
    reported   INTEGER NOT NULL,         -- 1: the CLI named the reset; 0: default cool-down
    message    TEXT NOT NULL,            -- the CLI's limit message, scrubbed, one line
    task_id    TEXT,                     -- where it was met (no foreign key: outlives tasks)
    attempt    INTEGER,
    hit_at     TEXT NOT NULL,
    PRIMARY KEY (identity, agent)
);
CREATE TABLE quota_waits (
    task_id    TEXT PRIMARY KEY REFERENCES tasks(id) ON DELETE CASCADE,
    until      TEXT NOT NULL,
    agent      TEXT NOT NULL,
    identity   TEXT NOT NULL,
    resets     TEXT NOT NULL,            -- JSON array of AgentReset, chain order
    parked_at  TEXT NOT NULL
);
UPDATE kv SET key = 'agents_refused:' || substr(key, 17) WHERE key LIKE 'quota_exhausted:%';
-- `status --json` gains `quota_wait` ({until, agent, identity} of a parked task, else null):
-- the summary triggers of version 2 again with the field; a change of a task's wait
-- touches the task so its summary is rebuilt the one way; every summary is rebuilt once.
DROP TRIGGER task_summaries_insert;
DROP TRIGGER task_summaries_update;
CREATE TRIGGER task_summaries_insert AFTER INSERT ON tasks BEGIN
    INSERT INTO task_summaries (seq, id, json) VALUES (NEW.rowid, NEW.id, json_object('id', NEW.id, 'title', NEW.title, 'source_ref', NEW.source_ref, 'state', NEW.state, 'task_type', NEW.task_type, 'risk', NEW.risk, 'labels', json(NEW.labels), 'attempts', NEW.attempts, 'failures', NEW.failures, 'created_at', NEW.created_at, 'updated_at', NEW.updated_at, 'next_attempt_at', NEW.next_attempt_at, 'quota_wait', json((SELECT json_object('until', w.until, 'agent', w.agent, 'identity', w.identity) FROM quota_waits w WHERE w.task_id = NEW.id AND NEW.state = 'FAILED'))));
END;
CREATE TRIGGER task_summaries_update AFTER UPDATE OF id, title, source_ref, state, task_type,
    risk, labels, attempts, failures, created_at, updated_at, next_attempt_at ON tasks BEGIN
    UPDATE task_summaries SET id = NEW.id, json = json_object('id', NEW.id, 'title', NEW.title, 'source_ref', NEW.source_ref, 'state', NEW.state, 'task_type', NEW.task_type, 'risk', NEW.risk, 'labels', json(NEW.labels), 'attempts', NEW.attempts, 'failures', NEW.failures, 'created_at', NEW.created_at, 'updated_at', NEW.updated_at, 'next_attempt_at', NEW.next_attempt_at, 'quota_wait', json((SELECT json_object('until', w.until, 'agent', w.agent, 'identity', w.identity) FROM quota_waits w WHERE w.task_id = NEW.id AND NEW.state = 'FAILED'))) WHERE id = OLD.id;
END;
CREATE TRIGGER quota_waits_insert AFTER INSERT ON quota_waits BEGIN
    UPDATE tasks SET updated_at = updated_at WHERE id = NEW.task_id;
END;
CREATE TRIGGER quota_waits_update AFTER UPDATE ON quota_waits BEGIN
    UPDATE tasks SET updated_at = updated_at WHERE id = NEW.task_id;
END;
CREATE TRIGGER quota_waits_delete AFTER DELETE ON quota_waits BEGIN
    UPDATE tasks SET updated_at = updated_at WHERE id = OLD.task_id;
END;
UPDATE tasks SET updated_at = updated_at;
"#,
    // 5: the pull requests this home opened and the shepherd watches (issue 15): one row
    // per landing task, what was handled on it (reviews, comments, checks, base merges, the
    // hand-off), its follow-up tasks (each a task of its own: LANDED stays terminal) and the
    // replies a follow-up posted, so nothing is acted on or posted twice.
    r#"
CREATE TABLE pulls (
    task_id     TEXT PRIMARY KEY REFERENCES tasks(id) ON DELETE CASCADE,
    repo        TEXT NOT NULL,               -- owner/name
    number      INTEGER NOT NULL,
    branch      TEXT NOT NULL,
    base        TEXT NOT NULL,
    head_sha    TEXT NOT NULL,
    state       TEXT NOT NULL,               -- open | merged | closed
    checks      TEXT,                        -- passing | failing | pending (last look)
    review      TEXT,                        -- approved | changes_requested | commented
    mergeable   TEXT,                        -- yes | no | unknown
    followups   INTEGER NOT NULL DEFAULT 0,
    watching    INTEGER NOT NULL DEFAULT 1,
    updated_at  TEXT NOT NULL,
    UNIQUE (repo, number)
);
CREATE INDEX pulls_watching ON pulls(task_id) WHERE watching = 1;

CREATE TABLE pull_handled (
    pull_task_id TEXT NOT NULL REFERENCES pulls(task_id) ON DELETE CASCADE,
    key          TEXT NOT NULL,              -- review:N | review-comment:N | issue-comment:N | check:NAME:CONCLUSION | base:SHA | reported:… | hand-off
    followup     TEXT,                       -- the follow-up task that took it, if any
    at           TEXT NOT NULL,
    PRIMARY KEY (pull_task_id, key)
) WITHOUT ROWID;

CREATE TABLE followups (
    task_id      TEXT PRIMARY KEY REFERENCES tasks(id) ON DELETE CASCADE,
    pull_task_id TEXT NOT NULL REFERENCES pulls(task_id) ON DELETE CASCADE,
    seq          INTEGER NOT NULL,
    plan         TEXT NOT NULL,              -- JSON shepherd::decide::FollowUp
    created_at   TEXT NOT NULL,
    UNIQUE (pull_task_id, seq)
);

CREATE TABLE followup_replies (
    task_id     TEXT NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    key         TEXT NOT NULL,               -- the feedback key replied to
    comment_id  INTEGER NOT NULL,
    at          TEXT NOT NULL,
    PRIMARY KEY (task_id, key)
) WITHOUT ROWID;
"#,
    // 6: `status --json` gains `pull` ({number, state, checks, review, mergeable,
    // followups, watching} of the pull request the task landed, else null) and
    // `followup_of` ({task_id, number} of the pull request a follow-up works on, else
    // null) (issue 15): the summary triggers of version 4 again with the fields; a change
    // of a pull or follow-up row touches its task (and a pull's new number its follow-ups)
    // so its summary is rebuilt the one way, in the same statement; every summary is
    // rebuilt once.
    r#"
DROP TRIGGER task_summaries_insert;
DROP TRIGGER task_summaries_update;
CREATE TRIGGER task_summaries_insert AFTER INSERT ON tasks BEGIN
    INSERT INTO task_summaries (seq, id, json) VALUES (NEW.rowid, NEW.id, json_object('id', NEW.id, 'title', NEW.title, 'source_ref', NEW.source_ref, 'state', NEW.state, 'task_type', NEW.task_type, 'risk', NEW.risk, 'labels', json(NEW.labels), 'attempts', NEW.attempts, 'failures', NEW.failures, 'created_at', NEW.created_at, 'updated_at', NEW.updated_at, 'next_attempt_at', NEW.next_attempt_at, 'quota_wait', json((SELECT json_object('until', w.until, 'agent', w.agent, 'identity', w.identity) FROM quota_waits w WHERE w.task_id = NEW.id AND NEW.state = 'FAILED')), 'pull', json((SELECT json_object('number', p.number, 'state', p.state, 'checks', p.checks, 'review', p.review, 'mergeable', p.mergeable, 'followups', p.followups, 'watching', json(CASE WHEN p.watching <> 0 THEN 'true' ELSE 'false' END)) FROM pulls p WHERE p.task_id = NEW.id)), 'followup_of', json((SELECT json_object('task_id', f.pull_task_id, 'number', fp.number) FROM followups f JOIN pulls fp ON fp.task_id = f.pull_task_id WHERE f.task_id = NEW.id))));
END;
CREATE TRIGGER task_summaries_update AFTER UPDATE OF id, title, source_ref, state, task_type,
    risk, labels, attempts, failures, created_at, updated_at, next_attempt_at ON tasks BEGIN
    UPDATE task_summaries SET id = NEW.id, json = json_object('id', NEW.id, 'title', NEW.title, 'source_ref', NEW.source_ref, 'state', NEW.state, 'task_type', NEW.task_type, 'risk', NEW.risk, 'labels', json(NEW.labels), 'attempts', NEW.attempts, 'failures', NEW.failures, 'created_at', NEW.created_at, 'updated_at', NEW.updated_at, 'next_attempt_at', NEW.next_attempt_at, 'quota_wait', json((SELECT json_object('until', w.until, 'agent', w.agent, 'identity', w.identity) FROM quota_waits w WHERE w.task_id = NEW.id AND NEW.state = 'FAILED')), 'pull', json((SELECT json_object('number', p.number, 'state', p.state, 'checks', p.checks, 'review', p.review, 'mergeable', p.mergeable, 'followups', p.followups, 'watching', json(CASE WHEN p.watching <> 0 THEN 'true' ELSE 'false' END)) FROM pulls p WHERE p.task_id = NEW.id)), 'followup_of', json((SELECT json_object('task_id', f.pull_task_id, 'number', fp.number) FROM followups f JOIN pulls fp ON fp.task_id = f.pull_task_id WHERE f.task_id = NEW.id))) WHERE id = OLD.id;
END;
CREATE TRIGGER pulls_insert AFTER INSERT ON pulls BEGIN
    UPDATE tasks SET updated_at = updated_at WHERE id = NEW.task_id;
END;
CREATE TRIGGER pulls_update AFTER UPDATE ON pulls BEGIN
    UPDATE tasks SET updated_at = updated_at WHERE id IN (OLD.task_id, NEW.task_id);
END;
CREATE TRIGGER pulls_update_number AFTER UPDATE OF task_id, number ON pulls BEGIN
    UPDATE tasks SET updated_at = updated_at
        WHERE id IN (SELECT task_id FROM followups WHERE pull_task_id = NEW.task_id);
END;
CREATE TRIGGER pulls_delete AFTER DELETE ON pulls BEGIN
    UPDATE tasks SET updated_at = updated_at WHERE id = OLD.task_id;
END;
CREATE TRIGGER followups_insert AFTER INSERT ON followups BEGIN
    UPDATE tasks SET updated_at = updated_at WHERE id = NEW.task_id;
END;
CREATE TRIGGER followups_update AFTER UPDATE OF task_id, pull_task_id ON followups BEGIN
    UPDATE tasks SET updated_at = updated_at WHERE id IN (OLD.task_id, NEW.task_id);
END;
CREATE TRIGGER followups_delete AFTER DELETE ON followups BEGIN
    UPDATE tasks SET updated_at = updated_at WHERE id = OLD.task_id;
END;
UPDATE tasks SET updated_at = updated_at;
"#,
    // 7: the store writes each summary itself, in Rust, in the same transaction as the
    // change it summarises (`views::refresh_summary`, issue 27): the triggers of versions
    // 2, 4 and 6 cost every claim a `json_object` and three subqueries, and a shared
    // PostgreSQL store cannot run SQLite's. After this step `Store::migrate` rebuilds every
    // summary once (`views::rebuild_summaries`), so they are the bytes serde writes.
    r#"
DROP TRIGGER IF EXISTS task_summaries_insert;
DROP TRIGGER IF EXISTS task_summaries_update;
DROP TRIGGER IF EXISTS task_summaries_delete;
DROP TRIGGER IF EXISTS quota_waits_insert;
DROP TRIGGER IF EXISTS quota_waits_update;
DROP TRIGGER IF EXISTS quota_waits_delete;
DROP TRIGGER IF EXISTS pulls_insert;
DROP TRIGGER IF EXISTS pulls_update;
DROP TRIGGER IF EXISTS pulls_update_number;
DROP TRIGGER IF EXISTS pulls_delete;
DROP TRIGGER IF EXISTS followups_insert;
DROP TRIGGER IF EXISTS followups_update;
DROP TRIGGER IF EXISTS followups_delete;
"#,
    // 8: who holds each claim (issue 27): the daemon (machine id, process, start nonce) and
    // until when its lease runs, one row while the task is active; and the machine a task
    // with a local-path repository is pinned to. The same tables exist on PostgreSQL
    // (`store::pg`).
    r#"
CREATE TABLE claims (
    task_id     TEXT PRIMARY KEY REFERENCES tasks(id) ON DELETE CASCADE,
    machine     TEXT NOT NULL,
    owner       TEXT NOT NULL,           -- machine/pid/nonce
    lease_until TEXT NOT NULL
);
CREATE INDEX claims_owner ON claims(owner);
CREATE TABLE pins (
    task_id TEXT PRIMARY KEY REFERENCES tasks(id) ON DELETE CASCADE,
    machine TEXT NOT NULL
);
"#,
    // 9: `status --json` summaries gain `agent` (the latest attempt's) and `cost_usd` (all
    // attempts', issue 29). No table changes: `Store::migrate` rewrites every summary.
    "",
    // 10: each attempt records its reservation against its identity's daily ceiling, the
    // per-attempt cap of the daemon that started it (issue 27: daemons of a fleet may have
    // different caps). Rows started before have none (NULL): a ceiling check counts one
    // still running at the checking daemon's cap, as before; an ended one needs none.
    "ALTER TABLE attempts ADD COLUMN reserve_usd REAL;",
    // 11: a claim dirties fewer pages (issue 27, docs/benchmarks.md "Queue"): each B-tree a
    // write touches is a page appended to the WAL, and a claim touched nine (a bare
    // `UPDATE … RETURNING` two). The claim's owner and lease and a task's pin become
    // columns of its row (the `claims` and `pins` tables, with their three indexes, go;
    // views of the same names keep them readable); a summary is found by its task's rowid,
    // not by a second index on its id; and a task's transitions are one B-tree keyed by
    // (task rowid, number), not a table and an index (they are listed per task by `n` and
    // across tasks by time).
    concat!(
        tasks_claim_columns!(),
        r#"
UPDATE tasks SET machine = c.machine, owner = c.owner, lease_until = c.lease_until
    FROM claims c WHERE c.task_id = tasks.id;
UPDATE tasks SET pinned_to = p.machine FROM pins p WHERE p.task_id = tasks.id;
DROP TABLE claims;
DROP TABLE pins;
CREATE VIEW claims AS
    SELECT id AS task_id, machine, owner, lease_until FROM tasks WHERE owner IS NOT NULL;
CREATE VIEW pins AS SELECT id AS task_id, pinned_to AS machine FROM tasks WHERE pinned_to IS NOT NULL;

CREATE TABLE task_summaries_11 (
    seq   INTEGER PRIMARY KEY,               -- the task's rowid
    json  TEXT NOT NULL
);
INSERT INTO task_summaries_11 (seq, json) SELECT seq, json FROM task_summaries;
DROP TABLE task_summaries;
ALTER TABLE task_summaries_11 RENAME TO task_summaries;

CREATE TABLE transitions_11 (
    task_seq    INTEGER NOT NULL,            -- the task's rowid (tasks are never deleted)
    n           INTEGER NOT NULL,            -- 1, 2, …: the task's transitions in order
    task_id     TEXT NOT NULL,
    from_state  TEXT NOT NULL,
    to_state    TEXT NOT NULL,
    reason      TEXT NOT NULL,
    at          TEXT NOT NULL,
    PRIMARY KEY (task_seq, n)
) WITHOUT ROWID;
INSERT INTO transitions_11 (task_seq, n, task_id, from_state, to_state, reason, at)
    SELECT t.rowid, row_number() OVER (PARTITION BY tr.task_id ORDER BY tr.id), tr.task_id,
        tr.from_state, tr.to_state, tr.reason, tr.at
    FROM transitions tr JOIN tasks t ON t.id = tr.task_id;
DROP TABLE transitions;
ALTER TABLE transitions_11 RENAME TO transitions;
"#
    ),
    // 12: an attempt's egress events as its proxy logs them (issue 25), stored while the
    // attempt runs. Their own sequence, apart from `events` (whose seq is the agent's
    // stream line, where a re-attached stream resumes): `seq` is twice the proxy's log
    // line the row comes from, plus one for a summary (so a summary can follow the refusal
    // of the same line). A re-read of the log inserts nothing twice; one summary is kept,
    // the latest. The same table exists on PostgreSQL (`store::pg`).
    r#"
CREATE TABLE egress_events (
    task_id  TEXT NOT NULL,
    attempt  INTEGER NOT NULL,
    seq      INTEGER NOT NULL,
    what     TEXT NOT NULL,                  -- refused | summary
    summary  TEXT NOT NULL,
    data     TEXT NOT NULL,                  -- JSON
    at       TEXT NOT NULL,
    PRIMARY KEY (task_id, attempt, seq),
    FOREIGN KEY (task_id, attempt) REFERENCES attempts(task_id, attempt) ON DELETE CASCADE
) WITHOUT ROWID;
"#,
    // 13: a claim dirties fewer pages still (issue 27, docs/benchmarks.md "Queue"): a
    // claim wrote four B-trees (the task row, its `tasks_state` entry, its transition and
    // its summary; a bare `UPDATE … RETURNING` two) and each is a page appended to the WAL.
    // A task's summary becomes a column of its row, written in the same transaction as
    // before (`views::write_summary`), so the claim writes the page it already writes; a
    // view of the old name keeps `task_summaries` readable. And a task's transitions are
    // keyed by one integer, the task's rowid times 2^20 plus the transition's number
    // (`task_seq` and `n` are that key's parts, computed): rows appended at the table's end
    // split their page the quick way (a new page), where the `WITHOUT ROWID` key of schema
    // 11 redistributed three sibling pages at every split (0.36 pages per claim, measured).
    r#"
ALTER TABLE tasks ADD COLUMN summary TEXT;     -- the task's `status --json` object
UPDATE tasks SET summary = (SELECT s.json FROM task_summaries s WHERE s.seq = tasks.rowid);
DROP TABLE task_summaries;
CREATE VIEW task_summaries AS SELECT rowid AS seq, summary AS json FROM tasks;

CREATE TABLE transitions_13 (
    id          INTEGER PRIMARY KEY,         -- task_seq * 1048576 + n
    task_seq    INTEGER GENERATED ALWAYS AS (id >> 20) VIRTUAL,  -- the task's rowid
    n           INTEGER GENERATED ALWAYS AS (id & 1048575) VIRTUAL, -- 1, 2, …
    task_id     TEXT NOT NULL,
    from_state  TEXT NOT NULL,
    to_state    TEXT NOT NULL,
    reason      TEXT NOT NULL,
    at          TEXT NOT NULL
);
INSERT INTO transitions_13 (id, task_id, from_state, to_state, reason, at)
    SELECT task_seq * 1048576 + n, task_id, from_state, to_state, reason, at
    FROM transitions ORDER BY task_seq, n;
DROP TABLE transitions;
ALTER TABLE transitions_13 RENAME TO transitions;
"#,
];

/// A task's transitions on SQLite (schema 13) are keyed `task_seq * TRANSITION_SPAN + n`:
/// a task has at most `TRANSITION_SPAN - 1` of them.
pub const TRANSITION_SPAN: i64 = 1 << 20;

/// The version whose migration hands the summaries to the store: after it, every summary
/// is rebuilt in Rust.
pub const RUST_SUMMARIES: i64 = 7;

/// The versions after whose migration every stored summary is rewritten: the hand-over to
/// Rust, then each version whose summaries gained fields.
pub const SUMMARY_REBUILDS: &[i64] = &[RUST_SUMMARIES, 9];

/// The schema version this binary writes.
pub fn latest() -> i64 {
    MIGRATIONS.len() as i64
}
