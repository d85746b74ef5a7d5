"""FP64 truth for the fused linear cross-entropy: the logits hidden @ weight.T + bias
materialised in float64 (from the inputs as given, already rounded to their dtype), then the
cross-entropy oracle (oracles/cross_entropy.py) on them; the gradients by the chain rule from its
gradient with respect to the logits G: d hidden = G weight, d weight = G.T hidden, d bias = the
column sums of G."""
from __future__ import annotations

import torch

from . import cross_entropy as ce


def _f64(t):
    return None if t is None else t.detach().to(torch.float64)


def logits(hidden, weight, bias=None) -> torch.Tensor:
    """(..., V) float64: hidden @ weight.T + bias."""
    z = _f64(hidden) @ _f64(weight).T
    return z if bias is None else z + _f64(bias)


def linear_cross_entropy(hidden, weight, target, bias=None, ignore_index: int = -100, reduction: str = "mean",
                         label_smoothing: float = 0.0, ce_weight=None, z_loss: float = 0.0, softcap=None,
                         logit_scale: float = 1.0) -> torch.Tensor:
    """ce_weight: the cross-entropy's class weights (V,) (weight is the linear layer's)."""
    return ce.cross_entropy(logits(hidden, weight, bias), target, ignore_index, reduction, label_smoothing,
                            _f64(ce_weight), z_loss, softcap, logit_scale)


def linear_cross_entropy_backward(hidden, weight, target, dloss, bias=None, ignore_index: int = -100,
                                  reduction: str = "mean", label_smoothing: float = 0.0, ce_weight=None,
                                  z_loss: float = 0.0, softcap=None, logit_scale: float = 1.0):
    """(d hidden, d weight, d bias or None), float64."""
    g = ce.cross_entropy_backward(logits(hidden, weight, bias), target, dloss, ignore_index, reduction,
                                  label_smoothing, _f64(ce_weight), z_loss, softcap, logit_scale)
    H = hidden.shape[-1]
    g2 = g.reshape(-1, g.shape[-1])
    dh = (g2 @ _f64(weight)).reshape(*hidden.shape[:-1], H)
    dw = g2.T @ _f64(hidden).reshape(-1, H)
    db = None if bias is None else g2.sum(0)
    return dh, dw, db
