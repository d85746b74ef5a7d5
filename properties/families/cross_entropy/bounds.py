"""The cross-entropy bounds, each derived in its docstring from the contract of
properties/tolerances.py (the one tolerance table)."""
from __future__ import annotations

import torch

from ...tolerances import ATOL_FTZ, TABLE, U_ORACLE, half_subnormal, ulp


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
    u |loss|. eps itself reaches the kernel rounded (a float32 argument of a 16/32-bit kernel):
    off by u eps, it moves the loss by u eps |x_t - mean x| (its derivative), which the terms
    relative to 1 - eps miss where 1 - eps is small: u eps (|x_t| + mean |x_j|), the second part
    within the mean's term. Row loss 0 (ignored) is exact. Each term is formed so that it overflows
    only where it exceeds the float64 range itself (|lse| + |x_t| alone overflows at |x| ~
    finfo.max), and the smoothing terms are 0 for eps = 0 whatever mean |x_j| is."""
    def ab(u):
        smooth = (eps * lse.abs() * (2 * u) + eps * (dep + 3) * u * mean_abs + eps * u * xt.abs()
                  if eps > 0 else 0.0)
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


def ce_torch_grad_allowance(dtype, p, x, lse, scale, hot, eps):
    """The default tier's allowance for a 16-bit gradient formed as torch forms it (ce_truth), at
    u = 2**-precision of the logits' dtype. Autograd saves log_softmax's output z_j = x_j - lse
    rounded to the dtype (off by u |z_j|), which moves p_j = exp(z_j) by p_j expm1(u |z_j|), times
    the row's scale. Smoothed, torch's loss (1 - eps) NLL + eps SMOOTH sends log_softmax's backward
    a cotangent g_j = -(1 - eps) s [j = t] - (eps / V) s formed in the dtype: each term rounded and
    their sum rounded. A rounding to the dtype errs by at most u |v| + eta (eta: half the subnormal
    spacing; (eps / V) |s| is subnormal in float16 for V in the thousands), so |dg_j| <=
    2u ((1 - eps) |s| [j = t] + (eps / V) |s|) + (2 + [j = t]) eta (the second term, the sum, and
    at j = t the first); dx_j = g_j - p_j sum_k g_k carries dg_j + p_j sum_k |dg_k|."""
    d = torch.where(p > 0, (x - lse[..., None]).abs(), 0.0)
    rnd, dg = _rounded_softmax_terms(dtype, p, d, scale, hot, eps)
    return torch.nan_to_num(rnd, nan=0.0) + dg


def ce_options_torch_grad_allowance(dtype, ref, p, d, J, W, sc, hot, eps):
    """ce_torch_grad_allowance with the options (ce_options_truth), at u = 2**-precision of the
    logits' dtype, times |J| = |dy/dx|: the log-probabilities rounded to the dtype move p by
    p expm1(u |y - lse|) (d = |y - lse|), times the largest weight W and the scale; the
    gradient's products and its rounding to the dtype through the transform, 3u |gy| with
    gy = ref / J; 3 eta W for the roundings below the normal range; smoothed, the two terms'
    cotangents rounded as ce_torch_grad_allowance's, times W."""
    u = 2.0 ** -TABLE[dtype].precision
    eta = half_subnormal(dtype)
    gy = ref.abs() / J.abs().clamp_min(1e-300)
    rnd, dg = _rounded_softmax_terms(dtype, p, d, sc, hot, eps)
    return J.abs() * (torch.nan_to_num(W * rnd, nan=0.0) + 3 * u * torch.nan_to_num(gy, posinf=0.0) + 3 * eta * W
                      + W * dg)


def _rounded_softmax_terms(dtype, p, d, scale, hot, eps):
    """The two parts of ce_torch_grad_allowance, per unit weight: p expm1(u d) |scale| (d: the
    log-probabilities' magnitudes; NaN where p is, the caller reads it as 0 once weighted), and
    the smoothed cotangents' roundings dg_j + p_j sum_k dg_k (0 without smoothing)."""
    u = 2.0 ** -TABLE[dtype].precision
    rnd = p * torch.expm1(u * d) * scale.abs()[..., None]
    if not eps > 0:
        return rnd, 0.0
    terms = ((1 - eps) * hot + eps / p.shape[-1]) * scale.abs()[..., None]
    eta = half_subnormal(dtype)
    dg = 2 * u * terms + (2 + hot) * eta
    return rnd, dg + p * dg.sum(-1, keepdim=True)


def ce_rounded_mean_scale(dtype, dloss, count, g0, hot, y, eps):
    """The default tier's allowance for a 16-bit mean's gradient scale formed as torch forms it:
    nll_loss's backward divides dloss by the count of rows (its total_weight) with both held in the
    logits' dtype, so the count is rounded (exact below 2**precision: bf16 257 rows count as 256)
    and so is the quotient. The scale s' = round(dloss / round(count)) errs from s = dloss / count
    by err = |dloss / round(count) - s| + h(dloss / round(count)) (h: half the dtype's spacing,
    the subnormal spacing included). Without smoothing the cotangent is -s' at the target alone
    and the gradient is linear in it, so the whole row scales: err |g0_j|, g0 = p - onehot. With
    smoothing the two terms' cotangents are scaled separately, each by at most err:
    dg_j = err ((1 - eps) [j = t] + eps / V), and dx_j carries dg_j + p_j sum_k dg_k.
    bf16 logits 3 x 15 of zeros, target 0, dloss 1: torch gives dx_00 = -0.3125 (scale
    round(1/3) = 0.333984) where the exact value is -0.311111, 1.4 ulps off. A count that is inf
    in the dtype (float16 past 65504 rows) is PyTorch's bug, not an allowance (FINDINGS.md, torch 3)."""
    dl = dloss.detach().double().reshape(())
    n = count.to(dl.device, torch.float64)
    n16 = n.to(dtype).double()
    if not bool(torch.isfinite(n16)) or float(n16) == 0.0:
        return torch.zeros_like(g0)
    sc, s = dl / n16, dl / n
    err = (sc - s).abs() + 0.5 * ulp(sc, dtype)
    err = torch.nan_to_num(err, nan=0.0, posinf=0.0)
    if eps > 0:
        dg = err * ((1 - eps) * hot + eps / g0.shape[-1])
        return dg + y * dg.sum(-1, keepdim=True)
    return err * g0.abs()  # ignored rows: ce_truth zeroes their bound


def ce_rounded_log_probs(dtype, x64, lse, xt, eps, red):
    """The default tier's allowance, per row, for a 16-bit loss composed as torch composes it:
    log_softmax's output z_j = x_j - lse in the logits' dtype, then the NLL -z_t and the smoothing
    term -(eps / V) sum_j z_j. Rounding v to the dtype errs by at most h(v), half the dtype's
    spacing at |v| (the subnormal spacing below the normal range; |v| is taken a hair larger, so a
    value computed just below a power of two is covered too): z_t moves the loss by
    (1 - eps) h(z_t), the z_j by (eps / V) sum_j h(z_j). With reduction='none' the row loss itself
    is formed in the dtype: the product (1 - eps) NLL rounded, h((1 - eps) z_t); the smoothing sum
    rounded, (eps / V) h(sum_j |z_j|) (every z_j <= 0), and its product by eps / V,
    h(eps mean_j |z_j|); the sum of the two terms is the output's own rounding, in
    total_tolerance. (A reduced loss rounds scalars: ce_truth's allowance for the reductions.)
    bf16 logits [0.3457, 0.8203], target 0, eps = 0.1: torch on CUDA gives 0.9296875 where the
    exact loss is 0.9346178, 1.26 ulps off; the allowance is 1.4 ulps, the output's rounding
    half an ulp more."""
    def h(v):
        return 0.5 * ulp(v.abs() * (1 + 2.0**-16), dtype)
    V = x64.shape[-1]
    zt = (lse - xt).abs()
    # |z_j| over the finite logits (a -inf logit makes the smoothed loss itself +inf)
    z = torch.where(torch.isfinite(x64), (x64 - lse[..., None]).abs(), 0.0)
    r = (1 - eps) * h(zt) + (eps * (h(z) / V).sum(-1) if eps > 0 else 0.0)
    if red == "none" and eps > 0:
        zsum = z.sum(-1)
        r = r + h((1 - eps) * zt) + (eps / V) * h(zsum) + h(eps * zsum / V)
    return torch.nan_to_num(r, nan=0.0)


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



# ----------------------------------------------------------------------------------------------
# the options (weight w, z_loss z, softcap c, logit_scale s): the loss sees y = c tanh(s x / c)
# ----------------------------------------------------------------------------------------------
def transformed_logit_error(u, x, softcap, logit_scale, y):
    """|fl(y_j) - y_j| for y = c tanh(a), a = s x / c, formed at unit roundoff u (0 where no
    option transforms the logits). a carries at most 3u |a| relative (the product s x, the
    division by c, and its own rounding), which tanh maps to c sech^2(a) 3u |a| = 3u |s x|
    sech^2(a); tanh itself errs by 4u |tanh a| relative plus 4u absolute (a formula through exp,
    1 - 2 / (e^{2a} + 1), loses its relative accuracy near 0), times c: 4u (|y| + c); the product
    by c adds u |y|. Without a softcap y = s x is one product: u |y|. A +-inf logit under a softcap
    is y = +-c, and its error 9u c; under the scale alone it stays infinite (no error term)."""
    if softcap is None:
        return torch.where(torch.isfinite(y), u * y.abs(), 0.0) if logit_scale != 1.0 else torch.zeros_like(y)
    c, s = float(softcap), float(logit_scale)
    sx = x * s
    sech2 = 1.0 / torch.cosh(sx / c) ** 2
    lin = torch.where(torch.isfinite(sx), 3 * u * sx.abs() * sech2, 0.0)
    return lin + 5 * u * y.abs() + 4 * u * c


def transform_grad_error(u, x, softcap, logit_scale):
    """|fl(J_j) - J_j| for J = dy/dx = s sech^2(s x / c) (s without a softcap, exact). The argument
    a errs by 3u |a| relative (transformed_logit_error), which moves sech^2 by 2 sech^2 |tanh a|
    3u |a| <= 6u |a| sech^2; cosh, its square and the quotient add 8u relative; formed as
    1 - tanh^2 (autograd through tanh) the result errs by 5u absolute instead (tanh within
    u + its rounding u, squared, subtracted from 1): the sum of both covers either; the product
    by s adds u |J|."""
    s = float(logit_scale)
    if softcap is None:
        return torch.zeros_like(x)
    a = x * s / float(softcap)
    sech2 = torch.where(torch.isfinite(a), 1.0 / torch.cosh(a) ** 2, 0.0)
    a = torch.where(torch.isfinite(a), a.abs(), 0.0)
    return abs(s) * (sech2 * (6 * u * a + 9 * u) + 5 * u)


def ce_options_loss_bound(u, lse, lse_err, y, yt, dy, dyt, w, wt, eps, z, fin):
    """Per-row loss with options, at unit roundoff u: (1 - eps) w_t (lse - y_t) + eps / V sum_j w_j
    (lse - y_j) + z lse^2 (w = 1 without weights), the terms of y = transform(x) each off by at
    most dy_j from the exact y_j (transformed_logit_error). lse is 1-Lipschitz in the max norm,
    so the error of y moves it by at most D = max_j dy_j (exactly, not to first order); with its
    own error lse_err (ce_lse_error at the y) it is within L = D + lse_err. Each difference
    lse - y_j is then within L + dy_j + 2u (|lse| + |y_j|) (its rounding and that of lse); the
    weights are exact, and their products and the two scales (1 - eps, eps / V) add 3u relative
    to each term; the sum over the classes of the smoothing term adds (depth + 1) u of its terms'
    magnitudes (depth <= V); the z term z lse^2 errs by z (2 |lse| L + L^2) + 3u z lse^2; the final
    additions u |loss|. eps reaches the kernel rounded, off by u eps: the cross-entropy term moves
    by u eps |w_t| |lse - y_t| (the smoothing term's share is within its (V + 4) u)."""
    V = y.shape[-1]
    D = torch.where(fin, torch.where(torch.isfinite(y), dy, 0.0).amax(-1) if V else 0.0, 0.0)
    L = D + lse_err
    yf = torch.where(torch.isfinite(y), y, 0.0)
    nll = (1 - eps) * wt.abs() * (L + dyt + 2 * u * (lse.abs() + yt.abs()) + 3 * u * (lse - yt).abs())
    out = nll
    if eps > 0:
        out = out + u * eps * wt.abs() * (lse - yt).abs()
        terms = w.abs() * (L[..., None] + dy + 2 * u * (lse.abs()[..., None] + yf.abs())
                           + (3 + V + 1) * u * (lse[..., None] - yf).abs())
        out = out + eps / V * terms.sum(-1)
    if z:
        out = out + z * (2 * lse.abs() * L + L * L) + 3 * u * z * lse * lse
    total = (1 - eps) * wt.abs() * (lse - yt).abs() + z * lse * lse
    if eps > 0:
        total = total + eps / V * (w.abs() * (lse[..., None] - yf).abs()).sum(-1)
    return out + 2 * u * total


def ce_options_grad_bound(u, p, y, lse, lse_err, dy, J, dJ, w, wt, eps, z, sc, zsc, is_t, d, tiny=0.0):
    """dx_j = J_j gy_j, gy_j = sc ((1 - eps) w_t (p_j - [j = t]) + eps / V (sum(w) p_j - w_j))
    + zsc 2 z lse p_j (w = 1 without weights; sc, zsc the rows' scales of the two terms, dloss or
    dloss over the mean's divisors), at unit roundoff u. p_j = exp(y_j - lse) is formed from y
    off by dy_j and lse off by L = max dy + lse_err (ce_options_loss_bound), plus the
    subtraction's u |y_j - lse| (d) and exp's 4u: p_j moves by at most
    p_j expm1(dy_j + L + u d_j + 4u) (exactly, not to first order). That times the factors of
    p_j (|sc| ((1 - eps) |w_t| + eps / V sum |w|) + 2 z |zsc lse|), plus 2 z |zsc| p_j L for the
    lse factor, plus 6u of the terms' magnitudes for their products, sums and the scales'
    roundings, plus u eps |sc w_t| (p_j + [j = t]) for eps itself rounded (a float32 argument:
    1 - eps then errs by u eps, not u (1 - eps); float32, eps 0.985: the target's dx_t off by
    9.2e-9 where the 6u term allows 5.7e-9), is the error of gy, E; then |J| E + |gy| dJ + E dJ
    (dJ: transform_grad_error).
    FTZ: a p_j formed below tiny (the compute precision's smallest normal; 0 for the oracle) may
    be flushed to 0, an error of up to tiny in p_j that every factor of p_j multiplies: with
    z-loss 2 z |lse| of them (float32, lse 60, z 0.5: a flushed p_j of 3e-39 moves dx_j by 2e-37,
    beyond the output's own FTZ floor). Only y_j = -inf has p_j = 0 exactly."""
    ep = torch.where(p > 0, p * torch.expm1(dy + L_of(dy, lse_err)[..., None] + u * d + 4 * u), 0.0)
    if tiny:
        ep = ep + torch.where(y > float("-inf"), tiny, 0.0)
    V = p.shape[-1]
    wsum = w.abs().sum(-1, keepdim=True) if w.ndim else w.abs() * V
    # 2 z |zsc| |lse| formed from the small factor up: zsc lse alone overflows float64 for a
    # dloss of 3 at lse 9e307 where the term itself (z = 1e-4) is 5e304
    zl = (2 * z * zsc.abs() * lse.abs())[..., None]
    coef = sc.abs()[..., None] * ((1 - eps) * wt.abs()[..., None] + eps / V * wsum) + zl
    L = L_of(dy, lse_err)[..., None]
    mag = (sc.abs()[..., None] * ((1 - eps) * wt.abs()[..., None] * (p + is_t) + eps / V * (wsum * p + w.abs()))
           + zl * p)
    E = coef * ep + 6 * u * mag
    if eps > 0:
        E = E + u * eps * (sc.abs() * wt.abs())[..., None] * (p + is_t)
    if z:
        E = E + 2 * z * zsc.abs()[..., None] * (p + ep) * L
    # 0 times an infinite E (a row whose lse rounds by more than 1) is no error: J = 0 or dJ = 0
    return torch.where(J != 0, J.abs() * E, 0.0) + torch.where(dJ > 0, mag * dJ + E * dJ, 0.0)


def L_of(dy, lse_err):
    """The error of a row's lse: lse_err (at the y) + max_j dy_j (the y's errors, lse being
    1-Lipschitz in the max norm)."""
    D = torch.where(torch.isfinite(dy), dy, 0.0).amax(-1) if dy.shape[-1] else torch.zeros(dy.shape[:-1], dtype=dy.dtype, device=dy.device)
    return D + lse_err


# ----------------------------------------------------------------------------------------------
# the fused linear cross-entropy (logits z = hidden @ weight.T + bias, then the loss above)
# ----------------------------------------------------------------------------------------------
def lce_logits_error(dtype, hidden, weight, bias, z):
    """|fl(z_j) - z_j| for the logits z = hidden @ weight.T + bias formed in the inputs' dtype with
    float32 accumulation (float64 for float64): a dot product of length H errs by at most
    (H + 1) u_c sum_k |h_k w_jk| (any order, the bias added at the end: one more term), and the
    result rounded to the dtype by half an ulp of |z_j| (2**-p |z_j|, p the dtype's precision)."""
    h, w = hidden.detach().double(), weight.detach().double()
    mag = h.abs() @ w.abs().T
    if bias is not None:
        mag = mag + bias.detach().double().abs()
    t = TABLE[dtype]
    return (hidden.shape[-1] + 1) * t.u_c * mag + 2.0 ** -t.precision * z.abs()


def lce_loss_extra(dz, J, y, z_loss, counted, reduction, ce_rows=None, ce_divisor=None):
    """The loss's error from logits within dz of the exact ones: y = transform(z) within |J| dz,
    D = max_j of it per row; lse moves by at most D (1-Lipschitz in the max norm), each lse - y_j
    by 2D, so the cross-entropy term (1 - eps) w_t (lse - y_t) + eps / V sum_j w_j (lse - y_j) by
    2D ce_rows, ce_rows = (1 - eps) |w_t| + eps mean_j |w_j| (1 without class weights), and the z
    term by z (2 |lse| D + D^2) (exact bounds, not first order); reduced as the loss: the mean
    divides the cross-entropy terms by ce_divisor (|sum of w[t]| over the counted rows; the count
    without weights) and the z terms by the count."""
    V = y.shape[-1]
    D = (J.abs() * dz).amax(-1) if V else torch.zeros(y.shape[:-1], dtype=torch.float64, device=y.device)
    lse = torch.logsumexp(y, -1).abs() if V else D
    ce = 2 * D * (1.0 if ce_rows is None else ce_rows)
    zt = z_loss * (2 * lse * D + D * D)
    if reduction == "none":
        return torch.where(counted, ce + zt, 0.0)
    ce, zt = torch.where(counted, ce, 0.0).sum(), torch.where(counted, zt, 0.0).sum()
    if reduction == "sum":
        return ce + zt
    count = counted.sum()
    return ce / (count if ce_divisor is None else ce_divisor) + zt / count


def lce_split_bound(tol_whole, tol_a, tol_b, reduction, divisor):
    """|one call - the two parts recombined| for the rows split in two calls, each within its
    bound of the same exact loss (the parts at reduction "none", or "sum" for sum and mean): the
    whole call's bound plus the parts' (concatenated; added; added over the mean's divisor, the
    count of counted rows or the sum of their class weights)."""
    if reduction == "none":
        return tol_whole + torch.cat([tol_a, tol_b])
    if reduction == "sum":
        return tol_whole + tol_a + tol_b
    return tol_whole + (tol_a + tol_b) / abs(divisor)


# the largest slope of sech(u)^2, |2 sech(u)^2 tanh(u)|, at tanh(u)^2 = 1/3: 4 / (3 sqrt 3)
SECH2_SLOPE = 4.0 / (3.0 * 3.0 ** 0.5)


def lce_dlogits_error(tol_G, y, J, dy, logits_err, ce_coef, z_scale, z_loss=0.0, softcap=None, logit_scale=1.0):
    """|G~ - G| for the d logits G~ a kernel forms from its own logits, G the FP64 d logits at the
    FP64 logits z: tol_G (the cross-entropy backward's bound at z) plus the logits' error carried
    through the backward (exact bounds, not first order). y = T(z) are the logits the loss sees
    (s z, or c tanh(s z / c) with a softcap), J = T'(z), dy the FP64 d loss / d y (G = dy J), all
    float64; the kernel's logits are within e_j = logits_err of z. T is |s|-Lipschitz, so y moves
    by at most D = |s| max_j e_j per row, lse by at most D, and each p_j = exp(y_j - lse) by at
    most p_j r, r = expm1(2 D). Per row, dy_j = a p_j - b_j with b_j (the one-hot, smoothing and
    weight terms) independent of z and a = ce_coef + 2 zl lse z_scale: ce_coef = g ((1 - eps) w_t
    + eps / V sum_j w_j), g the cross-entropy term's gradient scale (dloss over the mean's
    divisor; w = 1 without class weights), z_scale the z term's (dloss over the count). So
    |dy~_j - dy_j| <= p_j (r (|a| + 2 |zl z_scale| D) + 2 |zl z_scale| D) =: A_j. The chain rule
    multiplies by J: s, or s sech(s z / c)^2, whose slope in z is at most s^2 SECH2_SLOPE / |c|,
    so |J~_j - J_j| <= K_j = min(|s|, s^2 SECH2_SLOPE e_j / |c|) (0 without a softcap) and
    |J~_j| <= min(|s|, |J_j| + K_j); hence |G~_j - G_j| <= A_j min(|s|, |J_j| + K_j) + |dy_j| K_j.
    Without z-loss, softcap and weights this is |g| p_j r |s|."""
    s = abs(float(logit_scale))
    D = (logits_err.amax(-1, keepdim=True) if y.shape[-1] else logits_err.sum(-1, keepdim=True)) * s
    p = torch.softmax(y, -1)
    r = torch.expm1(2 * D)
    if z_loss:
        lse = torch.logsumexp(y, -1, keepdim=True)
        zd = 2 * abs(float(z_loss)) * z_scale.abs() * D
        A = p * (r * ((ce_coef + 2 * float(z_loss) * lse * z_scale).abs() + zd) + zd)
    else:
        A = p * r * ce_coef.abs()
    tol = torch.nan_to_num(tol_G, nan=0.0)
    if softcap is None:
        return tol + A * s
    K = torch.clamp(s * s * SECH2_SLOPE * logits_err / abs(float(softcap)), max=s)
    return tol + A * torch.clamp(J.abs() + K, max=s) + dy.abs() * K


def lce_weight_grad_sum_bound(dtype, G, dG, h, N, V):
    """|sum_j dW_jk| for dW = G^T hidden whose exact rows of G sum to zero: G_ij within dG
    (lce_dlogits_error), times |h_ik|; the product's length-N float32 sum and G and dW rounded to
    the dtype, ((N + 1) u_c + 2 * 2**-p) sum_i |G_ij h_ik|, and dW_jk rounded to the dtype twice
    (for dloss = 1, then scaled by dloss) where it is subnormal there, 2 sigma (sigma: half the
    dtype's smallest subnormal; float16 dW of 1e-7 are subnormal); the float64 sum over the V
    rows, (V + 1) 2**-53 sum_j |dW_jk|. h: |hidden|."""
    mag = G.abs().T @ h  # (V, H): sum_i |G_ij h_ik|
    t = TABLE[dtype]
    per = dG.T @ h + ((N + 1) * t.u_c + 2 * 2.0 ** -t.precision) * mag + 2 * half_subnormal(dtype)
    return per.sum(0) + (V + 1) * 2.0 ** -53 * (mag.sum(0) + per.sum(0))


def lce_grad_bounds(dtype, G, dG, W, Hd, N, V):
    """Bounds on d hidden = G W, d weight = G^T hidden and d bias = the column sums of G, formed
    from the kernel's own d logits G~ with |G~ - G| <= dG (G the FP64 d logits at the FP64
    logits; dG: lce_dlogits_error). G~ may be rounded to the dtype before the products: 2**-p (|G| +
    dG) more, and sigma, half the dtype's smallest subnormal, where it is subnormal there; so
    dG' = dG + 2**-p (|G| + dG) + sigma. Each product is a dot product of length V (d hidden) or N
    (d weight, d bias) in any order at the compute precision, (L + 1) u_c of the sum of |terms|
    (float32 partial sums: a d weight accumulated over chunks in a 16-bit dtype is outside it),
    and may be rounded to the dtype once more before the final rounding, 2**-p of the sum of
    |terms| plus sigma (a kernel that forms the gradient for dloss = 1 and scales it by dloss
    afterwards, as liger-kernel's and the project's do). The final rounding to the dtype is added
    by the law (tolerances.total_tolerance). W, Hd: |weight|, |hidden| (float64). Returns
    (tol_dh, tol_dw, tol_db)."""
    t = TABLE[dtype]
    r = 2.0 ** -t.precision
    sigma = half_subnormal(dtype)
    dG = torch.nan_to_num(dG, nan=0.0)
    dG1 = dG + r * (G.abs() + dG) + sigma
    A = G.abs() + dG1
    tol_dh = dG1 @ W + ((V + 1) * t.u_c + r) * (A @ W) + sigma
    tol_dw = dG1.T @ Hd + ((N + 1) * t.u_c + r) * (A.T @ Hd) + sigma
    tol_db = dG1.sum(0) + ((N + 1) * t.u_c + r) * A.sum(0) + sigma
    return tol_dh, tol_dw, tol_db
