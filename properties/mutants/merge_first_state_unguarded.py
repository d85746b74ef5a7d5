"""attention_merge in the asymmetric form lse = lse_a + log(1 + exp(lse_b - lse_a)) that guards an
empty incoming state b (lse_b = -inf) but not an empty accumulator a: with lse_a = -inf the merged
lse is -inf + inf = NaN, so merge(s, empty) = s while merge(empty, s) = NaN. The order of the
states matters, so merges stop commuting and associating, and an empty first chunk (a fully
masked causal block) poisons the row. The bug class: exponent differences of -inf states
(flashinfer-ai/flashinfer #4401: an empty split-KV chunk merged in state_t::merge gives
(-inf) - (-inf) = NaN)."""
import triton
import triton.language as tl

from softmax_properties.kernels._numerics import to_out

from ._merge_base import launch, row_lses


@triton.jit
def _kernel(OA, LA, OB, LB, O, LO, da, db, F64: tl.constexpr, BLOCK: tl.constexpr):
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    row, la, lb = row_lses(LA, LB, F64)
    cols = tl.arange(0, BLOCK)
    mask = cols < da
    b_ok = lb > float("-inf")
    d = tl.where(b_ok, lb - la, float("-inf"))  # BUG: la = -inf is not guarded (d = +inf)
    lse = la + tl.log(1.0 + tl.exp(d))
    wa = tl.exp(la - lse)
    wb = tl.exp(lb - lse)
    oa = tl.load(OA + row * da + cols, mask=mask, other=0.0).to(CT)
    ob = tl.load(OB + row * da + cols, mask=mask, other=0.0).to(CT)
    o = tl.where(b_ok, wa * oa + wb * ob, oa)
    tl.store(LO + row, lse.to(LO.dtype.element_ty))
    tl.store(O + row * da + cols, to_out(o, O.dtype.element_ty), mask=mask)


def attention_merge(o_a, lse_a, o_b, lse_b):
    return launch(_kernel, o_a, lse_a, o_b, lse_b, "attention_merge", concat=False)


OP = "attention_merge"  # the op it breaks: lse_a + log(1 + exp(lse_b - lse_a)), lse_a = -inf
CAUGHT_BY = ('merge_commutative', 'merge_associative', 'merge_identity')  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
