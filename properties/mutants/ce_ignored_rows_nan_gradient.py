"""cross_entropy_backward through torch autograd (in float32, float64 for float64 logits): an
ignored row holding NaN or +-inf logits gets a NaN gradient (its log_softmax backward forms
0 * NaN). torch does this, and the default tier accepts it; the strict tier holds this project's
choice, an exactly zero gradient for every ignored row (oracles/semantics.py CE_SEMANTICS)."""
import torch
import torch.nn.functional as F


def cross_entropy_backward(logits, target, dloss, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    c = torch.float64 if logits.dtype == torch.float64 else torch.float32
    V = logits.shape[-1]
    x = logits.detach().to(c).reshape(-1, V).requires_grad_(True)
    loss = F.cross_entropy(x, target.reshape(-1).long(), ignore_index=ignore_index, reduction=reduction,
                           label_smoothing=float(label_smoothing))
    g = dloss.to(c).reshape(-1) if reduction == "none" else dloss.to(c)
    (dx,) = torch.autograd.grad(loss, x, g)  # BUG (strict): NaN on ignored rows of NaN / inf logits
    return dx.reshape(logits.shape).to(logits.dtype)


OP = "cross_entropy_backward"  # the op it breaks: torch's NaN on ignored non-finite rows
CAUGHT_BY = ('ce_ignored_nonfinite_rows_zero_gradient',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
