"""attention whose softmax forgets to subtract the row max: exp of scores of hundreds overflows
(inf / inf = NaN in o, lse +inf)."""
from . import _attn_base as A


def attention(q, k, v, *, causal=False, scale=None, window=None, softcap=None):
    s, ct, g = A.scores(q, k, causal, scale, window, softcap)
    return A.finish(s, v, ct, g, q.dtype, shift=False)  # BUG: exp(s), not exp(s - max)


OP = "attention"
CAUGHT_BY = ("attention_matches_oracle",)
