"""Softmax-family Triton kernels: the default target of the property suite.

Every function reduces along ``dim`` (default -1) of a float16/bfloat16/float32/float64 tensor of
any shape and strides, and returns a freshly allocated contiguous tensor. ``softmax_merge`` and
``attention_merge`` merge two (softmax or attention output, logsumexp) states of column chunks
(kernels/_merge.py). The forward ops are
differentiable (torch.library custom ops with autograd, usable under torch.compile); the
``*_backward`` functions are explicit VJPs.
"""
from . import _launch
from ._launch import block_boundaries, compiled_kernel_count, interpreting, max_block
from . import _softmax as _k
from .library import log_softmax_op, logsumexp_op, softmax_op
from ._softmax import log_softmax_backward, softmax_backward
from ._merge import attention_merge, softmax_merge

SUITE_REFUSALS = ()  # the project's kernels refuse no valid input: any exception is a failure


def _validated(op, name):
    def fn(x, dim: int = -1):
        _launch.check_tensor("x", x, name)
        _launch.check_dim(dim, x.ndim, name)
        return op(x, dim)
    fn.__name__ = name
    fn.__doc__ = getattr(_k, name).__doc__
    return fn


softmax = _validated(softmax_op, "softmax")
log_softmax = _validated(log_softmax_op, "log_softmax")
logsumexp = _validated(logsumexp_op, "logsumexp")

__all__ = [
    "softmax", "softmax_backward", "log_softmax", "log_softmax_backward", "logsumexp",
    "softmax_merge", "attention_merge",
    "block_boundaries", "compiled_kernel_count", "interpreting", "max_block", "SUITE_REFUSALS",
]
