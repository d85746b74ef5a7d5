"""merge_states whose running max starts at -5e4, a finite stand-in for -inf (chosen where fp16
holds the scores, whose range ends at 65504), instead of -inf: states whose lse all lie more than
~87 below it get weights exp(lse - (-5e4)) = 0, so lse = [-60000, -60001] merges to o = 0 and
lse = -5e4. Rows with a state above -5e4, and rows of empty states only, are right. The bug class:
a finite sentinel for the max of an online softmax (issue 2 of the coverage review: a cascade /
split-KV merge that starts its max at -5e4)."""
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
    m = tl.full([], -5e4, CT)  # BUG: should start at -inf
    nan = tl.zeros([], tl.int32)
    live_any = tl.zeros([], tl.int32)
    for s in range(0, S):
        lv = tl.load(L + row * S + s).to(CT)
        nan = tl.maximum(nan, (lv != lv).to(tl.int32))
        live_any = tl.maximum(live_any, (lv > float("-inf")).to(tl.int32))
        m = tl.maximum(m, tl.where(lv != lv, float("-inf"), lv))
    den = tl.zeros([], CT)
    acc = tl.zeros([BLOCK], CT)
    for s in range(0, S):
        lv = tl.load(L + row * S + s).to(CT)
        live = lv > float("-inf")
        e = tl.where(live, tl.exp(tl.where(live, lv, 0.0) - m), 0.0)
        x = tl.load(O + (row * S + s) * dv + cols, mask=mask, other=0.0).to(CT)
        acc += tl.where(live, e * x, 0.0)
        den += e
    lse = tl.where(den > 0, m + tl.log(den), m)
    o = tl.where(den > 0, acc / den, 0.0)
    lse = tl.where(live_any > 0, lse, float("-inf"))  # all empty: the empty state
    o = tl.where(m == float("inf"), float("nan"), o)
    o = tl.where(nan > 0, float("nan"), o)
    lse = tl.where(nan > 0, float("nan"), lse)
    tl.store(LO + row, lse.to(LO.dtype.element_ty))
    tl.store(OUT + row * dv + cols, to_out(o, OUT.dtype.element_ty), mask=mask)


def merge_states(o, lse):
    return launch_states(_kernel, o, lse)


OP = "merge_states"  # the op it breaks: running max starts at -5e4
CAUGHT_BY = ('merge_states_matches_one_shot', 'merge_states_is_fold_of_attention_merge')  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
