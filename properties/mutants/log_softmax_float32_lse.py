"""log_softmax that keeps each row's logsumexp in a float32 buffer, whatever the input dtype (the
buffer a backward, or a later merge, would read), and forms z = x - lse from it in a second pass.
float32 is the right compute type for 16/32-bit input; for float64 input the stored lse loses 29
bits, so z is off by up to half a float32 ulp of |lse|, and where lse rounds below max(x) the
largest element comes out positive. The bug class: a dtype picked by the rule "16/32-bit ->
float32" with float64 forgotten (the contract is float64 for float64). softmax and logsumexp are
the project's correct kernels, so the identities log_softmax = x - logsumexp and
exp(log_softmax) = softmax see the difference too."""
import torch
import triton
import triton.language as tl

from softmax_properties.kernels import logsumexp, softmax  # noqa: F401  (correct companions for the identities)
from softmax_properties.kernels._launch import check_tensor
from softmax_properties.kernels._numerics import to_out

from ._base import rows_of


@triton.jit
def _lse_kernel(X, LSE, n, F64: tl.constexpr, BLOCK: tl.constexpr):
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * n + cols, mask=cols < n, other=float("-inf")).to(CT)
    m = tl.max(x, 0)
    lse = m + tl.log(tl.sum(tl.exp(x - m), 0))
    tl.store(LSE + row, lse.to(tl.float32))  # BUG: float64 rows need a float64 buffer


@triton.jit
def _z_kernel(X, LSE, Y, n, F64: tl.constexpr, BLOCK: tl.constexpr):
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * n + cols, mask=cols < n, other=0.0).to(CT)
    lse = tl.load(LSE + row).to(CT)
    tl.store(Y + row * n + cols, to_out(x - lse, Y.dtype.element_ty), mask=cols < n)


def log_softmax(x):
    check_tensor("x", x, "log_softmax")
    x2 = rows_of(x)
    y = torch.empty_like(x2)
    if x2.numel():
        lse = torch.empty(x2.shape[0], dtype=torch.float32, device=x.device)
        f64, block = x.dtype == torch.float64, max(16, triton.next_power_of_2(x2.shape[1]))
        _lse_kernel[(x2.shape[0],)](x2, lse, x2.shape[1], F64=f64, BLOCK=block)
        _z_kernel[(x2.shape[0],)](x2, lse, y, x2.shape[1], F64=f64, BLOCK=block)
    return y.reshape(x.shape)


OP = "log_softmax"  # the op it breaks: float64 rows through a float32 lse buffer
CAUGHT_BY = ('within_range', 'log_softmax_is_x_minus_logsumexp', 'exp_log_softmax_is_softmax')  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
