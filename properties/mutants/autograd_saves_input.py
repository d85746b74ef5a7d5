"""A differentiable softmax (a torch.autograd.Function around the project's Triton kernels) whose
forward saves its input for the backward where the VJP needs its output: the backward evaluates
y * (g - sum(y * g)) with x in place of y. The forward values are right, so only a gradient check
sees it. The bug class: the wrong tensor passed to ctx.save_for_backward (softmax's VJP is written
in terms of the output; log_softmax's and logsumexp's are often written in terms of the input, and
the two get mixed up when one Function is copied into another)."""
import torch

from softmax_properties import kernels


class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = kernels.softmax(x.detach())
        ctx.save_for_backward(x)  # BUG: the VJP needs y
        return y

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return kernels.softmax_backward(x.detach(), g.detach().to(x.dtype))


def softmax(x):
    return _Softmax.apply(x)


OP = "softmax"  # the op it breaks: differentiable; the backward uses x for y
CAUGHT_BY = ('gradcheck_float64',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
