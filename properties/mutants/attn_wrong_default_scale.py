"""attention whose default scale is 1 / D instead of 1 / sqrt(D)."""
from . import _attn_base as A


def attention(q, k, v, *, causal=False, scale=None, window=None, softcap=None):
    s, ct, g = A.scores(q, k, causal, scale, window, softcap, scale_default=lambda D: 1.0 / D)  # BUG
    return A.finish(s, v, ct, g, q.dtype)


OP = "attention"
CAUGHT_BY = ("attention_matches_oracle",)
