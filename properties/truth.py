"""FP64 truth and derived bounds, per op family: what each output of a call should be, computed in
float64 from the same rounded inputs the target saw, and how far a correct kernel may be from it
(each bound is derived in properties/tolerances.py). The op specs (properties/ops.py) name these
functions; the laws (properties/invariants/) ask the specs."""
from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import torch

from softmax_properties import oracles

from . import tolerances as T
from .case import tree_depth, tree_leaves
from .spec import Expected, Truth, lookup, lse_dtype, vjp_of


def reference(op: str, dtype, args, depth=T.depth_any, returned=None, **options):
    """(reference, tolerance) in float64 for a single-output op of the softmax family at the given
    (laid-out) arguments. depth: the reduction-depth model of the bound (tolerances.depth_any, the
    default tier's any summation order, or tolerances.depth, the strict tier's). returned: the
    dtype the target returned the output in (returned_bound). options: the case's keyword
    options, for ops that take any."""
    spec = lookup(op)
    ref, tol = spec.reference(dtype, args, depth, **options)
    return ref, returned_bound(spec, dtype, ref, tol, returned)


def returned_bound(spec, dtype, ref, tol, returned):
    """tol, the bound of spec's output at spec.out_dtype(dtype), for an output the target
    returned in dtype `returned`: where that is another dtype the default tier accepts
    (spec.default_out_dtypes: logsumexp in the input's dtype, as torch.logsumexp returns it),
    tol plus the rounding to it (tolerances.rerounded: the value of a correct kernel, at the
    contract's dtype or before its final rounding, rounded once more); else tol itself (a dtype
    the tier does not accept is the structure check's failure, not the bound's)."""
    if (returned is None or returned == spec.out_dtype(dtype) or spec.default_out_dtypes is None
            or returned not in spec.default_out_dtypes(dtype)):
        return tol
    return T.rerounded(tol, ref, returned)


# ----------------------------------------------------------------------------------------------
# the softmax family: softmax, log_softmax, logsumexp and the explicit VJPs
# ----------------------------------------------------------------------------------------------
class RowTerms(NamedTuple):
    """What the forward bounds need of each row of x (float64): its max m, x - m as d, the
    softmax-weighted spread H = sum_i y_i |d_i|, and log s (s = sum exp(d))."""

    m: torch.Tensor
    d: torch.Tensor
    H: torch.Tensor
    logs: torch.Tensor


def row_terms(x64: torch.Tensor) -> RowTerms:
    m, fin, d, e, s = oracles.row_stats(x64)
    y = torch.where(fin[..., None], e / s[..., None], 0.0)
    H = torch.where(y > 0, y * d.abs(), 0.0).sum(-1)
    return RowTerms(m, d, H, torch.log(s))


def forward_reference(oracle, eps, out_dtype=None):
    """The ``reference`` of a forward op of the softmax family: oracle(x) and the bound
    eps(dtype, rows, dep, ref) (rows: row_terms(x), dep: the reduction depth of the row length)
    plus the final rounding to the output dtype (default: the input's)."""
    def ref_and_tol(dtype, args, depth=T.depth_any):
        x = args[0].detach().to(torch.float64)
        ref = oracle(x)
        e = eps(dtype, row_terms(x), depth(x.shape[-1]), ref)
        return ref, T.total_tolerance(e, ref, (out_dtype or (lambda d: d))(dtype), dtype)
    return ref_and_tol


softmax_reference = forward_reference(oracles.softmax, lambda dt, r, dep, y: T.softmax_bound(dt, r.d, r.H, dep, y))
log_softmax_reference = forward_reference(
    oracles.log_softmax, lambda dt, r, dep, z: T.log_softmax_bound(dt, r.d, r.H, dep, r.logs, z))
logsumexp_reference = forward_reference(
    oracles.logsumexp, lambda dt, r, dep, lse: T.logsumexp_bound(dt, r.m, r.H, dep, r.logs, lse), lse_dtype)


def softmax_backward_reference(dtype, args, depth=T.depth_any):
    y, g = (t.detach().to(torch.float64) for t in args)
    D = y.shape[-1]
    ref = oracles.softmax_backward(y, g)
    dot = (y * g).sum(-1)
    eps = T.softmax_backward_bound(dtype, y, g, dot, (y * g).abs().sum(-1), depth(D), ref, D)
    return ref, T.total_tolerance(eps, ref, dtype, dtype)


def log_softmax_backward_reference(dtype, args, depth=T.depth_any):
    z, g = (t.detach().to(torch.float64) for t in args)
    D = z.shape[-1]
    ref = oracles.log_softmax_backward(z, g)
    # the sums in units of 2**64, so that they cannot overflow (exact scaling; the dropped tail
    # below 2**-1010 is far under the FTZ floor of the tolerance)
    gs = g * 2.0**-64
    eps = T.log_softmax_backward_bound(dtype, z, g, gs.sum(-1), gs.abs().sum(-1), depth(D), ref, D, 2.0**64)
    return ref, T.total_tolerance(eps, ref, dtype, dtype)


def vjp_rows(case, args, strict):
    """The rows a VJP law covers: all of them in the strict tier, those of ordinary magnitude
    (tolerances.vjp_in_range) in the default tier; None (every row) for forward ops."""
    if strict or not case.spec.is_vjp:
        return None
    return T.vjp_in_range(case.op, args[0].double(), args[1].double(), case.dtype)


def logits_truth(case, args, strict=False) -> Truth:
    """The Truth of a single-output op of the softmax family: its reference at the tier's depth
    (strict: tolerances.depth), judged on the rows vjp_rows covers; in the default tier, in any
    output dtype the spec accepts there (default_out_dtypes), at the precision returned."""
    spec = case.spec
    ref, tol = spec.reference(case.dtype, args, T.depth if strict else T.depth_any, **case.kwargs())
    rows = vjp_rows(case, args, strict)
    out_dtype = spec.out_dtype(case.dtype)
    also = () if strict or spec.default_out_dtypes is None else tuple(
        (d, returned_bound(spec, case.dtype, ref, tol, d))
        for d in spec.default_out_dtypes(case.dtype) if d != out_dtype)
    return Truth((Expected("out", ref, tol, out_dtype, None if rows is None else rows[..., None], also=also),))


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


def normalized_grad_truth(case, args, g, y):
    """grad_truth of softmax and log_softmax: the FP64 autograd VJP of torch's float64 op at x =
    args[0] (the spec's torch_ref) for the cotangent g, and its bound: the explicit VJP's bound at
    the output y the kernel saved (reference), plus how far the VJP moves between y and the exact
    forward: rounded_forward_effect with |dy| within the forward's bound at x (each output of a
    correct kernel is) and twice the float64 forward's."""
    x = args[0]
    x64 = x.detach().double().requires_grad_(True)
    out64 = case.spec.torch_ref(x64)
    (ref,) = torch.autograd.grad(out64, x64, g.double())
    vjp = vjp_of(case.op).name
    ref_y, tol = reference(vjp, case.dtype, [y.detach(), g])
    # where the output the kernel saved makes the VJP NaN and the exact VJP is not (its forward is
    # wrong there: matches_oracle's failure), the VJP's bound at y says nothing: unbounded
    tol = torch.where(torch.isnan(ref_y) & ~torch.isnan(ref), math.inf, tol)
    _, tol_f = reference(case.op, case.dtype, [x.detach()])
    _, fwd64 = reference(case.op, torch.float64, [x.detach()])
    y64 = out64.detach()
    du = torch.where(torch.isfinite(y64), tol_f + 2 * torch.nan_to_num(fwd64, nan=0.0), 0.0)
    extra = torch.nan_to_num(rounded_forward_effect(vjp, y64, g.double(), du), nan=0.0)
    return ref, tol + extra, None


def logsumexp_grad_truth(case, args, g, y):
    """grad_truth of logsumexp: dx = softmax(x) g, the FP64 oracle's softmax times g (torch's
    float64 backward forms exp(x - lse) with lse rounded to float64, which at |x| near 3e38 is off
    by far more than 1: for x = [max, max] it gives [1, 1] g), with softmax within its bound and
    the product rounded twice (2 u |dx|)."""
    x = args[0]
    x64 = x.detach().double()
    ref = oracles.softmax(x64) * g.double()[..., None]
    _, tol_p = reference("softmax", case.dtype, [x.detach()])
    # a backward that forms exp(x - lse) from the forward's saved output (autograd saves it,
    # rounded to its dtype: torch's does) moves dx by |dx| expm1(|lse error|), the error
    # within logsumexp's own bound at the dtype it was returned in (returned_bound: a bfloat16
    # lse carries its rounding to bfloat16); huge enough at |x| ~ finfo.max to cover anything there
    _, tol_l = reference("logsumexp", case.dtype, [x.detach()], returned=y.dtype)
    saved = ref.abs() * torch.expm1(tol_l.clamp_max(700))[..., None]
    eps = g.double().abs()[..., None] * tol_p + 2 * T.TABLE[case.dtype].u_c * ref.abs() + torch.nan_to_num(saved, nan=0.0)
    return ref, T.total_tolerance(eps, ref, case.dtype, case.dtype), None


# ----------------------------------------------------------------------------------------------
# merges of (x, lse) states: softmax_merge, attention_merge (MergeCase), merge_states (StatesCase)
# ----------------------------------------------------------------------------------------------
def step_truth(case, xa, la, xb, lb):
    """FP64 merge of one step's actual inputs and its single-step tolerances (merge_value_bound /
    merge_lse_bound at depth 1, exact inputs): (x_ref, lse_ref, tol_x, tol_lse)."""
    merge = case.spec.oracle
    x_ref, l_ref = merge(xa, la, xb, lb)
    mag, _ = merge(xa.double().abs(), la, xb.double().abs(), lb)  # sum of w |x|
    lam = torch.zeros_like(l_ref)
    for l in (la.double(), lb.double(), l_ref):
        lam = torch.maximum(lam, torch.where(torch.isfinite(l), l.abs(), 0.0))
    eps_x = T.merge_value_bound(case.dtype, 1, lam[..., None], mag, leaves=False)
    eps_l = T.merge_lse_bound(case.dtype, 1, lam, leaves=False)
    return (x_ref, l_ref, T.total_tolerance(eps_x, x_ref, case.dtype, case.dtype),
            T.total_tolerance(eps_l, l_ref, lse_dtype(case.dtype), case.dtype))


def one_shot_truth(case, device, chunks, H):
    """(x_ref, lse_ref, tol_x, tol_lse): the one-shot FP64 truth over the chunks' columns and the
    chunked-merge bounds at merge depth H."""
    x_ref, l_ref, mag, lam = case.reference(device, chunks)
    N = len(case.chunk_cols(chunks))
    tol_x = T.total_tolerance(T.merge_value_bound(case.dtype, H, lam[..., None], mag, N), x_ref, case.dtype, case.dtype)
    tol_l = T.total_tolerance(T.merge_lse_bound(case.dtype, H, lam, N), l_ref, lse_dtype(case.dtype), case.dtype)
    return x_ref, l_ref, tol_x, tol_l


def state_truth(case, x_ref, l_ref, tol_x, tol_l, what_x, what_l, names=("x", "lse")) -> Truth:
    """A merged (values, lse) state's Truth."""
    return Truth((Expected(names[0], x_ref, tol_x, case.dtype, what=what_x),
                  Expected(names[1], l_ref, tol_l, lse_dtype(case.dtype), what=what_l)))


def one_shot_state_truth(case, device, chunks, H, names=("x", "lse")) -> Truth:
    """The merged state of the given chunks (in column order) against the one-shot FP64 truth over
    their columns, within the chunked-merge bounds at merge depth H."""
    return state_truth(case, *one_shot_truth(case, device, chunks, H),
                       f"merged chunks differ from the one-shot FP64 oracle (merge depth {H})",
                       f"merged lse differs from the one-shot FP64 logsumexp (merge depth {H})", names)


def merge_truth(case, args, strict=False) -> Truth:
    """A merge tree's root state against the one-shot truth of all its columns, at the tree's depth."""
    return one_shot_state_truth(case, args[0].device, tree_leaves(case.tree), tree_depth(case.tree))


def states_truth(case, args, strict=False) -> Truth:
    """merge_states' output against the one-shot truth of all the row's keys, at depth
    max(S - 1, 1): the bound of a left fold over the S states (see merge_states_truth)."""
    return one_shot_state_truth(case, args[0].device, case.order, max(len(case.order) - 1, 1), names=("o", "lse"))


def merge_states_truth(case, o, lse):
    """The FP64 N-way merge of the actual states (oracles.merge_states) and its bounds: the
    chunked-merge bounds (tolerances.merge_value_bound / merge_lse_bound) at depth
    H = max(S - 1, 1) with exact inputs, i.e. those of a fold of S - 1 binary merges. They cover
    a one-pass N-way merge as well: its weights exp(lse_s - M) / D are off by at most
    u (2 Lam + 2.4 S + 9) relative (the exponent's rounding, exp, the sum D of S terms, the
    division, S products and adds), within (S - 1) u (6 Lam + 36) for S >= 2, and its lse by
    u (Lam + 1.4 S + 3 + 4 log S), within (S - 1) u (2 Lam + 12); for S = 1 both are exact.
    Returns (x_ref, lse_ref, tol_x, tol_lse)."""
    x_ref, l_ref = oracles.merge_states(o, lse)
    mag, _ = oracles.merge_states(o.double().abs(), lse)  # sum of w |o|
    l64 = lse.double()
    lam = torch.maximum(torch.where(torch.isfinite(l_ref), l_ref.abs(), 0.0),
                        torch.where(torch.isfinite(l64), l64.abs(), 0.0).amax(-1))
    H = max(lse.shape[-1] - 1, 1)
    eps_x = T.merge_value_bound(case.dtype, H, lam[..., None], mag, leaves=False)
    eps_l = T.merge_lse_bound(case.dtype, H, lam, leaves=False)
    return (x_ref, l_ref, T.total_tolerance(eps_x, x_ref, case.dtype, case.dtype),
            T.total_tolerance(eps_l, l_ref, lse_dtype(case.dtype), case.dtype))


# ----------------------------------------------------------------------------------------------
# cross-entropy (CECase: logits, class-index targets, options, and for the backward dloss)
# ----------------------------------------------------------------------------------------------
def ce_truth(case, args, reduction=None, label_smoothing=None, depth=T.depth_any, strict=False):
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
        row_eps = T.ce_loss_bound(case.dtype, lse, H, dep, logs, xt, mean_abs,
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
        u_rows = None if strict else T.TABLE[case.dtype].u_c * T.depth_any(n_rows)
        eps_out = T.ce_reduced_bound(row_eps, rows_abs, n_rows, count, red, u_rows)
        if not strict and red != "none" and eps > 0:
            extra = 2 * T.ulp(rows_abs.sum().reshape(()), case.dtype)
            eps_out = eps_out + (extra / count if red == "mean" else extra)
        return ref, T.total_tolerance(eps_out, ref, case.dtype, case.dtype)
    dl = args[2]
    ref = oracles.ce.cross_entropy_backward(x64, t, dl, ign_idx, red, eps)
    scale = oracles.ce.grad_scale(t, dl, ign_idx, red)
    hot = torch.zeros_like(y).scatter_(-1, tc[..., None], 1.0)
    g0 = y - (1 - eps) * hot - eps / V
    lse_err = tuple(T.ce_lse_error(u, lse, H, dep, logs) for u in (T.TABLE[case.dtype].u_c, T.U_ORACLE))
    eps_g = T.ce_grad_bound(case.dtype, y, x64, lse_err, lse, g0, scale, hot, eps, V)
    if not strict:
        u = 2.0 ** -T.TABLE[case.dtype].precision
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
            eta = 0.5 * float(T.ulp(torch.zeros(()), case.dtype))
            dg = 2 * u * terms + (2 + hot) * eta
            eps_g = eps_g + dg + y * dg.sum(-1, keepdim=True)
        if red == "mean" and case.dtype in (torch.float16, torch.bfloat16):
            eps_g = eps_g + _rounded_mean_scale(case.dtype, dl, (~ign).sum(), g0, hot, y, eps)
    eps_g = torch.where(ign[..., None], 0.0, eps_g)
    return ref, T.total_tolerance(eps_g, ref, case.dtype, case.dtype)


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
    err = (sc - s).abs() + 0.5 * T.ulp(sc, dtype)
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
        return 0.5 * T.ulp(v.abs() * (1 + 2.0**-16), dtype)
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
        grow = 1 + (x.shape[-1] + 1) * T.TABLE[case.dtype].u_c  # the V terms' and their sum's roundings, any order
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
    ref, tol = ce_truth(case, args, depth=T.depth if strict else T.depth_any, strict=strict)
    if strict:
        return Truth((Expected("out", ref, tol, case.dtype),))
    only = ce_default_mask(case, args, ref.shape)
    if case.spec.is_vjp:
        only = _both(only, nan_rows_keep_their_nan(args[0], ref))
    return Truth((Expected("out", ref, tol, case.dtype, only),))


def cross_entropy_grad_truth(case, args, g, y):
    """grad_truth of cross_entropy: the explicit backward's default-tier truth for the cotangent g
    (cross_entropy_truth), so autograd's gradient is judged as the backward's is: the FP64
    oracle's gradient and bound, on the elements ce_default_mask (ignored rows of NaN / inf
    logits: NaN or 0) and nan_rows_keep_their_nan judge."""
    bwd = dataclasses.replace(case, op=vjp_of(case.op).name)
    e = cross_entropy_truth(bwd, [args[0].detach(), args[1], g])[0]
    return e.ref, e.tol, e.only
