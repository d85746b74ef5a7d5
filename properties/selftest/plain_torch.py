"""A correct plain-PyTorch implementation of the contract's softmax family and cross-entropy (no
merges), written as a new user would write it: the bar the default tier must let through
(properties/selftest/test_plain_torch.py runs the default laws on it).

    python -m pytest -m properties --target softmax_properties.properties.selftest.plain_torch

* ``softmax`` / ``log_softmax``: torch's, in float32 for 16-bit input (float64 stays float64), the
  result cast back to the input's dtype.
* ``logsumexp``: ``torch.logsumexp`` in the same compute dtype, cast back to the input's dtype
  (torch's convention for the output dtype; the contract's float32 is the strict tier's).
* ``softmax_backward`` / ``log_softmax_backward``: the textbook formulas, ``y (g - sum(y g))`` and
  ``g - exp(z) sum(g)``, in the compute dtype.
* ``cross_entropy``: ``F.cross_entropy`` on the logits in the compute dtype; its autograd runs
  ``cross_entropy_backward``, the design of fused cross-entropy kernels:
  ``(exp(x - lse) - (1 - eps) onehot - eps / V) * scale``, which for a row holding +inf gives NaN
  where x is +inf and finite values elsewhere (the exact row is all NaN). Ignored rows get 0
  (torch's autograd gives NaN where they hold NaN / inf logits: the default tier accepts both);
  an out-of-range target raises IndexError, as F.cross_entropy does.

The softmax family takes ``dim=``, so the dim laws run. Nothing is refused."""
from __future__ import annotations

import torch
import torch.nn.functional as F

SUITE_REFUSALS = ()


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _up(t: torch.Tensor) -> torch.Tensor:
    return t.to(_compute_dtype(t.dtype))


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.softmax(_up(x), dim).to(x.dtype)


def log_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.log_softmax(_up(x), dim).to(x.dtype)


def logsumexp(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.logsumexp(_up(x), dim).to(x.dtype)


def softmax_backward(y: torch.Tensor, dy: torch.Tensor, dim: int = -1) -> torch.Tensor:
    y32, g32 = _up(y), dy.to(_compute_dtype(y.dtype))
    return (y32 * (g32 - (y32 * g32).sum(dim, keepdim=True))).to(y.dtype)


def log_softmax_backward(z: torch.Tensor, dz: torch.Tensor, dim: int = -1) -> torch.Tensor:
    z32, g32 = _up(z), dz.to(_compute_dtype(z.dtype))
    return (g32 - torch.exp(z32) * g32.sum(dim, keepdim=True)).to(z.dtype)


def _rows(logits, target):
    """The logits as (N, V) rows and the targets as (N,)."""
    return logits.reshape(-1, logits.shape[-1]), target.reshape(-1).long()


def _loss(logits, target, ignore_index, reduction, label_smoothing):
    x, t = _rows(logits, target)
    loss = F.cross_entropy(_up(x), t, ignore_index=ignore_index, reduction=reduction,
                           label_smoothing=float(label_smoothing))
    return (loss.reshape(target.shape) if reduction == "none" else loss).to(logits.dtype)


def _grad(logits, target, dloss, ignore_index, reduction, label_smoothing):
    x, t = _rows(logits, target)
    x = _up(x)
    n, V = x.shape
    if bool(((t != ignore_index) & ((t < 0) | (t >= V))).any()):
        raise IndexError(f"target holds a class index outside [0, {V}) that is not ignore_index={ignore_index}")
    ignored = t == ignore_index
    eps = float(label_smoothing)
    p = torch.exp(x - torch.logsumexp(x, -1, keepdim=True))
    hot = F.one_hot(torch.where(ignored, 0, t), V).to(x.dtype) if n else torch.zeros_like(x)
    g = p - (1 - eps) * hot - eps / V
    dl = dloss.to(x.dtype)
    if reduction == "none":
        scale = dl.reshape(-1)
    elif reduction == "sum":
        scale = dl.expand(n)
    else:
        scale = (dl / (~ignored).sum()).expand(n)
    grad = torch.where(ignored[:, None], 0.0, g * scale[:, None])
    return grad.to(logits.dtype).reshape(logits.shape)


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, ignore_index, reduction, label_smoothing):
        ctx.save_for_backward(logits, target)
        ctx.options = (ignore_index, reduction, label_smoothing)
        return _loss(logits, target, ignore_index, reduction, label_smoothing)

    @staticmethod
    def backward(ctx, dloss):
        logits, target = ctx.saved_tensors
        return _grad(logits, target, dloss, *ctx.options), None, None, None, None


def cross_entropy(logits, target, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    return _CrossEntropy.apply(logits, target, ignore_index, reduction, label_smoothing)


def cross_entropy_backward(logits, target, dloss, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    return _grad(logits, target, dloss, ignore_index, reduction, label_smoothing)
