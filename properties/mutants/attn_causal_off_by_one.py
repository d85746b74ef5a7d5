"""attention whose causal mask lets each query see one key past the diagonal (j <= i + d + 1)."""
import math

from . import _attn_base as A


def attention(q, k, v, *, causal=False, scale=None, window=None, softcap=None):
    vis = A.visible(q.shape[2], k.shape[2], causal, window, q.device)
    if causal:
        vis = A.visible(q.shape[2], k.shape[2], False, window, q.device) & \
            A.visible(q.shape[2], k.shape[2], False, (-1, 1), q.device)  # BUG: one key too many
    s, ct, g = A.scores(q, k, False, scale, None, softcap, vis=vis)
    return A.finish(s, v, ct, g, q.dtype)


OP = "attention"
CAUGHT_BY = ("mask_locality", "attention_matches_oracle")
