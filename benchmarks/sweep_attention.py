"""Launch-shape sweep of the attention kernels on the GPU: every candidate (BLOCK_M, BLOCK_N,
num_warps, num_stages) of the forward, of the dk/dv kernel and of the dq kernel, per head
dimension, compiled first in parallel worker processes (Triton's cache then serves the timing
process) and timed one at a time, bf16, B = 16384 / L, H = 2048 / D, q, k, v contiguous, not
causal (the masked blocks run the same kernel; the benchmark's causal rows check the choice).

The dk/dv candidates are timed with the dq kernel at BASE's shape and the other way round (the
two kernels are independent launches, so each one's best is read off the backward's total).
Printed: one line per candidate (ms and TFLOP/s, the backward's FLOPs 2.5 forwards), then the
five best of each kind; shapes that do not fit (shared memory) are listed as failed.

    python benchmarks/sweep_attention.py [--ds 64,128] [--L 4096] [--workers 14]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

FWD = [(m, n, w, s) for (m, n) in [(64, 64), (128, 32), (128, 64), (128, 128), (64, 128)]
       for w in (4, 8) for s in (2, 3, 4)]
DKDV = [(m, n, w, s) for m in (16, 32, 64) for n in (64, 128) for w in (4, 8) for s in (2, 3, 4, 5)]
DQ = [(m, n, w, s) for (m, n) in [(64, 32), (64, 64), (128, 32), (128, 64), (64, 128)]
      for w in (4, 8) for s in (2, 3, 4, 5)]
# the other kernel's shape while one is swept: the shapes of Triton's fused-attention tutorial
BASE = {64: ((32, 128, 4, 3), (128, 32, 4, 3)), 128: ((32, 128, 8, 2), (128, 32, 8, 2))}
KNOBS = ("ATTN_KERNELS_FWD", "ATTN_KERNELS_BWD")


def candidates(ds):
    out = []
    for D in ds:
        base = BASE.get(D, BASE[128])
        out += [(D, "fwd", c, None) for c in FWD]
        out += [(D, "dkdv", c, base[1]) for c in DKDV]
        out += [(D, "dq", c, base[0]) for c in DQ]
    return out


def env_of(kind, c, other) -> dict:
    """The tuning knobs (kernels/tuning.py) of one candidate; the forward's at its default for a
    backward candidate."""
    if kind == "fwd":
        return {"ATTN_KERNELS_FWD": "/".join(map(str, c))}
    b = (c + other) if kind == "dkdv" else (other + c)
    return {"ATTN_KERNELS_BWD": "/".join(map(str, b))}


def _apply(env):
    from softmax_properties.kernels import _launch as KL
    for k in KNOBS:
        os.environ.pop(k, None)
    os.environ.update(env)
    KL.reload_knobs()


def _compile(items):
    """Worker: run each candidate once on a small input (the same compiled kernel: lengths and
    strides are not specialized); print {key: "ok" or the error} as one JSON line."""
    import torch
    from softmax_properties.kernels import _attention as A
    res = {}
    for D, kind, c, other in items:
        _apply(env_of(kind, c, other))
        q, k, v = (torch.randn(1, 1, 512, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        try:
            o, lse = A.forward(q, k, v, D ** -0.5, None, None, None)
            if kind != "fwd":
                A.backward(q, k, v, o, lse, torch.randn_like(o), None, D ** -0.5, None, None, None)
            torch.cuda.synchronize()
            res[f"{D}|{kind}|{c}"] = "ok"
        except Exception as e:  # noqa: BLE001 - a shape that does not fit: reported, skipped
            res[f"{D}|{kind}|{c}"] = f"{type(e).__name__}: {str(e)[:100]}"
    print(json.dumps(res))


def _time(items, ok, L):
    import torch
    import triton
    from softmax_properties.kernels import _attention as A
    rows = []
    for D in sorted({it[0] for it in items}):
        B, H = max(1, 16384 // L), max(1, 2048 // D)
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, do = (torch.randn(B, H, L, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
        sc = D ** -0.5
        _apply({})
        o, lse = A.forward(q, k, v, sc, None, None, None)
        fl = 4.0 * B * H * L * L * D
        for D2, kind, c, other in items:
            if D2 != D or ok.get(f"{D}|{kind}|{c}") != "ok":
                continue
            _apply(env_of(kind, c, other))
            if kind == "fwd":
                fn, f = (lambda: A.forward(q, k, v, sc, None, None, None)), fl
            else:
                fn, f = (lambda: A.backward(q, k, v, o, lse, do, None, sc, None, None, None)), 2.5 * fl
            ms = triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median")
            rows.append((D, kind, c, ms))
            print(f"D={D} {kind:5s} {c} {ms:.3f} ms {f / ms / 1e9:.1f} TFLOP/s", flush=True)
        for kind in ("fwd", "dkdv", "dq"):
            best = sorted([r for r in rows if r[0] == D and r[1] == kind], key=lambda r: r[3])[:5]
            print(f"best D={D} {kind}: " + ", ".join(f"{r[2]} {r[3]:.3f} ms" for r in best), flush=True)
    _apply({})


def main():
    if sys.argv[1:2] == ["--worker"]:
        _compile([(a, b, tuple(c), tuple(d) if d else None) for a, b, c, d in json.loads(sys.argv[2])])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--ds", default="64,128", help="head dimensions (comma-separated)")
    ap.add_argument("--L", type=int, default=4096, help="sequence length (queries = keys)")
    ap.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2), help="compiling processes")
    args = ap.parse_args()
    t0 = time.time()
    items = candidates([int(d) for d in args.ds.split(",")])
    parts = [items[i::args.workers] for i in range(args.workers)]
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", json.dumps(p)], stdout=subprocess.PIPE, text=True)
             for p in parts if p]
    ok = {}
    for p in procs:
        out, _ = p.communicate()
        ok.update(json.loads(next(ln for ln in out.splitlines()[::-1] if ln.startswith("{"))))
    failed = sorted(k for k, v in ok.items() if v != "ok")
    print(f"compiled {len(ok)} candidates in {time.time() - t0:.0f} s; {len(failed)} do not fit: {failed}", flush=True)
    _time(items, ok, args.L)
    print(f"done in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
