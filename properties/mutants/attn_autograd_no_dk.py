"""attention as a custom autograd Function whose backward returns dk = 0 (the gradient through the
scores' keys left out): dq and dv are right."""
import torch

from . import _attn_base as A


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, scale, window, softcap):
        ctx.save_for_backward(q, k, v)
        ctx.opts = dict(causal=causal, scale=scale, window=window, softcap=softcap)
        return A.attention(q, k, v, **ctx.opts)

    @staticmethod
    def backward(ctx, do, dlse):
        q, k, v = ctx.saved_tensors
        dq, dk, dv = A.backward_of(A.attention, q, k, v, do, **ctx.opts)
        return dq, torch.zeros_like(dk), dv, None, None, None, None  # BUG: dk dropped


def attention(q, k, v, *, causal=False, scale=None, window=None, softcap=None):
    return _Attention.apply(q, k, v, causal, scale, window, softcap)


OP = "attention"
CAUGHT_BY = ("attention_autograd_matches_vjp",)
