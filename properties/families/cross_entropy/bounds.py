"""The cross-entropy bounds, each derived in its docstring from the contract of
properties/tolerances.py (the one tolerance table)."""
from __future__ import annotations

import torch

from ...tolerances import ATOL_FTZ, TABLE, U_ORACLE


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


def ce_sum_bound(tol_sum, tol_none):
    """|sum - sum(reduction="none")| for the two computed within their oracle bounds of the same
    exact sum: tol(sum) + sum_i tol_i(none)."""
    return tol_sum + tol_none.sum()


def ce_mean_count_bound(tol_mean, tol_sum, count, scale, mean_count):
    """|sum - mean * count| (both sides times scale, a power of two: a quarter where mean * count
    overflows float64) for mean and sum within their oracle bounds of the exact mean and sum:
    count tol(mean) + tol(sum), at that scale, + 2**-52 |mean * count| for forming the product in
    float64."""
    return (count * tol_mean + tol_sum) * scale + 2.0**-52 * torch.nan_to_num(mean_count.abs())


def ce_grad_row_sum_bound(tol, ref):
    """|sum_j dx_j| for a gradient row whose exact sum is 0, each dx_j within tol_j of ref_j: sum_j
    tol_j + (V + 2) 2**-53 sum_j |ref_j| (the oracle's own row sum of V terms, and the float64 sum
    of dx)."""
    return tol.sum(-1) + (ref.shape[-1] + 2) * 2.0**-53 * ref.abs().sum(-1)

