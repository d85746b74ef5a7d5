"""Cross-entropy backward that skips ignored rows altogether (its store is masked to the counted
rows) into a gradient allocated with torch.empty: an ignored row's gradient is whatever the
allocation held instead of exactly 0. The bug class: an early exit for ignore_index rows written
for a zero-initialised (or in-place) buffer and kept when the buffer became torch.empty."""
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
        g = tl.exp(x - lse) - eps * inv_v - tl.where(cols == t, 1.0 - eps, 0.0)
        tl.store(DX + row * V + cols, to_out(g * scale, DX.dtype.element_ty), mask=tl.where(ign, cols < 0, m))  # BUG: store 0 there


def cross_entropy_backward(logits, target, dloss, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    return launch_backward(_kernel, logits, target, dloss, ignore_index, reduction, float(label_smoothing))


OP = "cross_entropy_backward"  # the op it breaks: ignored rows left as torch.empty
CAUGHT_BY = ('all_outputs_written',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
