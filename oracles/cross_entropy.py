"""FP64 truth for cross-entropy with class-index targets (torch's F.cross_entropy semantics), over
the last axis: logits (..., V), target (...). Written from the definitions on top of this
package's log-softmax oracle, not by calling torch's loss.

    loss_i = (1 - eps) (lse_i - x_i[t_i]) + eps (lse_i - mean_j x_ij)        (eps = label_smoothing)
    dloss/dx_ij = softmax(x_i)_j - (1 - eps) [j = t_i] - eps / V

Differences are formed as (1 - eps) x_t - (1 - eps) m and sum_j (x_j / V - m / V), with m the row
max, so a float64 row whose exact loss is finite does not overflow in an intermediate.
Edge rows follow CE_SEMANTICS (oracles/semantics.py):
a row with NaN or +inf, or only -inf, gives NaN; a -inf target logit gives +inf (NaN for eps = 1,
where torch forms 0 * inf); a -inf non-target logit with eps > 0 gives +inf. Ignored rows give
loss 0 and an exactly zero gradient (torch: NaN gradient if that row holds NaN/inf logits).
"""
from __future__ import annotations

import torch

from .reference import row_stats, row_sum, softmax


def _f64(t):
    return t.detach().to(torch.float64)


def loss_rows(x, t, ignore_index: int = -100, label_smoothing: float = 0.0) -> torch.Tensor:
    """Per-row loss (float64), 0 on ignored rows."""
    x = _f64(x)
    V = x.shape[-1]
    eps = float(label_smoothing)
    m, fin, d, e, s = row_stats(x)
    logs = torch.log(s)
    ms = torch.where(fin, m, 0.0)
    ign = t == ignore_index
    tc = torch.where(ign, 0, t).clamp(0, V - 1).long()
    xt = torch.gather(x, -1, tc[..., None])[..., 0]
    if eps == 0:
        loss = logs - (xt - ms)
    else:
        keep = 1 - eps
        mean_d = row_sum(x / V - (ms / V)[..., None])
        loss = (keep * logs - (keep * xt - keep * ms)) + eps * (logs - mean_d)
    loss = torch.where(fin, loss, float("nan"))  # NaN, +inf, or only -inf in the row
    return torch.where(ign, 0.0, loss)


def cross_entropy(x, t, ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0):
    rows = loss_rows(x, t, ignore_index, label_smoothing)
    if reduction == "none":
        return rows
    total = rows.sum()
    if reduction == "mean":
        total = total / (t != ignore_index).sum()  # 0 / 0 = NaN for an all-ignored batch
    return total


def grad_scale(t, dloss, ignore_index: int, reduction: str) -> torch.Tensor:
    """Per row (float64): dloss_i (none), dloss (sum), dloss / count (mean); 0 on ignored rows."""
    dl = _f64(dloss)
    if reduction == "none":
        sc = dl
    elif reduction == "sum":
        sc = dl.expand(t.shape)
    else:
        sc = (dl / (t != ignore_index).sum()).expand(t.shape)
    return torch.where(t == ignore_index, 0.0, sc)


def cross_entropy_backward(x, t, dloss, ignore_index: int = -100, reduction: str = "mean",
                           label_smoothing: float = 0.0) -> torch.Tensor:
    """(softmax(x) - (1 - eps) onehot(t) - eps / V) * scale, exactly 0 on ignored rows."""
    x = _f64(x)
    V = x.shape[-1]
    eps = float(label_smoothing)
    p = softmax(x)
    ign = t == ignore_index
    tc = torch.where(ign, 0, t).clamp(0, V - 1).long()
    hot = torch.zeros_like(p).scatter_(-1, tc[..., None], 1.0)
    g = p - (1 - eps) * hot - eps / V if eps > 0 else p - hot
    sc = grad_scale(t, dloss, ignore_index, reduction)
    return torch.where(ign[..., None], 0.0, g * sc[..., None])
