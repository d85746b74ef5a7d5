"""Cross-entropy backward that, for reduction="none", ignores the per-row cotangent dloss and
scales every row by 1 -- correct only for ``loss.sum().backward()`` (a bug class fused-CE
libraries have shipped: a backward written for scalar losses, then "none" added). mean and sum
are right. The gradient itself comes from the project's Triton kernel, so this is the only bug."""
import torch

from softmax_properties.kernels import _cross_entropy as _ce


def cross_entropy_backward(logits, target, dloss, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    name = "cross_entropy_backward"
    _ce.check_args(logits, target, ignore_index, reduction, label_smoothing, name)
    _ce.check_dloss(dloss, target, logits, reduction, name)
    _ce.check_targets(target, logits.shape[-1], ignore_index, name)
    if reduction == "none":
        dloss = torch.ones(target.shape, dtype=dloss.dtype, device=dloss.device)  # BUG: dloss ignored
    _, lse = _ce.forward_rows(logits, target, ignore_index, float(label_smoothing))
    return _ce.backward_rows(logits, target, dloss, lse, ignore_index, reduction, float(label_smoothing))


OP = "cross_entropy_backward"  # the op it breaks: reduction="none" drops dloss
CAUGHT_BY = ('ce_matches_oracle',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
