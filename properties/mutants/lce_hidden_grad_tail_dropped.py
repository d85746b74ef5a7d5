"""Fused linear cross-entropy whose backward writes d hidden for the whole chunks only: the rows
of the ragged last chunk (R = 8 rows per chunk, N not a multiple of 8 past 8) keep a zero
gradient, while the loss and d weight are right (the class of a fused kernel whose gradient pass
drops a tail of rows that its forward kept). Values are the project's kernels' elsewhere."""
import torch

from softmax_properties import kernels

R = 8
cross_entropy = kernels.cross_entropy


class _TailDropped(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, target, kw):
        ctx.save_for_backward(hidden, weight, bias, target)
        ctx.kw = kw
        with torch.no_grad():
            return kernels.linear_cross_entropy(hidden, weight, target, bias=bias, **kw)

    @staticmethod
    def backward(ctx, dloss):
        hidden, weight, bias, target = ctx.saved_tensors
        leaves = [t.detach().requires_grad_(True) for t in (hidden, weight)]
        b = None if bias is None else bias.detach().requires_grad_(True)
        with torch.enable_grad():
            out = kernels.linear_cross_entropy(*leaves, target, bias=b, **ctx.kw)
            grads = torch.autograd.grad(out, leaves + ([b] if b is not None else []), dloss)
        dh = grads[0].clone()
        N = dh.shape[0]
        if N > R:
            dh[N - N % R:] = 0  # BUG: the ragged last chunk's rows get no gradient
        return dh, grads[1], grads[2] if b is not None else None, None, None


def linear_cross_entropy(hidden, weight, target, *, bias=None, ignore_index=-100, reduction="mean",
                         label_smoothing=0.0, z_loss=0.0, softcap=None, logit_scale=1.0):
    kw = dict(ignore_index=ignore_index, reduction=reduction, label_smoothing=label_smoothing, z_loss=z_loss,
              softcap=softcap, logit_scale=logit_scale)
    if not any(t is not None and t.requires_grad for t in (hidden, weight, bias)):
        return kernels.linear_cross_entropy(hidden, weight, target, bias=bias, **kw)
    return _TailDropped.apply(hidden, weight, bias, target, kw)


OP = "linear_cross_entropy"  # the op it breaks: d hidden of the last partial chunk's rows
CAUGHT_BY = ("lce_gradients_match_oracle",)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
