"""Where a cross-entropy training step spends its time, on the GPU: each part timed alone and
compared with the bytes it must move, for the three bfloat16 shapes of benchmarks/cases_ce.py.

    python benchmarks/ce_parts.py [--configs "default;CE_KERNELS_MAX_TILE=4096,CE_KERNELS_NUM_WARPS=8"] [--trace]
    python benchmarks/ce_parts.py --host   # only where the host's time goes in one eager step

Parts: ``targets`` (the host-side range check: a few tiny kernels and one sync), ``fwd`` (the
forward kernel(s), reads N V s bytes), ``bwd`` (the backward kernel, reads and writes N V s), ``step``
(forward + backward through autograd, as bench.py times it, 3 N V s model bytes) and, for scale,
``read`` (torch's x.sum(), a read of N V s). Fractions are of a device-to-device copy measured in
the same run (bytes moved / time / copy bandwidth); ``gap`` is step minus fwd minus bwd: launch,
sync and small-kernel overhead the step pays on top of its two kernels; ``host us`` is the wall
time per step of 64 rows of the same V (GPU work negligible): the host's own cost per step,
which the GPU hides only while its kernels take longer. ``--trace`` then profiles
two steps of the first shape (torch.profiler) and prints each GPU kernel with the idle time before
it, and the host functions that took the most time.
"""
from __future__ import annotations

import argparse

import torch
import triton

from softmax_properties import kernels
from bench import copy_bw
from cases_ce import SHAPES
from softmax_properties.kernels import _cross_entropy as ce
from sweep import applied


def _ms(fn):
    return triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")


def trace(N, V):
    """Two steps under torch.profiler: the GPU timeline (idle gap, duration, kernel) and the top
    host-side ops by self CPU time."""
    from torch.profiler import ProfilerActivity, profile
    x = torch.randn(N, V, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    t = torch.randint(0, V, (N,), device="cuda")

    def step():
        return torch.autograd.grad(kernels.cross_entropy(x, t), x)[0]
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(2):
            step()
        torch.cuda.synchronize()
    ev = sorted((e for e in prof.events() if e.device_type.name == "CUDA"), key=lambda e: e.time_range.start)
    if not ev:
        print("trace: no GPU events recorded")
        return
    print(f"GPU timeline of two steps, {N} x {V} bfloat16 (us): idle before, duration, kernel")
    prev = None
    busy = 0.0
    for e in ev:
        gap = e.time_range.start - prev if prev is not None else 0.0
        busy += e.time_range.end - e.time_range.start
        print(f"  {gap:8.1f} {e.time_range.end - e.time_range.start:8.1f}  {e.name[:90]}")
        prev = e.time_range.end
    span = ev[-1].time_range.end - ev[0].time_range.start
    print(f"  busy {busy:.0f} of {span:.0f} us")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=60))


def host_us(V, n=50):
    """Wall time per step (us) of 64 rows of V classes, steps back to back, one sync at the end."""
    import time
    x = torch.randn(64, V, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    t = torch.randint(0, V, (64,), device="cuda")
    for _ in range(5):
        torch.autograd.grad(kernels.cross_entropy(x, t), x)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        torch.autograd.grad(kernels.cross_entropy(x, t), x)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6


def _launch_cost(n=200):
    """Host us per launch of the forward kernel (64 x 4096 bfloat16: negligible GPU time) through
    the JIT function, through its compiled kernel (no argument binding or cache lookup) and through
    the project's Launcher (the compiled kernel behind a cache key of its own)."""
    import time
    x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
    t = torch.randint(0, 4096, (64,), device="cuda")
    loss = torch.empty(64, device="cuda")
    lse = torch.empty_like(loss)
    cfg = ce.config(64, 4096, x.dtype, x.device)
    args = (x, t, loss, lse, loss, loss, loss, loss, lse, ce._dummy64(x.device), loss,  # no options: W, OPT, LZ unread
            64, 4096, 4096, 1, -100, 1, cfg.chunk_cols, 0.0, 1 / 4096, 0)
    const = dict(F64=False, SMOOTH=False, SPLIT=False, VEC=2, OPTS=False, BLOCK_R=cfg.block_r, BLOCK=cfg.block, GS=8)
    grid = cfg.grid(64)
    k = ce._ce_fwd_kernel[grid](*args, **const, num_warps=cfg.num_warps)
    runner = k[(grid[0], grid[1], 1)]
    for label, fn in (("JITFunction[grid](...)", lambda: ce._ce_fwd_kernel[grid](*args, **const, num_warps=cfg.num_warps)),
                      ("CompiledKernel[grid](...)", lambda: runner(*args, *const.values())),
                      ("Launcher (kernels/_launch.py)", lambda: ce._fwd(grid, args, const, cfg.num_warps))):
        best = float("inf")
        for _ in range(3):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            best = min(best, (time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
        print(f"host us per launch of _ce_fwd_kernel (21 arguments, 8 constexprs) via {label}: {best:.1f}")


def host_parts(shapes=((16384, 32000), (64, 32000)), n=30):
    """Where the host's time goes in the eager step: the step's functions wrapped with timers
    (inclusive host microseconds per step, mean of n steps at the real shape, no sync between
    steps), then the step's wall time per call. A Triton launch counts in its caller and in
    'launch <kernel>'; 'wait' is TargetCheck.finish's event wait."""
    import time
    from collections import defaultdict

    import torch.nn.functional as F
    from softmax_properties.kernels import library as lib
    acc = defaultdict(float)

    def timed(name, fn):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                acc[name] += time.perf_counter() - t0
        return wrapper

    saved = []

    def patch(obj, attr, name):
        saved.append((obj, attr, getattr(obj, attr)))
        setattr(obj, attr, timed(name, getattr(obj, attr)))

    for fn in ("check_args", "_target_stats", "_forward_rows", "_reduce_loss", "forward_for_autograd", "config"):
        patch(ce, fn, fn)
    patch(ce.BackwardPlan, "__init__", "BackwardPlan (in the forward)")
    patch(ce.BackwardPlan, "run", "BackwardPlan.run")
    patch(ce.TargetCheck, "__init__", "TargetCheck.__init__")
    patch(ce.TargetCheck, "finish", "TargetCheck.finish (wait)")
    for k in ("_fwd", "_bwd", "_targets", "_reduce", "_merge"):
        patch(ce, k, "launch " + k)  # the kernels' Launchers (kernels/_launch.py)
    patch(lib.CrossEntropyFunction, "forward", "Function.forward")
    patch(lib.CrossEntropyFunction, "backward", "Function.backward")
    try:
        _launch_cost()
        for N, V in shapes:
            x = torch.randn(N, V, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            t = torch.randint(0, V, (N,), device="cuda")
            for label, step in (("ours", lambda: torch.autograd.grad(kernels.cross_entropy(x, t), x)),
                                ("F.cross_entropy", lambda: torch.autograd.grad(F.cross_entropy(x, t), x))):
                for _ in range(5):
                    step()
                torch.cuda.synchronize()
                acc.clear()
                wall = 0.0
                for _ in range(n):
                    t0 = time.perf_counter()
                    step()
                    wall += time.perf_counter() - t0
                torch.cuda.synchronize()
                print(f"host us per step, {N} x {V} bfloat16, {label}: wall {wall / n * 1e6:.1f} (no sync between steps)")
                for name, v in sorted(acc.items(), key=lambda kv: -kv[1]):
                    print(f"  {name:32s} {v / n * 1e6:8.1f}")
            del x, t
    finally:
        for obj, attr, orig in reversed(saved):
            setattr(obj, attr, orig)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default="default", help="settings separated by ';' (NAME=VALUE,...)")
    ap.add_argument("--trace", action="store_true", help="also profile two steps of the first shape")
    ap.add_argument("--host", action="store_true", help="only the host time of each piece of a step")
    args = ap.parse_args()
    if args.host:
        host_parts()
        return
    C = copy_bw()
    print(f"copy: {C:.0f} GB/s")
    print(f"{'N x V':>16s} {'setting':44s} {'targets us':>10s} {'fwd':>6s} {'bwd':>6s} {'step':>6s} {'read':>6s} {'gap us':>7s} {'host us':>7s}")
    for N, V in SHAPES:
        x = torch.randn(N, V, device="cuda", dtype=torch.bfloat16)
        t = torch.randint(0, V, (N,), device="cuda")
        xg = x.clone().requires_grad_(True)
        nb = N * V * x.element_size()
        dloss = torch.ones((), device="cuda", dtype=x.dtype)
        read = nb / _ms(lambda: x.sum()) / 1e6 / C

        def step():
            loss = kernels.cross_entropy(xg, t)
            return torch.autograd.grad(loss, xg)[0]

        for setting in args.configs.split(";"):
            with applied(setting):
                _, lse = ce.forward_rows(x, t, -100, 0.0)
                t_tg = _ms(lambda: ce.check_targets(t, V, -100, "cross_entropy"))
                t_f = _ms(lambda: ce.forward_rows(x, t, -100, 0.0))
                t_b = _ms(lambda: ce.backward_rows(x, t, dloss, lse, -100, "mean", 0.0))
                t_s = _ms(step)
                print(f"{N:>7d} x {V:<6d} {setting:44s} {t_tg * 1e3:10.1f} {nb / t_f / 1e6 / C:6.2f} "
                      f"{2 * nb / t_b / 1e6 / C:6.2f} {3 * nb / t_s / 1e6 / C:6.2f} {read:6.2f} "
                      f"{(t_s - t_f - t_b) * 1e3:7.1f} {host_us(V):7.1f}", flush=True)
        del x, xg, t
        torch.cuda.empty_cache()
    if args.trace:
        trace(*SHAPES[0])


if __name__ == "__main__":
    main()
