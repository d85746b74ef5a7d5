"""Triton kernels for softmax, log_softmax, logsumexp and their explicit VJPs.

Three paths, picked from the row length (``_launch.row_config``) and, for long rows, the row count:

* whole rows: a program holds ``BLOCK_R`` rows of up to ``BLOCK_D`` columns in registers, reads
  each input once and writes each output once (short rows share a program, so bytes stay in
  flight);
* looped rows (16/32-bit, at least two rows per SM): one program per row loops over its chunks,
  folding each chunk's (max, sum) -- or, backward, its partial dot product -- into the row's, then
  reads the chunks again in reverse order (mostly from L2) and writes them;
* split rows: a row longer than one block is cut into ``n_chunks`` chunks, one program each.
  Phase 1 writes each chunk's partial result (forward: its max and sum of exponentials, i.e. its
  log-sum-exp; backward: its partial dot product); phase 2 merges the row's partials -- the same
  log-sum-exp merge as online softmax -- and writes its chunk. Few rows of a million columns
  therefore still fill the GPU.

Arithmetic: 16/32-bit inputs are computed in float32, float64 in float64 (its backward with
scaled float64 sums and output formula). Every row sum is order-independent (``_numerics``: exact
in float64 after rounding each term to a grid set by the row, or fixed-point limbs for float64),
so results are bitwise independent of layout and launch shape. Edge rows follow torch: a row with
NaN, with +inf, or with only -inf gives NaN for softmax/log_softmax; logsumexp gives NaN, +inf and
-inf for them.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from . import _launch as L
from ._numerics import _pow2, ebits32, exp_ct, exp_ftz, exponent_above, ldexp, max2, nanmax, pow2f, rowmax, rowmax_sub, sum_exact32, sum_exp, sum_exp_sub, sum_parts, sum_scaled, sum_unit, to_f32, to_out, widen

SOFTMAX, LOG_SOFTMAX, LOGSUMEXP = 0, 1, 2
WHOLE, PARTIAL, FINISH = 0, 1, 2


@triton.jit
def _rows_cols(BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr, PHASE: tl.constexpr):
    if PHASE == 0:
        rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
        cols = tl.arange(0, BLOCK_D)
    else:
        rows = tl.program_id(0).to(tl.int64) + tl.arange(0, 1)
        cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    return rows, cols


@triton.jit
def _row_off(rows, n1, s0, s1, TWO_AXES: tl.constexpr):
    """64-bit element offset of each row: (r // n1) s0 + (r % n1) s1, or r s1 when the batch
    collapsed to one axis (a 64-bit division per row costs more than the row's own arithmetic
    in a tile of many short rows)."""
    if TWO_AXES:
        return (rows // n1) * s0 + (rows % n1) * s1
    else:
        return rows * s1


@triton.jit
def _col_off(cols, sc):
    """64-bit column offsets of a strided output."""
    return cols.to(tl.int64) * sc


# VEC (checked by the launcher): every row starts 16-byte aligned and the row length is a multiple
# of 16, so runs of 16 columns are contiguous, aligned and uniformly masked and accesses can be
# vectorized. The hints (tl.multiple_of / max_contiguous / max_constancy), and the pointer
# arithmetic they apply to, must be written in the kernel bodies: Triton drops them when either is
# made inside a called jit function (3.6 also for pointers returned by one; seen in the PTX).


@triton.jit
def _merge_partials(PM, PS, rows, n_chunks, NC: tl.constexpr):
    """Merge a row's chunk partials (max m_c, sum s_c of exp(x - m_c)) -> (M, S) in float64."""
    c = tl.arange(0, NC)
    pmask = (c < n_chunks)[None, :]
    poff = rows[:, None] * n_chunks + c[None, :]
    mc = tl.load(PM + poff, mask=pmask, other=float("-inf"))
    sc = tl.load(PS + poff, mask=pmask, other=0.0)
    M = nanmax(mc)
    fin = tl.abs(M) < float("inf")
    Ms = tl.where(fin, M, 0.0)
    w = tl.where(mc == float("-inf"), 0.0, sc * tl.exp(mc - Ms[:, None]))
    w = tl.where(fin[:, None], w, 0.0)
    return M, sum_scaled(w)


# No argument is specialized by value or alignment: Triton would otherwise compile a variant for
# every combination of "== 1" / "divisible by 16" over n_cols, the strides and the pointers, which
# would make a GPU run of the suite mostly compilation. What those specializations bought is passed
# as two constexprs instead: VEC (rows 16-byte aligned, row length a multiple of 16: vectorized
# access, see below) and YCOL/DCOL (output columns contiguous or strided). Even those are
# combined into five layouts (_layout), not their twelve combinations: see there.
_NO_SPEC = ["n_rows", "n_cols", "n1", "n_chunks", "sx0", "sx1", "sy0", "sy1", "syc",
            "sa0", "sa1", "sg0", "sg1", "sd0", "sd1", "sdc"]
_NO_ALIGN = _NO_SPEC + ["X", "Y", "PM", "PS", "A", "G", "DX", "PK"]  # (ints too: some versions key "% 16" on this list)
COL_CONTIG, COL_STRIDED = 0, 1
# The kernels are launched with enable_fp_fusion=False (their Launchers, below): LLVM contracted
# a * b - c into an FMA in some variants and not in others (seen on a GPU: the strided-output
# variant of the backward differed from the contiguous one in a cancelling float64 row), which
# broke the bitwise layout invariance the kernels promise. Memory-bound, they lose nothing
# measurable by it.
_EXP_M64: tl.constexpr = tl.constexpr(math.exp(-64.0))
_EXP_M128: tl.constexpr = tl.constexpr(math.exp(-128.0))


@triton.jit(do_not_specialize=_NO_SPEC, do_not_specialize_on_alignment=_NO_ALIGN)
def _fwd_kernel(
    X, Y, PM, PS,
    n_rows, n_cols, n1, sx0, sx1, sy0, sy1, syc, n_chunks,
    OP: tl.constexpr, PHASE: tl.constexpr, F64: tl.constexpr, YCOL: tl.constexpr, VEC: tl.constexpr, TWO_AXES: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr, NC: tl.constexpr, SUB: tl.constexpr = 1,
):
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    if SUB > 1:
        # logsumexp of whole 16/32-bit rows, each held as SUB sub-rows of W columns: tile row
        # t = c * BLOCK_R + r is chunk c of row r, and with BLOCK_R a multiple of the rows a
        # program's threads cover, a row's chunks sit in the same thread (_launch.row_config)
        tl.static_assert(OP == 2 and PHASE == 0 and not F64, "sub-rows: logsumexp of whole 16/32-bit rows")
        W: tl.constexpr = BLOCK_D // SUB
        t = tl.arange(0, SUB * BLOCK_R)
        rows_t = tl.program_id(0).to(tl.int64) * BLOCK_R + (t % BLOCK_R)
        cols_t = (t // BLOCK_R)[:, None] * W + tl.arange(0, W)[None, :]
        xp = X + _row_off(rows_t, n1, sx0, sx1, TWO_AXES)[:, None] + cols_t
        smask = (rows_t < n_rows)[:, None] & (cols_t < n_cols)
        if VEC:
            xp = tl.max_contiguous(tl.multiple_of(xp, [1, 16]), [1, 16])
            smask = tl.max_constancy(smask, [1, 16])
        x3 = tl.reshape(to_f32(tl.load(xp, mask=smask, other=float("-inf"))), [SUB, BLOCK_R, W])
        m = rowmax_sub(x3)
        fin = tl.abs(m) < float("inf")
        ms = tl.where(fin, m, 0.0)
        s = sum_exp_sub(exp_ftz(x3 - ms[None, :, None]), X.dtype.element_ty.primitive_bitwidth == 16).to(tl.float32)
        lse = tl.where(fin, ms + tl.log(s), m)
        rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
        tl.store(Y + _row_off(rows, n1, sy0, sy1, TWO_AXES), to_out(lse, Y.dtype.element_ty), mask=rows < n_rows)
        return
    rows, cols = _rows_cols(BLOCK_R, BLOCK_D, PHASE)
    rmask = rows < n_rows
    cmask = cols < n_cols
    mask = rmask[:, None] & cmask[None, :]
    if OP == 2 and PHASE == 2:
        # logsumexp needs only the merged partials
        M, S = _merge_partials(PM, PS, rows, n_chunks, NC)
        fin = tl.abs(M) < float("inf")
        lse = tl.where(fin, tl.where(fin, M, 0.0) + tl.log(S), M)
        tl.store(Y + _row_off(rows, n1, sy0, sy1, TWO_AXES), to_out(lse, Y.dtype.element_ty), mask=rmask)
        return
    xp = X + _row_off(rows, n1, sx0, sx1, TWO_AXES)[:, None] + cols[None, :]
    vmask = mask
    if VEC:
        xp = tl.max_contiguous(tl.multiple_of(xp, [1, 16]), [1, 16])
        vmask = tl.max_constancy(mask, [1, 16])
    x = widen(tl.load(xp, mask=vmask, other=float("-inf")), F64)
    if PHASE == 2:
        M, S64 = _merge_partials(PM, PS, rows, n_chunks, NC)
        m = M.to(CT)
        s = S64.to(CT)
        fin = tl.abs(m) < float("inf")
        ms = tl.where(fin, m, 0.0)
        d = x - ms[:, None]
        e = exp_ct(d, F64)
    elif F64:
        m = nanmax(x)
        fin = tl.abs(m) < float("inf")
        ms = tl.where(fin, m, 0.0)
        d = x - ms[:, None]
        e = tl.where(fin[:, None], tl.exp(d), 0.0)
        s64 = sum_unit(e)
    else:
        tl.static_assert(BLOCK_D <= 16384, "sum_exp is exact for rows of at most 2**14")
        m, s64, ms, d, e = _stats32(x, X.dtype.element_ty.primitive_bitwidth == 16 and (OP == 2 or BLOCK_D >= 16384))
        fin = tl.abs(m) < float("inf")
    if PHASE != 2:
        if PHASE == 1:
            poff = rows * n_chunks + tl.program_id(1)
            tl.store(PM + poff, m.to(tl.float64), mask=rmask)
            tl.store(PS + poff, s64, mask=rmask)
            return
        s = s64.to(CT)
    if OP == 2:
        lse = tl.where(fin, ms + tl.log(s), m)
        tl.store(Y + _row_off(rows, n1, sy0, sy1, TWO_AXES), to_out(lse, Y.dtype.element_ty), mask=rmask)
    else:
        if OP == 0:
            # 0 <= y <= 1 exactly; the GPU's approximate division (div.full.f32, 2 ulp) can
            # return 1 + ulp for e == s, so clamp (a NaN row is restored just below). 16/32-bit:
            # one reciprocal per row, a multiply per element (exp 4 + reciprocal 4 + product 1
            # + rounding of s 1 = the 10 u of the tolerance table's division budget)
            if F64:
                y = tl.minimum(e / s[:, None], 1.0)
                y = tl.where(fin[:, None], y, float("nan"))
            else:
                y = _y32(e, d, s, fin, OP)
        else:
            y = _y32(e, d, s, fin, OP)
        yoff = _row_off(rows, n1, sy0, sy1, TWO_AXES)
        if YCOL == 0:
            yp = Y + yoff[:, None] + cols[None, :]
            if VEC:
                yp = tl.max_contiguous(tl.multiple_of(yp, [1, 16]), [1, 16])
        else:
            yp = Y + yoff[:, None] + _col_off(cols, syc)[None, :]
        tl.store(yp, to_out(y, Y.dtype.element_ty), mask=vmask)


@triton.jit
def _stats32(x, BITS: tl.constexpr):
    """16/32-bit forward, one tile of rows (float32): (m, s, ms, d, e) with m the row max (NaN if
    the row holds a NaN: rowmax), s = sum exp(x - m) in float64 (order-independent,
    _numerics.sum_exp), ms = m where finite (else 0), d = x - ms, e = exp(d). s means something
    only where m is finite (then every e is in [0, 1]); every caller takes the other rows from m
    (softmax and log_softmax NaN, logsumexp m, the merges of partials by their max)."""
    m = rowmax(x)
    ms = tl.where(tl.abs(m) < float("inf"), m, 0.0)
    d = x - ms[:, None]
    e = exp_ftz(d)
    return m, sum_exp(e, BITS), ms, d, e


@triton.jit
def _y32(e, d, s, fin, OP: tl.constexpr):
    """16/32-bit softmax (OP 0) or log_softmax (OP 1) of a tile from e = exp(d), d = x - ms and
    the row sum s (float32). softmax: one reciprocal per row and a multiply per element (exp 4 +
    reciprocal 4 + product 1 + rounding of s 1 = the 10 u of the tolerance table's division
    budget), clamped to 1 (the approximate reciprocal can give 1 + ulp); the row's NaN rides on
    its reciprocal (or log), which a NaN-propagating min keeps: no per-element select."""
    if OP == 0:
        r = tl.where(fin, 1.0 / s, float("nan"))
        return tl.minimum(e * r[:, None], 1.0, propagate_nan=tl.PropagateNan.ALL)
    else:
        return d - tl.where(fin, tl.log(s), float("nan"))[:, None]


@triton.jit
def _online_merge(M, S, mc, sc):
    """Fold a chunk's (max mc, sum sc of exp(x - mc)) into a row's running (M, S), float64: the
    log-sum-exp merge of _merge_partials, one chunk at a time (a fixed order for a given row
    length, so results stay bitwise reproducible). A NaN on either side makes M NaN."""
    Mn = tl.maximum(M, mc)
    Mn = tl.where((M != M) | (mc != mc), float("nan"), Mn)
    fin = tl.abs(Mn) < float("inf")
    Ms = tl.where(fin, Mn, 0.0)
    w0 = tl.where(M == float("-inf"), 0.0, S * tl.exp(tl.where(fin, M, 0.0) - Ms))
    w1 = tl.where(mc == float("-inf"), 0.0, sc * tl.exp(tl.where(fin, mc, 0.0) - Ms))
    return Mn, tl.where(fin, w0 + w1, 0.0)


# The looped kernels' cache hints: the first pass's loads are kept in the caches (the second pass
# reads the row again), the second pass's loads and the outputs are the first evicted (nothing
# reads them again), so more of the rows in flight are still in L2 when their second pass comes.
# Rows of 65536 on the H200, softmax: bf16 forward 0.64 -> 0.70 of copy, backward 0.59 -> 0.61,
# float32 0.71 -> 0.80 and 0.68 -> 0.75 (docs/results.md, sources B and N); rows of 262144
# (512 KB-1 MB each, far more in flight than the L2 holds) unchanged. Results bitwise the same.
_KEEP: tl.constexpr = tl.constexpr("evict_last")
_DONE: tl.constexpr = tl.constexpr("evict_first")


@triton.jit(do_not_specialize=_NO_SPEC, do_not_specialize_on_alignment=_NO_ALIGN)
def _fwd_loop_kernel(
    X, Y, n_rows, n_cols, n1, sx0, sx1, sy0, sy1, syc,
    OP: tl.constexpr, VEC: tl.constexpr, TWO_AXES: tl.constexpr, YCOL: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """16/32-bit rows longer than one block, when there are enough rows to fill the GPU: one
    program per row loops over its BLOCK_D chunks, folding each chunk's (max, sum) into the row's
    (_online_merge), then reads the chunks again in reverse order (the last ones read are the
    likeliest still in L2) and writes them (output columns contiguous or strided, YCOL: a reduction
    over a non-last axis must take the same path as over the last one, bitwise).

    softmax and log_softmax load the next chunk before working on the current one (held as loaded
    words, widened at use), in both passes, so each program keeps two chunks in flight while it
    reduces: rows of 65536 on the H200, softmax forward bf16 0.70 -> 0.79 of copy, float32
    0.80 -> 0.90, results bitwise the same (docs/results.md, sources N and P). The last load of
    each pass is fully masked: no memory traffic. logsumexp does so for 16-bit rows only (bf16,
    rows of 65536 / 262144: 0.69 / 0.65 -> 0.71 / 0.70, sources Q and R): the held chunk's
    registers cost its float32 variant a program per SM (rows of 65536: 0.97 -> 0.76, P and Q)."""
    tl.static_assert(BLOCK_D <= 16384, "sum_exp is exact for rows of at most 2**14")
    row = tl.program_id(0).to(tl.int64) + tl.arange(0, 1)
    xrow = X + _row_off(row, n1, sx0, sx1, TWO_AXES)[:, None]
    M = tl.full([1], float("-inf"), tl.float64)
    S = tl.zeros([1], tl.float64)
    n_ck = tl.cdiv(n_cols, BLOCK_D)
    # float32 logsumexp loads each chunk as it uses it (see above); every other variant prefetches
    PREF: tl.constexpr = OP != 2 or X.dtype.element_ty.primitive_bitwidth == 16
    if not PREF:
        xw = tl.zeros([1, BLOCK_D], X.dtype.element_ty)  # not carried: each chunk is used as loaded
    else:
        cols = tl.arange(0, BLOCK_D)
        xp = xrow + cols[None, :]
        mask = (cols < n_cols)[None, :]
        if VEC:
            xp = tl.max_contiguous(tl.multiple_of(xp, [1, 16]), [1, 16])
            mask = tl.max_constancy(mask, [1, 16])
        xw = tl.load(xp, mask=mask, other=float("-inf"), eviction_policy=_KEEP)
    for i in range(0, n_ck):
        if not PREF:
            cols = i * BLOCK_D + tl.arange(0, BLOCK_D)
        else:
            cols = (i + 1) * BLOCK_D + tl.arange(0, BLOCK_D)
        xp = xrow + cols[None, :]
        mask = (cols < n_cols)[None, :]
        if VEC:
            xp = tl.max_contiguous(tl.multiple_of(xp, [1, 16]), [1, 16])
            mask = tl.max_constancy(mask, [1, 16])
        xn = tl.load(xp, mask=mask, other=float("-inf"), eviction_policy=_KEEP)
        if not PREF:
            xw = xn
        mc, sc, ms_c, d_c, e_c = _stats32(to_f32(xw), OP == 2 and X.dtype.element_ty.primitive_bitwidth == 16)
        M, S = _online_merge(M, S, mc.to(tl.float64), sc)
        xw = xn
    m = M.to(tl.float32)  # exact: M is one of the row's float32 values (or +-inf / NaN)
    s = S.to(tl.float32)
    fin = tl.abs(m) < float("inf")
    ms = tl.where(fin, m, 0.0)
    yrow = Y + _row_off(row, n1, sy0, sy1, TWO_AXES)
    if OP == 2:
        tl.store(yrow, to_out(tl.where(fin, ms + tl.log(s), m), Y.dtype.element_ty))
        return
    cols = (n_ck - 1) * BLOCK_D + tl.arange(0, BLOCK_D)
    xp = xrow + cols[None, :]
    mask = (cols < n_cols)[None, :]
    if VEC:
        xp = tl.max_contiguous(tl.multiple_of(xp, [1, 16]), [1, 16])
        mask = tl.max_constancy(mask, [1, 16])
    xw = tl.load(xp, mask=mask, other=float("-inf"), eviction_policy=_DONE)
    for j in range(0, n_ck):
        cols = (n_ck - 1 - j) * BLOCK_D + tl.arange(0, BLOCK_D)
        if YCOL == 0:
            yp = yrow[:, None] + cols[None, :]
        else:
            yp = yrow[:, None] + _col_off(cols, syc)[None, :]
        xp = xrow + (cols - BLOCK_D)[None, :]
        mask = (cols < n_cols)[None, :]
        nmask = (cols >= BLOCK_D)[None, :]
        if VEC:
            xp = tl.max_contiguous(tl.multiple_of(xp, [1, 16]), [1, 16])
            if YCOL == 0:
                yp = tl.max_contiguous(tl.multiple_of(yp, [1, 16]), [1, 16])
            mask = tl.max_constancy(mask, [1, 16])
            nmask = tl.max_constancy(nmask, [1, 16])
        xn = tl.load(xp, mask=nmask, other=float("-inf"), eviction_policy=_DONE)
        d = to_f32(xw) - ms[:, None]
        y = _y32(exp_ftz(d), d, s, fin, OP)
        tl.store(yp, to_out(y, Y.dtype.element_ty), mask=mask, eviction_policy=_DONE)
        xw = xn


@triton.jit
def _split_total(PS, PK, rows, rmask, n_chunks, NC: tl.constexpr):
    """A split row's total from its chunks' partial sums (ps_c * 2**k_c): (tot, k), exact order."""
    c = tl.arange(0, NC)
    pmask = rmask[:, None] & (c < n_chunks)[None, :]
    poff = rows[:, None] * n_chunks + c[None, :]
    kc = tl.load(PK + poff, mask=pmask, other=-1022.0)
    K = tl.max(kc, 1)
    parts = ldexp(tl.load(PS + poff, mask=pmask, other=0.0), (kc - K[:, None]).to(tl.int64))
    return sum_scaled(parts), K.to(tl.int64)


@triton.jit
def _out64(a, g, tot, k, OP: tl.constexpr):
    """float64 inputs: dx from the row sum tot * 2**k. Where the full sum is representable, the
    plain formula (small g keep every bit); where it overflows, work in units of 2**k (the result
    overflows only if the exact VJP does; there |g| * 2**-k < n + 1). softmax: also where a
    finite g - sum overflows (|g| and |sum| near the float64 maximum, opposite signs: y = 0 times
    it must give 0, not NaN; e.g. y = [1, 0], dy = [-max, max])."""
    full = ldexp(tot, k)
    plain = tl.abs(full) < float("inf")
    gs = ldexp(g, -k[:, None])
    if OP == 0:
        diff = g - full[:, None]
        fine = plain[:, None] & ((tl.abs(diff) < float("inf")) | (tl.abs(g) == float("inf")))
        dx = tl.where(fine, a * diff, ldexp(a * (gs - tot[:, None]), k[:, None]))
    else:
        ez = tl.exp(a)
        # exp(z) > 0 for z > -inf: times an infinite sum it is infinite even where exp underflows
        ez = tl.where((ez == 0.0) & (a > float("-inf")) & (tl.abs(tot) == float("inf"))[:, None], 1.0, ez)
        dx = tl.where(plain[:, None], g - ez * full[:, None], ldexp(gs - ez * tot[:, None], k[:, None]))
        dx = tl.where((ez == 0.0) & (tl.abs(tot) < float("inf"))[:, None], g, dx)  # exp(z) = 0: dx = g
    return dx


@triton.jit
def _q1_32(a, g):
    """softmax backward, 16/32-bit: (q1, max|g|), q1 the power of two g is scaled by so that
    y * g cannot overflow float32 (see _terms32)."""
    ma, mg = max2(tl.abs(a), tl.abs(g))
    return tl.minimum(tl.maximum(ebits32(ma) + ebits32(mg) - 378, 0), 126), mg


@triton.jit
def _terms32(a, g, OP: tl.constexpr):
    """16/32-bit inputs, float32 arithmetic: the row-sum terms t (y * g, or g), the row's power
    of two q1, max|g| and max|t|. q1 is 0 unless y * g could overflow float32 (|y| |g| >= 2**128):
    then g is scaled by 2**-q1 (exact but for subnormal results) and the sum scaled back in
    float64. (q1 <= 126: y * dy terms beyond 2**252 -- |y| above 2**124, not a softmax output --
    overflow.)"""
    if OP == 0:
        q1, mg = _q1_32(a, g)
        t = a * (g * pow2f(-q1)[:, None])
        return t, q1, mg, tl.max(tl.abs(t), 1)
    else:
        mg = tl.max(tl.abs(g), 1)
        return g, tl.zeros_like(ebits32(mg)), mg, mg


@triton.jit
def _out32(a, g, tot, mg, OP: tl.constexpr):
    """16/32-bit inputs, float32 arithmetic: dx from the row sum tot (float64, exact up to the
    sum's own error) and max|g| (mg). Each row is scaled by 2**-q (q = 0 unless |g| or |tot|
    reaches 2**125) so that g - tot cannot overflow, and scaled back at the end; for q = 0 the
    scalings are multiplications by 1. log_softmax: exp(z) tot is formed as exp(z + c) (tot e**-c),
    c = 0, 64 or 128 by z (z + c exact), so exp(z) below float32's range still multiplies a large
    sum (below z = -215 the product is under 2**-180 and flushes)."""
    es = exponent_above(tl.abs(tot)).to(tl.int32)
    q = tl.minimum(tl.maximum(tl.maximum(ebits32(mg) - 126, es) - 125, 0), 126)
    q = tl.where(tl.abs(tot) < float("inf"), q, 0)
    gs = g * pow2f(-q)[:, None]
    ts = tot * _pow2(-q.to(tl.int64))  # float64, exact
    if OP == 0:
        h = a * (gs - ts.to(tl.float32)[:, None])
    else:
        low = a < -64.0
        lower = a < -128.0
        c = tl.where(lower, 128.0, tl.where(low, 64.0, 0.0))
        ez = exp_ftz(a + c)
        r0 = ts.to(tl.float32)
        r64 = (ts * tl.full([1], _EXP_M64, tl.float64)).to(tl.float32)
        r128 = (ts * tl.full([1], _EXP_M128, tl.float64)).to(tl.float32)
        r = tl.where(lower, r128[:, None], tl.where(low, r64[:, None], r0[:, None]))
        prod = ez * r
        # an infinite sum: exp(z) > 0 times it is infinite even where exp flushes; exp(-inf) = 0
        # times it is NaN, as is a NaN z (as in the float64 path and the oracle)
        sinf = (tl.abs(ts) == float("inf"))[:, None]
        prod = tl.where(sinf, tl.where(a > float("-inf"), r, float("nan")), prod)
        h = gs - prod
    return h * pow2f(q)[:, None]


@triton.jit(do_not_specialize=_NO_SPEC, do_not_specialize_on_alignment=_NO_ALIGN)
def _bwd_kernel(
    A, G, DX, PS, PK,
    n_rows, n_cols, n1, sa0, sa1, sg0, sg1, sd0, sd1, sdc, n_chunks,
    OP: tl.constexpr, PHASE: tl.constexpr, F64: tl.constexpr, DCOL: tl.constexpr, VEC: tl.constexpr, TWO_AXES: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr, NC: tl.constexpr, RELOAD: tl.constexpr,
):
    """OP 0: dx = y * (g - sum(y * g)).  OP 1: dx = g - exp(z) * sum(g).  A is y or z.

    The row sum is formed as tot * 2**k (sum_parts: k the power of two above the row's largest
    term), so it cannot overflow. The output uses the plain formula where the full sum is
    representable and works in units of 2**k only where it is not (float64 rows near the overflow
    threshold), so dx is finite wherever the exact VJP is. A split row carries each chunk's
    partial sum with its own exponent (PS, PK) and merges them at the largest."""
    rows, cols = _rows_cols(BLOCK_R, BLOCK_D, PHASE)
    rmask = rows < n_rows
    mask = rmask[:, None] & (cols < n_cols)[None, :]
    other_a = 0.0 if OP == 0 else float("-inf")
    ap = A + _row_off(rows, n1, sa0, sa1, TWO_AXES)[:, None] + cols[None, :]
    gp = G + _row_off(rows, n1, sg0, sg1, TWO_AXES)[:, None] + cols[None, :]
    vmask = mask
    if VEC:
        ap = tl.max_contiguous(tl.multiple_of(ap, [1, 16]), [1, 16])
        gp = tl.max_contiguous(tl.multiple_of(gp, [1, 16]), [1, 16])
        vmask = tl.max_constancy(mask, [1, 16])
    a = tl.load(ap, mask=vmask, other=other_a)
    g = tl.load(gp, mask=vmask, other=0.0)
    if F64:
        a = a.to(tl.float64)
        g = g.to(tl.float64)
        term = a * g if OP == 0 else g
    else:
        tl.static_assert(BLOCK_D <= 16384, "sum_exact32 is exact for rows of at most 2**14")
        a = to_f32(a)
        g = to_f32(g)
        if RELOAD == 2 and OP == 0:
            # the row is read a second time for the products y * g, after the reduction that
            # sets their scaling, and a third time for the output: only the products are held
            q1, mg = _q1_32(a, g)
            # (evict_last: the load must differ from the output's reload, or the two are merged
            # and the row is held after all)
            a = to_f32(tl.load(ap, mask=vmask, other=other_a, eviction_policy="evict_last"))
            g = to_f32(tl.load(gp, mask=vmask, other=0.0, eviction_policy="evict_last"))
            term = a * (g * pow2f(-q1)[:, None])
            mt = tl.max(tl.abs(term), 1)
        else:
            term, q1, mg, mt = _terms32(a, g, OP)
    if PHASE == 2:
        tot, k = _split_total(PS, PK, rows, rmask, n_chunks, NC)
    elif F64:
        # sum(term) = tot * 2**k, k from the row's largest |term| (not |g|: scaling a small
        # y * g by a large g's exponent would round it to a subnormal)
        tot, k = sum_parts(term)
    else:
        tot = sum_exact32(term, mt) * _pow2(q1.to(tl.int64))  # float64: no overflow, exact scaling
        k = tl.zeros_like(q1)
    if PHASE == 1:
        poff = rows * n_chunks + tl.program_id(1)
        tl.store(PS + poff, tot, mask=rmask)
        tl.store(PK + poff, k.to(tl.float64), mask=rmask)
        return
    if F64:
        dx = _out64(a, g, tot, k, OP)
    else:
        if RELOAD >= 1:
            # read the row again (L1 or L2: the same bytes, so bitwise the same dx) rather than
            # hold it in float32 across the sums: fewer registers, more programs per SM
            a = to_f32(tl.load(ap, mask=vmask, other=other_a, cache_modifier=".ca"))
            g = to_f32(tl.load(gp, mask=vmask, other=0.0, cache_modifier=".ca"))
        dx = _out32(a, g, tot, mg, OP)
    doff = _row_off(rows, n1, sd0, sd1, TWO_AXES)
    if DCOL == 0:
        dp = DX + doff[:, None] + cols[None, :]
        if VEC:
            dp = tl.max_contiguous(tl.multiple_of(dp, [1, 16]), [1, 16])
    else:
        dp = DX + doff[:, None] + _col_off(cols, sdc)[None, :]
    tl.store(dp, to_out(dx, DX.dtype.element_ty), mask=vmask)


@triton.jit(do_not_specialize=_NO_SPEC, do_not_specialize_on_alignment=_NO_ALIGN)
def _bwd_loop_kernel(
    A, G, DX, n_rows, n_cols, n1, sa0, sa1, sg0, sg1, sd0, sd1, sdc,
    OP: tl.constexpr, VEC: tl.constexpr, TWO_AXES: tl.constexpr, DCOL: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """16/32-bit rows longer than one block, with enough rows to fill the GPU: one program per
    row sums its chunks' terms (each chunk exact, _numerics.sum_exact32, scaled by its 2**q1;
    the chunk totals added in float64 in a fixed order), then reads the chunks again in reverse
    order and writes dx (_out32), to contiguous or strided (DCOL) output columns."""
    tl.static_assert(BLOCK_D <= 16384, "sum_exact32 is exact for rows of at most 2**14")
    row = tl.program_id(0).to(tl.int64) + tl.arange(0, 1)
    arow = A + _row_off(row, n1, sa0, sa1, TWO_AXES)[:, None]
    grow = G + _row_off(row, n1, sg0, sg1, TWO_AXES)[:, None]
    drow = DX + _row_off(row, n1, sd0, sd1, TWO_AXES)[:, None]
    other_a = 0.0 if OP == 0 else float("-inf")
    tot = tl.zeros([1], tl.float64)
    n_ck = tl.cdiv(n_cols, BLOCK_D)
    for i in range(0, n_ck):
        cols = i * BLOCK_D + tl.arange(0, BLOCK_D)
        ap = arow + cols[None, :]
        gp = grow + cols[None, :]
        mask = (cols < n_cols)[None, :]
        if VEC:
            ap = tl.max_contiguous(tl.multiple_of(ap, [1, 16]), [1, 16])
            gp = tl.max_contiguous(tl.multiple_of(gp, [1, 16]), [1, 16])
            mask = tl.max_constancy(mask, [1, 16])
        a = to_f32(tl.load(ap, mask=mask, other=other_a, eviction_policy=_KEEP))
        g = to_f32(tl.load(gp, mask=mask, other=0.0, eviction_policy=_KEEP))
        term, q1, mg, mt = _terms32(a, g, OP)
        tot += sum_exact32(term, mt) * _pow2(q1.to(tl.int64))
    for j in range(0, n_ck):
        cols = (n_ck - 1 - j) * BLOCK_D + tl.arange(0, BLOCK_D)
        ap = arow + cols[None, :]
        gp = grow + cols[None, :]
        if DCOL == 0:
            dp = drow + cols[None, :]
        else:
            dp = drow + _col_off(cols, sdc)[None, :]
        mask = (cols < n_cols)[None, :]
        if VEC:
            ap = tl.max_contiguous(tl.multiple_of(ap, [1, 16]), [1, 16])
            gp = tl.max_contiguous(tl.multiple_of(gp, [1, 16]), [1, 16])
            if DCOL == 0:
                dp = tl.max_contiguous(tl.multiple_of(dp, [1, 16]), [1, 16])
            mask = tl.max_constancy(mask, [1, 16])
        a = to_f32(tl.load(ap, mask=mask, other=other_a, eviction_policy=_DONE))
        g = to_f32(tl.load(gp, mask=mask, other=0.0, eviction_policy=_DONE))
        dx = _out32(a, g, tot, tl.max(tl.abs(g), 1), OP)
        tl.store(dp, to_out(dx, DX.dtype.element_ty), mask=mask, eviction_policy=_DONE)


JIT_KERNELS = L.register_jit(_fwd_kernel, _bwd_kernel, _fwd_loop_kernel, _bwd_loop_kernel)
# launched through L.Launcher: after a specialization's first launch, the compiled kernel is
# called directly (less host time per call; eager calls of short kernels are host-bound)
_FWD, _BWD, _FWD_LOOP, _BWD_LOOP = (L.Launcher(k, enable_fp_fusion=False) for k in JIT_KERNELS)
_BWD_CAPPED = {}  # register cap -> the backward's Launcher with that ptxas .maxnreg (L.bwd_maxnreg)


def _bwd_launcher(maxnreg: int):
    if not maxnreg:
        return _BWD
    if maxnreg not in _BWD_CAPPED:
        _BWD_CAPPED[maxnreg] = L.Launcher(_bwd_kernel, enable_fp_fusion=False, maxnreg=maxnreg)
    return _BWD_CAPPED[maxnreg]


def _grid(cfg: L.Config, n_rows: int, phase: int):
    if phase == WHOLE:
        return (triton.cdiv(n_rows, cfg.block_r),)
    return (n_rows, cfg.n_chunks)


def _layout(plan: L.RowPlan, vec: bool, col_stride: int) -> dict:
    """The layout constexprs VEC, TWO_AXES and COL (the output column mode, YCOL / DCOL).

    Each combination is one more compiled kernel per op, dtype and block width, and the property
    suite draws them all: on a GPU its run was mostly compilation (4,843 kernels; 1,479 forward
    variants, nearly the whole product of 2 x 2 x 3 layout combinations with the ops, dtypes and
    widths). So five layouts, not twelve:
      VEC, one batch axis, contiguous output columns: the benchmarks' and most callers' tensors;
      VEC, two batch axes: permuted batch views whose rows are still aligned;
      not VEC (rows unaligned or not a multiple of 16 long), one batch axis;
      not VEC, two batch axes;
      strided output columns (a reduction over a non-last axis), not VEC, two batch axes.
    Unaligned rows keep the one-axis offsets: giving them the two-axis formula (a 64-bit
    division per row) made rows of 17 columns 1.7-4.5x slower and rows of 1,000 columns up to
    1.2x slower on an H200 (docs/tuning.md). Strided columns take the two-axis offsets, whose
    cost is small next to their strided access. For one batch axis the two-axis formula
    (n1 = n_rows, s0 = 0) gives the same offsets, and strided columns always take 64-bit
    offsets, so every layout computes the same values (bitwise layout invariance)."""
    col = COL_CONTIG if col_stride == 1 else COL_STRIDED
    vec = bool(vec) and col == COL_CONTIG
    return dict(VEC=vec, TWO_AXES=plan.n1 < plan.n_rows or col == COL_STRIDED, COL=col)


def _looped(plan: L.RowPlan, dtype: torch.dtype, device) -> bool:
    """Rows longer than one block take the looped kernels (one program per row, two passes over
    the row, the second mostly from L2) when there are enough rows to fill the GPU and the row is
    16/32-bit; otherwise the split kernels (a row's chunks in parallel programs, partials merged),
    which also serve few rows of a million columns. The choice depends on the shape only (not on
    strides), so every layout of a tensor takes the same path: results stay bitwise equal."""
    return dtype != torch.float64 and plan.n_rows >= L.loop_rows(device)


def _nc(cfg: L.Config) -> int:
    # at least 16: fewer compiled variants, and the merge of 16 partials costs nothing
    return max(16, triton.next_power_of_2(cfg.n_chunks)) if cfg.split else 1


@L.on_tensor_device
def _forward(x: torch.Tensor, dim: int, op: int, name: str) -> torch.Tensor:
    L.check_tensor("x", x, name)
    d = L.check_dim(dim, x.ndim, name)
    squeeze = x.ndim == 0
    xx = x.reshape(1) if squeeze else x
    if op == LOGSUMEXP:
        out_dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
        shape = xx.shape[:d] + xx.shape[d + 1:]
        y = torch.empty(shape, dtype=out_dtype, device=x.device)
    else:
        y = torch.empty(xx.shape, dtype=x.dtype, device=x.device)
    plan = L.plan_rows([xx], [(y, op == LOGSUMEXP)], d)
    if plan.n_rows > 0:
        if plan.n_cols == 0:
            if op == LOGSUMEXP:
                y.fill_(float("-inf"))
        else:
            _launch_fwd(plan, y, op, x.dtype)
    return y.reshape(()) if squeeze else y


def _launch_fwd(plan: L.RowPlan, y: torch.Tensor, op: int, dtype: torch.dtype) -> None:
    cfg = L.row_config(plan.n_cols, dtype, lse=op == LOGSUMEXP)
    (x,) = plan.inputs
    (sx0, sx1), = plan.in_strides
    (sy0, sy1), = plan.out_strides
    syc = plan.out_col_strides[0] or 1
    vec = L.vec_ok(plan.n_cols, (x, sx0, sx1)) and (op == LOGSUMEXP or L.vec_ok(plan.n_cols, (y, sy0, sy1)))
    lay = _layout(plan, vec, syc)
    consts = dict(F64=dtype == torch.float64, YCOL=lay["COL"], VEC=lay["VEC"], TWO_AXES=lay["TWO_AXES"],
                  BLOCK_D=cfg.block_d)
    common = dict(consts, enable_fp_fusion=False, num_warps=cfg.num_warps)  # what note_variant records
    args = (plan.n_rows, plan.n_cols, plan.n1, sx0, sx1, sy0, sy1, syc, cfg.n_chunks)
    if not cfg.split:
        L.note_variant("fwd", OP=op, PHASE=WHOLE, dtype=str(dtype), BLOCK_R=cfg.block_r, SUB=cfg.sub, **common)
        _FWD(_grid(cfg, plan.n_rows, WHOLE), (x, y, y, y) + args,
             dict(consts, OP=op, PHASE=WHOLE, BLOCK_R=cfg.block_r, NC=1, SUB=cfg.sub), cfg.num_warps)
        return
    if _looped(plan, dtype, x.device):
        chunk, warps = L.loop_config(backward=False, dtype=dtype)
        loop = dict(OP=op, VEC=common["VEC"], TWO_AXES=common["TWO_AXES"], YCOL=common["YCOL"], BLOCK_D=chunk)
        L.note_variant("fwd_loop", dtype=str(dtype), **loop)
        _FWD_LOOP((plan.n_rows,), (x, y, plan.n_rows, plan.n_cols, plan.n1, sx0, sx1, sy0, sy1, syc), loop, warps)
        return
    pm = torch.empty((plan.n_rows, cfg.n_chunks), dtype=torch.float64, device=x.device)
    ps = torch.empty_like(pm)
    nc = _nc(cfg)
    for phase in (PARTIAL, FINISH):
        # the partial phase is the same for every op (and writes no Y): one variant serves all
        # (nor its columns: YCOL is the contiguous mode there)
        opp, yy, ncp, ycol = (op, y, nc, consts["YCOL"]) if phase == FINISH else (SOFTMAX, x, 1, COL_CONTIG)
        L.note_variant("fwd", OP=opp, PHASE=phase, dtype=str(dtype), NC=ncp, **dict(common, YCOL=ycol))
        grid = (plan.n_rows, 1) if (phase == FINISH and op == LOGSUMEXP) else (plan.n_rows, cfg.n_chunks)
        _FWD(grid, (x, yy, pm, ps) + args, dict(consts, OP=opp, PHASE=phase, BLOCK_R=1, NC=ncp, SUB=1, YCOL=ycol),
             cfg.num_warps)


@L.on_tensor_device
def _backward(a: torch.Tensor, g: torch.Tensor, dim: int, op: int, name: str, a_name: str, g_name: str):
    L.check_pair(name, a_name, a, g_name, g)
    d = L.check_dim(dim, a.ndim, name)
    squeeze = a.ndim == 0
    aa, gg = (a.reshape(1), g.reshape(1)) if squeeze else (a, g)
    dx = torch.empty(aa.shape, dtype=a.dtype, device=a.device)
    plan = L.plan_rows([aa, gg], [(dx, False)], d)
    if plan.n_rows > 0 and plan.n_cols > 0:
        cfg = L.row_config(plan.n_cols, a.dtype, backward=True)
        ax, gx = plan.inputs
        (sa0, sa1), (sg0, sg1) = plan.in_strides
        (sd0, sd1), = plan.out_strides
        sdc = plan.out_col_strides[0] or 1
        vec = L.vec_ok(plan.n_cols, (ax, sa0, sa1), (gx, sg0, sg1), (dx, sd0, sd1))
        lay = _layout(plan, vec, sdc)
        consts = dict(OP=op, F64=a.dtype == torch.float64, DCOL=lay["COL"], VEC=lay["VEC"],
                      TWO_AXES=lay["TWO_AXES"], RELOAD=L.bwd_reload(a.dtype, cfg, op == LOG_SOFTMAX), BLOCK_D=cfg.block_d)
        common = dict(consts, enable_fp_fusion=False, num_warps=cfg.num_warps)  # what note_variant records
        args = (plan.n_rows, plan.n_cols, plan.n1, sa0, sa1, sg0, sg1, sd0, sd1, sdc, cfg.n_chunks)
        if not cfg.split:
            cap = L.bwd_maxnreg(a.dtype, cfg)
            L.note_variant("bwd", PHASE=WHOLE, dtype=str(a.dtype), BLOCK_R=cfg.block_r, maxnreg=cap, **common)
            _bwd_launcher(cap)(_grid(cfg, plan.n_rows, WHOLE), (ax, gx, dx, dx, dx) + args,
                               dict(consts, PHASE=WHOLE, BLOCK_R=cfg.block_r, NC=1), cfg.num_warps)
        elif _looped(plan, a.dtype, a.device):
            chunk, warps = L.loop_config(backward=True, dtype=a.dtype)
            loop = dict(OP=op, VEC=common["VEC"], TWO_AXES=common["TWO_AXES"], DCOL=common["DCOL"], BLOCK_D=chunk)
            L.note_variant("bwd_loop", dtype=str(a.dtype), **loop)
            _BWD_LOOP((plan.n_rows,), (ax, gx, dx, plan.n_rows, plan.n_cols, plan.n1, sa0, sa1, sg0, sg1, sd0, sd1, sdc),
                      loop, warps)
        else:
            ps = torch.empty((plan.n_rows, cfg.n_chunks), dtype=torch.float64, device=a.device)
            pk = torch.empty_like(ps)
            # the partials as a [1, NC] tile, NC the chunk count's power of two: read at BLOCK_D
            # width instead, the 16384-wide float64 tile takes phase 2 to 128 registers and 552
            # bytes of spill stores per thread (ptxas -v, triton 3.6, sm_90a), 4.55 GB of
            # local-memory writes for a 0.5 GB output on the H200 (ncu, 256 x 2**20 bf16: phase 2
            # 2.34 ms of 2.72).
            # At NC = 64: 114 registers, no spills, and 16 shared stores in the PTX, as at 16384.
            nc = _nc(cfg)
            for phase in (PARTIAL, FINISH):
                # the partial phase writes no dx: its column mode is the contiguous one
                ncp, dcol = (nc, consts["DCOL"]) if phase == FINISH else (1, COL_CONTIG)
                L.note_variant("bwd", PHASE=phase, dtype=str(a.dtype), NC=ncp, **dict(common, DCOL=dcol))
                _BWD((plan.n_rows, cfg.n_chunks), (ax, gx, dx, ps, pk) + args,
                     dict(consts, PHASE=phase, BLOCK_R=1, NC=ncp, DCOL=dcol), cfg.num_warps)
    return dx.reshape(()) if squeeze else dx


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """softmax(x) along dim; output has x's dtype and shape, freshly allocated and contiguous."""
    return _forward(x, dim, SOFTMAX, "softmax")


def log_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """log(softmax(x)) along dim; output has x's dtype and shape."""
    return _forward(x, dim, LOG_SOFTMAX, "log_softmax")


def logsumexp(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """log(sum(exp(x))) along dim (removed from the shape); float32 for 16/32-bit x, float64 for float64."""
    return _forward(x, dim, LOGSUMEXP, "logsumexp")


def softmax_backward(y: torch.Tensor, dy: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """VJP of softmax given its output y and the cotangent dy: dx = y * (dy - sum(y * dy))."""
    return _backward(y, dy, dim, SOFTMAX, "softmax_backward", "y", "dy")


def log_softmax_backward(z: torch.Tensor, dz: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """VJP of log_softmax given its output z and the cotangent dz: dx = dz - exp(z) * sum(dz)."""
    return _backward(z, dz, dim, LOG_SOFTMAX, "log_softmax_backward", "z", "dz")
