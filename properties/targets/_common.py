"""Shared argument checks of the adapters: bad input raises TypeError/ValueError naming the
argument (a caller error, never a refusal: the adapters' SUITE_REFUSALS is NotImplementedError)."""
from __future__ import annotations

import importlib

import torch

REDUCTIONS = ("mean", "sum", "none")
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def require(module: str, dist: str, extra: str):
    """Import a library module or raise ImportError naming the distribution and the extra."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"this adapter needs {dist} ({module} could not be imported: {e}); "
                          f'install it with: python -m pip install -e ".[{extra}]"') from e


def float_tensor(name: str, t, min_ndim: int = 1) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in FLOATS:
        raise TypeError(f"{name} must be float16, bfloat16, float32 or float64, got {t.dtype}")
    if t.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimension(s), got shape {tuple(t.shape)}")
    return t


def same_shape(name: str, t: torch.Tensor, like_name: str, like: torch.Tensor):
    if t.shape != like.shape:
        raise ValueError(f"{name} must have the shape of {like_name} {tuple(like.shape)}, got {tuple(t.shape)}")


def ce_args(logits, target, reduction, label_smoothing, dloss=None):
    """Check cross-entropy arguments; returns (V, batch shape)."""
    float_tensor("logits", logits)
    if not isinstance(target, torch.Tensor):
        raise TypeError(f"target must be a torch.Tensor, got {type(target).__name__}")
    if target.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"target must be int32 or int64 class indices, got {target.dtype}")
    if tuple(target.shape) != tuple(logits.shape[:-1]):
        raise ValueError(f"target must have the logits' batch shape {tuple(logits.shape[:-1])}, got {tuple(target.shape)}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if not isinstance(label_smoothing, (int, float)) or not 0.0 <= float(label_smoothing) <= 1.0:
        raise ValueError(f"label_smoothing must be a float in [0, 1], got {label_smoothing!r}")
    if dloss is not None:
        float_tensor("dloss", dloss, min_ndim=0)
        want = tuple(target.shape) if reduction == "none" else ()
        if tuple(dloss.shape) != want:
            raise ValueError(f"dloss must have the loss's shape {want} (reduction={reduction!r}), got {tuple(dloss.shape)}")
    return logits.shape[-1], tuple(logits.shape[:-1])


def lce_args(hidden, weight, target, bias, reduction, label_smoothing):
    """Check the fused linear cross-entropy's arguments (hidden (..., H), weight (V, H), bias (V,)
    or None, then ce_args on a stand-in of the logits' shape on the meta device: the fused op's
    point is that the (N, V) logits are never allocated); returns (V, batch shape)."""
    float_tensor("hidden", hidden)
    float_tensor("weight", weight, min_ndim=2)
    if weight.ndim != 2 or weight.shape[1] != hidden.shape[-1]:
        raise ValueError(f"weight must be (V, H) with H = hidden's last size {hidden.shape[-1]}, "
                         f"got {tuple(weight.shape)}")
    if bias is not None:
        float_tensor("bias", bias)
        if tuple(bias.shape) != (weight.shape[0],):
            raise ValueError(f"bias must be (V,) = ({weight.shape[0]},), got {tuple(bias.shape)}")
    logits = torch.empty(hidden.shape[:-1] + (weight.shape[0],), dtype=hidden.dtype, device="meta")
    return ce_args(logits, target, reduction, label_smoothing)
