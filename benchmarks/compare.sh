#!/usr/bin/env bash
# A/B on the GPU: the same benchmarks/sweep.py arguments run against a baseline tree and this one,
# alternating, ROUNDS times each (the GPU's drift between runs shows as the spread of each side).
#   mkdir -p build/base/softmax_properties && git archive main kernels | tar -x -C build/base/softmax_properties
#   BASE=build/base ROUNDS=2 bash benchmarks/compare.sh --only merge --ops softmax_merge
# (build/ goes to the GPU machine with the tree.) The baseline runs this tree's benchmarks/ scripts
# (copied into BASE) on BASE's kernels: BASE first on PYTHONPATH, its softmax_properties/kernels/
# is the softmax_properties.kernels they import (the rest of the package comes from the installed
# checkout, a namespace package being the union of its folders).
set -uo pipefail
BASE=${BASE:?BASE: a directory holding the baseline softmax_properties/kernels/ package}
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/install.sh"
mkdir -p "$BASE/benchmarks" && cp "$HERE"/*.py "$BASE/benchmarks/"
for r in $(seq "${ROUNDS:-2}"); do
  echo "== round $r: base ($BASE)"
  PYTHONPATH="$BASE${PYTHONPATH:+:$PYTHONPATH}" python3 "$BASE/benchmarks/sweep.py" "$@"
  echo "== round $r: this tree"
  python3 "$HERE/sweep.py" "$@"
done
