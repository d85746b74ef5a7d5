"""softmax that stores each pair of adjacent columns swapped (an index bug in a hand-written
vectorised store): values right, positions wrong."""
import triton
import triton.language as tl

from softmax_properties.kernels._numerics import to_out

from ._base import launch_forward


@triton.jit
def _kernel(X, Y, n, F64: tl.constexpr, BLOCK: tl.constexpr):
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * n + cols, mask=cols < n, other=float("-inf")).to(CT)
    e = tl.exp(x - tl.max(x, 0))
    dst = cols ^ 1  # BUG: should be cols
    ok = (cols < n) & (dst < n)
    tl.store(Y + row * n + dst, to_out(e / tl.sum(e, 0), Y.dtype.element_ty), mask=ok)
    tl.store(Y + row * n + cols, to_out(e / tl.sum(e, 0), Y.dtype.element_ty), mask=(cols < n) & (dst >= n))


def softmax(x):
    return launch_forward(_kernel, x, "softmax")


OP = "softmax"  # the op it breaks
CAUGHT_BY = ('permutation_equivariance', 'order_preserving')  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
