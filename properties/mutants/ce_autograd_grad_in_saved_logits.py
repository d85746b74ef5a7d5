"""A differentiable cross-entropy (a torch.autograd.Function around the project's kernels) whose
backward writes the gradient into the saved logits' own memory, through ``.data`` (autograd's
version counter does not see it, so nothing raises), and returns that memory as the gradient: to
save the V-wide gradient buffer. The caller's logits are destroyed, and a second loss on the same
logits (or a second backward) computes its gradient from the first gradient instead of the
logits. The forward and the explicit cross_entropy_backward are right, so only an autograd-level
law sees it. The bug class: issue 3 of the coverage review (a cross-entropy whose backward writes
into the saved logits in place, wrong by 0.456 against max |dW| = 0.627 in a linear layer fed to
two losses); liger-kernel's cross-entropy keeps its gradient in the logits' memory in the same
way. In place when the logits are contiguous (the fast path)."""
import torch

from softmax_properties import kernels
from softmax_properties.kernels import _cross_entropy as _ce


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, ignore_index, reduction, label_smoothing):
        ctx.save_for_backward(logits, target)
        ctx.opts = dict(ignore_index=ignore_index, reduction=reduction, label_smoothing=label_smoothing)
        return kernels.cross_entropy(logits.detach(), target, **ctx.opts)

    @staticmethod
    def backward(ctx, dloss):
        logits, target = ctx.saved_tensors
        dx = kernels.cross_entropy_backward(logits.detach(), target, dloss, **ctx.opts)
        if logits.is_contiguous():
            buf = logits.data  # BUG: the caller's logits, behind the version counter
            buf.copy_(dx)
            return buf, None, None, None, None
        return dx, None, None, None, None


def cross_entropy(logits, target, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    _ce.check_args(logits, target, ignore_index, reduction, label_smoothing, "cross_entropy")
    return _CrossEntropy.apply(logits, target, ignore_index, reduction, float(label_smoothing))


OP = "cross_entropy"  # the op it breaks: backward writes into the saved logits
CAUGHT_BY = ('autograd_composition',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
