"""A differentiable softmax (a torch.autograd.Function around the project's kernels) that saves a
float32 copy of its output for the backward (float64 for float64 input) and whose backward writes
the gradient into that saved copy, through ``.data`` (autograd's version counter does not see it,
so nothing raises), and returns it: to save the gradient buffer. A single backward is right, and
so is every law that runs one backward per forward; a second backward on the same graph
(``loss.backward(retain_graph=True)`` and then another) reads the first gradient as the softmax,
returns a wrong gradient and, for float32 input, overwrites the tensor the first backward returned
(it is the saved copy itself). The bug class: a backward that works in place on what the forward
saved (libraries' fused backward kernels that write dx over the saved probabilities)."""
import torch

from softmax_properties import kernels


class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = kernels.softmax(x.detach())
        ctx.save_for_backward(y.to(torch.promote_types(y.dtype, torch.float32), copy=True))
        return y

    @staticmethod
    def backward(ctx, g):
        (saved,) = ctx.saved_tensors
        dx = kernels.softmax_backward(saved.detach(), g.detach().to(saved.dtype))
        buf = saved.data  # BUG: the saved softmax, behind the version counter
        buf.copy_(dx)
        return buf.to(g.dtype)


def softmax(x):
    return _Softmax.apply(x)


OP = "softmax"  # the op it breaks: differentiable; the backward overwrites what its forward saved
CAUGHT_BY = ('autograd_backward_twice',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
