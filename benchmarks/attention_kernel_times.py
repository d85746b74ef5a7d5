"""Each attention kernel's own GPU time (torch.profiler's CUDA kernel times), for tuning one kernel
without the others' noise: the forward, the backward's dq kernel (with its delta) and its dk/dv
kernel of kernels.attention, bf16 at the benchmark's shapes (benchmarks/cases_attention.py:
B * L = 16384, H * D = 2048), full and causal, one line per launch configuration and kernel.

    python benchmarks/attention_kernel_times.py [--ds 64,128] [--L 4096] [--calls 20]
        [--configs "default;ATTN_KERNELS_BWD=32/128/4/3/128/64/4/3"] [--softcap 30]

--configs: ';'-separated sets of the tuning overrides (kernels/tuning.py, OVERRIDES; ',' between
several in one set), "default" for none, each applied as benchmarks/sweep.py applies its settings.
`--impl flex` times FlexAttention's generated kernels the same way (their names as inductor gives
them), for the per-kernel comparison the benchmark's totals hide.
"""
from __future__ import annotations

import argparse
import collections

import torch

from cases_attention import MODEL_DIM, TOKENS, _flex
from softmax_properties import kernels
from sweep import applied


def kernel_times(fn, calls: int) -> dict:
    """{kernel name: mean ms per call} of fn's CUDA kernels over `calls` calls (after 3 warm-up
    calls, which also compile)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    total = collections.defaultdict(float)
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            total[ev.name] += ev.time_range.elapsed_us() / 1e3
    return {name: t / calls for name, t in total.items()}


def run_case(impl: str, D: int, L: int, causal: bool, calls: int, softcap=None) -> dict:
    B, H = TOKENS // L, MODEL_DIM // D
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B, H, L, D, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_(True)
               for _ in range(3))
    g = torch.randn(B, H, L, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    if impl == "ours":
        def fwd():
            return kernels.attention(q, k, v, causal=causal, softcap=softcap)
    else:
        flex = _flex(L, causal, "cuda")

        def fwd():
            return flex(q, k, v)

    def step():
        o = fwd()[0]
        return torch.autograd.grad(o, (q, k, v), g)
    return kernel_times(step, calls)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ds", default="64,128", help="comma-separated head dimensions")
    ap.add_argument("--L", type=int, default=4096, help="sequence length (queries and keys)")
    ap.add_argument("--calls", type=int, default=20, help="profiled calls per case")
    ap.add_argument("--configs", default="default", help="';'-separated override sets")
    ap.add_argument("--impl", default="ours", choices=("ours", "flex"))
    ap.add_argument("--softcap", type=float, default=None, help="scores soft-capped at this value (ours only)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("attention_kernel_times.py times CUDA kernels: it needs a GPU")
    if args.softcap is not None and (args.impl != "ours" or not args.softcap > 0):
        raise SystemExit(f"--softcap: a positive value, for --impl ours only; got {args.softcap} with {args.impl}")
    if args.L <= 0 or TOKENS % args.L:
        raise SystemExit(f"--L: expected a positive divisor of {TOKENS}, got {args.L}")
    ds = [int(d) for d in args.ds.split(",")]
    for d in ds:
        if d <= 0 or MODEL_DIM % d:
            raise SystemExit(f"--ds: expected positive divisors of {MODEL_DIM}, got {d}")
    configs = [c.strip() for c in args.configs.split(";") if c.strip()] if args.impl == "ours" else ["default"]
    for label in configs:
        if label != "default" and "=" not in label:
            raise SystemExit(f"--configs: expected 'default' or NAME=VALUE[,NAME=VALUE], got {label!r}")
    for label in configs:
        with applied(label):
            for D in ds:
                for causal in (False, True):
                    times = run_case(args.impl, D, args.L, causal, args.calls, args.softcap)
                    cap = f" softcap={args.softcap:g}" if args.softcap else ""
                    case = f"{args.impl} D={D} L={args.L}{' causal' if causal else ''}{cap} [{label}]"
                    for name, ms in sorted(times.items(), key=lambda kv: -kv[1]):
                        print(f"{case}: {ms:7.3f} ms  {name[:90]}")
                    print(f"{case}: {sum(times.values()):7.3f} ms  all kernels", flush=True)


if __name__ == "__main__":
    main()
