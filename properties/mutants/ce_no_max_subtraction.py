"""Cross-entropy forward whose logsumexp is log(sum(exp(x))) without subtracting the row max:
exp overflows for logits above ~88 (float32 compute), ~709 (float64), so the loss of a row with
large logits is inf, and shifting every logit by a constant changes the loss. The classic unstable
logsumexp (no_max_subtraction and logsumexp_no_max are the softmax-op ones)."""
import triton
import triton.language as tl

from ._ce_base import launch_forward


@triton.jit
def _kernel(X, T, LOSS, P, V, sxr, st, ignore_index, F64: tl.constexpr, BLOCK: tl.constexpr):
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    row = tl.program_id(0).to(tl.int64)
    eps = tl.load(P).to(CT)
    inv_v = tl.load(P + 1).to(CT)
    t = tl.load(T + row * st).to(tl.int64)
    ign = t == ignore_index
    s = tl.zeros([], CT)
    sx = tl.zeros([], CT)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(X + row * sxr + cols, mask=cols < V, other=float("-inf")).to(CT)
        s += tl.sum(tl.exp(x), 0)  # BUG: exp(x - max) with the max added back to the log
        sx += tl.sum(tl.where(cols < V, x, 0.0), 0)
    lse = tl.log(s)
    tc = tl.where(ign, 0, t)
    xt = tl.load(X + row * sxr + tc, mask=~ign & (tc >= 0) & (tc < V), other=0.0).to(CT)
    loss = (1.0 - eps) * (lse - xt)
    loss += tl.where(eps > 0, eps * (lse - sx * inv_v), 0.0)
    tl.store(LOSS + row, tl.where(ign, 0.0, loss))


def cross_entropy(logits, target, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    return launch_forward(_kernel, logits, target, ignore_index, reduction, float(label_smoothing))


CAUGHT_BY = ('ce_shift_invariance',)  # the invariants that catch it on their own (properties/test_mutants.py)
