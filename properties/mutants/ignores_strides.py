"""softmax that assumes contiguous rows without making them so: any padded, offset, transposed
or expanded input is read from the wrong addresses."""
import torch
import triton
import triton.language as tl

from softmax_properties.kernels._launch import check_tensor
from softmax_properties.kernels._numerics import to_out


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
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    n = x.shape[-1] if x.ndim else 1
    rows = x.numel() // max(n, 1) if n else 0
    if rows and n:
        # BUG: x's storage is used as if x were contiguous (no .contiguous(), strides ignored)
        base = x.as_strided((rows, n), (n, 1))
        _kernel[(rows,)](base, y, n, F64=base.dtype == torch.float64, BLOCK=max(16, triton.next_power_of_2(n)))
    return y


OP = "softmax"  # the op it breaks
CAUGHT_BY = ('layout_invariance',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
