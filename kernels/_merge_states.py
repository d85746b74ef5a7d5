"""``merge_states``: the N-way merge of S (attention output, logsumexp) states at once, as cascade
and split-KV attention do: o (..., S, Dv) and lse (..., S) -> (o (..., Dv), lse (...)),

    lse = M + log(D),  D = sum_s exp(lse_s - M),  M = max_s lse_s,   o = sum_s (exp(lse_s - M) / D) o_s

(oracles/merge.py, ``merge_states``, is the FP64 truth). The max-subtracted form: every
exponent is <= 0 and nothing overflows or underflows whatever the lse's magnitude, from
-finfo.max to +finfo.max (a running max that starts at a finite "minus infinity" such as -5e4
turns states below it into zero weights). Edge rows follow MERGE_SEMANTICS (oracles/semantics.py)
for any S: an empty state (lse = -inf) is never read (its o may hold anything, NaN included: the
weighted sum selects, it does not multiply by zero); all states empty gives o = 0 and
lse = -inf; a NaN lse poisons the row (NaN o, lse NaN), else a +inf lse gives NaN o and
lse = +inf. Arithmetic in float32 (float64 for float64 o), the output rounded once.

Bytes: the kernel reads each o_s once and writes o once, S * Dv * s + Dv * s per row (s the
element size; benchmarks/cases_merge.py counts these), plus 4 S + 4 bytes of lse (8 for float64):
a copy's worth of traffic. A program holds a [BLOCK_R, BLOCK_D] tile of output rows and streams
the S value tiles of each column block, two states per step with both tiles loaded before either
is used, accumulating the weighted sum in registers (no rescaling: the weights are final once M
and D are known), and writes o and lse once. How it gets the weights:

* held (SB > 0, S up to STATES_HELD / BLOCK_R states): the rows' S lse in
  one [BLOCK_R, SB] load (SB = S rounded up to a power of two, at least 2), their max and sum as
  reductions of that tile, and the weights w_s = exp(lse_s - M) / D kept in it (NaN marking an
  empty state), picked out per state in the column loop. One memory round trip before the values
  (bf16 S = 8: 0.95 of copy on an H200, where the looped form below reads 0.79).
* looped (SB = 0, more states): one load per state for M, again for D, and again
  per state and column block (from the cache), the weight recomputed from it.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import _launch as L
from . import tuning as T
from ._merge import _lse_dtype, _row_off
from ._numerics import to_out, widen

_INTS = ["n_rows", "n_states", "n_cols", "n1", "so0", "so1", "sos", "sl0", "sl1", "sls", "sout0", "sout1",
         "slo0", "slo1"]
_PTRS = ["O", "LSE", "OUT", "LO"]


@triton.jit
def _weighted(lv, x, fin, ms, inv, F64: tl.constexpr):
    """w x for one state's tile, w = exp(lse - M) / D; 0 where the state is empty (a select: the
    values of an empty state never enter the arithmetic)."""
    live = fin & (lv > float("-inf"))  # NaN compares False
    w = tl.where(live, tl.exp(tl.where(live, lv, 0.0) - ms) * inv, 0.0)
    return tl.where(live[:, None], w[:, None] * widen(x, F64), 0.0)


@triton.jit
def _pick(wt, sidx, s):
    """The rows' weights of state s from the [BLOCK_R, SB] weight tile (NaN: the state is empty)."""
    return tl.sum(tl.where(sidx[None, :] == s, wt, 0.0), axis=1)


@triton.jit
def _held_weighted(w, x, F64: tl.constexpr):
    """w x for one state's tile; 0 where w is NaN (an empty state: a select, so its values never
    enter the arithmetic)."""
    return tl.where((w == w)[:, None], w[:, None] * widen(x, F64), 0.0)


@triton.jit(do_not_specialize=_INTS, do_not_specialize_on_alignment=_INTS + _PTRS)
def _merge_states_kernel(
    O, LSE, OUT, LO,
    n_rows, n_states, n_cols, n1,
    so0, so1, sos, sl0, sl1, sls, sout0, sout1, slo0, slo1,
    F64: tl.constexpr, TWO_AXES: tl.constexpr, VEC: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr,
    SB: tl.constexpr,
):
    """SB > 0: the weights held in a [BLOCK_R, SB] tile (SB >= n_states); SB = 0: looped."""
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = rows < n_rows
    lrow = LSE + _row_off(rows, n1, sl0, sl1, TWO_AXES)
    # M: the largest lse that is not NaN (a NaN lse is flagged instead); -inf when all are empty
    if SB > 0:
        # the rows' S lse in one load (states past S read as empty); M and D reduce the tile
        sidx = tl.arange(0, SB)
        lt = tl.load(lrow[:, None] + sidx.to(tl.int64)[None, :] * sls,
                     mask=rmask[:, None] & (sidx[None, :] < n_states), other=float("-inf")).to(CT)
        isnan = lt != lt
        nan_in = tl.max(isnan.to(tl.int32), axis=1) > 0
        m = tl.max(tl.where(isnan, float("-inf"), lt), axis=1)
        fin = (m > float("-inf")) & (m < float("inf"))
        ms = tl.where(fin, m, 0.0)
        live = fin[:, None] & (lt > float("-inf"))  # NaN compares False
        e = tl.where(live, tl.exp(tl.where(live, lt, 0.0) - ms[:, None]), 0.0)
        den = tl.sum(e, axis=1)
    else:
        # every state is reached by stepping a pointer (64-bit) rather than by s * stride, which
        # overflows 32 bits where the states axis is outermost in memory
        m = tl.full([BLOCK_R], float("-inf"), CT)
        has_nan = tl.zeros([BLOCK_R], tl.int32)
        lp = lrow
        for s in range(0, n_states):
            lv = tl.load(lp, mask=rmask, other=float("-inf")).to(CT)
            lp += sls
            has_nan = tl.maximum(has_nan, (lv != lv).to(tl.int32))
            m = tl.maximum(m, tl.where(lv != lv, float("-inf"), lv))
        nan_in = has_nan > 0
        fin = (m > float("-inf")) & (m < float("inf"))
        ms = tl.where(fin, m, 0.0)
        den = tl.zeros([BLOCK_R], CT)
        lp = lrow
        for s in range(0, n_states):
            lv = tl.load(lp, mask=rmask, other=float("-inf")).to(CT)
            lp += sls
            live = fin & (lv > float("-inf"))  # NaN compares False
            den += tl.where(live, tl.exp(tl.where(live, lv, 0.0) - ms), 0.0)
    den1 = tl.where(fin, den, 1.0)  # D >= 1 where M is finite: the state holding M adds exp(0)
    lse = tl.where(fin, ms + tl.log(den1), m)
    lse = tl.where(nan_in, float("nan"), lse)
    tl.store(LO + _row_off(rows, n1, slo0, slo1, TWO_AXES), lse.to(LO.dtype.element_ty), mask=rmask)
    inv = 1.0 / den1
    if SB > 0:
        wt = tl.where(live, e * inv[:, None], float("nan"))
    poison = nan_in | (m == float("inf"))
    orow = _row_off(rows, n1, so0, so1, TWO_AXES)[:, None]
    dst = (OUT + _row_off(rows, n1, sout0, sout1, TWO_AXES))[:, None]
    for start in range(0, n_cols, BLOCK_D):
        cols = (start + tl.arange(0, BLOCK_D))[None, :]
        mask = rmask[:, None] & (cols < n_cols)
        if VEC:
            mask = tl.max_constancy(mask, [1, 16])
        acc = tl.zeros([BLOCK_R, BLOCK_D], CT)
        lp = lrow
        ooff = orow + cols  # element offsets of state 0's tile; state s adds s * sos, stepped in 64 bits
        step = tl.zeros([], tl.int64)
        # two states per iteration, both tiles loaded before either is used (as attention_merge
        # reads its two states): twice the loads in flight per warp of a one-state loop. An empty
        # state's values are read too (a load masked by its lse would wait for the lse) and then
        # dropped by a select, so NaN there never reaches the sum. The vector hints are made at
        # each load: the stepped pointer itself carries no alignment
        for k in range(0, n_states // 2):
            pa = O + (ooff + step)
            pb = O + (ooff + (step + sos))
            if VEC:
                pa = tl.max_contiguous(tl.multiple_of(pa, [1, 16]), [1, 16])
                pb = tl.max_contiguous(tl.multiple_of(pb, [1, 16]), [1, 16])
            xa = tl.load(pa, mask=mask, other=0.0)
            xb = tl.load(pb, mask=mask, other=0.0)
            if SB > 0:
                acc += _held_weighted(_pick(wt, sidx, 2 * k), xa, F64) + _held_weighted(_pick(wt, sidx, 2 * k + 1), xb, F64)
            else:
                la = tl.load(lp, mask=rmask, other=float("-inf")).to(CT)
                lb = tl.load(lp + sls, mask=rmask, other=float("-inf")).to(CT)
                acc += _weighted(la, xa, fin, ms, inv, F64) + _weighted(lb, xb, fin, ms, inv, F64)
                lp += sls
                lp += sls
            step += sos
            step += sos
        if n_states % 2:
            pa = O + (ooff + step)
            if VEC:
                pa = tl.max_contiguous(tl.multiple_of(pa, [1, 16]), [1, 16])
            xa = tl.load(pa, mask=mask, other=0.0)
            if SB > 0:
                acc += _held_weighted(_pick(wt, sidx, n_states - 1), xa, F64)
            else:
                acc += _weighted(tl.load(lp, mask=rmask, other=float("-inf")).to(CT), xa, fin, ms, inv, F64)
        v = tl.where(poison[:, None], float("nan"), acc)  # all empty: acc stayed 0
        out = dst + cols
        if VEC:
            out = tl.max_contiguous(tl.multiple_of(out, [1, 16]), [1, 16])
        tl.store(out, to_out(v, OUT.dtype.element_ty), mask=mask)


JIT_KERNELS = L.register_jit(_merge_states_kernel)


def _check(o, lse):
    """o (..., S, Dv) of a float dtype with S >= 1; lse of shape o.shape[:-1] in float32 (float64
    for float64 o); one device (CUDA, or CPU under the interpreter)."""
    name = "merge_states"
    L.check_tensor("o", o, name)
    L.check_tensor("lse", lse, name)
    if o.ndim < 2:
        raise ValueError(f"{name}: o must have shape (..., S, Dv) with a states axis -2, got a {o.ndim}-d tensor")
    if o.shape[-2] < 1:
        raise ValueError(f"{name}: o must hold at least one state (S = o.shape[-2] >= 1), got shape {tuple(o.shape)}")
    want = _lse_dtype(o.dtype)
    if lse.dtype != want:
        raise TypeError(f"{name}: lse.dtype must be {want} (the logsumexp dtype for o.dtype={o.dtype}), got {lse.dtype}")
    if tuple(lse.shape) != tuple(o.shape[:-1]):
        raise ValueError(f"{name}: lse must have shape {tuple(o.shape[:-1])} (o.shape without its last axis; use "
                         f".expand() to broadcast), got {tuple(lse.shape)}")
    if lse.device != o.device:
        raise ValueError(f"{name}: o and lse must be on the same device, got {o.device} and {lse.device}")


def _plan(o, lse, out, lse_out):
    """Batch axes collapsed to at most two (size, stride) pairs shared by o, lse and the outputs
    (o and lse made contiguous when they cannot be; o also when its last axis is not
    unit-stride). Returns (n_rows, n1, o, lse, [(s0, s1)] for o, lse, out, lse_out)."""
    if o.shape[-1] > 1 and o.stride(-1) != 1:
        o = o.contiguous()
    batch = list(o.shape[:-2])
    n_rows = 1
    for n in batch:
        n_rows *= n
    for attempt in range(2):
        strides = [list(o.stride()[:-2]), list(lse.stride()[:-1]), list(out.stride()[:-1]), list(lse_out.stride())]
        dims = L._collapse(batch, strides)
        if len(dims) <= 2:
            break
        o, lse = o.contiguous(), lse.contiguous()
    n1, pairs = L.row_pairs(dims, 4)
    return n_rows, n1, o, lse, pairs


def _tile(n_cols: int):
    """(BLOCK_R, BLOCK_D, num_warps): tiles of 1024 elements, one warp per 256, as
    attention_merge (kernels/_merge.py, _tile: swept on the H200 for the two-state merge); BLOCK_D
    the row length (at least 16, at most the tile). MERGE_KERNELS_STATES_TILE and
    MERGE_KERNELS_STATES_PER_WARP override them (tuning knobs)."""
    te = int(L.knob("MERGE_KERNELS_STATES_TILE", T.STATES_TILE))
    per_warp = int(L.knob("MERGE_KERNELS_STATES_PER_WARP", T.STATES_PER_WARP))
    bd = min(te, max(16, triton.next_power_of_2(max(n_cols, 1))))
    br = max(1, te // bd)
    return br, bd, L._warps(br * bd, per_warp)


@L.on_tensor_device
def merge_states(o: torch.Tensor, lse: torch.Tensor):
    """Merge S partial attention states over disjoint key sets at once: o (..., S, Dv) of a float
    dtype, lse (..., S) float32 (float64 for float64 o), any strides (stride 0 included), S >= 1.
    Returns fresh contiguous (o (..., Dv) in o's dtype, lse (...)). lse = -inf marks an empty state
    (its o is never read); all states empty gives o = 0, lse = -inf."""
    _check(o, lse)
    batch = tuple(o.shape[:-2])
    n_states, n_cols = o.shape[-2], o.shape[-1]
    out = torch.empty(batch + (n_cols,), dtype=o.dtype, device=o.device)
    lse_out = torch.empty(batch, dtype=lse.dtype, device=o.device)
    n_rows, n1, o2, l2, pairs = _plan(o, lse, out, lse_out)
    if n_rows == 0:
        return out, lse_out
    br, bd, warps = _tile(n_cols)
    two = n1 < n_rows
    # the weights held in registers: a [BLOCK_R, SB] tile of at most STATES_HELD elements. SB is at
    # least 2: with one state Triton 3.6 fails to compile the float64 kernel of 32 or 64 rows and
    # two batch axes (TritonGPURemoveLayoutConversions on the [BLOCK_R, 1] tile). SB = 0: looped
    sb = max(2, triton.next_power_of_2(n_states))
    most = T.STATES_HELD_INTERPRETER if L.interpreting() else T.STATES_HELD
    if br * sb > int(L.knob("MERGE_KERNELS_STATES_HELD", most)):
        sb = 0
    L.note_variant("merge_states", dtype=str(o.dtype), BLOCK_R=br, BLOCK_D=bd, TWO_AXES=two, SB=sb)
    so, sl, sout, slo = pairs
    # 16-byte vectors: every row of every state (and of the output) starts 16-byte aligned and Dv
    # is a multiple of 16
    vec = (L.vec_ok(n_cols, (o2, *so), (out, *sout)) and (o2.stride(-2) * o2.element_size()) % 16 == 0)
    _merge_states_kernel[(triton.cdiv(n_rows, br),)](
        o2, l2, out, lse_out, n_rows, n_states, n_cols, n1,
        *so, o2.stride(-2), *sl, l2.stride(-1), *sout, *slo,
        F64=o.dtype == torch.float64, TWO_AXES=two, VEC=vec, BLOCK_R=br, BLOCK_D=bd, SB=sb,
        num_warps=warps, **L.DEFAULT_OPTIONS)
    return out, lse_out
