"""softmax without subtracting the row max: exp overflows for logits above ~88 (float32), ~709 (float64)."""
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
    e = tl.exp(x)  # BUG: no max subtraction
    y = e / tl.sum(e, 0)
    tl.store(Y + row * n + cols, to_out(y, Y.dtype.element_ty), mask=cols < n)


def softmax(x):
    return launch_forward(_kernel, x, "softmax")


OP = "softmax"  # the op it breaks
CAUGHT_BY = ('matches_oracle', 'shift_invariance')  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
