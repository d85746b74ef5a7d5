#!/usr/bin/env bash
# One GPU session in one call: the property suite (gpu profile unless PROFILE is set), then the
# benchmark; the benchmark table is printed last. Logs and results go to $OUT (or ./gpu-out).
set -uo pipefail
OUT=${OUT:-./gpu-out}; mkdir -p "$OUT"
PROFILE=${PROFILE:-gpu}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"
start=$(date +%s)
timeout ${SUITE_TIMEOUT:-900} python3 -m pytest -m properties --hypothesis-profile="$PROFILE" -q -p no:randomly -p no:benchmark ${PYTEST_ARGS:-} 2>&1 | tee "$OUT/suite.log" | tail -n 120
status=$?
echo "suite wall time: $(( $(date +%s) - start )) s, exit status $status" | tee -a "$OUT/suite.log"
if [ "${SKIP_BENCH:-0}" != "1" ]; then
  python3 benchmarks/bench.py ${BENCH_ARGS:-} --out "$OUT" 2>&1 | tee "$OUT/bench.log" | tail -n 80
fi
exit $status
