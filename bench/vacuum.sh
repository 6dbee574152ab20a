#!/bin/sh
# Queue space (issue 24, docs/benchmarks.md "Queue space"): what giving back the pages
# retention frees costs on a queue of about BENCH_VACUUM_MB (100) MB, half of it events
# that retention then deletes. Two queues made by the binary under test:
#   new:    as `Store::open` makes them now (auto_vacuum INCREMENTAL): the sweep's
#           `PRAGMA incremental_vacuum(2048)` steps, each timed (the write lock is held
#           for one step at a time), then `wal_checkpoint(TRUNCATE)`;
#   legacy: made before (auto_vacuum NONE): the one `VACUUM` that converts it.
# The pragmas are the ones `Store::reclaim_space` runs, through the sqlite3 shell (the
# SQLite work is all of the cost). Prints Markdown on stdout.
#
# Usage: bench/vacuum.sh   Env: POLYPHONY_BIN (default target/debug/polyphony),
#        BENCH_DIR (default /tmp/polyphony-bench), BENCH_VACUUM_MB (100)
set -eu
cd "$(dirname "$0")/.."
bin="${POLYPHONY_BIN:-target/debug/polyphony}"
mb="${BENCH_VACUUM_MB:-100}"
dir="${BENCH_DIR:-/tmp/polyphony-bench}/vacuum"
command -v sqlite3 >/dev/null || { echo "bench/vacuum.sh: sqlite3 missing" >&2; exit 2; }
rm -rf "$dir"
mkdir -p "$dir/new" "$dir/legacy"

now() { date +%s.%N; }
ms() { echo "$1 $2" | awk '{ printf "%.0f", ($2 - $1) * 1000 }'; }
size() { stat -c %s "$1"; }
mib() { echo "$1" | awk '{ printf "%.1f MiB", $1 / 1048576 }'; }

# The legacy queue: WAL before any auto_vacuum mode, as every queue was made until now.
sqlite3 "$dir/legacy/queue.db" 'PRAGMA journal_mode = WAL;' >/dev/null
for q in new legacy; do
  POLYPHONY_HOME="$dir/$q" "$bin" init >/dev/null
  POLYPHONY_HOME="$dir/$q" "$bin" enqueue --no-check --repo https://example.com/a/b.git "make the queue" >/dev/null
done

# 100 tasks, one attempt each, events of about 500 bytes (a CLI line) until the queue holds
# about $mb MB.
rows=$((mb * 1700 / 100))
fill() {
  sqlite3 "$1" <<SQL >/dev/null
PRAGMA journal_mode = WAL;
BEGIN;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100)
INSERT INTO tasks (id, title, body, source, source_ref, repo, state, task_type, scope, risk,
                   context_tokens, requires_web, labels, metadata, attempts, failures,
                   created_at, updated_at)
SELECT printf('t%03d', i), 'bench', '', 'local', printf('local:t%03d', i), '/r', 'LANDED',
       'bugfix', 'small', 'low', 0, 0, '[]', '{}', 1, 0, '2026-01-01T00:00:00.000000Z',
       '2026-01-01T00:00:00.000000Z' FROM n;
INSERT INTO attempts (task_id, attempt, agent, identity, run_spec, workspace, branch,
                      started_at, finished_at)
SELECT id, 1, 'claude', 'demo', '{}', '/w', 'b', '2026-01-01T00:00:00.000000Z',
       '2026-01-01T00:00:00.000000Z' FROM tasks;
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < $rows - 1)
INSERT INTO events (task_id, attempt, seq, kind, stream, summary, data, at)
SELECT id, 1, i, 'message', 'stdout', 'progress', printf('{"text":"%d %s"}', i, hex(randomblob(200))),
       '2026-01-01T00:00:00.000000Z' FROM tasks, n;
COMMIT;
PRAGMA wal_checkpoint(TRUNCATE);
SQL
}

for q in new legacy; do
  db="$dir/$q/queue.db"
  fill "$db"
  eval "before_$q=\$(size \"$db\")"
  # What retention deletes: the events of the oldest half of the attempts.
  sqlite3 "$db" "DELETE FROM events WHERE task_id < 't051'; PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null
  eval "free_$q=\$(sqlite3 \"$db\" 'PRAGMA freelist_count;')"
done

db="$dir/new/queue.db"
steps=0
longest=0
start=$(now)
while [ "$(sqlite3 "$db" 'PRAGMA freelist_count;')" -gt 0 ]; do
  s=$(now)
  sqlite3 "$db" 'PRAGMA incremental_vacuum(2048);' >/dev/null
  t=$(ms "$s" "$(now)")
  [ "$t" -gt "$longest" ] && longest=$t
  steps=$((steps + 1))
done
sqlite3 "$db" 'PRAGMA wal_checkpoint(TRUNCATE);' >/dev/null
new_ms=$(ms "$start" "$(now)")
after_new=$(size "$db")

db="$dir/legacy/queue.db"
start=$(now)
sqlite3 "$db" 'PRAGMA auto_vacuum = INCREMENTAL; VACUUM; PRAGMA wal_checkpoint(TRUNCATE);' >/dev/null
legacy_ms=$(ms "$start" "$(now)")
after_legacy=$(size "$db")
legacy_mode=$(sqlite3 "$db" 'PRAGMA auto_vacuum;')

echo "| queue | before | free pages after the delete | after | time | write lock held |"
echo "|---|---|---|---|---|---|"
echo "| new (auto_vacuum INCREMENTAL): $steps \`incremental_vacuum(2048)\` steps + checkpoint | $(mib "$before_new") | $free_new | $(mib "$after_new") | $new_ms ms | at most $longest ms at a time |"
echo "| made before (NONE): one \`VACUUM\` (converts it; mode now $legacy_mode) + checkpoint | $(mib "$before_legacy") | $free_legacy | $(mib "$after_legacy") | $legacy_ms ms | $legacy_ms ms at once, and about twice the file free on disk |"
rm -rf "$dir"
