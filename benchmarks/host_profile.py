"""Where an eager call spends its host time: time CALLS calls of a kernel on a small input (so the
GPU keeps up with the host and the wall time per call is the host's), then profile the same calls
with cProfile and print the functions that took the most time themselves.

An eager call whose kernels are shorter than its host time is bound by the host; under
triton.testing.do_bench that shows once the host time exceeds the L2 flush's GPU time (a 256 MB
memset, ~60-70 us on an H200) that each timing enqueues first (e.g. 8 rows of 2**20 read
0.03-0.18 of copy).

    python benchmarks/host_profile.py --cases "softmax:8x1048576:bfloat16,softmax:64x1024:bfloat16"
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

import torch

from softmax_properties import kernels

_OPS = {
    "softmax": lambda x, g: kernels.softmax(x),
    "log_softmax": lambda x, g: kernels.log_softmax(x),
    "logsumexp": lambda x, g: kernels.logsumexp(x),
    "softmax_backward": lambda x, g: kernels.softmax_backward(x, g),
    "log_softmax_backward": lambda x, g: kernels.log_softmax_backward(x, g),
}


def _case(spec: str, device: str):
    op, shape, dtype = spec.split(":")
    if op not in _OPS:
        raise SystemExit(f"--cases: unknown op {op!r}, expected one of {sorted(_OPS)}")
    n, d = (int(v) for v in shape.split("x"))
    dt = getattr(torch, dtype)
    x = torch.randn(n, d, device=device, dtype=dt)
    g = torch.randn_like(x)
    return spec, (lambda: _OPS[op](x, g))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="softmax:8x1048576:bfloat16,softmax:64x1024:bfloat16",
                    help="op:NxD:dtype, comma-separated")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    for spec in args.cases.split(","):
        name, fn = _case(spec, dev)
        for _ in range(20):
            fn()
        if dev == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.calls):
            fn()
        host = (time.perf_counter() - t0) / args.calls
        if dev == "cuda":
            torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / args.calls
        print(f"{name:40s} host {host * 1e6:7.1f} us/call   with the GPU's tail {wall * 1e6:7.1f} us/call")
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.calls):
            fn()
        prof.disable()
        if dev == "cuda":
            torch.cuda.synchronize()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(args.top)
        print("\n".join(line for line in s.getvalue().splitlines() if line.strip())[:6000])


if __name__ == "__main__":
    main()
