#!/bin/sh
# Host-side verification cost (issue 23): polyphony's landing commit from the working tree
# in its own repository, the change list, the gates' batched blob read and the clean
# checkout, beside `git add -A` + `git commit` of the same files in a scratch clone, for
# 1, 1,000 and 20,000 changed files (examples/verify_bench.rs).
#
# Usage: bench/host_verify.sh
# Env: BENCH_REPS (default 3), BENCH_BASE_FILES (tracked files of the base, default 2000),
#      BENCH_PROFILE (release, the default, or dev).
# Prints a Markdown table; record it in docs/benchmarks.md under "## Host-side verification".
set -eu
cd "$(dirname "$0")/.."
profile="${BENCH_PROFILE:-release}"
if [ "$profile" = release ]; then
  cargo build --release --example verify_bench
  bin="${CARGO_TARGET_DIR:-target}/release/examples/verify_bench"
else
  cargo build --example verify_bench
  bin="${CARGO_TARGET_DIR:-target}/debug/examples/verify_bench"
fi
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
"$bin"
