"""softmax as exp(x - lse) with lse stored in the input dtype first (as a kernel that saves lse
for its backward in bfloat16 would): rows can sum to more than 1 and exceed 1 element-wise."""
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
    m = tl.max(x, 0)
    lse = m + tl.log(tl.sum(tl.exp(x - m), 0))
    lse = to_out(lse, Y.dtype.element_ty).to(CT)  # BUG: lse rounded to the input dtype
    tl.store(Y + row * n + cols, to_out(tl.exp(x - lse), Y.dtype.element_ty), mask=cols < n)


def softmax(x):
    return launch_forward(_kernel, x, "softmax")


OP = "softmax"  # the op it breaks
CAUGHT_BY = ('unit_row_sums',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
