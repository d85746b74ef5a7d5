"""logsumexp as log(sum(exp(x))): overflows to inf for logits above ~88 (float32), ~709 (float64)."""
import torch
import triton
import triton.language as tl

from softmax_properties.kernels._launch import check_tensor

from ._base import rows_of


@triton.jit
def _kernel(X, Y, n, F64: tl.constexpr, BLOCK: tl.constexpr):
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * n + cols, mask=cols < n, other=float("-inf")).to(CT)
    tl.store(Y + row, tl.log(tl.sum(tl.exp(x), 0)))  # BUG: no max subtraction


def logsumexp(x):
    check_tensor("x", x, "logsumexp")
    x2 = rows_of(x)
    out = torch.empty(x2.shape[0], dtype=torch.float64 if x.dtype == torch.float64 else torch.float32, device=x.device)
    if x2.shape[0] and x2.shape[1]:
        _kernel[(x2.shape[0],)](x2, out, x2.shape[1], F64=x.dtype == torch.float64, BLOCK=max(16, triton.next_power_of_2(x2.shape[1])))
    elif x2.shape[0]:
        out.fill_(float("-inf"))
    return out.reshape(x.shape[:-1])


OP = "logsumexp"  # the op it breaks
CAUGHT_BY = ('matches_oracle',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
