#!/usr/bin/env bash
# Sourced by the GPU scripts that time something after a suite run: the suite's processes carry a
# tag in their environment (tagged), and wait_idle waits until none of them is left and no process
# holds the GPU. A suite cut by SIGINT at its time limit can leave pytest-xdist workers running
# their last test after pytest itself has exited (benchmarks started behind such runs read 0.62
# of copy where a clean run read 0.79, and an attention row 21 % below its figure of before:
# neither cause proven), and nvidia-smi lists no processes inside some containers, so the GPU's
# process list alone does not show them.
RUN_TAG="gpu-run-$$-$(date +%s)"

tagged() {  # run a command (and so every process it starts) with the tag
  GPU_SCRIPT_RUN="$RUN_TAG" "$@"
}

tagged_left() {  # the pids of the tagged processes still alive
  grep -lsxzF "GPU_SCRIPT_RUN=$RUN_TAG" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3
}

wait_idle() {  # up to $1 seconds (60): then the tagged processes left are killed
  local left
  for _ in $(seq "${1:-60}"); do
    left=$(tagged_left)
    [ -z "$left" ] && [ -z "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null)" ] && return 0
    sleep 1
  done
  left=$(tagged_left)
  if [ -n "$left" ]; then
    echo "wait_idle: killing what is left of the run: $(echo $left)" >&2
    kill -9 $left 2>/dev/null
  fi
  return 0
}
