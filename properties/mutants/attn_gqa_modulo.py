"""attention with grouped heads where query head h reads key / value head h % Hkv instead of
h // G."""
import torch

from . import _attn_base as A


def attention(q, k, v, *, causal=False, scale=None, window=None, softcap=None):
    heads = torch.arange(q.shape[1], device=q.device) % k.shape[1]  # BUG: h % Hkv, not h // G
    s, ct, g = A.scores(q, k, causal, scale, window, softcap, heads=heads)
    return A.finish(s, v, ct, g, q.dtype, heads=heads)


OP = "attention"
CAUGHT_BY = ("grouped_heads_match_repeated",)
