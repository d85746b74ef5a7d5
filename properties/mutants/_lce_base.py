"""The fused linear cross-entropy mutants whose forward is the project's kernels' and whose
backward is wrong: with_backward(grads) is linear_cross_entropy as a custom autograd Function,
the loss the kernels', the gradients grads(hidden, weight, bias, target, dloss, options)."""
import torch

from softmax_properties import kernels

cross_entropy = kernels.cross_entropy


def kernel_grads(hidden, weight, bias, target, dloss, options):
    """(d hidden, d weight, d bias or None): autograd through the kernels' fused op."""
    leaves = [t.detach().requires_grad_(True) for t in (hidden, weight)]
    b = None if bias is None else bias.detach().requires_grad_(True)
    with torch.enable_grad():
        out = kernels.linear_cross_entropy(*leaves, target, bias=b, **options)
        grads = torch.autograd.grad(out, leaves + ([b] if b is not None else []), dloss)
    return grads[0], grads[1], grads[2] if b is not None else None


def with_backward(grads):
    class _Fused(torch.autograd.Function):
        @staticmethod
        def forward(ctx, hidden, weight, bias, target, options):
            ctx.save_for_backward(hidden, weight, bias, target)
            ctx.options = options
            with torch.no_grad():
                return kernels.linear_cross_entropy(hidden, weight, target, bias=bias, **options)

        @staticmethod
        def backward(ctx, dloss):
            hidden, weight, bias, target = ctx.saved_tensors
            return (*grads(hidden, weight, bias, target, dloss, ctx.options), None, None)

    def linear_cross_entropy(hidden, weight, target, *, bias=None, ignore_index=-100, reduction="mean",
                             label_smoothing=0.0, z_loss=0.0, softcap=None, logit_scale=1.0):
        options = dict(ignore_index=ignore_index, reduction=reduction, label_smoothing=label_smoothing,
                       z_loss=z_loss, softcap=softcap, logit_scale=logit_scale)
        if not any(t is not None and t.requires_grad for t in (hidden, weight, bias)):
            return kernels.linear_cross_entropy(hidden, weight, target, bias=bias, **options)
        return _Fused.apply(hidden, weight, bias, target, options)
    return linear_cross_entropy
