"""Numerics shared by every kernel in this package: order-independent row reductions and
correctly rounded output conversion.

Why: a floating-point sum depends on the order of its additions, and Triton picks the order
(which thread holds which element) from the memory layout it proves: a row with a misaligned
start is held differently from its contiguous copy. To make results *bitwise* independent of
layout, block shape and warp count, every sum below is accumulated exactly in 64-bit integers.

* ``nanmax``: max that propagates NaN (``tl.max`` drops it on GPUs and in the interpreter; a
  custom ``tl.reduce`` would propagate it but runs element by element in the interpreter).
All helpers reduce a 2-D tile ``[rows, cols]`` over its columns (axis 1).

* ``sum_unit(v)``: sum of values in [0, 1] (exponentials after max subtraction). Each value
  is split into two 40-bit fixed-point limbs, ``q1 = trunc(v * 2**40)`` and
  ``q2 = trunc((v - q1 * 2**-40) * 2**80)``; both splits are exact, the limb sums are exact
  integers (|sum| < 2**62 for rows up to 2**22 elements), and the only error is the dropped tail,
  below ``n * 2**-80`` absolute. Returned as float64.
* ``sum_parts(v)`` / ``sum_scaled(v)``: sum of arbitrary float64 values (as mantissa and power of
  two, or as one float64). Scaled by the power of two above the
  largest magnitude (exact), then summed as above: absolute error below ``n * 2**-79 * max|v|``.
  Non-finite input falls back to an ordinary sum (NaN or the infinity, order-free).
* ``sum_exp(e)``: the fast forward sum (16/32-bit inputs): float32 values in [0, 1], rows of at
  most 2**14, each rounded to a multiple of 2**-39 in float32 (by adding 2**-16, subtracted
  from the total) and summed in float64, where every partial sum is then exact. Error below
  ``2 u s + n * 2**-40``. Only for finite rows: NaN and inf rows are the caller's (``rowmax``).
* ``rowmax``: ``tl.max`` that keeps NaN at the same cost on the GPU. ``sum_exp_sub`` and
  ``rowmax_sub``: the same over rows held as sub-rows ([SUB, rows, W] tiles).
* ``sum_exact32(t)``: the fast backward sum (16/32-bit inputs): float32 values, rows of at most
  2**14, each widened and rounded to a multiple of 2**(k-39) (2**k above the row's largest
  magnitude) by adding and subtracting a float64 constant, then summed exactly in float64. Error
  below ``n * 2**-39 * max|t|``.
  Both cost a few float adds per element where the fixed-point limbs cost three 64-bit
  conversions, which made the 16-bit kernels compute-bound.
* ``exp_ftz(x)``: float32 exp without the subnormal fix-up (FTZ); ``exp_ct(x, F64)``: exp in the
  compute type (tl.exp for float64, exp_ftz for float32).
* ``to_f32(x)``: widening to float32; ``widen(x, F64)``: to the compute type, float64 or
  float32. Every kernel widens its inputs through these.
* ``to_out(v, dtype)``: round to the output dtype to nearest-even.

Under Triton's interpreter, bfloat16 conversions are exact only with the suite's interpreter
patches (properties/interpreter.py, installed by its pytest plugin and replay): the stock
interpreter (3.6 to 3.9) truncates float32 -> bfloat16 and widens subnormal bfloat16 wrongly.
"""
import triton
import triton.language as tl

from ._launch import interpreting

# globals read by jit functions must be constexpr (Triton 3.6 refuses plain globals)
_TWO40: tl.constexpr = tl.constexpr(2.0**40)
_TWO80: tl.constexpr = tl.constexpr(2.0**80)
_TWO_M40: tl.constexpr = tl.constexpr(2.0**-40)
_TWO_M80: tl.constexpr = tl.constexpr(2.0**-80)


_INTERPRET: tl.constexpr = tl.constexpr(interpreting())


@triton.jit
def nanmax(x):
    m = tl.max(x, 1)
    has_nan = tl.max((x != x).to(tl.int32), 1) > 0
    return tl.where(has_nan, float("nan"), m)


_T16: tl.constexpr = tl.constexpr(2.0**-16)
_LOG2E: tl.constexpr = tl.constexpr(1.4426950408889634)


@triton.jit
def exp_ftz(x):
    """exp of float32 x, subnormal results flushed to zero (the tolerance table allows it). On the
    GPU two instructions (a multiply and ex2.approx.ftz, within 2 ulp); Triton's tl.exp adds two
    predicated multiplies per element to keep subnormal results, a tenth of the 16-bit forward's
    instructions. The interpreter has no inline assembly: tl.exp there."""
    if _INTERPRET:
        return tl.exp(x)
    else:
        return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=r,r", [x * _LOG2E],
                                         dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def exp_ct(x, F64: tl.constexpr):
    """exp in the compute type: float64's tl.exp, or float32's exp_ftz."""
    if F64:
        return tl.exp(x)
    else:
        return exp_ftz(x)


@triton.jit
def _f64_of_normal(v):
    """float32 -> float64, exact for a positive normal v, by moving its bits (exponent rebiased by
    1023 - 127 = 896, mantissa shifted left by 29) with two integer instructions instead of the
    conversion, which runs on the GPU's XU pipe with exp (16 per clock per SM, a quarter of the
    ALU rate): with the conversion, the 16-bit logsumexp (one exp and one conversion per
    element) is bound by that pipe (Nsight Compute, bf16 D = 16384: XU 69 %). Zero, negatives,
    subnormals, inf and NaN give finite garbage. It costs registers, though (ptxas, triton 3.6:
    the float32 forward at 16384 columns 63 -> 72, one program per SM instead of two, 0.98 ->
    0.88 of copy on the H200; bf16 log_softmax at D = 128, 32 -> 39: 0.98 -> 0.92). Used where
    it pays on the H200 (benchmarks/sweep.py, two sweeps each, conversion -> bit move): the
    16-bit logsumexp (16384: 0.82 -> 0.87; no change at D <= 1024) and 16-bit whole rows of
    16384 (softmax 0.88 -> 0.90, log_softmax 0.89 -> 0.92)."""
    b = v.to(tl.int32, bitcast=True).to(tl.int64)
    return ((b << 29) + (896 << 52)).to(tl.float64, bitcast=True)


@triton.jit
def sum_exp(e, BITS: tl.constexpr):
    """Order-independent sum of float32 values in [0, 1] over rows of at most 2**14 elements;
    returns float64. Each value is replaced by r = fl(e + 2**-16), a multiple of its ulp, which
    is at least 2**-39 (rounded by at most u (e + 2**-16), u = 2**-24: within the tolerance
    table's float32 sum). Every partial sum of the r is then a multiple of 2**-39 below 2**14
    (2**53 units: float64 adds it exactly, in any order) -- or, if it reaches 2**14, every e is
    above 0.74 and every r a multiple of 2**-24, partial sums below 2**15: exact again. The row's
    n * 2**-16 is subtracted from the exact total, exactly (the difference, the exact sum of
    the r - 2**-16, is a multiple of 2**-39 below 2**14). Error below 2u s + n 2**-40 (the row
    max contributes exp(0) = 1, so s >= 1). The r are normal and positive: with BITS they widen
    by their bits (_f64_of_normal) instead of the conversion. Rows holding NaN or inf, or with e
    outside [0, 1], give a meaningless sum: the caller takes such rows from their max (rowmax
    keeps NaN)."""
    return tl.sum(_exp_terms64(e, BITS), 1) - e.shape[1] * _T16


@triton.jit
def sum_exp_sub(e, BITS: tl.constexpr):
    """sum_exp of a [SUB, rows, W] tile, each row held as SUB sub-rows of W columns: the same
    terms summed over axes 0 and 2 (exact, so the same sum bitwise)."""
    return tl.sum(tl.sum(_exp_terms64(e, BITS), 0), 1) - (e.shape[0] * e.shape[2]) * _T16


@triton.jit
def _exp_terms64(e, BITS: tl.constexpr):
    """sum_exp's terms r = e + 2**-16 in float64 (with BITS by moving their bits)."""
    r = e + _T16  # in [2**-16, 1 + 2**-16]: a normal float32, a multiple of 2**-39
    if BITS:
        return _f64_of_normal(r)
    else:
        return r.to(tl.float64)


@triton.jit
def ebits32(v):
    """Biased exponent field of float32 v >= 0: 0 for zero and subnormals, 255 for inf and NaN;
    v < 2**(ebits32(v) - 126)."""
    return (v.to(tl.int32, bitcast=True) >> 23) & 0xFF


@triton.jit
def pow2f(e):
    """2**e as float32 for an int32 e in [-126, 127]."""
    return ((e + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def rowmax(x):
    """Row maxima that propagate NaN, at tl.max's cost on the GPU (max.NaN.f32 in the combine);
    the interpreter runs a custom reduction element by element: nanmax there."""
    if _INTERPRET:
        return nanmax(x)
    else:
        return tl.reduce(x, 1, _maxnan_combine)


@triton.jit
def rowmax_sub(x):
    """rowmax of a [SUB, rows, W] tile (rows held as sub-rows, see sum_exp_sub)."""
    if _INTERPRET:
        m = tl.max(tl.max(x, 0), 1)
        has_nan = tl.max(tl.max((x != x).to(tl.int32), 0), 1) > 0
        return tl.where(has_nan, float("nan"), m)
    else:
        return tl.reduce(tl.reduce(x, 0, _maxnan_combine), 1, _maxnan_combine)


@triton.jit
def _maxnan_combine(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def max2(x, y):
    """Row maxima of two tiles in one reduction (one round of shuffles and barriers); NaN may be
    dropped. The interpreter runs a custom reduction element by element: two tl.max there."""
    if _INTERPRET:
        return tl.max(x, 1), tl.max(y, 1)
    else:
        return tl.reduce((x, y), 1, _max2_combine)


@triton.jit
def _max2_combine(a0, b0, a1, b1):
    return tl.maximum(a0, a1), tl.maximum(b0, b1)


@triton.jit
def sum_exact32(t, big):
    """Order-independent sum of float32 values over rows of at most 2**14 elements, given each
    row's largest |t| (big); returns float64. With 2**k above big (k = ebits - 126, so k >= -126),
    every value is rounded to a multiple of 2**(k-39) in float64 by (t + C) - C, C = 1.5 * 2**(k+13):
    for |t| < 2**k, t + C lies in [2**(k+13), 2**(k+14)), whose spacing that is, and the
    subtraction is exact. Every partial sum is then a multiple of 2**(k-39) below 2**(k+14):
    exact in float64, in any order. Error below n * 2**(k-40) <= n * 2**-39 * max|t| (a float32
    below 2**-126 is a multiple of 2**-149 and stays as it is). Two float64 adds per value, no
    compare or select. An infinity or NaN in the row makes the sum infinite or NaN, whatever the
    rounding of its finite values (as a plain sum would)."""
    k = (ebits32(big) - 126).to(tl.int64)
    C = _pow2(k + 13) * 1.5
    r = (t.to(tl.float64) + C[:, None]) - C[:, None]
    return tl.sum(r, 1)


@triton.jit
def to_f32(x):
    """x as float32 (exact)."""
    return x.to(tl.float32)


@triton.jit
def widen(x, F64: tl.constexpr):
    """x in the compute type: float64 for float64 kernels, else float32 (to_f32; a bfloat16 x
    reaches float64 through it too)."""
    if F64:
        if x.dtype == tl.bfloat16:
            return to_f32(x).to(tl.float64)
        else:
            return x.to(tl.float64)
    else:
        return to_f32(x)


@triton.jit
def to_out(v, dtype: tl.constexpr):
    return v.to(dtype)


@triton.jit
def _limbs(v):
    q1 = (v * _TWO40).to(tl.int64)
    r = v - q1.to(v.dtype) * _TWO_M40
    q2 = (r * _TWO80).to(tl.int64)
    return q1, q2


@triton.jit
def sum_unit(v):
    """Exact-order sum of values in [0, 1]; v must hold no NaN. Returns float64."""
    q1, q2 = _limbs(v)
    return tl.sum(q1, 1).to(tl.float64) * _TWO_M40 + tl.sum(q2, 1).to(tl.float64) * _TWO_M80


@triton.jit
def _pow2(e):
    # 2**e as float64 for an int64 tensor e in [-1022, 1023]
    return ((e + 1023) << 52).to(tl.float64, bitcast=True)


@triton.jit
def ldexp(v, k):
    """v * 2**k for an int64 k in [-2046, 2046] (broadcast against v), as two exact multiplies:
    the result overflows or loses bits only where the exact product does."""
    k1 = k // 2
    return v * _pow2(k1) * _pow2(k - k1)


@triton.jit
def exponent_above(big):
    """k with big < 2**k, from the exponent bits of big >= 0 (float64); -1022 for zero/subnormal."""
    ebits = (big.to(tl.int64, bitcast=True) >> 52) & 0x7FF
    return tl.where(ebits == 0, -1022, ebits - 1022)


@triton.jit
def sum_parts(v):
    """Order-independent sum of float64 values of any magnitude, as (t, k) with sum = t * 2**k and
    |t| < n + 1, so it is usable where the sum itself overflows. Each row is scaled by the power
    of two above its own largest magnitude (exact; a value more than 2**-80 below that largest is
    dropped, which the fixed-point sum would drop anyway). Non-finite rows: (ordinary sum, 0)."""
    big = nanmax(tl.abs(v))
    finite = big < float("inf")  # False for inf and NaN
    k = exponent_above(big)
    scaled = ldexp(v, -k[:, None])  # |scaled| < 1
    scaled = tl.where(finite[:, None] & (scaled == scaled), scaled, 0.0)
    q1, q2 = _limbs(scaled)
    fixed = tl.sum(q1, 1).to(tl.float64) * _TWO_M40 + tl.sum(q2, 1).to(tl.float64) * _TWO_M80
    plain = tl.sum(tl.where(finite[:, None], 0.0, v), 1)
    return tl.where(finite, fixed, plain), tl.where(finite, k, 0)


@triton.jit
def sum_scaled(v):
    """Order-independent sum of float64 values of any magnitude. Returns float64."""
    t, k = sum_parts(v)
    return ldexp(t, k)
