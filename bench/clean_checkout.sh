#!/bin/sh
# Checking on a clean checkout vs in place (issue 11): per check, polyphony now writes the
# landing commit's tree into a fresh directory (a temporary index: `git read-tree` +
# `git checkout-index --all --prefix`, the commands WorkspaceManager::checkout runs), chowns
# it for the container user, runs the check container over it and removes it. Before, the
# check container mounted the agent's workspace directly. Both are timed in one interleaved
# run on the same repository, with the same check container (no network, the test image).
#
# Usage: bench/clean_checkout.sh [REPO ...]
#   REPO: a local git repository (default: this one, plus a generated 5,000-file repository)
# Env: BENCH_REPS (default 7), BENCH_DIR (scratch, default /tmp/polyphony-bench),
#      BENCH_IMAGE (default: the newest polyphony-test:* image; build it with any Docker test).
# Prints a Markdown table; records it in docs/benchmarks.md under "## Clean checkout per check".
set -eu
cd "$(dirname "$0")/.."
reps="${BENCH_REPS:-7}"
scratch="${BENCH_DIR:-/tmp/polyphony-bench}/clean-checkout"
image="${BENCH_IMAGE:-$(docker images --format '{{.Repository}}:{{.Tag}}' polyphony-test | grep -v ':latest$' | head -n 1)}"
[ -n "$image" ] || { echo "bench/clean_checkout.sh: no polyphony-test image (run a Docker test first)" >&2; exit 2; }
rm -rf "$scratch"
mkdir -p "$scratch"
trap 'rm -rf "$scratch"' EXIT
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
g() { git -c safe.directory='*' -c user.name=b -c user.email=b@example.invalid -c init.defaultBranch=main "$@"; }

# A generated repository: 5,000 text files of 4 KiB, one commit (cached under BENCH_DIR).
synthetic() {
  dir="${BENCH_DIR:-/tmp/polyphony-bench}/synthetic-5000"
  if [ ! -d "$dir/.git" ]; then
    rm -rf "$dir"
    mkdir -p "$dir/src"
    head -c 15360000 /dev/urandom | base64 -w0 | split -b 4096 -a 4 - "$dir/src/f"
    g -C "$dir" init -q
    g -C "$dir" add -A
    g -C "$dir" commit -qm synthetic
  fi
  echo "$dir"
}

if [ "$#" -gt 0 ]; then repos="$*"; else repos="$(pwd) $(synthetic)"; fi

now_ms() { echo $(($(date +%s%N) / 1000000)); }
check='find . -type f | wc -l'
run_check() { docker run --rm --network none --user 1000:1000 -v "$1:/workspace" -w /workspace "$image" sh -c "$check" >/dev/null; }
median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : int((a[NR / 2] + a[NR / 2 + 1]) / 2) }'; }

table="$scratch/table.md"
{
  echo "| Repository | Files | In place: check (ms) | Clean: checkout + chown (ms) | Clean: check (ms) | Clean: remove (ms) | Clean total (ms) | Ratio clean / in place | Reference: \`cp -r\` of the tree (ms) |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
} >"$table"
for repo in $repos; do
  name=$(basename "$repo")
  ws="$scratch/ws-$name"
  g clone -q --no-hardlinks "$repo" "$ws"
  chown -R 1000:1000 "$ws" 2>/dev/null || true
  sha=$(g -C "$ws" rev-parse HEAD)
  files=$(g -C "$ws" ls-files | wc -l)
  : >"$scratch/inplace" ; : >"$scratch/co" ; : >"$scratch/ck" ; : >"$scratch/rm" ; : >"$scratch/total" ; : >"$scratch/cp"
  n=0
  while [ "$n" -lt "$reps" ]; do
    t0=$(now_ms); run_check "$ws"; t1=$(now_ms)
    echo $((t1 - t0)) >>"$scratch/inplace"
    dest="$scratch/$name.check-1"
    t0=$(now_ms)
    mkdir "$dest"
    GIT_INDEX_FILE="$dest.index" g -C "$ws" read-tree --end-of-options "$sha^{tree}"
    GIT_INDEX_FILE="$dest.index" g -C "$ws" checkout-index --all --force --prefix="$dest/"
    rm -f "$dest.index"
    chown -R 1000:1000 "$dest" 2>/dev/null || true
    t1=$(now_ms); run_check "$dest"; t2=$(now_ms)
    rm -rf "$dest"; t3=$(now_ms)
    echo $((t1 - t0)) >>"$scratch/co"; echo $((t2 - t1)) >>"$scratch/ck"
    echo $((t3 - t2)) >>"$scratch/rm"; echo $((t3 - t0)) >>"$scratch/total"
    # The disk's own file-creation cost for the same files, for scale.
    t0=$(now_ms); mkdir "$dest"; g -C "$ws" ls-files -z | (cd "$ws" && xargs -0 cp --parents -t "$dest"); t1=$(now_ms)
    rm -rf "$dest"
    echo $((t1 - t0)) >>"$scratch/cp"
    n=$((n + 1))
  done
  inplace=$(median <"$scratch/inplace"); total=$(median <"$scratch/total")
  ratio=$(awk -v a="$total" -v b="$inplace" 'BEGIN { printf "%.2f", a / b }')
  echo "| $name | $files | $inplace | $(median <"$scratch/co") | $(median <"$scratch/ck") | $(median <"$scratch/rm") | $total | $ratio | $(median <"$scratch/cp") |" >>"$table"
done
cat "$table"

cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
section="$scratch/section.md"
{
  echo "## Clean checkout per check"
  echo
  echo "Issue 11 \"what lands is exactly what was verified\". Each check now runs over a fresh"
  echo "checkout of the landing commit (a temporary index, \`git read-tree\` + \`git checkout-index"
  echo "--prefix\`, chown for the container user, removed afterwards) instead of the agent's"
  echo "workspace. Medians of ${reps} interleaved runs on the same repository, same check"
  echo "container (\`$check\`, no network, image \`${image%%:*}\`); an attempt pays the clean"
  echo "column once per configured check (two for the demo project: test and lint). The last"
  echo "column copies the same files with \`cp\`: the checkout costs what this disk takes to create"
  echo "that many files, nothing git-specific."
  echo
  echo "- Date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- Machine: $(nproc) CPUs, ${cpu}, $(git --version), load average $(cut -d' ' -f1-3 /proc/loadavg) (shared build machine)"
  echo "- Command: \`BENCH_REPS=${reps} bench/clean_checkout.sh\`"
  echo
  cat "$table"
  echo
} >"$section"
doc=docs/benchmarks.md
awk -v sect="$section" '
  BEGIN { while ((getline l < sect) > 0) body = body l "\n" }
  /^## Clean checkout per check$/ { skip = 1; printf "%s", body; done = 1; next }
  skip && /^## / { skip = 0 }
  !skip { print }
  END { if (!done) printf "\n%s", body }
' "$doc" >"$scratch/doc.md"
cp "$scratch/doc.md" "$doc"
echo "recorded in $doc"
