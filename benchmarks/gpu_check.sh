#!/usr/bin/env bash
# A whole GPU check in one command: the property suite (gpu profile unless PROFILE is set), then the
# benchmark; the benchmark table is printed last. Logs and results go to $OUT (or ./gpu-out).
#   progress.log: a line per finished test and every failure's full report, written as they happen
#   suite.log:    pytest's own output;  bench.log / bench.json / *.png: the benchmark
# PYTEST_K: a -k expression (PYTEST_ARGS is split on spaces). Triton's cache starts empty (TRITON_CACHE_DIR, unless set), so the number of kernels compiled in
# the run is counted (cubins in the cache afterwards) along with the wall time.
set -uo pipefail
OUT=${OUT:-./gpu-out}; mkdir -p "$OUT"
PROFILE=${PROFILE:-gpu}
export PYTHONUNBUFFERED=1
source "$(dirname "$0")/install.sh"
source "$(dirname "$0")/gpu_idle.sh"
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$(mktemp -d)}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"
start=$(date +%s)
# SIGINT first, so pytest (and xdist) stop cleanly and still print failures and the summary
tagged timeout -s INT -k 30 ${SUITE_TIMEOUT:-900} python3 -m pytest -m properties --hypothesis-profile="$PROFILE" -q \
  -p no:randomly -p no:benchmark --properties-log "$OUT/progress.log" ${PYTEST_K:+-k "$PYTEST_K"} ${PYTEST_ARGS:-} 2>&1 | tee "$OUT/suite.log" | tail -n 150
status=$?
echo "suite wall time: $(( $(date +%s) - start )) s, exit status $status," \
     "Triton compilations in the run: $(find "$TRITON_CACHE_DIR" -name '*.cubin' | wc -l)" | tee -a "$OUT/suite.log"
find "$TRITON_CACHE_DIR" -name '*.cubin' -printf '%f\n' | sed 's/\.cubin$//' | sort | uniq -c | sort -rn | tee -a "$OUT/suite.log"
# each compiled kernel's metadata (its constexprs and signature), to see which launch choices
# multiply the compilations
find "$TRITON_CACHE_DIR" -name '*.json' ! -name '__grp__*' -print0 | tar czf "$OUT/compiled_kernels.tgz" --null -T - 2>/dev/null
# before anything is timed (here or by a later command), wait up to 60 s until the suite's processes
# are gone and no process holds the GPU (gpu_idle.sh)
wait_idle 60
if [ "${SKIP_BENCH:-0}" != "1" ]; then
  # the peers (liger-kernel, fla-core) for --impls liger,fla: the wheels in .whl/ (copy it along), for
  # the benchmark only (installed for the suite, they would also run its adapter tests)
  BENCH_PY=""
  if ls .whl/*.whl > /dev/null 2>&1 && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --upgrade --target /tmp/peers .whl/*.whl; then
    BENCH_PY=/tmp/peers
  fi
  mkdir -p "$OUT/bench"  # bench.json and the PNGs, packed into one file, bench.tgz
  PYTHONPATH=${BENCH_PY}${PYTHONPATH:+:$PYTHONPATH} timeout -s INT ${BENCH_TIMEOUT:-1800} python3 benchmarks/bench.py ${BENCH_ARGS:-} --out "$OUT/bench" 2>&1 | tee "$OUT/bench.log" | tail -n 80
  tar czf "$OUT/bench.tgz" -C "$OUT" bench && rm -rf "$OUT/bench"
fi
exit $status
