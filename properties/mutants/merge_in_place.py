"""attention_merge that accumulates into its first state: the merged output is written over o_a
and the merged lse over lse_a (when they are contiguous, the fast path), and those are returned,
as an online-softmax accumulator updates its running (o, lse) in place. The caller's first state
is destroyed, so a state merged twice (or kept for the backward) is wrong the second time. The
merge itself is the project's Triton kernel; the bug is the in-place write-back."""
from softmax_properties.kernels import attention_merge as _merge


def attention_merge(o_a, lse_a, o_b, lse_b):
    o, lse = _merge(o_a, lse_a, o_b, lse_b)
    if o_a.is_contiguous():
        o = o_a.copy_(o)  # BUG: the inputs must be left unmodified
    if lse_a.is_contiguous():
        lse = lse_a.copy_(lse)  # BUG
    return o, lse


OP = "attention_merge"  # the op it breaks: writes the result over the first state
CAUGHT_BY = ('inputs_unmodified',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
