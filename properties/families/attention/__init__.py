"""Attention: ``attention(q, k, v, *, causal, scale, window, softcap) -> (o, lse)`` and its explicit
VJP ``attention_backward(q, k, v, o, lse, do, *, ...) -> (dq, dk, dv)`` (docs/contract.md), drawn as
an AttnCase. The options are the spec's offered ones: a target offers those its function takes,
and declares its causal alignment (``ATTENTION_CAUSAL_ALIGNMENT``, bottom-right by default) and
the lse of a query without a key (``ATTENTION_EMPTY_LSE``, -inf by default).

* ``case.py``: AttnCase and its layouts; ``strategies.py``: attn_cases;
* ``bounds.py``: the error bounds (their derivation); ``truth.py``: the FP64 truth of each output;
* ``laws.py``: the family's laws.

Importing this package registers the ops and their laws."""
from __future__ import annotations

import torch

from softmax_properties import oracles
from softmax_properties.oracles import sdpa

from ...spec import OpSpec, register
from . import strategies as S, truth

OPTIONS = ("causal", "scale", "window", "softcap")
COMPOSES = ()  # the split-KV laws merge in FP64 through oracles.sdpa, not through the merge family


# no torch_ref: the calibration target's attention takes neither window nor softcap and aligns
# causal masks top-left, so its error on a case is not comparable with the target's

def _forward_oracle(q, k, v, **options):
    return sdpa.attention(q, k, v, **options)


def _backward_oracle(q, k, v, o, lse, do, **options):
    return sdpa.attention_backward(q, k, v, do, **options)


def _t(values, *shape):
    return torch.tensor(values, dtype=torch.float64, device="cpu").reshape(*shape)


def _semantics_rows():
    """ATTENTION_SEMANTICS (oracles/semantics.py) as attention's rows: one batch, one head."""
    rows = []
    for what, q, k, v, options, o, lse in oracles.ATTENTION_SEMANTICS:
        Lq, D, Dv = len(q), len(q[0]), len(o[0])
        args = (_t(q, 1, 1, Lq, D), _t(k, 1, 1, len(k), D), _t(v, 1, 1, len(v), Dv))
        rows.append((what, args, options, (_t(o, 1, 1, Lq, Dv), _t(lse, 1, 1, Lq))))
    return tuple(rows)


def _sample(x):
    """A small attention call around x (any float dtype; the autograd probe): x's columns
    repeated to a head dimension of 16, as q, k and v of one head. 16, not x's own 3 columns:
    FlexAttention and most flash kernels refuse head dimensions under 16, and a probe they
    refuse would keep their autograd from every law that needs it."""
    t = x.repeat(1, -(-16 // x.shape[-1]))[:, :16].reshape(1, 1, x.shape[0], 16)
    return (t, t, t), {}


# differentiable through o: the family's law attention_autograd_matches_vjp judges it (the generic
# autograd laws, written for ops of one output and one differentiated input, have no grad_truth
# here and do not select it)
register(OpSpec("attention", "attention", ("q", "k", "v"), _forward_oracle, truth.attention_truth, S.attn_case,
                offered=OPTIONS, semantics=_semantics_rows(), differentiable=True, sample=_sample))
register(OpSpec("attention_backward", "attention", ("q", "k", "v", "o", "lse", "do"), _backward_oracle,
                truth.attention_backward_truth, S.attn_case, forward="attention", offered=OPTIONS))

from . import laws  # noqa: E402,F401  (the family's laws, registered after its ops)
