"""softmax with several rows per program whose max is taken over the whole tile instead of per
row (axis=None): shift invariance hides it until a row's logits sit far below another row's,
then that row underflows to 0/0."""
import torch
import triton
import triton.language as tl

from softmax_properties.kernels._launch import check_tensor
from softmax_properties.kernels._numerics import to_out

from ._base import rows_of


@triton.jit
def _kernel(X, Y, n_rows, n, F64: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK: tl.constexpr):
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, BLOCK)
    mask = (rows < n_rows)[:, None] & (cols < n)[None, :]
    off = rows[:, None] * n + cols[None, :]
    x = tl.load(X + off, mask=mask, other=float("-inf")).to(CT)
    m = tl.max(tl.max(x, 1), 0)  # BUG: one max for the whole tile
    e = tl.exp(x - m)
    tl.store(Y + off, to_out(e / tl.sum(e, 1)[:, None], Y.dtype.element_ty), mask=mask)


def softmax(x):
    check_tensor("x", x, "softmax")
    x2 = rows_of(x)
    y = torch.empty_like(x2)
    if x2.numel():
        _kernel[(triton.cdiv(x2.shape[0], 4),)](x2, y, x2.shape[0], x2.shape[1], F64=x.dtype == torch.float64, BLOCK_R=4,
                                                 BLOCK=max(16, triton.next_power_of_2(x2.shape[1])))
    return y.reshape(x.shape)


OP = "softmax"  # the op it breaks
CAUGHT_BY = ('row_independence',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
