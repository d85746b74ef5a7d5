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
a copy's worth of traffic. A program holds a [BLOCK_R, BLOCK_D] tile of output rows. It reads its
rows' S lse values twice (their max, then the sum D) and once more per block of BLOCK_D columns,
where they come from the cache (S lse per row against S * Dv values of o), then streams the S
value tiles of each column block, accumulating the weighted sum in registers (no rescaling: the
weights are final once M and D are known), and writes o and lse once.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import _launch as L
from ._merge import _lse_dtype, _row_off
from ._numerics import to_out, widen

_INTS = ["n_rows", "n_states", "n_cols", "n1", "so0", "so1", "sos", "sl0", "sl1", "sls", "sout0", "sout1",
         "slo0", "slo1"]
_PTRS = ["O", "LSE", "OUT", "LO"]


@triton.jit
def _lse_tile(lrow, st, rmask, sls, n_states, CT: tl.constexpr):
    """The lse of states st (a [BLOCK_S] range) of a tile's rows, as a [BLOCK_S, BLOCK_R] tile in
    the compute type; -inf past the last state (an empty state) and for rows past the end. Every
    state's lse is reached by stepping a 64-bit pointer (s * sls, 64-bit), not a 32-bit product."""
    lp = lrow[None, :] + st.to(tl.int64)[:, None] * sls
    return tl.load(lp, mask=(st < n_states)[:, None] & rmask[None, :], other=float("-inf")).to(CT)


@triton.jit
def _weighted_sum(lv, x, fin, ms, inv, F64: tl.constexpr):
    """sum over the states axis (axis 0, held in each thread) of w x for a [BLOCK_S, BLOCK_R,
    BLOCK_D] value tile, w = exp(lse - M) / D; 0 where the state is empty (a select: the values of
    an empty state never enter the arithmetic)."""
    live = fin[None, :] & (lv > float("-inf"))  # NaN compares False
    w = tl.where(live, tl.exp(tl.where(live, lv, 0.0) - ms[None, :]) * inv[None, :], 0.0)
    return tl.sum(tl.where(live[:, :, None], w[:, :, None] * widen(x, F64), 0.0), 0)


@triton.jit(do_not_specialize=_INTS, do_not_specialize_on_alignment=_INTS + _PTRS)
def _merge_states_kernel(
    O, LSE, OUT, LO,
    n_rows, n_states, n_cols, n1,
    so0, so1, sos, sl0, sl1, sls, sout0, sout1, slo0, slo1,
    F64: tl.constexpr, TWO_AXES: tl.constexpr, VEC: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_S: tl.constexpr, ONE_BLOCK: tl.constexpr, ONE_TILE: tl.constexpr,
):
    """A [BLOCK_R, BLOCK_D] tile of output rows. The states come in blocks of BLOCK_S: their lse
    as one [BLOCK_S, BLOCK_R] tile and their values as one [BLOCK_S, BLOCK_R, BLOCK_D] tile, the
    states axis held in each thread and summed there. ONE_BLOCK (S <= BLOCK_S, the common case):
    the lse tile and the value tile are loaded together, at the top, one round trip to memory
    per program, and the lse tile serves the max, the sum D and the weights; otherwise the lse
    blocks are read for the max, again for D and once more with each value block (from the
    cache), the weights final before any value is read (no rescaling). ONE_TILE: one state block
    and one column block (Dv <= BLOCK_D): no loop at all."""
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = rows < n_rows
    lrow = LSE + _row_off(rows, n1, sl0, sl1, TWO_AXES)
    st = tl.arange(0, BLOCK_S)
    # element offsets of the value tile (64-bit: the states axis may be outermost in memory)
    soff = st.to(tl.int64)[:, None, None] * sos
    orow = _row_off(rows, n1, so0, so1, TWO_AXES)[None, :, None]
    dst = (OUT + _row_off(rows, n1, sout0, sout1, TWO_AXES))[:, None]
    cols0 = tl.arange(0, BLOCK_D)
    if ONE_TILE:
        # values first: their loads do not wait for the lse (an empty state's values are read
        # too, then dropped by the select in _weighted_sum, so NaN there never reaches the sum)
        vmask = (st < n_states)[:, None, None] & rmask[None, :, None] & (cols0 < n_cols)[None, None, :]
        vp = O + (soff + orow + cols0[None, None, :])
        if VEC:
            vp = tl.max_contiguous(tl.multiple_of(vp, [1, 1, 16]), [1, 1, 16])
            vmask = tl.max_constancy(vmask, [1, 1, 16])
        x_first = tl.load(vp, mask=vmask, other=0.0)
    if ONE_BLOCK:
        lv = _lse_tile(lrow, st, rmask, sls, n_states, CT)
        # M: the largest lse that is not NaN (a NaN lse is flagged instead); -inf when all are empty
        nan_in = tl.max((lv != lv).to(tl.int32), 0) > 0
        m = tl.max(tl.where(lv != lv, float("-inf"), lv), 0)
    else:
        m = tl.full([BLOCK_R], float("-inf"), CT)
        has_nan = tl.zeros([BLOCK_R], tl.int32)
        for s0 in range(0, n_states, BLOCK_S):
            lb = _lse_tile(lrow, s0 + st, rmask, sls, n_states, CT)
            has_nan = tl.maximum(has_nan, tl.max((lb != lb).to(tl.int32), 0))
            m = tl.maximum(m, tl.max(tl.where(lb != lb, float("-inf"), lb), 0))
        nan_in = has_nan > 0
    fin = (m > float("-inf")) & (m < float("inf"))
    ms = tl.where(fin, m, 0.0)
    if ONE_BLOCK:
        live = fin[None, :] & (lv > float("-inf"))  # NaN compares False
        den = tl.sum(tl.where(live, tl.exp(tl.where(live, lv, 0.0) - ms[None, :]), 0.0), 0)
    else:
        den = tl.zeros([BLOCK_R], CT)
        for s0 in range(0, n_states, BLOCK_S):
            lb = _lse_tile(lrow, s0 + st, rmask, sls, n_states, CT)
            live = fin[None, :] & (lb > float("-inf"))
            den += tl.sum(tl.where(live, tl.exp(tl.where(live, lb, 0.0) - ms[None, :]), 0.0), 0)
    den1 = tl.where(fin, den, 1.0)  # D >= 1 where M is finite: the state holding M adds exp(0)
    lse = tl.where(fin, ms + tl.log(den1), m)
    lse = tl.where(nan_in, float("nan"), lse)
    tl.store(LO + _row_off(rows, n1, slo0, slo1, TWO_AXES), lse.to(LO.dtype.element_ty), mask=rmask)
    inv = 1.0 / den1
    poison = nan_in | (m == float("inf"))
    for start in range(0, n_cols, BLOCK_D):
        cols = start + cols0
        cmask = rmask[:, None] & (cols < n_cols)[None, :]
        if ONE_BLOCK:
            if ONE_TILE:
                x = x_first
            else:
                vmask = (st < n_states)[:, None, None] & cmask[None, :, :]
                vp = O + (soff + orow + cols[None, None, :])
                if VEC:
                    vp = tl.max_contiguous(tl.multiple_of(vp, [1, 1, 16]), [1, 1, 16])
                    vmask = tl.max_constancy(vmask, [1, 1, 16])
                x = tl.load(vp, mask=vmask, other=0.0)
            acc = _weighted_sum(lv, x, fin, ms, inv, F64)
        else:
            acc = tl.zeros([BLOCK_R, BLOCK_D], CT)
            for s0 in range(0, n_states, BLOCK_S):
                vmask = ((s0 + st) < n_states)[:, None, None] & cmask[None, :, :]
                vp = O + ((s0 + st).to(tl.int64)[:, None, None] * sos + orow + cols[None, None, :])
                if VEC:
                    vp = tl.max_contiguous(tl.multiple_of(vp, [1, 1, 16]), [1, 1, 16])
                    vmask = tl.max_constancy(vmask, [1, 1, 16])
                x = tl.load(vp, mask=vmask, other=0.0)
                lb = _lse_tile(lrow, s0 + st, rmask, sls, n_states, CT)
                acc += _weighted_sum(lb, x, fin, ms, inv, F64)
        v = tl.where(poison[:, None], float("nan"), acc)  # all empty: acc stayed 0
        out = dst + cols[None, :]
        if VEC:
            out = tl.max_contiguous(tl.multiple_of(out, [1, 16]), [1, 16])
            cmask = tl.max_constancy(cmask, [1, 16])
        tl.store(out, to_out(v, OUT.dtype.element_ty), mask=cmask)


JIT_KERNELS = (_merge_states_kernel,)


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


def _tile(n_states: int, n_cols: int, dtype: torch.dtype):
    """(BLOCK_R, BLOCK_D, BLOCK_S, num_warps): blocks of up to 8 states (4 for float64: a float64
    tile holds twice the bytes), a value tile of MERGE_KERNELS_STATES_TILE elements (states
    included) per program, one warp per MERGE_KERNELS_STATES_PER_WARP of them; BLOCK_D the row
    length (at least 16) up to the tile's share of one state block."""
    bs = min(triton.next_power_of_2(max(n_states, 1)), 4 if dtype == torch.float64 else 8)
    te = int(L.knob("MERGE_KERNELS_STATES_TILE", 8192 if dtype.itemsize <= 2 else 4096))
    per_warp = int(L.knob("MERGE_KERNELS_STATES_PER_WARP", 2048 if dtype.itemsize <= 2 else 1024))
    row_tile = max(16, te // bs)
    bd = min(row_tile, max(16, triton.next_power_of_2(max(n_cols, 1))))
    br = max(1, row_tile // bd)
    return br, bd, bs, L._warps(bs * br * bd, per_warp)


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
    br, bd, bs, warps = _tile(n_states, n_cols, o.dtype)
    two = n1 < n_rows
    one = n_states <= bs
    one_tile = one and n_cols <= bd
    L.note_variant("merge_states", dtype=str(o.dtype), BLOCK_R=br, BLOCK_D=bd, BLOCK_S=bs, ONE_BLOCK=one,
                   ONE_TILE=one_tile, TWO_AXES=two)
    so, sl, sout, slo = pairs
    # 16-byte vectors: every row of every state (and of the output) starts 16-byte aligned and Dv
    # is a multiple of 16
    vec = (L.vec_ok(n_cols, (o2, *so), (out, *sout)) and (o2.stride(-2) * o2.element_size()) % 16 == 0)
    _merge_states_kernel[(triton.cdiv(n_rows, br),)](
        o2, l2, out, lse_out, n_rows, n_states, n_cols, n1,
        *so, o2.stride(-2), *sl, l2.stride(-1), *sout, *slo,
        F64=o.dtype == torch.float64, TWO_AXES=two, VEC=vec, BLOCK_R=br, BLOCK_D=bd, BLOCK_S=bs, ONE_BLOCK=one,
        ONE_TILE=one_tile, num_warps=warps)
    return out, lse_out
