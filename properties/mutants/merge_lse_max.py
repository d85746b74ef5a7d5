"""softmax_merge whose output lse is max(lse_a, lse_b) instead of log(exp(lse_a) + exp(lse_b))
(the running max of online softmax mistaken for its logsumexp). The merged p is right."""
import triton
import triton.language as tl

from softmax_properties.kernels._numerics import to_out

from ._merge_base import launch, row_lses


@triton.jit
def _kernel(PA, LA, PB, LB, P, LO, da, db, F64: tl.constexpr, BLOCK: tl.constexpr):
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    row, la, lb = row_lses(LA, LB, F64)
    cols = tl.arange(0, BLOCK)
    nan = (la != la) | (lb != lb)
    m = tl.maximum(la, lb)
    fin = (m > float("-inf")) & (m < float("inf")) & ~nan
    ms = tl.where(fin, m, 0.0)
    ea = tl.where(fin & (la > float("-inf")), tl.exp(la - ms), 0.0)
    eb = tl.where(fin & (lb > float("-inf")), tl.exp(lb - ms), 0.0)
    s = ea + eb
    lse = tl.where(nan, float("nan"), m)  # BUG: should be m + log(s) where finite
    wa = tl.where(fin, ea / s, float("nan"))
    wb = tl.where(fin, eb / s, float("nan"))
    pa = tl.load(PA + row * da + cols, mask=cols < da, other=0.0).to(CT)
    pb = tl.load(PB + row * db + cols, mask=cols < db, other=0.0).to(CT)
    qa = tl.where(ea > 0, wa * pa, tl.where(fin, 0.0, float("nan")))
    qb = tl.where(eb > 0, wb * pb, tl.where(fin, 0.0, float("nan")))
    tl.store(LO + row, lse.to(LO.dtype.element_ty))
    tl.store(P + row * (da + db) + cols, to_out(qa, P.dtype.element_ty), mask=cols < da)
    tl.store(P + row * (da + db) + da + cols, to_out(qb, P.dtype.element_ty), mask=cols < db)


def softmax_merge(p_a, lse_a, p_b, lse_b):
    return launch(_kernel, p_a, lse_a, p_b, lse_b, "softmax_merge", concat=True)


OP = "softmax_merge"  # the op it breaks: merged lse = max(lse_a, lse_b)
CAUGHT_BY = ('merge_step_matches_oracle',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
