"""Bandwidth benchmark of the project's kernels against torch eager, in model bytes: forward
2*N*D*s, backward 3*N*D*s, logsumexp N*D*s (+ N*4). Reports GB/s and the fraction of a
device-to-device copy measured in the same run, prints a table last, and writes results (JSON)
and one PNG per op and pass when matplotlib is available. (torch.compile, liger-kernel and
fla-core columns are issue 6's work and not here yet.)

    python benchmarks/bench.py [--quick] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import triton

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import kernels  # noqa: E402

ELEMS = 2**28  # per tensor: 0.5 GB in bf16, 1 GB in fp32


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def copy_bw():
    a = torch.empty(ELEMS, dtype=torch.float32, device="cuda").normal_()
    b = torch.empty_like(a)
    ms = bench(lambda: b.copy_(a))
    return 2 * a.numel() * 4 / ms / 1e6  # GB/s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer row lengths")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    C = copy_bw()
    Ds = [128, 4096, 65536, 262144] if args.quick else [128, 1024, 4096, 16384, 65536, 262144, 1048576]
    rows = []
    for dtype in (torch.bfloat16, torch.float32):
        s = dtype.itemsize
        for D in Ds:
            N = max(1, ELEMS // D)
            x = torch.randn(N, D, device="cuda", dtype=dtype)
            y = torch.softmax(x.float(), -1).to(dtype)
            z = torch.log_softmax(x.float(), -1).to(dtype)
            g = torch.randn_like(x)
            cases = {
                ("softmax", "fwd"): (2 * N * D * s, {
                    "ours": lambda: kernels.softmax(x), "torch": lambda: torch.softmax(x, -1)}),
                ("log_softmax", "fwd"): (2 * N * D * s, {
                    "ours": lambda: kernels.log_softmax(x), "torch": lambda: torch.log_softmax(x, -1)}),
                ("softmax", "bwd"): (3 * N * D * s, {
                    "ours": lambda: kernels.softmax_backward(y, g),
                    "torch": lambda: torch._softmax_backward_data(g, y, -1, dtype)}),
                ("log_softmax", "bwd"): (3 * N * D * s, {
                    "ours": lambda: kernels.log_softmax_backward(z, g),
                    "torch": lambda: torch._log_softmax_backward_data(g, z, -1, dtype)}),
                ("logsumexp", "fwd"): (N * D * s + N * 4, {
                    "ours": lambda: kernels.logsumexp(x), "torch": lambda: torch.logsumexp(x, -1)}),
            }
            for (op, pas), (nbytes, impls) in cases.items():
                for impl, fn in impls.items():
                    try:
                        ms = bench(fn)
                        gbs = nbytes / ms / 1e6
                    except Exception as e:  # record, keep going
                        ms, gbs = float("nan"), float("nan")
                        print(f"{op} {pas} {impl} D={D}: {type(e).__name__}: {e}", file=sys.stderr)
                    rows.append(dict(op=op, pass_=pas, dtype=str(dtype).replace("torch.", ""), D=D, N=N,
                                     impl=impl, ms=ms, gbs=gbs, frac=gbs / C))
            del x, y, z, g
            torch.cuda.empty_cache()
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        json.dump(dict(copy_gbs=C, device=torch.cuda.get_device_name(0), torch=torch.__version__,
                       triton=triton.__version__, rows=rows), f, indent=1)
    try:
        _plots(rows, C, args.out)
    except Exception as e:  # pragma: no cover
        print(f"(no plots: {e})", file=sys.stderr)
    print(f"\ncopy: {C:.0f} GB/s   device: {torch.cuda.get_device_name(0)}  torch {torch.__version__}  triton {triton.__version__}")
    print(f"{'op':12s} {'pass':4s} {'dtype':9s} {'D':>8s} {'ours GB/s':>10s} {'frac':>6s} {'torch GB/s':>10s} {'frac':>6s}")
    key = {}
    for r in rows:
        key.setdefault((r["op"], r["pass_"], r["dtype"], r["D"]), {})[r["impl"]] = r
    for (op, pas, dt, D), d in key.items():
        o, t = d.get("ours", {}), d.get("torch", {})
        print(f"{op:12s} {pas:4s} {dt:9s} {D:8d} {o.get('gbs', float('nan')):10.0f} {o.get('frac', float('nan')):6.2f} "
              f"{t.get('gbs', float('nan')):10.0f} {t.get('frac', float('nan')):6.2f}")


def _plots(rows, C, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for (op, pas) in sorted({(r["op"], r["pass_"]) for r in rows}):
        fig, ax = plt.subplots(figsize=(6, 4))
        for dt in ("bfloat16", "float32"):
            for impl in ("ours", "torch"):
                pts = sorted((r["D"], r["gbs"]) for r in rows if r["op"] == op and r["pass_"] == pas
                             and r["dtype"] == dt and r["impl"] == impl)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{impl} {dt}")
        ax.axhline(C, color="k", ls="--", lw=0.8, label="copy")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("row length D")
        ax.set_ylabel("model GB/s")
        ax.set_title(f"{op} {pas}")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(out, f"bench_{op}_{pas}.png"), dpi=90)
        plt.close(fig)


if __name__ == "__main__":
    main()
