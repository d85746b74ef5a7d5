"""attention_merge with several rows per program that takes one stabilising shift for the whole
tile, the max of every row's two lse (axis=None), instead of max(lse_a, lse_b) per row: a row's
weights then depend on its neighbours (an infinite or NaN lse elsewhere in the tile poisons it,
and rows whose lse lie far below the tile's max underflow to 0/0). The bug class of a reduction
over the wrong axis (tile_wide_max and backward_row_coupling are the softmax ones)."""
import math

import torch
import triton
import triton.language as tl

from softmax_properties.kernels._launch import check_tensor
from softmax_properties.kernels._numerics import to_out

BLOCK_R = 4


@triton.jit
def _kernel(OA, LA, OB, LB, O, LO, n_rows, d, F64: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK: tl.constexpr):
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = rows < n_rows
    cols = tl.arange(0, BLOCK)
    mask = rmask[:, None] & (cols < d)[None, :]
    la = tl.load(LA + rows, mask=rmask, other=float("-inf")).to(CT)
    lb = tl.load(LB + rows, mask=rmask, other=float("-inf")).to(CT)
    m = tl.max(tl.maximum(la, lb), 0)  # BUG: per row is tl.maximum(la, lb)
    ms = tl.where(m == float("-inf"), 0.0, m)
    ea = tl.exp(la - ms)
    eb = tl.exp(lb - ms)
    s = ea + eb
    lse = ms + tl.log(s)
    off = rows[:, None] * d + cols[None, :]
    oa = tl.load(OA + off, mask=mask & (ea > 0)[:, None], other=0.0).to(CT)
    ob = tl.load(OB + off, mask=mask & (eb > 0)[:, None], other=0.0).to(CT)
    o = (ea / s)[:, None] * oa + (eb / s)[:, None] * ob
    o = tl.where((s == 0.0)[:, None], 0.0, o)
    tl.store(LO + rows, lse.to(LO.dtype.element_ty), mask=rmask)
    tl.store(O + off, to_out(o, O.dtype.element_ty), mask=mask)


def attention_merge(o_a, lse_a, o_b, lse_b):
    for n, t in (("o_a", o_a), ("lse_a", lse_a), ("o_b", o_b), ("lse_b", lse_b)):
        check_tensor(n, t, "attention_merge")
    d = o_a.shape[-1]
    rows = math.prod(o_a.shape[:-1]) if o_a.ndim else 1
    a2, b2 = o_a.contiguous().reshape(rows, d), o_b.contiguous().reshape(rows, d)
    l1, l2 = lse_a.contiguous().reshape(-1), lse_b.contiguous().reshape(-1)
    out = torch.empty((rows, d), dtype=o_a.dtype, device=o_a.device)
    lse = torch.empty(l1.shape, dtype=lse_a.dtype, device=o_a.device)
    if rows:
        _kernel[(triton.cdiv(rows, BLOCK_R),)](a2, l1, b2, l2, out, lse, rows, d, F64=o_a.dtype == torch.float64,
                                               BLOCK_R=BLOCK_R, BLOCK=max(16, triton.next_power_of_2(max(d, 1))))
    return out.reshape(o_a.shape), lse.reshape(lse_a.shape)


OP = "attention_merge"  # the op it breaks: one shift for a tile of rows
CAUGHT_BY = ('merge_row_independence', 'merge_row_independence_bitwise')  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
