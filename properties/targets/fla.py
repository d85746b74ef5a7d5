"""``--target fla``: fla-core 0.6.0's softmax, logsumexp, fused cross-entropy and fused linear
cross-entropy.

    python -m pip install -e ".[fla]"          # fla-core==0.6.0 (and einops, which it imports)
    python -m pytest -m properties --target fla

What fla-core offers of the suite's contract, and how each function calls it:

* ``softmax(x)``: ``fla.ops.utils.softmax_fwd(x, dtype=x.dtype)`` (autotuned Triton kernel, one
  block of next_power_of_2(D) columns per row; ``dtype`` is the output dtype, float32 by default:
  the adapter asks for the input's).
* ``softmax_backward(y, dy)``: ``fla.ops.utils.softmax_bwd(y, dy, dtype=y.dtype)``.
* ``logsumexp(x)``: ``fla.ops.utils.logsumexp_fwd(x)`` (float32 result, the suite's contract
  for 16/32-bit input; rows longer than 65,536 are split into blocks and merged by torch).
* ``cross_entropy(logits, target, *, ignore_index, reduction, label_smoothing)``:
  ``fla.modules.fused_cross_entropy.cross_entropy_loss`` (FusedCrossEntropyFunction) on
  ``logits.reshape(-1, V)``, ``target.reshape(-1)``; it returns the per-row loss in float32
  (documented: "FP32 loss"). The reduction is FusedCrossEntropyLoss.forward's, verbatim
  (``loss.sum()``, divided by the number of non-ignored targets for "mean"): that module asserts
  CUDA tensors, so it cannot run under the interpreter. The adapter rounds the float32 loss to
  the logits' dtype (the suite's contract).
* ``cross_entropy_backward(logits, target, dloss, ...)``: autograd through the same path:
  ``torch.autograd.grad(reduced loss, logits, dloss)`` (FusedCrossEntropyFunction.backward,
  ``inplace_backward=False``, fla's default: the logits are not overwritten).
* ``linear_cross_entropy(hidden, weight, target, *, bias, ignore_index, reduction,
  label_smoothing, softcap, logit_scale)``: ``fla.modules.fused_linear_cross_entropy.
  fused_linear_cross_entropy_loss`` (FusedLinearCrossEntropyFunction: rows in chunks, each
  chunk's logits formed by ``F.linear`` in the inputs' dtype, fla's cross-entropy kernels on them,
  the gradients formed in the forward, d weight accumulated in float32, its default) on
  ``hidden.reshape(-1, H)`` and ``target.reshape(-1)``, with ``logit_softcapping=softcap``
  (logits scaled, then capped, the suite's order). The loss is float32 (documented "Scalar loss
  in fp32"). No class weights and no z-loss in its signature.

Strides, the documented contract: fla's public functions are wrapped in ``fla.utils.input_guard``
("make sure all input tensors are contiguous"), and its kernels index rows as ``i * D``. The
``fla.ops.utils`` helpers are called from behind such guards (fla.ops.gsa, fla.ops.abc), so the
adapter wraps them in ``input_guard`` too: strided input reaches them as a contiguous copy, as in
fla itself. (Unguarded, ``softmax_fwd`` views a row-padded tensor as contiguous and reads the
padding: see FINDINGS.md.) ``cross_entropy_loss`` is guarded by fla already.

Declared refusals (``NotImplementedError``, the only ``SUITE_REFUSALS``): the fused linear
cross-entropy's ``reduction="none"`` (its docstring: "'mean' | 'sum'"), and float64 for softmax,
logsumexp and cross-entropy (the fused linear one included). fla computes those in float32: its
math primitives ``fla.ops.utils.op.exp`` and ``log`` cast their argument to float32, logsumexp_fwd's partial
results are a float32 buffer, and cross_entropy_loss documents an FP32 loss. softmax_bwd does its
arithmetic in the input's dtype, so float64 is tested there.

Anything else fla raises and any wrong result is a failure.
"""
from __future__ import annotations

import torch

from ._common import ce_args, float_tensor, lce_args, require, same_shape

_ops_utils = require("fla.ops.utils", "fla-core==0.6.0", "fla")
_fce = require("fla.modules.fused_cross_entropy", "fla-core==0.6.0", "fla")
_fla_utils = require("fla.utils", "fla-core==0.6.0", "fla")

SUITE_REFUSALS = (NotImplementedError,)

_flce = require("fla.modules.fused_linear_cross_entropy", "fla-core==0.6.0", "fla")

_softmax_fwd = _fla_utils.input_guard(_ops_utils.softmax_fwd)
_softmax_bwd = _fla_utils.input_guard(_ops_utils.softmax_bwd)
_logsumexp_fwd = _fla_utils.input_guard(_ops_utils.logsumexp_fwd)


def _no_float64(what: str, t: torch.Tensor):
    if t.dtype == torch.float64:
        raise NotImplementedError(f"fla {what} computes in float32 (fla.ops.utils.op.exp/log cast to float32"
                                  f"{'; the loss is documented FP32' if what == 'cross-entropy' else ''}): "
                                  f"float64 is not offered")


def block_boundaries():
    """One block of next_power_of_2(D) columns per row (logsumexp: up to 65536, then split);
    cross-entropy: 65536-column forward blocks, 4096-column backward blocks."""
    return tuple(2**k for k in range(4, 17))


def softmax(x: torch.Tensor) -> torch.Tensor:
    float_tensor("x", x)
    _no_float64("softmax", x)
    return _softmax_fwd(x, dtype=x.dtype)


def softmax_backward(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    float_tensor("y", y)
    float_tensor("dy", dy)
    same_shape("dy", dy, "y", y)
    return _softmax_bwd(y, dy, dtype=y.dtype)


def logsumexp(x: torch.Tensor) -> torch.Tensor:
    float_tensor("x", x)
    _no_float64("logsumexp", x)
    return _logsumexp_fwd(x)


def _loss(logits, target, ignore_index, reduction, label_smoothing):
    """fla's per-row float32 loss reduced as FusedCrossEntropyLoss.forward reduces it."""
    V = logits.shape[-1]
    t = target.reshape(-1)
    loss, _z = _fce.cross_entropy_loss(logits.reshape(-1, V), t, label_smoothing=float(label_smoothing),
                                       ignore_index=ignore_index)
    if reduction != "none":
        loss = loss.sum()
        if reduction == "mean":
            loss = loss / (t != ignore_index).sum()
    return loss


def cross_entropy(logits, target, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    V, batch = ce_args(logits, target, reduction, label_smoothing)
    _no_float64("cross-entropy", logits)
    loss = _loss(logits, target, ignore_index, reduction, label_smoothing)
    if reduction == "none":
        loss = loss.reshape(batch)
    return loss.to(logits.dtype)


def cross_entropy_backward(logits, target, dloss, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    V, batch = ce_args(logits, target, reduction, label_smoothing, dloss)
    _no_float64("cross-entropy", logits)
    x = logits.detach().requires_grad_(True)
    loss = _loss(x, target, ignore_index, reduction, label_smoothing)
    g = dloss.reshape(-1) if reduction == "none" else dloss
    (dx,) = torch.autograd.grad(loss, x, g.to(loss.dtype))
    return dx


def linear_cross_entropy(hidden, weight, target, *, bias=None, ignore_index=-100, reduction="mean",
                         label_smoothing=0.0, softcap=None, logit_scale=1.0):
    lce_args(hidden, weight, target, bias, reduction, label_smoothing)
    _no_float64("cross-entropy", hidden)
    if reduction == "none":
        raise NotImplementedError("fla's fused linear cross-entropy reduces 'mean' and 'sum' only (its docstring)")
    return _flce.fused_linear_cross_entropy_loss(hidden.reshape(-1, hidden.shape[-1]), target.reshape(-1), weight,
                                                 bias, ignore_index=ignore_index,
                                                 label_smoothing=float(label_smoothing),
                                                 logit_scale=float(logit_scale),
                                                 logit_softcapping=None if softcap is None else float(softcap),
                                                 reduction=reduction)
