"""The one tolerance table, and the error bounds derived from it.

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

Each ``*_bound`` returns, per output element, an absolute bound ``eps`` on the error of the
value computed before the final rounding (first-order error analysis, terms listed in each
docstring), plus the same bound at ``U_ORACLE`` for the FP64 oracle's own error. The element passes
when ``|out - ref| <= eps + 0.5 * ulp_out(|ref| + eps) + atol``: the final rounding adds half an
ulp of the output dtype; ``atol`` covers flushed subnormals. A reference that overflows the output
dtype may be matched by the infinity of its sign.
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


def vjp_in_range(op: str, a: torch.Tensor, g: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Rows (bool, per row) whose explicit VJP cannot overflow the compute precision (float32, or
    float64 for float64 inputs) when formed by its textbook formula in any summation order: the
    default tier's "inputs of ordinary magnitude" for the VJPs. softmax: dot = sum_j y_j g_j and
    g_i - dot, so every partial sum and difference is at most (1 + gamma) (sum_j |y_j g_j| + max_i
    |g_i|), and 2 (...) <= finfo.max keeps it finite for any gamma <= 1; log_softmax: S = sum_j g_j,
    partial sums at most (1 + gamma) sum_j |g_j|, and exp(z_i) S <= |S|. Outside these rows a
    plain float32 kernel (torch's own, on the CPU and on CUDA) returns inf or NaN where the exact
    VJP is finite, e.g. softmax_backward with dy = finfo(float32).max; computing without overflow
    there is a robustness guarantee of the strict tier (matches_oracle_strict). a, g: float64;
    NaN entries count as 0, so rows poisoned by NaN keep their semantics in the default tier; a row
    holding an infinite cotangent is out of range."""
    big = torch.finfo(torch.float64 if dtype == torch.float64 else torch.float32).max
    with torch.no_grad():
        # an infinite cotangent is no ordinary magnitude either: exp(z) underflowing to 0 times an
        # infinite sum gives NaN in float32 where the exact product is +-inf (torch on CUDA)
        inf_g = torch.isinf(g).any(-1)
        ga = torch.where(torch.isfinite(g), g.abs(), 0.0)
        if op == "softmax_backward":
            aa = torch.where(torch.isfinite(a), a.abs(), 0.0)
            need = (aa * ga).sum(-1) + (ga.amax(-1) if g.shape[-1] else 0.0)
        else:
            need = ga.sum(-1)
    return (2 * need <= big) & ~inf_g


def ulp(v: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Spacing of `dtype` numbers at |v| (float64 tensor), subnormal spacing below the normal range."""
    t = TABLE[dtype]
    a = v.abs().clamp_min(2.0**t.emin)
    e = torch.floor(torch.log2(a))
    return torch.exp2(e - (t.precision - 1))


def max_finite(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).max


def softmax_bound(dtype, d, H, dep, y):
    """y_i = exp(d_i) / s. Relative error of y_i: 2|d_i| u (rounding of x_i - m, and of the scaled
    exp argument) + 2H u with H = sum_j y_j |d_j| (the same for each e_j, averaged into s) +
    depth u (the sum) + 10 u (exp, its conversion, the division, two roundings of s)."""
    def rel(u):
        return u * (2 * d.abs() + 2 * H[..., None] + dep + 10)
    pos = y > 0
    r = rel(TABLE[dtype].u_c) + rel(U_ORACLE)
    return torch.where(pos, y * torch.where(pos, r, 0.0), 0.0)


def log_softmax_bound(dtype, d, H, dep, logs, z):
    """z_i = d_i - log s. Absolute error: |d_i| u + (2H + depth + 6) u (relative error of s,
    through log) + 4 |log s| u (log) + |z_i| u (final subtraction)."""
    def ab(u):
        return u * (d.abs() + (2 * H + dep + 6)[..., None] + 4 * logs.abs()[..., None] + z.abs())
    return ab(TABLE[dtype].u_c) + ab(U_ORACLE)


def logsumexp_bound(dtype, m, H, dep, logs, lse):
    """lse = m + log s. Absolute error: (2H + depth + 6) u (s) + 4 |log s| u (log) + |lse| u (add)."""
    def ab(u):
        return u * (2 * H + dep + 6 + 4 * logs.abs() + lse.abs())
    return ab(TABLE[dtype].u_c) + ab(U_ORACLE)


def softmax_backward_bound(dtype, y, g, dot, absdot, dep, dx, n):
    """dx_i = y_i (g_i - dot), dot = sum_j y_j g_j. The dot's error is (depth + 1) u sum_j |y_j g_j|
    (products and sum); g_i - dot and the product add u (|g_i| + |dot|) y_i each (or, computed as
    y_i g_i - y_i dot, the same); |dx_i| u for the last rounding. FTZ: n flushed products move dot
    by < n tiny_c, hence dx_i by y_i n tiny_c."""
    def ab(u):
        return u * (y.abs() * ((dep + 1) * absdot[..., None] + 2 * (g.abs() + dot.abs()[..., None])) + dx.abs())
    return ab(TABLE[dtype].u_c) + ab(U_ORACLE) + ATOL_FTZ * TABLE[dtype].tiny_c * (1 + n * y.abs())


def log_softmax_backward_bound(dtype, z, g, S, absS, dep, dx, n, scale=1.0):
    """dx_i = g_i - exp(z_i) S, S = sum_j g_j. exp(z_i) has relative error (2|z_i| + 4) u; S has
    absolute error depth u sum|g|; the product and the subtraction add u |exp(z_i) S| and u |dx_i|.
    FTZ: n flushed terms of S move dx_i by exp(z_i) n tiny_c. S and absS may be given in units of
    scale (a power of two): sum |g| of 255 values near 2e307 overflows float64, while u times it
    does not (formed directly, the bound reads NaN for such a row, i.e. a half-ulp tolerance,
    against the FP64 oracle's own 13-ulp error)."""
    ez = torch.exp(z)
    def ab(u):
        t = ez * (dep * absS[..., None] + S.abs()[..., None] * (2 * z.abs() + 6))
        return (u * scale) * torch.where(ez > 0, t, 0.0) + u * dx.abs()
    return ab(TABLE[dtype].u_c) + ab(U_ORACLE) + ATOL_FTZ * TABLE[dtype].tiny_c * (1 + n * ez)


def total_tolerance(eps: torch.Tensor, ref: torch.Tensor, out_dtype: torch.dtype, in_dtype: torch.dtype):
    """eps plus the final rounding to out_dtype plus the FTZ floor of the compute precision. Where
    the reference is NaN (a NaN or +inf input reached it) the bound is 0, never NaN: a correct
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
    |ref| + tol). Where tol is 0 (a NaN reference, total_tolerance) it stays 0."""
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


def mismatch(actual: float, expected: float, tol: float) -> str:
    """What differs at one element compare() rejected, in words (actual, expected and tol as a
    failure report prints them)."""
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
    return f"|actual - expected| = {abs(a - e):.3g} > tolerance"


# ----------------------------------------------------------------------------------------------
# merges of (softmax / attention output, logsumexp) states
# ----------------------------------------------------------------------------------------------
# One merge step, in the compute precision u = u_c, from stored inputs (x_a, l_a), (x_b, l_b):
#   d = l_min - l_max             rounding: u |d|
#   e = exp(d)                    relative: u |d| (from d) + 4u (exp)
#   w_max = 1 / (1 + e)           relative: <= u (|d| e/(1+e) + 1) + 4u (division) <= u (|d| + 10)
#   w_min = e / (1 + e)           relative: u |d| + 4u + u + 4u              <= u (|d| + 10)
#   y = w_a x_a + w_b x_b         two products and one sum: + 2u of sum w |x|
#   lse = l_max + log(1 + e)      log(1 + e) is off by <= u (|d| e/(1+e) + 1) + 4u log 2 < 8u, the
#                                 addition by u |lse|: <= u (|lse| + 12); |d| <= 2 Lam (below)
# Lam: the largest |lse| in play. Every intermediate lse of a merge tree lies between the row's
# largest chunk lse and its total lse (log-add-exp of a subset), so Lam = max(|lse_c|, |lse|)
# bounds all of them, and |d| <= 2 Lam.
#
# A merge tree of depth H (the most merges on a path from a chunk to the root; a sequential online
# chain over k chunks has H = k - 1). The product of the weights met on a chunk's path telescopes:
# prod_s exp(l_child - lse(l_child, l_sibling)) = exp(l_chunk - l_root + sum_s r_s), r_s the
# rounding of the lse formed at step s (compute u (Lam + 12), stored: another u Lam). So relative
# to the exact exp(l_chunk - lse_total) the weight of a chunk is off by
#   |dl_chunk| + |dl_root| + sum_s r_s + sum_s (weight computation + product + sum, u (2 Lam + 12))
# with |dl_chunk| <= u Lam (the chunk lse rounded to its float32 / float64 dtype) and
# |dl_root| <= u Lam + H u (2 Lam + 12) (a convex combination of its children's errors plus its
# own r). Summed: 2 u Lam + H u (6 Lam + 36). The values add their roundings to the output dtype:
# the chunk's own (half an ulp, 2**-precision relative) and H - 1 intermediate results (the last
# one is total_tolerance's); in the subnormal range each rounding is absolute, 2**(emin-precision),
# and a flushed product moves a value by < tiny_c per step. For attention the relative terms
# apply to A_i = sum_j P_j |v_ji| (P the row's softmax), which bounds sum_c W_c |o_c,i| and every
# intermediate |o|; for softmax to the reference p_i itself.
# The FP64 oracle's own error: relative (4 * 745 + D + 10) * 2**-53 (softmax_bound at U_ORACLE with
# |d|, H <= 745 wherever p > 0; attention adds its D products), far below the rest.
def merge_value_bound(dtype, depth, lam, mag, n_keys=0, leaves=True):
    """Absolute bound on a merged value (softmax p or attention o) before its final rounding.
    depth: merge steps on the worst chunk's path (H); lam: Lam (float64 tensor, per row, with a
    trailing axis); mag: p (softmax) or A (attention); leaves: the chunk states were rounded from
    FP64 truth (False: the inputs are exact, and only the steps' own errors count)."""
    t = TABLE[dtype]
    u = t.u_c
    H = max(int(depth), 1)
    rel = H * u * (6 * lam + 36) + (H if leaves else H - 1) * 2.0 ** -t.precision
    if leaves:
        rel = rel + 2 * u * lam
    rel = rel + U_ORACLE * (4 * 745 + n_keys + 10)
    absolute = (H + 1) * (2.0 ** (t.emin - t.precision) + ATOL_FTZ * t.tiny_c)
    return torch.nan_to_num(mag * rel, nan=0.0) + absolute


def merge_lse_bound(dtype, depth, lam, n_keys=0, leaves=True):
    """Absolute bound on the merged lse before its final rounding to its float32 / float64 dtype:
    u Lam (the chunk lses' rounding, when leaves) + H u (2 Lam + 12) (each step's r_s, stored),
    plus the FP64 one-shot logsumexp's own error (logsumexp_bound at U_ORACLE: Lam + D + 4 * 745)."""
    t = TABLE[dtype]
    H = max(int(depth), 1)
    b = H * t.u_c * (2 * lam + 12) + (t.u_c * lam if leaves else 0.0)
    return b + U_ORACLE * (lam + n_keys + 4 * 745)


# ----------------------------------------------------------------------------------------------
# cross-entropy (per row i, target t, eps = label_smoothing, V classes, m the row max)
# ----------------------------------------------------------------------------------------------
def ce_lse_error(u, lse, H, dep, logs):
    """Absolute error of lse = m + log s computed online over tiles. Each term exp(x_j - m) of s
    is formed from x_j minus a running max and rescaled by exp(m_old - m_new) once per later
    tile: relative error (|d_j| (subtraction) + |d_j| (the rescale arguments sum to at most
    |d_j|) + 4 (exp) + 4 depth (a 4u exp per rescale, at most depth(V) rescales)) u, hence
    (2H + 4 depth + 4) u for s (H = sum_j y_j |d_j|), plus depth u for the sum and 2u for its
    rounding; log adds 4u |log s| + u (relative error of s passes through log as absolute); the
    addition of m adds u |lse|."""
    return u * ((2 * H + 5 * dep + 7) + 4 * logs.abs() + lse.abs())


def ce_loss_bound(dtype, lse, H, dep, logs, xt, mean_abs, loss, eps):
    """Per-row loss = (1 - eps)(lse - x_t) + eps (lse - mean x). Terms (each at u = u_c and at
    U_ORACLE): the error of lse (ce_lse_error); rounding eps and 1 - eps (u each, relative to the
    term they scale), the products and subtractions: 2u (|lse| + |x_t|) (1 - eps) + 2u |lse| eps;
    the mean of x formed as sum x_j (1/V): (depth + 3) u mean |x_j| eps; the final addition
    u |loss|. Row loss 0 (ignored) is exact. Each term is formed so that it overflows only where it
    exceeds the float64 range itself (|lse| + |x_t| alone overflows at |x| ~ finfo.max), and the
    smoothing terms are 0 for eps = 0 whatever mean |x_j| is."""
    def ab(u):
        smooth = eps * lse.abs() * (2 * u) + eps * (dep + 3) * u * mean_abs if eps > 0 else 0.0
        return (ce_lse_error(u, lse, H, dep, logs) + (2 * u * (1 - eps)) * lse.abs() + (2 * u * (1 - eps)) * xt.abs()
                + smooth + u * loss.abs())
    return ab(TABLE[dtype].u_c) + ab(U_ORACLE)


def ce_reduced_bound(row_eps, rows_abs, n_rows, count, reduction, u_rows=None):
    """mean / sum of per-row losses (each within row_eps): sum_i row_eps_i, plus the kernel's sum
    of the rows' rounded values, u_rows sum |loss_i| (None: a float64 sum, within the oracle's
    own), plus the oracle's float64 sum (n 2**-53 sum |loss_i|), divided by the count for the
    mean (one more 2**-53 relative). For "none" the row bounds themselves."""
    if reduction == "none":
        return row_eps
    rel = (n_rows + 1) * U_ORACLE + (0.0 if u_rows is None else u_rows)
    total = row_eps.sum() + rel * rows_abs.sum()
    return total / count if reduction == "mean" else total


def ce_grad_bound(dtype, p, x, lse_abs_err, lse, g0, scale, is_t, eps, V):
    """dx_ij = (p_j - eps/V - (1 - eps)[j = t]) * scale_i, p_j = exp(x_j - lse_i). Terms (at u_c
    and at U_ORACLE): p_j ((|x_j - lse|) u (subtraction) + the error of lse + 4u (exp)); eps/V
    formed as eps * (1/V): 3u eps/V; 1 - eps: u; the two subtractions u (|p_j - eps/V| + |g0_j|);
    scale (dloss rounded, or dloss/count rounded): u |g0_j|; the product u |g0_j| -- all times
    |scale_i|. FTZ: a flushed p_j moves dx by tiny_c |scale_i|. p is exact (= e/s) where x is
    -inf (p = 0). The argument's error delta moves p by exactly p (e**delta - 1), bounded by
    p expm1(|delta|), not by its first-order p |delta|: u |lse| (the rounding of lse itself) is
    O(1) once |lse| reaches 1/u (float64 rows of 2**55: lse rounds by up to 4, p by up to e**4;
    e.g. a row whose p is 9x the exact 1/V, where the linear bound falls short by 1e-5
    relative)."""
    d = torch.where(torch.isfinite(x), (x - lse[..., None]).abs(), 0.0)

    def ab(u, err_lse):
        # p = 0 (x - lse may even overflow in float64) is formed exactly: no p term there
        pt = torch.where(p > 0, p * torch.expm1(d * u + err_lse[..., None] + 4 * u), 0.0)
        inner = (pt + 3 * u * eps / V + u * is_t
                 + u * ((p - eps / V).abs() + g0.abs()) + 2 * u * g0.abs())
        return inner * scale.abs()[..., None]
    t = TABLE[dtype]
    return (ab(t.u_c, lse_abs_err[0]) + ab(U_ORACLE, lse_abs_err[1])
            + ATOL_FTZ * t.tiny_c * scale.abs()[..., None])
