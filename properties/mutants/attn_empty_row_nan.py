"""attention whose query without a key gets the softmax of an all -inf row: NaN o (and lse -inf)."""
import math

import torch

from . import _attn_base as A


def attention(q, k, v, *, causal=False, scale=None, window=None, softcap=None):
    s, ct, g = A.scores(q, k, causal, scale, window, softcap)
    o, lse = A.finish(s, v, ct, g, q.dtype)
    empty = torch.isinf(lse) & (lse < 0)
    return torch.where(empty[..., None], math.nan, o.double()).to(q.dtype), lse  # BUG: NaN, not 0


OP = "attention"
CAUGHT_BY = ("attention_empty_rows",)
