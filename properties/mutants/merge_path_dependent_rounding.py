"""attention_merge that forms w_a o_a + w_b o_b in float32 for contiguous states whose batch is
all finite, and in float64 otherwise (then rounded once): both are accurate, so the default tier
accepts it, but the output bits depend on the states' memory layout and on the other rows'
values, which the strict tier's bitwise merge laws reject."""
import torch

import softmax_properties.properties.targets.torch as _ref


def attention_merge(o_a, lse_a, o_b, lse_b):
    fast = all(t.is_contiguous() for t in (o_a, lse_a, o_b, lse_b)) and bool(
        torch.isfinite(lse_a).all() & torch.isfinite(lse_b).all())
    if fast or o_a.dtype == torch.float64:
        return _ref.attention_merge(o_a, lse_a, o_b, lse_b)
    o, lse = _ref.attention_merge(o_a.double(), lse_a.double(), o_b.double(), lse_b.double())  # BUG (strict)
    return o.to(o_a.dtype), lse.to(lse_a.dtype)


OP = "attention_merge"  # the op it breaks: float32 or float64 by layout and batch
CAUGHT_BY = ('merge_layout_invariance_bitwise',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
