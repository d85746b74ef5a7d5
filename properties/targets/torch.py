"""``--target torch``: PyTorch itself, the suite's calibration target.

    python -m pytest -m properties --target torch

Every law of the ``default`` tier must pass a correct implementation, and PyTorch's own ops are
the implementation most users trust: a default-tier failure here is either a genuine PyTorch bug
(``FINDINGS.md``, with an FP64 reproducer, and ``properties/xfails/torch.txt``
with the reason) or a defect of the suite. Each function is what a user would write:

* ``softmax`` / ``log_softmax``: ``torch.softmax`` / ``torch.log_softmax`` (input dtype out).
* ``logsumexp``: ``torch.logsumexp`` of the input upcast to float32 (float64 stays float64): the
  contract's output dtype, and what a user who wants a float32 lse of 16-bit logits writes.
* ``softmax_backward`` / ``log_softmax_backward``: the aten backward ops autograd calls
  (``torch.ops.aten._softmax_backward_data`` / ``_log_softmax_backward_data``).
* ``softmax_merge`` / ``attention_merge``: two partial states merged with torch ops, in float32
  (float64 for float64), the empty-state convention of flash / ring attention (an empty side,
  lse = -inf, weighs exactly 0; two empty sides give o = 0 and lse = -inf, softmax NaN).
* ``cross_entropy``: ``torch.nn.functional.cross_entropy`` on the rows flattened to (N, V);
  ``cross_entropy_backward``: autograd through it. The options: ``weight`` and
  ``label_smoothing`` torch's own, ``logit_scale``, ``softcap`` and ``z_loss`` one line each
  around it.
* ``linear_cross_entropy``: ``F.linear`` then ``cross_entropy`` (the whole logits in memory).
* ``attention``: what SDPA offers (``causal``, ``scale``, grouped heads; no window, no softcap),
  composed as a user writes it: ``softmax(q k^T scale) v`` in the input dtype (matmuls accumulate
  in float32 and round to 16 bits for 16-bit inputs), lse from ``torch.logsumexp`` of the scores
  in float32 (float64 for float64). Causal is top-left aligned, as SDPA's ``is_causal``
  (``ATTENTION_CAUSAL_ALIGNMENT``). On CUDA, 16-bit inputs with equal head counts go through
  SDPA's flash backend, which returns its lse. A query without a key gets o = 0, lse = -inf.
  ``attention_backward``: autograd through the composition.

Every function takes ``dim=`` like torch's own, so ``dim_argument`` runs. Nothing is refused
(``SUITE_REFUSALS = ()``): torch raises only for inputs the suite never draws.

``torch_compile`` runs the same functions through ``torch.compile`` (inductor
generates Triton kernels on a GPU).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

SUITE_REFUSALS = ()


def _lse_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.softmax(x, dim)


def log_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.log_softmax(x, dim)


def logsumexp(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.logsumexp(x.to(_lse_dtype(x.dtype)), dim)


def softmax_backward(y: torch.Tensor, dy: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.ops.aten._softmax_backward_data(dy, y, dim, y.dtype)


def log_softmax_backward(z: torch.Tensor, dz: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.ops.aten._log_softmax_backward_data(dz, z, dim, z.dtype)


def _weights(lse_a: torch.Tensor, lse_b: torch.Tensor):
    """(w_a, w_b, lse, poisoned) of a merge, in the lse dtype: lse = logaddexp(lse_a, lse_b),
    w = exp(l - lse). An empty side (-inf) weighs exactly 0; both empty give lse = -inf; a NaN or
    +inf lse poisons the row's values (as a NaN or +inf logit does), which ``poisoned`` marks."""
    lse = torch.logaddexp(lse_a, lse_b)
    finite = torch.isfinite(lse)
    safe = torch.where(finite, lse, torch.zeros_like(lse))
    w_a = torch.where(lse_a == -torch.inf, 0.0, torch.exp(lse_a - safe))
    w_b = torch.where(lse_b == -torch.inf, 0.0, torch.exp(lse_b - safe))
    return w_a, w_b, lse, torch.isnan(lse) | (lse == torch.inf)


def _scaled(x, w):
    """w x in w's dtype, 0 where w is 0 (an empty side's values never reach the output)."""
    return torch.where(w[..., None] == 0, 0.0, x.to(w.dtype) * w[..., None])


def softmax_merge(p_a, lse_a, p_b, lse_b):
    """p = [w_a p_a, w_b p_b], lse = logaddexp(lse_a, lse_b); NaN p where both are empty (the
    softmax of an all -inf row) or the row is poisoned."""
    w_a, w_b, lse, poisoned = _weights(lse_a, lse_b)
    p = torch.cat([_scaled(p_a, w_a), _scaled(p_b, w_b)], -1)
    nan_rows = poisoned | (lse == -torch.inf)
    p = torch.where(nan_rows[..., None], torch.nan, p)
    return p.to(p_a.dtype), lse


def attention_merge(o_a, lse_a, o_b, lse_b):
    """o = w_a o_a + w_b o_b, lse = logaddexp(lse_a, lse_b); o = 0 where both are empty."""
    w_a, w_b, lse, poisoned = _weights(lse_a, lse_b)
    o = torch.where(poisoned[..., None], torch.nan, _scaled(o_a, w_a) + _scaled(o_b, w_b))
    return o.to(o_a.dtype), lse


def cross_entropy(logits, target, *, ignore_index=-100, reduction="mean", label_smoothing=0.0, weight=None,
                  z_loss=0.0, softcap=None, logit_scale=1.0):
    """F.cross_entropy (weight and label_smoothing its own); logit_scale, softcap and z_loss one
    line each around it, as a user composes them: the logits scaled, then capped, in their dtype;
    the z-loss z lse^2 per counted row in float32 (float64 for float64), its mean over the count."""
    V = logits.shape[-1]
    if logit_scale != 1.0:
        logits = logits * logit_scale
    if softcap is not None:
        logits = softcap * torch.tanh(logits / softcap)
    x, t = logits.reshape(-1, V), target.reshape(-1).long()
    w = None if weight is None else weight.to(logits.dtype)
    loss = F.cross_entropy(x, t, weight=w, ignore_index=ignore_index, reduction=reduction,
                           label_smoothing=float(label_smoothing))
    if z_loss:
        keep = t != ignore_index
        # ignored rows' logits left out first, so that their gradient is 0 and not 0 * inf
        xz = torch.where(keep[:, None], x.to(_lse_dtype(x.dtype)), 0.0)
        zrow = torch.where(keep, z_loss * torch.logsumexp(xz, -1) ** 2, 0.0)
        zred = zrow if reduction == "none" else zrow.sum() if reduction == "sum" else zrow.sum() / keep.sum()
        loss = (loss.to(zred.dtype) + zred).to(logits.dtype)
    return loss.reshape(target.shape) if reduction == "none" else loss


def cross_entropy_backward(logits, target, dloss, *, ignore_index=-100, reduction="mean", label_smoothing=0.0,
                           weight=None, z_loss=0.0, softcap=None, logit_scale=1.0):
    x = logits.detach().clone().requires_grad_(True)
    loss = cross_entropy(x, target, ignore_index=ignore_index, reduction=reduction, label_smoothing=label_smoothing,
                         weight=weight, z_loss=z_loss, softcap=softcap, logit_scale=logit_scale)
    (dx,) = torch.autograd.grad(loss, x, dloss.to(loss.dtype))
    return dx


ATTENTION_CAUSAL_ALIGNMENT = "top_left"  # SDPA's is_causal: query i sees keys j <= i


def _flash(q, k, v, causal, scale):
    """(o, lse) from SDPA's flash backend, or None where it does not apply."""
    if not (q.is_cuda and q.dtype in (torch.float16, torch.bfloat16) and q.shape[1] == k.shape[1]
            and q.shape[-1] == v.shape[-1] and q.shape[-1] % 8 == 0 and q.shape[-1] <= 256
            and min(q.shape[2], k.shape[2]) > 0 and not q.requires_grad):
        return None
    out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=scale)
    return out[0], out[1]


def attention(q, k, v, *, causal=False, scale=None):
    g = q.shape[1] // k.shape[1]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    got = _flash(q, k, v, causal, scale)
    if got is not None:
        return got
    if g > 1:
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    s = (q @ k.transpose(-1, -2)) * scale
    Lq, Lk = s.shape[-2], s.shape[-1]
    if causal:
        seen = torch.ones(Lq, Lk, dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~seen, -torch.inf)
    empty = (s == -torch.inf).all(-1, keepdim=True)  # no key to attend to (Lk = 0 included)
    lse = torch.logsumexp(s.to(_lse_dtype(q.dtype)), -1)
    p = torch.softmax(s.masked_fill(empty, 0.0), -1).masked_fill(empty, 0.0)
    return p @ v, lse


def attention_backward(q, k, v, o, lse, do, *, causal=False, scale=None):
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    with torch.enable_grad():
        out, _ = attention(q, k, v, causal=causal, scale=scale)
    return torch.autograd.grad(out, (q, k, v), do)


def linear_cross_entropy(hidden, weight, target, *, bias=None, ignore_index=-100, reduction="mean",
                         label_smoothing=0.0, ce_weight=None, z_loss=0.0, softcap=None, logit_scale=1.0):
    """The composition: F.linear (the whole logits in memory), then cross_entropy above (ce_weight:
    its class weights)."""
    return cross_entropy(F.linear(hidden, weight, bias), target, ignore_index=ignore_index, reduction=reduction,
                         label_smoothing=label_smoothing, weight=ce_weight, z_loss=z_loss, softcap=softcap,
                         logit_scale=logit_scale)
