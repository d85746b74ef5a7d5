"""Run one benchmark case of ours (or of a peer, --impl) a few times, for a profiler to attach to
(Nsight Compute): the points the benchmark shows below target, profiled with the same data and
shapes bench.py times.

    python benchmarks/profile_points.py softmax bwd bfloat16 16384 [--module softmax] [--calls 3]
    python benchmarks/profile_points.py softmax fwd bfloat16 1048576 --rows 8 --graph --calls 0
    python benchmarks/profile_points.py softmax bwd bfloat16 4096 --impl liger   # benchmarks/peers.py
    ncu --clock-control none -k regex:_bwd_kernel --launch-count 1 --section SpeedOfLight \\
        --section Occupancy --section LaunchStats --section WarpStateStats \\
        python3 benchmarks/profile_points.py softmax bwd bfloat16 16384 --no-time --calls 1

Prints the case's shape, time and bandwidth (do_bench; with --graph also a CUDA graph's replay,
which leaves the host's launch cost out), before the profiled calls.
"""
from __future__ import annotations

import argparse

import torch
import triton

from bench import module_cases


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("op")
    ap.add_argument("pass_", choices=("fwd", "bwd"))
    ap.add_argument("dtype")
    ap.add_argument("D", type=int)
    ap.add_argument("--module", default="softmax", help="case module (softmax, merge, ce)")
    ap.add_argument("--rows", type=int, default=0, help="the case with this many rows (default: the first)")
    ap.add_argument("--impl", default="ours", help="implementation (ours, torch, liger, fla: as bench.py's --impls)")
    ap.add_argument("--calls", type=int, default=3, help="calls after the timing (profile the last)")
    ap.add_argument("--no-time", action="store_true", help="skip the do_bench timing (fewer launches)")
    ap.add_argument("--graph", action="store_true",
                    help="also time a CUDA graph's replay of the call (do_bench_cudagraph): the GPU's time "
                         "without the host's launch cost, for cases the host limits")
    a = ap.parse_args()
    for case in module_cases(a.module, False, (a.impl,), [a.D]):
        if (case["op"], case["pass_"], case["dtype"], case["D"]) != (a.op, a.pass_, a.dtype, a.D):
            continue
        if a.rows and case["N"] != a.rows:
            continue
        fn = case["impls"].get(a.impl)
        if fn is None:
            raise SystemExit(f"{a.impl} does not offer {a.op} {a.pass_} {a.dtype} D={a.D} (or is not installed)")
        if not a.no_time:
            ms = triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")
            line = f"{a.op} {a.pass_} {a.dtype} D={a.D} N={case['N']}: {ms * 1e3:.1f} us, {case['nbytes'] / ms / 1e6:.0f} GB/s"
            if a.graph:
                mg = triton.testing.do_bench_cudagraph(fn, rep=50, return_mode="median")
                line += f"; graph replay {mg * 1e3:.1f} us, {case['nbytes'] / mg / 1e6:.0f} GB/s"
            print(line, flush=True)
        for _ in range(a.calls):
            fn()
        torch.cuda.synchronize()
        return
    raise SystemExit(f"no such case: {a.op} {a.pass_} {a.dtype} D={a.D} in cases_{a.module}")


if __name__ == "__main__":
    main()
