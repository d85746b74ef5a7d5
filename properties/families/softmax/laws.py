"""The laws of the softmax family: softmax, log_softmax, logsumexp and their explicit VJPs
(softmax_backward, log_softmax_backward), each drawn as a Case (properties/case.py). Each law
selects the ops it applies to by their specs' attributes (properties/spec.py): the family, being a
forward op or a VJP, reducing the row, an exact output range, taking ``dim=``."""
from __future__ import annotations

import math

import torch
from hypothesis import assume

from softmax_properties import oracles

from ... import tolerances
from ...tolerances import agree
from ...failures import WrongOutput
from ...spec import lookup
from ...strategies import GRID_SHIFT, MASKED_CHUNKS
from ...truth import truth_at
from ...invariants._checks import assert_bitwise, assert_close, check_oracle, finite_rows, op_call, run, worst
from ...invariants._registry import fail, invariant
from . import bounds as B


def softmax_family(op) -> bool:
    return op.family == "softmax"


def forward(op) -> bool:
    """A forward op of the family (not an explicit VJP)."""
    return op.family == "softmax" and not op.is_vjp


def elementwise(op) -> bool:
    """A forward op with one output per input element (softmax, log_softmax; not logsumexp)."""
    return forward(op) and not op.reduces


def vjp(op) -> bool:
    return op.family == "softmax" and op.is_vjp


def vjp_of_softmax(op) -> bool:
    return op.forward == "softmax"


def normalized(op) -> bool:
    return op.normalized


def has_range(op) -> bool:
    return op.out_range is not None


def one_differentiable_input(op) -> bool:
    return op.differentiable and len(op.args) == 1


def takes_dim(op) -> bool:
    return op.has_dim


def named(name: str):
    """A law that states an identity of one op (and its partners) by name."""
    def applies(op) -> bool:
        return op.name == name
    applies.__name__ = f"named_{name}"
    return applies


def truth_bound(case, args, depth=tolerances.depth_any, returned=None):
    """(truth, bound) of the case's op at these arguments, with the case's options;
    returned: the dtype the target returned the output in (truth.returned_bound)."""
    return truth_at(case.op, case.dtype, args, depth, returned=returned, **case.kwargs())


@invariant(softmax_family, strict="matches_oracle_strict")
def matches_oracle(case, target, strict=False):
    """out == FP64 oracle(same rounded inputs) within the tolerance table's derived bound
    (properties/tolerances.py); NaN exactly where the oracle has NaN, infinities exactly.
    default: the bound for a reduction in any summation order (tolerances.depth_any), and for the
    VJPs the rows of ordinary magnitude (tolerances.vjp_in_range), so that any correct
    float32-accumulating implementation passes (torch's CPU kernels exceed the tree-depth bound
    by 1.4x at D = 4097 and 3.4x at 65536, ordinary accumulation error, not a bug).
    strict (matches_oracle_strict): the bound at the project's reduction depth (tolerances.depth)
    on every row, cotangents near finfo.max included (an overflow-free VJP)."""
    check_oracle(case, target, strict=strict)


# ----------------------------------------------------------------------------------------------
# laws of softmax itself
# ----------------------------------------------------------------------------------------------
@invariant(normalized)
def unit_row_sums(case, target):
    """sum_i y_i = 1 for every finite row of a normalized op (softmax), summed in FP64. Bound:
    bounds.unit_row_sum_bound (each y_i is within tol_i of the oracle)."""
    (x,) = case.tensors(target.device)
    y = op_call(case, target, x).double()
    ref, tol = truth_bound(case, [x])
    rows = finite_rows(x) & torch.isfinite(ref).all(-1) if x.shape[-1] else finite_rows(x)
    err = (y.sum(-1) - 1).abs()
    bound = B.unit_row_sum_bound(tol, x.shape[-1])
    bad = rows & ~(err <= bound)
    if x.shape[-1] and bool(bad.any()):
        i = worst(bad, err / bound)
        fail(case, target, "row does not sum to 1", i, 1.0, y.sum(-1)[i], bound[i])


@invariant(has_range)
def within_range(case, target):
    """Every output lies in the op's exact interval (its spec's out_range): 0 <= softmax <= 1 and
    log_softmax <= 0, exactly: no rounding can leave these intervals (1/s <= 1 and exp(d) <= 1 for
    d <= 0 in every correctly rounded arithmetic)."""
    (x,) = case.tensors(target.device)
    out = op_call(case, target, x).double()
    lo, hi = case.spec.out_range
    bad = ~torch.isnan(out) & ((out < lo) | (out > hi))
    if bool(bad.any()):
        i = worst(bad, out.abs())
        fail(case, target, f"value outside [{lo}, {hi}]", i, hi, out[i])


@invariant(forward, families=("grid",), strict="shift_invariance_bitwise")
def shift_invariance(case, target, strict=False):
    """op(x + c) against op(x) when x + c is exact (grid values, strategies.grid_value, and a shift
    of 37.25, or 37 for bfloat16). default: softmax and log_softmax agree within the sum of their
    two oracle tolerances, logsumexp(x + c) - c within that plus the rounding of the subtraction of
    c; a kernel whose result moved by more has no max subtraction or drops low bits of x - max.
    strict (shift_invariance_bitwise): softmax and log_softmax bitwise, since x - max(x) is then
    exactly the same and a kernel that subtracts the max computes identical values. Not default:
    an implementation may legitimately form the result another way (inductor's log_softmax on a
    GPU breaks the bitwise law while staying within its bound)."""
    (x,) = case.tensors(target.device)
    c = GRID_SHIFT.get(case.dtype, 37.25)
    xs = x.double() + c
    assume(bool((xs.to(case.dtype).double() == xs)[~torch.isnan(xs)].all()))
    xs = xs.to(case.dtype)
    a = op_call(case, target, x)
    b = op_call(case, target, xs)
    call = f"out = target.{case.op}(x + {c})  # vs target.{case.op}(x)"
    if case.spec.reduces:  # the output moves by c: lse(x + c) = lse(x) + c
        ref, tol = truth_bound(case, [x], returned=a.dtype)
        _, tol2 = truth_bound(case, [xs], returned=b.dtype)
        tol = agree(tol, tol2, formed=ref.abs() + abs(c), dtype=a.dtype)
        assert_close(case, target, b.double() - c, a.double(), tol,
                     f"logsumexp(x + {c}) - {c} != logsumexp(x)", call, dtype=a.dtype)
    elif strict:
        assert_bitwise(case, target, b, a, f"{case.op}(x + {c}) != {case.op}(x)", call)
    else:
        _, tol = truth_bound(case, [x])
        assert_close(case, target, b.double(), a.double(), agree(tol, tol), f"{case.op}(x + {c}) != {case.op}(x)",
                     call)


@invariant(forward)
def permutation_equivariance(case, target):
    """op(x[..., p]) == op(x)[..., p] (logsumexp: unchanged) for a reversal-and-rotation p of the
    columns. Summation order may differ, so each side is held to its oracle bound:
    agree(tol, tol)."""
    (x,) = case.tensors(target.device)
    D = x.shape[-1]
    assume(D >= 2)
    p = torch.roll(torch.arange(D - 1, -1, -1, device=x.device), D // 3)
    a = op_call(case, target, x[..., p])
    b = op_call(case, target, x)
    ref, tol = truth_bound(case, [x], returned=b.dtype)
    if not case.spec.reduces:
        b, ref, tol = b[..., p], ref[..., p], tol[..., p]
    assert_close(case, target, a.double(), b.double(), agree(tol, tol),
                 "permuting the columns changed the result",
                 f"p = torch.roll(torch.arange({D - 1}, -1, -1, device=x.device), {D // 3})  # reversed, then rolled\n"
                 f"out = target.{case.op}(x[..., p])  # vs target.{case.op}(x)"
                 + ("" if case.spec.reduces else "[..., p]"), dtype=b.dtype)


@invariant(elementwise)
def order_preserving(case, target):
    """x_i <= x_j implies y_i <= y_j (and equal logits give equal outputs), exactly: exp, log and
    division by a common s are monotone under correct rounding."""
    (x,) = case.tensors(target.device)
    assume(x.shape[-1] >= 2)
    out = op_call(case, target, x).double()
    xs, idx = torch.sort(x.double(), dim=-1)
    ys = torch.gather(out, -1, idx)
    rows = finite_rows(x) & ~torch.isnan(out).any(-1)
    step_bad = (ys[..., 1:] < ys[..., :-1]) | ((xs[..., 1:] == xs[..., :-1]) & (ys[..., 1:] != ys[..., :-1]))
    bad = step_bad & rows[..., None]
    if bool(bad.any()):
        i = worst(bad, (ys[..., :-1] - ys[..., 1:]).abs())
        fail(case, target, "a larger logit got a smaller output (in sorted order)",
             i, ys[..., :-1][i], ys[..., 1:][i])


@invariant(elementwise, families=("constant",))
def constant_row_uniform(case, target):
    """A constant finite row gives the oracle's value at a row of zeros, the same for every
    element (softmax 1/D, log_softmax -log D), within the oracle bound (here d = 0, H = 0, so only
    the sum's depth and the final rounding remain)."""
    (x,) = case.tensors(target.device)
    assume(x.shape[-1] >= 1 and bool(torch.isfinite(x.double()).all()))
    assume(bool((x == x[..., :1]).all()))  # the law needs constant rows, whatever drew them
    out = op_call(case, target, x)
    ref = case.spec.oracle(torch.zeros(out.shape, dtype=torch.float64, device=out.device), **case.kwargs())
    _, tol = truth_bound(case, [x])
    assert_close(case, target, out, ref, tol, "constant row is not uniform")


@invariant(named("log_softmax"), families=("moderate", "huge", "grid", "one_hot", "constant", "neg_inf_blocks"),
           needs=("op:logsumexp",))
def log_softmax_is_x_minus_logsumexp(case, target):
    """log_softmax(x) == x - logsumexp(x) (each from the target), within tol(log_softmax) +
    tol(logsumexp) (at the dtype logsumexp returned) + rounding of the subtraction
    (tolerances.agree)."""
    (x,) = case.tensors(target.device)
    assume(x.shape[-1] >= 1)
    z = run(target, "log_softmax", x).double()
    lse = run(target, "logsumexp", x)
    _, tl_ = truth_at("logsumexp", case.dtype, [x], returned=lse.dtype)
    lse = lse.double()
    rhs = x.double() - lse[..., None]
    _, tz = truth_at("log_softmax", case.dtype, [x])
    tol = agree(tz, tl_[..., None], formed=rhs, dtype=case.dtype)
    rows = finite_rows(x)
    rhs = torch.where(rows[..., None], rhs, z)  # edge rows are the oracle invariant's business
    assert_close(case, target, z, rhs, tol,
                 "log_softmax(x) != x - logsumexp(x)", "out = target.log_softmax(x) - (x - target.logsumexp(x)[..., None])")


@invariant(named("log_softmax"), needs=("op:softmax",))
def exp_log_softmax_is_softmax(case, target):
    """exp(log_softmax(x)) == softmax(x), within tol(softmax) + z's error through exp
    (bounds.exp_log_softmax_bound)."""
    (x,) = case.tensors(target.device)
    z = run(target, "log_softmax", x).double()
    y = run(target, "softmax", x).double()
    _, tz = truth_at("log_softmax", case.dtype, [x])
    _, ty = truth_at("softmax", case.dtype, [x])
    ez = torch.exp(z)
    tol = B.exp_log_softmax_bound(ty, ez, tz)
    assert_close(case, target, ez, y, tol, "exp(log_softmax(x)) != softmax(x)",
                 "out = target.log_softmax(x).double().exp()  # vs target.softmax(x)")


# ----------------------------------------------------------------------------------------------
# explicit VJPs
# ----------------------------------------------------------------------------------------------
@invariant(vjp)
def vjp_rows_sum_to_zero(case, target):
    """The VJP of a shift-invariant map sums to zero over each row. With the given (rounded) y:
    sum(dx) = dot * (1 - sum(y)) exactly (softmax); sum(dz) * (1 - sum(exp z)) (log_softmax).
    Bound: bounds.vjp_row_sum_bound (sum_i tol_i and the FP64 sums'). Rows with non-finite inputs, or whose
    exact VJP overflows the dtype, are left to matches_oracle; so are rows beyond ordinary
    magnitude (tolerances.vjp_in_range, the strict tier's)."""
    a, g = case.tensors(target.device)
    dx = op_call(case, target, a, g).double()
    ref, tol = truth_bound(case, [a, g])
    a64, g64 = a.double(), g.double()
    # everything in units of s, the power of two above max |g| (clamped at 2**1023): no FP64 sum
    # below can overflow where the exact one is finite (float64 cotangents near finfo.max; the
    # outputs then sum to at most about 2 D max|g|)
    s = oracles.reference._scale(g64)
    if case.spec.forward == "softmax":
        expected = (a64 * (g64 / s)).sum(-1) * (1 - a64.sum(-1))
    else:
        expected = (g64 / s).sum(-1) * (1 - torch.exp(a64).sum(-1))
    # rows whose exact VJP overflows the dtype are excluded: there inf is the right output
    fits = (ref.abs() <= torch.finfo(case.dtype).max).all(-1)
    rows = finite_rows(a) & finite_rows(g) & fits & B.vjp_in_range(case.op, a64, g64, case.dtype)
    total = (dx / s).sum(-1)
    bound = B.vjp_row_sum_bound(tol / s, ref / s, expected, a.shape[-1])
    bad = rows & ~((total - expected).abs() <= bound)
    if a.shape[-1] and bool(bad.any()):
        i = worst(bad, (total - expected).abs() / bound)
        u = s[..., 0][i]
        fail(case, target, "VJP row does not sum to its exact value (about 0)",
             i, expected[i] * u, total[i] * u, bound[i] * u)


@invariant(vjp_of_softmax)
def softmax_vjp_within_cotangent_spread(case, target):
    """|dx_i| <= |y_i| (sum_j |y_j| (max g - min g) + |1 - sum_j y_j| |g_i|), plus the kernel's
    tolerance. The softmax VJP at any y is dx_i = y_i sum_j y_j (g_i - g_j) + y_i (1 - sum y) g_i,
    so its exact value never leaves that bound (about max|g| / 2 at most, for a softmax output),
    and a kernel within its tolerance table entry (matches_oracle's bound) never leaves it by more.
    Unlike matches_oracle, the law does not rest on the FP64 oracle's value: at y = [1, 0],
    dy = [-max, max] (float64) a kernel and an oracle that both form 0 * inf read NaN alike. In
    units of s, the power of two above max|g| (no float64 overflow); the bound is evaluated in
    float64 (bounds.cotangent_spread_bound). Rows with non-finite inputs are left
    to matches_oracle, rows beyond ordinary magnitude (tolerances.vjp_in_range) to
    matches_oracle_strict."""
    a, g = case.tensors(target.device)
    n = a.shape[-1]
    dx = op_call(case, target, a, g).double()
    if not n:
        return
    _, tol = truth_bound(case, [a, g])
    y, g64 = a.double(), g.double()
    s = oracles.reference._scale(g64)
    gs = g64 / s
    spread = gs.amax(-1, keepdim=True) - gs.amin(-1, keepdim=True)
    exact = y.abs() * (y.abs().sum(-1, keepdim=True) * spread + (1 - y.sum(-1, keepdim=True)).abs() * gs.abs())
    bound = B.cotangent_spread_bound(exact, tol / s, n)
    rows = finite_rows(a) & finite_rows(g) & B.vjp_in_range(case.op, y, g64, case.dtype)
    bad = rows[..., None] & ~((dx / s).abs() <= bound)
    if bool(bad.any()):
        i = worst(bad, (dx / s).abs() / bound)
        fail(case, target,
             f"softmax VJP outside its cotangent's spread: {int(bad.sum())} of {bad.numel()} elements "
             "(expected: the exact bound; tolerance: the kernel's)", i, exact[i] * s[i[:-1] + (0,)], dx[i], tol[i])


@invariant(vjp, families=("moderate", "grid", "one_hot", "constant", "neg_inf_blocks", "huge"))
def vjp_matches_fp64_autograd(case, target):
    """VJP(y_r, g) == torch FP64 autograd of the forward at x, where y_r is the forward rounded to
    dtype. Bound: tol(VJP at y_r) + the effect of rounding y (bounds.autograd_vjp_bound)."""
    x = case.inputs[0].values(target.device).double().requires_grad_(True)
    assume(x.shape[-1] >= 1 and bool(torch.isfinite(x).all()))
    a, g = case.tensors(target.device)
    dx = op_call(case, target, a, g)
    out64 = lookup(case.spec.forward).torch_ref(x)
    g_log = case.logical(1, target.device).double()
    assume(bool(torch.isfinite(g_log).all()))
    (auto,) = torch.autograd.grad(out64, x, g_log)
    # torch's FP64 backward forms sum(g) / sum(y * g) unscaled: where that overflows, the
    # reference is not the exact VJP, and matches_oracle (scaled) is the check that applies
    assume(bool(torch.isfinite(auto).all()))
    _, tol = truth_bound(case, [a, g])
    _, fwd64 = truth_at(case.spec.forward, torch.float64, [x.detach()])
    bound = B.autograd_vjp_bound(case.op, case.dtype, tol, out64.detach(), g_log, fwd64, auto.shape, a.shape)
    if a.shape != auto.shape:  # expanded layout on y: compare against the broadcast
        auto = auto.expand(a.shape)
    rows = B.vjp_in_range(case.op, a.double(), g.double(), case.dtype)  # beyond: matches_oracle_strict
    assert_close(case, target, dx, auto.detach(), bound,
                 "VJP differs from FP64 autograd", only=rows[..., None])


@invariant(vjp, families=("moderate", "grid", "one_hot", "constant"), max_cols=16)
def vjp_matches_finite_differences(case, target):
    """VJP(y_r, g)_j == (L(x + h e_j) - L(x - h e_j)) / 2h, L = sum(forward64(x) * g), h = 1e-5.
    Bound: VJP tolerance + rounding-of-y effect + truncation + roundoff
    (bounds.finite_difference_bound)."""
    xv = case.inputs[0].values(target.device).double()
    assume(xv.numel() >= 1 and bool(torch.isfinite(xv).all()) and float(xv.abs().max()) < 1e4)
    a, g = case.tensors(target.device)
    g_log = case.inputs[1].values(target.device).double()
    assume(bool(torch.isfinite(g_log).all()) and float(g_log.abs().max()) < 1e30 and a.shape == xv.shape)
    dx = op_call(case, target, a, g).double()
    fwd = lookup(case.spec.forward).oracle
    cols = sorted({0, xv.shape[-1] // 2, xv.shape[-1] - 1})
    fd = oracles.fd_grad(fwd, xv, g_log, cols)
    _, tol = truth_bound(case, [a, g])
    bound = B.finite_difference_bound(case.op, case.dtype, tol, fwd(xv), xv, g_log, 1e-5, cols)
    assert_close(case, target, dx[..., cols], fd, bound,
                 f"VJP differs from central differences at columns {cols}")


def one_graph_per_backward(fn):
    """fn as a function whose every backward runs on a graph of its own: the returned function's
    forward is fn's (without autograd), and each of its backward calls runs fn again on the saved
    input and differentiates that fresh output once. torch.autograd.gradcheck differentiates the
    output of one call several times (retain_graph=True), which a correct backward may refuse
    (torch.compile's, with donated buffers: "This backward function was compiled with non-empty
    donated buffers which requires create_graph=False and retain_graph=False"); whether a backward
    survives a second call on its graph is autograd_backward_twice's law."""
    class _OneGraphPerBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return fn(x)

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            with torch.enable_grad():
                fresh = x.detach().requires_grad_(True)
                (gx,) = torch.autograd.grad(fn(fresh), fresh, g)
            return gx

    return _OneGraphPerBackward.apply


@invariant(one_differentiable_input, needs=("autograd", "float64"), families=("moderate", "grid", "one_hot"),
           max_cols=12, dtypes=(torch.float64,))
def gradcheck_float64(case, target):
    """torch.autograd.gradcheck of the differentiable op in float64 (finite differences against
    the registered backward, torch's own tolerances atol=1e-5, rtol=1e-3), in its fast mode: a
    random projection u^T J v of the Jacobian, two forward calls and one backward per input rather
    than two forward calls per element and one backward per output element (autograd's gradient,
    entry by entry in every dtype, is autograd_composition's law against the FP64 VJP; a wrong
    backward moves the projection almost surely). Each backward runs on a graph of its own
    (one_graph_per_backward): gradcheck's reuse of one graph for several backward calls is not
    the target's contract, and a backward that refuses it is correct. Runs where the target is
    differentiable in float64 (a library that computes in float32 only is skipped, with its
    refusal as the reason). The reproducer runs the full check, which prints the whole
    Jacobian."""
    assume(case.dtype == torch.float64)
    (x,) = case.tensors(target.device)
    assume(0 < x.numel() <= 64 and bool(torch.isfinite(x).all()))
    x = x.detach().contiguous().requires_grad_(True)  # gradcheck perturbs in place: no stride-0 axes
    try:
        ok = torch.autograd.gradcheck(one_graph_per_backward(lambda t: op_call(case, target, t)), (x,), eps=1e-6,
                                      atol=1e-5, rtol=1e-3, raise_exception=True, fast_mode=True)
    except RuntimeError as e:  # torch's GradcheckError
        kw = "".join(f", {k}={v!r}" for k, v in case.kwargs().items())
        fn = f"lambda t: target.{case.op}(t{kw})" if kw else f"target.{case.op}"
        name = case.tensor_names()[0]
        fail(case, target, f"gradcheck failed: {str(e).splitlines()[0]}",
             call="\n".join([
                 "from torch.autograd.gradcheck import GradcheckError",
                 "from softmax_properties.properties.families.softmax.laws import one_graph_per_backward",
                 "try:  # the full check: every Jacobian entry, each backward on a graph of its own",
                 f"    out = torch.autograd.gradcheck(one_graph_per_backward({fn}), "
                 f"({name}.detach().contiguous().requires_grad_(),), eps=1e-6, atol=1e-5, rtol=1e-3)",
                 "except GradcheckError as e:",
                 "    out = f'gradcheck failed: {e}'"]))
    assert ok


# ----------------------------------------------------------------------------------------------
# layout, rows and dim
# ----------------------------------------------------------------------------------------------
def _agree(case, target, out, base, args, strict, what, call=None, truth=None):
    """Two results of the same op on the same values: bitwise in the strict tier; in the default
    tier within the sum of their two oracle tolerances (each is within its own of the truth), NaN
    patterns and infinities exactly, on the rows a VJP law covers (vjp_rows). truth: the case's
    spec.truth at args, where the caller compares several results against one base."""
    if strict:
        assert_bitwise(case, target, out, base, what, call=call)
        return
    if out.shape != base.shape or out.dtype != base.dtype:
        fail(case, target, f"{what}: shape/dtype {tuple(out.shape)}/{out.dtype} vs {tuple(base.shape)}/{base.dtype}",
             call=call, kind=WrongOutput)
    e = (truth if truth is not None else case.spec.truth(case, args)).outputs[0].returned_as(base.dtype)
    assert_close(case, target, out, base.double(), agree(e.tol, e.tol), what, call, only=e.only, dtype=e.dtype)


@invariant(softmax_family, strict="layout_invariance_bitwise")
def layout_invariance(case, target, strict=False):
    """A strided input gives the result of its contiguous copy. default: within the two results'
    oracle tolerances (torch's CPU logsumexp reduces a transposed float32 (2, 32) tensor in
    another order: 2.9899964 vs 2.9899962, both correct). strict (layout_invariance_bitwise):
    bitwise, since only the summation order could differ, and a kernel whose order depends on the
    memory layout gives callers results that change with how a tensor happens to be stored."""
    args = case.tensors(target.device)
    assume(any(not t.is_contiguous() for t in args))
    a = op_call(case, target, *args)
    b = op_call(case, target, *[t.contiguous() for t in args])
    _agree(case, target, a, b, args, strict, "strided input differs from its contiguous copy",
           call=f"{case.call_code()}  # vs the same on .contiguous() copies")


def other_rows_replaced(t: torch.Tensor, dtype, junk: tuple) -> torch.Tensor:
    """A copy of t in t's own layout (strides, storage offset, the gaps of its storage) whose rows
    1.. hold the junk values in turn ("max": finfo.max, "-max" its negative), row 0 t's own values.
    A tensor with a stride-0 (expanded) batch axis cannot hold other rows' values apart from row
    0: it is copied contiguously first."""
    lead = t.shape[:-1]
    if t.numel() == 0 or any(st_ == 0 and n > 1 for st_, n in zip(t.stride()[:-1], lead)):
        p = t.contiguous().clone()
    else:
        p = torch.empty(0, dtype=t.dtype, device=t.device).set_(
            t.untyped_storage().clone(), t.storage_offset(), t.shape, t.stride())
    if p.numel():
        r = torch.arange(math.prod(lead), device=t.device).reshape(*lead, 1)
        big = torch.finfo(dtype).max
        vals = [big if v == "max" else -big if v == "-max" else v for v in junk]
        fill = torch.tensor(vals, dtype=torch.float64, device=t.device)[r % len(vals)].to(t.dtype)
        p.copy_(torch.where(r == 0, p, fill))
    return p


# what row_independence writes over the other rows: non-finite values, and finite extremes (a
# kernel may pick its path from whether the batch holds a non-finite value: then only one of the
# two differs from the input in that respect)
_JUNK = {"nan/inf/-inf/max": (math.nan, math.inf, -math.inf, "max"), "max/-max/0/1": ("max", "-max", 0.0, 1.0)}


@invariant(softmax_family, strict="row_independence_bitwise")
def row_independence(case, target, strict=False):
    """Each row's result depends on that row alone: overwriting every other row (in the input's
    own layout) with NaN, inf, -inf and finfo.max in turn, or with finite values only (+-finfo.max,
    0, 1), leaves row 0 of the output unchanged. default: within the two calls' oracle tolerances,
    as every law comparing two calls of a kernel that may pick its code path (and so its rounding)
    from what it is given; strict (row_independence_bitwise): bitwise. (A kernel whose sum order
    changes with whether the batch holds a non-finite value shows it against the finite junk
    when the input holds one outside row 0, against the non-finite junk when it holds none.)"""
    args = case.tensors(target.device)
    lead = args[0].shape[:-1]
    assume(len(lead) >= 1 and math.prod(lead) >= 2 and args[0].shape[-1] >= 1)
    a = op_call(case, target, *args)
    a0 = a.reshape(-1, *a.shape[len(lead):])[:1]
    row0 = [t.reshape(-1, t.shape[-1])[:1] if t.shape[:-1] == lead else t for t in args]
    names = ", ".join(case.tensor_names())
    for name, junk in _JUNK.items():
        b = op_call(case, target, *[other_rows_replaced(t, case.dtype, junk) for t in args])
        b0 = b.reshape(-1, *b.shape[len(lead):])[:1]
        dt = f"torch.{str(case.dtype).replace('torch.', '')}"
        call = ("from softmax_properties.properties.families.softmax.laws import other_rows_replaced\n"
                f"# rows 1.. replaced by {name}\n"
                f"{names}, = (other_rows_replaced(t, {dt}, {junk!r}) for t in ({names},))\n"
                f"{case.call_code()}  # row 0 vs row 0 of the same call on the unchanged inputs")
        _agree(case, target, b0, a0, row0, strict, "row 0 changed when other rows changed", call=call)


@invariant(takes_dim, needs=("dim",), strict="dim_argument_bitwise")
def dim_argument(case, target, strict=False):
    """op(x.movedim(-1, k), dim=k) == op(x) with the axis moved back, for every k and for negative
    k. default: within the two results' oracle tolerances (torch's softmax along a non-last dim
    runs another kernel: [0.37719, -0.39631] along dim 0 gives 0.31572136 against 0.31572133 along
    the last, both well within the bound); strict (dim_argument_bitwise): bitwise, since reducing a
    non-last axis is the same computation on the same rows."""
    args = case.tensors(target.device)
    nd = args[0].ndim
    assume(nd >= 2)
    base = op_call(case, target, *args)
    # the truth once per case, not once per dim: 2 nd comparisons share it (4.6 truths an example
    # were three quarters of the law's time on the CPU)
    truth = None if strict else case.spec.truth(case, args)
    for k in range(nd):
        moved = [t.movedim(-1, k) for t in args]
        for dim in (k, k - nd):
            out = op_call(case, target, *moved, dim=dim)
            if not case.spec.reduces:
                out = out.movedim(k, -1)
            _agree(case, target, out, base, args, strict, f"dim={dim} differs from the last-axis result",
                   call=(f"out = target.{case.op}(*[t.movedim(-1, {k}) for t in ({', '.join(case.spec.args)},)], "
                         f"dim={dim})"), truth=truth)


@invariant(forward, families=(MASKED_CHUNKS,))
def masked_chunks_match_oracle(case, target):
    """Rows longer than a power of two 2**k (2**9 <= 2**k <= the profile's longest row) that hold
    whole blocks of -inf aligned to powers of two, [i 2**j, (i + 1) 2**j) for 9 <= j <= k
    (strategies.masked_chunks_input), match the FP64 oracle within its bound (matches_oracle's
    check). A kernel that cuts its rows into chunks of 2**j columns, declared in
    block_boundaries() or not, meets a chunk of nothing but -inf, whose own max is -inf. (The
    cross-entropy laws meet such chunks through the neg_inf_blocks family, which aims at the same
    powers of two; a law of their own here cost the CPU run ~13 s for rows of 2049 classes.) Tier
    default: attention masks and vocabulary masks produce such rows."""
    check_oracle(case, target)
