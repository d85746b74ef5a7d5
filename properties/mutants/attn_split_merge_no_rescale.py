"""Split-KV attention (two halves of the keys, merged) whose merge forgets the lse rescale:
o = (o_1 + o_2) / 2 whatever the halves' lse; the lse is right."""
import torch

from . import _attn_base as A


def attention(q, k, v, *, causal=False, scale=None, window=None, softcap=None):
    s, ct, g = A.scores(q, k, causal, scale, window, softcap)
    h = s.shape[-1] // 2
    if h == 0:
        return A.finish(s, v, ct, g, q.dtype)
    o1, l1 = A.finish(s[..., :h], v[:, :, :h], ct, g, ct)
    o2, l2 = A.finish(s[..., h:], v[:, :, h:], ct, g, ct)
    lse = torch.logaddexp(l1, l2)
    e1, e2 = (l1 > -torch.inf)[..., None], (l2 > -torch.inf)[..., None]
    o = torch.where(e1 & e2, (o1 + o2) / 2, o1 + o2)  # BUG: not exp(l_c - lse) o_c
    return o.to(q.dtype), lse


OP = "attention"
CAUGHT_BY = ("split_kv_equivalence",)
