"""The FP64 truth of cross-entropy: the loss or its gradient from the same rounded inputs the
target saw, its bound (bounds.py), and the elements the default tier judges."""
from __future__ import annotations

import dataclasses
import math

import torch

from softmax_properties import oracles

from ... import tolerances
from ...spec import OutputTruth, Truth, lse_dtype, vjp_of
from . import bounds as B


# ----------------------------------------------------------------------------------------------
# cross-entropy (CECase: logits, class-index targets, options, and for the backward dloss)
# ----------------------------------------------------------------------------------------------
def ce_truth(case, args, reduction=None, label_smoothing=None, depth=tolerances.depth_any, strict=False):
    """(reference, tolerance) in float64 for a CECase at the given (laid-out) tensors; the
    reduction and smoothing may be overridden (the forward only); depth: the reduction-depth
    model (tolerances.depth_any: default tier; tolerances.depth: strict). Not strict, the
    default tier's allowances: a 16-bit loss formed from log-probabilities rounded to the
    logits' dtype (_rounded_log_probs), a gradient formed from them (torch's autograd saves
    log_softmax's output in the dtype: z_j off by half an ulp, 2**-precision |z_j|, moves p_j by
    p_j expm1(2**-precision |z_j|)), a smoothed gradient formed from the two terms' cotangents,
    each rounded to the dtype, and a reduction formed from separately reduced terms each rounded
    to the dtype (torch's smoothed mean: (1 - eps) NLL + eps SMOOTH, four more roundings of at
    most half an ulp of sum |loss_i|)."""
    x, t = args[0], args[1]
    red = case.reduction if reduction is None else reduction
    eps = case.label_smoothing if label_smoothing is None else label_smoothing
    ign_idx = case.ignore_index
    x64 = x.detach().double()
    V = x64.shape[-1]
    dep = depth(V)
    m, fin, d, e, s = oracles.row_stats(x64)
    y = torch.where(fin[..., None], e / s[..., None], 0.0)
    H = torch.where(y > 0, y * d.abs(), 0.0).sum(-1)
    logs = torch.where(fin, torch.log(s), 0.0)
    lse = torch.where(fin, m + logs, 0.0)
    ign = t == ign_idx
    tc = torch.where(ign, 0, t).clamp(0, V - 1).long()
    if not case.spec.is_vjp:
        xt = torch.gather(x64, -1, tc[..., None])[..., 0]
        xt = torch.where(torch.isfinite(xt), xt, 0.0)
        # the mean of |x_j| as a sum of |x_j| / V, which cannot overflow (a mean of finfo.max
        # formed as sum / V is inf, and eps * inf with eps = 0 made the whole bound NaN)
        mean_abs = (torch.where(torch.isfinite(x64), x64.abs(), 0.0) / V).sum(-1)
        rows = oracles.ce.loss_rows(x64, t, ign_idx, eps)
        row_eps = B.ce_loss_bound(case.dtype, lse, H, dep, logs, xt, mean_abs,
                                  torch.where(torch.isfinite(rows), rows, 0.0), eps)
        if not strict and case.dtype in (torch.float16, torch.bfloat16):
            row_eps = row_eps + _rounded_log_probs(case.dtype, x64, lse, xt, eps, red)
        row_eps = torch.where(ign, 0.0, row_eps)
        ref = oracles.ce.cross_entropy(x64, t, ign_idx, red, eps)
        count = (~ign).sum()
        rows_abs = torch.where(torch.isfinite(rows), rows.abs(), 0.0)
        n_rows = x64[..., 0].numel()
        # the sum over rows: strict, the project's float64 sum of its float64 row losses; default,
        # any order at the compute precision (depth_any of the row count: a float32 split
        # reduction over 65535 rows of loss log 2 errs by about 86 u, within depth_any's 65535 u)
        u_rows = None if strict else tolerances.TABLE[case.dtype].u_c * tolerances.depth_any(n_rows)
        eps_out = B.ce_reduced_bound(row_eps, rows_abs, n_rows, count, red, u_rows)
        if not strict and red != "none" and eps > 0:
            extra = 2 * tolerances.ulp(rows_abs.sum().reshape(()), case.dtype)
            eps_out = eps_out + (extra / count if red == "mean" else extra)
        return ref, tolerances.total_tolerance(eps_out, ref, case.dtype, case.dtype)
    dl = args[2]
    ref = oracles.ce.cross_entropy_backward(x64, t, dl, ign_idx, red, eps)
    scale = oracles.ce.grad_scale(t, dl, ign_idx, red)
    hot = torch.zeros_like(y).scatter_(-1, tc[..., None], 1.0)
    g0 = y - (1 - eps) * hot - eps / V
    units = (tolerances.TABLE[case.dtype].u_c, tolerances.U_ORACLE)
    lse_err = tuple(B.ce_lse_error(u, lse, H, dep, logs) for u in units)
    eps_g = B.ce_grad_bound(case.dtype, y, x64, lse_err, lse, g0, scale, hot, eps, V)
    if not strict:
        u = 2.0 ** -tolerances.TABLE[case.dtype].precision
        zabs = torch.where(y > 0, (x64 - lse[..., None]).abs(), 0.0)
        rnd = y * torch.expm1(u * zabs) * scale.abs()[..., None]
        eps_g = eps_g + torch.nan_to_num(rnd, nan=0.0)
        if eps > 0:
            # torch's smoothed loss (1 - eps) NLL + eps SMOOTH sends log_softmax's backward a
            # cotangent g_j = -(1 - eps) s [j = t] - (eps / V) s formed in the dtype: each term
            # rounded and their sum rounded. A rounding to the dtype errs by at most u |v| + eta
            # (eta: half the subnormal spacing; (eps / V) |s| is subnormal in float16 for V in the
            # thousands), so |dg_j| <= 2u ((1 - eps) |s| [j = t] + (eps / V) |s|) + (2 + [j = t]) eta
            # (the second term, the sum, and at j = t the first); dx_j = g_j - p_j sum_k g_k
            # carries dg_j + p_j sum_k |dg_k|
            terms = ((1 - eps) * hot + eps / V) * scale.abs()[..., None]
            eta = 0.5 * float(tolerances.ulp(torch.zeros(()), case.dtype))
            dg = 2 * u * terms + (2 + hot) * eta
            eps_g = eps_g + dg + y * dg.sum(-1, keepdim=True)
        if red == "mean" and case.dtype in (torch.float16, torch.bfloat16):
            eps_g = eps_g + _rounded_mean_scale(case.dtype, dl, (~ign).sum(), g0, hot, y, eps)
    eps_g = torch.where(ign[..., None], 0.0, eps_g)
    return ref, tolerances.total_tolerance(eps_g, ref, case.dtype, case.dtype)


def _rounded_mean_scale(dtype, dloss, count, g0, hot, y, eps):
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
    err = (sc - s).abs() + 0.5 * tolerances.ulp(sc, dtype)
    err = torch.nan_to_num(err, nan=0.0, posinf=0.0)
    if eps > 0:
        dg = err * ((1 - eps) * hot + eps / g0.shape[-1])
        return dg + y * dg.sum(-1, keepdim=True)
    return err * g0.abs()  # ignored rows: ce_truth zeroes their bound


def _rounded_log_probs(dtype, x64, lse, xt, eps, red):
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
        return 0.5 * tolerances.ulp(v.abs() * (1 + 2.0**-16), dtype)
    V = x64.shape[-1]
    zt = (lse - xt).abs()
    # |z_j| over the finite logits (a -inf logit makes the smoothed loss itself +inf)
    z = torch.where(torch.isfinite(x64), (x64 - lse[..., None]).abs(), 0.0)
    r = (1 - eps) * h(zt) + (eps * (h(z) / V).sum(-1) if eps > 0 else 0.0)
    if red == "none" and eps > 0:
        zsum = z.sum(-1)
        r = r + h((1 - eps) * zt) + (eps / V) * h(zsum) + h(eps * zsum / V)
    return torch.nan_to_num(r, nan=0.0)


def ce_default_mask(case, args, out_shape):
    """The outputs the default tier judges (bool, broadcast to the output), None for all. Two
    behaviours of a correct cross-entropy are left to the strict tier:
    * an ignored row holding NaN or +-inf logits: torch's gradient there is NaN (its
      log_softmax backward forms 0 * NaN), this project's is exactly 0 (oracles/semantics.py
      CE_SEMANTICS, its one deliberate difference from torch); either is accepted there.
    * a row loss (reduction='none'), or a loss reduced over rows, whose terms overflow the compute
      precision (float32 for 16/32-bit logits): lse - x_t reaches 2 finfo.max for logits of
      +-finfo.max, so a float32 row loss is inf and so is torch's mean, where the exact mean may be
      finite; a smoothed row sums lse - x_j over the classes (float32 [finfo.max, 0, 0], eps = 0.1:
      torch eager and compiled give inf, the exact loss is 2.27e37); and a mean formed as a
      float32 sum divided by the count overflows where the sum of the row losses does (63 rows of
      loss 1.7e37, smoothed logits [0, -finfo.max]: torch.compile's mean is inf, the exact
      1.7e37). Finite there is a robustness guarantee. In range: every row has
      2 (|lse| + |x_t| + eps (|lse| + mean |x_j|)) <= finfo.max of the compute precision, the
      textbook formula's terms with the factor 2 covering their rounding, and, smoothed, also
      (1 + (V + 1) u) (V |lse| + sum |x_j|) <= finfo.max (the sum over the classes before its
      scale eps / V, with the roundings of its terms and of the sum in any order; u the compute
      precision's unit roundoff); and the first terms summed over the rows that are not ignored
      are in range too.
    * a label_smoothing below float32's smallest normal with 16/32-bit logits: a float32 kernel
      holds it as 0, and 0 * inf is NaN where the exact loss is +inf.
    * (in the bound, not here) the gradient formed from the forward's log-probabilities rounded
      to the logits' dtype (autograd saves outputs in their dtype): ce_truth's rounded_forward."""
    x, t = args[0].detach().double(), args[1]
    ign = t == case.ignore_index
    if case.spec.is_vjp:
        bad_rows = ign & ~torch.isfinite(x).all(-1)
        return None if not bool(bad_rows.any()) else ~bad_rows[..., None].expand(out_shape)
    if 0 < case.label_smoothing < torch.finfo(torch.float32).tiny and case.dtype != torch.float64:
        # a smoothing below float32's range is 0 to a float32 kernel (torch's too), and 0 times an
        # infinite lse - mean(x) is NaN where the exact term is +inf: the strict tier's
        return torch.zeros(out_shape, dtype=torch.bool, device=x.device)
    if x.shape[-1] == 0:
        return None
    big = torch.finfo(lse_dtype(case.dtype)).max
    fx = torch.where(torch.isfinite(x), x.abs(), 0.0)
    lse = oracles.logsumexp(torch.where(torch.isfinite(x), x, -math.inf)).abs().nan_to_num(0.0, posinf=0.0, neginf=0.0)
    tc = torch.where(ign, 0, t).clamp(0, x.shape[-1] - 1).long()
    xt = torch.gather(fx, -1, tc[..., None])[..., 0]
    need = torch.where(ign, 0.0, lse + xt + case.label_smoothing * (lse + (fx / x.shape[-1]).sum(-1)))
    rows_in_range = 2 * need <= big
    if case.label_smoothing > 0:  # torch's smoothing term: the sum over the classes of |x_j - lse|, then eps / V
        # the V terms' and their sum's roundings, any order
        grow = 1 + (x.shape[-1] + 1) * tolerances.TABLE[case.dtype].u_c
        rows_in_range &= ign | (grow * (x.shape[-1] * lse + fx.sum(-1)) <= big)
    if case.reduction == "none":  # each row's loss on its own
        return None if bool(rows_in_range.all()) else rows_in_range.reshape(out_shape)
    in_range = bool(rows_in_range.all()) and bool(2 * need.sum() <= big)
    return None if in_range else torch.zeros(out_shape, dtype=torch.bool, device=x.device)


def nan_rows_keep_their_nan(x, ref):
    """The default tier's rule for an output row whose exact result is NaN (a row of a gradient
    with one element per input element): the NaN must not be scrubbed away, so the row's elements
    at the inputs that poison it (NaN and +inf; in a row with neither, e.g. all -inf, every
    element) are judged, and must be NaN; its other elements are not judged. Returns the bool mask
    of the judged elements (ref's shape), None for all.
    A correct cross-entropy whose gradient is formed as exp(x - lse) - onehot, the design of fused
    cross-entropy kernels, gives float32 logits [inf, 0], target 0, the gradient [nan, 0]: the
    +inf logit's exp(inf - inf) is NaN, the finite one's exp(0 - inf) is 0, while the exact row is
    NaN throughout (torch's autograd through log_softmax gives [nan, nan]). Both are correct
    enough for any user: the row is visibly poisoned either way. A kernel that turns the whole
    row finite (a NaN scrubbed, a fully masked row zeroed) hides the poison and fails. The strict
    tier keeps the oracle's whole-row NaN."""
    if ref.ndim == 0 or ref.shape[-1] == 0:
        return None
    nan_row = torch.isnan(ref).all(-1, keepdim=True)
    if not bool(nan_row.any()):
        return None
    x64 = x.detach().to(torch.float64)
    poison = torch.isnan(x64) | (x64 == math.inf)
    poison = (poison | ~poison.any(-1, keepdim=True)).expand(ref.shape)
    judged = ~nan_row | poison
    return None if bool(judged.all()) else judged


def _both(a, b):
    """The elements two judged-element masks both judge (None: all)."""
    return b if a is None else a if b is None else a & b


def cross_entropy_truth(case, args, strict=False) -> Truth:
    """The loss (forward) or gradient (backward) against the FP64 oracle: the bound for any
    summation order on the outputs ce_default_mask covers, and for the gradient's rows whose exact
    result is NaN, on the elements nan_rows_keep_their_nan judges (default); the bound at the
    project's reduction depth on every output (strict)."""
    ref, tol = ce_truth(case, args, depth=tolerances.depth if strict else tolerances.depth_any, strict=strict)
    if strict:
        return Truth((OutputTruth("out", ref, tol, case.dtype),))
    only = ce_default_mask(case, args, ref.shape)
    if case.spec.is_vjp:
        only = _both(only, nan_rows_keep_their_nan(args[0], ref))
    return Truth((OutputTruth("out", ref, tol, case.dtype, only),))


def cross_entropy_grad_truth(case, args, g, y):
    """grad_truth of cross_entropy: the explicit backward's default-tier truth for the cotangent g
    (cross_entropy_truth), so autograd's gradient is judged as the backward's is: the FP64
    oracle's gradient and bound, on the elements ce_default_mask (ignored rows of NaN / inf
    logits: NaN or 0) and nan_rows_keep_their_nan judge."""
    bwd = dataclasses.replace(case, op=vjp_of(case.op).name)
    e = cross_entropy_truth(bwd, [args[0].detach(), args[1], g])[0]
    return e.ref, e.tol, e.only
