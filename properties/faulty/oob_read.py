"""A Triton softmax whose load reads far out of bounds for tensors of more than 3 rows: the row
base gets a bogus offset of 2**40 elements (terabytes past any allocation). Triton's interpreter
then segfaults; on a GPU the launch raises "an illegal memory access was encountered" and the
CUDA context is lost. Tensors of up to 3 rows are computed correctly, so a crash needs the shrinker
to find its smallest case (4 rows of one column). log_softmax is correct (plain torch in float64):
its tests run in the same pytest run and must still pass.

    python -m pytest -m properties --target softmax_properties.properties.faulty.oob_read -k "matches_oracle and (softmax or log_softmax)"
"""
import torch
import triton
import triton.language as tl

from softmax_properties.kernels._launch import check_tensor
from softmax_properties.properties.mutants._base import rows_of

BOGUS_OFFSET = 2**40  # elements


@triton.jit
def _kernel(X, Y, n, off, F64: tl.constexpr, BLOCK: tl.constexpr):
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + off + row * n + cols, mask=cols < n, other=float("-inf")).to(CT)  # BUG: off
    x = x - tl.max(x, 0)
    e = tl.exp(x)
    y = e / tl.sum(e, 0)
    tl.store(Y + row * n + cols, y.to(Y.dtype.element_ty), mask=cols < n)


def softmax(x):
    check_tensor("x", x, "softmax")
    if x.dtype in (torch.float16, torch.bfloat16):  # the interpreter's 16-bit conversions truncate
        raise NotImplementedError("softmax: float16 and bfloat16 are not offered")
    x2 = rows_of(x)
    y = torch.empty_like(x2)
    if x2.numel():
        off = BOGUS_OFFSET if x2.shape[0] > 3 else 0
        _kernel[(x2.shape[0],)](x2, y, x2.shape[1], off, F64=x.dtype == torch.float64,
                                BLOCK=max(16, triton.next_power_of_2(x2.shape[1])))
    return y.reshape(x.shape)


def log_softmax(x):
    return torch.log_softmax(x.double(), -1).to(x.dtype)
