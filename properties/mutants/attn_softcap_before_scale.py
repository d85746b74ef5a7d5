"""attention that soft-caps the raw dot products and scales after: c tanh(q.k / c) * scale, where
the contract (Gemma 2's and flash-attention's softcap) caps the scaled scores, c tanh(scale q.k /
c). The two agree only where tanh is linear; saturated scores land at c * scale instead of c. The
bug class: an option applied at the wrong point of the score pipeline."""
import math

from . import _attn_base as A


def attention(q, k, v, *, causal=False, scale=None, window=None, softcap=None):
    if not softcap:
        return A.attention(q, k, v, causal=causal, scale=scale, window=window)
    s, ct, g = A.scores(q, k, causal, 1.0, window, softcap)  # BUG: capped before the scale
    sc = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    return A.finish(s * sc, v, ct, g, q.dtype)


OP = "attention"
CAUGHT_BY = ("attention_matches_oracle",)
