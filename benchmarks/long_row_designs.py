"""Designs for rows of 65536-262144 columns that docs/results.md measures against the shipped
kernels ("What limits each point below target"), each timed in one process with the shipped
kernel on the same tensors, and its output compared with the shipped kernel's (`same`: bitwise;
else the largest difference):

* bwd_grid: the looped backward with a persistent grid (programs x SMs, each taking every n-th
  row) and larger chunks, with or without the next chunk's loads in flight (PREF), so that fewer
  rows are in flight and more of the second pass may come from the L2;
* bwd_sums: the looped backward as shipped (one program per row) with its exact chunk sums
  (sum_exact32) against plain float32 chunk sums: what the order-independent sum costs there;
* bwd_whole / fwd_whole: one program holds a whole bf16 row of 65536 in registers (a single DRAM
  pass). The backward: V0 float32 arithmetic with a plain sum, V1 16-bit arithmetic (products and
  sum in bfloat16, as fla's kernel), V2 the shipped exact arithmetic on 4 sub-rows, V3 the same
  with the loaded words held and each phase widening its own opaque copy. The forward: 8 loaded
  sub-chunks held as words, each phase widening its own copy (OPQ 1) or the compiler's choice.

    python benchmarks/long_row_designs.py [bwd_grid] [bwd_sums] [bwd_whole] [fwd_whole]

Fractions of copy as bench.py's (model bytes: forward 2·N·D·s, backward 3·N·D·s), with the
compiled kernel's registers and spills (triton's n_spills).
"""
from __future__ import annotations

import sys

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

from bench import copy_bw
from softmax_properties import kernels as K
from softmax_properties.kernels._numerics import _pow2, exp_ftz, pow2f, sum_exact32, to_f32, to_out
from softmax_properties.kernels._softmax import _online_merge, _out32, _q1_32, _stats32, _terms32, _y32


@triton.jit
def _opaque(x):
    """x unchanged, behind an instruction the compiler cannot merge or move: a value widened from
    it is not shared with (and kept live for) another phase. 16-bit x, two per register."""
    return tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=x.dtype, is_pure=False, pack=2)


@triton.jit
def _ptr(row_base, cols):
    return tl.max_contiguous(tl.multiple_of(row_base + cols[None, :], [1, 16]), [1, 16])


@triton.jit(do_not_specialize=["n_rows", "n_cols"])
def bwd_grid_kernel(A, G, DX, n_rows, n_cols, OP: tl.constexpr, BLOCK_D: tl.constexpr, PREF: tl.constexpr,
                    EXACT: tl.constexpr):
    """Contiguous rows, n_cols a multiple of BLOCK_D; rows pid, pid + grid, ..."""
    n_ck = n_cols // BLOCK_D
    oa = 0.0 if OP == 0 else float("-inf")
    ar = tl.arange(0, BLOCK_D)
    for r in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        row = tl.arange(0, 1).to(tl.int64) + r
        arow = A + (row * n_cols)[:, None]
        grow = G + (row * n_cols)[:, None]
        drow = DX + (row * n_cols)[:, None]
        tot = tl.zeros([1], tl.float64)
        if PREF:
            aw = tl.load(_ptr(arow, ar), eviction_policy="evict_last")
            gw = tl.load(_ptr(grow, ar), eviction_policy="evict_last")
        else:
            aw = tl.zeros([1, BLOCK_D], A.dtype.element_ty)
            gw = tl.zeros([1, BLOCK_D], G.dtype.element_ty)
        for i in range(0, n_ck):
            if PREF:
                cn = (i + 1) * BLOCK_D + ar
                mk = tl.max_constancy((cn < n_cols)[None, :], [1, 16])
                an = tl.load(_ptr(arow, cn), mask=mk, other=oa, eviction_policy="evict_last")
                gn = tl.load(_ptr(grow, cn), mask=mk, other=0.0, eviction_policy="evict_last")
            else:
                c = i * BLOCK_D + ar
                aw = tl.load(_ptr(arow, c), eviction_policy="evict_last")
                gw = tl.load(_ptr(grow, c), eviction_policy="evict_last")
                an = aw
                gn = gw
            term, q1, mg, mt = _terms32(to_f32(aw), to_f32(gw), OP)
            if EXACT:
                tot += sum_exact32(term, mt) * _pow2(q1.to(tl.int64))
            else:
                tot += tl.sum(term, 1).to(tl.float64) * _pow2(q1.to(tl.int64))
            aw = an
            gw = gn
        for j in range(0, n_ck):
            c = (n_ck - 1 - j) * BLOCK_D + ar
            g = to_f32(tl.load(_ptr(grow, c), eviction_policy="evict_first"))
            a = to_f32(tl.load(_ptr(arow, c), eviction_policy="evict_first"))
            dx = _out32(a, g, tot, tl.max(tl.abs(g), 1), OP)
            tl.store(_ptr(drow, c), to_out(dx, DX.dtype.element_ty), eviction_policy="evict_first")


@triton.jit
def bwd_whole_kernel(A, G, DX, D: tl.constexpr, V: tl.constexpr, NS: tl.constexpr):
    """softmax backward, one program per contiguous row of D columns held whole (see the module
    docstring for V)."""
    row = tl.program_id(0).to(tl.int64)
    if V >= 2:
        SUB: tl.constexpr = D // NS
        off = tl.arange(0, NS)[:, None] * SUB + tl.arange(0, SUB)[None, :]
    else:
        off = tl.arange(0, D)
    a = tl.load(A + row * D + off)
    g = tl.load(G + row * D + off)
    if V == 0:
        af = to_f32(a)
        gf = to_f32(g)
        tot = tl.sum(af * gf, 0)
        dx = af * (gf - tot)
    elif V == 1:
        tot = tl.sum(a * g, 0)
        dx = a * g - a * tot
    elif V == 2:
        af = to_f32(a)
        gf = to_f32(g)
        term, q1, mg, mt = _terms32(af, gf, 0)
        tot = tl.sum(sum_exact32(term, mt) * _pow2(q1.to(tl.int64)), 0) + tl.zeros([NS], tl.float64)
        dx = _out32(af, gf, tot, mg, 0)
    else:
        q1, mg = _q1_32(to_f32(_opaque(a)), to_f32(_opaque(g)))
        t = to_f32(_opaque(a)) * (to_f32(_opaque(g)) * pow2f(-q1)[:, None])
        mt = tl.max(tl.abs(t), 1)
        t = to_f32(_opaque(a)) * (to_f32(_opaque(g)) * pow2f(-q1)[:, None])
        tot = tl.sum(sum_exact32(t, mt) * _pow2(q1.to(tl.int64)), 0) + tl.zeros([NS], tl.float64)
        dx = _out32(to_f32(_opaque(a)), to_f32(_opaque(g)), tot, mg, 0)
    tl.store(DX + row * D + off, to_out(dx, DX.dtype.element_ty))


@triton.jit
def _widen(xw, OPQ: tl.constexpr):
    if OPQ:
        return to_f32(_opaque(xw))
    else:
        return to_f32(xw)


@triton.jit
def _fold(M, S, xw, OPQ: tl.constexpr):
    mc, sc, ms_c, d_c, e_c = _stats32(_widen(xw, OPQ), False)
    return _online_merge(M, S, mc.to(tl.float64), sc)


@triton.jit
def _emit(yrow, xw, c: tl.constexpr, SUB: tl.constexpr, ms, s, fin, OP: tl.constexpr, OPQ: tl.constexpr):
    d = _widen(xw, OPQ) - ms[:, None]
    y = _y32(exp_ftz(d), d, s, fin, OP)
    tl.store(_ptr(yrow, c * SUB + tl.arange(0, SUB)), to_out(y, yrow.dtype.element_ty))


@triton.jit
def fwd_whole_kernel(X, Y, OP: tl.constexpr, SUB: tl.constexpr, OPQ: tl.constexpr):
    """softmax (OP 0) / log_softmax (1), one program per contiguous row of 8 * SUB columns: the
    shipped looped kernel's arithmetic (chunks of SUB folded in order), every chunk loaded once."""
    row = tl.program_id(0).to(tl.int64)
    xrow = X + row * (8 * SUB) + tl.zeros([1], tl.int64)[:, None]
    yrow = Y + row * (8 * SUB) + tl.zeros([1], tl.int64)[:, None]
    ar = tl.arange(0, SUB)
    x0 = tl.load(_ptr(xrow, ar))
    x1 = tl.load(_ptr(xrow, SUB + ar))
    x2 = tl.load(_ptr(xrow, 2 * SUB + ar))
    x3 = tl.load(_ptr(xrow, 3 * SUB + ar))
    x4 = tl.load(_ptr(xrow, 4 * SUB + ar))
    x5 = tl.load(_ptr(xrow, 5 * SUB + ar))
    x6 = tl.load(_ptr(xrow, 6 * SUB + ar))
    x7 = tl.load(_ptr(xrow, 7 * SUB + ar))
    M = tl.full([1], float("-inf"), tl.float64)
    S = tl.zeros([1], tl.float64)
    M, S = _fold(M, S, x0, OPQ)
    M, S = _fold(M, S, x1, OPQ)
    M, S = _fold(M, S, x2, OPQ)
    M, S = _fold(M, S, x3, OPQ)
    M, S = _fold(M, S, x4, OPQ)
    M, S = _fold(M, S, x5, OPQ)
    M, S = _fold(M, S, x6, OPQ)
    M, S = _fold(M, S, x7, OPQ)
    m = M.to(tl.float32)
    s = S.to(tl.float32)
    fin = tl.abs(m) < float("inf")
    ms = tl.where(fin, m, 0.0)
    _emit(yrow, x7, 7, SUB, ms, s, fin, OP, OPQ)
    _emit(yrow, x6, 6, SUB, ms, s, fin, OP, OPQ)
    _emit(yrow, x5, 5, SUB, ms, s, fin, OP, OPQ)
    _emit(yrow, x4, 4, SUB, ms, s, fin, OP, OPQ)
    _emit(yrow, x3, 3, SUB, ms, s, fin, OP, OPQ)
    _emit(yrow, x2, 2, SUB, ms, s, fin, OP, OPQ)
    _emit(yrow, x1, 1, SUB, ms, s, fin, OP, OPQ)
    _emit(yrow, x0, 0, SUB, ms, s, fin, OP, OPQ)


def _time(tag, fn, n_bytes, copy, ref=None, out=None):
    try:
        k = fn()
        torch.cuda.synchronize()
        same = ""
        if ref is not None:
            same = " same" if torch.equal(ref, out) else \
                f" maxdiff {(ref.double() - out.double()).nan_to_num().abs().max().item():.3g}"
        regs = f" ({k.n_regs} registers, n_spills {k.n_spills})" if hasattr(k, "n_regs") else ""
        print(f"{tag}{regs}: {n_bytes / do_bench(fn, warmup=25, rep=150) / 1e6 / copy:.3f}{same}", flush=True)
    except Exception as e:  # a design that does not compile must not cost the others
        print(f"{tag}: {type(e).__name__}: {str(e)[:300]}", flush=True)


def _data(N, D, dtype):
    torch.manual_seed(0)
    x = torch.randn(N, D, device="cuda", dtype=dtype)
    return x, torch.randn_like(x)


def bwd_grid(copy, sms):
    configs = [(8192, 32, 1, 1), (16384, 32, 0, 1), (4096, 16, 1, 2)]  # chunk, warps, PREF, programs per SM
    for D in (65536, 262144):
        for dtype in (torch.bfloat16, torch.float32):
            N = 2**28 // D
            x, g = _data(N, D, dtype)
            nb = 3 * x.numel() * x.element_size()
            dx = torch.empty_like(x)
            for op, ref_fn, fwd in ((0, K.softmax_backward, K.softmax), (1, K.log_softmax_backward, K.log_softmax)):
                a = fwd(x)
                ref = ref_fn(a, g)
                _time(f"bwd_grid op {op} {dtype} D={D} shipped", lambda: ref_fn(a, g), nb, copy)
                for chunk, warps, pref, per_sm in configs:
                    _time(f"bwd_grid op {op} {dtype} D={D} chunk {chunk} warps {warps} PREF {pref} grid {per_sm} x SMs",
                          lambda: bwd_grid_kernel[(per_sm * sms,)](a, g, dx, N, D, OP=op, BLOCK_D=chunk, PREF=pref, EXACT=1,
                                                                   num_warps=warps, enable_fp_fusion=False),
                          nb, copy, ref, dx)


def bwd_sums(copy, sms):
    D = 65536
    for dtype, chunk, warps in ((torch.bfloat16, 4096, 8), (torch.float32, 16384, 16)):  # the shipped loop_config
        N = 2**28 // D
        x, g = _data(N, D, dtype)
        y = K.softmax(x)
        nb = 3 * x.numel() * x.element_size()
        dx = torch.empty_like(x)
        ref = K.softmax_backward(y, g)
        _time(f"bwd_sums {dtype} D={D} shipped", lambda: K.softmax_backward(y, g), nb, copy)
        for exact in (1, 0):
            _time(f"bwd_sums {dtype} D={D} one program per row, exact {exact}",
                  lambda: bwd_grid_kernel[(N,)](y, g, dx, N, D, OP=0, BLOCK_D=chunk, PREF=0, EXACT=exact,
                                                num_warps=warps, enable_fp_fusion=False),
                  nb, copy, ref, dx)


def bwd_whole(copy, sms):
    D = 65536
    N = 2**28 // D
    x, g = _data(N, D, torch.bfloat16)
    y = K.softmax(x)
    nb = 3 * x.numel() * x.element_size()
    dx = torch.empty_like(x)
    ref = K.softmax_backward(y, g)
    _time(f"bwd_whole bfloat16 D={D} shipped", lambda: K.softmax_backward(y, g), nb, copy)
    for warps in (16, 32):
        for v, ns in ((0, 1), (1, 1), (2, 4), (3, 4)):
            _time(f"bwd_whole bfloat16 D={D} V{v} warps {warps}",
                  lambda: bwd_whole_kernel[(N,)](y, g, dx, D=D, V=v, NS=ns, num_warps=warps, enable_fp_fusion=False),
                  nb, copy, ref, dx)


def fwd_whole(copy, sms):
    D = 65536
    N = 2**28 // D
    x, _ = _data(N, D, torch.bfloat16)
    nb = 2 * x.numel() * x.element_size()
    y = torch.empty_like(x)
    for op, fn in ((0, K.softmax), (1, K.log_softmax)):
        ref = fn(x)
        _time(f"fwd_whole op {op} bfloat16 D={D} shipped", lambda: fn(x), nb, copy)
        for warps in (8, 16):
            for opq in (0, 1):
                _time(f"fwd_whole op {op} bfloat16 D={D} warps {warps} OPQ {opq}",
                      lambda: fwd_whole_kernel[(N,)](x, y, OP=op, SUB=D // 8, OPQ=opq, num_warps=warps,
                                                     enable_fp_fusion=False),
                      nb, copy, ref, y)


DESIGNS = dict(bwd_grid=bwd_grid, bwd_sums=bwd_sums, bwd_whole=bwd_whole, fwd_whole=fwd_whole)


def main():
    wanted = sys.argv[1:] or list(DESIGNS)
    unknown = [w for w in wanted if w not in DESIGNS]
    if unknown:
        raise SystemExit(f"unknown design(s) {unknown}; expected some of {list(DESIGNS)}")
    copy = copy_bw()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"copy {copy:.0f} GB/s, {sms} SMs, torch {torch.__version__}, triton {triton.__version__}", flush=True)
    for w in wanted:
        DESIGNS[w](copy, sms)


if __name__ == "__main__":
    main()
