#!/usr/bin/env bash
# Nsight Compute on the benchmark points below target (docs/results.md), one kernel launch each, clocks left
# alone: DRAM bytes against the model's, L2 hit rate, throughput, occupancy and registers. Then the
# few-rows cases timed with and without a CUDA graph (the host's launch cost). The full ncu output
# goes to one file, $OUT/ncu.log.
#   OUT=/tmp/o bash benchmarks/ncu_points.sh
#   POINTS="lse_bf16_16384 whole_bwd_bf16_16384" DETAIL=1 OUT=/tmp/o bash benchmarks/ncu_points.sh
# POINTS: the points to profile (default all, then the few-rows timings); DETAIL=1 adds Nsight
# Compute's sections (pipe utilization, warp stall reasons, occupancy limiters) to each point's log.
set -u
OUT=${OUT:-./ncu-out}; mkdir -p "$OUT"
M=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__block_size,launch__grid_size,gpu__time_duration.sum,smsp__inst_executed.sum
EXTRA=()
if [ "${DETAIL:-0}" = "1" ]; then
  EXTRA=(--section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy --section InstructionStats --print-details all)
fi
run() {  # name, kernel regex, launch count, profile_points arguments...
  local name=$1 k=$2 n=$3; shift 3
  case " ${POINTS:-all} " in *" all "*|*" $name "*) ;; *) return ;; esac
  echo "== $name: $*" | tee -a "$OUT/ncu.log"
  timeout 120 ncu --clock-control none -k "regex:$k" --launch-count "$n" --metrics "$M" "${EXTRA[@]}" \
    python3 benchmarks/profile_points.py "$@" --no-time --calls 1 > "$OUT/one.log" 2>&1
  cat "$OUT/one.log" >> "$OUT/ncu.log"
  grep -E "^  [a-z_]+kernel|dram__|lts__|sm__|launch__|gpu__time|smsp__" "$OUT/one.log" | sed 's/  */ /g'
  rm -f "$OUT/one.log"
}
run loop_fwd_bf16_65536 _fwd_loop_kernel 1 softmax fwd bfloat16 65536
run loop_bwd_bf16_65536 _bwd_loop_kernel 1 softmax bwd bfloat16 65536
run whole_fwd_bf16_16384 _fwd_kernel 1 softmax fwd bfloat16 16384
run whole_bwd_bf16_16384 _bwd_kernel 1 softmax bwd bfloat16 16384
run lse_bf16_16384 _fwd_kernel 1 logsumexp fwd bfloat16 16384
run lsm_bwd_bf16_16384 _bwd_kernel 1 log_softmax bwd bfloat16 16384
run lsm_bwd_bf16_4096 _bwd_kernel 1 log_softmax bwd bfloat16 4096
run whole_bwd_bf16_4096 _bwd_kernel 1 softmax bwd bfloat16 4096
run whole_fwd_fp32_1024 _fwd_kernel 1 softmax fwd float32 1024
# a peer at the same points (liger-kernel: one block per row, no autotuning; PYTHONPATH with the wheels)
run liger_fwd_bf16_16384 _softmax_single_block_forward_kernel 1 softmax fwd bfloat16 16384 --impl liger
run liger_bwd_bf16_4096 _softmax_single_block_backward_kernel 1 softmax bwd bfloat16 4096 --impl liger
run liger_bwd_bf16_16384 _softmax_single_block_backward_kernel 1 softmax bwd bfloat16 16384 --impl liger
run liger_fwd_fp32_1024 _softmax_single_block_forward_kernel 1 softmax fwd float32 1024 --impl liger
run split_bwd_bf16_1m _bwd_kernel 2 softmax bwd bfloat16 1048576
run split_fwd_bf16_1m _fwd_kernel 2 softmax fwd bfloat16 1048576
run merge_bf16_128 _softmax_merge_kernel 1 softmax_merge fwd bfloat16 128 --module merge
case " ${POINTS:-all} " in *" all "*|*" few_rows "*)
  for c in "softmax fwd bfloat16" "softmax bwd bfloat16" "softmax fwd float32" "softmax bwd float32"; do
    timeout 60 python3 benchmarks/profile_points.py $c 1048576 --rows 8 --graph --calls 0 2>&1 | tail -1
  done;;
esac
