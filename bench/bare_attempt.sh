#!/bin/sh
# The bare steps of one no-op attempt, for the spawn-overhead benchmark (examples/bench.rs
# `spawn`): what `polyphony spawn --task ID` does for a local task, done by hand with the
# git and docker CLIs on the same repository, image, argv and container settings.
#
# Usage: bench/bare_attempt.sh ORIGIN MIRROR WORKSPACE BRANCH NAME CREDENTIALS PROMPT
# Env:   BARE_STEPS=FILE appends "step seconds" lines (per-step wall time) to FILE.
set -eu
origin=$1 mirror=$2 ws=$3 branch=$4 name=$5 creds=$6 prompt=$7
steps=${BARE_STEPS:-/dev/null}
t0=$(date +%s.%N)
step() {
    t1=$(date +%s.%N)
    echo "$1 $(echo "$t1 - $t0" | awk '{ print $1 - $3 }')" >>"$steps"
    t0=$t1
}
# Same hardening and limits as the containers polyphony creates (spec §8).
limits="--cap-drop ALL --security-opt no-new-privileges --init --pids-limit 512 \
--memory 512m --memory-swap 512m --cpus 1 --user $(id -u):$(id -g) \
--tmpfs /home/worker:rw,exec,mode=1777,size=256m --tmpfs /tmp:rw,exec,mode=1777,size=256m \
-e HOME=/home/worker -w /workspace"

git clone --quiet --reference "$mirror" --dissociate -- "$origin" "$ws"
git -C "$ws" checkout --quiet -b "$branch"
step clone
# shellcheck disable=SC2086
docker run --rm --name "$name" $limits -e POLYPHONY_CREDENTIALS=/polyphony/credentials \
    -v "$ws:/workspace" -v "$creds:/polyphony/credentials/.claude:ro" \
    polyphony-test:latest \
    claude -p --output-format stream-json --verbose --dangerously-skip-permissions "$prompt" \
    >"$ws.ndjson"
step agent
git -C "$ws" add -A
git -C "$ws" -c user.name=bench -c user.email=bench@polyphony.invalid commit --quiet -m "$branch"
step commit
# shellcheck disable=SC2086
docker run --rm --name "$name-verify-1" $limits --network none -v "$ws:/workspace" \
    polyphony-test:latest /bin/sh -c true
step check
git -C "$ws" push --quiet origin "$branch"
step push
