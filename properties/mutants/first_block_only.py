"""softmax that handles only the first 1024 columns of a row (the loop over blocks was never
written): longer rows keep whatever the output allocation held."""
import torch
import triton
import triton.language as tl

from softmax_properties.kernels._launch import check_tensor
from softmax_properties.kernels._numerics import to_out

from ._base import rows_of


@triton.jit
def _kernel(X, Y, n, F64: tl.constexpr, BLOCK: tl.constexpr):
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * n + cols, mask=cols < n, other=float("-inf")).to(CT)
    e = tl.exp(x - tl.max(x, 0))
    tl.store(Y + row * n + cols, to_out(e / tl.sum(e, 0), Y.dtype.element_ty), mask=cols < n)


def softmax(x):
    check_tensor("x", x, "softmax")
    x2 = rows_of(x)
    y = torch.empty_like(x2)
    if x2.numel():
        block = min(1024, max(16, triton.next_power_of_2(x2.shape[1])))  # BUG: capped, no loop
        _kernel[(x2.shape[0],)](x2, y, x2.shape[1], F64=x.dtype == torch.float64, BLOCK=block)
    return y.reshape(x.shape)


OP = "softmax"  # the op it breaks: needs a row longer than 1024
CAUGHT_BY = ('all_outputs_written',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
