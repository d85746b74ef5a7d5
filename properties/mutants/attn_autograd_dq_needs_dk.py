"""attention as a custom autograd Function whose backward forms dq only when k requires grad too
(its dq computed in the key pass, which it skips for frozen keys): with the keys and values of a
frozen encoder (cross-attention), the queries get a zero gradient. With every input requiring
grad the gradients are right."""
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
        if not ctx.needs_input_grad[1]:
            dq = torch.zeros_like(dq)  # BUG: dq formed only in the key pass, skipped when k needs no grad
        return dq, dk, dv, None, None, None, None


def attention(q, k, v, *, causal=False, scale=None, window=None, softcap=None):
    return _Attention.apply(q, k, v, causal, scale, window, softcap)


OP = "attention"
CAUGHT_BY = ("attention_autograd_matches_vjp",)
