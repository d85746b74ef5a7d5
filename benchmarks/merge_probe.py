"""Where did bf16 softmax_merge at D = 128 lose? Plain Triton copies with the merge's memory
patterns, timed like bench.py (do_bench median, fraction of a 1 GB copy, model bytes 2 numel(out) s):
copy_halves (one program per side, writing half of every output row: the merge kernel before the
thirteenth session), copy_rows (one program writes whole rows from both inputs: the kernel after),
torch.cat, and kernels.softmax_merge, at bf16 / float32 and several row lengths and tiles.

    python benchmarks/merge_probe.py
"""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch, triton, triton.language as tl
import kernels

@triton.jit
def copy_halves(PA, PB, P, n_rows, DA: tl.constexpr, BLOCK_R: tl.constexpr):
    pid = tl.program_id(0)
    pr = pid // 2
    side = pid % 2
    rows = pr.to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, DA)
    m = (rows < n_rows)[:, None]
    src = tl.where(side == 0, PA, PB)
    x = tl.load(src + rows[:, None] * DA + cols[None, :], mask=m)
    tl.store(P + rows[:, None] * (2 * DA) + side * DA + cols[None, :], x, mask=m)

@triton.jit
def copy_rows(PA, PB, P, n_rows, DA: tl.constexpr, BLOCK_R: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, 2 * DA)
    m = (rows < n_rows)[:, None]
    ina = (cols < DA)[None, :]
    ca = tl.where(cols < DA, cols, cols - DA)
    xa = tl.load(PA + rows[:, None] * DA + tl.max_contiguous(tl.multiple_of(ca, 16), 16)[None, :], mask=m & ina)
    xb = tl.load(PB + rows[:, None] * DA + tl.max_contiguous(tl.multiple_of(ca, 16), 16)[None, :], mask=m & ~ina)
    tl.store(P + rows[:, None] * (2 * DA) + cols[None, :], tl.where(ina, xa, xb), mask=m)

@triton.jit
def copy_flat(X, Y, n, BLOCK: tl.constexpr):
    o = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + o, tl.load(X + o, mask=o < n), mask=o < n)

def t(fn):
    return triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")

a = torch.empty(2**29, device="cuda", dtype=torch.uint8); b = torch.empty_like(a)
C = 2 * a.numel() / t(lambda: b.copy_(a)) / 1e6
print(f"copy {C:.0f} GB/s")
def rep(name, nbytes, fn):
    print(f"{name:60s} {nbytes / t(fn) / 1e6 / C:.3f}", flush=True)
x = torch.empty(2**29, device="cuda", dtype=torch.bfloat16); y = torch.empty_like(x)
for bl in (8192, 16384):
    rep(f"copy_flat bf16 BLOCK {bl}", 4 * x.numel(), lambda: copy_flat[(x.numel() // bl,)](x, y, x.numel(), BLOCK=bl, num_warps=4))
del x, y
for dt, da in ((torch.bfloat16, 64), (torch.bfloat16, 128), (torch.bfloat16, 32), (torch.float32, 32), (torch.float32, 64)):
    s = dt.itemsize
    N = 2**30 // (2 * da * s)
    pa = torch.rand(N, da, device="cuda", dtype=dt); pb = torch.rand(N, da, device="cuda", dtype=dt)
    la = torch.randn(N, device="cuda") * 4; lb = torch.randn(N, device="cuda") * 4
    p = torch.empty(N, 2 * da, device="cuda", dtype=dt)
    nb = 2 * p.numel() * s
    tag = f"{str(dt)[6:]} D={2*da} N={N}"
    rep(f"softmax_merge {tag}", nb, lambda: kernels.softmax_merge(pa, la, pb, lb))
    rep(f"torch.cat {tag}", nb, lambda: torch.cat([pa, pb], -1))
    for te, w in ((8192, 4), (4096, 4), (2048, 4), (16384, 8)):
        br = te // da
        rep(f"copy_halves {tag} tile {te} w{w}", nb, lambda: copy_halves[(triton.cdiv(N, br) * 2,)](pa, pb, p, N, DA=da, BLOCK_R=br, num_warps=w))
        br = te // (2 * da)
        rep(f"copy_rows {tag} tile {te} w{w}", nb, lambda: copy_rows[(triton.cdiv(N, br),)](pa, pb, p, N, DA=da, BLOCK_R=br, num_warps=w))
    del pa, pb, la, lb, p
    torch.cuda.empty_cache()
