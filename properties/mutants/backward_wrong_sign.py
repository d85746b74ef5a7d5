"""log_softmax backward with the sign of the coupling term flipped: dz + exp(z) * sum(dz)."""
import triton
import triton.language as tl

from softmax_properties.kernels._numerics import to_out

from ._base import launch_backward


@triton.jit
def _kernel(Z, G, DX, n, F64: tl.constexpr, BLOCK: tl.constexpr):
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    m = cols < n
    z = tl.load(Z + row * n + cols, mask=m, other=float("-inf")).to(CT)
    g = tl.load(G + row * n + cols, mask=m, other=0.0).to(CT)
    dx = g + tl.exp(z) * tl.sum(g, 0)  # BUG: should be g - exp(z) * sum(g)
    tl.store(DX + row * n + cols, to_out(dx, DX.dtype.element_ty), mask=m)


def log_softmax_backward(z, dz):
    return launch_backward(_kernel, z, dz, "log_softmax_backward")


OP = "log_softmax_backward"  # the op it breaks
CAUGHT_BY = ('vjp_rows_sum_to_zero',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
