"""attention_merge that treats lse = -inf arithmetically, as the eager formula does:
o = exp(lse_a - lse) * o_a + exp(lse_b - lse) * o_b with lse = M + log(exp(lse_a - M) + exp(lse_b - M)).
An empty state's weight is exp(-inf) = 0, but 0 * NaN (its garbage o) = NaN leaks into the
merge, and two empty states give (-inf) - (-inf) = NaN instead of o = 0."""
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
    m = tl.maximum(la, lb)
    lse = m + tl.log(tl.exp(la - m) + tl.exp(lb - m))
    oa = tl.load(OA + row * da + cols, mask=mask, other=0.0).to(CT)
    ob = tl.load(OB + row * da + cols, mask=mask, other=0.0).to(CT)
    o = tl.exp(la - lse) * oa + tl.exp(lb - lse) * ob  # BUG: 0 * NaN for an empty side
    tl.store(LO + row, lse.to(LO.dtype.element_ty))
    tl.store(O + row * da + cols, to_out(o, O.dtype.element_ty), mask=mask)


def attention_merge(o_a, lse_a, o_b, lse_b):
    return launch(_kernel, o_a, lse_a, o_b, lse_b, "attention_merge", concat=False)


OP = "attention_merge"  # the op it breaks: lse = -inf treated arithmetically (0 * NaN)
CAUGHT_BY = ('merge_identity_bitwise', 'merge_tree_matches_one_shot', 'merge_tree_with_garbage_states')  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
