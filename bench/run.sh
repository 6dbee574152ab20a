#!/bin/sh
# Benchmarks of issue 8, one command: builds the release binaries, runs each section, prints
# its Markdown and records it in docs/benchmarks.md (each section replaced in place, the
# others kept), under a "Run" section naming the machine and the command.
#
# Usage: bench/run.sh [--quick] [SECTION ...]
#   SECTION: queue status pg ingest clone spawn egress gateway daemon http sse soak vacuum
#            (default: all)
#   --quick: fewer repetitions and smaller inputs (a smoke test; do not record its figures)
# Env: BENCH_DIR (scratch, default /tmp/polyphony-bench), BENCH_REPS, BENCH_TASKS,
#      BENCH_CLI_SAMPLE, BENCH_STATUS_TASKS, BENCH_INGEST_MB, BENCH_DAEMON_SECS (see
#      examples/bench.rs and examples/bench/attempts.rs), BENCH_SOAK_TASKS (1000),
#      BENCH_SOAK_CONCURRENCY (4), BENCH_GATEWAY_REQUESTS (2000), BENCH_GATEWAY_MIB (32).
#      spawn, egress, gateway, daemon and soak need a Docker engine; pg starts a
#      throwaway PostgreSQL cluster (scripts/pg-test-cluster.sh; BENCH_PG_URL: use that one).
#
# Adding a section: write `section_NAME` printing its Markdown body, add NAME to ALL below.
set -eu
cd "$(dirname "$0")/.."

ALL="queue status pg ingest clone spawn egress gateway daemon http sse soak vacuum"
quick=0
sections=""
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) case " $ALL " in
         *" $arg "*) sections="$sections $arg" ;;
         *) echo "bench/run.sh: unknown section \`$arg\` (expected one of: $ALL)" >&2; exit 2 ;;
       esac ;;
  esac
done
[ -n "$sections" ] || sections=" $ALL"
if [ "$quick" = 1 ]; then
  export BENCH_REPS="${BENCH_REPS:-1}" BENCH_TASKS="${BENCH_TASKS:-2000}"
  export BENCH_CLI_SAMPLE="${BENCH_CLI_SAMPLE:-20}" BENCH_STATUS_TASKS="${BENCH_STATUS_TASKS:-10000}"
  export BENCH_INGEST_MB="${BENCH_INGEST_MB:-10}" BENCH_COMMITS="${BENCH_COMMITS:-500}"
  export BENCH_DAEMON_SECS="${BENCH_DAEMON_SECS:-3}" BENCH_SOAK_TASKS="${BENCH_SOAK_TASKS:-20}"
  export BENCH_GATEWAY_REQUESTS="${BENCH_GATEWAY_REQUESTS:-200}" BENCH_GATEWAY_MIB="${BENCH_GATEWAY_MIB:-4}"
fi
export BENCH_DIR="${BENCH_DIR:-/tmp/polyphony-bench}"
command -v /usr/bin/time >/dev/null || { echo "bench/run.sh: /usr/bin/time missing (apt-get install time)" >&2; exit 2; }
command -v sqlite3 >/dev/null || { echo "bench/run.sh: sqlite3 missing (apt-get install sqlite3)" >&2; exit 2; }

cargo build --release --bin polyphony --example bench --example gateway_bench
target="${CARGO_TARGET_DIR:-target}"
export POLYPHONY_BIN="$(cd "$target/release" && pwd)/polyphony"
harness="$target/release/examples/bench"
doc=docs/benchmarks.md
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# ------------------------------------------------------------------ sections
# Each prints the section's body (Markdown, no heading) on stdout.

section_queue() {
  echo "Issue 8 item 3 / DESIGN.md \"Queue: thousands of claims per second\". In-process through"
  echo "the store API (what the daemon calls) and through the real binary, each beside bare SQLite."
  echo
  echo "- Date: $(stamp)"
  echo "- Command: \`$(env_line BENCH_REPS BENCH_TASKS BENCH_CLI_SAMPLE)bench/run.sh queue\` (examples/bench.rs \`queue\`)"
  echo
  "$harness" queue
}

section_status() {
  echo "Issue 8 item 3 / DESIGN.md \"\`status\` over 100k tasks under 100 ms\". Wall time of the real"
  echo "binary (process start, open, query, print) beside the \`sqlite3\` shell printing the same rows."
  echo
  echo "- Date: $(stamp)"
  echo "- Command: \`$(env_line BENCH_REPS BENCH_STATUS_TASKS)bench/run.sh status\` (examples/bench.rs \`status\`)"
  echo
  "$harness" status
}

section_pg() {
  echo "Issue 27. Claims per second on a PostgreSQL store with 1 and 4 claiming processes, each"
  echo "beside the bare \`UPDATE … FOR UPDATE SKIP LOCKED RETURNING\` in the same run."
  echo
  echo "- Date: $(stamp)"
  echo "- Command: \`$(env_line BENCH_REPS BENCH_TASKS)bench/run.sh pg\` (examples/bench.rs \`pg\`)"
  echo
  if [ -n "${BENCH_PG_URL:-}" ]; then
    "$harness" pg
    return
  fi
  # The test cluster runs with fsync off; a benchmark measures durable commits.
  eval "$(PG_TEST_FSYNC=on scripts/pg-test-cluster.sh start 55470)"
  [ "$(psql "$POLYPHONY_TEST_PG_URL" -qAtXc 'SHOW fsync')" = on ] || { echo "bench/run.sh: the cluster runs without fsync" >&2; scripts/pg-test-cluster.sh stop "$POLYPHONY_TEST_PG_DIR"; return 1; }
  BENCH_PG_URL="$POLYPHONY_TEST_PG_URL" "$harness" pg || { scripts/pg-test-cluster.sh stop "$POLYPHONY_TEST_PG_DIR"; return 1; }
  scripts/pg-test-cluster.sh stop "$POLYPHONY_TEST_PG_DIR"
}

section_http() {
  echo "Issue 16. The daemon's JSON API, /metrics and dashboard over loopback at 100k tasks, and"
  echo "its memory and write latency with 50 Server-Sent-Events clients on a running attempt."
  echo
  echo "- Date: $(stamp)"
  echo "- Command: \`$(env_line BENCH_REPS BENCH_STATUS_TASKS)bench/run.sh http\` (examples/bench/http.rs)"
  echo
  "$harness" http
}

section_sse() {
  echo "Issue 24. 300 Server-Sent-Events streams on ten live attempts: one shared reader per"
  echo "attempt, streams capped in total and per client."
  echo
  echo "- Date: $(stamp)"
  echo "- Command: \`$(env_line BENCH_REPS)bench/run.sh sse\` (examples/bench/sse.rs)"
  echo
  "$harness" sse
}

section_ingest() {
  echo "Issue 8 item 5. \`polyphony replay FILE --agent A\` streams a saved transcript through the"
  echo "agent's adapter (the same classify/observe path the daemon uses on live output)."
  echo
  echo "- Date: $(stamp)"
  echo "- Command: \`$(env_line BENCH_REPS BENCH_INGEST_MB)bench/run.sh ingest\` (examples/bench.rs \`ingest\`)"
  echo
  "$harness" ingest
}

section_spawn() {
  echo "Issue 8 item 1. One no-op attempt through \`polyphony spawn --task ID\` beside a shell script"
  echo "doing the same bare steps with the git and docker CLIs, on the same repository and image."
  echo
  echo "- Date: $(stamp)"
  echo "- Command: \`$(env_line BENCH_REPS)bench/run.sh spawn\` (examples/bench/attempts.rs \`spawn\`, bench/bare_attempt.sh)"
  echo
  "$harness" spawn
}

section_egress() {
  echo "Issue 25. One no-op attempt with \`egress: allowlist\` (its own network and egress proxy) beside"
  echo "the same attempt with \`egress: open\`, in one run."
  echo
  echo "- Date: $(stamp)"
  echo "- Command: \`$(env_line BENCH_REPS)bench/run.sh egress\` (examples/bench/attempts.rs \`egress\`)"
  echo
  "$harness" egress
}

section_gateway() {
  echo "Issue 26. Model-API gateway overhead per request (p50 and p99 added latency) and the"
  echo "throughput of a streamed answer, each beside the client talking to the scripted server directly,"
  echo "in one run: the gateway on loopback and the gateway inside an attempt's egress proxy container."
  echo
  echo "- Date: $(stamp)"
  echo "- Build: release (\`cargo build --release\`, the profile bench/run.sh builds)"
  echo "- Command: \`$(env_line BENCH_GATEWAY_REQUESTS BENCH_GATEWAY_MIB)bench/run.sh gateway\` (examples/gateway_bench.rs \`markdown\`)"
  echo
  "$target/release/examples/gateway_bench" markdown
}

section_daemon() {
  echo "Issue 8 item 4. Resident memory of \`polyphony daemon\` idle and with 16 concurrent fake agents"
  echo "streaming output, then with transcripts about 10 times larger."
  echo
  echo "- Date: $(stamp)"
  echo "- Command: \`$(env_line BENCH_DAEMON_SECS)bench/run.sh daemon\` (examples/bench/attempts.rs \`daemon\`)"
  echo
  "$harness" daemon
}

section_soak() {
  echo "Issue 24, a daemon that runs for weeks. \`polyphony daemon\` takes a long stream of small real"
  echo "attempts; its resident memory is sampled against the tasks it finished."
  echo
  echo "- Date: $(stamp)"
  echo "- Command: \`$(env_line BENCH_SOAK_TASKS BENCH_SOAK_CONCURRENCY)bench/run.sh soak\` (examples/bench/soak.rs)"
  echo
  "$harness" soak
}

section_vacuum() {
  echo "Issue 24: queue.db never shrank. Retention deletes events; what it costs to give the"
  echo "freed pages back to the filesystem, on a new queue (incremental vacuum, as the sweep does it)"
  echo "and on one made before (the one \`VACUUM\` that converts it). \`store::retention\` has the choice."
  echo
  echo "- Date: $(stamp)"
  echo "- Command: \`$(env_line BENCH_VACUUM_MB)bench/run.sh vacuum\` (bench/vacuum.sh)"
  echo
  bench/vacuum.sh
}

# ------------------------------------------------------------------ plumbing

# `NAME=value ...` for the variables that are set, so the recorded command reproduces the run.
env_line() {
  for v in "$@"; do
    eval "val=\${$v:-}"
    [ -z "$val" ] || printf '%s=%s ' "$v" "$val"
  done
}

stamp() {
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
}

heading() {
  case "$1" in
    queue) echo "Queue" ;;
    status) echo "Status at scale" ;;
    pg) echo "Queue on PostgreSQL" ;;
    ingest) echo "Ingestion through replay" ;;
    clone) echo "Clone per attempt" ;;
    spawn) echo "Spawn overhead" ;;
    egress) echo "Egress: allowlist against open" ;;
    gateway) echo "Model-API gateway" ;;
    daemon) echo "Daemon memory" ;;
    http) echo "HTTP API and dashboard" ;;
    sse) echo "Event streams under load" ;;
    soak) echo "Daemon soak" ;;
    vacuum) echo "Queue space" ;;
  esac
}

# Replaces the section `## TITLE` (up to the next `## `) with FILE, or appends it.
record() {
  title=$1 file=$2
  [ -f "$doc" ] || printf '# Benchmarks\n\nMeasured figures; each section says how to reproduce it.\n' >"$doc"
  awk -v title="## $title" -v section="$file" '
    $0 == title { while ((getline l < section) > 0) print l; skip = 1; done = 1; next }
    skip && /^## / { skip = 0 }
    !skip { print }
    END { if (!done) { print ""; while ((getline l < section) > 0) print l } }
  ' "$doc" >"$work/doc"
  # No blank line piles up at the end of the file.
  awk 'NF { for (; blank > 0; blank--) print ""; print; next } { blank++ }' "$work/doc" >"$doc"
}

cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
mem=$(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
{
  echo "## Run"
  echo
  echo "Every section below comes from this one run of \`bench/run.sh\` (Clone per attempt through"
  echo "\`bench/clone.sh\`, which it calls). Sections marked \"written by hand\" are profiles kept"
  echo "between runs; their figures come from the profiling runs they name."
  echo
  echo "- Date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- Machine: $(nproc) CPUs ($cpu), $mem RAM, Linux $(uname -r), $(sqlite3 --version | cut -d' ' -f1) (sqlite3 shell), $(rustc --version)"
  echo "- Load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (a build machine shared with other jobs: expect noise)"
  echo "- Command: \`bench/run.sh$( [ "$quick" = 1 ] && echo ' --quick')$sections\`"
  echo
} >"$work/run.md"
# The Run section describes a full run only; a partial run dates its own sections.
[ "$quick" = 1 ] || [ "$sections" != " $ALL" ] || record "Run" "$work/run.md"
cat "$work/run.md"

for s in $sections; do
  title=$(heading "$s")
  echo "== $title" >&2
  if [ "$s" = clone ]; then
    # bench/clone.sh records its own section.
    if [ "$quick" = 1 ]; then
      echo "(clone skipped in --quick: run bench/clone.sh)"
    else
      bench/clone.sh
    fi
    continue
  fi
  { echo "## $title"; echo; "section_$s"; echo; } >"$work/$s.md"
  cat "$work/$s.md"
  [ "$quick" = 1 ] || record "$title" "$work/$s.md"
done
[ "$quick" = 1 ] && echo "(--quick: docs/benchmarks.md left as it was)" || echo "recorded in $doc"
