"""The laws of cross-entropy with class-index targets: cross_entropy and cross_entropy_backward,
drawn as a CECase (case.py: logits, class-index targets, the options, and for the
backward the cotangent dloss). Every target call passes the case's keyword options
(ignore_index, reduction, label_smoothing)."""
from __future__ import annotations

import dataclasses
import math

import torch
from hypothesis import assume, reject

from softmax_properties import oracles

from ... import tolerances
from ...tolerances import agree
from ...failures import WrongOutput, device_assert
from ...record import accept_context_loss
from ...strategies import GRID_SHIFT
from ...truth import truth_at
from ...invariants._checks import (assert_bitwise, assert_close, check_oracle, finite_rows, op_call, repeats_agree, run,
                                   worst)
from ...invariants._registry import fail, invariant
from . import bounds as B
from .strategies import CE_OPTIONS, OUT_OF_RANGE
from .truth import ce_default_mask, ce_truth, declared_empty_mean


def cross_entropy(op) -> bool:
    return op.family == "cross_entropy"


def loss(op) -> bool:
    """The forward: the loss."""
    return cross_entropy(op) and not op.is_vjp


def gradient(op) -> bool:
    """The explicit backward: the gradient of the loss times dloss."""
    return cross_entropy(op) and op.is_vjp


@invariant(cross_entropy, strict="ce_matches_oracle_strict")
def ce_matches_oracle(case, target, strict=False):
    """The loss (every reduction, label smoothing, ignored rows) and the gradient (times dloss,
    strided or expanded) equal the FP64 oracle (oracles/cross_entropy.py) at the same rounded
    inputs within the derived bounds (tolerances.ce_loss_bound, ce_reduced_bound, ce_grad_bound);
    NaN exactly where the oracle has NaN, infinities exactly. Output dtype is the logits' dtype,
    shape the loss's (forward) or the logits' (backward). default: the bound for any summation
    order, on the outputs ce_default_mask covers; strict (ce_matches_oracle_strict): the bound at
    the project's reduction depth on every output (an exactly zero gradient on ignored rows
    holding NaN / inf; an overflow-free mean)."""
    check_oracle(case, target, strict=strict)


@invariant(cross_entropy, needs=("option:any",), families=(CE_OPTIONS,), strict="ce_options_match_oracle_strict")
def ce_options_match_oracle(case, target, strict=False):
    """With the options the target takes (weight, z_loss, softcap, logit_scale; drawn together
    with ignore_index, reduction and label_smoothing, at least one on), the loss and the gradient
    equal the FP64 oracle (oracles/cross_entropy.py) within truth.ce_options_truth's bound: the
    options' own errors (the transformed logits', the weights' products, the z term's, the
    mean's divisors; bounds.ce_options_loss_bound, ce_options_grad_bound) added to the
    cross-entropy's. default: on the outputs ce_options_mask covers; strict: every output, the
    logits transformed at the compute precision."""
    check_oracle(case, target, strict=strict)


@invariant(loss)
def ce_loss_nonnegative(case, target):
    """loss >= 0 exactly (NaN aside), a semantic requirement like 0 <= softmax <= 1: the exact
    loss is a sum of non-negative terms (lse - x_j with lse >= max x >= x_j), and a negative loss
    is impossible to a user who logs or compares it. Formed as rounded differences fl(lse) - x_j
    (rounding is monotone) it cannot go below 0; other formations can (an approximate log near
    S = 1, a fused multiply-add, the mean of x), and then the kernel must clamp, as this project's
    does. The bound is 0, not the oracle tolerance."""
    args = case.tensors(target.device)
    out = op_call(case, target, *args).double()
    bad = out < 0
    if bool(bad.any()):
        i = worst(bad, -out)
        fail(case, target, "negative loss (a loss is >= 0; expected is that bound, not the exact loss: clamp at 0)",
             i, 0.0, out[i])


@invariant(loss)
def ce_loss_is_lse_minus_target_logit(case, target):
    """Without smoothing, loss_i = logsumexp(x_i) - x_i[t_i] (reduction="none"), with logsumexp
    the target's own when it has one (else the FP64 oracle). Bound: tol(cross_entropy) +
    tol(logsumexp) (both against the same FP64 truth; the latter at the dtype logsumexp returned)
    + one rounding of the difference (tolerances.agree), on rows that are counted and whose logits
    are finite."""
    x, t = case.tensors(target.device)
    assume(x[..., 0].numel() >= 1)
    loss = op_call(case, target, x, t, reduction="none", label_smoothing=0.0).double()
    lse = run(target, "logsumexp", x) if target.has("logsumexp") else oracles.logsumexp(x)
    _, tol_lse = truth_at("logsumexp", case.dtype, [x], returned=lse.dtype)
    lse = lse.double()
    ign = t == case.ignore_index
    tc = torch.where(ign, 0, t).clamp(0, x.shape[-1] - 1).long()
    xt = torch.gather(x.double(), -1, tc[..., None])[..., 0]
    rhs = lse - xt
    _, tol_ce = ce_truth(case, [x, t], reduction="none", label_smoothing=0.0)
    tol = agree(tol_ce, tol_lse, formed=rhs.abs(), dtype=case.dtype)
    rows = ~ign & finite_rows(x)
    assume(bool(rows.any()))
    rhs = torch.where(rows, rhs, loss)  # other rows: ce_matches_oracle's business
    tol = torch.where(rows, tol, 0.0)  # (their bound can be NaN, e.g. an ignored all -inf row)
    assert_close(case, target, loss, rhs, tol,
                 "loss != logsumexp(x) - x[target]",
                 f"out = target.{case.op}(logits, labels, ignore_index={case.ignore_index}, reduction='none')"
                 f"  # vs target.logsumexp(logits) - logits.gather(-1, labels[..., None])")


def _check_empty_mean(case, target, mean, call):
    """A mean over no counted rows: NaN (0 / 0, torch's), or 0 where the target declares
    CE_EMPTY_MEAN = 0.0 (strategies.empty_mean_zero)."""
    if case.empty_mean_zero:
        if not bool(mean == 0):
            fail(case, target, "mean over no counted rows is not 0, as the target declares (CE_EMPTY_MEAN = 0.0)",
                 (), 0.0, mean, call=call)
    elif not bool(torch.isnan(mean)):
        hint = " (a mean of 0 there is a convention: declare CE_EMPTY_MEAN = 0.0 in the target module)" \
            if bool(mean == 0) else ""
        fail(case, target, f"mean over no counted rows is not NaN{hint}", (), math.nan, mean, call=call)


@invariant(loss)
def ce_reductions_agree(case, target):
    """mean * (number of counted rows) == sum == sum of reduction="none", each output within its
    oracle bound (bounds.ce_sum_bound, bounds.ce_mean_count_bound, the latter at a quarter scale
    where mean * count overflows float64). With no counted row, mean is NaN (0 / 0), or 0 as the
    target declares (CE_EMPTY_MEAN), and sum is 0."""
    x, t = case.tensors(target.device)
    kw = dict(label_smoothing=case.label_smoothing)
    none = op_call(case, target, x, t, reduction="none", **kw).double()
    total = op_call(case, target, x, t, reduction="sum", **kw).double()
    mean = op_call(case, target, x, t, reduction="mean", **kw).double()
    _, tn = ce_truth(case, [x, t], reduction="none")
    _, ts = ce_truth(case, [x, t], reduction="sum")
    _, tm = ce_truth(case, [x, t], reduction="mean")
    count = int((t != case.ignore_index).sum())
    call = f"out = [target.{case.op}(logits, labels, reduction=r) for r in ('none', 'sum', 'mean')]"
    # the sum is the output held to the others (formed in float64), so a sum that overflows the
    # dtype where the float64 sum of the rows exceeds its range is accepted as infinity
    assert_close(case, target, total, none.sum(), B.ce_sum_bound(ts, tn), "sum != sum of reduction='none'", call)
    if count == 0:
        _check_empty_mean(case, target, mean, call)
        return
    # float64 logits with a loss near finfo.max: mean * count can round past the range where the
    # sum itself does not (e.g. sum = finfo.max, mean = max / 3, 3 * mean = inf);
    # then both sides are compared at a quarter scale (a power of two: exact at that magnitude)
    s = 0.25 if bool(torch.isinf(mean * count) & torch.isfinite(mean)) else 1.0
    mc = (mean * s) * count
    assert_close(case, target, total * s, mc, B.ce_mean_count_bound(tm, ts, count, s, mc),
                 f"sum != mean * count ({count})", call)


@invariant(gradient)
def ce_gradient_rows_sum_to_zero(case, target):
    """Each gradient row sums to 0: sum_j (p_j - (1 - eps)[j = t] - eps/V) = 1 - (1 - eps) - eps.
    Bound: bounds.ce_grad_row_sum_bound (each element within its oracle bound, and the oracle's
    own row sum). Rows with a non-finite truth are matches_oracle's business."""
    args = case.tensors(target.device)
    dx = op_call(case, target, *args).double()
    ref, tol = ce_truth(case, args)
    rows = torch.isfinite(ref).all(-1)
    keep = ce_default_mask(case, args, ref.shape)  # ignored rows of NaN / inf logits: strict tier's
    if keep is not None:
        rows = rows & keep.all(-1)
    total = dx.sum(-1)
    bound = B.ce_grad_row_sum_bound(tol, ref)
    bad = rows & ~(total.abs() <= bound)
    if bool(bad.any()):
        i = worst(bad, total.abs() / bound)
        fail(case, target, "gradient row does not sum to 0", i, 0.0, total[i], bound[i])


@invariant(cross_entropy, strict="ce_ignored_nonfinite_rows_zero_gradient")
def ce_ignored_rows_do_not_count(case, target, strict=False):
    """Rows whose target is ignore_index do not take part: overwriting their logits with NaN, +-inf
    and the largest finite value leaves the output bitwise unchanged (loss, every reduction; the
    gradient), and their gradient rows are exactly zero. Both calls get contiguous logits (so
    only the ignored rows' values differ, not the memory layout). default: the gradient's ignored
    rows are overwritten with finite values only (+-finfo.max, 0): with NaN / inf there torch's
    gradient is NaN (0 * NaN in its log_softmax backward), a defensible choice; strict
    (ce_ignored_nonfinite_rows_zero_gradient): NaN and +-inf too, and the gradient stays exactly 0
    (this project's choice, oracles/semantics.py CE_SEMANTICS). An op the module declares
    NONDETERMINISTIC: each of the two outputs within its bound instead of bitwise."""
    args = case.tensors(target.device)
    # fresh allocations on both sides: a kernel may pick its code by alignment (the contiguous
    # copy of a storage-offset view keeps the offset), and then its rounding may differ
    x, t = args[0].clone(memory_format=torch.contiguous_format), args[1]
    args = [x] + list(args[1:])
    ign = t == case.ignore_index
    assume(bool(ign.any()))
    if case.spec.is_vjp and not strict:  # the gradient of ignored non-finite rows is the strict tier's
        assume(bool(finite_rows(x)[ign].all()))
        junk = [-torch.finfo(case.dtype).max, 0.0, torch.finfo(case.dtype).max]
    else:
        junk = [math.nan, math.inf, -math.inf, torch.finfo(case.dtype).max]
    a = op_call(case, target, *args)
    p = x.clone()
    flat, fi = p.reshape(-1, p.shape[-1]), ign.reshape(-1)
    for k, r in enumerate(fi.nonzero()[:, 0].tolist()):
        flat[r] = junk[k % len(junk)]
    b = op_call(case, target, p, *args[1:])
    rows = f"(labels == {case.ignore_index}).reshape(-1).nonzero()[:, 0].tolist()"
    call = (f"logits = logits.clone(memory_format=torch.contiguous_format)\n{case.call_code()}\nfirst = out\n"
            f"logits = logits.clone()\nfor k, r in enumerate({rows}):  # the ignored rows' logits replaced\n"
            f"    logits.view(-1, logits.shape[-1])[r] = {junk!r}[k % {len(junk)}]\n"
            f"{case.call_code()}\nout = out, first  # bitwise equal")
    repeats_agree(case, target, b, a, args, "ignored rows' logits changed the output", call=call, hint=False)
    if case.spec.is_vjp:
        bad = ign[..., None].expand(a.shape) & (a != 0)
        if bool(bad.any()):
            i = worst(bad, a.double().abs())
            fail(case, target, "an ignored row has a nonzero gradient", i, 0.0, a[i])


def _same_layout(t: torch.Tensor, factor: float) -> torch.Tensor:
    """factor * t with t's strides and storage offset (gaps of a strided view scaled too)."""
    base = t._base if t._base is not None else t
    return (base * factor).as_strided(t.shape, t.stride(), t.storage_offset())


@invariant(gradient, strict="ce_gradient_linear_in_dloss_bitwise")
def ce_gradient_linear_in_dloss(case, target, strict=False):
    """The gradient is linear in dloss and depends on its values only: dx(4 dloss) == 4 dx(dloss),
    dx(-dloss) == -dx(dloss), and a strided or expanded (stride-0) dloss gives the result of its
    contiguous copy. default: within the oracle tolerances of both sides (torch's autograd forms
    the smoothing term in the logits' dtype, where eps / V * dloss can be subnormal in float16, so
    scaling dloss changes the rounding). strict (ce_gradient_linear_in_dloss_bitwise): bitwise,
    since scaling by a power of two or by -1 is exact in binary floating point and a kernel forming
    (softmax - onehot) * scale obeys it exactly; elements whose unscaled value is subnormal or
    zero, or whose scaled value overflows, are excluded."""
    x, t, dl = case.tensors(target.device)
    a = op_call(case, target, x, t, dl)
    call = "out = target.{op}(logits, labels, {arg}, " + case.kwargs_code() + ")  # vs {vs}"
    c = op_call(case, target, x, t, dl.contiguous())
    _, tol = ce_truth(case, [x, t, dl])
    layout_call = call.format(op=case.op, arg="dloss.contiguous()", vs="dloss as laid out")
    if strict:
        assert_bitwise(case, target, c, a, "dloss's layout changed the gradient", call=layout_call)
    else:
        assert_close(case, target, c, a.double(), agree(tol, tol), "dloss's layout changed the gradient", layout_call)
    tiny, big = torch.finfo(case.dtype).tiny, torch.finfo(case.dtype).max
    for f in (4.0, -1.0):
        dlf = _same_layout(dl, f)
        b = op_call(case, target, x, t, dlf).double()
        want = a.double() * f
        scaled = (f"(dloss._base if dloss._base is not None else dloss).mul({f}).as_strided(dloss.shape, dloss.stride(), "
                  "dloss.storage_offset())")  # _same_layout's
        fcall = call.format(op=case.op, arg=scaled, vs=f"{f} * target.{case.op}(logits, labels, dloss)")
        if not strict:
            _, tol_f = ce_truth(case, [x, t, dlf])
            assert_close(case, target, b, want, agree(tol_f, tol, scale=f), f"dx({f} * dloss) != {f} * dx(dloss)",
                         fcall)
            continue
        # a above the smallest normal (a == tiny may be a subnormal rounded up on the coarser
        # subnormal grid), the scaled value finite
        exact = (a.double().abs() > tiny) & (want.abs() <= big)
        same = (b == want) | (torch.isnan(b) & torch.isnan(want)) | ~exact
        if not bool(same.all()):
            i = worst(~same, (b - want).abs())
            fail(case, target, f"dx({f} * dloss) != {f} * dx(dloss)", i, want[i], b[i], call=fcall)


@invariant(cross_entropy, families=("grid",))
def ce_shift_invariance(case, target):
    """loss(x + c) == loss(x) and dx(x + c) == dx(x) for grid logits and an exact shift c (37.25,
    bfloat16 37; strategies.GRID_SHIFT): the exact values are equal, so each side is held to its
    own oracle bound: agree(tol(x), tol(x + c))."""
    args = case.tensors(target.device)
    x = args[0]
    c = GRID_SHIFT.get(case.dtype, 37.25)
    xs = x.double() + c
    assume(bool((xs.to(case.dtype).double() == xs)[~torch.isnan(xs)].all()))
    xs = xs.to(case.dtype)
    a = op_call(case, target, *args)
    b = op_call(case, target, xs, *args[1:])
    _, ta = ce_truth(case, args)
    _, tb = ce_truth(case, [xs] + list(args[1:]))
    assert_close(case, target, b, a.double(), agree(ta, tb), f"shifting the logits by {c} changed the result",
                 f"logits = (logits.double() + {c}).to(logits.dtype)  # exact: grid values\n"
                 f"{case.call_code()}  # vs the same on the unshifted logits")


@invariant(gradient, families=("confident",))
def ce_confident_bf16_rows_keep_gradient(case, target):
    """bfloat16 rows whose target logit dominates (1 - softmax_t in [e^-8, e^-7], below half a
    bfloat16 ulp of 1; strategies._confident_logits) keep their target-column gradient
    p_t - 1 = -(1 - p_t): it must match FP64 within its derived bound, and that bound is below a
    quarter of |p_t - 1| (asserted), so a kernel that rounds softmax to bfloat16 before
    subtracting the one-hot (getting 0) fails."""
    x, t, dl = case.tensors(target.device)
    ign = t == case.ignore_index
    # the strict bound (the tree depth, no allowance for dtype-rounded log-probabilities): the law is
    # that the target column keeps 1 - p_t, which that allowance would not resolve
    ref, tol = ce_truth(case, [x, t, dl], depth=tolerances.depth, strict=True)
    tc = torch.where(ign, 0, t).clamp(0, x.shape[-1] - 1).long()
    rt = torch.gather(ref, -1, tc[..., None])[..., 0]
    tt = torch.gather(tol, -1, tc[..., None])[..., 0]
    # rows whose gradient a tiny dloss pushed below 2**-100 are skipped: there the bfloat16 output
    # is subnormal or close to it, and no bound resolves 1 - p_t (seen with dloss = 2**-126)
    rows = ~ign & (rt.abs() >= 2.0**-100) & torch.isfinite(rt)
    assume(bool(rows.any()))
    assert bool((tt[rows] < rt[rows].abs() / 4).all()), "harness: the bound does not resolve 1 - p_t"
    dx = op_call(case, target, x, t, dl)
    if not isinstance(dx, torch.Tensor) or tuple(dx.shape) != tuple(x.shape):
        fail(case, target, f"gradient shape {tuple(dx.shape) if isinstance(dx, torch.Tensor) else type(dx)}",
             kind=WrongOutput)
    out = torch.gather(dx.double(), -1, tc[..., None])[..., 0]
    out, rt, tt = torch.where(rows, out, 0.0), torch.where(rows, rt, 0.0), torch.where(rows, tt, 1.0)
    assert_close(case, target, out, rt, tt,
                 "target-column gradient of a confident bfloat16 row lost (softmax rounded before the one-hot?)")


# at most 30 examples (the ci profile's number): torch on CUDA answers each one with a device-side
# assert, and the isolated worker restarts with a fresh CUDA context, about a second per example
# (100 examples took 85-152 s on an H200); the out-of-range values are few (negative, V, huge)
@invariant(cross_entropy, families=(OUT_OF_RANGE,), strict="ce_out_of_range_target_named", max_examples=30)
def ce_out_of_range_target_raises(case, target, strict=False):
    """A target outside [0, V) that is not ignore_index raises instead of returning a result
    (inputs: strategies.ce_targets(invalid=True)). default: any exception (torch on CUDA raises a
    device-side assert, by design: an index check on the host would cost a synchronization);
    strict (ce_out_of_range_target_named): a Python exception whose message names the target, and
    no device-side crash."""
    args = case.tensors(target.device)
    assume(args[1].numel() >= 1)
    try:
        out = case.call(target, *args)
        if isinstance(out, torch.Tensor) and out.is_cuda:  # a device-side assert is asynchronous: it surfaces here, as the call's exception
            torch.cuda.synchronize(out.device)
    except Exception as e:  # noqa: BLE001 - any clear Python exception is the law
        if isinstance(e, target.refusals) and "target" not in str(e).lower():
            reject()  # a declared refusal of something else (e.g. a dtype the target does not offer)
        if strict and "target" not in str(e).lower():
            body = "\n".join("    " + line for line in case.call_code().splitlines())
            fail(case, target, f"raised {type(e).__name__} without naming the target: {e}",
                 call=f"try:\n{body}\nexcept Exception as e:  # the law: a Python exception naming the target\n"
                      "    out = f'raised {type(e).__name__}: {e}'")
        if device_assert(e):
            accept_context_loss()  # isolated, the worker restarts; in-process the context is lost
        return
    fail(case, target,
         f"an out-of-range target returned a result instead of raising: {out if out.numel() <= 4 else out.shape}",
         kind=WrongOutput)


# ----------------------------------------------------------------------------------------------
# the options (weight, z_loss, softcap, logit_scale): laws that tell each one's bug from a legal
# difference, on cases drawn with the option on (families=("ce_options:NAME",)); every bound is
# the oracle bound of the calls compared (truth.ce_options_truth), added
# ----------------------------------------------------------------------------------------------
# the option laws' rows (each example calls the target two to four times): the kernels' block
# boundaries up to 256 columns, +-1; longer rows with the options are ce_options_match_oracle's
OPTION_LAW_COLS = 256


def _truth(case, args):
    ref, tol = ce_truth(case, args)
    return ref, torch.nan_to_num(tol, nan=0.0)


def _judged(case, args, ref):
    """The outputs both calls' default truths judge (ce_options_mask, or the plain one)."""
    from .truth import ce_options_mask
    only = ce_options_mask(case, args, ref.shape) if case.options() else ce_default_mask(case, args, ref.shape)
    return torch.ones(ref.shape, dtype=torch.bool, device=ref.device) if only is None else only


@invariant(cross_entropy, needs=("option:z_loss",), families=(CE_OPTIONS + ":z_loss",), max_cols=OPTION_LAW_COLS)
def ce_z_loss_term(case, target):
    """z-loss adds z lse^2 per counted row, unweighted: loss(z) - loss(0) equals the FP64 z term
    reduced as the loss (the mean over the count of counted rows, whatever the weights), and the
    gradient gains 2 z lse softmax(y) times the term's scale and dy/dx. Bound: the two calls'
    oracle bounds (ce_options_truth) plus one rounding of the difference (tolerances.agree); on
    the outputs both truths judge and where the rows are finite."""
    args = case.tensors(target.device)
    off = dataclasses.replace(case, z_loss=0.0)
    with_z = op_call(case, target, *args).double()
    without = op_call(off, target, *args, z_loss=0.0).double()
    x64, t = args[0].detach().double(), args[1]
    o = case.oracle_options(x64.device)
    if case.spec.is_vjp:
        full = oracles.ce.cross_entropy_backward(x64, t, args[2], case.ignore_index, case.reduction,
                                                 case.label_smoothing, **o)
        base = oracles.ce.cross_entropy_backward(x64, t, args[2], case.ignore_index, case.reduction,
                                                 case.label_smoothing, **{**o, "z_loss": 0.0})
        term = full - base
    else:
        _, term = oracles.ce.cross_entropy(x64, t, case.ignore_index, case.reduction, case.label_smoothing,
                                           return_z_loss=True, **o)
    _, tz = _truth(case, args)
    _, t0 = _truth(off, args)
    diff = with_z - without
    tol = agree(tz, t0, formed=diff.abs().nan_to_num(0.0, posinf=0.0), dtype=case.dtype)
    only = _judged(case, args, term) & _judged(off, args, term) & torch.isfinite(term) & torch.isfinite(diff)
    only = only & torch.isfinite(with_z) & torch.isfinite(without)
    assume(bool(only.any()))
    assert_close(case, target, diff, term, tol, "loss(z) - loss(0) != the z term" if not case.spec.is_vjp
                 else "gradient(z) - gradient(0) != 2 z lse softmax", f"{case.call_code()}\nwith_z = out\n"
                 f"{off.call_code()}\nout = with_z - out  # vs the FP64 z term", only=only)


@invariant(cross_entropy, needs=("option:softcap",), families=(CE_OPTIONS + ":softcap",), max_cols=OPTION_LAW_COLS)
def ce_softcap_is_capped_logits(case, target):
    """softcap c: the loss is the plain cross-entropy of y = c tanh(s x / c), and the gradient is
    its gradient at y times dy/dx = s (1 - tanh^2(s x / c)) (a backward that forgets tanh' returns
    the gradient at y alone). The law forms y and dy/dx in FP64 itself, from torch.tanh and
    torch.cosh, and holds the target to the FP64 plain cross-entropy at y (times dy/dx), other
    options as the case has them; bound: the oracle bound (ce_options_truth), on the outputs it
    judges."""
    args = case.tensors(target.device)
    out = op_call(case, target, *args).double()
    x64, t = args[0].detach().double(), args[1]
    c, s = float(case.softcap), float(case.logit_scale)
    y = c * torch.tanh(x64 * s / c)
    o = {**case.oracle_options(x64.device), "softcap": None, "logit_scale": 1.0}
    if case.spec.is_vjp:
        dydx = s / torch.cosh(x64 * s / c) ** 2
        ref = oracles.ce.cross_entropy_backward(y, t, args[2], case.ignore_index, case.reduction,
                                                case.label_smoothing, **o) * dydx
    else:
        ref = oracles.ce.cross_entropy(y, t, case.ignore_index, case.reduction, case.label_smoothing, **o)
        if declared_empty_mean(case, args):
            ref = torch.zeros_like(ref)
    _, tol = _truth(case, args)
    only = _judged(case, args, ref)
    assert_close(case, target, out, ref, tol, "softcap: not the cross-entropy of c tanh(x / c)"
                 + (" times its derivative" if case.spec.is_vjp else ""), only=only)


def _pow2_scale(s: float) -> float:
    """The power of two (with s's sign) nearest s in the log; 2 for s = 0."""
    if s == 0:
        return 2.0
    return math.copysign(2.0 ** round(math.log2(abs(s))), s)


@invariant(cross_entropy, needs=("option:logit_scale",), families=(CE_OPTIONS + ":logit_scale",), max_cols=OPTION_LAW_COLS)
def ce_logit_scale_is_scaled_logits(case, target):
    """logit_scale s: CE(x, logit_scale=s) equals the target's own CE(s x) without the scale, and
    the gradient equals s times the gradient at s x (the chain rule's factor, which a backward that
    forgets it drops). The law takes s a power of two (the case's, rounded in the log), so that s x
    is exact in the logits' dtype (rows where it over- or underflows are left out: assume). Bound:
    the two calls' oracle bounds (the second's times |s|: tolerances.agree)."""
    args = case.tensors(target.device)
    s = _pow2_scale(case.logit_scale)
    scaled = dataclasses.replace(case, logit_scale=s)
    x = args[0]
    xs = x * s
    fx = x.detach().double()
    tiny = torch.finfo(case.dtype).tiny
    exact = ~torch.isfinite(fx) | (fx == 0) | (((fx * s).abs() >= tiny) & ((fx * s).abs() <= torch.finfo(case.dtype).max))
    assume(bool(exact.all()))
    plain = dataclasses.replace(case, logit_scale=1.0)
    out = op_call(scaled, target, *args, logit_scale=s).double()
    other = list(args)
    other[0] = xs
    ref_out = op_call(plain, target, *other, logit_scale=1.0).double()
    _, ta = _truth(scaled, args)
    _, tb = _truth(plain, other)
    if case.spec.is_vjp:
        ref_out = ref_out * s
        tol = agree(ta, tb, scale=s)
    else:
        tol = agree(ta, tb)
    only = _judged(scaled, args, ta) & _judged(plain, other, ta)
    assert_close(scaled, target, out, ref_out, tol, "logit_scale=s != the same call on s * logits"
                 + (" (times s)" if case.spec.is_vjp else ""),
                 f"{scaled.call_code()}\nfirst = out\nlogits = logits * {s!r}\n"
                 f"{plain.call_code()}\nout = first, out  # the second times s for the gradient", only=only)


@invariant(loss, needs=("option:weight",), families=(CE_OPTIONS + ":weight",), max_cols=OPTION_LAW_COLS)
def ce_unit_weights_equal_unweighted(case, target):
    """weight = ones(V) is no weight: the loss with unit weights equals the loss without (the
    mean's divisor, sum w[t], is then the count). Bound: the two calls' oracle bounds (agree)."""
    args = case.tensors(target.device)
    ones = dataclasses.replace(case, weight=(1.0,))
    none = dataclasses.replace(case, weight=None)
    a = op_call(ones, target, *args, weight=ones.weight_tensor(target.device)).double()
    kw = {} if none.options() else {"weight": None}
    b = op_call(none, target, *args, **kw).double()
    _, ta = _truth(ones, args)
    _, tb = _truth(none, args)
    only = _judged(ones, args, ta) & _judged(none, args, ta)
    assert_close(ones, target, a, b, agree(ta, tb), "unit weights != no weights",
                 f"{ones.call_code()}\nfirst = out\n{none.call_code()}\nout = first, out", only=only)


def _weighted_sum(case, target, args, **kw):
    return op_call(case, target, *args, reduction="sum", **kw).double()


@invariant(loss, needs=("option:weight",), families=(CE_OPTIONS + ":weight",), max_cols=OPTION_LAW_COLS)
def ce_weighted_mean_divides_by_weight_sum(case, target):
    """With weights, reduction="mean" is the weighted sum over the sum of w[t] of the counted rows
    (torch's semantics; not over their count): mean * sum w[t] == sum (the target's own sum,
    without z-loss, whose mean is over the count). Bound: bounds.ce_mean_count_bound with
    sum w[t] for the count; NaN where sum w[t] is 0 (0 where no row counts and the target declares
    CE_EMPTY_MEAN = 0.0)."""
    case = dataclasses.replace(case, z_loss=0.0)
    args = case.tensors(target.device)
    x, t = args
    mean = op_call(case, target, x, t, reduction="mean").double()
    total = _weighted_sum(case, target, args)
    dw, _ = oracles.ce.divisors(t, case.ignore_index, case.weight_tensor(t.device, torch.float64))
    dw = float(dw)
    mean_case = dataclasses.replace(case, reduction="mean")
    call = f"{mean_case.call_code()}\nout = out.double() * {dw!r}  # vs the same call with reduction='sum'"
    if dw == 0:
        if not bool((t != case.ignore_index).any()):
            _check_empty_mean(case, target, mean, call)
        elif not bool(torch.isnan(mean)):
            fail(case, target, "weighted mean where sum w[t] = 0 is not NaN", (), math.nan, mean, call=call)
        return
    _, ts = _truth(dataclasses.replace(case, reduction="sum"), args)
    _, tm = _truth(dataclasses.replace(case, reduction="mean"), args)
    judged = _judged(dataclasses.replace(case, reduction="mean"), args, tm) & _judged(
        dataclasses.replace(case, reduction="sum"), args, ts)
    assume(bool(judged.all()) and bool(torch.isfinite(total)))
    scale = 1.0
    tol = B.ce_mean_count_bound(tm, ts, dw, scale, mean * dw)
    assert_close(case, target, mean * dw, total, tol, "weighted mean * sum w[t] != weighted sum", call)


@invariant(loss, needs=("option:weight",), families=(CE_OPTIONS + ":weight",), max_cols=OPTION_LAW_COLS)
def ce_weight_scale_free(case, target):
    """Weights scaled by a power of two 2^k leave the mean unchanged (numerator and divisor scale
    alike, exactly), and scale the sum and each row by 2^k. Bound: the two calls' oracle bounds
    (agree, the second at scale 2^k), on the outputs both judge."""
    assume(case.weight is not None and any(v != 0 for v in case.weight))
    assume(case.reduction == "mean" or not case.z_loss)  # the z term is unweighted: no common factor
    k = 4.0 if case.reduction == "mean" else 2.0
    args = case.tensors(target.device)
    big = dataclasses.replace(case, weight=tuple(v * k for v in case.weight))
    a = op_call(big, target, *args).double()
    b = op_call(case, target, *args).double()
    _, ta = _truth(big, args)
    _, tb = _truth(case, args)
    f = 1.0 if case.reduction == "mean" else k
    only = _judged(big, args, ta) & _judged(case, args, tb)
    assert_close(big, target, a, f * b, agree(ta, tb, scale=f), f"weights times {k} changed the "
                 + ("mean" if f == 1.0 else f"loss by other than {k}x"),
                 f"{big.call_code()}\nfirst = out\n{case.call_code()}\nout = first, out", only=only)
