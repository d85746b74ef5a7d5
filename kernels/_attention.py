"""Flash attention: ``attention(q, k, v, ...) -> (o, lse)`` and its VJP
``attention_backward(q, k, v, o, lse, do, ...) -> (dq, dk, dv)`` (oracles/sdpa.py is the FP64
truth and states the definition; its edge rows are ATTENTION_SEMANTICS in oracles/semantics.py).

q (B, Hq, Lq, D), k (B, Hkv, Lk, D), v (B, Hkv, Lk, Dv), any strides (stride 0 included; the
(B, L, H, D) layout arrives as a permuted view), Hq a multiple of Hkv (query head h reads key /
value head h // (Hq / Hkv)), D and Dv 1 ... 256, any length including 0. Options: ``causal``
(bottom-right aligned: query i sees keys j <= i + Lk - Lq, flash-attention >= 2.1),
``window=(left, right)`` (keys i + Lk - Lq - left <= j <= i + Lk - Lq + right; None or -1 for an
unbounded side), ``softcap`` c (scores s -> c tanh(s / c) after scaling, before masking), ``scale``
(default 1 / sqrt(D)). o is fresh, contiguous, in q's dtype; lse (B, Hq, Lq) is the natural-log
sum of exp of the scores, float32 (float64 for float64 inputs).

Forward (one program per BLOCK_M queries of one head): the online softmax over key blocks of
BLOCK_N, in float32 (float64 for float64), with exp2((s - m) log2(e)) (exp for float64). A key
block is masked only where it needs it: the blocks a query block's rows all see in full run
without masks, the ones crossing the causal or window diagonal, the left window edge or the end
of the keys run with them, and blocks past the diagonal or before the window are never visited. The running max propagates NaN, and a row
whose visible scores are all -inf (or a fully masked block) forms exp2(-inf - 0) = 0, never
-inf - -inf: such a row ends with o = 0, lse = -inf; a NaN score gives NaN o and lse; a +inf score
NaN o and lse = +inf. P is rounded to the input dtype for the P V product in 16-bit (as every
flash kernel does); float32 dots run with input_precision="ieee"; float64 dots in float64.

Backward (the standard design, no atomics, so results are deterministic): one kernel for dq (a
program holds BLOCK_M2 queries and streams the key blocks), which first forms its rows'
delta_i = rowsum(o_i * do_i) - dlse_i (float32; float64 for float64) and stores it with the
rows' lse (its -inf made +inf, so exp(s - lse) = 0; its +inf NaN), then one for dk and dv (a
program holds BLOCK_N1 keys of one key/value head and streams the query blocks of every query
head of its group), each recomputing P = exp(s - lse) from the forward's lse. A
gradient of lse (autograd, when lse is used) enters as dS = P (dP - delta + dlse).

Keys a query cannot see never enter its row's arithmetic as scores (masked to -inf, so NaN in an
invisible key's k changes nothing); a masked pair inside a block still multiplies its zero weight
by the key's v (and, backward, by its k, and by the query's q and do), as in every tiled kernel,
so non-finite inputs can reach other rows and keys of their blocks through those products.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import triton
import triton.language as tl

from . import _launch as L
from . import tuning as T
from ._numerics import rowmax, to_out

_LOG2E: tl.constexpr = tl.constexpr(1.4426950408889634)
_LN2: tl.constexpr = tl.constexpr(0.6931471805599453)
MAX_HEAD_DIM = 256

_FWD_INTS = ["sqb", "sqh", "sqm", "sqd", "skb", "skh", "skn", "skd", "svb", "svh", "svn", "svd",
             "sob", "soh", "som", "sod", "Hq", "G", "Lq", "Lk", "D", "Dv", "off", "wl", "wr"]
_FWD_PTRS = ["Q", "K", "V", "O", "LSE"]
_BWD_INTS = ["sqb", "sqh", "sqm", "sqd", "skb", "skh", "skn", "skd", "svb", "svh", "svn", "svd",
             "sdb", "sdh", "sdm", "sdd", "sgb", "sgh", "sgn", "sgd", "sub", "suh", "sun", "sud",
             "Hq", "Hkv", "G", "Lq", "Lk", "D", "Dv", "off", "wl", "wr"]
_BWD_PTRS = ["Q", "K", "V", "DO", "LSEB", "DELTA", "GA", "GB"]
# the dq kernel: o (in the dk/dv kernel's GB slot, with its strides) and dlse for delta, no dv
_DQ_INTS = [{"sub": "sob", "suh": "soh", "sun": "som", "sud": "sod"}.get(n, n) for n in _BWD_INTS]
_DQ_PTRS = ["Q", "K", "V", "DO", "LSE", "DELTA", "LSEB", "GA", "O", "DLSE"]


# ----------------------------------------------------------------------------------------------
# device helpers
# ----------------------------------------------------------------------------------------------
@triton.jit
def _exp(x, F64: tl.constexpr):
    """exp of a difference of scores (<= 0 for a row's max): tl.exp for float64, exp2(x log2(e))
    otherwise. The scores stay in natural units: folding log2(e) into the scale would overflow
    float32 for scores above 2.4e38, which a float32 lse holds."""
    if F64:
        return tl.exp(x)
    else:
        return tl.exp2(x * _LOG2E)


@triton.jit
def _coef(num, den, like):
    """num / den in like's dtype, rounded once (a float literal would be rounded to float32
    first, too coarse for float64)."""
    return tl.cast(num, like.dtype) / den


@triton.jit
def _tanh(x):
    """tanh in x's dtype, the same code compiled and interpreted (the interpreter has no
    libdevice). |x| >= 1/8: (1 - e) / (1 + e) with e = exp(-2|x|), within a few ulp there; below
    1/8, where 1 - e cancels, the Taylor series to x^15 (the next term is 2e-18 of x there).
    NaN stays NaN, +-inf gives +-1."""
    ax = tl.abs(x)
    e = tl.exp(-2 * ax)
    big = (1 - e) / (1 + e)
    x2 = x * x
    p = _coef(-929569, 638512875, x)
    p = p * x2 + _coef(21844, 6081075, x)
    p = p * x2 + _coef(-1382, 155925, x)
    p = p * x2 + _coef(62, 2835, x)
    p = p * x2 + _coef(-17, 315, x)
    p = p * x2 + _coef(2, 15, x)
    p = p * x2 + _coef(-1, 3, x)
    small = x + x * x2 * p
    return tl.where(ax < 0.125, small, tl.where(x < 0, -big, big))


@triton.jit
def _join(x0, x1, x2, F64: tl.constexpr):
    """A float argument passed as three float32 parts (float arguments are float32 on the GPU):
    their float64 sum for float64 kernels (the argument to float64 precision), else the first."""
    if F64:
        return tl.cast(x0, tl.float64) + tl.cast(x1, tl.float64) + tl.cast(x2, tl.float64)
    else:
        return x0


@triton.jit
def _scores(s, sc, cm, SOFTCAP: tl.constexpr):
    """Raw dot products -> scores: s sc, or cm tanh(s sc) with softcap (sc = scale / c, cm = c).
    Returns (scores, tanh). A constexpr, not a runtime flag: a runtime branch here (a uniform
    scf.if yielding the scores inside the pipelined key loop) fails Triton 3.6's software
    pipeliner on the 16-bit, vectorized variants (PassManager::run failed)."""
    if SOFTCAP:
        th = _tanh(s * sc)
        return cm * th, th
    else:
        return s * sc, s


@triton.jit
def _visible(rows, cols, Lq, Lk, off, wl, wr):
    """[len(rows), len(cols)] mask: query rows[i] may see key cols[j] (and both exist). An
    unbounded window side arrives as Lq + Lk + 1 (_mask_args), wide enough to mask nothing."""
    vis = (rows[:, None] < Lq) & (cols[None, :] < Lk)
    vis = vis & (cols[None, :] <= rows[:, None] + (off + wr))
    vis = vis & (cols[None, :] >= rows[:, None] + (off - wl))
    return vis


@triton.jit
def _ranges(a0, BA: tl.constexpr, n_a, n_b, lo_off, hi_off, BB: tl.constexpr):
    """For a block of BA rows starting at a0 (queries, or keys read as the transposed problem)
    whose element a sees the b with a + lo_off <= b <= a + hi_off and b < n_b: the b-block
    starts (multiples of BB) to visit, [lo, hi), and within them [r1, r2), the blocks where
    every pair is visible (no mask, no tail); the blocks before r1 and from r2 on run masked.
    Blocks no element can see are left out. n_a: the rows that exist (a block holding a >= n_a
    runs masked throughout). An unbounded side (an offset beyond -n_a - n_b or n_a + n_b) visits
    every block; the few it runs masked compute the same values."""
    hi = tl.minimum(tl.maximum(a0 + BA + hi_off, 0), n_b)
    e = tl.minimum(tl.maximum(a0 + hi_off + 1, 0), n_b)
    e = tl.where(a0 + BA <= n_a, e, 0)
    lo = tl.maximum(a0 + lo_off, 0)
    s = tl.maximum(a0 + BA - 1 + lo_off, 0)
    lo = (lo // BB) * BB
    s = tl.maximum(((s + BB - 1) // BB) * BB, lo)
    r1 = tl.minimum(s, hi)
    r2 = tl.maximum(r1, (e // BB) * BB)
    return lo, r1, r2, hi


@triton.jit
def _dkdv_step(dk, dv, k, v, qT, do, lse, delta, rows, cols, sc, cm, Lq, Lk, off, wl, wr,
               F64: tl.constexpr, SOFTCAP: tl.constexpr, MASKED: tl.constexpr, DP_FIRST: tl.constexpr):
    """One query block's share of dk and dv (a key block held, [BLOCK_N, BLOCK_M] tiles). DP_FIRST:
    dP^T's matmul issued right after S^T's, before the exponentials (the same values, bitwise;
    kernels/tuning.py, ATTN_BWD_DP_FIRST)."""
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    sT = tl.dot(k, qT, input_precision="ieee", out_dtype=CT)
    if DP_FIRST:
        dpT = tl.dot(v, tl.trans(do), input_precision="ieee", out_dtype=CT)
    sT, th = _scores(sT, sc, cm, SOFTCAP)
    pT = _exp(sT - lse[None, :], F64)
    if MASKED:
        pT = tl.where(tl.trans(_visible(rows, cols, Lq, Lk, off, wl, wr)), pT, 0.0)
    dv = tl.dot(pT.to(do.dtype), do, dv, input_precision="ieee", out_dtype=CT)
    if not DP_FIRST:
        dpT = tl.dot(v, tl.trans(do), input_precision="ieee", out_dtype=CT)
    dsT = pT * (dpT - delta[None, :])
    if SOFTCAP:
        dsT = dsT * (1 - th * th)
    if MASKED:
        dsT = tl.where(tl.trans(_visible(rows, cols, Lq, Lk, off, wl, wr)), dsT, 0.0)
    dk = tl.dot(dsT.to(qT.dtype), tl.trans(qT), dk, input_precision="ieee", out_dtype=CT)
    return dk, dv


@triton.jit
def _dq_step(dq, q, do, kT, vT, lse, delta, rows, cols, sc, cm, Lq, Lk, off, wl, wr,
             F64: tl.constexpr, SOFTCAP: tl.constexpr, MASKED: tl.constexpr):
    """One key block's share of dq (a query block held, [BLOCK_M, BLOCK_N] tiles)."""
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    s = tl.dot(q, kT, input_precision="ieee", out_dtype=CT)
    s, th = _scores(s, sc, cm, SOFTCAP)
    p = _exp(s - lse[:, None], F64)
    if MASKED:
        p = tl.where(_visible(rows, cols, Lq, Lk, off, wl, wr), p, 0.0)
    dp = tl.dot(do, vT, input_precision="ieee", out_dtype=CT)
    ds = p * (dp - delta[:, None])
    if SOFTCAP:
        ds = ds * (1 - th * th)
    if MASKED:
        ds = tl.where(_visible(rows, cols, Lq, Lk, off, wl, wr), ds, 0.0)
    dq = tl.dot(ds.to(kT.dtype), tl.trans(kT), dq, input_precision="ieee", out_dtype=CT)
    return dq


# The loops and their loads live in the kernels' bodies: Triton (3.9, sm_90) drops the
# tl.multiple_of / tl.max_contiguous hints made inside a called @triton.jit function, and without
# them every load is a scalar 2-byte load; the arithmetic of a backward block is in the _step
# helpers. The forward runs one loop, a block masked or not by a uniform branch on its position
# ([r1, r2) unmasked, _ranges). The backward kernels run two: the blocks every pair of which is
# visible ([r1, r2): no mask code, unmasked loads), then the blocks on a mask's edge or a tail
# (before r1, from r2 on) with the masks, MASKED a constexpr of the step. There the branch cost
# the pipelined dots their overlap (bf16, L 4096, the same launch shapes: the one-loop backward
# 0.93-0.96 of the two loops, and the two loops took larger shapes that the branch had made slow,
# docs/results.md); in the forward two loops read 0.97-1.03 of one. The dk/dv kernel's edge loop
# is not pipelined (num_stages=1; it visits one or two blocks per program under a causal mask):
# pipelined, its buffers cost the main loop 3-16 % (32 x 128, D 64 and 128).


# ----------------------------------------------------------------------------------------------
# forward
# ----------------------------------------------------------------------------------------------
@triton.jit(do_not_specialize=_FWD_INTS, do_not_specialize_on_alignment=_FWD_INTS + _FWD_PTRS)
def _attn_fwd_kernel(
    Q, K, V, O, LSE,
    sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sob, soh, som, sod,
    Hq, G, Lq, Lk, D, Dv, off, wl, wr,
    sc0, sc1, sc2, cm0, cm1, cm2,
    F64: tl.constexpr, SOFTCAP: tl.constexpr, FULL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
):
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    n_mb = tl.cdiv(Lq, BLOCK_M)
    pid = tl.program_id(0)
    # the last query blocks first: under a causal mask they see the most keys
    pid_m = n_mb - 1 - pid % n_mb
    bh = pid // n_mb
    b = (bh // Hq).to(tl.int64)
    h = bh % Hq
    hk = (h // G).to(tl.int64)
    h = h.to(tl.int64)
    m0 = pid_m * BLOCK_M
    rows = m0 + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    sc = _join(sc0, sc1, sc2, F64)
    cm = _join(cm0, cm1, cm2, F64)

    q_ptrs = Q + b * sqb + h * sqh + rows.to(tl.int64)[:, None] * sqm + offs_d[None, :].to(tl.int64) * sqd
    if FULL:
        q_ptrs = tl.max_contiguous(tl.multiple_of(q_ptrs, [1, 16]), [1, 16])
    qmask = rows[:, None] < Lq
    if not FULL:
        qmask = qmask & (offs_d[None, :] < D)
    q = tl.load(q_ptrs, mask=qmask, other=0.0)

    acc = tl.zeros([BLOCK_M, BLOCK_DV], CT)
    l_i = tl.zeros([BLOCK_M], CT)
    m_i = tl.full([BLOCK_M], float("-inf"), CT)
    lo, r1, r2, hi = _ranges(m0, BLOCK_M, Lq, Lk, off - wl, off + wr, BLOCK_N)
    kp = K + b * skb + hk * skh + (lo + offs_n).to(tl.int64)[None, :] * skn + offs_d[:, None].to(tl.int64) * skd
    vp = V + b * svb + hk * svh + (lo + offs_n).to(tl.int64)[:, None] * svn + offs_dv[None, :].to(tl.int64) * svd
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        kph = kp
        vph = vp
        if FULL:
            kph = tl.max_contiguous(tl.multiple_of(kp, [16, 1]), [16, 1])
            vph = tl.max_contiguous(tl.multiple_of(vp, [1, 16]), [1, 16])
        kmask = cols[None, :] < Lk
        vmask = cols[:, None] < Lk
        if not FULL:
            kmask = kmask & (offs_d[:, None] < D)
            vmask = vmask & (offs_dv[None, :] < Dv)
        kT = tl.load(kph, mask=kmask, other=0.0)
        v = tl.load(vph, mask=vmask, other=0.0)
        s = tl.dot(q, kT, input_precision="ieee", out_dtype=CT)
        s, th = _scores(s, sc, cm, SOFTCAP)
        if (start_n < r1) | (start_n >= r2):
            s = tl.where(_visible(rows, cols, Lq, Lk, off, wl, wr), s, float("-inf"))
        m_new = tl.maximum(m_i, rowmax(s), propagate_nan=tl.PropagateNan.ALL)
        # a row that has seen only -inf so far subtracts 0: exp(-inf - 0) = 0, never -inf - -inf
        m_s = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = _exp(s - m_s[:, None], F64)
        alpha = _exp(m_i - m_s, F64)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision="ieee", out_dtype=CT)
        m_i = m_new
        kp += tl.cast(skn, tl.int64) * BLOCK_N
        vp += tl.cast(svn, tl.int64) * BLOCK_N

    # m_i is -inf (no visible key: o = 0, lse = -inf), NaN (a NaN score), +inf (o NaN, lse +inf),
    # or finite, where l_i >= 1 (the maximum's own term)
    fin = (m_i > float("-inf")) & (m_i < float("inf"))
    l_s = tl.where(fin, l_i, 1.0)
    if F64:
        lse = m_i + tl.log(l_s)
    else:
        lse = m_i + tl.log2(l_s) * _LN2
    lse = tl.where(fin, lse, m_i)
    o = acc / l_s[:, None]
    rmask = rows < Lq
    tl.store(LSE + bh.to(tl.int64) * Lq + rows, lse, mask=rmask)
    o_ptrs = O + b * sob + h * soh + rows.to(tl.int64)[:, None] * som + offs_dv[None, :].to(tl.int64) * sod
    if FULL:
        o_ptrs = tl.max_contiguous(tl.multiple_of(o_ptrs, [1, 16]), [1, 16])
    omask = rmask[:, None]
    if not FULL:
        omask = omask & (offs_dv[None, :] < Dv)
    tl.store(o_ptrs, to_out(o, O.dtype.element_ty), mask=omask)


# ----------------------------------------------------------------------------------------------
# backward
# ----------------------------------------------------------------------------------------------
@triton.jit
def _row_lse(LSE_h, rows, Lq):
    """The rows' lse as the backward uses it: -inf (a row that sees no key, or only -inf scores)
    becomes +inf, so exp(s - lse) = 0; +inf (a +inf score) becomes NaN, so the row's P is NaN,
    as the definition's."""
    lse = tl.load(LSE_h + rows, mask=rows < Lq, other=0.0)
    return tl.where(lse == float("-inf"), float("inf"), tl.where(lse == float("inf"), float("nan"), lse))


@triton.jit
def _row_stats(LSEB_h, DELTA_h, rows, Lq):
    """The rows' lse (as _row_lse gives it) and delta, both written by the dq kernel, where rows
    past Lq may occur (the dk/dv kernel's edge blocks)."""
    return tl.load(LSEB_h + rows, mask=rows < Lq, other=0.0), tl.load(DELTA_h + rows, mask=rows < Lq, other=0.0)


@triton.jit(do_not_specialize=_BWD_INTS, do_not_specialize_on_alignment=_BWD_INTS + _BWD_PTRS)
def _attn_bwd_dkdv_kernel(
    Q, K, V, DO, LSEB, DELTA, GA, GB,
    sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
    sdb, sdh, sdm, sdd, sgb, sgh, sgn, sgd, sub, suh, sun, sud,
    Hq, Hkv, G, Lq, Lk, D, Dv, off, wl, wr,
    sc0, sc1, sc2, cm0, cm1, cm2, gs0, gs1, gs2, Lqp,
    F64: tl.constexpr, SOFTCAP: tl.constexpr, FULL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    DP_FIRST: tl.constexpr, OFF32: tl.constexpr,
):
    """dk (GA) and dv (GB) of BLOCK_N keys of one key/value head, summed over its query heads;
    LSEB and DELTA: the rows' lse (as _row_lse gives it) and delta from the dq kernel, a head's
    rows Lqp apart.
    OFF32: the query loops carry int32 offset tiles from the head's base instead of 64-bit pointer
    tiles, half the registers (off32: where q's and do's offsets within a head fit in int32)."""
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    IT: tl.constexpr = tl.int32 if OFF32 else tl.int64
    n_nb = tl.cdiv(Lk, BLOCK_N)
    pid = tl.program_id(0)
    pid_n = pid % n_nb
    bhk = pid // n_nb
    b = (bhk // Hkv).to(tl.int64)
    hk = (bhk % Hkv).to(tl.int64)
    n0 = pid_n * BLOCK_N
    cols = n0 + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    sc = _join(sc0, sc1, sc2, F64)
    cm = _join(cm0, cm1, cm2, F64)
    gs = _join(gs0, gs1, gs2, F64)

    kmask = cols[:, None] < Lk
    vmask = kmask
    if not FULL:
        kmask = kmask & (offs_d[None, :] < D)
        vmask = vmask & (offs_dv[None, :] < Dv)
    k_ptrs = K + b * skb + hk * skh + cols.to(tl.int64)[:, None] * skn + offs_d[None, :].to(tl.int64) * skd
    v_ptrs = V + b * svb + hk * svh + cols.to(tl.int64)[:, None] * svn + offs_dv[None, :].to(tl.int64) * svd
    if FULL:
        k_ptrs = tl.max_contiguous(tl.multiple_of(k_ptrs, [1, 16]), [1, 16])
        v_ptrs = tl.max_contiguous(tl.multiple_of(v_ptrs, [1, 16]), [1, 16])
    k = tl.load(k_ptrs, mask=kmask, other=0.0)
    v = tl.load(v_ptrs, mask=vmask, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], CT)
    dv = tl.zeros([BLOCK_N, BLOCK_DV], CT)
    # the queries that see key j: j - off - wr <= i <= j - off + wl (the transposed problem)
    lo, r1, r2, hi = _ranges(n0, BLOCK_N, Lk, Lq, -off - wr, wl - off, BLOCK_M)
    n1 = tl.cdiv(tl.maximum(r1 - lo, 0), BLOCK_M)
    n_edge = n1 + tl.cdiv(tl.maximum(hi - r2, 0), BLOCK_M)
    for g in range(0, G):
        h = hk * G + g
        Q_h = Q + b * sqb + h * sqh
        DO_h = DO + b * sdb + h * sdh
        LSEB_h = LSEB + (b * Hq + h) * Lqp
        DELTA_h = DELTA + (b * Hq + h) * Lqp
        # the query blocks every pair of which is visible: no mask, no tail
        if OFF32:  # offsets from the head's base
            qp = (r1 + offs_m)[None, :] * sqm + offs_d[:, None] * sqd
            dop = (r1 + offs_m)[:, None] * sdm + offs_dv[None, :] * sdd
        else:  # pointers
            qp = Q_h + (r1 + offs_m).to(tl.int64)[None, :] * sqm + offs_d[:, None].to(tl.int64) * sqd
            dop = DO_h + (r1 + offs_m).to(tl.int64)[:, None] * sdm + offs_dv[None, :].to(tl.int64) * sdd
        for start_m in range(r1, r2, BLOCK_M):
            rows = start_m + offs_m
            qph = Q_h + qp if OFF32 else qp
            doph = DO_h + dop if OFF32 else dop
            if FULL:
                qph = tl.max_contiguous(tl.multiple_of(qph, [16, 1]), [16, 1])
                doph = tl.max_contiguous(tl.multiple_of(doph, [1, 16]), [1, 16])
                qT = tl.load(qph)
                do = tl.load(doph)
            else:
                qT = tl.load(qph, mask=offs_d[:, None] < D, other=0.0)
                do = tl.load(doph, mask=offs_dv[None, :] < Dv, other=0.0)
            # every row exists here, so no mask, and the rows start 16-byte aligned (LSEB's and
            # DELTA's head rows are Lqp, a multiple of 16, apart; start_m a multiple of BLOCK_M), so
            # the loads are vectors: with lse's infinities mapped once by the dq kernel, 273 SASS
            # instructions a step against 363 masked and mapped here (32 x 128, bf16, D 128)
            lp = tl.max_contiguous(tl.multiple_of(LSEB_h + rows, 16), BLOCK_M)
            dp = tl.max_contiguous(tl.multiple_of(DELTA_h + rows, 16), BLOCK_M)
            lse = tl.load(lp)
            delta = tl.load(dp)
            dk, dv = _dkdv_step(dk, dv, k, v, qT, do, lse, delta, rows, cols, sc, cm, Lq, Lk, off, wl, wr,
                                F64, SOFTCAP, False, DP_FIRST)
            qp += tl.cast(sqm, IT) * BLOCK_M
            dop += tl.cast(sdm, IT) * BLOCK_M
        # the blocks on a mask's edge or past the end of the queries: before r1, from r2 on
        for i in tl.range(0, n_edge, num_stages=1):
            rows = tl.where(i < n1, lo + i * BLOCK_M, r2 + (i - n1) * BLOCK_M) + offs_m
            if OFF32:
                qph = Q_h + (rows[None, :] * sqm + offs_d[:, None] * sqd)
                doph = DO_h + (rows[:, None] * sdm + offs_dv[None, :] * sdd)
            else:
                qph = Q_h + rows.to(tl.int64)[None, :] * sqm + offs_d[:, None].to(tl.int64) * sqd
                doph = DO_h + rows.to(tl.int64)[:, None] * sdm + offs_dv[None, :].to(tl.int64) * sdd
            if FULL:
                qph = tl.max_contiguous(tl.multiple_of(qph, [16, 1]), [16, 1])
                doph = tl.max_contiguous(tl.multiple_of(doph, [1, 16]), [1, 16])
            qmask = rows[None, :] < Lq
            dmask = rows[:, None] < Lq
            if not FULL:
                qmask = qmask & (offs_d[:, None] < D)
                dmask = dmask & (offs_dv[None, :] < Dv)
            qT = tl.load(qph, mask=qmask, other=0.0)
            do = tl.load(doph, mask=dmask, other=0.0)
            lse, delta = _row_stats(LSEB_h, DELTA_h, rows, Lq)
            dk, dv = _dkdv_step(dk, dv, k, v, qT, do, lse, delta, rows, cols, sc, cm, Lq, Lk, off, wl, wr,
                                F64, SOFTCAP, True, DP_FIRST)
    dk = dk * gs
    dk_ptrs = GA + b * sgb + hk * sgh + cols.to(tl.int64)[:, None] * sgn + offs_d[None, :].to(tl.int64) * sgd
    dv_ptrs = GB + b * sub + hk * suh + cols.to(tl.int64)[:, None] * sun + offs_dv[None, :].to(tl.int64) * sud
    if FULL:
        dk_ptrs = tl.max_contiguous(tl.multiple_of(dk_ptrs, [1, 16]), [1, 16])
        dv_ptrs = tl.max_contiguous(tl.multiple_of(dv_ptrs, [1, 16]), [1, 16])
    tl.store(dk_ptrs, to_out(dk, GA.dtype.element_ty), mask=kmask)
    tl.store(dv_ptrs, to_out(dv, GB.dtype.element_ty), mask=vmask)


@triton.jit(do_not_specialize=_DQ_INTS, do_not_specialize_on_alignment=_DQ_INTS + _DQ_PTRS)
def _attn_bwd_dq_kernel(
    Q, K, V, DO, LSE, DELTA, LSEB, GA, O, DLSE,
    sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
    sdb, sdh, sdm, sdd, sgb, sgh, sgn, sgd, sob, soh, som, sod,
    Hq, Hkv, G, Lq, Lk, D, Dv, off, wl, wr,
    sc0, sc1, sc2, cm0, cm1, cm2, gs0, gs1, gs2, Lqp,
    F64: tl.constexpr, SOFTCAP: tl.constexpr, FULL: tl.constexpr, HAS_DLSE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
):
    """dq (GA) of BLOCK_M queries of one head, and first their delta = rowsum(o do) - dlse
    (DELTA) and lse as _row_lse gives it (LSEB), a head's rows Lqp apart, for the dk/dv kernel
    launched after this one: it loads them once per query block of every key block, so the
    mapping of lse's infinities is done here, once per row."""
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    n_mb = tl.cdiv(Lq, BLOCK_M)
    pid = tl.program_id(0)
    pid_m = n_mb - 1 - pid % n_mb
    bh = pid // n_mb
    b = (bh // Hq).to(tl.int64)
    h = bh % Hq
    hk = (h // G).to(tl.int64)
    h = h.to(tl.int64)
    m0 = pid_m * BLOCK_M
    rows = m0 + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    sc = _join(sc0, sc1, sc2, F64)
    cm = _join(cm0, cm1, cm2, F64)
    gs = _join(gs0, gs1, gs2, F64)

    rmask = rows[:, None] < Lq
    qmask = rmask
    dmask = rmask
    if not FULL:
        qmask = qmask & (offs_d[None, :] < D)
        dmask = dmask & (offs_dv[None, :] < Dv)
    q_ptrs = Q + b * sqb + h * sqh + rows.to(tl.int64)[:, None] * sqm + offs_d[None, :].to(tl.int64) * sqd
    do_ptrs = DO + b * sdb + h * sdh + rows.to(tl.int64)[:, None] * sdm + offs_dv[None, :].to(tl.int64) * sdd
    o_ptrs = O + b * sob + h * soh + rows.to(tl.int64)[:, None] * som + offs_dv[None, :].to(tl.int64) * sod
    if FULL:
        q_ptrs = tl.max_contiguous(tl.multiple_of(q_ptrs, [1, 16]), [1, 16])
        do_ptrs = tl.max_contiguous(tl.multiple_of(do_ptrs, [1, 16]), [1, 16])
        o_ptrs = tl.max_contiguous(tl.multiple_of(o_ptrs, [1, 16]), [1, 16])
    q = tl.load(q_ptrs, mask=qmask, other=0.0)
    do = tl.load(do_ptrs, mask=dmask, other=0.0)
    o = tl.load(o_ptrs, mask=dmask, other=0.0)
    # delta here, not in a pass of its own: its rows are this program's, o one more tile to read
    delta = tl.sum(o.to(CT) * do.to(CT), 1)
    rrow = bh.to(tl.int64) * Lq + rows
    if HAS_DLSE:
        delta -= tl.load(DLSE + rrow, mask=rows < Lq, other=0.0).to(CT)
    prow = bh.to(tl.int64) * Lqp + rows
    tl.store(DELTA + prow, delta, mask=rows < Lq)
    lse = _row_lse(LSE + bh.to(tl.int64) * Lq, rows, Lq)
    tl.store(LSEB + prow, lse, mask=rows < Lq)
    dq = tl.zeros([BLOCK_M, BLOCK_D], CT)
    lo, r1, r2, hi = _ranges(m0, BLOCK_M, Lq, Lk, off - wl, off + wr, BLOCK_N)
    K_h = K + b * skb + hk * skh
    V_h = V + b * svb + hk * svh
    # the key blocks every pair of which is visible: no mask, no tail
    kp = K_h + (r1 + offs_n).to(tl.int64)[None, :] * skn + offs_d[:, None].to(tl.int64) * skd
    vp = V_h + (r1 + offs_n).to(tl.int64)[None, :] * svn + offs_dv[:, None].to(tl.int64) * svd
    for start_n in range(r1, r2, BLOCK_N):
        kph = kp
        vph = vp
        if FULL:
            kph = tl.max_contiguous(tl.multiple_of(kp, [16, 1]), [16, 1])
            vph = tl.max_contiguous(tl.multiple_of(vp, [16, 1]), [16, 1])
            kT = tl.load(kph)
            vT = tl.load(vph)
        else:
            kT = tl.load(kph, mask=offs_d[:, None] < D, other=0.0)
            vT = tl.load(vph, mask=offs_dv[:, None] < Dv, other=0.0)
        dq = _dq_step(dq, q, do, kT, vT, lse, delta, rows, start_n + offs_n, sc, cm, Lq, Lk, off, wl, wr,
                      F64, SOFTCAP, False)
        kp += tl.cast(skn, tl.int64) * BLOCK_N
        vp += tl.cast(svn, tl.int64) * BLOCK_N
    # the blocks on a mask's edge or past the end of the keys: before r1, from r2 on
    n1 = tl.cdiv(tl.maximum(r1 - lo, 0), BLOCK_N)
    for i in range(0, n1 + tl.cdiv(tl.maximum(hi - r2, 0), BLOCK_N)):
        cols = tl.where(i < n1, lo + i * BLOCK_N, r2 + (i - n1) * BLOCK_N) + offs_n
        kph = K_h + cols.to(tl.int64)[None, :] * skn + offs_d[:, None].to(tl.int64) * skd
        vph = V_h + cols.to(tl.int64)[None, :] * svn + offs_dv[:, None].to(tl.int64) * svd
        if FULL:
            kph = tl.max_contiguous(tl.multiple_of(kph, [16, 1]), [16, 1])
            vph = tl.max_contiguous(tl.multiple_of(vph, [16, 1]), [16, 1])
        kmask = cols[None, :] < Lk
        vmask = kmask
        if not FULL:
            kmask = kmask & (offs_d[:, None] < D)
            vmask = vmask & (offs_dv[:, None] < Dv)
        kT = tl.load(kph, mask=kmask, other=0.0)
        vT = tl.load(vph, mask=vmask, other=0.0)
        dq = _dq_step(dq, q, do, kT, vT, lse, delta, rows, cols, sc, cm, Lq, Lk, off, wl, wr,
                      F64, SOFTCAP, True)
    dq = dq * gs
    dq_ptrs = GA + b * sgb + h * sgh + rows.to(tl.int64)[:, None] * sgn + offs_d[None, :].to(tl.int64) * sgd
    if FULL:
        dq_ptrs = tl.max_contiguous(tl.multiple_of(dq_ptrs, [1, 16]), [1, 16])
    tl.store(dq_ptrs, to_out(dq, GA.dtype.element_ty), mask=qmask)



JIT_KERNELS = L.register_jit(_attn_fwd_kernel, _attn_bwd_dkdv_kernel, _attn_bwd_dq_kernel)


# ----------------------------------------------------------------------------------------------
# host: validation, launch configuration, launches
# ----------------------------------------------------------------------------------------------
def _lse_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _real(x) -> bool:
    return not isinstance(x, bool) and isinstance(x, (int, float))


def check_options(op: str, D: int, causal, scale, window, softcap):
    """(scale, left, right, softcap) from the options: scale a finite float (1 / sqrt(D) for
    None), left / right None (unbounded) or an int >= 0 (a window side given as -1 or None is
    unbounded; causal caps right at 0), softcap None or a float > 0 (0 or None: none). Raises
    TypeError / ValueError naming the option."""
    if not isinstance(causal, bool):
        raise TypeError(f"{op}: causal must be a bool, got {type(causal).__name__}")
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    elif not _real(scale):
        raise TypeError(f"{op}: scale must be a float or None, got {type(scale).__name__}")
    elif not (math.isfinite(scale) and abs(scale) < 2.0**127):
        raise ValueError(f"{op}: scale must be finite and below 2**127 in magnitude, got {scale!r}")
    left = right = None
    if window is not None:
        if not isinstance(window, (tuple, list)) or len(window) != 2:
            raise TypeError(f"{op}: window must be None or a pair (left, right), got {window!r}")
        sides = []
        for name, w in zip(("left", "right"), window):
            if w is not None and (isinstance(w, bool) or not isinstance(w, int)):
                raise TypeError(f"{op}: window {name} must be an int >= -1 or None, got {type(w).__name__}")
            if w is not None and w < -1:
                raise ValueError(f"{op}: window {name} must be >= 0, or -1 / None for unbounded, got {w}")
            sides.append(None if w is None or w == -1 else w)
        left, right = sides
    if causal:
        right = 0 if right is None else min(right, 0)
    if softcap is not None:
        if not _real(softcap):
            raise TypeError(f"{op}: softcap must be a float or None, got {type(softcap).__name__}")
        if not (math.isfinite(softcap) and 0 <= softcap < 2.0**126):
            raise ValueError(f"{op}: softcap must be a finite float >= 0 (0 or None: no softcap), got {softcap!r}")
        softcap = float(softcap) or None
    return float(scale), left, right, softcap


def check_qkv(op: str, q, k, v) -> None:
    """q (B, Hq, Lq, D), k (B, Hkv, Lk, D), v (B, Hkv, Lk, Dv) of one float dtype and device, Hq a
    multiple of Hkv, 1 <= D, Dv <= 256."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        L.check_tensor(name, t, op)
        if t.ndim != 4:
            raise ValueError(f"{op}: {name} must be 4-d (B, H, L, D), got shape {tuple(t.shape)}")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise TypeError(f"{op}: q and {name} must have the same dtype, got {q.dtype} and {t.dtype}")
        if t.device != q.device:
            raise ValueError(f"{op}: q and {name} must be on the same device, got {q.device} and {t.device}")
    B, Hq, Lq, D = q.shape
    if k.shape[0] != B or v.shape[0] != B:
        raise ValueError(f"{op}: q, k and v must have the same batch size, got {B}, {k.shape[0]} and {v.shape[0]}")
    if k.shape[3] != D:
        raise ValueError(f"{op}: k's head dimension must be q's ({D}), got k of shape {tuple(k.shape)}")
    if tuple(v.shape[1:3]) != tuple(k.shape[1:3]):
        raise ValueError(f"{op}: v must have k's heads and length {tuple(k.shape[1:3])}, got v of shape {tuple(v.shape)}")
    Hkv = k.shape[1]
    if Hkv < 1 or Hq % Hkv:
        raise ValueError(f"{op}: q's heads ({Hq}) must be a multiple of k's and v's heads ({Hkv}, at least 1)")
    for name, n in (("D (q's and k's last axis)", D), ("Dv (v's last axis)", v.shape[3])):
        if not 1 <= n <= MAX_HEAD_DIM:
            raise ValueError(f"{op}: head dimension {name} must be 1 ... {MAX_HEAD_DIM}, got {n}")


def _table(dtype, fwd: bool):
    if dtype == torch.float64:
        return T.ATTN_FWD_64 if fwd else T.ATTN_BWD_64
    if dtype == torch.float32:
        return T.ATTN_FWD_32 if fwd else T.ATTN_BWD_32
    return T.ATTN_FWD_16 if fwd else T.ATTN_BWD_16


def _padded(n: int) -> int:
    return max(16, triton.next_power_of_2(n))


def _head_block(D: int, Dv: int) -> int:
    """BLOCK_D = BLOCK_DV: one block for both head dimensions, the larger padded. Where D != Dv
    the smaller side computes on masked zeros (a rare shape: the kernel is then FULL = False
    anyway unless both fill their blocks), and the (BLOCK_D, BLOCK_DV) pairs no longer
    multiply the compiled variants (5 block sizes: 5 pairs, not 25)."""
    return max(_padded(D), _padded(Dv))


def _table_block(D: int, Dv: int) -> int:
    """The head-dimension block the launch tables (kernels/tuning.py) are keyed by: _head_block's,
    at least 64 (smaller heads take the 64 row)."""
    return max(_head_block(D, Dv), 64)


def _launch_shape(name: str, n: int):
    """The override `name` (ATTN_KERNELS_FWD / _BWD) as n positive integers, or None where unset."""
    env = L.knob(name)
    if not env:
        return None
    try:
        cfg = tuple(int(x) for x in env.split("/"))
    except ValueError:
        cfg = ()
    if len(cfg) != n or min(cfg) < 1:
        raise ValueError(f"{name}: expected {n} positive integers joined by '/', got {env!r}")
    return cfg


def fwd_config(dtype: torch.dtype, D: int, Dv: int) -> tuple:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) of the forward (kernels/tuning.py;
    ATTN_KERNELS_FWD=BM/BN/W/S overrides)."""
    env = _launch_shape("ATTN_KERNELS_FWD", 4)
    if env:
        return env
    if L.interpreting():
        return T.ATTN_FWD_INTERPRETER
    bd = _table_block(D, Dv)
    return _table(dtype, True)[bd]


def bwd_config(dtype: torch.dtype, D: int, Dv: int, softcap: bool = False, Lq: int = 0,
               causal: bool = False) -> tuple:
    """(BLOCK_M1, BLOCK_N1, num_warps1, num_stages1, BLOCK_M2, BLOCK_N2, num_warps2, num_stages2)
    of the backward over Lq queries, causal (no query sees a key past its diagonal) or not: the
    dk/dv kernel's query and key blocks and launch shape, then the dq kernel's (kernels/tuning.py:
    ATTN_BWD_16_SOFTCAP with a 16-bit softcap, ATTN_BWD_16_LONG from ATTN_BWD_LONG_FROM queries,
    ATTN_BWD_16_LONG_CAUSAL there when causal; ATTN_KERNELS_BWD overrides)."""
    env = _launch_shape("ATTN_KERNELS_BWD", 8)
    if env:
        return env
    if L.interpreting():
        return T.ATTN_BWD_INTERPRETER
    bd = _table_block(D, Dv)
    if softcap and dtype in (torch.bfloat16, torch.float16) and bd in T.ATTN_BWD_16_SOFTCAP:
        return T.ATTN_BWD_16_SOFTCAP[bd]
    if bwd_long(dtype, D, Dv, softcap, Lq):
        return T.ATTN_BWD_16_LONG_CAUSAL.get(bd, T.ATTN_BWD_16_LONG[bd]) if causal else T.ATTN_BWD_16_LONG[bd]
    return _table(dtype, False)[bd]


def bwd_long(dtype: torch.dtype, D: int, Dv: int, softcap: bool, Lq: int) -> bool:
    """Whether the backward takes its long-sequence launch (kernels/tuning.py, ATTN_BWD_16_LONG):
    16-bit, no softcap, at least ATTN_BWD_LONG_FROM queries, a head-dimension block listed there,
    and no ATTN_KERNELS_BWD override (nor the interpreter's launch)."""
    return (dtype in (torch.bfloat16, torch.float16) and not softcap and Lq >= T.ATTN_BWD_LONG_FROM
            and _table_block(D, Dv) in T.ATTN_BWD_16_LONG and not L.interpreting()
            and not L.knob("ATTN_KERNELS_BWD"))


def _listed(name: str, dtype: torch.dtype, bd: int, table) -> bool:
    """Whether the head-dimension block bd is listed: 16-bit blocks in the tuning set `table`, or
    the override `name`'s blocks (comma-separated, or empty for none), every dtype."""
    env = L.knob(name)
    if env is not None:
        try:
            blocks = {int(x) for x in env.split(",") if x.strip()}
        except ValueError:
            raise ValueError(f"{name}: expected head-dimension blocks joined by ',' (or nothing), "
                             f"got {env!r}") from None
        return bd in blocks
    return dtype in (torch.bfloat16, torch.float16) and bd in table


def dp_first(dtype: torch.dtype, bd: int) -> bool:
    """The dk/dv kernel's DP_FIRST for a head-dimension block bd (kernels/tuning.py,
    ATTN_BWD_DP_FIRST; ATTN_KERNELS_BWD_DP_FIRST overrides)."""
    return _listed("ATTN_KERNELS_BWD_DP_FIRST", dtype, bd, T.ATTN_BWD_DP_FIRST)


def block_boundaries(dtype: torch.dtype = torch.bfloat16, head_dim: int = 64) -> list:
    """Sequence lengths (Lq or Lk) where the kernels' block structure changes, forward or
    backward: each block size and its double, and the query count from which the backward takes
    its long-sequence launch (for the strategies to aim at, +-1)."""
    f = fwd_config(dtype, head_dim, head_dim)
    sizes = {f[0], f[1]}
    for softcap, Lq, causal in ((False, 0, False), (True, 0, False), (False, T.ATTN_BWD_LONG_FROM, False),
                                (False, T.ATTN_BWD_LONG_FROM, True)):
        b = bwd_config(dtype, head_dim, head_dim, softcap, Lq, causal)
        sizes |= {b[0], b[1], b[4], b[5]}
    long = {T.ATTN_BWD_LONG_FROM} if bwd_long(dtype, head_dim, head_dim, False, T.ATTN_BWD_LONG_FROM) else set()
    return sorted(sizes | {2 * s for s in sizes} | long)


def _vec(tensors) -> bool:
    """16-byte vectors along the head dimension: every tensor unit-stride there, 16-byte aligned,
    and every other stride (of an axis longer than 1) a multiple of 16 bytes."""
    for t in tensors:
        es = t.element_size()
        if t.stride(-1) != 1 or t.data_ptr() % 16:
            return False
        if any((s * es) % 16 for n, s in zip(t.shape[:-1], t.stride()[:-1]) if n > 1):
            return False
    return True


def _split3(x: float, F64: bool) -> tuple:
    """x as three float32 parts whose float64 sum is x (float arguments reach a kernel as float32);
    only the first matters to a 16/32-bit kernel."""
    hi = float(np.float32(x))
    if not F64:
        return hi, 0.0, 0.0
    mid = float(np.float32(x - hi))
    return hi, mid, float(np.float32(x - hi - mid))


def _factors(dtype, scale, softcap) -> tuple:
    """(sc, cm, gs) as float32 parts: the kernels form scores s sc (or cm tanh(s sc) with softcap)
    and scale the gradients by gs."""
    F64 = dtype == torch.float64
    sc, cm = (scale / softcap, softcap) if softcap else (scale, 0.0)
    return _split3(sc, F64) + _split3(cm, F64) + _split3(scale, F64)


def _mask_args(Lq: int, Lk: int, left, right):
    """(off, wl, wr): bottom-right alignment, and the window sides clamped to Lq + Lk + 1, the
    width of an unbounded side (None): a side that wide masks nothing, and every index sum stays
    in 32 bits. The kernels take no constexpr for the window: windowed or not, causal or not, the
    same compiled kernel (the masks cost two comparisons per element, in the blocks on a mask's
    edge only)."""
    cap = Lq + Lk + 1
    wl = cap if left is None else min(left, cap)
    wr = cap if right is None else min(right, cap)
    return Lk - Lq, wl, wr


def _full(tensors, D: int, Dv: int, bd: int, bdv: int) -> bool:
    """The FULL constexpr: head dimensions that fill their blocks and 16-byte vectors along them
    (_vec). One flag for both: a partial block masks the head dimension with a runtime bound, and
    then no load is vectorized anyway, nor is an unaligned one whose block is full."""
    return bd == D and bdv == Dv and _vec(tensors)


def _offsets32(x, rows: int, block: int) -> bool:
    """Every element offset a kernel forms within one head of x (B, H, L, D) fits in int32: rows
    past the end included (up to L + 2 rows, the masked tail and a pipelined prefetch), and the
    head-dimension block. Strides are non-negative (torch has no negative strides)."""
    return (x.shape[2] + 2 * rows) * x.stride(2) + block * x.stride(3) < 2**31


def off32(q, do, rows: int, bd: int, long: bool = False) -> bool:
    """The dk/dv kernel's OFF32 for its query block of `rows` and head-dimension block bd: a block
    listed (kernels/tuning.py, ATTN_BWD_OFF32, for the long-sequence launch (long) only;
    ATTN_KERNELS_BWD_OFF32 overrides, for every launch) and q's and do's offsets within a head
    fit in int32."""
    return (_listed("ATTN_KERNELS_BWD_OFF32", q.dtype, bd, T.ATTN_BWD_OFF32 if long else ())
            and _offsets32(q, rows, bd) and _offsets32(do, rows, bd))


_LAUNCHERS: dict = {}


def _launch(fn, grid, args, constexprs, num_warps: int, num_stages: int) -> None:
    key = (fn, num_stages)
    launcher = _LAUNCHERS.get(key)
    if launcher is None:
        launcher = _LAUNCHERS[key] = L.Launcher(fn, num_stages=num_stages)
    launcher(grid, args, constexprs, num_warps)


def _grid(n_blocks: int, heads: int) -> tuple:
    n = n_blocks * heads
    if n >= 2**31:
        raise ValueError(f"attention: {n} programs exceed the grid's 2**31 - 1 (batch x heads x blocks)")
    return (n,)


@L.on_tensor_device
def forward(q, k, v, scale: float, left, right, softcap):
    """(o, lse) for checked arguments (check_qkv, check_options)."""
    B, Hq, Lq, D = q.shape
    Hkv, Lk, Dv = k.shape[1], k.shape[2], v.shape[3]
    o = torch.empty((B, Hq, Lq, Dv), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, Hq, Lq), dtype=_lse_dtype(q.dtype), device=q.device)
    if o.numel() == 0:
        return o, lse
    if Lk == 0:  # no key: every row is empty
        return o.zero_(), lse.fill_(float("-inf"))
    F64 = q.dtype == torch.float64
    bm, bn, warps, stages = fwd_config(q.dtype, D, Dv)
    bd = bdv = _head_block(D, Dv)
    off, wl, wr = _mask_args(Lq, Lk, left, right)
    full = _full((q, k, v, o), D, Dv, bd, bdv)
    L.note_variant("attention_fwd", dtype=str(q.dtype), BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=bd, BLOCK_DV=bdv, FULL=full,
                   SOFTCAP=bool(softcap))
    args = (q, k, v, o, lse, *q.stride(), *k.stride(), *v.stride(), *o.stride(),
            Hq, Hq // Hkv, Lq, Lk, D, Dv, off, wl, wr, *_factors(q.dtype, scale, softcap)[:6])
    _launch(_attn_fwd_kernel, _grid(triton.cdiv(Lq, bm), B * Hq), args,
            dict(F64=F64, SOFTCAP=bool(softcap), FULL=full, BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=bd, BLOCK_DV=bdv), warps, stages)
    return o, lse


@L.on_tensor_device
def backward(q, k, v, o, lse, do, dlse, scale: float, left, right, softcap):
    """(dq, dk, dv) for checked arguments; do of o's dtype; dlse None or (B, Hq, Lq)."""
    B, Hq, Lq, D = q.shape
    Hkv, Lk, Dv = k.shape[1], k.shape[2], v.shape[3]
    dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    dk = torch.empty(k.shape, dtype=k.dtype, device=q.device)
    dv = torch.empty(v.shape, dtype=v.dtype, device=q.device)
    if dq.numel() == 0 or dk.numel() == 0:  # no query or no key: nothing flows
        return dq.zero_(), dk.zero_(), dv.zero_()
    F64 = q.dtype == torch.float64
    CT = _lse_dtype(q.dtype)
    lse = lse.contiguous()
    lqp = triton.cdiv(Lq, 16) * 16  # padded rows: the dk/dv kernel's 16-byte vector loads
    delta, lseb = torch.empty((2, B, Hq, lqp), dtype=CT, device=q.device)
    has_dlse = dlse is not None
    dl = dlse.to(CT).contiguous() if has_dlse else delta
    bm1, bn1, warps1, stages1, bm2, bn2, warps2, stages2 = bwd_config(q.dtype, D, Dv, bool(softcap), Lq, right == 0)
    bd = bdv = _head_block(D, Dv)
    off, wl, wr = _mask_args(Lq, Lk, left, right)
    full = _full((q, k, v, o, do, dq, dk, dv), D, Dv, bd, bdv)
    first = dp_first(q.dtype, bd)
    o32 = off32(q, do, bm1, bd, bwd_long(q.dtype, D, Dv, bool(softcap), Lq))
    L.note_variant("attention_bwd", dtype=str(q.dtype), BLOCK_M1=bm1, BLOCK_N1=bn1, BLOCK_M2=bm2, BLOCK_N2=bn2,
                   BLOCK_D=bd, BLOCK_DV=bdv, FULL=full, SOFTCAP=bool(softcap), DP_FIRST=first, OFF32=o32)
    common = (*q.stride(), *k.stride(), *v.stride(), *do.stride())
    ints = (Hq, Hkv, Hq // Hkv, Lq, Lk, D, Dv, off, wl, wr, *_factors(q.dtype, scale, softcap))
    const = dict(F64=F64, SOFTCAP=bool(softcap), FULL=full, BLOCK_D=bd, BLOCK_DV=bdv)
    # dq first: it writes the delta and lse the dk/dv kernel reads
    _launch(_attn_bwd_dq_kernel, _grid(triton.cdiv(Lq, bm2), B * Hq),
            (q, k, v, do, lse, delta, lseb, dq, o, dl, *common, *dq.stride(), *o.stride(), *ints, lqp),
            dict(const, HAS_DLSE=has_dlse, BLOCK_M=bm2, BLOCK_N=bn2), warps2, stages2)
    _launch(_attn_bwd_dkdv_kernel, _grid(triton.cdiv(Lk, bn1), B * Hkv),
            (q, k, v, do, lseb, delta, dk, dv, *common, *dk.stride(), *dv.stride(), *ints, lqp),
            dict(const, BLOCK_M=bm1, BLOCK_N=bn1, DP_FIRST=first, OFF32=o32), warps1, stages1)
    return dq, dk, dv


class AttentionFunction(torch.autograd.Function):
    """attention with autograd: the forward kernel, and the backward kernels on the saved q, k,
    v, o and lse (a gradient of lse included). First order only."""

    @staticmethod
    def forward(ctx, q, k, v, scale, left, right, softcap):
        o, lse = forward(q, k, v, scale, left, right, softcap)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.opts = (scale, left, right, softcap)
        ctx.set_materialize_grads(False)
        return o, lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, do, dlse):
        q, k, v, o, lse = ctx.saved_tensors
        if do is None:
            do = torch.zeros_like(o)
        dq, dk, dv = backward(q, k, v, o, lse, do.to(o.dtype), dlse, *ctx.opts)
        return dq, dk, dv, None, None, None, None


def attention(q, k, v, *, causal: bool = False, scale=None, window=None, softcap=None):
    """Scaled dot-product attention (module docstring): returns (o (B, Hq, Lq, Dv) in q's dtype,
    lse (B, Hq, Lq) float32, float64 for float64). Differentiable in q, k and v (o and lse)."""
    check_qkv("attention", q, k, v)
    opts = check_options("attention", q.shape[3], causal, scale, window, softcap)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return AttentionFunction.apply(q, k, v, *opts)
    return forward(q, k, v, *opts)


def attention_backward(q, k, v, o, lse, do, *, causal: bool = False, scale=None, window=None, softcap=None):
    """(dq, dk, dv), the VJP of attention's o with cotangent do, from the forward's o (q's dtype)
    and lse (float32, float64 for float64); do of o's shape and dtype. Fresh contiguous outputs
    in q's, k's and v's shapes and dtype."""
    op = "attention_backward"
    check_qkv(op, q, k, v)
    opts = check_options(op, q.shape[3], causal, scale, window, softcap)
    B, Hq, Lq, _ = q.shape
    want = (B, Hq, Lq, v.shape[3])
    for name, t in (("o", o), ("do", do)):
        L.check_tensor(name, t, op)
        if tuple(t.shape) != want:
            raise ValueError(f"{op}: {name} must have shape {want} (B, Hq, Lq, Dv), got {tuple(t.shape)}")
        if t.dtype != q.dtype:
            raise TypeError(f"{op}: {name} must have q's dtype {q.dtype}, got {t.dtype}")
        if t.device != q.device:
            raise ValueError(f"{op}: q and {name} must be on the same device, got {q.device} and {t.device}")
    if not isinstance(lse, torch.Tensor):
        raise TypeError(f"{op}: lse must be a torch.Tensor, got {type(lse).__name__}")
    if lse.dtype != _lse_dtype(q.dtype):
        raise TypeError(f"{op}: lse.dtype must be {_lse_dtype(q.dtype)} (the forward's for {q.dtype}), got {lse.dtype}")
    if tuple(lse.shape) != (B, Hq, Lq):
        raise ValueError(f"{op}: lse must have shape {(B, Hq, Lq)} (B, Hq, Lq), got {tuple(lse.shape)}")
    if lse.device != q.device:
        raise ValueError(f"{op}: q and lse must be on the same device, got {q.device} and {lse.device}")
    return backward(q.detach(), k.detach(), v.detach(), o.detach(), lse.detach(), do.detach(), None, *opts)
