"""softmax that computes in place in its input and returns it (a memory-saving "optimisation"
that corrupts the caller's logits)."""
import torch
import triton
import triton.language as tl

from softmax_properties.kernels._launch import check_tensor
from softmax_properties.kernels._numerics import to_out


@triton.jit
def _kernel(X, n, stride, F64: tl.constexpr, BLOCK: tl.constexpr):
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * stride + cols, mask=cols < n, other=float("-inf")).to(CT)
    e = tl.exp(x - tl.max(x, 0))
    tl.store(X + row * stride + cols, to_out(e / tl.sum(e, 0), X.dtype.element_ty), mask=cols < n)  # BUG


def softmax(x):
    check_tensor("x", x, "softmax")
    y = x if (x.ndim and x.is_contiguous()) else x.contiguous()
    y2 = y.reshape(-1, y.shape[-1]) if y.ndim else y.reshape(1, 1)
    if y2.numel():
        _kernel[(y2.shape[0],)](y2, y2.shape[1], y2.stride(0), F64=x.dtype == torch.float64, BLOCK=max(16, triton.next_power_of_2(y2.shape[1])))
    return y


OP = "softmax"  # the op it breaks
CAUGHT_BY = ('inputs_unmodified',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
