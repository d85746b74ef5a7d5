"""Softmax-family Triton kernels: the default target of the property suite.

Every function reduces along ``dim`` (default -1) of a float16/bfloat16/float32/float64 tensor of
any shape and strides, and returns a freshly allocated contiguous tensor. ``softmax_merge`` and
``attention_merge`` merge two (softmax or attention output, logsumexp) states of column chunks
(kernels/_merge.py), ``merge_states`` merges S attention states at once (kernels/_merge_states.py).
``attention`` is flash attention returning (o, lse), with ``attention_backward`` its explicit VJP
and ``attention_block_boundaries`` its block sizes (kernels/_attention.py).
The forward ops are
differentiable (torch.library custom ops with autograd, usable under torch.compile); the
``*_backward`` functions are explicit VJPs.
"""
import torch

from . import _launch
from ._launch import block_boundaries, compiled_kernel_count, interpreting, max_block
from . import _softmax as _k
from .library import log_softmax_op, logsumexp_op, softmax_op
from ._softmax import log_softmax_backward, softmax_backward
from ._merge import attention_merge, softmax_merge
from ._merge_states import merge_states
from . import _cross_entropy as _ce
from .library import CrossEntropyFunction, cross_entropy_backward_op, cross_entropy_op
from ._attention import attention, attention_backward
from ._attention import block_boundaries as attention_block_boundaries
from ._linear_cross_entropy import linear_cross_entropy

SUITE_REFUSALS = ()  # the project's kernels refuse no valid input: any exception is a failure


def _plain_eager(x) -> bool:
    """True where the torch.library op adds nothing but host time: a plain strided tensor (not a
    subclass, nested or meta) that needs no gradient, outside torch.compile and torch.jit.trace,
    with no dispatch mode, torch function mode or functorch transform active. There the kernels
    are called directly: the op's dispatcher, autograd and dynamo layers cost ~20-100 us per call,
    depending on the host (~100 on an H200 system, where an eager bf16 logsumexp of 0.5 GB, ~125
    us of kernel, is otherwise bound by its ~220 us of host time: benchmarks/repeat.py)."""
    return (type(x) is torch.Tensor and x.layout == torch.strided and not x.is_nested and not x.is_meta
            and not (x.requires_grad and torch.is_grad_enabled())
            and not torch.compiler.is_compiling() and torch._C._get_tracing_state() is None
            and torch._C._len_torch_dispatch_stack() == 0 and not torch._C._is_torch_function_mode_enabled()
            and torch._C._functorch.peek_interpreter_stack() is None)


def _validated(op, name):
    def fn(x, dim: int = -1):
        if _plain_eager(x):
            return getattr(_k, name)(x, dim)  # which checks x and dim itself, with the same messages
        _launch.check_tensor("x", x, name)
        _launch.check_dim(dim, x.ndim, name)
        return op(x, dim)
    fn.__name__ = name
    fn.__doc__ = getattr(_k, name).__doc__
    return fn


softmax = _validated(softmax_op, "softmax")
log_softmax = _validated(log_softmax_op, "log_softmax")
logsumexp = _validated(logsumexp_op, "logsumexp")



def cross_entropy(logits, target, *, ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0, weight=None, z_loss: float = 0.0, softcap=None,
                  logit_scale: float = 1.0, return_z_loss: bool = False):
    """torch.nn.functional.cross_entropy with class-index targets: logits (..., V) of a float
    dtype, target (...) int32/int64. Returns the loss in logits' dtype: shape () for "mean"/"sum",
    target's shape for "none". Differentiable: a torch.library op under torch.compile, its
    autograd.Function twin in eager mode (same kernels, less host time per call).
    Options (off by default): ``weight`` (V class weights, torch's semantics: the mean divides by
    the sum of w[target] over the counted rows), ``z_loss`` (each counted row adds
    z_loss * lse^2, liger-kernel's lse_square_scale; the mean divides that part by the count),
    ``softcap`` (logits -> softcap * tanh(logits / softcap)) and ``logit_scale`` (logits times it,
    before the softcap). ``return_z_loss=True`` returns (loss, z-loss term), the term reduced as
    the loss and not differentiable. See kernels/_cross_entropy.py for the semantics, including
    the edge rows."""
    _ce.check_args(logits, target, ignore_index, reduction, label_smoothing, "cross_entropy")
    opts = _ce.check_options(logits, weight, z_loss, softcap, logit_scale, "cross_entropy")
    if torch.compiler.is_compiling():
        out = cross_entropy_op(logits, target, ignore_index, reduction, float(label_smoothing), weight,
                               float(z_loss), None if softcap is None else float(softcap), float(logit_scale),
                               bool(return_z_loss))
        return (out[0], out[2]) if return_z_loss else out[0]
    return CrossEntropyFunction.apply(logits, target, ignore_index, reduction, float(label_smoothing), opts,
                                      bool(return_z_loss))


def cross_entropy_backward(logits, target, dloss, *, ignore_index: int = -100, reduction: str = "mean",
                           label_smoothing: float = 0.0, lse=None, weight=None, z_loss: float = 0.0, softcap=None,
                           logit_scale: float = 1.0):
    """d loss / d logits times dloss (shape () for "mean"/"sum", target's shape for "none"; any
    float dtype and strides, stride 0 included). Returns logits' dtype and shape. ``lse``: the
    per-row logsumexp a forward computed (of the logits after logit_scale and softcap; skips
    recomputing it: then one read and one write). The options are cross_entropy's."""
    return _ce.backward(logits, target, dloss, lse, ignore_index, reduction, label_smoothing, weight=weight,
                        z_loss=z_loss, softcap=softcap, logit_scale=logit_scale)


__all__ = [
    "cross_entropy", "cross_entropy_backward", "linear_cross_entropy",
    "softmax", "softmax_backward", "log_softmax", "log_softmax_backward", "logsumexp",
    "softmax_merge", "attention_merge", "merge_states",
    "attention", "attention_backward", "attention_block_boundaries",
    "block_boundaries", "compiled_kernel_count", "interpreting", "max_block", "SUITE_REFUSALS",
]
