"""attention that aligns its causal mask top-left (query i sees keys j <= i, torch SDPA's
is_causal) while declaring the default bottom-right alignment (flash-attention >= 2.1): rows
differ wherever Lq != Lk."""
from . import _attn_base as A


def attention(q, k, v, *, causal=False, scale=None, window=None, softcap=None):
    vis = A.visible(q.shape[2], k.shape[2], causal, window, q.device, off=0)  # BUG: offset 0, not Lk - Lq
    s, ct, g = A.scores(q, k, False, scale, None, softcap, vis=vis)
    return A.finish(s, v, ct, g, q.dtype)


OP = "attention"
CAUGHT_BY = ("attention_matches_oracle",)
