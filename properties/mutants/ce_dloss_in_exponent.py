"""cross_entropy_backward that folds dloss into the exponent: p_j scale = sign(scale)
exp(x_j - lse + log|scale|), one exp instead of an exp and a product. Accurate (the log adds a
rounding of u |log scale|), so the default tier accepts it, but log(4 s) is not log(s) + log 4
after rounding: the gradient is no longer bitwise linear in dloss, which the strict tier's
reproducibility guarantee requires."""
import math

import torch


def cross_entropy_backward(logits, target, dloss, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    c = torch.float64 if logits.dtype == torch.float64 else torch.float32
    V = logits.shape[-1]
    x = logits.to(c).reshape(-1, V)
    t = target.reshape(-1).long()
    ign = t == ignore_index
    if reduction == "none":
        scale = dloss.to(c).reshape(-1)
    else:
        scale = dloss.to(c).reshape(()).expand(x.shape[0])
        if reduction == "mean":
            scale = scale / (~ign).sum()
    scale = torch.where(ign, 0.0, scale)
    lse = torch.logsumexp(x, -1)
    ls = torch.log(scale.abs())  # BUG (strict): the scale inside the exponent
    p_scaled = torch.sign(scale)[:, None] * torch.exp(x - lse[:, None] + ls[:, None])
    p_scaled = torch.where(scale[:, None] == 0, 0.0, p_scaled)
    hot = torch.zeros_like(x).scatter_(-1, torch.where(ign, 0, t).clamp(0, max(V - 1, 0))[:, None], 1.0) if V else x
    eps = float(label_smoothing)
    dx = p_scaled - ((1 - eps) * hot + eps / max(V, 1)) * scale[:, None]
    dx = torch.where(ign[:, None], 0.0, dx)
    return dx.reshape(logits.shape).to(logits.dtype)


OP = "cross_entropy_backward"  # the op it breaks: exp(x - lse + log|scale|): not bitwise linear
CAUGHT_BY = ('ce_gradient_linear_in_dloss_bitwise',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
