"""Attention whose lse is in base-2 units: log2 of the sum of 2^(s log2 e), the row statistic the
Triton fused-attention tutorial keeps (its scores scaled by log2 e for exp2), returned without
the factor ln 2 back (the class of a kernel that exposes an internal base-2 statistic as its lse).
o is right; the correct composition of torch ops otherwise (properties/mutants/_attn_base.py)."""
import math

from ._attn_base import attention as _attention


def attention(q, k, v, *, causal=False, scale=None, window=None, softcap=None):
    o, lse = _attention(q, k, v, causal=causal, scale=scale, window=window, softcap=softcap)
    return o, lse / math.log(2.0)  # BUG: log2 of the sum, not the natural log


OP = "attention"  # the op it breaks: the lse's units
CAUGHT_BY = ("attention_matches_oracle",)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
