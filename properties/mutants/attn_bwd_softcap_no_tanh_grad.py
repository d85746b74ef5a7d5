"""attention_backward under a softcap that forgets the chain rule through the cap: dS is taken
with respect to the capped scores and not multiplied by their derivative 1 - tanh^2(s / c), so the
gradients are right only where tanh is linear (the issue class of a soft-cap whose backward forgets
the tanh' term; the cross-entropy's twin is ce_softcap_no_tanh_grad)."""
import torch

from . import _attn_base as A


def _forward(q, k, v, *, causal=False, scale=None, window=None, softcap=None):
    """The base composition, but the cap's derivative taken as 1 (the capped scores' values, the
    uncapped ones' gradient)."""
    vis = A.visible(q.shape[2], k.shape[2], causal, window, q.device)
    s, ct, g = A.scores(q, k, False, scale, None, None, vis=torch.ones_like(vis))
    if softcap:
        s = s + (softcap * torch.tanh(s / softcap) - s).detach()  # BUG: no tanh' in the backward
    return A.finish(s.masked_fill(~vis, float("-inf")), v, ct, g, q.dtype)


def attention_backward(q, k, v, o, lse, do, *, causal=False, scale=None, window=None, softcap=None):
    return A.backward_of(_forward, q, k, v, do, causal=causal, scale=scale, window=window, softcap=softcap)


OP = "attention_backward"  # the op it breaks: the softcap's derivative dropped
CAUGHT_BY = ("attention_matches_oracle",)
