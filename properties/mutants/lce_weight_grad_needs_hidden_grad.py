"""Fused linear cross-entropy that forms d weight and d bias only when the hidden states require
grad (its gradient buffers allocated under ``if hidden.requires_grad``): with the hidden states
frozen, a trained output layer gets no gradient, and ``loss.backward()`` leaves ``weight.grad``
None without a word (the class of a fused kernel that gates one input's gradient on another's
requires_grad flag). Values are the project's kernels' whenever hidden requires grad."""
from softmax_properties import kernels

cross_entropy = kernels.cross_entropy


def linear_cross_entropy(hidden, weight, target, *, bias=None, ignore_index=-100, reduction="mean",
                         label_smoothing=0.0, z_loss=0.0, softcap=None, logit_scale=1.0):
    kw = dict(ignore_index=ignore_index, reduction=reduction, label_smoothing=label_smoothing, z_loss=z_loss,
              softcap=softcap, logit_scale=logit_scale)
    if not hidden.requires_grad:  # BUG: no gradient for weight or bias unless hidden requires grad
        weight, bias = weight.detach(), None if bias is None else bias.detach()
    return kernels.linear_cross_entropy(hidden, weight, target, bias=bias, **kw)


OP = "linear_cross_entropy"  # the op it breaks: d weight and d bias gated on hidden.requires_grad
CAUGHT_BY = ("lce_gradients_match_oracle",)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
