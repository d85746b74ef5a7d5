"""Fused linear cross-entropy whose backward forms d logits as softmax times the rows' scale and
forgets to subtract the target's one-hot and the smoothing term: each row of d logits then sums
to its scale instead of 0, and d weight = (d logits)^T hidden and d hidden are wrong (the class
of a fused kernel whose gradient pass drops a term that only its backward holds). The loss is
the project's kernels'."""
import torch

from softmax_properties import kernels


class _LinearCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, target, bias, kw):
        ctx.save_for_backward(hidden, weight, target)
        ctx.bias, ctx.kw = bias, kw
        with torch.no_grad():
            return kernels.linear_cross_entropy(hidden, weight, target, bias=bias, **kw)

    @staticmethod
    def backward(ctx, dloss):
        hidden, weight, target = ctx.saved_tensors
        kw = ctx.kw
        ct = torch.float64 if hidden.dtype == torch.float64 else torch.float32
        z = hidden.to(ct) @ weight.to(ct).T
        if ctx.bias is not None:
            z = z + ctx.bias.to(ct)
        s = float(kw.get("logit_scale", 1.0))
        p = torch.softmax(z * s, -1)
        keep = (target != kw.get("ignore_index", -100)).to(ct)
        red = kw.get("reduction", "mean")
        dl = dloss.to(ct)
        scale = dl * keep if red == "none" else (dl * keep if red == "sum" else dl * keep / keep.sum())
        G = p * (scale * s)[:, None]  # BUG: the one-hot and smoothing terms never subtracted
        return (G @ weight.to(ct)).to(hidden.dtype), (G.T @ hidden.to(ct)).to(weight.dtype), None, None, None


def linear_cross_entropy(hidden, weight, target, *, bias=None, ignore_index=-100, reduction="mean",
                         label_smoothing=0.0, z_loss=0.0, softcap=None, logit_scale=1.0):
    kw = dict(ignore_index=ignore_index, reduction=reduction, label_smoothing=label_smoothing, z_loss=z_loss,
              softcap=softcap, logit_scale=logit_scale)
    if not (hidden.requires_grad or weight.requires_grad):
        return kernels.linear_cross_entropy(hidden, weight, target, bias=bias, **kw)
    return _LinearCE.apply(hidden, weight, target, bias, kw)


OP = "linear_cross_entropy"  # the op it breaks: d logits without the one-hot term
CAUGHT_BY = ("lce_weight_grad_sums_to_zero",)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
