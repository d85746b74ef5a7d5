"""The softmax merge's bf16 D = 128 case with its memory streams added one at a time (copy of whole
rows in the merge's [rows, groups, 16] layout; + the lse reads and write; + the data scaled by an
lse-derived weight), against kernels.softmax_merge. Thirteenth session, call 7 (RESULTS.md): these
probes read 0.80-0.87 of copy while the merge itself read 0.958, so they do not isolate the
streams' cost (their loads carry no alignment hints; not investigated further).

    python benchmarks/merge_probe2.py
"""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch, triton, triton.language as tl
import kernels

@triton.jit
def probe(PA, PB, P, LA, LB, LO, n_rows, DA: tl.constexpr, BLOCK_R: tl.constexpr, LEVEL: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid.to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    rm = rows < n_rows
    g0 = (tl.arange(0, 2 * DA // 16) * 16)[None, :, None]
    c = tl.arange(0, 16)[None, None, :]
    in_a = g0 < DA
    m = rm[:, None, None]
    xa = tl.load(PA + rows[:, None, None] * DA + g0 + c, mask=m & in_a, other=0.0)
    xb = tl.load(PB + rows[:, None, None] * DA + (g0 - DA) + c, mask=m & ~in_a, other=0.0)
    x = tl.where(in_a, xa, xb)
    if LEVEL == 0:
        out = x
    else:
        tl.debug_barrier()
        la = tl.load(LA + rows, mask=rm, other=0.0)
        lb = tl.load(LB + rows, mask=rm, other=0.0)
        if LEVEL == 1:
            out = x
            tl.store(LO + rows, la + lb, mask=rm)
        else:
            w = tl.where(in_a, la[:, None, None], lb[:, None, None])
            out = (x.to(tl.float32) * w).to(x.dtype)
            tl.store(LO + rows, la + lb, mask=rm)
    tl.store(P + rows[:, None, None] * (2 * DA) + g0 + c, out, mask=m)

def t(fn):
    return triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")

a = torch.empty(2**29, device="cuda", dtype=torch.uint8); b = torch.empty_like(a)
C = 2 * a.numel() / t(lambda: b.copy_(a)) / 1e6
del a, b
print(f"copy {C:.0f} GB/s")
dt, da = torch.bfloat16, 64
N = 2**22
pa = torch.rand(N, da, device="cuda", dtype=dt); pb = torch.rand(N, da, device="cuda", dtype=dt)
la = torch.randn(N, device="cuda") * 4; lb = torch.randn(N, device="cuda") * 4
lo = torch.empty_like(la)
p = torch.empty(N, 2 * da, device="cuda", dtype=dt)
nb = 2 * p.numel() * 2
for r in range(2):
    print(f"softmax_merge: {nb / t(lambda: kernels.softmax_merge(pa, la, pb, lb)) / 1e6 / C:.3f}")
    for lev, name in ((0, "copy rows"), (1, "copy rows + lse read/write"), (2, "+ data scaled by the lse")):
        for br, w in ((32, 4), (64, 4), (64, 8), (128, 8), (16, 2)):
            ms = t(lambda: probe[(triton.cdiv(N, br),)](pa, pb, p, la, lb, lo, N, DA=da, BLOCK_R=br, LEVEL=lev, num_warps=w))
            print(f"{name:30s} BR{br} w{w}: {nb / ms / 1e6 / C:.3f}", flush=True)
