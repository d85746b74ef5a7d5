"""attention that walks the keys in blocks of 8 counted by floor division: the keys past the
last full block are never read (a query that sees only those gets o = 0, lse = -inf)."""
import torch

from . import _attn_base as A


def attention(q, k, v, *, causal=False, scale=None, window=None, softcap=None):
    vis = A.visible(q.shape[2], k.shape[2], causal, window, q.device)
    full = (k.shape[2] // 8) * 8  # BUG: the tail block is dropped
    vis = vis & (torch.arange(k.shape[2], device=q.device) < full)
    s, ct, g = A.scores(q, k, False, scale, None, softcap, vis=vis)
    return A.finish(s, v, ct, g, q.dtype)


OP = "attention"
CAUGHT_BY = ("key_permutation_invariance", "attention_matches_oracle")
