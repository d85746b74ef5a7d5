"""softmax that cuts each row into chunks of 2048 columns, forms every chunk's (max m_c,
sum_c exp(x - m_c)) and merges them; the merge guards an empty running state, but a chunk of -inf
only has m_c = -inf, its sum is exp(-inf - -inf) = NaN, and NaN * exp(m_c - M) = NaN * 0 poisons
the row. Rows of up to one chunk are right (an all -inf row is NaN anyway), and so is every row
without a whole -inf chunk; the module declares no block_boundaries(), so nothing tells the
strategies where its chunks begin. The bug class: issue 4 of the coverage review (a cross-entropy
that splits the class axis into 65,536-column chunks and returns NaN when one whole chunk is
-inf); 2048 here so that the ci profile's longest rows (2100) cross a chunk boundary."""
import torch
import triton
import triton.language as tl

from softmax_properties.kernels._launch import check_tensor
from softmax_properties.kernels._numerics import to_out

from ._base import rows_of

CHUNK = 2048


@triton.jit
def _kernel(X, Y, n_rows, n, F64: tl.constexpr, CHUNK: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK: tl.constexpr):
    """BLOCK_R rows per program, each cut into chunks of CHUNK columns held BLOCK at a time
    (BLOCK = CHUNK, or the whole row where it is shorter)."""
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = rows[:, None] < n_rows
    M = tl.full([BLOCK_R], float("-inf"), CT)
    S = tl.zeros([BLOCK_R], CT)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(X + rows[:, None] * n + cols[None, :], mask=rmask & (cols < n)[None, :], other=float("-inf")).to(CT)
        mc = tl.max(x, 1)
        sc = tl.sum(tl.exp(x - mc[:, None]), 1)  # BUG: NaN for a chunk of -inf only (mc = -inf)
        m_new = tl.maximum(M, mc)
        ms = tl.where(m_new == float("-inf"), 0.0, m_new)
        S = S * tl.exp(M - ms) + sc * tl.exp(mc - ms)
        M = m_new
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        msk = rmask & (cols < n)[None, :]
        x = tl.load(X + rows[:, None] * n + cols[None, :], mask=msk, other=float("-inf")).to(CT)
        y = tl.exp(x - M[:, None]) / S[:, None]
        tl.store(Y + rows[:, None] * n + cols[None, :], to_out(y, Y.dtype.element_ty), mask=msk)


def softmax(x):
    check_tensor("x", x, "softmax")
    x2 = rows_of(x)
    y = torch.empty_like(x2)
    if x2.numel():
        n_rows, n = x2.shape
        block = min(CHUNK, max(16, triton.next_power_of_2(n)))
        block_r = max(1, 4096 // block)
        _kernel[(triton.cdiv(n_rows, block_r),)](x2, y, n_rows, n, F64=x.dtype == torch.float64, CHUNK=CHUNK,
                                                 BLOCK_R=block_r, BLOCK=block)
    return y.reshape(x.shape)


OP = "softmax"  # the op it breaks: 2048-column chunks, NaN for a chunk of -inf only
CAUGHT_BY = ('masked_chunks_match_oracle',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
