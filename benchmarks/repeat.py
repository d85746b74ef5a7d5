"""Time a few benchmark cases again and again in one process, to see how far one measurement of
bench.py can be trusted: each round builds the cases afresh (new random inputs in new memory) and
times each chosen case TIMES times with bench.py's do_bench, then 20 launches back to back between
two events, and prints the fractions of copy and the host's time per launch. A kernel shorter
than its launch's host time reads low both ways and varies with the host's speed (e.g. an eager
bf16 logsumexp with ~125 us of kernel behind ~220 us of host time per call on an H200 system
reads 0.51-0.88 in do_bench and 0.53-0.67 in the loop, while softmax forward, 250 us of kernel
behind the same host time, reads 0.99 and 0.94).

    python benchmarks/repeat.py --ops logsumexp,softmax:fwd --dtypes bfloat16 --ds 128,16384 --rounds 4
"""
from __future__ import annotations

import argparse
import time

import torch

from bench import bench, copy_bw, module_cases


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="softmax", help="case module (softmax, merge, ce)")
    ap.add_argument("--ops", default="logsumexp", help="op[:pass] names, comma-separated")
    ap.add_argument("--dtypes", default="bfloat16", help="dtypes, comma-separated")
    ap.add_argument("--ds", default="4096,16384", help="row lengths")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--times", type=int, default=3, help="timings per case per round")
    args = ap.parse_args()
    wanted = set(args.ops.split(","))
    dtypes = set(args.dtypes.split(","))
    t0 = time.time()
    for r in range(args.rounds):
        C = copy_bw()
        print(f"round {r} t={time.time() - t0:6.1f}s copy {C:.0f} GB/s", flush=True)
        for case in module_cases(args.only, False, ("ours",), [int(d) for d in args.ds.split(",")]):
            name = f"{case['op']}:{case['pass_']}"
            if (case["op"] not in wanted and name not in wanted) or case["dtype"] not in dtypes:
                continue
            fn = case["impls"]["ours"]
            fracs = [case["nbytes"] / bench(fn) / 1e6 / C for _ in range(args.times)]
            # the same kernel launched 20 times back to back between two events (no L2 flush;
            # where the host's time per launch is below the kernel's, the host runs ahead and the
            # loop times the kernels alone), and the host's time per launch
            fn()
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            h0 = time.perf_counter()
            a.record()
            for _ in range(20):
                fn()
            b.record()
            host_us = (time.perf_counter() - h0) / 20 * 1e6
            b.synchronize()
            loop = case["nbytes"] / (a.elapsed_time(b) / 20) / 1e6 / C
            print(f"  t={time.time() - t0:6.1f}s {name:18s} {case['dtype']:8s} D={case['D']:<7d} "
                  + " ".join(f"{f:.2f}" for f in fracs) + f"  loop {loop:.2f}  host {host_us:.0f} us/launch", flush=True)
            del case, fn
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
