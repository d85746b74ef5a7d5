"""softmax backward whose dot product is taken over the whole batch (axis=None over a 2-row tile)
instead of per row: rows leak into each other."""
import torch
import triton
import triton.language as tl

from softmax_properties.kernels._launch import check_pair
from softmax_properties.kernels._numerics import to_out

from ._base import rows_of


@triton.jit
def _kernel(Yp, G, DX, n_rows, n, F64: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK: tl.constexpr):
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, BLOCK)
    mask = (rows < n_rows)[:, None] & (cols < n)[None, :]
    off = rows[:, None] * n + cols[None, :]
    y = tl.load(Yp + off, mask=mask, other=0.0).to(CT)
    g = tl.load(G + off, mask=mask, other=0.0).to(CT)
    dot = tl.sum(tl.sum(y * g, 1), 0)  # BUG: per row is tl.sum(y * g, 1)[:, None]
    tl.store(DX + off, to_out(y * (g - dot), DX.dtype.element_ty), mask=mask)


def softmax_backward(y, dy):
    check_pair("softmax_backward", "y", y, "dy", dy)
    y2, g2 = rows_of(y), rows_of(dy)
    dx = torch.empty_like(y2)
    if y2.numel():
        _kernel[(triton.cdiv(y2.shape[0], 2),)](y2, g2, dx, y2.shape[0], y2.shape[1], F64=y.dtype == torch.float64, BLOCK_R=2,
                                                 BLOCK=max(16, triton.next_power_of_2(y2.shape[1])))
    return dx.reshape(y.shape)


OP = "softmax_backward"  # the op it breaks
CAUGHT_BY = ('row_independence',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
