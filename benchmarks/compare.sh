#!/usr/bin/env bash
# A/B on the GPU: the same benchmarks/sweep.py arguments run against a baseline tree and this one,
# alternating, ROUNDS times each (the GPU's drift between runs shows as the spread of each side).
#   git archive main kernels | tar -x -C build/base     (build/ goes to the GPU machine with the tree)
#   BASE=build/base ROUNDS=2 bash benchmarks/compare.sh --only merge --ops softmax_merge
# The baseline runs this tree's benchmarks/ scripts (copied into BASE) on BASE's kernels/.
set -uo pipefail
BASE=${BASE:?BASE: a directory holding the baseline kernels/ package}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$BASE/benchmarks" && cp "$HERE"/*.py "$BASE/benchmarks/"
for r in $(seq "${ROUNDS:-2}"); do
  echo "== round $r: base ($BASE)"
  python3 "$BASE/benchmarks/sweep.py" "$@"
  echo "== round $r: this tree"
  python3 "$HERE/sweep.py" "$@"
done
