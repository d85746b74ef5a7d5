"""attention whose default scale is 1 / sqrt(Dv), the value head dimension, instead of
1 / sqrt(D): the same wherever D = Dv, wrong for heads such as DeepSeek's multi-head latent
attention (D 192, Dv 128)."""
import math

from . import _attn_base as A


def attention(q, k, v, *, causal=False, scale=None, window=None, softcap=None):
    if scale is None:
        scale = 1 / math.sqrt(v.shape[-1])  # BUG: v's head dimension, not q's
    s, ct, g = A.scores(q, k, causal, scale, window, softcap)
    return A.finish(s, v, ct, g, q.dtype)


OP = "attention"
CAUGHT_BY = ("attention_matches_oracle",)
