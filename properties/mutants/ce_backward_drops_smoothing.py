"""Cross-entropy backward that applies label smoothing to the target column only,
dx = (p - (1 - eps)[j = t]) * scale, dropping the uniform -eps/V every class receives: each
gradient row then sums to eps * scale instead of 0. The forward (the project's) includes the
smoothing term, so forward and backward disagree. The bug class: a smoothed loss whose gradient was
derived for only one of its two terms."""
import triton
import triton.language as tl

from softmax_properties.kernels._numerics import to_out

from ._ce_base import launch_backward, row_start


@triton.jit
def _kernel(X, T, LSE, SC, DX, P, V, sxr, st, ss, ignore_index, F64: tl.constexpr, BLOCK: tl.constexpr):
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    row, eps, _, t, ign = row_start(T, P, st, ignore_index, F64)
    lse = tl.load(LSE + row).to(CT)
    scale = tl.load(SC + row * ss).to(CT)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        m = cols < V
        x = tl.load(X + row * sxr + cols, mask=m, other=0.0).to(CT)
        g = tl.exp(x - lse) - tl.where(cols == t, 1.0 - eps, 0.0)  # BUG: - eps / V for every class
        tl.store(DX + row * V + cols, to_out(tl.where(ign, 0.0, g * scale), DX.dtype.element_ty), mask=m)


def cross_entropy_backward(logits, target, dloss, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    return launch_backward(_kernel, logits, target, dloss, ignore_index, reduction, float(label_smoothing))


OP = "cross_entropy_backward"  # the op it breaks: -eps/V missing from the gradient
CAUGHT_BY = ('ce_gradient_rows_sum_to_zero',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
