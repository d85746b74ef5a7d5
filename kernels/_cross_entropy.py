"""Cross-entropy over class logits: forward (per-row loss and logsumexp) and backward.

Semantics are torch's ``F.cross_entropy`` with class-index targets (oracles/semantics.py,
CE_SEMANTICS, lists the edge rows):

    loss_i = (1 - eps) (lse_i - x_i[t_i]) + eps/V * sum_j (lse_i - x_ij)     (eps = label_smoothing)
    dloss/dx_ij = softmax(x_i)_j - (1 - eps) [j = t_i] - eps/V

An ignored row (t_i == ignore_index) has loss 0, does not count in the mean, and gets an exactly
zero gradient (torch gives NaN there when that row holds NaN/inf logits: the one deliberate
difference). ``mean`` over no counted rows is 0/0 = NaN, as in torch.

Options (Options, check_options; off by default, docs/contract.md "Cross-entropy options"):
class weights w (torch's semantics), z-loss z (row loss + z lse^2, liger-kernel's
lse_square_scale), softcap c and logit scale s (the loss sees c tanh(s x / c)). They reach the
kernels as the runtime argument `flags` in uniform branches, never as constexprs, so they add no
compiled variant, and with flags 0 every kernel computes what it computed without them, bitwise.

Layout: logits (..., V) with target (...) (torch's (N, C, d1, ...) class-axis-1 form is not
accepted; move the class axis last). Batch axes are flattened to rows with a view where possible;
the class axis must be unit-stride or is copied. Targets (int32/int64) and ``dloss`` (any float
dtype) are read through their row stride, so strided and stride-0 (``expand``) tensors cost nothing.

Kernels (design for memory bandwidth; model bytes 3 N V s for forward + backward):

* forward: one streaming pass per row over tiles of ``BLOCK`` columns (4096 for 16-bit dtypes on
  the GPU), each held as groups of 16 bytes (8 16-bit logits), one group per thread and vector
  load. Every group keeps its own running max and sum: per tile ``m' = max(m, max_g x)`` (inside
  one thread) and ``s = s * exp(m - m') + sum_g exp(x - m')``, so per element one max, one
  subtraction, one exp and one add, and no cross-thread reduction until the row's end, where
  the groups are merged once (``S = sum_g s_g exp(m_g - M)``). A NaN logit turns its group's
  sum NaN, so no separate flag is carried. The lane-wise sum of ``x / (4 V)`` for smoothing. x[t]
  is one scalar load. SASS (triton 3.6, sm_90): 8.3 instructions per element in the loop, 31
  registers; a tile-wide max (shuffles and three barriers per tile) had 12.9 and 61 and ran at 0.55-0.72
  of copy (the forward reads 2 bytes per element, so it needs twice the elements per clock of a
  read-and-write kernel: it was issue-bound). Writes lse and the loss per row (float32, float64
  for float64 logits).
  Few rows with many columns (fewer rows than ~4 programs per SM): each row is split into
  ``n_chunks`` column ranges, one program each, whose partial (max, sum, sum x / (4 V)) a
  finish kernel merges with the log-sum-exp merge ``S = sum_c s_c exp(m_c - M)``.
* backward: one read of x and one write of dx, given lse:
  ``dx = (exp(x - lse) - eps/V - (1 - eps)[j = t]) * scale`` computed in float32 (float64 for
  float64) and rounded once, so a confident bfloat16 row keeps ``p_t - 1`` (no softmax rounded
  before the one-hot is subtracted). scale is dloss_i (none), dloss (sum) or dloss / count (mean),
  formed in the kernel. Columns are split across programs the same way (no reduction, so any
  split is exact).
* small kernels, one program each: ``target_stats`` (min, max and count of the non-ignored
  targets: the range check, the mean's divisor and the backward's count) and the loss reduction
  (float64 sum of the N row losses, in an order that depends on N alone). A training step of
  the autograd op ("mean") launches four kernels and one copy (stats, forward, reduction, the
  copy of the stats; backward, reusing the forward's stats) where it had about twenty small
  torch launches, each a few microseconds of GPU time but tens of host time
  (benchmarks/ce_parts.py: "gap", "host us").

Out-of-range targets: ``target_stats`` is launched before the forward kernel and copied to
pinned host memory behind an event; the forward kernel and the loss reduction are launched, then
the host waits for that event (not for the forward kernel) and raises a ValueError naming the
first bad target. One extra read of N target integers (4-8 bytes per row against 2 V bytes of
logits) and one wait per call, while the GPU already has the forward queued: a synchronous check
before the launch drained the GPU, which then idled for the whole host path to the launch. An
in-kernel flag would have to be read back after the forward kernel, a longer wait. The kernels
mask the gather, so no index can fault even before the check has answered or when it is
bypassed (e.g. calling the kernels directly).
"""
from __future__ import annotations

import functools
import math
import threading

import torch
import triton
import triton.language as tl

from . import _launch as L
from . import tuning as T
from ._numerics import exp_ct, to_out, widen

REDUCTIONS = ("none", "mean", "sum")
_INT_DTYPES = (torch.int32, torch.int64)


# ----------------------------------------------------------------------------------------------
# kernels
# ----------------------------------------------------------------------------------------------
@triton.jit
def _ce_rows(BLOCK_R: tl.constexpr):
    return tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)


@triton.jit
def _ce_params(eps, inv_v, EPS, F64: tl.constexpr):
    """(label_smoothing, 1/V) in the compute type: float32 arguments, or for float64 read from
    EPS = [eps, 1/V] (Triton passes Python floats as float32)."""
    if F64:
        return tl.load(EPS), tl.load(EPS + 1)
    else:
        return eps, inv_v


# the options' bits in the kernels' runtime argument `flags` (0: every option off), tested in
# uniform branches: each constexpr combination is one more compiled variant. One constexpr, OPTS
# (flags != 0), keeps the option code out of the forward's and backward's tile loops where every
# option is off: tested per tile at run time, it took the H200's bf16 forward + backward from 0.89
# / 0.92 of copy to 0.74 / 0.85 (V = 32000 / 262144; docs/results.md).
XFORM, SOFTCAP, ZLOSS, WEIGHT = 1, 2, 4, 8
_XFORM: tl.constexpr = tl.constexpr(XFORM)
_SOFTCAP: tl.constexpr = tl.constexpr(SOFTCAP)
_ZLOSS: tl.constexpr = tl.constexpr(ZLOSS)
_WEIGHT: tl.constexpr = tl.constexpr(WEIGHT)
_NO_OPTIONS: tl.constexpr = tl.constexpr(0)
# OPT, the options' float64 values (options_tensor): z, c, 1/c, s, sum(w) / V, sum(w), and the
# sum of w[t] over the counted rows (the weighted mean's divisor)
_TWO64: tl.constexpr = tl.constexpr(2.0**64)
_TWO_M64: tl.constexpr = tl.constexpr(2.0**-64)


@triton.jit
def _tanh(u, F64: tl.constexpr):
    """tanh in the compute type, from exp (the interpreter has no libdevice): for |u| >= 0.625,
    1 - 2 / (exp(2|u|) + 1), within a few ulps of the result (>= 0.55), and 1 for large |u|,
    where exp overflows to inf; below, u + u^3 P(u^2) (Cephes' tanhf polynomial for float32, its
    rational P/Q for float64), where 1 - 2 / (...) would lose the relative accuracy of small
    results to cancellation. NaN stays NaN, +-inf gives +-1."""
    a = tl.abs(u)
    big = 1.0 - 2.0 / (exp_ct(a + a, F64) + 1.0)
    z = tl.minimum(a, 0.625) * tl.minimum(a, 0.625)  # (the branch not taken stays finite)
    if F64:
        pz = (-9.64399179425052238628e-1 * z - 9.92877231001918586564e1) * z - 1.61468768441708447952e3
        qz = ((z + 1.12811678491632931402e2) * z + 2.23548839060100448583e3) * z + 4.84406305325125486048e3
        small = a + a * z * (pz / qz)
    else:
        small = ((((-5.70498872745e-3 * z + 2.06390887954e-2) * z - 5.37397155531e-2) * z
                  + 1.33314422036e-1) * z - 3.33332819422e-1) * z * a + a
    r = tl.where(a < 0.625, small, big)
    return tl.where(u < 0.0, -r, r)


@triton.jit
def _opt_scalars(OPT, flags, F64: tl.constexpr):
    """(s, c, 1/c) in the compute type: the logit scale and the softcap (1, 1, 1 where off; OPT
    always holds 8 float64 values, _dummy64 where every option is off)."""
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    ls = tl.where((flags & _XFORM) != 0, tl.load(OPT + 3), 1.0).to(CT)
    cap = (flags & _SOFTCAP) != 0
    c = tl.where(cap, tl.load(OPT + 1), 1.0).to(CT)
    ic = tl.where(cap, tl.load(OPT + 2), 1.0).to(CT)
    return ls, c, ic


@triton.jit
def _xform(x, ls, c, ic, flags, F64: tl.constexpr):
    """The logits the loss sees: c tanh(s x / c), or s x (s = 1 is exact)."""
    x = x * ls
    if (flags & _SOFTCAP) != 0:
        x = c * _tanh(x * ic, F64)
    return x


@triton.jit
def _fwd_opts(x, msk, cmask, cols, W, OPT, flags, SMOOTH: tl.constexpr, F64: tl.constexpr):
    """A forward tile with options: the transformed logits (-inf where masked: a softcap maps
    the -inf of masked lanes to -c) and the smoothing's summands, times the class weights when
    there are weights (0 * -inf is NaN there, as torch forms it). The option values are read
    per tile, inside the branch that OPTS takes, so that the kernel without options keeps
    no more values live across its loop than it did (31 registers in the 16-bit forward on the
    H200, at the limit of 2048 threads per SM)."""
    ls, c, ic = _opt_scalars(OPT, flags, F64)
    y = tl.where(msk, _xform(x, ls, c, ic, flags, F64), float("-inf"))
    ys = tl.where(msk, y, 0.0)
    if SMOOTH:
        if (flags & _WEIGHT) != 0:
            w = widen(tl.load(W + cols, mask=cmask, other=0.0), F64)
            ys = tl.where(msk, ys * w[None, :, :], 0.0)
    return y, ys


@triton.jit
def _ce_finish(X, T, LOSS, LSE, rows, rmask, M, S, SXV4, V, sxr, st, ignore_index, eps,
               SMOOTH: tl.constexpr):
    """_ce_finish_opts with every option off (flags a constexpr 0: the option branches are not
    generated, and LOSS and LSE stand in for the buffers they would read)."""
    _ce_finish_opts(X, T, LOSS, LSE, LOSS, LSE, LOSS, _NO_OPTIONS, rows, rmask, M, S, SXV4, V, sxr, st, ignore_index,
                    eps, SMOOTH, LSE.dtype.element_ty == tl.float64)


@triton.jit
def _ce_finish_opts(X, T, LOSS, LSE, LZ, W, OPT, flags, rows, rmask, M, S, SXV4, V, sxr, st, ignore_index, eps,
                    SMOOTH: tl.constexpr, F64: tl.constexpr):
    """From a row's max M (NaN possibly excluded), sum S of exp(x - M) (NaN when the row holds a
    NaN) and SXV4, the mean of x over 4 (of w x with class weights): store lse (NaN when the row
    holds NaN or +inf, -inf when it holds only -inf) and the loss (the cross-entropy term; with
    z-loss its z lse^2 term goes to LZ). M, S and SXV4 are of the transformed logits."""
    fin = tl.abs(M) < float("inf")
    lse = tl.where(fin, tl.where(fin, M, 0.0) + tl.log(S), M)
    lse = tl.where((S != S) | (M == float("inf")), float("nan"), lse)
    tl.store(LSE + rows, lse, mask=rmask)
    t = tl.load(T + rows * st, mask=rmask, other=0).to(tl.int64)
    ign = t == ignore_index
    ok = rmask & (t >= 0) & (t < V) & ~ign  # the gather can never fault
    # The row loss is formed and stored in float64 (one row's scalar work): lse - x_t reaches
    # 2 finfo(float32).max for logits of +-finfo.max, which a float32 loss would hold as inf,
    # while a mean over several rows is finite (float32 logits 9 x 2 of -max with one row
    # (+max, -max): mean 1.3611e38). float64 logits keep their float64 arithmetic.
    lse_c = lse
    lse = lse.to(tl.float64)
    if flags != 0:
        # the target's logit transformed as the tile loop transformed it
        ls, c, ic = _opt_scalars(OPT, flags, F64)
        xt = tl.load(X + rows * sxr + t, mask=ok, other=0.0)
        xt = _xform(widen(xt, F64), ls, c, ic, flags, F64).to(tl.float64)
    else:
        xt = tl.load(X + rows * sxr + t, mask=ok, other=0.0).to(tl.float64)
    if (flags & _WEIGHT) != 0:
        # torch's weighted cross-entropy: w_t (lse - x_t), and eps / V sum_j w_j (lse - x_j)
        wt = widen(tl.load(W + t, mask=ok, other=0.0), F64).to(tl.float64)
        nll = lse - xt
        nll = tl.where(nll < 0.0, 0.0, nll)  # >= 0 exactly; the weights may be of any sign
        loss = wt * nll
        if SMOOTH:
            # as the unweighted smoothing below, with sum(w) / V in place of 1
            eps_w = (tl.zeros_like(lse_c) + eps).to(tl.float64)
            wbar = tl.load(OPT + 4).to(tl.float64)  # sum(w) / V
            lse4_w = lse * 0.25 * wbar
            sxw4 = SXV4.to(tl.float64)
            smooth_w = 4.0 * (eps_w * lse4_w - eps_w * sxw4)
            smooth_w = tl.where((eps_w == 0.0) & (lse4_w - sxw4 == float("inf")), float("inf"), smooth_w)
            loss = (1.0 - eps_w) * loss + smooth_w
    else:
        if SMOOTH:
            # two non-negative terms, each formed so it overflows only if it exceeds the range itself;
            # (1 - eps) * x_t is 0 * -inf = NaN for eps = 1 and x_t = -inf, as in torch
            # eps as the compute type holds it (the interpreter holds a float32 argument in float64); a
            # name of its own: compiled, both sides of the runtime branch on flags must keep eps a scalar
            eps_r = (tl.zeros_like(lse_c) + eps).to(tl.float64)
            keep = 1.0 - eps_r
            # eps (lse - mean(x)) at a quarter scale: both terms and their difference stay in range
            # for float64 logits (the mean summed unscaled overflowed to -inf by rounding when every
            # logit was -finfo.max: float32, V = 81, eps = 0.1 gave a loss of inf for log 81), and
            # 4 * d overflows only where eps (lse - mean(x)) exceeds the range itself
            lse4 = lse * 0.25
            sxv4 = SXV4.to(tl.float64)
            smooth = 4.0 * (eps_r * lse4 - eps_r * sxv4)
            # a label_smoothing below float32's range reaches a float32 kernel as 0, yet eps > 0
            # times an infinite lse - mean(x) is infinite (0 * inf would be NaN)
            smooth = tl.where((eps_r == 0.0) & (lse4 - sxv4 == float("inf")), float("inf"), smooth)
            loss = (keep * lse - keep * xt) + smooth
        else:
            loss = lse - xt
        # the exact loss is >= 0; rounding (of the mean of x, or an approximate log near S = 1) may
        # leave it a few ulps below: clamp (NaN stays NaN), which can only reduce the error
        loss = tl.where(loss < 0.0, 0.0, loss)
    tl.store(LOSS + rows, tl.where(ign, 0.0, loss), mask=rmask)
    if (flags & _ZLOSS) != 0:
        # z lse^2 formed as (z lse) lse: it overflows only where the term does (z lse^2 with
        # z = 1e-30 and |lse| = 1e30 is 1e30, while lse^2 alone would be 1e60, and in float64
        # an lse beyond 1.4e154 squared overflows)
        z = tl.load(OPT).to(tl.float64)
        tl.store(LZ + rows, tl.where(ign, 0.0, (z * lse) * lse), mask=rmask)


# No argument is specialized by value or alignment (each combination of "== 1" / "divisible by 16"
# over V, the strides and the pointers was its own compiled variant); what that bought is the
# constexpr VEC (checked by the launcher): 1 when the logits (and dlogits) rows start 16-byte
# aligned, so the full tiles, whose masks are constant along a row, load and store 16-byte
# vectors; 2 when V is a multiple of 16 as well, so the ragged last tile's column mask is constant
# over 16 columns and it is vectorized too (its scalar loads cost 0.78 against 0.91 of copy
# forward at V = 32000, whose last tile is a tenth of the row). The hints are written in the
# kernel bodies (Triton drops hints made in a called jit function).
_NO_SPEC = ["n_rows", "V", "sxr", "st", "ss", "sdr", "ignore_index", "n_chunks", "chunk_cols", "flags", "mean"]
_NO_ALIGN = _NO_SPEC + ["X", "T", "LOSS", "LSE", "PM", "PS", "PX", "EPS", "SC", "DX", "W", "OPT", "LZ"]


@triton.jit
def _fwd_tile(x, xs, m, s, sx, inv_v, SMOOTH: tl.constexpr, F64: tl.constexpr):
    """One tile [rows, groups, GS] of the online (max, sum of exp) pass. Every group of GS
    consecutive columns (one thread's 16-byte vector) keeps its own max m and s = sum of
    exp(x - m) over the logits it has seen: the group max is a reduction inside one thread (no
    shuffles, no barrier between tiles), and per element there is one max, one subtraction, one
    exp and one add; the rescale s * exp(m_old - m_new) is once per group. m starts at the most
    negative finite value, so a -inf logit (and the -inf of masked lanes) gives exp(-inf) = 0 and
    never -inf - -inf. A NaN logit need not reach the max (tl.max may drop it): exp(NaN - m) makes
    its group's s NaN for good, so the row's S is NaN."""
    m_new = tl.maximum(m, tl.max(x, 2))
    s = s * exp_ct(m - m_new, F64) + tl.sum(exp_ct(x - m_new[:, :, None], F64), 2)
    if SMOOTH:
        sx += tl.sum(xs * inv_v, 2)
    return m_new, s, sx


@triton.jit(do_not_specialize=_NO_SPEC, do_not_specialize_on_alignment=_NO_ALIGN)
def _ce_fwd_kernel(
    X, T, LOSS, LSE, PM, PS, PX, EPS, W, OPT, LZ,
    n_rows, V, sxr, st, ignore_index, n_chunks, chunk_cols, eps, inv_v, flags,
    F64: tl.constexpr, SMOOTH: tl.constexpr, SPLIT: tl.constexpr, VEC: tl.constexpr, OPTS: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK: tl.constexpr, GS: tl.constexpr,
):
    """Per row (chunk): the max M, S = sum exp(x - M) and the sum of x / (4 V), over tiles of BLOCK
    columns held as [BLOCK_R, BLOCK // GS, GS] (GS: 16 bytes of logits). With options (OPTS, the
    constexpr flags != 0), of the transformed logits, and the sum of w x / (4 V)."""
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    # the compute type's most negative finite value: each group's starting max
    LOW: tl.constexpr = -1.7976931348623157e308 if F64 else -3.4028234663852886e38
    G: tl.constexpr = BLOCK // GS
    eps, inv_v = _ce_params(eps, inv_v, EPS, F64)
    # the smoothing's mean of x is summed a quarter scaled (exact: a power of two), so that its
    # rounding cannot overflow where the mean itself is near the range's end (_ce_finish)
    inv_v = inv_v * 0.25
    rows = _ce_rows(BLOCK_R)
    rmask = rows < n_rows
    rmask3 = rmask[:, None, None]
    xrow = X + rows * sxr
    lo = tl.program_id(1) * chunk_cols
    hi = tl.minimum(lo + chunk_cols, V)
    m = tl.full([BLOCK_R, G], LOW, CT)
    s = tl.zeros([BLOCK_R, G], CT)
    sx = tl.zeros([BLOCK_R, G], CT)
    cols0 = tl.arange(0, G)[:, None] * GS + tl.arange(0, GS)[None, :]  # [G, GS], row-major
    n_full = (hi - lo) // BLOCK
    # full tiles: the mask is constant along a row, so loads stay 16-byte vectors
    for k in range(0, n_full):
        start = tl.multiple_of(lo + k * BLOCK, BLOCK)
        xp = xrow[:, None, None] + (start + cols0)[None, :, :]
        if VEC:
            xp = tl.max_contiguous(tl.multiple_of(xp, [1, 1, 16]), [1, 1, GS])
        x = widen(tl.load(xp, mask=rmask3, other=float("-inf")), F64)
        if OPTS:
            cf = start + cols0
            y, ys = _fwd_opts(x, rmask3, cf < hi, cf, W, OPT, flags, SMOOTH, F64)
            m, s, sx = _fwd_tile(y, ys, m, s, sx, inv_v, SMOOTH, F64)
        else:
            m, s, sx = _fwd_tile(x, x, m, s, sx, inv_v, SMOOTH, F64)
    start = tl.multiple_of(lo + n_full * BLOCK, BLOCK)
    if start < hi:  # the ragged last tile
        if VEC == 2:
            hi = tl.multiple_of(hi, 16)
        cols = start + cols0
        msk = rmask3 & (cols < hi)[None, :, :]
        xp = xrow[:, None, None] + cols[None, :, :]
        if VEC:
            xp = tl.max_contiguous(tl.multiple_of(xp, [1, 1, 16]), [1, 1, GS])
        x = widen(tl.load(xp, mask=msk, other=float("-inf")), F64)
        if OPTS:
            y, ys = _fwd_opts(x, msk, cols < hi, cols, W, OPT, flags, SMOOTH, F64)
            m, s, sx = _fwd_tile(y, ys, m, s, sx, inv_v, SMOOTH, F64)
        else:
            m, s, sx = _fwd_tile(x, tl.where(msk, x, 0.0), m, s, sx, inv_v, SMOOTH, F64)
    # the groups merged once: S = sum_g s_g exp(m_g - M), NaN exactly when the row (chunk) holds
    # a NaN logit. A row whose max is +inf may get a NaN or 0 here; _ce_finish overrides it.
    # S >= 1 unless every logit is -inf (the group holding M adds s >= 1): then M becomes -inf,
    # as for a row max.
    M = tl.max(m, 1)
    S = tl.sum(s * exp_ct(m - M[:, None], F64), 1)
    m = tl.where(S == 0.0, float("-inf"), M)
    SXV4 = tl.sum(tl.where(rmask[:, None], sx, 0.0), 1)
    if SPLIT:
        poff = rows * n_chunks + tl.program_id(1)
        tl.store(PM + poff, m, mask=rmask)
        tl.store(PS + poff, S, mask=rmask)
        tl.store(PX + poff, SXV4, mask=rmask)
    else:
        _ce_finish_opts(X, T, LOSS, LSE, LZ, W, OPT, flags, rows, rmask, m, S, SXV4, V, sxr, st, ignore_index, eps,
                        SMOOTH, F64)


@triton.jit(do_not_specialize=_NO_SPEC, do_not_specialize_on_alignment=_NO_ALIGN)
def _ce_merge_kernel(
    X, T, LOSS, LSE, PM, PS, PX, EPS, W, OPT, LZ,
    n_rows, V, sxr, st, ignore_index, n_chunks, eps, flags,
    F64: tl.constexpr, SMOOTH: tl.constexpr, BLOCK_R: tl.constexpr, NC: tl.constexpr,
):
    """Merge each row's chunk partials: M = max m_c, S = sum_c s_c exp(m_c - M)."""
    eps, _ = _ce_params(eps, eps, EPS, F64)
    rows = _ce_rows(BLOCK_R)
    rmask = rows < n_rows
    c = tl.arange(0, NC)
    pmask = rmask[:, None] & (c < n_chunks)[None, :]
    poff = rows[:, None] * n_chunks + c[None, :]
    mc = tl.load(PM + poff, mask=pmask, other=float("-inf"))
    sc = tl.load(PS + poff, mask=pmask, other=0.0)
    M = tl.max(mc, 1)
    Ms = tl.where(tl.abs(M) < float("inf"), M, 0.0)
    # a chunk of -inf (and NaN) has m_c = -inf and s_c = 0 (NaN): it adds s_c * 0 (NaN stays)
    w = tl.where(mc == float("-inf"), sc * 0.0, sc * tl.exp(mc - Ms[:, None]))
    S = tl.sum(w, 1)
    SXV4 = tl.sum(tl.load(PX + poff, mask=pmask, other=0.0), 1)
    _ce_finish_opts(X, T, LOSS, LSE, LZ, W, OPT, flags, rows, rmask, M, S, SXV4, V, sxr, st, ignore_index, eps,
                    SMOOTH, F64)


@triton.jit
def _bwd_tile(x, lse, tt, ign, scale, cols0, hot, flat, SMOOTH: tl.constexpr, F64: tl.constexpr):
    """One tile's gradient; tt is the target's column within the tile (int32, -1 when the target
    is elsewhere), so the one-hot test is a 32-bit compare against the tile's own column index."""
    p = exp_ct(x - lse[:, None], F64)
    is_t = cols0[None, :] == tt[:, None]
    if SMOOTH:
        g = (p - flat) - tl.where(is_t, hot, 0.0)
    else:
        g = tl.where(is_t, p - 1.0, p)
    return tl.where(ign[:, None], 0.0, g * scale[:, None])


@triton.jit
def _bwd_tile_opts(x, lse, tt, ign, scale_w, cols0, hot, flat, wt, wsum, kzc, kbig, W, cols, cmask, ls, c, ic,
                   flags, SMOOTH: tl.constexpr, F64: tl.constexpr):
    """_bwd_tile with options: the gradient with respect to the transformed logits y (torch's
    weighted terms with weights, scale_w the cross-entropy term's scale; kzc the z term's
    2 z lse scale, over 2**64 where kbig), times dy/dx = s (1 - t)(1 + t), t = tanh(s x / c)."""
    y = x * ls
    th = y  # tanh(s x / c) with a softcap
    if (flags & _SOFTCAP) != 0:
        th = _tanh(y * ic, F64)
        y = c * th
    p = exp_ct(y - lse[:, None], F64)
    is_t = cols0[None, :] == tt[:, None]
    if (flags & _WEIGHT) != 0:
        # w_t (p - onehot) and, smoothed, (1 - eps) of it plus eps / V (sum(w) p - w)
        g = wt[:, None] * tl.where(is_t, p - 1.0, p)
        if SMOOTH:
            w = widen(tl.load(W + cols, mask=cmask, other=0.0), F64)
            g = hot * g + flat * (wsum * p - w[None, :])
    else:
        if SMOOTH:
            g = (p - flat) - tl.where(is_t, hot, 0.0)
        else:
            g = tl.where(is_t, p - 1.0, p)
    g = g * scale_w[:, None]
    if (flags & _ZLOSS) != 0:
        # 2 z lse p times the z term's scale; a coefficient beyond 2**64 is applied as its 2**-64
        # multiple, then 2**64 (exact), so that p k overflows only where it exceeds the range
        # itself, not where k alone does (and 0 * inf is never formed)
        zt = p * kzc[:, None]
        g = g + tl.where(kbig[:, None], zt * _TWO64, zt)
    if (flags & _SOFTCAP) != 0:
        # 1 - tanh^2 as (1 - t)(1 + t): 1 - t is exact for t >= 1/2, so no cancellation is added
        g = g * (ls * ((1.0 - th) * (1.0 + th)))
    else:
        g = g * ls
    return tl.where(ign[:, None], 0.0, g)


@triton.jit
def _bwd_opts(x, lse, t, tt, ign, rmask, dl, scale, STATS, W, OPT, V, cols0, cols, cmask, hot, flat, flags, mean,
              SMOOTH: tl.constexpr, F64: tl.constexpr):
    """A backward tile with options: the rows' option values, then _bwd_tile_opts. They are
    formed per tile, inside the branch that OPTS takes, so that the kernel without options
    keeps no more values live across its loop than it did (the 16-bit forward and backward are
    tuned to their register counts); a few scalar loads and operations per tile of thousands of
    elements."""
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    ls, c, ic = _opt_scalars(OPT, flags, F64)
    wtd = (flags & _WEIGHT) != 0
    wmask = rmask & (((t * 0 + flags) & _WEIGHT) != 0) & (t >= 0) & (t < V)  # a tensor mask (the interpreter's)
    wt = widen(tl.load(W + t, mask=wmask, other=1.0), F64)
    wsum = tl.where(wtd, tl.load(OPT + 5), 0.0).to(CT)
    dl64 = widen(dl, True)
    scale_w = scale
    zsc = dl64
    if mean != 0:
        # the weighted mean divides the cross-entropy term by sum w[t], the z term by the count
        cnt = tl.load(STATS + 2).to(tl.float64)
        den = tl.where(wtd, tl.load(OPT + 6).to(tl.float64), cnt)
        # a zero divisor makes the counted rows' gradient NaN, as torch's (w[t] = 0 times 1 / 0)
        scale_w = tl.where(den == 0.0, float("nan"), dl64 / den).to(CT)
        zsc = dl64 / cnt
    kz = 2.0 * tl.where((flags & _ZLOSS) != 0, tl.load(OPT), 0.0).to(tl.float64) * lse.to(tl.float64) * zsc
    kbig = tl.abs(kz) > _TWO64
    kzc = tl.where(kbig, kz * _TWO_M64, kz).to(CT)
    return _bwd_tile_opts(x, lse, tt, ign, scale_w, cols0, hot, flat, wt, wsum, kzc, kbig, W, cols, cmask, ls, c,
                          ic, flags, SMOOTH, F64)


@triton.jit
def _tile_target(t, start, BLOCK: tl.constexpr):
    """The target's column within the tile starting at column start, or -1 (int32)."""
    return tl.where((t >= start) & (t < start + BLOCK), t - start, -1).to(tl.int32)


@triton.jit(do_not_specialize=_NO_SPEC, do_not_specialize_on_alignment=_NO_ALIGN)
def _ce_bwd_kernel(
    X, T, LSE, SC, STATS, DX, EPS, W, OPT,
    n_rows, V, sxr, st, ss, sdr, ignore_index, n_chunks, chunk_cols, eps, inv_v, flags, mean,
    F64: tl.constexpr, SMOOTH: tl.constexpr, VEC: tl.constexpr, OPTS: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK: tl.constexpr,
):
    """dx = (exp(x - lse) - eps/V - (1 - eps)[j = t]) * scale, in the compute type, rounded once;
    exactly 0 on ignored rows. scale: dloss (row i's through stride ss, 0 for a scalar) in the
    compute type, or for the mean (mean != 0, a runtime argument: the scale is formed once per
    row, before the loop) dloss / count formed in float64 and rounded once (count: STATS[2], the
    non-ignored rows). With options (OPTS, the constexpr flags != 0), _bwd_opts."""
    eps, inv_v = _ce_params(eps, inv_v, EPS, F64)
    hot = 1.0 - eps
    flat = eps * inv_v
    rows = _ce_rows(BLOCK_R)
    rmask = rows < n_rows
    t = tl.load(T + rows * st, mask=rmask, other=0).to(tl.int64)
    ign = t == ignore_index
    lse = tl.load(LSE + rows, mask=rmask, other=0.0)
    dl = tl.load(SC + rows * ss, mask=rmask, other=0.0)
    scale = widen(dl, F64)
    if mean != 0:
        scale = (widen(dl, True) / tl.load(STATS + 2).to(tl.float64)).to(lse.dtype)
    xrow = X + rows * sxr
    drow = DX + rows * sdr
    lo = tl.program_id(1) * chunk_cols
    hi = tl.minimum(lo + chunk_cols, V)
    cols0 = tl.arange(0, BLOCK)
    n_full = (hi - lo) // BLOCK
    for k in range(0, n_full):  # full tiles: row-constant masks keep 16-byte vectors
        start = tl.multiple_of(lo + k * BLOCK, BLOCK)
        cols = start + cols0
        xp = xrow[:, None] + cols[None, :]
        dp = drow[:, None] + cols[None, :]
        if VEC:
            xp = tl.max_contiguous(tl.multiple_of(xp, [1, 16]), [1, 16])
            dp = tl.max_contiguous(tl.multiple_of(dp, [1, 16]), [1, 16])
        x = widen(tl.load(xp, mask=rmask[:, None], other=0.0), F64)
        if OPTS:
            g = _bwd_opts(x, lse, t, _tile_target(t, start, BLOCK), ign, rmask, dl, scale, STATS, W, OPT, V, cols0,
                          cols, cols < hi, hot, flat, flags, mean, SMOOTH, F64)
        else:
            g = _bwd_tile(x, lse, _tile_target(t, start, BLOCK), ign, scale, cols0, hot, flat, SMOOTH, F64)
        tl.store(dp, to_out(g, DX.dtype.element_ty), mask=rmask[:, None])
    start = tl.multiple_of(lo + n_full * BLOCK, BLOCK)
    if start < hi:  # the ragged last tile
        if VEC == 2:
            hi = tl.multiple_of(hi, 16)
        cols = start + cols0
        msk = rmask[:, None] & (cols < hi)[None, :]
        xp = xrow[:, None] + cols[None, :]
        dp = drow[:, None] + cols[None, :]
        if VEC:
            xp = tl.max_contiguous(tl.multiple_of(xp, [1, 16]), [1, 16])
            dp = tl.max_contiguous(tl.multiple_of(dp, [1, 16]), [1, 16])
        x = widen(tl.load(xp, mask=msk, other=0.0), F64)
        if OPTS:
            g = _bwd_opts(x, lse, t, _tile_target(t, start, BLOCK), ign, rmask, dl, scale, STATS, W, OPT, V, cols0,
                          cols, cols < hi, hot, flat, flags, mean, SMOOTH, F64)
        else:
            g = _bwd_tile(x, lse, _tile_target(t, start, BLOCK), ign, scale, cols0, hot, flat, SMOOTH, F64)
        tl.store(dp, to_out(g, DX.dtype.element_ty), mask=msk)


_BIG_INT: tl.constexpr = tl.constexpr(2**62)


@triton.jit(do_not_specialize=["n", "st", "ignore_index"], do_not_specialize_on_alignment=["T", "OUT", "n", "st"])
def _ce_targets_kernel(T, OUT, n, st, ignore_index, BLOCK: tl.constexpr):
    """One program: OUT = [min, max, count] of the targets that are not ignore_index (min 2**62
    and max -2**62 when none is), in a fixed order (integers: exact in any order anyway)."""
    lo = tl.full([BLOCK], _BIG_INT, tl.int64)
    hi = tl.full([BLOCK], -_BIG_INT, tl.int64)
    cnt = tl.zeros([BLOCK], tl.int64)
    for start in range(0, n, BLOCK):
        i = start + tl.arange(0, BLOCK)
        t = tl.load(T + i.to(tl.int64) * st, mask=i < n, other=0).to(tl.int64)
        live = (i < n) & (t != ignore_index)
        lo = tl.minimum(lo, tl.where(live, t, _BIG_INT))
        hi = tl.maximum(hi, tl.where(live, t, -_BIG_INT))
        cnt += live.to(tl.int64)
    tl.store(OUT, tl.min(lo, 0))
    tl.store(OUT + 1, tl.max(hi, 0))
    tl.store(OUT + 2, tl.sum(cnt, 0))


@triton.jit(do_not_specialize=["n", "flags"], do_not_specialize_on_alignment=["LR", "STATS", "OUT", "LZ", "OPT", "n", "flags"])
def _ce_reduce_kernel(LR, STATS, OUT, LZ, OPT, n, flags, MEAN: tl.constexpr, BLOCK: tl.constexpr):
    """One program: OUT = sum of the n per-row losses in float64 (divided by the count of
    non-ignored rows for the mean: 0 / 0 = NaN when there is none), rounded to OUT's dtype. The
    order of the additions depends on n alone. With weights (flags) the mean divides by OPT[6],
    the sum of w[t] over the counted rows; with z-loss the sum (mean: over the count) of the
    per-row z terms LZ is added."""
    acc = tl.zeros([BLOCK], tl.float64)
    accz = tl.zeros([BLOCK], tl.float64)
    hz = (flags & _ZLOSS) != 0
    for start in range(0, n, BLOCK):
        i = start + tl.arange(0, BLOCK)
        acc += tl.load(LR + i, mask=i < n, other=0.0).to(tl.float64)
        if hz:
            accz += tl.load(LZ + i, mask=i < n, other=0.0).to(tl.float64)
    total = tl.sum(acc, 0)
    if MEAN:
        cnt = tl.load(STATS + 2).to(tl.float64)
        if (flags & _WEIGHT) != 0:
            # as torch: (1 - eps) NLL / sum w[t] is 0 / 0 where every counted target weighs 0,
            # and NaN plus the smoothing term is NaN (not the term over 0, inf)
            wden = tl.load(OPT + 6).to(tl.float64)
            total = tl.where(wden == 0.0, float("nan"), total / wden)
        else:
            total = total / cnt
        if hz:
            total += tl.sum(accz, 0) / cnt
    elif hz:
        total += tl.sum(accz, 0)
    tl.store(OUT, to_out(total, OUT.dtype.element_ty))


JIT_KERNELS = L.register_jit(_ce_fwd_kernel, _ce_merge_kernel, _ce_bwd_kernel, _ce_targets_kernel, _ce_reduce_kernel)
# launched through L.Launcher: a plain Triton launch costs 28-62 us of host time on an H200 system
# (benchmarks/ce_parts.py --host), four per training step
_fwd, _merge, _bwd, _targets, _reduce = (L.Launcher(k) for k in JIT_KERNELS)


# ----------------------------------------------------------------------------------------------
# launch configuration
# ----------------------------------------------------------------------------------------------
def max_tile(dtype: torch.dtype) -> int:
    """Columns one program handles per loop iteration; longer rows loop. On the GPU 16 KB of
    logits for 16-bit dtypes, 8 warps (16 elements per thread). bfloat16 on the H200
    (benchmarks/ce_parts.py, fraction of copy at V = 32000 / 128256 / 262144):
    forward 0.99 / 1.03 / 1.02 (a read only can pass the copy), against 0.96-1.03 for the other
    tiles tried (2048 to 8192 columns, 4 to 8 warps): the forward keeps 31 registers whatever
    the tile, so every choice runs 2048 threads per SM. Backward 0.91 / 0.90 / 0.88 (another run:
    0.88 / 0.90 / 0.89), against 0.83 / 0.85 / 0.86 with 8192 columns and 16 warps (63
    registers: two programs per SM). Under the interpreter 256, so CPU runs reach the looped and
    split paths on small shapes. CE_KERNELS_MAX_TILE overrides it (a power of two >= 16)."""
    env = L.knob("CE_KERNELS_MAX_TILE")
    if env:
        return int(env)
    if L.interpreting():
        return T.CE_TILE_INTERPRETER
    return T.CE_TILE[dtype.itemsize]


@functools.lru_cache(maxsize=None)
def _programs_wanted(device) -> int:
    if L.interpreting() or device.type != "cuda":
        return T.CE_PROGRAMS_PER_SM
    return T.CE_PROGRAMS_PER_SM * torch.cuda.get_device_properties(device).multi_processor_count


class CEConfig:
    """block_r rows x block columns per iteration; each row's columns cut into n_chunks ranges of
    chunk_cols (a multiple of block), one program each. Rows are split only when there are fewer
    than ~4 programs per SM (e.g. 64 rows of 262,144: 4096 x 262,144 fills the GPU unsplit).
    Environment knobs for tuning on the GPU: CE_KERNELS_MAX_TILE, CE_KERNELS_NUM_WARPS,
    CE_KERNELS_MIN_BLOCK."""

    def __init__(self, n_rows: int, V: int, dtype: torch.dtype, device):
        tile = max_tile(dtype)
        # under the interpreter short rows keep their own widths (its time goes per program: fewer
        # rows per program would cost), on the GPU they share CE_MIN_BLOCK
        narrowest = 16 if L.interpreting() else int(L.knob("CE_KERNELS_MIN_BLOCK", T.CE_MIN_BLOCK))
        self.block = min(tile, max(narrowest, triton.next_power_of_2(V)))
        # rows per program: up to 64 in a tile of `tile` elements; under the interpreter tiles of
        # short rows hold up to 512 rows of 8192 elements (its time goes per program and per
        # operation, not per element, and batches of thousands of short rows are checked), while
        # rows of a whole tile or more keep one row per program, so CPU runs still reach the
        # looped and split paths
        interp = L.interpreting() and self.block < tile
        rows_tile = T.ROWS_TILE_INTERPRETER if interp else tile
        most = T.CE_MAX_ROWS_PER_PROGRAM_INTERPRETER if interp else T.CE_MAX_ROWS_PER_PROGRAM
        self.block_r = max(1, min(most, rows_tile // self.block))
        tiles = triton.cdiv(V, self.block)
        want = _programs_wanted(torch.device(device))
        chunks = 1
        if self.block_r == 1 and n_rows < want:
            chunks = min(tiles, triton.cdiv(want, max(n_rows, 1)))
        per = triton.cdiv(tiles, chunks)
        self.chunk_cols = per * self.block
        self.n_chunks = triton.cdiv(V, self.chunk_cols)
        env = L.knob("CE_KERNELS_NUM_WARPS")  # a tuning knob for the GPU
        self.num_warps = int(env) if env else max(4, min(16, self.block_r * self.block // T.CE_PER_WARP))

    def grid(self, n_rows: int):
        return (triton.cdiv(n_rows, self.block_r), self.n_chunks)


@functools.lru_cache(maxsize=1024)
def _config(n_rows: int, V: int, dtype: torch.dtype, device: torch.device, knobs) -> CEConfig:
    return CEConfig(n_rows, V, dtype, device)


def config(n_rows: int, V: int, dtype: torch.dtype, device: torch.device) -> CEConfig:
    """CEConfig for these rows, cached (with the tuning knobs in the key): building one costs
    ~39 us of host time per call on an H200 system (benchmarks/ce_parts.py --host), twice
    per training step."""
    knobs = (L.knob("CE_KERNELS_MAX_TILE"), L.knob("CE_KERNELS_NUM_WARPS"), L.knob("CE_KERNELS_MIN_BLOCK"))
    return _config(n_rows, V, dtype, device, knobs)


# ----------------------------------------------------------------------------------------------
# validation
# ----------------------------------------------------------------------------------------------
def check_args(logits, target, ignore_index, reduction, label_smoothing, op: str) -> None:
    """Types, shapes, devices and options; no device work."""
    L.check_tensor("logits", logits, op)
    if not isinstance(target, torch.Tensor):
        raise TypeError(f"{op}: target must be a torch.Tensor, got {type(target).__name__}")
    if target.dtype not in _INT_DTYPES:
        hint = (" (class-probability targets are not supported; pass class indices)"
                if target.is_floating_point() else "")
        raise TypeError(f"{op}: target.dtype must be int32 or int64 (class indices), got {target.dtype}{hint}")
    if logits.ndim == 0:
        raise ValueError(f"{op}: logits must have a class axis (shape (..., V)), got a 0-d tensor")
    if tuple(target.shape) != tuple(logits.shape[:-1]):
        raise ValueError(f"{op}: target must have shape logits.shape[:-1] = {tuple(logits.shape[:-1])} "
                         f"(logits are (..., V), target (...)), got {tuple(target.shape)}")
    if logits.shape[-1] == 0:
        raise ValueError(f"{op}: logits must have at least one class (V >= 1), got shape {tuple(logits.shape)}")
    if target.device != logits.device:
        raise ValueError(f"{op}: logits and target must be on the same device, got {logits.device} and {target.device}")
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise TypeError(f"{op}: ignore_index must be an int, got {type(ignore_index).__name__}")
    if not -2**63 <= ignore_index < 2**63:
        raise ValueError(f"{op}: ignore_index must fit in int64, got {ignore_index}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"{op}: reduction must be one of 'none', 'mean', 'sum', got {reduction!r}")
    if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, (int, float)):
        raise TypeError(f"{op}: label_smoothing must be a float, got {type(label_smoothing).__name__}")
    if not 0.0 <= float(label_smoothing) <= 1.0:
        raise ValueError(f"{op}: label_smoothing must be in [0, 1], got {label_smoothing}")


def _real(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_options(logits, weight, z_loss, softcap, logit_scale, op: str,
                  weight_name: str = "weight") -> "Options | None":
    """The optional terms validated (after check_args): None where every one is off, else the
    Options the launchers take. No device work. weight_name: the class weights' argument name
    in messages (the fused linear cross-entropy's is ce_weight)."""
    V = logits.shape[-1]
    w = weight_name
    if weight is not None:
        if not isinstance(weight, torch.Tensor):
            raise TypeError(f"{op}: {w} must be None or a torch.Tensor of {V} class weights, "
                            f"got {type(weight).__name__}")
        if not weight.is_floating_point():
            raise TypeError(f"{op}: {w}.dtype must be a floating-point dtype, got {weight.dtype}")
        if tuple(weight.shape) != (V,):
            raise ValueError(f"{op}: {w} must have shape (V,) = ({V},), one weight per class, "
                             f"got {tuple(weight.shape)}")
        if weight.device != logits.device:
            raise ValueError(f"{op}: logits and {w} must be on the same device, got {logits.device} "
                             f"and {weight.device}")
    if not _real(z_loss):
        raise TypeError(f"{op}: z_loss must be a float, got {type(z_loss).__name__}")
    if not (math.isfinite(z_loss) and z_loss >= 0):
        raise ValueError(f"{op}: z_loss must be a finite float >= 0, got {z_loss}")
    if softcap is not None:
        if not _real(softcap):
            raise TypeError(f"{op}: softcap must be None or a float, got {type(softcap).__name__}")
        if not (math.isfinite(softcap) and softcap > 0):
            raise ValueError(f"{op}: softcap must be None or a finite float > 0, got {softcap}")
    if not _real(logit_scale):
        raise TypeError(f"{op}: logit_scale must be a float, got {type(logit_scale).__name__}")
    if not math.isfinite(logit_scale):
        raise ValueError(f"{op}: logit_scale must be a finite float, got {logit_scale}")
    if weight is None and z_loss == 0 and softcap is None and logit_scale == 1:
        return None
    return Options(weight, float(z_loss), None if softcap is None else float(softcap), float(logit_scale))


class Options:
    """The optional terms of the loss (validated by check_options): class weights (V,), the
    z-loss z, the softcap c (None: off) and the logit scale s. The kernels take them as the
    runtime argument `flags` (XFORM, SOFTCAP, ZLOSS, WEIGHT bits), the weights in the compute
    dtype and the float64 tensor OPT = [z, c, 1/c, s, sum(w) / V, sum(w), sum of w[t] over the
    counted rows] (prepare)."""

    def __init__(self, weight=None, z_loss: float = 0.0, softcap=None, logit_scale: float = 1.0):
        self.weight, self.z_loss, self.softcap, self.logit_scale = weight, z_loss, softcap, logit_scale
        self.flags = ((XFORM if softcap is not None or logit_scale != 1.0 else 0) | (SOFTCAP if softcap is not None else 0)
                      | (ZLOSS if z_loss != 0 else 0) | (WEIGHT if weight is not None else 0))

    def prepare(self, target: torch.Tensor, ignore_index: int, V: int, ct, device) -> "Prepared":
        """The kernels' arguments for these rows (a few small launches with weights, none
        waiting for the device)."""
        c = self.softcap or 1.0
        head = torch.tensor([self.z_loss, c, 1.0 / c, self.logit_scale], dtype=torch.float64, device=device)
        W = None
        if self.weight is None:
            opt = torch.cat([head, head.new_zeros(4)])
        else:
            wf = self.weight.detach().to(torch.float64)
            t = target.reshape(-1)
            live = t != ignore_index
            tc = torch.where(live, t, 0).clamp(0, V - 1)
            wsum = wf.sum()
            wt_sum = torch.where(live, wf[tc], 0.0).sum()
            opt = torch.cat([head, torch.stack([wsum / V, wsum, wt_sum, wsum.new_zeros(())])])
            W = self.weight.detach().to(ct).contiguous()
        return Prepared(self.flags, W, opt)


class Prepared:
    """Options as the kernels take them: flags, the weights in the compute dtype (None: no
    weights), OPT (Options.prepare)."""

    def __init__(self, flags: int, W, opt):
        self.flags, self.W, self.opt = flags, W, opt


@functools.lru_cache(maxsize=None)
def _dummy64(device: torch.device) -> torch.Tensor:
    """A float64 tensor the kernels get for OPT where every option is off (never read then), so
    that OPT's pointer type, and so the compiled variant, is the same either way."""
    return torch.zeros(8, dtype=torch.float64, device=device)


def _opt_args(prep, W_dummy, OPT_dummy):
    """(flags, W, OPT) for a launch: the prepared options, or 0 and the dummies."""
    if prep is None:
        return 0, W_dummy, OPT_dummy
    return prep.flags, (W_dummy if prep.W is None else prep.W), prep.opt


def _target_stats(target: torch.Tensor, ignore_index: int) -> torch.Tensor:
    """int64 [min, max, count] of the non-ignored targets, on the targets' device: one launch of
    one program (the check, the mean's divisor and the backward's scale all read it)."""
    t = target.reshape(-1)
    out = torch.empty(3, dtype=torch.int64, device=t.device)
    L.note_variant("ce_targets", dtype=str(t.dtype))
    _targets((1,), (t, out, t.numel(), t.stride(0) if t.numel() > 1 else 1, ignore_index), dict(BLOCK=1024), 4)
    return out


target_stats = L.on_tensor_device(_target_stats)
_HOST = threading.local()  # per thread: {device index: (pinned int64[3], event)} for TargetCheck


class TargetCheck:
    """The range check of the targets, in flight: target_stats copied to pinned host memory
    behind an event. finish() waits for that event only (not for kernels launched after it) and
    raises a ValueError naming the first out-of-range target.

    The pinned buffer and the event are made once per thread and device and reused (allocating
    them costs ~80 us of host time per call on an H200 system): a check must be finished before
    the next one on the same thread and device is made, which every caller here does."""

    def __init__(self, stats: torch.Tensor, target: torch.Tensor, V: int, ignore_index: int, op: str):
        self.target, self.V, self.ignore_index, self.op = target, V, ignore_index, op
        self.event = None
        if stats.is_cuda:
            index = stats.get_device()
            slots = _HOST.__dict__.setdefault("slots", {})
            if index != torch.cuda.current_device():
                with torch.cuda.device(index):  # copy and event on the stats' device and stream
                    self._record(slots, index, stats)
            else:
                self._record(slots, index, stats)
        else:
            self.host = stats

    def _record(self, slots, index: int, stats: torch.Tensor) -> None:
        slot = slots.get(index)
        if slot is None:
            slot = slots[index] = (torch.empty(3, dtype=torch.int64, pin_memory=True), torch.cuda.Event())
        self.host, self.event = slot
        self.host.copy_(stats, non_blocking=True)
        self.event.record()

    def finish(self) -> None:
        if self.event is not None:
            self.event.synchronize()
        lo, hi, count = self.host.tolist()
        if count == 0 or (lo >= 0 and hi < self.V):
            return
        t, V, ig = self.target, self.V, self.ignore_index
        bad = (t != ig) & ((t < 0) | (t >= V))
        i = int(bad.reshape(-1).nonzero()[0, 0])
        v = int(t.reshape(-1)[i])
        idx = tuple(int(k) for k in torch.unravel_index(torch.tensor(i), t.shape)) if t.ndim else ()
        raise ValueError(f"{self.op}: target{list(idx)} = {v} is out of range: targets must be in [0, {V}) "
                         f"or equal ignore_index={ig}")


def check_targets(target: torch.Tensor, V: int, ignore_index: int, op: str) -> torch.Tensor:
    """Every target is ignore_index or in [0, V), checked before returning; returns target_stats."""
    stats = target_stats(target, ignore_index)
    TargetCheck(stats, target, V, ignore_index, op).finish()
    return stats


def check_dloss(dloss, target, logits, reduction, op: str) -> None:
    if not isinstance(dloss, torch.Tensor):
        raise TypeError(f"{op}: dloss must be a torch.Tensor, got {type(dloss).__name__}")
    if not dloss.is_floating_point():
        raise TypeError(f"{op}: dloss.dtype must be a floating-point dtype, got {dloss.dtype}")
    want = tuple(target.shape) if reduction == "none" else ()
    if tuple(dloss.shape) != want:
        raise ValueError(f"{op}: dloss must have the loss's shape {want} for reduction={reduction!r}, "
                         f"got {tuple(dloss.shape)}")
    if dloss.device != logits.device:
        raise ValueError(f"{op}: logits and dloss must be on the same device, got {logits.device} and {dloss.device}")


# ----------------------------------------------------------------------------------------------
# launchers
# ----------------------------------------------------------------------------------------------
def _rows(logits: torch.Tensor, target: torch.Tensor):
    V = logits.shape[-1]
    x = logits.reshape(-1, V)  # a view where the batch axes merge
    if V > 1 and x.stride(1) != 1:
        x = x.contiguous()
    # int32 targets are read as int64 (one copy of N indices, next to N x V logits): the target
    # pointer's dtype is part of every kernel's signature, so each int32 variant would be one more
    # compiled forward, merge and backward per dtype and tile
    return x, target.reshape(-1).to(torch.int64)


def _vec(V: int, *rows) -> int:
    """The kernels' VEC: 0, 1 (rows 16-byte aligned) or 2 (and V a multiple of 16)."""
    if not L.vec_ok(0, *rows):
        return 0
    return 2 if V % 16 == 0 else 1


def _compute_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _params(eps: float, V: int, dtype, device, fallback):
    """(eps, 1/V, EPS): float32 arguments, and for float64 kernels the tensor [eps, 1/V] they read
    instead (Triton passes Python floats as float32)."""
    if dtype == torch.float64:
        return float(eps), 1.0 / V, torch.tensor([float(eps), 1.0 / V], dtype=torch.float64, device=device)
    return float(eps), 1.0 / V, fallback


def _forward_rows(logits, target, ignore_index: int, label_smoothing: float, prep=None):
    """(per-row loss in float64, per-row lse in the compute dtype), shape (N,); no validation.
    prep: Prepared options (the lse is then of the transformed logits, the loss holds the z term)."""
    loss, lse, lz = _forward_parts(logits, target, ignore_index, label_smoothing, prep)
    return (loss, lse) if lz is None else (loss + lz, lse)


def _forward_parts(logits, target, ignore_index: int, label_smoothing: float, prep=None):
    """(per-row cross-entropy term in float64, per-row lse in the compute dtype, per-row z term
    in float64 or None without z-loss), shape (N,); no validation."""
    x, t = _rows(logits, target)
    N, V = x.shape
    ct = _compute_dtype(logits.dtype)
    loss = torch.empty(N, dtype=torch.float64, device=x.device)  # formed in float64: _ce_finish
    lse = torch.empty(N, dtype=ct, device=x.device)
    flags, W, OPT = _opt_args(prep, lse, _dummy64(x.device))
    lz = torch.empty(N, dtype=torch.float64, device=x.device) if flags & ZLOSS else None
    if N == 0:
        return loss, lse, lz
    LZ = loss if lz is None else lz
    cfg = config(N, V, logits.dtype, x.device)
    eps, inv_v, EPS = _params(label_smoothing, V, logits.dtype, x.device, loss)
    f64 = logits.dtype == torch.float64
    smooth = label_smoothing > 0
    split = cfg.n_chunks > 1
    L.note_variant("ce_fwd", dtype=str(logits.dtype), SMOOTH=smooth, SPLIT=split, OPTS=flags != 0, BLOCK_R=cfg.block_r,
                   BLOCK=cfg.block)
    if split:
        pm = torch.empty((N, cfg.n_chunks), dtype=ct, device=x.device)
        ps, px = torch.empty_like(pm), torch.empty_like(pm)
    else:
        pm = ps = px = lse  # unused without SPLIT (a pointer of the compute type)
    _fwd(cfg.grid(N), (x, t, loss, lse, pm, ps, px, EPS, W, OPT, LZ,
                       N, V, x.stride(0), t.stride(0), ignore_index, cfg.n_chunks, cfg.chunk_cols, eps, inv_v, flags),
         dict(F64=f64, SMOOTH=smooth, SPLIT=split, VEC=_vec(V, (x, x.stride(0), 0)), OPTS=flags != 0,
              BLOCK_R=cfg.block_r, BLOCK=cfg.block, GS=16 // x.element_size()), cfg.num_warps)
    if split:
        nc = max(2, triton.next_power_of_2(cfg.n_chunks))
        br = max(1, min(64, 1024 // nc))
        L.note_variant("ce_merge", dtype=str(logits.dtype), SMOOTH=smooth, NC=nc, BLOCK_R=br)
        _merge((triton.cdiv(N, br),), (x, t, loss, lse, pm, ps, px, EPS, W, OPT, LZ,
                                       N, V, x.stride(0), t.stride(0), ignore_index, cfg.n_chunks, eps, flags),
               dict(F64=f64, SMOOTH=smooth, BLOCK_R=br, NC=nc), 4)
    return loss, lse, lz


def _reduce_loss(loss_rows, target, ignore_index: int, reduction: str, dtype, stats=None, lz=None, prep=None):
    """The loss from the per-row losses: as they are ("none", rounded to dtype), or their float64
    sum (divided by the count of non-ignored rows for "mean"), one launch of one program.
    stats: target_stats, computed here when not given. lz: the per-row z terms, added (the
    mean divides them by the count); prep: Prepared options (with weights, the mean divides
    loss_rows by the sum of w[t] over the counted rows)."""
    if reduction == "none":
        rows = loss_rows if lz is None else loss_rows + lz
        return rows.to(dtype).reshape(target.shape)
    if stats is None:
        stats = _target_stats(target, ignore_index)
    out = torch.empty((), dtype=dtype, device=loss_rows.device)
    flags = ((ZLOSS if lz is not None else 0) | (WEIGHT if prep is not None and prep.W is not None else 0))
    LZ = loss_rows if lz is None else lz
    OPT = _dummy64(loss_rows.device) if prep is None else prep.opt
    L.note_variant("ce_reduce", dtype=str(loss_rows.dtype), out=str(dtype), MEAN=reduction == "mean")
    _reduce((1,), (loss_rows, stats, out, LZ, OPT, loss_rows.numel(), flags), dict(MEAN=reduction == "mean", BLOCK=1024), 4)
    return out


def _z_term(lz, target, ignore_index: int, reduction: str, dtype, stats):
    """The z-loss term alone, reduced as the loss is (the mean over the counted rows); zeros
    without z-loss (lz None)."""
    if lz is None:
        shape = tuple(target.shape) if reduction == "none" else ()
        return torch.zeros(shape, dtype=dtype, device=target.device)
    return _reduce_loss(lz, target, ignore_index, reduction, dtype, stats)


class BackwardPlan:
    """The backward launch, prepared from what the forward knows (everything but dloss and the
    output), so that the autograd.Function builds it before the forward's wait and its backward
    only allocates dx and launches: the host path from that wait to the backward launch is what
    the GPU idles for at V = 32000 (the forward kernel is shorter; benchmarks/ce_parts.py --host).
    The plan holds views of logits and target: they must not change before run (the autograd
    Function saves them too, so autograd's version check catches an in-place change)."""

    def __init__(self, logits, target, lse, ignore_index: int, reduction: str, label_smoothing: float, stats=None,
                 prep=None):
        x, t = _rows(logits, target)
        N, V = x.shape
        self.shape, self.dtype, self.device, self.n_rows = logits.shape, logits.dtype, x.device, N
        if N == 0:
            return
        mean = reduction == "mean"
        if mean and stats is None:
            stats = _target_stats(target, ignore_index)
        cfg = config(N, V, logits.dtype, x.device)
        eps, inv_v, EPS = _params(label_smoothing, V, logits.dtype, x.device, lse)
        flags, W, OPT = _opt_args(prep, lse, _dummy64(x.device))
        # STATS is read for the mean's count only; otherwise any int64 tensor keeps its pointer
        # type, and so the compiled variant, the same (the mean is a runtime argument)
        self.stats = stats if stats is not None else t
        self.grid, self.num_warps = cfg.grid(N), cfg.num_warps
        self.head = (x, t, lse)  # the arguments before dloss, and after it:
        self.tail = (N, V, x.stride(0), t.stride(0))
        self.rest = (ignore_index, cfg.n_chunks, cfg.chunk_cols, eps, inv_v, flags, int(mean))
        self.eps_t = (EPS, W, OPT)
        self.dx_rows_ok = (V * x.element_size()) % 16 == 0  # VEC checks x here, dx's rows in run
        self.consts = dict(F64=logits.dtype == torch.float64, SMOOTH=label_smoothing > 0,
                           VEC=_vec(V, (x, x.stride(0), 0)), OPTS=flags != 0, BLOCK_R=cfg.block_r, BLOCK=cfg.block)
        self.note = dict(dtype=str(logits.dtype), SMOOTH=label_smoothing > 0, OPTS=flags != 0, BLOCK_R=cfg.block_r,
                         BLOCK=cfg.block)

    def run(self, dloss, out=None):
        """dlogits (the logits' dtype and shape, contiguous) for this dloss. out: a contiguous
        (N, V) tensor of the logits' dtype to write them to (it may be the logits themselves:
        each element is read before it is written, by the same program)."""
        if out is None:
            dx = torch.empty((self.n_rows, self.shape[-1]), dtype=self.dtype, device=self.device)
        else:
            dx = out
        if self.n_rows == 0:
            return dx.reshape(self.shape)
        sc = dloss.reshape(-1)  # a view (stride 0 for an expanded dloss) where possible
        if sc.dtype != self.dtype and sc.dtype != torch.float64:
            # each dloss dtype is one more compiled kernel per launch shape (four, with the suite's
            # draws); float64 holds every float exactly, and the kernel rounds dloss once to its
            # compute type (or forms dloss / count in float64) either way: the same dx, bitwise.
            # A dloss in the logits' dtype, as autograd passes it, is read as it is.
            sc = sc.to(torch.float64)
        ss = sc.stride(0) if sc.numel() > 1 else 0
        L.note_variant("ce_bwd", dloss=str(dloss.dtype), **self.note)
        consts = self.consts
        if consts["VEC"] and not (self.dx_rows_ok and dx.data_ptr() % 16 == 0):
            consts = dict(consts, VEC=0)
        _bwd(self.grid, self.head + (sc, self.stats, dx) + self.eps_t + self.tail + (ss, dx.stride(0)) + self.rest,
             consts, self.num_warps)
        return dx.reshape(self.shape)


def _backward_rows(logits, target, dloss, lse, ignore_index: int, reduction: str, label_smoothing: float,
                   stats=None, prep=None):
    """dlogits (logits' dtype and shape, contiguous); no validation. stats (target_stats) is
    read for the mean's count, computed here when not given."""
    return BackwardPlan(logits, target, lse, ignore_index, reduction, label_smoothing, stats, prep).run(dloss)


# the launchers, run on their tensors' device (the public ones; callers that already are call the
# underscored ones and save the wrapper's host time)
forward_rows = L.on_tensor_device(_forward_rows)
reduce_loss = L.on_tensor_device(_reduce_loss)
backward_rows = L.on_tensor_device(_backward_rows)


# ----------------------------------------------------------------------------------------------
# public functions (validated)
# ----------------------------------------------------------------------------------------------
def forward(logits, target, ignore_index=-100, reduction="mean", label_smoothing=0.0, *, weight=None,
            z_loss=0.0, softcap=None, logit_scale=1.0, return_z_loss=False):
    """(loss, lse): the validated forward; lse is per row, float32 (float64 for float64 logits),
    of the transformed logits. With return_z_loss: (loss, lse, z term reduced as the loss)."""
    out = forward_stats(logits, target, ignore_index, reduction, label_smoothing, weight=weight, z_loss=z_loss,
                        softcap=softcap, logit_scale=logit_scale, return_z_loss=return_z_loss)
    return out[:2] + out[3:]


def forward_stats(logits, target, ignore_index=-100, reduction="mean", label_smoothing=0.0, *, weight=None,
                  z_loss=0.0, softcap=None, logit_scale=1.0, return_z_loss=False):
    """(loss, lse, stats): forward, and the target_stats it computed (a backward given them skips
    that launch); with return_z_loss, the z term last."""
    check_args(logits, target, ignore_index, reduction, label_smoothing, "cross_entropy")
    opts = check_options(logits, weight, z_loss, softcap, logit_scale, "cross_entropy")
    out = _forward(logits, target, ignore_index, reduction, float(label_smoothing), False, opts, return_z_loss)
    return out[:3] + ((out[4],) if return_z_loss else ())


def forward_for_autograd(logits, target, ignore_index: int, reduction: str, label_smoothing: float, opts=None,
                         return_z_loss: bool = False):
    """(loss, lse, stats, BackwardPlan, z term or None) for arguments that already passed
    check_args and check_options (the autograd.Function's path: kernels.cross_entropy checked
    them), with the backward's launch prepared while the GPU runs the forward (before the wait
    for the targets' check)."""
    return _forward(logits, target, ignore_index, reduction, label_smoothing, True, opts, return_z_loss)


@L.on_tensor_device
def _forward(logits, target, ignore_index, reduction, label_smoothing, plan: bool, opts=None, want_z: bool = False):
    stats = _target_stats(target, ignore_index)
    check = TargetCheck(stats, target, logits.shape[-1], ignore_index, "cross_entropy")
    prep = None
    if opts is not None:
        prep = opts.prepare(target, ignore_index, logits.shape[-1], _compute_dtype(logits.dtype), logits.device)
    loss_rows, lse, lz = _forward_parts(logits, target, ignore_index, label_smoothing, prep)
    loss = _reduce_loss(loss_rows, target, ignore_index, reduction, logits.dtype, stats, lz, prep)
    zterm = _z_term(lz, target, ignore_index, reduction, logits.dtype, stats) if want_z else None
    bwd = BackwardPlan(logits, target, lse, ignore_index, reduction, label_smoothing, stats, prep) if plan else None
    check.finish()
    return loss, lse, stats, bwd, zterm


def backward(logits, target, dloss, lse=None, ignore_index=-100, reduction="mean", label_smoothing=0.0,
             stats=None, *, weight=None, z_loss=0.0, softcap=None, logit_scale=1.0):
    """The validated backward. Given lse (the forward's, of the transformed logits), the targets
    are taken as the validated forward's and not checked again (no wait); the kernel never
    gathers by target, so an out-of-range index cannot fault there, it only matches no column
    (a weight is gathered by target under a range mask). stats: the forward's target_stats
    (forward_stats), given together with its lse."""
    name = "cross_entropy_backward"
    check_args(logits, target, ignore_index, reduction, label_smoothing, name)
    opts = check_options(logits, weight, z_loss, softcap, logit_scale, name)
    check_dloss(dloss, target, logits, reduction, name)
    return _backward(logits, target, dloss, lse, ignore_index, reduction, float(label_smoothing), stats, opts)


@L.on_tensor_device
def _backward(logits, target, dloss, lse, ignore_index, reduction, label_smoothing, stats, opts):
    name = "cross_entropy_backward"
    prep = None
    if opts is not None:
        prep = opts.prepare(target, ignore_index, logits.shape[-1], _compute_dtype(logits.dtype), logits.device)
    if lse is None:
        stats = check_targets(target, logits.shape[-1], ignore_index, name)
        _, lse, _ = _forward_parts(logits, target, ignore_index, label_smoothing, prep)
    else:
        want = (target.numel(),)
        if not isinstance(lse, torch.Tensor) or tuple(lse.shape) != want or lse.dtype != _compute_dtype(logits.dtype):
            raise ValueError(f"{name}: lse must be the forward's per-row logsumexp, shape {want}, "
                             f"dtype {_compute_dtype(logits.dtype)}")
        lse = lse.contiguous()
    return _backward_rows(logits, target, dloss, lse, ignore_index, reduction, label_smoothing, stats, prep)
