"""attention that forgets to divide by the row sum: o = sum_j exp(s_j - m) v_j."""
from . import _attn_base as A


def attention(q, k, v, *, causal=False, scale=None, window=None, softcap=None):
    s, ct, g = A.scores(q, k, causal, scale, window, softcap)
    return A.finish(s, v, ct, g, q.dtype, normalize=False)  # BUG: no division by the sum


OP = "attention"
CAUGHT_BY = ("o_within_value_range", "value_shift")
