"""A differentiable softmax (a torch.autograd.Function around the project's kernels) whose backward
reads the cotangent's memory as if it were contiguous, as a kernel does that steps its rows by the
row length and its columns by one whatever the cotangent's strides (or a wrapper that reinterprets
the cotangent's storage). Autograd hands a backward the cotangent as the next op made it: a
transposed one after a transpose, a strided one after a slice. Where reading it so would leave the
cotangent's buffer (one value expanded, the cotangent of out.sum()), this backward copies it
first; the kernel it stands for would read out of bounds there."""
import math

import torch

from softmax_properties import kernels


def _contiguous_strides(shape):
    return tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))


class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = kernels.softmax(x.detach())
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        room = g.untyped_storage().nbytes() // g.element_size() - g.storage_offset()
        if g.is_contiguous() or room < g.numel():
            dy = g.contiguous()
        else:
            dy = torch.as_strided(g, g.shape, _contiguous_strides(g.shape), g.storage_offset())  # BUG: g's strides ignored
        return kernels.softmax_backward(y.detach(), dy.detach().to(y.dtype))


def softmax(x):
    return _Softmax.apply(x)


OP = "softmax"  # the op it breaks: differentiable; the backward ignores the cotangent's strides
CAUGHT_BY = ('autograd_cotangent_layouts',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
