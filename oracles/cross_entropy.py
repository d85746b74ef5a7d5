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

Options (each off by default; with all off every function here computes exactly what it computes
without them):

* ``logit_scale`` s and ``softcap`` c: the logits are replaced by y = c tanh(s x / c) (the scale
  first, then the cap; either alone is x -> s x or x -> c tanh(x / c)) before anything else, so
  a +-inf logit under a softcap is +-c and its row is finite. The gradient with respect to x is
  the gradient with respect to y times s (1 - tanh(s x / c)^2), formed as s / cosh(s x / c)^2 so
  that it keeps its relative accuracy where tanh rounds to +-1.
* ``weight`` w (V class weights): torch's semantics. The NLL term of row i is w[t_i] (lse_i -
  y_i[t_i]); the smoothing term is, as torch composes it (aten LossNLL.cpp,
  cross_entropy_loss_label_smoothing), eps / V * sum_j w_j (lse_i - y_ij) -- divided by V, not by
  sum w; and reduction "mean" divides the sum of both over the rows by sum_i w[t_i] over the
  non-ignored rows (NaN when that is 0, whatever the smoothing term: torch's NLL part is 0 / 0
  there; the counted rows' gradient is NaN too). A zero weight times an infinite term is NaN, as
  torch's product forms it.
* ``z_loss`` z (liger-kernel's ``lse_square_scale``): row i gains z lse_i^2 (lse of y), unweighted;
  ignored rows gain nothing; reduction "mean" divides the z terms' sum by the count of
  non-ignored rows, not by the weights' sum (liger-kernel's cross_entropy kernel divides its
  weighted loss by sum_non_ignore_weight and its z-loss by n_non_ignore; without weights the two
  divisors agree and the mean is the mean of the rows' total losses). Its gradient is
  2 z lse_i softmax(y_i), scaled like the term.
"""
from __future__ import annotations

import torch

from .reference import row_stats, row_sum, softmax


def _f64(t):
    return t.detach().to(torch.float64)


def transform(x, softcap=None, logit_scale: float = 1.0) -> torch.Tensor:
    """The logits the loss sees (float64): c tanh(s x / c), or s x without a softcap."""
    x = _f64(x)
    if logit_scale != 1.0:
        x = x * float(logit_scale)
    if softcap is not None:
        x = float(softcap) * torch.tanh(x / float(softcap))
    return x


def transform_grad(x, softcap=None, logit_scale: float = 1.0) -> torch.Tensor:
    """d transform(x) / dx (float64): s / cosh(s x / c)^2 (= s (1 - tanh^2), without the
    cancellation of 1 - tanh^2 where tanh rounds to +-1), or s without a softcap."""
    x = _f64(x)
    s = float(logit_scale)
    if softcap is None:
        return torch.full_like(x, s)
    return s / torch.cosh(x * s / float(softcap)) ** 2


def _weights(w, x):
    return None if w is None else _f64(w).to(x.device)


def _target_col(x, t, ignore_index):
    V = x.shape[-1]
    ign = t == ignore_index
    return ign, torch.where(ign, 0, t).clamp(0, V - 1).long()


def loss_parts(x, t, ignore_index: int = -100, label_smoothing: float = 0.0, weight=None, z_loss: float = 0.0,
               softcap=None, logit_scale: float = 1.0):
    """(per-row cross-entropy term, per-row z term or None when z_loss is 0), float64, each 0 on
    ignored rows; the cross-entropy term carries the class weights."""
    opts = softcap is not None or logit_scale != 1.0
    x = transform(x, softcap, logit_scale) if opts else _f64(x)
    V = x.shape[-1]
    eps = float(label_smoothing)
    m, fin, d, e, s = row_stats(x)
    logs = torch.log(s)
    ms = torch.where(fin, m, 0.0)
    ign, tc = _target_col(x, t, ignore_index)
    xt = torch.gather(x, -1, tc[..., None])[..., 0]
    w = _weights(weight, x)
    if w is not None:
        wt = w[tc]
        # torch: w_t times the NLL term, and eps / V sum_j w_j (lse - y_j) (LossNLL.cpp)
        loss = wt * (logs - (xt - ms))
        if eps > 0:
            keep = 1 - eps
            loss = keep * loss + eps * row_sum((w / V) * (logs[..., None] - d))
    elif eps == 0:
        loss = logs - (xt - ms)
    else:
        keep = 1 - eps
        mean_d = row_sum(x / V - (ms / V)[..., None])
        loss = (keep * logs - (keep * xt - keep * ms)) + eps * (logs - mean_d)
    loss = torch.where(fin, loss, float("nan"))  # NaN, +inf, or only -inf in the row
    loss = torch.where(ign, 0.0, loss)
    if not z_loss:
        return loss, None
    lse = torch.where(fin, ms + logs, m)
    z = float(z_loss)
    return loss, torch.where(ign, 0.0, (z * lse) * lse)


def loss_rows(x, t, ignore_index: int = -100, label_smoothing: float = 0.0, weight=None, z_loss: float = 0.0,
              softcap=None, logit_scale: float = 1.0) -> torch.Tensor:
    """Per-row loss (float64), 0 on ignored rows: the cross-entropy term plus the z term."""
    ce, z = loss_parts(x, t, ignore_index, label_smoothing, weight, z_loss, softcap, logit_scale)
    return ce if z is None else ce + z


def divisors(t, ignore_index: int, weight=None):
    """The mean's divisors (float64 scalars): (sum of w[t] over the non-ignored rows, or their
    count without weights; the count), the first for the cross-entropy term, the second for the
    z term."""
    live = t != ignore_index
    count = live.sum().to(torch.float64)
    if weight is None:
        return count, count
    w = _f64(weight).to(t.device)
    tc = torch.where(live, t, 0).clamp(0, w.numel() - 1).long()
    return torch.where(live, w[tc], 0.0).sum(), count


def cross_entropy(x, t, ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0,
                  weight=None, z_loss: float = 0.0, softcap=None, logit_scale: float = 1.0,
                  return_z_loss: bool = False):
    """The loss (float64), and with return_z_loss the z term reduced the same way (0 for z_loss
    0): (loss, z)."""
    ce, z = loss_parts(x, t, ignore_index, label_smoothing, weight, z_loss, softcap, logit_scale)
    if weight is None and z is None:
        rows = ce
        if reduction == "none":
            out = rows
        else:
            total = rows.sum()
            if reduction == "mean":
                total = total / (t != ignore_index).sum()  # 0 / 0 = NaN for an all-ignored batch
            out = total
    elif reduction == "none":
        out = ce if z is None else ce + z
    elif reduction == "sum":
        out = ce.sum() if z is None else ce.sum() + z.sum()
    else:
        dw, count = divisors(t, ignore_index, weight)
        # NaN where no row counts (all ignored) or every counted target weighs 0: torch's
        # (1 - eps) NLL / sum w[t] is 0 / 0 there, whatever the smoothing term
        out = torch.where(dw == 0, float("nan"), ce.sum() / dw)
        if z is not None:
            out = out + z.sum() / count
    if not return_z_loss:
        return out
    if z is None:
        z = torch.zeros_like(ce)
    zr = z if reduction == "none" else (z.sum() if reduction == "sum" else z.sum() / (t != ignore_index).sum())
    return out, zr


def grad_scale(t, dloss, ignore_index: int, reduction: str, weight=None, for_z: bool = False) -> torch.Tensor:
    """Per row (float64): dloss_i (none), dloss (sum), dloss / count (mean); 0 on ignored rows.
    With weights, the mean's divisor of the cross-entropy term is sum w[t] (for_z: the z term's
    divisor, the count)."""
    dl = _f64(dloss)
    if reduction == "none":
        sc = dl
    elif reduction == "sum":
        sc = dl.expand(t.shape)
    elif weight is None or for_z:
        sc = (dl / (t != ignore_index).sum()).expand(t.shape)
    else:
        dw = divisors(t, ignore_index, weight)[0]
        sc = torch.where(dw == 0, float("nan"), dl / dw).expand(t.shape)  # torch's NaN (w[t] = 0 times 1 / 0)
    return torch.where(t == ignore_index, 0.0, sc)


def cross_entropy_backward(x, t, dloss, ignore_index: int = -100, reduction: str = "mean",
                           label_smoothing: float = 0.0, weight=None, z_loss: float = 0.0, softcap=None,
                           logit_scale: float = 1.0) -> torch.Tensor:
    """(softmax(y) - (1 - eps) onehot(t) - eps / V) * scale with y the transformed logits, exactly
    0 on ignored rows; with weights (1 - eps) w_t (softmax(y) - onehot(t)) + eps / V (sum(w)
    softmax(y) - w); plus 2 z lse softmax(y) times the z term's scale; all times dy/dx."""
    x0 = x
    opts = softcap is not None or logit_scale != 1.0
    x = transform(x, softcap, logit_scale) if opts else _f64(x)
    V = x.shape[-1]
    eps = float(label_smoothing)
    p = softmax(x)
    ign, tc = _target_col(x, t, ignore_index)
    hot = torch.zeros_like(p).scatter_(-1, tc[..., None], 1.0)
    w = _weights(weight, x)
    if w is None:
        g = p - (1 - eps) * hot - eps / V if eps > 0 else p - hot
    else:
        g = w[tc][..., None] * (p - hot)
        if eps > 0:
            g = (1 - eps) * g + (eps / V) * (w.sum() * p - w)
    sc = grad_scale(t, dloss, ignore_index, reduction, weight)
    g = g * sc[..., None]
    if z_loss:
        m, fin, d, e, s = row_stats(x)
        lse = torch.where(fin, torch.where(fin, m, 0.0) + torch.log(s), m)
        zs = grad_scale(t, dloss, ignore_index, reduction, weight, for_z=True)
        g = g + (2 * float(z_loss) * lse * zs)[..., None] * p
    if opts:
        g = g * transform_grad(x0, softcap, logit_scale)
    return torch.where(ign[..., None], 0.0, g)
