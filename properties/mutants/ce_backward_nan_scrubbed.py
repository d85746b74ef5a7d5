"""Cross-entropy backward that scrubs NaN from its gradient (a "robust" fused kernel: NaN terms
stored as 0): a row poisoned by a NaN or +inf logit, or holding only -inf, gets a finite gradient,
and the poison in the logits goes unnoticed in training. The default tier accepts finite values
beside the NaN in such a row (exp(x - lse) - onehot gives [nan, 0] for logits [inf, 0]), but not
a row with its NaN gone: the positions of the poisoning logits must stay NaN
(families/cross_entropy/truth.py, nan_rows_keep_their_nan)."""
import triton
import triton.language as tl

from softmax_properties.kernels._numerics import to_out

from ._ce_base import launch_backward, row_start


@triton.jit
def _kernel(X, T, LSE, SC, DX, P, V, sxr, st, ss, ignore_index, F64: tl.constexpr, BLOCK: tl.constexpr):
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    row, eps, inv_v, t, ign = row_start(T, P, st, ignore_index, F64)
    lse = tl.load(LSE + row).to(CT)
    scale = tl.load(SC + row * ss).to(CT)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        m = cols < V
        x = tl.load(X + row * sxr + cols, mask=m, other=0.0).to(CT)
        g = (tl.exp(x - lse) - eps * inv_v - tl.where(cols == t, 1.0 - eps, 0.0)) * scale
        g = tl.where(g == g, g, 0.0)  # BUG: NaN must stay NaN where the logits poison the row
        tl.store(DX + row * V + cols, to_out(tl.where(ign, 0.0, g), DX.dtype.element_ty), mask=m)


def cross_entropy_backward(logits, target, dloss, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    return launch_backward(_kernel, logits, target, dloss, ignore_index, reduction, float(label_smoothing))


OP = "cross_entropy_backward"  # the op it breaks: NaN gradient elements stored as 0
CAUGHT_BY = ('ce_matches_oracle',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
