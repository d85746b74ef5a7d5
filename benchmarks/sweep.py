"""Launch-configuration sweep for the softmax-family kernels on the GPU: for each op, dtype and
row length, time the kernel under each (tile, elements-per-warp) setting of the tuning knobs
(kernels._launch.row_config: SOFTMAX_KERNELS_TILE{,_BWD}, SOFTMAX_KERNELS_PER_WARP{,_BWD}) and
print model-byte GB/s and the fraction of copy, best setting marked. Same data and byte counts
as benchmarks/cases_softmax.py (2**28 elements per input, random normal).

    python benchmarks/sweep.py --ops softmax_backward,softmax --ds 128,4096 --configs 8192/1024,4096/512
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
import triton

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import kernels  # noqa: E402

ELEMS = 2**28


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", default="softmax_backward,log_softmax_backward")
    ap.add_argument("--ds", default="128,1024,4096,16384")
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--configs", default="default,4096/512,8192/512,8192/1024,16384/1024",
                    help="tile/per_warp pairs ('default': the launcher's own choice)")
    args = ap.parse_args()
    a = torch.empty(ELEMS, dtype=torch.float32, device="cuda").normal_()
    b = torch.empty_like(a)
    C = 2 * ELEMS * 4 / triton.testing.do_bench(lambda: b.copy_(a), return_mode="median") / 1e6
    del a, b
    print(f"copy: {C:.0f} GB/s")
    rows = []
    for dt_name in args.dtypes.split(","):
        dtype = getattr(torch, dt_name)
        for D in [int(d) for d in args.ds.split(",")]:
            N = ELEMS // D
            x = torch.randn(N, D, device="cuda", dtype=dtype)
            y = torch.softmax(x.float(), -1).to(dtype)
            z = torch.log_softmax(x.float(), -1).to(dtype)
            g = torch.randn_like(x)
            calls = {"softmax": (lambda: kernels.softmax(x), 2), "log_softmax": (lambda: kernels.log_softmax(x), 2),
                     "logsumexp": (lambda: kernels.logsumexp(x), 1),
                     "softmax_backward": (lambda: kernels.softmax_backward(y, g), 3),
                     "log_softmax_backward": (lambda: kernels.log_softmax_backward(z, g), 3)}
            for op in args.ops.split(","):
                fn, passes = calls[op]
                sfx = "_BWD" if op.endswith("backward") else ""
                res = []
                for cfg in args.configs.split(","):
                    for k in ("SOFTMAX_KERNELS_TILE" + sfx, "SOFTMAX_KERNELS_PER_WARP" + sfx):
                        os.environ.pop(k, None)
                    if cfg != "default":
                        tile, pw = cfg.split("/")
                        os.environ["SOFTMAX_KERNELS_TILE" + sfx] = tile
                        os.environ["SOFTMAX_KERNELS_PER_WARP" + sfx] = pw
                    try:
                        ms = triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")
                        gbs = passes * N * D * dtype.itemsize / ms / 1e6
                    except Exception as e:  # noqa: BLE001 - report and go on
                        print(f"{op} {dt_name} D={D} {cfg}: {type(e).__name__}: {str(e)[:200]}")
                        gbs = float("nan")
                    res.append((cfg, gbs))
                best = max(res, key=lambda r: r[1] if r[1] == r[1] else -1)
                line = "  ".join(f"{c}:{v / C:.2f}{'*' if (c, v) == best else ''}" for c, v in res)
                print(f"{op:22s} {dt_name:8s} D={D:<6d} {line}", flush=True)
            del x, y, z, g
            torch.cuda.empty_cache()
    for k in [k for k in os.environ if k.startswith("SOFTMAX_KERNELS_")]:
        os.environ.pop(k)


if __name__ == "__main__":
    main()
