#!/usr/bin/env bash
# The property suite against the third-party adapters (properties/targets/) on a GPU, one after
# the other, each for a bounded time. Installs the wheels in .whl/ (liger-kernel, fla-core; copy
# the ignored .whl folder to the machine) without dependencies into /tmp/site, offline.
#   ADAPTERS        targets to run (default: "liger fla")
#   PROFILE         Hypothesis profile (default: gpu)
#   ADAPTER_TIMEOUT seconds per adapter (default: 240); the suite gets SIGINT, so it still prints
#                   its failures and summary, and --properties-log keeps what it found so far
#   PYTEST_ARGS     extra pytest arguments (e.g. "-n 16 --dist worksteal", -k ...)
#   OUT             output folder (default: ./adapters-out): per adapter <name>.log (pytest's
#                   output) and <name>.progress.log (a line per test and every failure's report),
#                   and failures.tgz (the replay files of every failure, and the example database)
# Exit status: 0 when every adapter's run passed, else the last non-zero pytest status.
set -uo pipefail
OUT=${OUT:-./adapters-out}; mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PROFILE=${PROFILE:-gpu}
export PYTHONUNBUFFERED=1
source "$(dirname "$0")/install.sh"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "installing .whl/*.whl failed (copy the .whl folder to the machine)"; exit 2; }
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
python3 -c "import liger_kernel, fla, importlib.metadata as m; print('liger-kernel', m.version('liger-kernel'), 'fla-core', m.version('fla-core'))" \
  2>&1 | tail -n 3 | tee "$OUT/versions.txt"
rm -rf .properties-failures
status=0
for name in ${ADAPTERS:-liger fla}; do
  start=$(date +%s)
  timeout -s INT -k 30 "${ADAPTER_TIMEOUT:-240}" python3 -m pytest -m properties properties/test_properties.py \
    --target "$name" --hypothesis-profile="$PROFILE" -q -p no:randomly -p no:benchmark \
    --properties-log "$OUT/$name.progress.log" ${PYTEST_ARGS:-} > "$OUT/$name.log" 2>&1
  s=$?
  [ $s -ne 0 ] && status=$s
  failed=$(grep -c '^FAILED' "$OUT/$name.progress.log" 2>/dev/null)
  echo "$name: exit status $s after $(( $(date +%s) - start )) s; ${failed:-0} failed tests" | tee -a "$OUT/summary.txt"
  tail -n 40 "$OUT/$name.log"
done
tar czf "$OUT/failures.tgz" .properties-failures .hypothesis/examples 2>/dev/null
exit $status
