"""softmax backward using sum(dy) instead of sum(y * dy) (the classic slip)."""
import triton
import triton.language as tl

from softmax_properties.kernels._numerics import to_out

from ._base import launch_backward


@triton.jit
def _kernel(Yp, G, DX, n, F64: tl.constexpr, BLOCK: tl.constexpr):
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    m = cols < n
    y = tl.load(Yp + row * n + cols, mask=m, other=0.0).to(CT)
    g = tl.load(G + row * n + cols, mask=m, other=0.0).to(CT)
    dot = tl.sum(g, 0)  # BUG: should be tl.sum(y * g, 0)
    tl.store(DX + row * n + cols, to_out(y * (g - dot), DX.dtype.element_ty), mask=m)


def softmax_backward(y, dy):
    return launch_backward(_kernel, y, dy, "softmax_backward")


OP = "softmax_backward"  # the op it breaks
CAUGHT_BY = ('matches_oracle', 'vjp_rows_sum_to_zero', 'vjp_matches_fp64_autograd', 'vjp_matches_finite_differences',
             'softmax_vjp_within_cotangent_spread')  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
