"""The softmax family's error bounds, each derived in its docstring from the contract of
properties/tolerances.py (the one tolerance table: compute precision, exp / log / division
accuracy, reduction depth, the final rounding)."""
from __future__ import annotations

import math

import torch

from ...spec import lookup
from ...tolerances import ATOL_FTZ, TABLE, U_ORACLE, ulp


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


def rounded_forward_effect(op, out, g, du):
    """How far the exact VJP at the rounded forward output (y_r = y + dy, or z_r = z + dz, with
    |dy_i| <= du_i) can be from the VJP at the exact one, for the cotangent g.
    softmax: y_r (g - dot_r) - y (g - dot) = dy (g - dot) - (y + dy) ddot, ddot = sum_j dy_j g_j,
    so the bound is du |g - dot| + (y + du) S with S = sum_j du_j |g_j|. (The second-order part,
    du S, matters where y_i is a 16-bit subnormal: its rounding is then as large as y_i itself.)
    log_softmax: (exp(z_r) - exp(z)) sum g, at most exp(z) expm1(du) |sum g|."""
    if lookup(op).forward == "softmax":
        dot = (out * g).sum(-1, keepdim=True)
        S = (du * g.abs()).sum(-1, keepdim=True)
        return du * (g - dot).abs() + (out + du) * S
    return torch.exp(out) * torch.expm1(du) * g.sum(-1, keepdim=True).abs()


def logsumexp_grad_bound(dtype, dx, g, tol_p, tol_l):
    """dx = softmax(x) g (logsumexp's VJP, exact dx): softmax within its bound tol_p, times |g|;
    the product rounded twice, 2 u_c |dx|; and a backward that forms exp(x - lse) from the
    forward's saved lse (rounded to the dtype it was returned in, within its bound tol_l) moves dx
    by |dx| expm1(tol_l) (tol_l capped at 700: huge enough at |x| ~ finfo.max to cover anything)."""
    saved = dx.abs() * torch.expm1(tol_l.clamp_max(700))[..., None]
    return g.abs()[..., None] * tol_p + 2 * TABLE[dtype].u_c * dx.abs() + torch.nan_to_num(saved, nan=0.0)


def unit_row_sum_bound(tol, n):
    """|sum_i y_i - 1| for a row of n outputs, each within tol_i of the FP64 oracle: sum_i tol_i,
    plus n 2**-52 (the oracle's row sums to 1 within n 2**-53, and the FP64 sum of y adds as
    much)."""
    return tol.sum(-1) + n * 2.0**-52


def exp_log_softmax_bound(ty, ez, tz):
    """|exp(z) - y| for z = log_softmax(x) within tz of its oracle and y = softmax(x) within ty of
    its own (the same exact softmax): ty + exp(z) expm1(tz), z's error through exp (exp(z + dz) -
    exp(z) = exp(z) expm1(dz), exact to every order; tz clamped where expm1 would overflow). NaN
    (an infinite exp(z) times expm1(0)) reads as no bound."""
    tol = ty + ez * torch.expm1(tz.clamp_max(700))
    return torch.nan_to_num(tol, nan=math.inf)


def vjp_row_sum_bound(tol, ref, expected, n):
    """|sum_i dx_i - expected| for a VJP row whose exact sum is expected (dot (1 - sum y) for
    softmax, sum g (1 - sum exp z) for log_softmax), each dx_i within tol_i of ref_i: sum_i tol_i,
    plus 4 n 2**-53 (sum_i |ref_i| + |expected|) for the FP64 sums of dx, of the reference and of
    the expected term (each of n terms, n roundings at most). All in the same units (the law's
    power-of-two scale s)."""
    return tol.sum(-1) + 4 * n * 2.0**-53 * (ref.abs().sum(-1) + expected.abs())


def cotangent_spread_bound(exact, tol, n):
    """|dx_i| of a softmax VJP within tol_i of the exact one, whose magnitude is at most exact_i
    (computed in float64 from n terms): exact_i (1 + (n + 4) 2**-52), that value's own float64
    evaluation, plus tol_i."""
    return exact * (1 + (n + 4) * 2.0**-52) + tol


def autograd_vjp_bound(op, dtype, tol, out64, g, fwd64, exact_shape, shape):
    """The VJP at the rounded forward output y_r against torch's FP64 autograd at x: tol (the VJP's
    bound at y_r) plus how far the exact VJP moves between y_r and torch's float64 y64
    (rounded_forward_effect), with |y_r - y64| <= half an ulp of dtype (y_r is the FP64 oracle's
    forward rounded to dtype) + 2 fwd64 (the oracle's and torch's own FP64 errors, each within
    the float64 forward bound fwd64: negligible below float64, the whole term for float64). A
    -inf z rounds exactly (no term); an infinite term times an exact 0 propagates nothing.
    exact_shape: the FP64 VJP's; shape: the target's (an expanded y: the term broadcast to it)."""
    fwd64 = torch.nan_to_num(fwd64, nan=0.0)  # NaN where the forward is degenerate: no term
    half_ulp = 0.5 * ulp(out64, dtype) + 2 * fwd64
    half_ulp = torch.where(torch.isfinite(out64), half_ulp, 0.0)
    extra = torch.nan_to_num(rounded_forward_effect(op, out64, g, half_ulp), nan=0.0)
    extra = extra.reshape(exact_shape)
    if tuple(shape) != tuple(extra.shape):
        extra = extra.expand(shape)
    return tol + extra


def finite_difference_bound(op, dtype, tol, out, x, g, h, cols):
    """A VJP at the rounded forward output against central differences (L(x + h e_j) - L(x - h e_j))
    / 2h of L = sum(forward64(x) * g), at the columns cols: the VJP's tol, plus the effect of
    rounding the forward output to dtype (rounded_forward_effect with half an ulp), plus the
    truncation h^2/6 * 2 sum|g| (third derivatives of softmax are below 1 in total), plus the
    roundoff of each FP64 evaluation of L, (log2 D + 8) 2**-53 sum_i |g_i| (|out_i| + |d_i| + 2)
    (d = x - max x), over h."""
    rnd = rounded_forward_effect(op, out, g, 0.5 * ulp(out, dtype))
    sg = g.abs().sum(-1, keepdim=True)
    d = x - x.max(-1, keepdim=True).values
    l_err = (math.log2(x.shape[-1]) + 8) * 2.0**-53 * (g.abs() * (out.abs() + d.abs() + 2)).sum(-1, keepdim=True)
    fd_err = h * h / 3 * sg + l_err / h
    return (tol + rnd)[..., cols] + fd_err
