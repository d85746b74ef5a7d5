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

def _rows(x64, t, ign_idx):
    """The FP64 row terms both truths start from, of logits x64 (..., V): the probabilities p, the
    finite-row mask, H = sum_j p_j |x_j - max|, log of the row sum, lse (0 on non-finite rows),
    the ignored rows, and each row's target clamped into [0, V) (0 where ignored or V = 0)."""
    V = x64.shape[-1]
    m, fin, d, e, s = oracles.row_stats(x64)
    p = torch.where(fin[..., None], e / s[..., None], 0.0)
    H = torch.where(p > 0, p * d.abs(), 0.0).sum(-1)
    logs = torch.where(fin, torch.log(s), 0.0)
    lse = torch.where(fin, m + logs, 0.0)
    ign = t == ign_idx
    tc = torch.where(ign, 0, t).clamp(0, max(V - 1, 0)).long()
    return p, fin, H, logs, lse, ign, tc


def ce_truth(case, args, reduction=None, label_smoothing=None, depth=tolerances.depth_any, strict=False):
    """(truth, bound) in float64 for a CECase at the given (laid-out) tensors (_ce_truth); a mean
    over no counted rows is NaN (0 / 0), or exactly 0 where the target declares CE_EMPTY_MEAN = 0.0
    (case.empty_mean_zero; strategies.empty_mean_zero says why both are conventions)."""
    ref, tol = _ce_truth(case, args, reduction, label_smoothing, depth, strict)
    if declared_empty_mean(case, args, reduction):
        ref, tol = torch.zeros_like(ref), torch.zeros_like(tol)
    return ref, tol


def declared_empty_mean(case, args, reduction=None) -> bool:
    """Whether the forward's truth is the declared 0 of a mean over no counted rows
    (CE_EMPTY_MEAN = 0.0): a law that forms its own FP64 reference applies it too."""
    red = case.reduction if reduction is None else reduction
    return (case.empty_mean_zero and red == "mean" and not case.spec.is_vjp
            and not bool((args[1] != case.ignore_index).any()))


def _ce_truth(case, args, reduction=None, label_smoothing=None, depth=tolerances.depth_any, strict=False):
    """(truth, bound) in float64 for a CECase at the given (laid-out) tensors; the
    reduction and smoothing may be overridden (the forward only); depth: the reduction-depth
    model (tolerances.depth_any: default tier; tolerances.depth: strict). Not strict, the
    default tier's allowances: a 16-bit loss formed from log-probabilities rounded to the
    logits' dtype (bounds.ce_rounded_log_probs), a gradient formed from them and, smoothed, from
    the two terms' cotangents each rounded to the dtype (bounds.ce_torch_grad_allowance), and a
    reduction formed from separately reduced terms each rounded
    to the dtype (torch's smoothed mean: (1 - eps) NLL + eps SMOOTH, four more roundings of at
    most half an ulp of sum |loss_i|)."""
    x, t = args[0], args[1]
    red = case.reduction if reduction is None else reduction
    eps = case.label_smoothing if label_smoothing is None else label_smoothing
    if case.options():
        return ce_options_truth(case, args, red, eps, depth, strict)
    ign_idx = case.ignore_index
    x64 = x.detach().double()
    V = x64.shape[-1]
    dep = depth(V)
    y, fin, H, logs, lse, ign, tc = _rows(x64, t, ign_idx)
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
            row_eps = row_eps + B.ce_rounded_log_probs(case.dtype, x64, lse, xt, eps, red)
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
        eps_g = eps_g + B.ce_torch_grad_allowance(case.dtype, y, x64, lse, scale, hot, eps)
        if red == "mean" and case.dtype in (torch.float16, torch.bfloat16):
            eps_g = eps_g + B.ce_rounded_mean_scale(case.dtype, dl, (~ign).sum(), g0, hot, y, eps)
    eps_g = torch.where(ign[..., None], 0.0, eps_g)
    return ref, tolerances.total_tolerance(eps_g, ref, case.dtype, case.dtype)


def _u16(dtype, strict):
    """The unit roundoff at which the default tier lets the transformed logits, the products by
    the weights and the backward's intermediates be formed: the logits' dtype for 16-bit logits
    (torch's composition rounds c tanh(x / c), s x and its autograd intermediates to it), else
    the compute precision; strict: the compute precision (the project's kernels form them in
    float32, float64 for float64)."""
    u_c = tolerances.TABLE[dtype].u_c
    if strict or dtype not in (torch.float16, torch.bfloat16):
        return u_c
    return max(u_c, 2.0 ** -tolerances.TABLE[dtype].precision)


def ce_options_truth(case, args, red, eps, depth, strict):
    """ce_truth for a case with options (weight, z_loss, softcap, logit_scale): the FP64 oracle
    with them, and the bound of bounds.ce_options_loss_bound / ce_options_grad_bound at the
    transformed logits y, at the compute precision and at the oracle's (as ce_truth's), y formed
    at _u16's precision. The mean divides the cross-entropy terms by sum w[t] and the z terms by
    the count (oracles.ce.divisors): each part's bound is divided by its divisor, plus the
    divisor's own error times the part (the weights are exact; their sum over n rows is exact in
    float32 for the drawn values, multiples of 1/4 summing below 2**21; 16-bit default: one
    rounding of it to the dtype, torch's total_weight). Default tier, 16-bit logits: the
    log-probabilities rounded to the dtype (bounds.ce_rounded_log_probs at y, times the largest
    weight) and the weighted products rounded (2 ulps of each row's terms), the reduced result formed
    through the dtype (2 ulps of it), the backward's scale rounded (3 ulps of the gradient, as
    bounds.ce_rounded_mean_scale) and the gradient's roundings
    (bounds.ce_options_torch_grad_allowance)."""
    x, t = args[0], args[1]
    opts = case.oracle_options(x.device)
    w0, z, c, s = opts["weight"], float(opts["z_loss"]), opts["softcap"], float(opts["logit_scale"])
    ign_idx = case.ignore_index
    x64 = x.detach().double()
    y = oracles.ce.transform(x64, c, s)
    V = y.shape[-1]
    dep = depth(V)
    p, fin, H, logs, lse, ign, tc = _rows(y, t, ign_idx)
    w = w0 if w0 is not None else torch.ones(V, dtype=torch.float64, device=x64.device)
    wt = torch.where(ign, 0.0, w[tc]) if V else torch.zeros(t.shape, dtype=torch.float64, device=x64.device)
    yt = torch.gather(y, -1, tc[..., None])[..., 0] if V else torch.zeros(t.shape, dtype=torch.float64, device=x64.device)
    yt = torch.where(torch.isfinite(yt), yt, 0.0)
    uy = _u16(case.dtype, strict)
    dy = B.transformed_logit_error(uy, x64, c, s, y)
    dyt = torch.gather(dy, -1, tc[..., None])[..., 0] if V else torch.zeros(t.shape, dtype=torch.float64, device=x64.device)
    units = (tolerances.TABLE[case.dtype].u_c, tolerances.U_ORACLE)
    lse_err = tuple(B.ce_lse_error(u, lse, H, dep, logs) for u in units)
    sixteen = not strict and case.dtype in (torch.float16, torch.bfloat16)
    if not case.spec.is_vjp:
        ref = oracles.ce.cross_entropy(x64, t, ign_idx, red, eps, **opts)
        ce_rows, z_rows = oracles.ce.loss_parts(x64, t, ign_idx, eps, **opts)
        z_rows = torch.zeros_like(ce_rows) if z_rows is None else z_rows
        row_eps = sum(B.ce_options_loss_bound(u, lse, le, y, yt, dy if u != tolerances.U_ORACLE else 0 * dy,
                                              dyt if u != tolerances.U_ORACLE else 0 * dyt, w, wt, eps, z, fin)
                      for u, le in zip(units, lse_err))
        if sixteen:
            W = torch.maximum(wt.abs(), w.abs().amax() if V else torch.zeros((), dtype=torch.float64, device=x64.device))
            row_eps = row_eps + W * B.ce_rounded_log_probs(case.dtype, y, lse, yt, eps, red)
            ulp2 = 2 * tolerances.ulp(torch.nan_to_num(ce_rows.abs(), posinf=0.0), case.dtype)
            row_eps = row_eps + ulp2
        row_eps = torch.where(ign, 0.0, row_eps)
        n_rows = x64[..., 0].numel() if V else t.numel()
        u_rows = None if strict else tolerances.TABLE[case.dtype].u_c * tolerances.depth_any(n_rows)
        rel = (n_rows + 1) * tolerances.U_ORACLE + (0.0 if u_rows is None else u_rows)
        fin_abs = lambda r: torch.where(torch.isfinite(r), r.abs(), 0.0)  # noqa: E731
        if red == "none":
            eps_out = row_eps
        elif red == "sum":
            eps_out = row_eps.sum() + rel * (fin_abs(ce_rows).sum() + fin_abs(z_rows).sum())
        else:
            dw, count = oracles.ce.divisors(t, ign_idx, w0)
            dw_err = (tolerances.ulp(dw.abs(), case.dtype) / 2 if sixteen else 0.0)
            # the row bounds hold each row's whole error, the cross-entropy term's over sum w[t] and
            # the z term's over the count: at most sum_i row_eps_i max(1 / |sum w[t]|, 1 / count)
            inv = torch.maximum(1 / dw.abs(), 1 / count)
            ce_part = ce_rows.sum() / dw
            eps_out = torch.nan_to_num(row_eps.sum() * inv + rel * fin_abs(ce_rows).sum() / dw.abs()
                                       + rel * fin_abs(z_rows).sum() / count + fin_abs(ce_part) * dw_err / dw.abs(),
                                       nan=math.inf)
        if sixteen and red != "none":
            eps_out = eps_out + 2 * tolerances.ulp(torch.nan_to_num(ref.abs(), posinf=0.0), case.dtype)
        return ref, tolerances.total_tolerance(eps_out, ref, case.dtype, case.dtype)
    dl = args[2]
    ref = oracles.ce.cross_entropy_backward(x64, t, dl, ign_idx, red, eps, **opts)
    sc = oracles.ce.grad_scale(t, dl, ign_idx, red, w0)
    zsc = oracles.ce.grad_scale(t, dl, ign_idx, red, w0, for_z=True)
    sc = torch.nan_to_num(sc, nan=0.0)  # a NaN mean (zero total weight) is NaN in ref: judged as NaN
    hot = torch.zeros_like(p).scatter_(-1, tc[..., None], 1.0) if V else p
    J = oracles.ce.transform_grad(x64, c, s)
    dxy = torch.where(p > 0, (y - lse[..., None]).abs(), 0.0)
    eps_g = 0.0
    for u, le in zip(units, lse_err):
        yerr = dy if u != tolerances.U_ORACLE else 0 * dy
        dJ = B.transform_grad_error(uy if u != tolerances.U_ORACLE else u, x64, c, s)
        tiny = tolerances.TABLE[case.dtype].tiny_c if u != tolerances.U_ORACLE else 0.0
        eps_g = eps_g + B.ce_options_grad_bound(u, p, y, lse, le, yerr, J, dJ, w, wt, eps, z, sc, zsc, hot, dxy, tiny)
    if sixteen:
        W = torch.maximum(wt.abs(), w.abs().amax() if V else torch.zeros((), dtype=torch.float64, device=x64.device))[..., None]
        eps_g = eps_g + B.ce_options_torch_grad_allowance(case.dtype, ref, p, dxy, J, W, sc, hot, eps)
    eps_g = torch.where(ign[..., None], 0.0, eps_g)
    return ref, tolerances.total_tolerance(eps_g, ref, case.dtype, case.dtype)


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
      are in range too, and so are the smoothing sums (torch reduces the rows' sums before it
      scales them by eps / V: two bf16 rows [0, -3.39e38], eps = 0.1, mean: torch gives inf,
      the exact loss is 1.69e37).
    * a label_smoothing below float32's smallest normal with 16/32-bit logits: a float32 kernel
      holds it as 0, and 0 * inf is NaN where the exact loss is +inf.
    * (in the bound, not here) the gradient formed from the forward's log-probabilities rounded
      to the logits' dtype (autograd saves outputs in their dtype): bounds.ce_torch_grad_allowance."""
    return _terms_in_range(case, args, out_shape)


def _terms_in_range(case, args, out_shape, options=False):
    """ce_default_mask's rules, at the logits x or, with options, at y = transform(x) with the
    row's weights (W, at least 1) and its z term (ce_options_mask)."""
    x, t = args[0].detach().double(), args[1]
    ign = t == case.ignore_index
    if case.spec.is_vjp:
        bad_rows = ign & ~torch.isfinite(x).all(-1)
        return None if not bool(bad_rows.any()) else ~bad_rows[..., None].expand(out_shape)
    eps = case.label_smoothing
    if 0 < eps < torch.finfo(torch.float32).tiny and case.dtype != torch.float64:
        # a smoothing below float32's range is 0 to a float32 kernel (torch's too), and 0 times an
        # infinite lse - mean(x) is NaN where the exact term is +inf: the strict tier's
        return torch.zeros(out_shape, dtype=torch.bool, device=x.device)
    V = x.shape[-1]
    if V == 0:
        return None
    y, W, z = x, 1.0, 0.0
    if options:
        y = oracles.ce.transform(x, case.softcap, case.logit_scale)
        w = case.weight_tensor(x.device, torch.float64)
        W, z = (1.0 if w is None else max(1.0, float(w.abs().max()))), float(case.z_loss)
    fy = torch.where(torch.isfinite(y), y.abs(), 0.0)
    lse = oracles.logsumexp(torch.where(torch.isfinite(y), y, -math.inf)).abs().nan_to_num(0.0, posinf=0.0, neginf=0.0)
    tc = torch.where(ign, 0, t).clamp(0, V - 1).long()
    yt = torch.gather(fy, -1, tc[..., None])[..., 0]
    need = W * (lse + yt + eps * (lse + (fy / V).sum(-1)))
    if z:
        need = need + z * lse * lse
    need = torch.where(ign, 0.0, need)
    big = torch.finfo(lse_dtype(case.dtype)).max
    rows_in_range = 2 * need <= big
    smooth = torch.zeros_like(need)
    if eps > 0:  # torch's smoothing term: the sum over the classes of |y_j - lse|, then eps / V
        # the V terms' and their sum's roundings, any order
        grow = 1 + (V + 1) * tolerances.TABLE[case.dtype].u_c
        smooth = torch.where(ign, 0.0, W * grow * (V * lse + fy.sum(-1)))
        rows_in_range &= smooth <= big
    if case.reduction == "none":  # each row's loss on its own
        return None if bool(rows_in_range.all()) else rows_in_range.reshape(out_shape)
    # and torch reduces the rows' smoothing terms before the factor eps / V: their sum in range too
    in_range = bool(rows_in_range.all()) and bool(2 * need.sum() <= big) and bool(smooth.sum() <= big)
    return None if in_range else torch.zeros(out_shape, dtype=torch.bool, device=x.device)


def scaled_in_range(case, args, out_shape, strict=False):
    """The outputs whose row's scaled logits s x stay within range where no softcap follows (bool,
    None for all): the contract takes y = s x within the compute precision's range (s x of
    float32 logits of 3e38 with s = 2 is +inf there, its row NaN, where the float64 truth is
    finite; under a softcap an overflowed s x is +-inf and c tanh of it +-c, the exact value);
    the default tier within the logits' dtype's (torch's composition forms s x in it: float16
    65504 x 2 is +inf)."""
    if case.softcap is not None or case.logit_scale == 1.0:
        return None
    x = args[0].detach().double()
    big = torch.finfo(lse_dtype(case.dtype) if strict else case.dtype).max
    over = (torch.isfinite(x) & ((x * case.logit_scale).abs() > big)).any(-1)
    if not bool(over.any()):
        return None
    if case.spec.is_vjp:
        return ~over[..., None].expand(out_shape)
    return ~over.reshape(out_shape) if case.reduction == "none" else torch.zeros(out_shape, dtype=torch.bool, device=x.device)


def ce_options_mask(case, args, out_shape):
    """ce_default_mask for a case with options, at the transformed logits y = transform(x): the
    ignored rows of non-finite logits (backward), and the losses whose terms overflow the compute
    precision, the row's weights and its z term included (in range: every counted row has
    2 (W (|lse| + |y_t| + eps (|lse| + mean |y_j|)) + z lse^2) <= finfo.max, and the rows' sum
    too; W the larger of 1 and the largest weight: torch and liger-kernel form lse - y_t and the
    smoothing sum before they multiply by a weight, so a weight below 1 does not keep those in
    range; z lse^2 reaches float32's range at |lse| ~ 1.8e19 / sqrt(z)). With smoothing, the rows'
    unscaled smoothing sums and their sum over the rows (torch's order, ce_default_mask) too."""
    return _both(scaled_in_range(case, args, out_shape), _terms_in_range(case, args, out_shape, options=True))


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


def loss_also(case, tol, strict: bool) -> tuple:
    """The further dtype a loss may come back in (OutputTruth.also): float32 for 16-bit inputs, in
    the default tier, judged by the 16-bit loss's own bound (the computation at float32 plus the
    final rounding to 16 bits; a float32 loss skips only the rounding). PyTorch returns the loss
    in the logits' dtype; fused kernels keep their per-row losses in float32 and return them so
    (liger-kernel's fused linear cross-entropy), and a float32 loss is the more accurate one: a
    convention, not a bug, as neither PyTorch's maintainers nor a kernel's authors would call it
    one. The strict tier keeps the contract's dtype; gradients keep the logits' dtype."""
    if strict or case.spec.is_vjp or case.dtype not in (torch.float16, torch.bfloat16):
        return ()
    return ((torch.float32, tol),)


def cross_entropy_truth(case, args, strict=False) -> Truth:
    """The loss (forward) or gradient (backward) against the FP64 oracle: the bound for any
    summation order on the outputs ce_default_mask covers, and for the gradient's rows whose exact
    result is NaN, on the elements nan_rows_keep_their_nan judges (default); the bound at the
    project's reduction depth on every output (strict)."""
    ref, tol = ce_truth(case, args, depth=tolerances.depth if strict else tolerances.depth_any, strict=strict)
    if strict:
        only = scaled_in_range(case, args, ref.shape, strict=True) if case.options() else None
        return Truth((OutputTruth("out", ref, tol, case.dtype, only),))
    if case.options():
        only = ce_options_mask(case, args, ref.shape)
    else:
        only = ce_default_mask(case, args, ref.shape)
    if case.spec.is_vjp:
        y = oracles.ce.transform(args[0], case.softcap, case.logit_scale) if case.options() else args[0]
        only = _both(only, nan_rows_keep_their_nan(y, ref))
    return Truth((OutputTruth("out", ref, tol, case.dtype, only, also=loss_also(case, tol, strict)),))


def cross_entropy_grad_truth(case, args, g, y):
    """grad_truth of cross_entropy: the explicit backward's default-tier truth for the cotangent g
    (cross_entropy_truth), so autograd's gradient is judged as the backward's is: the FP64
    oracle's gradient and bound, on the elements ce_default_mask (ignored rows of NaN / inf
    logits: NaN or 0) and nan_rows_keep_their_nan judge."""
    bwd = dataclasses.replace(case, op=vjp_of(case.op).name)
    e = cross_entropy_truth(bwd, [args[0].detach(), args[1], g])[0]
    return e.value, e.tol, e.only
