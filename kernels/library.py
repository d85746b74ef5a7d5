"""The forward ops as torch.library custom ops with autograd, so they are differentiable and
traceable by torch.compile. Backward uses the explicit VJP kernels (first order only)."""
from __future__ import annotations

from typing import Optional

import torch

from . import _softmax as _k

_NS = "softmax_props"


def _fake_like(x: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


@torch.library.custom_op(f"{_NS}::softmax", mutates_args=())
def softmax_op(x: torch.Tensor, dim: int) -> torch.Tensor:
    return _k.softmax(x, dim)


@torch.library.custom_op(f"{_NS}::log_softmax", mutates_args=())
def log_softmax_op(x: torch.Tensor, dim: int) -> torch.Tensor:
    return _k.log_softmax(x, dim)


@torch.library.custom_op(f"{_NS}::logsumexp", mutates_args=())
def logsumexp_op(x: torch.Tensor, dim: int) -> torch.Tensor:
    return _k.logsumexp(x, dim)


@softmax_op.register_fake
def _(x, dim):
    return _fake_like(x, dim)


@log_softmax_op.register_fake
def _(x, dim):
    return _fake_like(x, dim)


@logsumexp_op.register_fake
def _(x, dim):
    d = dim % max(x.ndim, 1)
    shape = x.shape[:d] + x.shape[d + 1:] if x.ndim else x.shape
    return torch.empty(shape, dtype=torch.float64 if x.dtype == torch.float64 else torch.float32, device=x.device)


def _save_out(ctx, inputs, output):
    ctx.save_for_backward(output)
    ctx.dim = inputs[1]


def _save_in(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.dim = inputs[1]


def _softmax_bwd(ctx, grad):
    (y,) = ctx.saved_tensors
    return _k.softmax_backward(y.detach(), grad.detach().to(y.dtype), ctx.dim), None


def _log_softmax_bwd(ctx, grad):
    (z,) = ctx.saved_tensors
    return _k.log_softmax_backward(z.detach(), grad.detach().to(z.dtype), ctx.dim), None


def _logsumexp_bwd(ctx, grad):
    (x,) = ctx.saved_tensors
    d = ctx.dim % max(x.ndim, 1)
    y = _k.softmax(x.detach(), ctx.dim)
    g = grad.detach().unsqueeze(d) if x.ndim else grad.detach()
    return (y.to(g.dtype) * g).to(x.dtype), None


softmax_op.register_autograd(_softmax_bwd, setup_context=_save_out)
log_softmax_op.register_autograd(_log_softmax_bwd, setup_context=_save_out)
logsumexp_op.register_autograd(_logsumexp_bwd, setup_context=_save_in)


# ----------------------------------------------------------------------------------------------
# cross-entropy: the forward returns (loss, lse); the backward is a custom op too, so that the
# traced backward graph under torch.compile holds an opaque call rather than the Triton launch
# ----------------------------------------------------------------------------------------------
from . import _cross_entropy as _ce  # noqa: E402


@torch.library.custom_op(f"{_NS}::cross_entropy", mutates_args=())
def cross_entropy_op(logits: torch.Tensor, target: torch.Tensor, ignore_index: int, reduction: str,
                     label_smoothing: float, weight: Optional[torch.Tensor] = None, z_loss: float = 0.0,
                     softcap: Optional[float] = None, logit_scale: float = 1.0,
                     return_z_loss: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, lse, z term): the z term reduced as the loss with return_z_loss, else empty."""
    out = _ce.forward(logits, target, ignore_index, reduction, label_smoothing, weight=weight, z_loss=z_loss,
                      softcap=softcap, logit_scale=logit_scale, return_z_loss=return_z_loss)
    if return_z_loss:
        return out
    return out[0], out[1], logits.new_empty((0,))


@cross_entropy_op.register_fake
def _(logits, target, ignore_index, reduction, label_smoothing, weight=None, z_loss=0.0, softcap=None,
      logit_scale=1.0, return_z_loss=False):
    shape = target.shape if reduction == "none" else ()
    ct = torch.float64 if logits.dtype == torch.float64 else torch.float32
    z = torch.empty(shape if return_z_loss else (0,), dtype=logits.dtype, device=logits.device)
    return (torch.empty(shape, dtype=logits.dtype, device=logits.device),
            torch.empty((target.numel(),), dtype=ct, device=logits.device), z)


@torch.library.custom_op(f"{_NS}::cross_entropy_backward", mutates_args=())
def cross_entropy_backward_op(logits: torch.Tensor, target: torch.Tensor, dloss: torch.Tensor, lse: torch.Tensor,
                              ignore_index: int, reduction: str, label_smoothing: float,
                              weight: Optional[torch.Tensor] = None, z_loss: float = 0.0,
                              softcap: Optional[float] = None, logit_scale: float = 1.0) -> torch.Tensor:
    return _ce.backward(logits, target, dloss, lse, ignore_index, reduction, label_smoothing, weight=weight,
                        z_loss=z_loss, softcap=softcap, logit_scale=logit_scale)


@cross_entropy_backward_op.register_fake
def _(logits, target, dloss, lse, ignore_index, reduction, label_smoothing, weight=None, z_loss=0.0, softcap=None,
      logit_scale=1.0):
    return torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)


def _ce_setup(ctx, inputs, output):
    logits, target, ignore_index, reduction, label_smoothing, weight, z_loss, softcap, logit_scale, _ = inputs
    ctx.save_for_backward(logits, target, output[1], weight)
    ctx.opts = (ignore_index, reduction, label_smoothing)
    ctx.extra = (z_loss, softcap, logit_scale)
    ctx.mark_non_differentiable(output[1], output[2])


def _ce_bwd(ctx, dloss, dlse, dz):
    logits, target, lse, weight = ctx.saved_tensors
    g = cross_entropy_backward_op(logits.detach(), target, dloss.detach(), lse, *ctx.opts,
                                  None if weight is None else weight.detach(), *ctx.extra)
    return g, None, None, None, None, None, None, None, None, None


cross_entropy_op.register_autograd(_ce_bwd, setup_context=_ce_setup)


class CrossEntropyFunction(torch.autograd.Function):
    """The eager twin of cross_entropy_op: the same kernels (kernels/_cross_entropy.py), with the
    backward's launch prepared in the forward (BackwardPlan), without the torch.library dispatch,
    which costs ~80 us of host time per forward + backward on a CPU host (a toy op: 124 us
    against 46 us with an autograd.Function). kernels.cross_entropy uses it
    outside torch.compile; under torch.compile it calls cross_entropy_op, which traces.
    opts: the checked options (_cross_entropy.check_options; None where all are off). The class
    weights get no gradient (as in torch, whose cross-entropy has no derivative for them)."""

    @staticmethod
    def forward(ctx, logits, target, ignore_index, reduction, label_smoothing, opts=None, return_z_loss=False):
        # kernels.cross_entropy has checked the arguments
        loss, lse, stats, ctx.plan, z = _ce.forward_for_autograd(logits, target, ignore_index, reduction,
                                                                 label_smoothing, opts, return_z_loss)
        ctx.save_for_backward(logits, target)  # for autograd's check that they are unchanged
        if return_z_loss:
            ctx.mark_non_differentiable(z)
            return loss, z
        return loss

    @staticmethod
    def backward(ctx, dloss, *dz):
        # the forward checked the arguments and the targets and prepared the launch; autograd
        # hands a dloss of the loss's shape, dtype and device (the z term is not differentiable:
        # it is a part of the loss, reported)
        ctx.saved_tensors  # noqa: B018 - raises if logits or target were modified in place
        return ctx.plan.run(dloss), None, None, None, None, None, None
