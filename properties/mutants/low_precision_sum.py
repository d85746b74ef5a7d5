"""softmax whose row sum is accumulated in the input dtype (bfloat16/float16 inputs lose
most of a long row's sum)."""
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
    # BUG: a running sum kept in the input dtype (the loop is what a chunked kernel does)
    acc = tl.zeros([1], dtype=Y.dtype.element_ty).to(CT)
    for i in tl.static_range(0, BLOCK, 16):
        part = tl.sum(tl.where((cols >= i) & (cols < i + 16), e, 0.0), 0)
        acc = to_out(acc + part, Y.dtype.element_ty).to(CT)
    y = e / tl.sum(acc, 0)
    tl.store(Y + row * n + cols, to_out(y, Y.dtype.element_ty), mask=cols < n)


def softmax(x):
    return launch_forward(_kernel, x, "softmax")


OP = "softmax"  # the op it breaks
CAUGHT_BY = ('matches_oracle',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
