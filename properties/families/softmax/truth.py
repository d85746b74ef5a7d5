"""The softmax family's FP64 truth: what each output of a call should be, computed in float64 from
the same rounded inputs the target saw, and how far a correct kernel may be from it (bounds.py)."""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

from softmax_properties import oracles

from ... import tolerances
from ...spec import OutputTruth, Truth, lse_dtype, vjp_of
from ...truth import truth_at, returned_bound
from . import bounds as B


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


def forward_truth_at(oracle, eps, out_dtype=None):
    """The truth of a forward op of the softmax family: oracle(x) and the bound
    eps(dtype, rows, dep, ref) (rows: row_terms(x), dep: the reduction depth of the row length)
    plus the final rounding to the output dtype (default: the input's)."""
    def truth_and_bound(dtype, args, depth=tolerances.depth_any):
        x = args[0].detach().to(torch.float64)
        ref = oracle(x)
        e = eps(dtype, row_terms(x), depth(x.shape[-1]), ref)
        return ref, tolerances.total_tolerance(e, ref, (out_dtype or (lambda d: d))(dtype), dtype)
    return truth_and_bound


softmax_truth_at = forward_truth_at(oracles.softmax, lambda dt, r, dep, y: B.softmax_bound(dt, r.d, r.H, dep, y))
log_softmax_truth_at = forward_truth_at(
    oracles.log_softmax, lambda dt, r, dep, z: B.log_softmax_bound(dt, r.d, r.H, dep, r.logs, z))
logsumexp_truth_at = forward_truth_at(
    oracles.logsumexp, lambda dt, r, dep, lse: B.logsumexp_bound(dt, r.m, r.H, dep, r.logs, lse), lse_dtype)


def softmax_backward_truth_at(dtype, args, depth=tolerances.depth_any):
    y, g = (t.detach().to(torch.float64) for t in args)
    D = y.shape[-1]
    ref = oracles.softmax_backward(y, g)
    dot = (y * g).sum(-1)
    eps = B.softmax_backward_bound(dtype, y, g, dot, (y * g).abs().sum(-1), depth(D), ref, D)
    return ref, tolerances.total_tolerance(eps, ref, dtype, dtype)


def log_softmax_backward_truth_at(dtype, args, depth=tolerances.depth_any):
    z, g = (t.detach().to(torch.float64) for t in args)
    D = z.shape[-1]
    ref = oracles.log_softmax_backward(z, g)
    # the sums in units of 2**64, so that they cannot overflow (exact scaling; the dropped tail
    # below 2**-1010 is far under the FTZ floor of the tolerance)
    gs = g * 2.0**-64
    eps = B.log_softmax_backward_bound(dtype, z, g, gs.sum(-1), gs.abs().sum(-1), depth(D), ref, D, 2.0**64)
    return ref, tolerances.total_tolerance(eps, ref, dtype, dtype)


def vjp_rows(case, args, strict):
    """The rows a VJP law covers: all of them in the strict tier, those of ordinary magnitude
    (tolerances.vjp_in_range) in the default tier; None (every row) for forward ops."""
    if strict or not case.spec.is_vjp:
        return None
    return B.vjp_in_range(case.op, args[0].double(), args[1].double(), case.dtype)


def logits_truth(case, args, strict=False) -> Truth:
    """The Truth of a single-output op of the softmax family: its truth at the tier's depth
    (strict: tolerances.depth), judged on the rows vjp_rows covers; in the default tier, in any
    output dtype the spec accepts there (default_out_dtypes), at the precision returned."""
    spec = case.spec
    ref, tol = spec.truth_at(case.dtype, args, tolerances.depth if strict else tolerances.depth_any, **case.kwargs())
    rows = vjp_rows(case, args, strict)
    out_dtype = spec.out_dtype(case.dtype)
    also = () if strict or spec.default_out_dtypes is None else tuple(
        (d, returned_bound(spec, case.dtype, ref, tol, d))
        for d in spec.default_out_dtypes(case.dtype) if d != out_dtype)
    return Truth((OutputTruth("out", ref, tol, out_dtype, None if rows is None else rows[..., None], also=also),))


def normalized_grad_truth(case, args, g, y):
    """grad_truth of softmax and log_softmax: the FP64 autograd VJP of torch's float64 op at x =
    args[0] (the spec's torch_ref) for the cotangent g, and its bound: the explicit VJP's bound at
    the output y the kernel saved (its truth there), plus how far the VJP moves between y and the exact
    forward: rounded_forward_effect with |dy| within the forward's bound at x (each output of a
    correct kernel is) and twice the float64 forward's."""
    x = args[0]
    x64 = x.detach().double().requires_grad_(True)
    out64 = case.spec.torch_ref(x64)
    (ref,) = torch.autograd.grad(out64, x64, g.double())
    vjp = vjp_of(case.op).name
    ref_y, tol = truth_at(vjp, case.dtype, [y.detach(), g])
    # where the output the kernel saved makes the VJP NaN and the exact VJP is not (its forward is
    # wrong there: matches_oracle's failure), the VJP's bound at y says nothing: unbounded
    tol = torch.where(torch.isnan(ref_y) & ~torch.isnan(ref), math.inf, tol)
    _, tol_f = truth_at(case.op, case.dtype, [x.detach()])
    _, fwd64 = truth_at(case.op, torch.float64, [x.detach()])
    y64 = out64.detach()
    du = torch.where(torch.isfinite(y64), tol_f + 2 * torch.nan_to_num(fwd64, nan=0.0), 0.0)
    extra = torch.nan_to_num(B.rounded_forward_effect(vjp, y64, g.double(), du), nan=0.0)
    return ref, tol + extra, None


def logsumexp_grad_truth(case, args, g, y):
    """grad_truth of logsumexp: dx = softmax(x) g, the FP64 oracle's softmax times g (torch's
    float64 backward forms exp(x - lse) with lse rounded to float64, which at |x| near 3e38 is off
    by far more than 1: for x = [max, max] it gives [1, 1] g), with softmax within its bound and
    the product rounded twice (2 u |dx|)."""
    x = args[0]
    x64 = x.detach().double()
    ref = oracles.softmax(x64) * g.double()[..., None]
    _, tol_p = truth_at("softmax", case.dtype, [x.detach()])
    # a backward that forms exp(x - lse) from the forward's saved output (autograd saves it,
    # rounded to its dtype: torch's does) moves dx by |dx| expm1(|lse error|), the error
    # within logsumexp's own bound at the dtype it was returned in (returned_bound: a bfloat16
    # lse carries its rounding to bfloat16); huge enough at |x| ~ finfo.max to cover anything there
    _, tol_l = truth_at("logsumexp", case.dtype, [x.detach()], returned=y.dtype)
    eps = B.logsumexp_grad_bound(case.dtype, ref, g.double(), tol_p, tol_l)
    return ref, tolerances.total_tolerance(eps, ref, case.dtype, case.dtype), None
