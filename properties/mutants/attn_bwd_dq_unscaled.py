"""attention_backward whose dq leaves out the softmax scale: dq = dS k where the chain rule through
s = scale q.k gives dq = scale dS k (dk keeps its factor). The gradients still sum as the softmax's
VJP says, so only their values show it. The bug class: a factor of the forward's score pipeline
(scale, a base-2 exponent's log2(e), a softcap's tanh') dropped from one of the gradients."""
import math

from . import _attn_base as A


def attention_backward(q, k, v, o, lse, do, *, causal=False, scale=None, window=None, softcap=None):
    dq, dk, dv = A.attention_backward(q, k, v, o, lse, do, causal=causal, scale=scale, window=window,
                                      softcap=softcap)
    sc = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    return (dq.to(A.lse_dtype(q.dtype)) / sc).to(q.dtype), dk, dv  # BUG: the scale's factor taken back out


OP = "attention_backward"  # the op it breaks: dq without the scale
CAUGHT_BY = ("attention_matches_oracle",)
