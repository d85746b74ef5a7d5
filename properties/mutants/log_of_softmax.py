"""log_softmax computed as log(softmax(x)): probabilities that underflow give -inf where the
true log-probability is finite."""
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
    y = tl.log(e / tl.sum(e, 0))  # BUG: x - max - log(sum) keeps the precision
    tl.store(Y + row * n + cols, to_out(y, Y.dtype.element_ty), mask=cols < n)


def log_softmax(x):
    return launch_forward(_kernel, x, "log_softmax")


OP = "log_softmax"  # the op it breaks
CAUGHT_BY = ('matches_oracle',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
