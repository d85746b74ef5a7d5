"""attention_backward with grouped heads whose dk and dv take the first query head of each group
only, instead of the sum over the group's heads."""
from . import _attn_base as A


def attention_backward(q, k, v, o, lse, do, *, causal=False, scale=None, window=None, softcap=None):
    g = q.shape[1] // k.shape[1]
    opts = dict(causal=causal, scale=scale, window=window, softcap=softcap)
    dq, dk, dv = A.backward_of(A.attention, q, k, v, do, **opts)
    if g > 1:  # BUG: the gradient of the group's first head only
        first = do.contiguous().clone()
        first.view(do.shape[0], k.shape[1], g, *do.shape[2:])[:, :, 1:] = 0
        _, dk, dv = A.backward_of(A.attention, q, k, v, first, **opts)
    return dq, dk, dv


OP = "attention_backward"
CAUGHT_BY = ("attention_matches_oracle", "zero_sum_vjps")
