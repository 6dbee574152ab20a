#!/bin/sh
# Clone-per-attempt benchmark (issues 4 and 18): polyphony's WorkspaceManager::prepare in both
# clone modes (shared, dissociate) vs `git clone --reference MIRROR --dissociate` vs plain
# `git clone`, in one interleaved run, on a generated repository of >= 20,000 commits and a
# pack over 100 MiB (cached under $BENCH_DIR): time and disk per attempt. Records the medians
# in docs/benchmarks.md under "## Clone per attempt".
#
# Usage: bench/clone.sh            (env: BENCH_REPS=7 BENCH_COMMITS=20000 BENCH_DIR=/tmp/polyphony-bench)
set -eu
cd "$(dirname "$0")/.."
export BENCH_DIR="${BENCH_DIR:-/tmp/polyphony-bench}"
export BENCH_REPS="${BENCH_REPS:-7}"
export BENCH_COMMITS="${BENCH_COMMITS:-20000}"

cargo build --release --example clone_bench
bin="${CARGO_TARGET_DIR:-target}/release/examples/clone_bench"
table=$(mktemp)
trap 'rm -f "$table" "$table.section" "$table.doc"' EXIT
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
"$bin" >"$table"
cat "$table"

cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
{
  echo "## Clone per attempt"
  echo
  echo "Issues 4 and 18 / spec §6. Polyphony fetches its bare mirror under a lock, then, with"
  echo "\`git.clone_mode: shared\` (the default), clones the mirror sharing its objects (the"
  echo "attempt's \`objects/info/alternates\` names the mirror, mounted read-only in the agent"
  echo "container) so only the checkout and the branch are written; with \`dissociate\` it clones"
  echo "the upstream with the mirror as \`--reference\` and dissociates (a full copy). Compared,"
  echo "in one interleaved run, with the git CLI doing the same reference clone and with a plain"
  echo "clone. Time is wall time of the whole preparation; disk is blocks allocated under the"
  echo "attempt's \`.git\` and under its whole directory (the checkout is the same in every mode)."
  echo
  echo "- Date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- Machine: $(nproc) CPUs, ${cpu}, $(git --version)"
  echo "- Load average at start: ${load_before} (shared build machine)"
  echo "- Command: \`BENCH_DIR=${BENCH_DIR} BENCH_REPS=${BENCH_REPS} BENCH_COMMITS=${BENCH_COMMITS} bench/clone.sh\`"
  echo
  cat "$table"
  echo
} >"$table.section"

doc=docs/benchmarks.md
mkdir -p docs
[ -f "$doc" ] || printf '# Benchmarks\n\nMeasured figures; each section says how to reproduce it.\n' >"$doc"
# Replace our section (from its heading to the next "## " heading) and keep everything else.
awk -v section="$table.section" '
  /^## Clone per attempt[[:space:]]*$/ { while ((getline l < section) > 0) print l; skip = 1; done = 1; next }
  skip && /^## / { skip = 0 }
  !skip { print }
  END { if (!done) { print ""; while ((getline l < section) > 0) print l } }
' "$doc" >"$table.doc"
mv "$table.doc" "$doc"
echo "recorded in $doc"
