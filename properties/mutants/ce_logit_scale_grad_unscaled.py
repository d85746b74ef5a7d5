"""Cross-entropy backward whose logit scale s is applied to the logits but not to the gradient:
the gradient with respect to s x returned as the gradient with respect to x (the chain rule's
factor s dropped, a bug of logit-scaling wrappers that scale the input of a fused kernel and
reuse its backward). Under a softcap the call is the kernels' own."""
import torch

from softmax_properties import kernels


def cross_entropy_backward(logits, target, dloss, *, ignore_index=-100, reduction="mean", label_smoothing=0.0,
                           weight=None, z_loss=0.0, softcap=None, logit_scale=1.0):
    kw = dict(ignore_index=ignore_index, reduction=reduction, label_smoothing=label_smoothing, weight=weight,
              z_loss=z_loss, softcap=softcap)
    if softcap is not None or logit_scale == 1.0:
        return kernels.cross_entropy_backward(logits, target, dloss, logit_scale=logit_scale, **kw)
    ct = torch.float64 if logits.dtype == torch.float64 else torch.float32
    dy = kernels.cross_entropy_backward(logits.to(ct) * logit_scale, target, dloss.to(ct), **kw)
    return dy.to(logits.dtype)  # BUG: not times s


OP = "cross_entropy_backward"  # the op it breaks: the scale's factor dropped from the gradient
CAUGHT_BY = ("ce_logit_scale_is_scaled_logits",)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
