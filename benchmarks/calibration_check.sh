#!/usr/bin/env bash
# The default tier against PyTorch on a GPU, the suite's calibration: torch eager, then
# torch.compile (inductor's generated Triton), each with the gpu profile. Every failure is a
# PyTorch bug (FINDINGS.md, properties/xfails/) or a defect of the suite to fix (docs/tiers.md).
# Each run gets SIGINT at its time limit (pytest still prints its failures and summary), and the
# next starts once no process holds the GPU (an interrupted run's xdist workers finish their test).
#   OUT (./calibration-out): eager.log, compile.log (pytest's output), *_progress.log (a line per
#   finished test, every failure's full report)
#   EXAMPLES_EAGER (100), EXAMPLES_COMPILE (40), TIMEOUT_EAGER (300 s), TIMEOUT_COMPILE (420 s),
#   WORKERS (16), PYTEST_K (a -k expression), TARGETS ("torch torch_compile")
set -uo pipefail
OUT=${OUT:-./calibration-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
source "$(dirname "$0")/install.sh"
wait_gpu() {
  for _ in $(seq 120); do
    [ -z "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null)" ] && return
    sleep 1
  done
}
status=0
for t in ${TARGETS:-torch torch_compile}; do
  if [ "$t" = torch ]; then n=${EXAMPLES_EAGER:-100}; lim=${TIMEOUT_EAGER:-300}; name=eager
  else n=${EXAMPLES_COMPILE:-40}; lim=${TIMEOUT_COMPILE:-420}; name=compile; fi
  wait_gpu
  start=$(date +%s)
  timeout -s INT -k 60 "$lim" python3 -m pytest -m properties -q -p no:randomly -p no:benchmark \
    --hypothesis-profile=gpu --properties-examples "$n" -n "${WORKERS:-16}" --target "$t" \
    ${PYTEST_K:+-k "$PYTEST_K"} --properties-log "$OUT/${name}_progress.log" properties/test_properties.py \
    > "$OUT/$name.log" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=$rc
  echo "$t: exit status $rc, $(( $(date +%s) - start )) s"
  grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/$name.log" | tail -n 12
done
exit $status
