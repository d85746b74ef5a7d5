"""Cross-entropy with class weights whose reduction="mean" divides the weighted sum by the count
of counted rows instead of by the sum of their targets' weights (torch's semantics): the mean a
launcher writes as ``rows.sum() / n_valid`` whatever the weights (the issue class of class
weights that the mean divides by the wrong count). The rows come from the project's kernels;
without weights the two divisors agree and the call is the kernels' own."""
import torch

from softmax_properties import kernels


def cross_entropy(logits, target, *, ignore_index=-100, reduction="mean", label_smoothing=0.0, weight=None,
                  z_loss=0.0, softcap=None, logit_scale=1.0):
    kw = dict(ignore_index=ignore_index, label_smoothing=label_smoothing, weight=weight, z_loss=z_loss,
              softcap=softcap, logit_scale=logit_scale)
    if weight is None or reduction != "mean":
        return kernels.cross_entropy(logits, target, reduction=reduction, **kw)
    rows = kernels.cross_entropy(logits, target, reduction="none", **kw)
    count = (target != ignore_index).sum()
    return (rows.to(torch.float64).sum() / count).to(logits.dtype)  # BUG: not over sum of w[target]


OP = "cross_entropy"  # the op it breaks: the weighted mean's divisor
CAUGHT_BY = ("ce_weighted_mean_divides_by_weight_sum", "ce_weight_scale_free", "ce_options_match_oracle")  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
