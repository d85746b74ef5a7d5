"""attention whose scores are rounded to a 16-bit input dtype twice (the matmul's output and the
scaled product), as torch's eager composition forms them: within the default tier's bound, not
within the strict tier's float32-scores bound."""
import math

from . import _attn_base as A


def attention(q, k, v, *, causal=False, scale=None, window=None, softcap=None):
    sc = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    g = q.shape[1] // k.shape[1]
    kk = k.repeat_interleave(g, dim=1) if g > 1 else k
    raw = ((q.double() @ kk.double().transpose(-1, -2)).to(q.dtype) * sc).to(q.dtype)  # BUG: 16-bit scores
    s, ct, g = A.scores(q, k, causal, 1.0, window, None)
    s = raw.to(ct)
    if softcap:
        s = softcap * (s / softcap).tanh()
    vis = A.visible(q.shape[2], k.shape[2], causal, window, q.device)
    return A.finish(s.masked_fill(~vis, -math.inf), v, ct, g, q.dtype)


OP = "attention"
CAUGHT_BY = ("attention_matches_oracle_strict",)
