"""merge_states that weighs every state arithmetically, o = sum_s w_s o_s with w_s = 0 for an
empty state, instead of selecting the live ones: an empty state whose o holds NaN or inf (the
contract leaves it unspecified; a split that saw no key may never write it) gives 0 * NaN = NaN.
With zeros or finite values there it is right. The bug class: an empty state's values reaching
the output through a zero weight (merge_lse_arithmetic's N-way form)."""
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
    m = tl.full([], float("-inf"), CT)
    nan = tl.zeros([], tl.int32)
    for s in range(0, S):
        lv = tl.load(L + row * S + s).to(CT)
        nan = tl.maximum(nan, (lv != lv).to(tl.int32))
        m = tl.maximum(m, tl.where(lv != lv, float("-inf"), lv))
    fin = (m > float("-inf")) & (m < float("inf"))
    ms = tl.where(fin, m, 0.0)
    den = tl.zeros([], CT)
    acc = tl.zeros([BLOCK], CT)
    for s in range(0, S):
        lv = tl.load(L + row * S + s).to(CT)
        e = tl.where(fin & (lv > float("-inf")), tl.exp(lv - ms), 0.0)
        x = tl.load(O + (row * S + s) * dv + cols, mask=mask, other=0.0).to(CT)
        acc += e * x  # BUG: an empty state's x is multiplied by 0, not dropped
        den += e
    den1 = tl.where(fin, den, 1.0)
    o = tl.where(fin, acc / den1, tl.where(m == float("-inf"), 0.0, float("nan")))
    lse = tl.where(fin, ms + tl.log(den1), m)
    o = tl.where(nan > 0, float("nan"), o)
    lse = tl.where(nan > 0, float("nan"), lse)
    tl.store(LO + row, lse.to(LO.dtype.element_ty))
    tl.store(OUT + row * dv + cols, to_out(o, OUT.dtype.element_ty), mask=mask)


def merge_states(o, lse):
    return launch_states(_kernel, o, lse)


OP = "merge_states"  # the op it breaks: empty states' values times 0
CAUGHT_BY = ('merge_states_empty_garbage_ignored',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
