"""Cross-entropy forward streaming over the classes in tiles of 64 whose loop covers only the full
tiles (``range(V // BLOCK)``): the last V % 64 classes never enter the logsumexp (nor the
label-smoothing sum), so a row whose target sits in the tail can get a negative loss, and V < 64
gives lse = -inf. The bug class: a tiled loop without its remainder (the project's own kernels
loop over full tiles and then handle the tail; forgetting the second half is the slip)."""
import triton
import triton.language as tl

from ._ce_base import launch_forward, row_start, store_loss


@triton.jit
def _kernel(X, T, LOSS, P, V, sxr, st, ignore_index, F64: tl.constexpr, BLOCK: tl.constexpr):
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    row, eps, inv_v, t, ign = row_start(T, P, st, ignore_index, F64)
    m = tl.full([], float("-inf"), CT)
    s = tl.zeros([], CT)
    sx = tl.zeros([], CT)
    for k in range(0, V // BLOCK):  # BUG: tl.cdiv(V, BLOCK) tiles, the last one masked
        cols = k * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(X + row * sxr + cols, mask=cols < V, other=float("-inf")).to(CT)
        m_new = tl.maximum(m, tl.max(x, 0))
        ms = tl.where(m_new == float("-inf"), 0.0, m_new)
        s = s * tl.exp(m - ms) + tl.sum(tl.exp(x - ms), 0)
        sx += tl.sum(tl.where(cols < V, x, 0.0), 0)
        m = m_new
    lse = m + tl.log(s)
    store_loss(X, LOSS, row, sxr, V, t, ign, lse, sx, eps, inv_v)


def cross_entropy(logits, target, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    return launch_forward(_kernel, logits, target, ignore_index, reduction, float(label_smoothing))


OP = "cross_entropy"  # the op it breaks: the last V % 64 classes never enter the lse
CAUGHT_BY = ('ce_loss_nonnegative', 'ce_loss_is_lse_minus_target_logit')  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
