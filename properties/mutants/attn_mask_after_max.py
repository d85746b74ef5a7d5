"""attention that shifts each row by the max over all keys, masked ones included, before masking:
the row's arithmetic then depends on keys it cannot see (bitwise, and beyond once an invisible
score dominates)."""
import math

import torch

from . import _attn_base as A


def attention(q, k, v, *, causal=False, scale=None, window=None, softcap=None):
    full, ct, g = A.scores(q, k, False, scale, None, softcap)
    vis = A.visible(q.shape[2], k.shape[2], causal, window, q.device)
    m = full.amax(-1, keepdim=True) if full.shape[-1] else full.new_zeros((*full.shape[:-1], 1))  # BUG: all keys
    e = torch.where(vis, torch.exp(full - m), 0.0)
    l = e.sum(-1, keepdim=True)
    empty = ~vis.any(-1)[..., None] | (l == 0)
    lse = torch.where(empty, -math.inf, m + torch.log(l)).squeeze(-1)
    vv = v.to(ct).repeat_interleave(g, dim=1) if g > 1 else v.to(ct)
    o = torch.where(empty, 0.0, (e / torch.where(empty, 1.0, l)) @ vv)
    return o.to(q.dtype), lse


OP = "attention"
CAUGHT_BY = ("mask_locality_strict",)
