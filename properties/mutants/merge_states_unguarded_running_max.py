"""merge_states as an online fold that starts from the first state, m = lse_0, and rescales by
exp(m - m_new) and exp(lse_s - m_new) without guarding m_new = -inf: once two empty states lead
(an empty first split, then another) both exponents are -inf - -inf = NaN, and the row is NaN
although a later state holds keys. One leading empty state, or empty states after a live one, are
right, so the result depends on where the empty states sit. The bug class: exponent differences
of -inf states in a running merge (flashinfer-ai/flashinfer #4401, merge_first_state_unguarded's
N-way form)."""
import triton
import triton.language as tl

from softmax_properties.kernels._numerics import to_out

from ._merge_base import launch_states


@triton.jit
def _kernel(O, L, OUT, LO, S, dv, F64: tl.constexpr, BLOCK: tl.constexpr):
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < dv
    m = tl.load(L + row * S).to(CT)
    live0 = m > float("-inf")
    den = tl.where(live0, 1.0, 0.0).to(CT)
    acc = tl.where(live0, tl.load(O + row * S * dv + cols, mask=mask, other=0.0).to(CT), 0.0)
    for s in range(1, S):
        lv = tl.load(L + row * S + s).to(CT)
        m_new = tl.maximum(m, lv)
        a = tl.exp(m - m_new)  # BUG: NaN when m = m_new = -inf
        b = tl.exp(lv - m_new)
        x = tl.load(O + (row * S + s) * dv + cols, mask=mask, other=0.0).to(CT)
        acc = acc * a + tl.where(lv > float("-inf"), b * x, 0.0)
        den = den * a + b
        m = m_new
    empty = m == float("-inf")
    o = tl.where(empty, 0.0, acc / den)
    lse = tl.where(empty, m, m + tl.log(den))
    tl.store(LO + row, lse.to(LO.dtype.element_ty))
    tl.store(OUT + row * dv + cols, to_out(o, OUT.dtype.element_ty), mask=mask)


def merge_states(o, lse):
    return launch_states(_kernel, o, lse)


OP = "merge_states"  # the op it breaks: -inf - -inf once two empty states lead
CAUGHT_BY = ('merge_states_permutation_invariant', 'merge_states_empty_states_are_identities')  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
