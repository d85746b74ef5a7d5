"""Cross-entropy backward whose z-loss gradient is z lse softmax instead of 2 z lse softmax: the
derivative of z lse^2 with its factor 2 forgotten (the issue class of a z-loss whose gradient
forgets the 2 z lse factor). The project's kernels compute everything else; the forward is right,
so only the gradient is wrong, by z lse softmax(y) per counted row."""
from softmax_properties import kernels


def cross_entropy_backward(logits, target, dloss, *, ignore_index=-100, reduction="mean", label_smoothing=0.0,
                           weight=None, z_loss=0.0, softcap=None, logit_scale=1.0):
    return kernels.cross_entropy_backward(logits, target, dloss, ignore_index=ignore_index, reduction=reduction,
                                          label_smoothing=label_smoothing, weight=weight,
                                          z_loss=z_loss / 2,  # BUG: d(z lse^2)/d lse taken as z lse
                                          softcap=softcap, logit_scale=logit_scale)


OP = "cross_entropy_backward"  # the op it breaks: the z-loss gradient halved
CAUGHT_BY = ("ce_z_loss_term", "ce_options_match_oracle")  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
