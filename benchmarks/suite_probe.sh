#!/usr/bin/env bash
# Where a GPU run of the property suite spends its time (for tuning the runner, not a test):
#   1. one process under cProfile: one forward property, then one mutant-search control;
#   2. the same 16 properties over N pytest-xdist workers, for each N in $WORKERS.
# Each property gets $EXAMPLES examples (--properties-examples) with the gpu profile's shapes.
# Writes prof*.txt (top functions) and probe.log under $OUT (default ./gpu-out).
set -uo pipefail
OUT=${OUT:-./gpu-out}; mkdir -p "$OUT"
EX=${EXAMPLES:-200}
export PYTHONUNBUFFERED=1
source "$(dirname "$0")/install.sh"
common=(-m properties --hypothesis-profile=gpu --properties-examples "$EX" -q -p no:randomly -p no:benchmark)
top() {  # top functions of a cProfile dump, by cumulative and by own time
  python3 - "$1" <<'PY'
import pstats, sys
p = pstats.Stats(sys.argv[1])
p.sort_stats("cumulative").print_stats(45)
p.sort_stats("tottime").print_stats(30)
PY
}
run() { local t0=$(date +%s); "$@"; echo "[probe] wall $(( $(date +%s) - t0 )) s: ${*: -4}"; }
{
run timeout -s INT ${T1:-150} python3 -m cProfile -o "$OUT/prof1.out" -m pytest "${common[@]}" \
  -k "matches_oracle-softmax and not backward and not merge" 2>&1 | tail -n 25
top "$OUT/prof1.out" > "$OUT/prof1.txt" 2>&1
run timeout -s INT ${T2:-150} python3 -m cProfile -o "$OUT/prof2.out" -m pytest "${common[@]}" \
  -k "control_correct and softmax_backward" 2>&1 | tail -n 8
top "$OUT/prof2.out" > "$OUT/prof2.txt" 2>&1
rm -f "$OUT"/prof*.out
for n in ${WORKERS:-16 4}; do
  run timeout -s INT ${T3:-200} python3 -m pytest "${common[@]}" -n "$n" --dist worksteal \
    -k "test_property and log_softmax and not backward" 2>&1 | tail -n 30
done
} 2>&1 | tee "$OUT/probe.log"
