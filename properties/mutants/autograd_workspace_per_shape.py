"""A differentiable logsumexp (a torch.autograd.Function around the project's kernels) that keeps
what its backward needs, the softmax of its input, in a workspace of its own, one buffer per
(shape, dtype, device) reused by every call: to save an allocation per call. Each graph's backward
reads the workspace as the last forward of that shape left it. Training that runs each forward's
backward before the next forward never sees it; two forwards whose backwards run in the other
order (gradient checkpointing, pipeline parallelism, two losses' graphs kept for later) give the
first graph the second input's softmax. The bug class: state saved for backward outside the
autograd context (a module-level cache or a workspace keyed by shape)."""
import torch

from softmax_properties import kernels

_WORKSPACE = {}  # (shape, dtype, device) -> the buffer every call of that shape saves into


class _LogSumExp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        p = kernels.softmax(x.detach())
        key = (tuple(p.shape), p.dtype, p.device)
        if key not in _WORKSPACE:
            _WORKSPACE[key] = torch.empty_like(p)
        ctx.workspace = _WORKSPACE[key]  # BUG: shared with the next call of this shape
        ctx.workspace.copy_(p)
        return kernels.logsumexp(x.detach())

    @staticmethod
    def backward(ctx, g):
        return (ctx.workspace.double() * g.double()[..., None]).to(ctx.workspace.dtype)


def logsumexp(x):
    return _LogSumExp.apply(x)


OP = "logsumexp"  # the op it breaks: differentiable; what the backward reads is shared across calls
CAUGHT_BY = ('autograd_backward_twice',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
