"""Launch-configuration sweep on the GPU: time the project's kernels ("ours" of the
``benchmarks/cases_*.py`` modules bench.py uses, same data and model bytes) under several settings
of the kernels' tuning knobs, and print the fraction of copy per setting, best marked.

A setting is ``default`` (the launcher's own choice), a list of environment assignments
``NAME=VALUE[,NAME=VALUE]`` (a value may hold commas: ``ATTN_KERNELS_BWD_DP_FIRST=64,128``), or
for the softmax family the shorthand ``TILE/PER_WARP`` (SOFTMAX_KERNELS_TILE and
SOFTMAX_KERNELS_PER_WARP; for backward cases SOFTMAX_KERNELS_TILE_BWD and
SOFTMAX_KERNELS_PER_WARP_BWD). Settings are separated by ';'. The knobs, each with what it
overrides: kernels/tuning.py (OVERRIDES).

    python benchmarks/sweep.py --only softmax --ops softmax --ds 128,4096 --configs "default;2048/512"
    python benchmarks/sweep.py --only merge --configs "default;MERGE_KERNELS_PER_WARP=512"
    python benchmarks/sweep.py --only ce --configs "default;CE_KERNELS_NUM_WARPS=8"
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re

import torch
import triton

from bench import copy_bw, module_cases
from softmax_properties.kernels import _launch as kernels_launch


def _env(setting: str, backward: bool) -> dict:
    if setting == "default":
        return {}
    if "=" not in setting:  # softmax shorthand TILE/PER_WARP
        tile, per_warp = setting.split("/")
        if backward:
            return {"SOFTMAX_KERNELS_TILE_BWD": tile, "SOFTMAX_KERNELS_PER_WARP_BWD": per_warp}
        return {"SOFTMAX_KERNELS_TILE": tile, "SOFTMAX_KERNELS_PER_WARP": per_warp}
    # a ',' starts the next assignment only before NAME=: a value may hold commas itself
    return dict(kv.split("=", 1) for kv in re.split(r",(?=[A-Z][A-Z0-9_]*=)", setting))


@contextlib.contextmanager
def applied(setting: str, backward: bool = False):
    """The environment of a setting (see _env) while the block runs, restored afterwards."""
    env = _env(setting, backward)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    kernels_launch.reload_knobs()  # the kernels read their knobs from a snapshot
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        kernels_launch.reload_knobs()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="softmax", help="case modules, comma-separated (softmax, merge, ce)")
    ap.add_argument("--ops", default="", help="keep only these ops (comma-separated); empty: all")
    ap.add_argument("--ds", default="128,1024,4096,16384", help="row lengths, for modules that take them")
    ap.add_argument("--dtypes", default="", help="keep only these dtypes (comma-separated, e.g. bfloat16); empty: all")
    ap.add_argument("--passes", default="", help="keep only these passes (fwd, bwd); empty: all")
    ap.add_argument("--configs", default="default", help="settings separated by ';' (see the module docstring)")
    args = ap.parse_args()
    C = copy_bw()
    print(f"copy: {C:.0f} GB/s")
    ops = set(filter(None, args.ops.split(",")))
    dtypes = set(filter(None, args.dtypes.split(",")))
    passes = set(filter(None, args.passes.split(",")))
    settings = args.configs.split(";")
    for name in args.only.split(","):
        for case in module_cases(name, False, ("ours",), [int(d) for d in args.ds.split(",")]):
            fn = case["impls"].get("ours")
            if (fn is None or (ops and case["op"] not in ops) or (dtypes and case["dtype"] not in dtypes)
                    or (passes and case["pass_"] not in passes)):
                continue
            res = []
            for setting in settings:
                try:
                    with applied(setting, case["pass_"] == "bwd"):
                        ms = triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")
                    frac = case["nbytes"] / ms / 1e6 / C
                except Exception as e:  # noqa: BLE001 - report and go on
                    print(f"{case['op']} {case['dtype']} D={case['D']} {setting}: {type(e).__name__}: {str(e)[:200]}")
                    frac = float("nan")
                res.append((setting, frac))
            best = max(res, key=lambda r: r[1] if r[1] == r[1] else -1)
            line = "  ".join(f"{s}:{f:.2f}{'*' if (s, f) == best else ''}" for s, f in res)
            print(f"{case['op']:16s} {case['pass_']:7s} {case['dtype']:8s} D={case['D']:<7d} N={case['N']:<7d} {line}", flush=True)
            del case, fn
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
