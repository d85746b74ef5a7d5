"""Bandwidth benchmark of the project's kernels against torch eager (and torch.compile,
liger-kernel and fla-core with --impls; benchmarks/peers.py), in model bytes. Every
``benchmarks/cases_*.py`` module contributes cases: its ``cases(quick[, impls_wanted])`` yields
dicts with op, pass_, dtype, D, N, nbytes and impls (name -> zero-argument callable, or None
where that implementation does not apply), and optionally flops (attention: the table and plots
then give TFLOP/s for the case). Each is timed with
``triton.testing.do_bench`` (median); the script reports GB/s and the fraction of a
device-to-device copy measured in the same run, writes bench.json and one PNG per op and pass,
and prints the table last.

    python benchmarks/bench.py [--quick] [--only softmax,merge] [--impls ours,torch,compile,liger,fla] [--ops softmax,logsumexp] [--ds 128,4096] [--out DIR]
    python benchmarks/bench.py --replot A.json [B.json ...] --out DIR   # plots only, no GPU

--replot draws the PNGs from saved bench.json files (later files win for the same op, pass,
dtype, shape and implementation), so runs of different implementations can share a plot.
"""
from __future__ import annotations

import argparse
import glob
import importlib
import inspect
import json
import math
import os
import sys

import torch
import triton

HERE = os.path.dirname(os.path.abspath(__file__))


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def copy_bw():
    a = torch.empty(2**28, dtype=torch.float32, device="cuda").normal_()
    b = torch.empty_like(a)
    ms = bench(lambda: b.copy_(a))
    del a, b
    return 2 * 2**28 * 4 / ms / 1e6  # GB/s


def module_cases(name, quick, impls, ds=None):
    """The cases of benchmarks/cases_{name}.py, asking it for the implementations in impls and,
    where it takes them, the row lengths ds."""
    mod = importlib.import_module(f"cases_{name}")
    params = inspect.signature(mod.cases).parameters
    kw = {"impls_wanted": impls} if "impls_wanted" in params else {}
    if ds and "ds" in params:
        kw["ds"] = ds
    return mod.cases(quick, **kw)


def run_module(name, quick, impls, C, rows, ds=None, ops=()):
    for case in module_cases(name, quick, impls, ds):
        if ops and case["op"] not in ops:
            continue
        for impl, fn in case["impls"].items():
            if fn is None or impl not in impls:
                continue
            peak = None
            try:
                ms = bench(fn)
                gbs = case["nbytes"] / ms / 1e6
                if case.get("peak_memory"):  # cases that ask for it (cases_ce.peak_memory)
                    import cases_ce
                    peak = cases_ce.peak_memory(fn)
            except Exception as e:  # record, keep going
                ms = gbs = float("nan")
                print(f"{case['op']} {case['pass_']} {impl} D={case['D']}: {type(e).__name__}: {str(e)[:300]}",
                      file=sys.stderr)
            tflops = case["flops"] / ms / 1e9 if case.get("flops") else None
            rows.append(dict(op=case["op"], pass_=case["pass_"], dtype=case["dtype"], D=case["D"], N=case["N"],
                             impl=impl, ms=ms, gbs=gbs, frac=gbs / C, tflops=tflops,
                             **({} if peak is None else {"peak_gib": peak})))
            rate = f"{tflops:.1f} TFLOP/s" if tflops is not None else f"{gbs:.0f} GB/s ({gbs / C:.2f} of copy)"
            mem = "" if peak is None else f", {ms:.2f} ms, peak {peak:.2f} GiB"
            print(f"  {case['op']} {case['pass_']} {case['dtype']} D={case['D']} {impl}: {rate}{mem}",
                  file=sys.stderr, flush=True)
        del case
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer row lengths")
    ap.add_argument("--only", default="", help="comma-separated case modules (softmax, merge, ce, ...)")
    ap.add_argument("--impls", default="ours,torch,flash,cudnn,flex", help="implementations to time (ours, torch, compile, liger, fla: benchmarks/peers.py; attention: flash, cudnn, flex)")
    ap.add_argument("--ops", default="", help="comma-separated ops to time (softmax, logsumexp, ...; default all)")
    ap.add_argument("--ds", default="", help="comma-separated row lengths, for modules that take them (softmax)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--replot", nargs="+", default=None, metavar="JSON", help="plot saved bench.json files, run nothing")
    args = ap.parse_args()
    if args.replot:
        merged = {}
        for path in args.replot:
            with open(path) as f:
                d = json.load(f)
            for r in d["rows"]:
                merged[(r["op"], r["pass_"], r["dtype"], r["D"], r["N"], r["impl"])] = r
            C = d["copy_gbs"]
        _plots(list(merged.values()), C, args.out)
        return
    impls = set(args.impls.split(","))
    names = sorted(os.path.basename(p)[6:-3] for p in glob.glob(os.path.join(HERE, "cases_*.py")))
    if args.only:
        names = [n for n in names if n in args.only.split(",")]
    C = copy_bw()
    if impls & {"compile", "flex"}:
        # one compiled function serves every shape of a case module (dynamic=False: one graph per
        # shape, as a user with static shapes gets); past dynamo's recompile limit (8) it would
        # silently run eager, so the limit is raised above the number of shapes
        # (bound as a name of its own: a bare `import torch._dynamo` here made torch local to main)
        import torch._dynamo as dynamo
        for knob in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
            if hasattr(dynamo.config, knob):
                setattr(dynamo.config, knob, max(256, getattr(dynamo.config, knob)))
    if impls & {"liger", "fla"}:
        import peers
        print(f"peers installed: {peers.available() or 'none'}", file=sys.stderr, flush=True)
    rows = []
    try:
        for name in names:
            try:
                run_module(name, args.quick, impls, C, rows, [int(d) for d in args.ds.split(",") if d],
                           [o for o in args.ops.split(",") if o])
            except Exception as e:  # a broken case module must not cost the others' results
                print(f"cases_{name}: {type(e).__name__}: {str(e)[:500]}", file=sys.stderr, flush=True)
    except KeyboardInterrupt:  # cut by a time limit (timeout -s INT): keep what was measured
        print(f"interrupted: {len(rows)} measurements kept", file=sys.stderr, flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        json.dump(dict(copy_gbs=C, device=torch.cuda.get_device_name(0), torch=torch.__version__,
                       triton=triton.__version__, rows=rows), f, indent=1)
    try:
        _plots(rows, C, args.out)
    except Exception as e:  # pragma: no cover
        print(f"(no plots: {e})", file=sys.stderr)
    table(rows, C)


def table(rows, C):
    order = [i for i in ("ours", "torch", "compile", "flash", "cudnn", "flex") if any(r["impl"] == i for r in rows)]
    order += sorted({r["impl"] for r in rows} - set(order))
    print(f"\ncopy: {C:.0f} GB/s   device: {torch.cuda.get_device_name(0)}  torch {torch.__version__}  "
          f"triton {triton.__version__}   (GB/s in model bytes, and the fraction of copy)")
    print(f"{'op':16s} {'pass':7s} {'dtype':9s} {'D':>8s} {'N':>8s} " + " ".join(f"{i:>16s}" for i in order))
    key = {}
    for r in rows:
        key.setdefault((r["op"], r["pass_"], r["dtype"], r["D"], r["N"]), {})[r["impl"]] = r
    for (op, pas, dt, D, N), d in key.items():
        cells = []
        for i in order:
            r = d.get(i)
            if r and r.get("tflops") is not None and not math.isnan(r["tflops"]):
                cells.append(f"{r['tflops']:8.1f} TFLOP/s")  # attention cases: compute-bound, not bytes
            else:
                cells.append(f"{r['gbs']:9.0f} ({r['frac']:4.2f})" if r and not math.isnan(r["gbs"]) else f"{'-':>16s}")
        print(f"{op:16s} {pas:7s} {dt:9s} {D:8d} {N:8d} " + " ".join(cells))
    timed = [r for r in rows if "peak_gib" in r]
    if timed:  # cases bound by matmuls (cases_ce.lce_cases): time and peak memory per implementation
        print("\ntime (ms) and peak allocated memory (GiB) of one step")
        for r in timed:
            print(f"{r['op']:20s} {r['dtype']:9s} V={r['D']:<8d} N={r['N']:<8d} {r['impl']:8s} "
                  f"{r['ms']:9.2f} ms {r['peak_gib']:8.2f} GiB")


def _plots(rows, C, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for (op, pas) in sorted({(r["op"], r["pass_"]) for r in rows}):
        fig, ax = plt.subplots(figsize=(6, 4))
        sel = [r for r in rows if r["op"] == op and r["pass_"] == pas]
        # one point per row length: the case with the most rows (few-rows cases are in the table)
        most = {}
        for r in sel:
            k = (r["dtype"], r["impl"], r["D"])
            most[k] = max(most.get(k, 0), r["N"])
        sel = [r for r in sel if r["N"] == most[(r["dtype"], r["impl"], r["D"])]]
        for dt in sorted({r["dtype"] for r in sel}):
            for impl in sorted({r["impl"] for r in sel}):
                pts = sorted((r["D"], r["tflops"] if r.get("tflops") is not None else r["gbs"])
                             for r in sel if r["dtype"] == dt and r["impl"] == impl)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{impl} {dt}")
        rate = any(r.get("tflops") is not None for r in sel)
        if not rate:
            ax.axhline(C, color="k", ls="--", lw=0.8, label="copy")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length L" if rate else "row length D")
        ax.set_ylabel("TFLOP/s" if rate else "model GB/s")
        ax.set_title(f"{op} {pas}")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(out, f"bench_{op}_{pas.replace('+', '_')}.png"), dpi=90)
        plt.close(fig)


if __name__ == "__main__":
    main()
