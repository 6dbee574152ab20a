#!/usr/bin/env bash
# The machine's CPU while a held agent container waits for its release (issue 25), the
# entrypoint woken by a line in its release FIFO against polling for the release file.
# Usage: bench/hold_cpu.sh [IMAGE] [REPS]   (IMAGE: polyphony-test:latest)
set -euo pipefail
image="${1:-polyphony-test:latest}"
reps="${2:-5}"
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
hz=$(getconf CLK_TCK)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkfifo -m 0666 "$dir/release.fifo"
chmod 0755 "$dir"
for mode in fifo poll; do
    total=0
    for _ in $(seq "$reps"); do
        rm -f "$dir/released"
        fifo_env=/polyphony/release.fifo
        [ "$mode" = poll ] && fifo_env=
        id=$(docker create -u 1000:1000 -v "$dir:/polyphony:ro" \
            -e POLYPHONY_HOLD_UNTIL=/polyphony/released -e POLYPHONY_HOLD_FIFO="$fifo_env" \
            -e POLYPHONY_HOLD_SECONDS=10 "$image" true)
        docker start "$id" >/dev/null
        sleep 0.5
        b0=$(busy); sleep 2; b1=$(busy)
        : > "$dir/released"
        # As the daemon does: a line only for a reader already there (never blocks).
        if [ "$mode" = fifo ]; then
            timeout 5 sh -c 'printf "released\n" > "$1"' _ "$dir/release.fifo"
        fi
        docker wait "$id" >/dev/null
        docker rm "$id" >/dev/null
        total=$((total + (b1 - b0) * 1000 / hz))
    done
    echo "$mode: $((total / reps / 2)) ms of the machine's CPU per second held (mean of $reps, 2 s each)"
done
