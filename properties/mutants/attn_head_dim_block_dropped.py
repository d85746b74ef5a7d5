"""attention whose kernel holds one head-dimension block of 64: the dimensions of q, k past 64
never reach the scores, and the columns of o past 64 are never written (left 0), as in a kernel
whose BLOCK_D is fixed rather than the padded head dimension. The same wherever D, Dv <= 64."""
import math

from . import _attn_base as A

BLOCK_D = 64


def attention(q, k, v, *, causal=False, scale=None, window=None, softcap=None):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s, ct, g = A.scores(q[..., :BLOCK_D], k[..., :BLOCK_D], causal, scale, window, softcap)  # BUG
    o, lse = A.finish(s, v, ct, g, q.dtype)
    o[..., BLOCK_D:] = 0  # BUG: the columns past the block are never written
    return o, lse


OP = "attention"
CAUGHT_BY = ("attention_matches_oracle",)
