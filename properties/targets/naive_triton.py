"""``--target naive_triton``: a plain Triton softmax, log_softmax and logsumexp,
written the way third-party kernels usually are, as an example target to copy.

    python -m pytest -m properties --target naive_triton

One program per row, the whole row in one block of next_power_of_2(D) columns: load in the
input's dtype, compute in float32 (float64 for float64 input), subtract the row max, and store
through the natural conversion ``tl.store`` makes to the output's dtype (round to nearest even in
compiled Triton; under the interpreter, ``properties/interpreter.py`` makes it so). Strided input
is read through its strides where the batch axes merge into one row stride (``reshape`` copies
otherwise); the output is contiguous, in the input's dtype and shape. logsumexp returns float32
(float64 for float64 input), -inf for an empty row; its max is replaced by 0 where it is infinite,
so a row of -inf gives log(0) = -inf and a +inf gives log(inf) = inf, not inf - inf = NaN.

Declared refusal (``NotImplementedError``, the only ``SUITE_REFUSALS``): rows longer than 65,536
columns (one block per row). Bad arguments raise TypeError naming them.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import float_tensor

SUITE_REFUSALS = (NotImplementedError,)
MAX_COLS = 65536


@triton.jit
def _softmax_rows(X, Y, D, sx_row, sx_col, LOG: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < D
    x = tl.load(X + row * sx_row + cols * sx_col, mask=mask, other=float("-inf"))
    if X.dtype.element_ty == tl.float64:
        x = x.to(tl.float64)
    else:
        x = x.to(tl.float32)
    z = x - tl.max(x, axis=0)
    e = tl.exp(z)
    s = tl.sum(e, axis=0)
    if LOG:
        y = z - tl.log(s)
    else:
        y = e / s
    tl.store(Y + row * D + cols, y, mask=mask)


@triton.jit
def _logsumexp_rows(X, OUT, D, sx_row, sx_col, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * sx_row + cols * sx_col, mask=cols < D, other=float("-inf"))
    if X.dtype.element_ty == tl.float64:
        x = x.to(tl.float64)
    else:
        x = x.to(tl.float32)
    m = tl.max(x, axis=0)
    m = tl.where(tl.abs(m) == float("inf"), 0.0, m)
    tl.store(OUT + row, m + tl.log(tl.sum(tl.exp(x - m), axis=0)))


def block_boundaries():
    """The block is next_power_of_2(D): the launch changes at every power of two."""
    return tuple(2**k for k in range(0, 17))


def _launch_settings(x: torch.Tensor):
    float_tensor("x", x)
    D = x.shape[-1]
    if D > MAX_COLS:
        raise NotImplementedError(f"naive_triton: rows of {D} columns exceed {MAX_COLS} (one block per row)")
    BLOCK = triton.next_power_of_2(D)
    return D, BLOCK, 4 if BLOCK < 2048 else 8 if BLOCK < 8192 else 16


def _rows(x: torch.Tensor, log: bool) -> torch.Tensor:
    D, BLOCK, num_warps = _launch_settings(x)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.numel() == 0:
        return y
    x2 = x.reshape(-1, D)
    _softmax_rows[(x2.shape[0],)](x2, y, D, x2.stride(0), x2.stride(1), LOG=log, BLOCK=BLOCK, num_warps=num_warps)
    return y


def softmax(x: torch.Tensor) -> torch.Tensor:
    return _rows(x, log=False)


def log_softmax(x: torch.Tensor) -> torch.Tensor:
    return _rows(x, log=True)


def logsumexp(x: torch.Tensor) -> torch.Tensor:
    D, BLOCK, num_warps = _launch_settings(x)
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    if D == 0:
        return torch.full(x.shape[:-1], float("-inf"), dtype=dtype, device=x.device)
    out = torch.empty(x.shape[:-1], dtype=dtype, device=x.device)
    if out.numel() == 0:
        return out
    x2 = x.reshape(-1, D)
    _logsumexp_rows[(x2.shape[0],)](x2, out, D, x2.stride(0), x2.stride(1), BLOCK=BLOCK, num_warps=num_warps)
    return out
