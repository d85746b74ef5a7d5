"""Cross-entropy forward whose programs each take 64 rows and whose launch grid counts them with
floor division once the batch reaches 2048 rows (N // 64 programs where cdiv(N, 64) are needed):
the last N % 64 rows are never computed, their losses stay 0 (a zeroed buffer), and the mean still
divides by every counted row. Smaller batches take cdiv and are right; so is every row's loss
otherwise (the project's row finish, kernels/_cross_entropy.py). The bug class: a row-tiled launch
whose program count drops the remainder on one branch (issue 1 of the coverage review: a
cross-entropy of 64-row programs with floor division for N >= 2048)."""
import torch
import triton
import triton.language as tl

from softmax_properties.kernels import _cross_entropy as _ce
from softmax_properties.kernels._cross_entropy import _ce_finish

ROWS = 64  # rows per program
BLOCK = 64  # columns per loop iteration


@triton.jit
def _kernel(X, T, LOSS, LSE, P, n_rows, V, sxr, st, ignore_index, F64: tl.constexpr, SMOOTH: tl.constexpr,
            BLOCK_R: tl.constexpr, BLOCK: tl.constexpr):
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = rows < n_rows
    eps = tl.load(P).to(CT)
    inv_v4 = tl.load(P + 1).to(CT) * 0.25
    m = tl.full([BLOCK_R], float("-inf"), CT)
    s = tl.zeros([BLOCK_R], CT)
    sx4 = tl.zeros([BLOCK_R], CT)
    for k in range(0, tl.cdiv(V, BLOCK)):
        cols = k * BLOCK + tl.arange(0, BLOCK)
        msk = rmask[:, None] & (cols < V)[None, :]
        x = tl.load(X + rows[:, None] * sxr + cols[None, :], mask=msk, other=float("-inf")).to(CT)
        m_new = tl.maximum(m, tl.max(x, 1))
        ms = tl.where(m_new == float("-inf"), 0.0, m_new)
        s = s * tl.exp(m - ms) + tl.sum(tl.exp(x - ms[:, None]), 1)
        sx4 += tl.sum(tl.where(msk, x * inv_v4, 0.0), 1)
        m = m_new
    _ce_finish(X, T, LOSS, LSE, rows, rmask, m, s, sx4, V, sxr, st, ignore_index, eps, SMOOTH)


def cross_entropy(logits, target, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    _ce.check_args(logits, target, ignore_index, reduction, label_smoothing, "cross_entropy")
    _ce.check_targets(target, logits.shape[-1], ignore_index, "cross_entropy")
    x, t = _ce._rows(logits, target)
    N, V = x.shape
    ct = _ce._compute_dtype(logits.dtype)
    loss = torch.zeros(N, dtype=ct, device=x.device)
    lse = torch.empty(N, dtype=ct, device=x.device)
    if N:
        programs = N // ROWS if N >= 2048 else triton.cdiv(N, ROWS)  # BUG: cdiv on both branches
        params = torch.tensor([float(label_smoothing), 1.0 / V], dtype=ct, device=x.device)
        _kernel[(programs,)](x, t, loss, lse, params, N, V, x.stride(0), t.stride(0), ignore_index,
                             F64=logits.dtype == torch.float64, SMOOTH=label_smoothing > 0, BLOCK_R=ROWS, BLOCK=BLOCK)
    return _ce.reduce_loss(loss, target, ignore_index, reduction, logits.dtype)


OP = "cross_entropy"  # the op it breaks: 64-row programs counted with floor division, N >= 2048
CAUGHT_BY = ('many_rows_match_oracle',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
