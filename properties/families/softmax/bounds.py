"""The softmax family's error bounds, each derived in its docstring from the contract of
properties/tolerances.py (the one tolerance table: compute precision, exp / log / division
accuracy, reduction depth, the final rounding)."""
from __future__ import annotations

import torch

from ...tolerances import ATOL_FTZ, TABLE, U_ORACLE


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
