"""Cross-entropy backward that rounds softmax to the logits' dtype before subtracting the one-hot
(it stores p into a bfloat16/float16 gradient buffer, then patches the target column with
-(1 - eps)): for a confident row p_t rounds to 1 in bfloat16 and the target column's gradient
p_t - 1 is lost entirely (linkedin/Liger-Kernel #1329: true-class gradient rounded to the buffer
dtype before the -(1 - label_smoothing) term, 100% error at softmax 0.999)."""
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
        p = to_out(tl.exp(x - lse), DX.dtype.element_ty).to(CT)  # BUG: rounded before the one-hot
        g = p - eps * inv_v - tl.where(cols == t, 1.0 - eps, 0.0)
        tl.store(DX + row * V + cols, to_out(tl.where(ign, 0.0, g * scale), DX.dtype.element_ty), mask=m)


def cross_entropy_backward(logits, target, dloss, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    return launch_backward(_kernel, logits, target, dloss, ignore_index, reduction, float(label_smoothing))


OP = "cross_entropy_backward"  # the op it breaks: p rounded to bf16, then p - 1
CAUGHT_BY = ('ce_confident_bf16_rows_keep_gradient',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
