"""``--target liger``: liger-kernel 0.8.5's softmax and cross-entropy kernels.

    python -m pip install -e ".[liger]"        # liger-kernel==0.8.5
    python -m pytest -m properties --target liger

What liger-kernel offers of the suite's contract, and how each function calls it:

* ``softmax(x)``: ``liger_kernel.transformers.functional.liger_softmax`` (LigerSoftmaxFunction: its
  ``ensure_contiguous`` copies strided input, ``liger_kernel.ops.softmax._softmax_forward`` runs
  the Triton kernel on rows flattened to 2-D, in the input's dtype).
* ``softmax_backward(y, dy)``: ``liger_kernel.ops.softmax._softmax_backward(dy, y, ...)``, the
  function LigerSoftmaxFunction.backward calls, with the launch settings its forward would have
  saved (``calculate_settings(D)``; single-block, since BLOCK_SIZE = next_power_of_2(D) >= D).
* ``cross_entropy(logits, target, *, ignore_index, reduction, label_smoothing)``:
  ``liger_kernel.transformers.functional.liger_cross_entropy`` on ``logits.reshape(-1, V)`` and
  ``target.reshape(-1)`` (liger takes (BT, V) and (BT,) only; the reshape is a view where the
  batch axes merge, as a caller would pass them). The loss has the logits' dtype.
* the options ``weight``, ``z_loss`` (liger's ``lse_square_scale``) and ``softcap`` go to
  ``liger_cross_entropy`` as its keywords of those names (``_ce_options``); liger has no logit
  scale, so the logit_scale laws are skipped for it.
* ``cross_entropy_backward(logits, target, dloss, ...)``: autograd through the same
  ``liger_cross_entropy``: forward on a float copy of the logits that requires grad, then
  ``torch.autograd.grad(loss, logits, dloss)`` (LigerCrossEntropyFunction.backward).
* ``linear_cross_entropy(hidden, weight, target, *, bias, ignore_index, reduction,
  label_smoothing, ce_weight, z_loss, softcap)``: ``liger_kernel.transformers.functional.
  liger_fused_linear_cross_entropy`` (LigerFusedLinearCrossEntropyFunction: rows in chunks of
  about H x BT / V, each chunk's logits formed by torch's matmul in the inputs' dtype, then
  liger's cross-entropy kernel, the gradients formed in the forward) on ``hidden.reshape(-1, H)``
  and ``target.reshape(-1)``, with the defaults a caller gets (``accum_dtype=None``: d weight and
  d bias accumulated over the chunks in the weight's dtype). Differentiable in hidden, weight and
  bias. The loss is float32 whatever the inputs' dtype (its per-row buffer). No logit scale.

In-place writes, the documented contract: liger's cross-entropy forward computes the gradient
when its input requires grad and stores it *into the input's buffer* ("Here we use a trick to
store X_ptr gradient in X_ptr so we can save memory", ops/cross_entropy.py; the saved input is
the gradient). So ``cross_entropy_backward`` hands liger a clone: overwriting logits the user
asked for a gradient of is liger's contract. ``cross_entropy`` (no gradient requested) hands
liger the caller's logits themselves: a forward that writes into them is not in the contract, and
the suite's ``inputs_unmodified`` is left to catch it.

Declared refusals (``NotImplementedError``, the only ``SUITE_REFUSALS``), each from liger's code:

* softmax and its backward with rows longer than 65,536: ``liger_kernel.ops.utils.
  calculate_settings`` raises "Cannot launch Triton kernel since n = ... exceeds the recommended
  Triton blocksize = 65536" (a whole row is one block).
* cross-entropy (and the fused linear cross-entropy) in float64: the kernel casts every logit to
  float32 ("Ensure float32 precision for softmax calculation") and liger's dtype table
  (``liger_kernel.ops.utils.torch_to_triton_dtype``) lists float32, float16 and bfloat16 only.

Declared convention (``CE_EMPTY_MEAN = 0.0``): a mean over no counted rows (every target
``ignore_index``) is 0 in liger's cross-entropy and fused linear cross-entropy, both (its kernels
divide by the number of counted rows, and a batch of padding only makes no loss), where torch
returns NaN (0 / 0). Both are conventions (a training step over an all-padding batch stays
finite): the suite judges liger by its own. A weighted mean whose counted rows weigh 0 in all is
not covered: there torch's NaN is the truth still.

Anything else liger raises (its out-of-range-target ``assert`` included, which the suite's
``ce_out_of_range_target_raises`` law accepts as a Python exception naming the target) and any
wrong result is a failure.
"""
from __future__ import annotations

import torch

from ._common import ce_args, float_tensor, lce_args, require, same_shape

_functional = require("liger_kernel.transformers.functional", "liger-kernel==0.8.5", "liger")
_softmax_ops = require("liger_kernel.ops.softmax", "liger-kernel==0.8.5", "liger")
_utils = require("liger_kernel.ops.utils", "liger-kernel==0.8.5", "liger")
import triton  # noqa: E402  (after the library: its own import pulls triton in anyway)

SUITE_REFUSALS = (NotImplementedError,)
CE_EMPTY_MEAN = 0.0  # a mean over no counted rows is 0 (module docstring), torch's is NaN
MAX_SOFTMAX_COLS = 65536  # liger_kernel.ops.utils.calculate_settings: MAX_FUSED_SIZE


def _check_softmax_cols(D: int):
    if triton.next_power_of_2(D) > MAX_SOFTMAX_COLS:
        raise NotImplementedError(f"liger softmax: rows of {D} columns exceed liger's documented limit of "
                                  f"{MAX_SOFTMAX_COLS} (calculate_settings: one block per row)")


def _check_ce_dtype(logits: torch.Tensor):
    if logits.dtype == torch.float64:
        raise NotImplementedError("liger cross-entropy computes in float32 (the kernel casts the logits to "
                                  "float32; torch_to_triton_dtype has no float64): float64 is not offered")


def block_boundaries():
    """Softmax: one block of next_power_of_2(D) columns per row (1 < D <= 65536). Cross-entropy:
    blocks of min(32768, next_power_of_2(V)) columns, looped."""
    return tuple(2**k for k in range(4, 17))


def softmax(x: torch.Tensor) -> torch.Tensor:
    float_tensor("x", x)
    _check_softmax_cols(x.shape[-1])
    return _functional.liger_softmax(x)


def softmax_backward(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    float_tensor("y", y)
    float_tensor("dy", dy)
    same_shape("dy", dy, "y", y)
    D = y.shape[-1]
    _check_softmax_cols(D)
    block, num_warps = _utils.calculate_settings(D)
    return _softmax_ops._softmax_backward(dy, y, block, num_warps, D > block)


def _flat(logits, target):
    V = logits.shape[-1]
    return logits.reshape(-1, V), target.reshape(-1)


def _ce_options(weight, z_loss, softcap) -> dict:
    """The suite's cross-entropy options as liger_cross_entropy's keywords: ``weight`` (its class
    weights, torch's (V,) tensor), ``z_loss`` as ``lse_square_scale`` (z lse^2 per counted row,
    its mean over the count of counted rows), ``softcap`` (c tanh(x / c) first). liger has no
    logit scale: the suite's logit_scale laws are skipped for it."""
    return dict(weight=weight, lse_square_scale=float(z_loss), softcap=None if softcap is None else float(softcap))


def cross_entropy(logits, target, *, ignore_index=-100, reduction="mean", label_smoothing=0.0, weight=None,
                  z_loss=0.0, softcap=None):
    V, batch = ce_args(logits, target, reduction, label_smoothing)
    _check_ce_dtype(logits)
    x, t = _flat(logits, target)
    loss = _functional.liger_cross_entropy(x, t, ignore_index=ignore_index, reduction=reduction,
                                           label_smoothing=float(label_smoothing),
                                           **_ce_options(weight, z_loss, softcap))
    return loss.reshape(batch) if reduction == "none" else loss


def cross_entropy_backward(logits, target, dloss, *, ignore_index=-100, reduction="mean", label_smoothing=0.0,
                           weight=None, z_loss=0.0, softcap=None):
    V, batch = ce_args(logits, target, reduction, label_smoothing, dloss)
    _check_ce_dtype(logits)
    x, t = _flat(logits.detach(), target)
    x = x.clone().requires_grad_(True)  # liger writes the gradient into this buffer (its contract)
    loss = _functional.liger_cross_entropy(x, t, ignore_index=ignore_index, reduction=reduction,
                                           label_smoothing=float(label_smoothing),
                                           **_ce_options(weight, z_loss, softcap))
    g = dloss.reshape(-1) if reduction == "none" else dloss
    (dx,) = torch.autograd.grad(loss, x, g)
    return dx.reshape(logits.shape)


def linear_cross_entropy(hidden, weight, target, *, bias=None, ignore_index=-100, reduction="mean",
                         label_smoothing=0.0, ce_weight=None, z_loss=0.0, softcap=None):
    V, batch = lce_args(hidden, weight, target, bias, reduction, label_smoothing)
    _check_ce_dtype(hidden)
    h, t = hidden.reshape(-1, hidden.shape[-1]), target.reshape(-1)
    opts = _ce_options(None, z_loss, softcap)
    del opts["weight"]  # the fused op's class weights are its ce_weight, as the suite's contract names them
    loss = _functional.liger_fused_linear_cross_entropy(h, weight, t, bias, ce_weight=ce_weight,
                                                        ignore_index=ignore_index,
                                                        reduction=reduction, label_smoothing=float(label_smoothing),
                                                        **opts)
    return loss.reshape(batch) if reduction == "none" else loss
