"""Fused linear cross-entropy that forms the gradients in its forward (for dloss = 1, as the
fused kernels do) and, in its backward, scales the stored gradients by the cotangent in place
and returns them (the class of a fused kernel that saves an allocation by scaling its saved
gradients in place): one backward is right, a second on the retained graph returns g1 g2 times
the gradient and rescales the tensors the first backward returned. The values are the project's
kernels'; for reduction "none" (a cotangent per row) the call is theirs."""
import torch

from softmax_properties import kernels

from ._lce_base import cross_entropy, kernel_grads  # noqa: F401 (cross_entropy: the op it composes)


class _ScaledInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, target, options):
        one = torch.ones((), dtype=hidden.dtype, device=hidden.device)  # the loss dtype
        ctx.grads = kernel_grads(hidden, weight, bias, target, one, options)
        with torch.no_grad():
            return kernels.linear_cross_entropy(hidden, weight, target, bias=bias, **options)

    @staticmethod
    def backward(ctx, dloss):
        grads = tuple(None if g is None else g.mul_(dloss) for g in ctx.grads)  # BUG: in place
        return (*grads, None, None)


def linear_cross_entropy(hidden, weight, target, *, bias=None, ignore_index=-100, reduction="mean",
                         label_smoothing=0.0, z_loss=0.0, softcap=None, logit_scale=1.0):
    options = dict(ignore_index=ignore_index, reduction=reduction, label_smoothing=label_smoothing, z_loss=z_loss,
                   softcap=softcap, logit_scale=logit_scale)
    if reduction == "none" or not any(x is not None and x.requires_grad for x in (hidden, weight, bias)):
        return kernels.linear_cross_entropy(hidden, weight, target, bias=bias, **options)
    return _ScaledInPlace.apply(hidden, weight, bias, target, options)


OP = "linear_cross_entropy"  # the op it breaks: a second backward on a retained graph
CAUGHT_BY = ("lce_backward_twice",)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
