"""Cross-entropy whose weighted path (a separate code path taken whenever weight is given) forms
lse as log(sum(exp(y))) without subtracting the row max: exp overflows past y ~ 88 in float32
(11 in float16), and the loss is inf or NaN where the unweighted path is finite. Formed in the
compute precision with torch ops, torch's weighted semantics otherwise (the NLL term times
w[t], the smoothing term eps / V sum_j w_j (lse - y_j), the mean over sum w[t]); without
weights the call is the project's kernels' own."""
import torch

from softmax_properties import kernels


def cross_entropy(logits, target, *, ignore_index=-100, reduction="mean", label_smoothing=0.0, weight=None,
                  z_loss=0.0, softcap=None, logit_scale=1.0):
    kw = dict(ignore_index=ignore_index, reduction=reduction, label_smoothing=label_smoothing, z_loss=z_loss,
              softcap=softcap, logit_scale=logit_scale)
    if weight is None:
        return kernels.cross_entropy(logits, target, **kw)
    kernels.cross_entropy(logits, target, weight=weight, **kw)  # the kernels' argument checks
    ct = torch.float64 if logits.dtype == torch.float64 else torch.float32
    V = logits.shape[-1]
    y = logits.to(ct).reshape(-1, V) * logit_scale
    if softcap is not None:
        y = softcap * torch.tanh(y / softcap)
    t = target.reshape(-1).long()
    keep = t != ignore_index
    tc = torch.where(keep, t, 0)
    w = weight.to(ct)
    lse = torch.log(torch.exp(y).sum(-1))  # BUG: no max subtraction
    eps = float(label_smoothing)
    yt = y.gather(-1, tc[:, None])[:, 0]
    rows = (1 - eps) * w[tc] * (lse - yt) + eps / V * (w * (lse[:, None] - y)).sum(-1)
    rows = torch.where(keep, rows, 0.0)
    z = torch.where(keep, z_loss * lse * lse, 0.0)
    if reduction == "none":
        return (rows + z).reshape(target.shape).to(logits.dtype)
    if reduction == "sum":
        return (rows.sum() + z.sum()).to(logits.dtype)
    return (rows.sum() / torch.where(keep, w[tc], 0.0).sum() + z.sum() / keep.sum()).to(logits.dtype)


OP = "cross_entropy"  # the op it breaks: the weighted path's lse overflows
CAUGHT_BY = ("ce_unit_weights_equal_unweighted",)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
