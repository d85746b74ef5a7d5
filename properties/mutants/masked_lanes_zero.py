"""softmax whose padding lanes load 0.0 instead of -inf: rows whose length is not a power of two
count exp(0 - max) once per padding lane in the sum."""
import triton
import triton.language as tl

from softmax_properties.kernels._numerics import to_out

from ._base import launch_forward


@triton.jit
def _kernel(X, Y, n, F64: tl.constexpr, BLOCK: tl.constexpr):
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * n + cols, mask=cols < n, other=0.0).to(CT)  # BUG: other=-inf
    e = tl.exp(x - tl.max(x, 0))
    tl.store(Y + row * n + cols, to_out(e / tl.sum(e, 0), Y.dtype.element_ty), mask=cols < n)


def softmax(x):
    return launch_forward(_kernel, x, "softmax")


OP = "softmax"  # the op it breaks
CAUGHT_BY = ('unit_row_sums', 'constant_row_uniform', 'shift_invariance')  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
