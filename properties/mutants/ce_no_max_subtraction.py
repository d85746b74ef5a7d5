"""Cross-entropy forward whose logsumexp is log(sum(exp(x))) without subtracting the row max:
exp overflows for logits above ~88 (float32 compute), ~709 (float64), so the loss of a row with
large logits is inf, and shifting every logit by a constant changes the loss. The classic unstable
logsumexp (no_max_subtraction and logsumexp_no_max are the softmax-op ones)."""
import triton
import triton.language as tl

from ._ce_base import launch_forward, row_start, store_loss


@triton.jit
def _kernel(X, T, LOSS, P, V, sxr, st, ignore_index, F64: tl.constexpr, BLOCK: tl.constexpr):
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    row, eps, inv_v, t, ign = row_start(T, P, st, ignore_index, F64)
    s = tl.zeros([], CT)
    sx = tl.zeros([], CT)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(X + row * sxr + cols, mask=cols < V, other=float("-inf")).to(CT)
        s += tl.sum(tl.exp(x), 0)  # BUG: exp(x - max) with the max added back to the log
        sx += tl.sum(tl.where(cols < V, x, 0.0), 0)
    lse = tl.log(s)
    store_loss(X, LOSS, row, sxr, V, t, ign, lse, sx, eps, inv_v)


def cross_entropy(logits, target, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    return launch_forward(_kernel, logits, target, ignore_index, reduction, float(label_smoothing))


OP = "cross_entropy"  # the op it breaks: log(sum(exp(x)))
CAUGHT_BY = ('ce_shift_invariance',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
