#!/usr/bin/env bash
# The default tier against PyTorch on a GPU, the suite's calibration: torch eager, then
# torch.compile (inductor's generated Triton), each with the gpu profile. Every failure is a
# PyTorch bug (FINDINGS.md, properties/xfails/) or a defect of the suite to fix (docs/tiers.md).
# Each run gets SIGINT at its time limit (pytest still prints its failures and summary), and the
# next starts once the last one's processes are gone and no process holds the GPU (an interrupted
# run's xdist workers finish their test; gpu_idle.sh).
# Under torch.compile, ce_out_of_range_target_raises (forward and backward) runs beside the rest,
# on 2 of the workers, with its own example count: each of its examples ends in a device-side
# assert, so the isolated worker restarts and compiles again, about 12 s an example on an H200
# (10 examples: 115 s), where the law's own cap of 30 would take 6 minutes.
# Attention under torch.compile (FlexAttention) runs after them with its own example count: nearly
# every example compiles a new flex kernel (the head dimension, dtype, grouping and mask structure
# are static), about 3 s an example on an H200 (15 examples of 23 laws on 16 workers: 283 s).
#   OUT (./calibration-out): eager.log, compile.log, compile_restarts.log, compile_attention.log
#   (pytest's output), *_progress.log (a line per finished test, every failure's full report),
#   failures_*/ (each failure's replay file)
#   EXAMPLES_EAGER (100), EXAMPLES_COMPILE (40), EXAMPLES_RESTARTS (10), EXAMPLES_FLEX (15),
#   TIMEOUT_EAGER (300 s), TIMEOUT_COMPILE (420 s), TIMEOUT_FLEX (360 s), WORKERS (16), PYTEST_K (a
#   -k expression), TARGETS ("torch torch_compile")
set -uo pipefail
OUT=${OUT:-./calibration-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
source "$(dirname "$0")/install.sh"
source "$(dirname "$0")/gpu_idle.sh"
RESTARTS=ce_out_of_range_target_raises  # the law whose every example restarts the worker (above)
FLEX="attention and not merge"  # torch.compile's attention tests: FlexAttention (above)
suite() {  # name examples limit workers k-expression target
  tagged timeout -s INT -k 60 "$3" python3 -m pytest -m properties -q -p no:randomly -p no:benchmark \
    --hypothesis-profile=gpu --properties-examples "$2" -n "$4" --target "$6" ${5:+-k "$5"} \
    --properties-log "$OUT/${1}_progress.log" --properties-failures "$OUT/failures_$1" \
    properties/test_properties.py > "$OUT/$1.log" 2>&1
}
report() {  # name rc start target
  echo "$4 ($1): exit status $2, $(( $(date +%s) - $3 )) s"
  grep -E "^(FAILED|ERROR)|passed|failed|xfailed" "$OUT/$1.log" | tail -n 12
}
status=0
for t in ${TARGETS:-torch torch_compile}; do
  wait_idle 120
  start=$(date +%s)
  if [ "$t" = torch ]; then
    suite eager "${EXAMPLES_EAGER:-100}" "${TIMEOUT_EAGER:-300}" "${WORKERS:-16}" "${PYTEST_K:-}" "$t"
    rc=$?; [ $rc -ne 0 ] && status=$rc; report eager $rc "$start" "$t"
  else
    k="not $RESTARTS and not ($FLEX)${PYTEST_K:+ and ($PYTEST_K)}"; kr="$RESTARTS${PYTEST_K:+ and ($PYTEST_K)}"
    w=$(( ${WORKERS:-16} > 3 ? ${WORKERS:-16} - 2 : 1 ))
    suite compile "${EXAMPLES_COMPILE:-40}" "${TIMEOUT_COMPILE:-420}" "$w" "$k" "$t" & main=$!
    suite compile_restarts "${EXAMPLES_RESTARTS:-10}" "${TIMEOUT_COMPILE:-420}" 2 "$kr" "$t" & side=$!
    # exit status 5: PYTEST_K left that part no test
    wait $main; rc=$?; [ $rc -ne 0 ] && [ $rc -ne 5 ] && status=$rc; report compile $rc "$start" "$t"
    wait $side; rc=$?; [ $rc -ne 0 ] && [ $rc -ne 5 ] && status=$rc; report compile_restarts $rc "$start" "$t"
    wait_idle 120
    start=$(date +%s)
    suite compile_attention "${EXAMPLES_FLEX:-15}" "${TIMEOUT_FLEX:-360}" "${WORKERS:-16}" \
      "$FLEX${PYTEST_K:+ and ($PYTEST_K)}" "$t"
    rc=$?; [ $rc -ne 0 ] && [ $rc -ne 5 ] && status=$rc; report compile_attention $rc "$start" "$t"
  fi
done
exit $status
