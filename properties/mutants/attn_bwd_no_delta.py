"""attention_backward that forms dS = P dP, forgetting the rowsum(P dP) the softmax's VJP
subtracts: dk no longer sums to zero over the keys."""
import math

import torch

from . import _attn_base as A


def attention_backward(q, k, v, o, lse, do, *, causal=False, scale=None, window=None, softcap=None):
    s, ct, g = A.scores(q, k, causal, scale, window, None)
    sc = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    m = torch.where(torch.isfinite(lse.to(ct)), lse.to(ct), 0.0)[..., None]
    p = torch.where(torch.isfinite(s), torch.exp(s - m), 0.0)
    kk, vv = (t.to(ct).repeat_interleave(g, dim=1) if g > 1 else t.to(ct) for t in (k, v))
    dp = do.to(ct) @ vv.transpose(-1, -2)
    ds = p * dp  # BUG: p * (dp - rowsum(p * dp))
    dq = sc * ds @ kk
    dk = sc * ds.transpose(-1, -2) @ q.to(ct)
    dv = p.transpose(-1, -2) @ do.to(ct)
    B, Hkv, Lk = k.shape[0], k.shape[1], k.shape[2]
    if g > 1:
        dk = dk.reshape(B, Hkv, g, Lk, -1).sum(2)
        dv = dv.reshape(B, Hkv, g, Lk, -1).sum(2)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


OP = "attention_backward"
CAUGHT_BY = ("zero_sum_vjps",)
