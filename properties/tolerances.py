"""The one tolerance table, and the arithmetic every family's bounds share (ulps, reduction depths,
the final rounding, the comparison).

Contract a correct kernel must meet (accumulation in at least float32):
  * 16/32-bit inputs are computed with unit roundoff ``u_c = 2**-24`` or better, float64 with 2**-53;
  * exp, log and division are within 4 ulp of the compute precision (Triton's ex2.approx /
    lg2.approx / div.full are within 2), and subnormal values may flush to zero (FTZ) wherever
    they enter compute-precision arithmetic: a flushed element moves its output by < tiny_c, a
    flushed term of a row sum moves the sum by < tiny_c (so D * tiny_c for the whole row);
  * a row reduction of D terms may add them in any order and association (``depth_any(D)``: each
    term meets at most D - 1 roundings, the worst case of recursive summation); this is the
    ``default`` tier's contract, met by every float32-accumulating implementation (torch's CPU
    kernels with 16-lane vectors and chains of D / 16, a loop over 64-wide blocks, a GPU tree).
    The ``strict`` tier (``matches_oracle_strict``) holds the project's kernels to sequential chains
    of at most ``depth(D) = ceil(D / 256) + ceil(log2 D) + 1`` additions (>= 256 lanes, then a tree);
  * a cross-entropy's mean or sum over N rows is such a reduction too: any order over the N row
    losses in the default tier (``depth_any(N)``), a float64 sum of float64 row losses in the
    strict tier (``ce_reduced_bound``);
  * the output is the computed value rounded to nearest in the output dtype.

Each family's ``*_bound`` (``properties/families/<family>/bounds.py``) returns, per output
element, an absolute bound ``eps`` on the error of the value computed before the final rounding
(first-order error analysis, terms listed in each docstring), plus the same bound at ``U_ORACLE``
for the FP64 oracle's own error. The element passes when ``|out - ref| <= eps + 0.5 * ulp_out(|ref|
+ eps) + atol``: the final rounding adds half an ulp of the output dtype; ``atol`` covers flushed
subnormals. A truth that overflows the output dtype may be matched by the infinity of its sign.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DtypeTol:
    precision: int  # significand bits of the output dtype (including the implicit one)
    emin: int  # smallest normal exponent of the output dtype
    u_c: float  # unit roundoff of the compute precision a correct kernel must use
    tiny_c: float  # smallest normal of the compute precision (FTZ floor)


TABLE = {
    torch.float16: DtypeTol(11, -14, 2.0**-24, 2.0**-126),
    torch.bfloat16: DtypeTol(8, -126, 2.0**-24, 2.0**-126),
    torch.float32: DtypeTol(24, -126, 2.0**-24, 2.0**-126),
    torch.float64: DtypeTol(53, -1022, 2.0**-53, 2.0**-1022),
}
U_ORACLE = 2.0**-53  # the FP64 oracle's unit roundoff (test_meta checks it against mpmath)
ATOL_FTZ = 4.0  # multiples of tiny_c: flushed exp/product/quotient, each below tiny_c


def depth(n: int) -> int:
    """Roundings a term of an n-term row sum meets when the sum runs over >= 256 lanes and then a
    tree: ceil(n / 256) sequential additions per lane, ceil(log2 n) tree levels, one more for the
    conversion of the result. The strict tier's reduction depth."""
    n = max(int(n), 1)
    return math.ceil(n / 256) + math.ceil(math.log2(n)) + 1


def depth_any(n: int) -> float:
    """The same count for a sum in ANY order and association (recursive, blocked, vector lanes then
    a tree, pairwise): every addition rounds once and a term takes part in at most n - 1 of them,
    so the computed sum is within gamma_{n-1} sum |x_i| of the exact one, gamma_k = k u / (1 - k u)
    (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., Lemma 3.1 and eq. 4.4). In
    units of u at the least precise compute precision the contract allows (u = 2**-24, where the
    factor 1 / (1 - k u) is largest), plus one for the conversion of the result, as in depth().
    The default tier's reduction depth: no correct float32-accumulating kernel exceeds it,
    whatever its summation order."""
    k = max(int(n), 1) - 1
    return k / (1 - k * 2.0**-24) + 1


def agree(tol_a, tol_b, scale=1.0, formed=None, dtype=None):
    """The bound on |a - scale * b| where a and b are two computed values within tol_a and tol_b of
    exact values A and B = A / scale (two outputs of the same exact answer: a shifted, permuted or
    re-laid-out input, a scaled cotangent, a law's two ways to one value): tol_a + |scale| tol_b,
    scale a power of two or -1 (exact). formed: where one side is a value formed from the outputs
    in dtype (a difference, a shift: one rounding by a correct kernel), its magnitude, and the
    bound adds one ulp of dtype there (the rounding to either neighbour). Summed in float64."""
    tol = tol_a + abs(scale) * tol_b
    return tol if formed is None else tol + ulp(formed, dtype)


def accumulated_bound(g0, refs, tols, dtype):
    """The bound on a gradient accumulated in dtype, g0 + v_1 + v_2 (an existing .grad and two
    VJPs, each v_k within tols[k] of refs[k]): tols[0] + tols[1] for the VJPs, plus one ulp of
    dtype at |g0| + |refs[0]| + |refs[1]| + tols[0] + tols[1] (the largest any partial sum
    reaches) for the two additions, half an ulp each (NaN and inf magnitudes: no term)."""
    size = g0.double().abs() + refs[0].abs() + refs[1].abs() + tols[0] + tols[1]
    return tols[0] + tols[1] + ulp(torch.nan_to_num(size, nan=0.0, posinf=0.0), dtype)


def ulp(v: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Spacing of `dtype` numbers at |v| (float64 tensor), subnormal spacing below the normal range."""
    t = TABLE[dtype]
    a = v.abs().clamp_min(2.0**t.emin)
    e = torch.floor(torch.log2(a))
    return torch.exp2(e - (t.precision - 1))


def half_subnormal(dtype: torch.dtype) -> float:
    """Half the smallest subnormal of dtype, 2**(emin - precision): the most a rounding to dtype
    errs below its normal range, where a relative 2**-p no longer bounds it (float16: 3e-8; for
    float64 it rounds to 0 in the float64 arithmetic of the bounds)."""
    t = TABLE[dtype]
    return 2.0 ** (t.emin - t.precision)


def max_finite(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).max


def total_tolerance(eps: torch.Tensor, ref: torch.Tensor, out_dtype: torch.dtype, in_dtype: torch.dtype):
    """eps plus the final rounding to out_dtype plus the FTZ floor of the compute precision. Where
    the truth is NaN (a NaN or +inf input reached it) the bound is 0, never NaN: a correct
    output is NaN there, matched by pattern, and a law that holds another output to this one
    (two calls, two layouts) asks them to match exactly, by value and NaN pattern."""
    eps = torch.nan_to_num(eps, nan=0.0, posinf=float("inf"))
    tol = eps + 0.5 * ulp(ref.abs() + eps, out_dtype) + ATOL_FTZ * TABLE[in_dtype].tiny_c
    return torch.where(torch.isnan(ref), 0.0, tol)


def rerounded(tol: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The bound of an output within tol of ref (its bound at a finer output dtype, its own final
    rounding included) once it is rounded to dtype: tol + half an ulp of dtype at |ref| + tol.
    It covers the value computed before the final rounding rounded to dtype at once (within
    eps <= tol, plus half an ulp at |ref| + eps), and rounded twice, to the finer dtype and then
    to dtype (a float32 logsumexp cast to bfloat16: within tol, plus half an ulp at
    |ref| + tol). Where tol is 0 (a NaN truth, total_tolerance) it stays 0."""
    return torch.where(torch.isnan(ref), 0.0, tol + 0.5 * ulp(ref.abs() + tol, dtype))


def compare(out: torch.Tensor, ref: torch.Tensor, tol: torch.Tensor, out_dtype: torch.dtype):
    """Element-wise verdict (float64 tensors). Returns a bool tensor of failures. NaN where ref has
    NaN, infinities exactly, finite values within tol (or the infinity of ref's sign where ref + tol
    reaches past out_dtype's range). A NaN bound (one formed outside total_tolerance that a
    non-finite input reached) is taken as 0: the element must then equal ref exactly, by value
    and NaN pattern (mismatch says what differs)."""
    out = out.to(torch.float64)
    tol = torch.nan_to_num(tol, nan=0.0)
    nan_o, nan_r = torch.isnan(out), torch.isnan(ref)
    bad = nan_o != nan_r
    inf_r = torch.isinf(ref)
    bad |= inf_r & ~nan_r & (out != ref)
    fin = ~nan_r & ~inf_r
    err = (out - ref).abs()
    close = err <= tol
    overflow_ok = torch.isinf(out) & (torch.sign(out) == torch.sign(ref)) & (ref.abs() + tol >= max_finite(out_dtype))
    bad |= fin & ~nan_o & ~(close | overflow_ok)
    return bad


def mismatch(actual: float, expected: float, tol: float, dtype: torch.dtype = None) -> str:
    """What differs at one element compare() rejected, in words (actual, expected and tol as a
    failure report prints them); for an output of a floating dtype whose expected value lies below
    its normal range, the error also in units of the (subnormal) spacing there, the scale a
    reader of such small numbers needs (float16: below 6.1e-05, the spacing 5.96e-08)."""
    a, e = float(actual), float(expected)
    if math.isnan(e) != math.isnan(a):
        return "actual is NaN where expected is not" if math.isnan(a) else "expected is NaN, actual is not"
    if math.isinf(a) and math.isinf(e):
        return "infinities of opposite signs"
    if math.isinf(a) != math.isinf(e):
        return ("actual is infinite where expected is finite" if math.isinf(a)
                else "expected is infinite, actual is finite")
    if not tol > 0:
        return ("unequal where an exact match is due (a bound of 0: the exact result is NaN there, or a "
                "non-finite input reached the bound)")
    text = f"|actual - expected| = {abs(a - e):.3g} > tolerance"
    if dtype is not None and dtype.is_floating_point and abs(e) < torch.finfo(dtype).tiny:
        fi = torch.finfo(dtype)
        spacing = fi.tiny * fi.eps  # the subnormal spacing: 2**(emin - mantissa bits)
        text += (f"; expected lies below {str(dtype).replace('torch.', '')}'s normal range ({fi.tiny:.2g}), where "
                 f"values are {spacing:.3g} apart: the error is {abs(a - e) / spacing:.3g} spacings")
    return text
