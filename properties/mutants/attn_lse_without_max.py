"""attention whose lse is log sum_j exp(s_j - m), the running max m never added back: o is right,
lse is off by the row max."""
import torch

from . import _attn_base as A


def attention(q, k, v, *, causal=False, scale=None, window=None, softcap=None):
    s, ct, g = A.scores(q, k, causal, scale, window, softcap)
    o, lse = A.finish(s, v, ct, g, q.dtype)
    m = s.amax(-1) if s.shape[-1] else lse
    return o, torch.where(torch.isfinite(m), lse - m, lse)  # BUG: lse - m


OP = "attention"
CAUGHT_BY = ("key_shift", "attention_matches_oracle")
