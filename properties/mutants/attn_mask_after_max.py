"""attention that shifts each row by a max taken over all its keys, masked ones included (capped at
8 above the max of the visible ones, so no visible weight underflows): the values stay within
the bound, but a row's rounding depends on keys it cannot see."""
import math

import torch

from . import _attn_base as A


def attention(q, k, v, *, causal=False, scale=None, window=None, softcap=None):
    full, ct, g = A.scores(q, k, False, scale, None, softcap)
    vis = A.visible(q.shape[2], k.shape[2], causal, window, q.device)
    if not full.shape[-1]:
        return A.finish(full, v, ct, g, q.dtype)
    m_vis = torch.where(vis, full, -math.inf).amax(-1, keepdim=True)
    m = torch.minimum(full.amax(-1, keepdim=True), m_vis + 8)  # BUG: masked keys move the shift
    empty = m_vis == -math.inf
    m = torch.where(empty, 0.0, m)
    e = torch.where(vis, torch.exp(full - m), 0.0)
    l = e.sum(-1, keepdim=True)
    lse = torch.where(empty, -math.inf, m + torch.log(l)).squeeze(-1)
    vv = v.to(ct).repeat_interleave(g, dim=1) if g > 1 else v.to(ct)
    o = torch.where(empty, 0.0, (e / torch.where(empty, 1.0, l)) @ vv)
    return o.to(q.dtype), lse


OP = "attention"
CAUGHT_BY = ("mask_locality_strict",)
