#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the store contract suite and the fleet benchmarks
# (issue 27): initdb in a temporary directory as the unprivileged `postgres` user, trust
# authentication, listening on 127.0.0.1 only (and a socket in the directory).
#
#   scripts/pg-test-cluster.sh start [PORT]   prints `export POLYPHONY_TEST_PG_URL=...; export POLYPHONY_TEST_PG_DIR=...`
#   scripts/pg-test-cluster.sh stop DIR
#
# PG_TEST_FSYNC=on starts it with fsync on (benchmarks measure durable commits; tests need
# not). A command-line setting wins over ALTER SYSTEM, so this is the only switch.
#
# Installs Debian's `postgresql` when no server binaries are found (root only).
set -euo pipefail

bindir() {
    ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1
}

case "${1:-}" in
start)
    port="${2:-55432}"
    while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done
    bin=$(bindir || true)
    if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
        apt-get update >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql >/dev/null
        # The package starts a system cluster; the tests use their own.
        (command -v pg_ctlcluster >/dev/null && pg_lsclusters -h 2>/dev/null | while read -r v n _; do pg_ctlcluster "$v" "$n" stop || true; done) || true
        bin=$(bindir)
    fi
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    dir=$(mktemp -d /tmp/polyphony-pg.XXXXXX)
    chown postgres "$dir"
    chmod 700 "$dir"
    run() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
    run "$bin/initdb" -D "$dir/data" -A trust -U poly >"$dir/initdb.log" 2>&1
    run "$bin/pg_ctl" -D "$dir/data" -w -l "$dir/log" \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=${PG_TEST_FSYNC:-off} -c max_connections=200" start >/dev/null
    run "$bin/createdb" -h 127.0.0.1 -p "$port" -U poly polyphony_test
    echo "export POLYPHONY_TEST_PG_URL=postgres://poly@127.0.0.1:$port/polyphony_test; export POLYPHONY_TEST_PG_DIR=$dir"
    ;;
stop)
    dir="${2:?stop DIR}"
    bin=$(bindir)
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -m fast stop >/dev/null || true
    else
        "$bin/pg_ctl" -D "$dir/data" -m fast stop >/dev/null || true
    fi
    rm -rf "$dir"
    ;;
*)
    echo "usage: $0 start [PORT] | stop DIR" >&2
    exit 2
    ;;
esac
