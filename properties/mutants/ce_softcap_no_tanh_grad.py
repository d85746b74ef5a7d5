"""Cross-entropy backward under a softcap that forgets the chain rule through the cap: it returns
the gradient with respect to the capped logits y = c tanh(s x / c), not times
dy/dx = s (1 - tanh^2(s x / c)) (the issue class of a soft-cap whose backward forgets the tanh'
term). The capped logits are formed in the compute precision and the project's kernels do the
rest; without a softcap the call is the kernels' own."""
import torch

from softmax_properties import kernels


def cross_entropy_backward(logits, target, dloss, *, ignore_index=-100, reduction="mean", label_smoothing=0.0,
                           weight=None, z_loss=0.0, softcap=None, logit_scale=1.0):
    kw = dict(ignore_index=ignore_index, reduction=reduction, label_smoothing=label_smoothing, weight=weight,
              z_loss=z_loss)
    if softcap is None:
        return kernels.cross_entropy_backward(logits, target, dloss, logit_scale=logit_scale, **kw)
    ct = torch.float64 if logits.dtype == torch.float64 else torch.float32
    y = softcap * torch.tanh(logits.to(ct) * logit_scale / softcap)
    dy = kernels.cross_entropy_backward(y, target, dloss.to(ct), **kw)
    return dy.to(logits.dtype)  # BUG: not times dy/dx = s (1 - tanh^2(s x / c))


OP = "cross_entropy_backward"  # the op it breaks: the softcap's derivative dropped
CAUGHT_BY = ("ce_softcap_is_capped_logits",)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
