"""Fused linear cross-entropy whose weighted mean is formed chunk by chunk: each chunk of R rows
divides its weighted losses by its own sum of w[t], and the chunks' means are recombined by
their counts of counted rows, the recombination that is right without class weights (the class
of a chunked kernel whose mean divides by a per-chunk weight sum: the wrong divisor of class
weights, in fused form). The rows' losses are the project's kernels' (reduction "none"), the
mean formed from them in float64; without class weights, with a z-loss, for another reduction,
or on one chunk the call is the project's kernels'."""
import torch

from softmax_properties import kernels

R = 2  # rows per chunk: small, so that the small cases the suite draws span several
cross_entropy = kernels.cross_entropy


def linear_cross_entropy(hidden, weight, target, *, bias=None, ignore_index=-100, reduction="mean",
                         label_smoothing=0.0, ce_weight=None, z_loss=0.0, softcap=None, logit_scale=1.0):
    kw = dict(bias=bias, ignore_index=ignore_index, label_smoothing=label_smoothing, ce_weight=ce_weight,
              z_loss=z_loss, softcap=softcap, logit_scale=logit_scale)
    t = target.reshape(-1)
    counted = t != ignore_index
    if reduction != "mean" or ce_weight is None or z_loss or t.numel() <= R or not bool(counted.any()):
        return kernels.linear_cross_entropy(hidden, weight, target, reduction=reduction, **kw)
    rows = kernels.linear_cross_entropy(hidden, weight, target, reduction="none", **kw).reshape(-1).double()
    w = ce_weight.double()
    wt = torch.where(counted, w[torch.where(counted, t, 0)], 0.0)
    total = 0.0
    for i0 in range(0, t.numel(), R):
        n_c = counted[i0:i0 + R].sum()
        if int(n_c):
            total = total + rows[i0:i0 + R].sum() / wt[i0:i0 + R].sum() * n_c  # BUG: the chunk's own sum of w[t]
    return (total / counted.sum()).to(hidden.dtype)


OP = "linear_cross_entropy"  # the op it breaks: the weighted mean's divisor, per chunk
CAUGHT_BY = ("lce_matches_oracle",)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
