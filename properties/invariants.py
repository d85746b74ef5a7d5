"""The invariants. Each is one small registered function; its docstring states the law and where
its bound comes from. ``@invariant(ops...)`` applies it to every listed op the target offers;
``needs`` names target capabilities ("dim": the function takes ``dim=``, "autograd": its output
is differentiable). Adding an invariant touches this file only: the runner parametrizes over
REGISTRY.

Every check receives ``case`` (a drawn Case) and ``target`` (the module under test) and calls
``fail(...)`` with the worst element and a reproducer when the law does not hold.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import warnings
import zlib
from dataclasses import dataclass
from typing import Callable

import hypothesis
import torch
from hypothesis import assume, reject

from softmax_properties import oracles

from . import tolerances as T
from .case import TIER_OF, Case, CECase, MergeCase, StatesCase, fail, tree_code, tree_depth, tree_leaves
from .failures import WrongOutput, accept_context_loss, device_assert
from .ops import OPS
from .strategies import GRID_SHIFT, MANY_ROWS, MASKED_CHUNKS

FORWARD = ("softmax", "log_softmax", "logsumexp")
VJP = ("softmax_backward", "log_softmax_backward")
ALL = FORWARD + VJP


TIERS = ("default", "strict")


@dataclass(frozen=True)
class Invariant:
    name: str
    check: Callable
    ops: tuple
    needs: tuple = ()
    families: tuple = None  # restrict the first input's logit family (None: all)
    max_cols: int = None  # cap on row length (for checks that cost O(D) evaluations per column)
    tier: str = "default"  # "default" or "strict" (docs/tiers.md)


REGISTRY: list = []
# (op, dtype) -> {statistic: largest value}: matches_oracle's error as a fraction of each tier's
# bound, in ulps of the reference, and torch's own error on the same inputs (plugin summary)
WORST_ULP: dict = {}


def invariant(*ops, needs=(), families=None, max_cols=None, tier="default", strict=None):
    """Register fn as an invariant of the given tier for ops. ``needs``: target capabilities ("dim",
    "autograd", or "op:NAME", a partner op the law calls). ``strict``: the name of fn's strict-tier
    twin, registered too: the same law called with ``strict=True`` (the bitwise or untoleranced
    form of a law whose default form is toleranced)."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")

    def deco(fn):
        def add(name, check, t):
            if any(inv.name == name for inv in REGISTRY):
                raise ValueError(f"invariant {name!r} is registered twice")
            REGISTRY.append(Invariant(name, check, tuple(ops), tuple(needs), families, max_cols, t))
            TIER_OF[name] = t
        add(fn.__name__, fn, tier)
        if strict:
            add(strict, functools.partial(fn, strict=True), "strict")
        return fn
    return deco


def record_worst(op, dtype, **stats):
    """Keep the largest value of each statistic per (op, dtype) for the run's summary."""
    d = WORST_ULP.setdefault((op, str(dtype).replace("torch.", "")), {})
    for k, v in stats.items():
        if v == v:  # not NaN
            d[k] = max(d.get(k, 0.0), float(v))


# ----------------------------------------------------------------------------------------------
# shared helpers
# ----------------------------------------------------------------------------------------------
class _Refusals:
    """The target's refusals within one test: how many, and the first one's message, so a test
    whose every example the target refused is skipped with the target's own reason."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.count, self.first = 0, None

    def add(self, e: BaseException):
        self.add_message(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")

    def add_message(self, message: str):
        """A refusal described by its message (one made in the isolation worker)."""
        self.count += 1
        if self.first is None and message:
            self.first = message

    def describe(self) -> str:
        if not self.count:
            return "the target refused none"
        return f"the target refused {self.count} example(s), the first with {self.first}"


refusals = _Refusals()


def run(target, op, *tensors, **kw):
    """Call the target; a declared refusal discards the example, anything else propagates."""
    try:
        return target.call(op, *tensors, **kw)
    except target.refusals as e:
        refusals.add(e)
        reject()


def truth(op: str, dtype, args, depth=T.depth_any):
    """(reference, tolerance) in float64 for op at the given (laid-out) arguments. depth: the
    reduction-depth model of the bound (tolerances.depth_any, the default tier's any summation
    order, or tolerances.depth, the strict tier's)."""
    a = [t.detach().to(torch.float64) for t in args]
    D = a[0].shape[-1]
    dep = depth(D)
    if op in FORWARD:
        m, fin, d, e, s = oracles.row_stats(a[0])
        y = torch.where(fin[..., None], e / s[..., None], 0.0)
        H = torch.where(y > 0, y * d.abs(), 0.0).sum(-1)
        logs = torch.log(s)
        ref = OPS[op].oracle(a[0])
        if op == "softmax":
            eps = T.softmax_bound(dtype, d, H, dep, ref)
        elif op == "log_softmax":
            eps = T.log_softmax_bound(dtype, d, H, dep, logs, ref)
        else:
            eps = T.logsumexp_bound(dtype, m, H, dep, logs, ref)
    elif op == "softmax_backward":
        y, g = a
        ref = oracles.softmax_backward(y, g)
        dot = (y * g).sum(-1)
        eps = T.softmax_backward_bound(dtype, y, g, dot, (y * g).abs().sum(-1), dep, ref, D)
    else:
        z, g = a
        ref = oracles.log_softmax_backward(z, g)
        # the sums in units of 2**64, so that they cannot overflow (exact scaling; the dropped
        # tail below 2**-1010 is far under the FTZ floor of the tolerance)
        gs = g * 2.0**-64
        eps = T.log_softmax_backward_bound(dtype, z, g, gs.sum(-1), gs.abs().sum(-1), dep, ref, D, 2.0**64)
    out_dtype = OPS[op].out_dtype(dtype)
    return ref, T.total_tolerance(eps, ref, out_dtype, dtype)


def worst(bad: torch.Tensor, score: torch.Tensor):
    """Index of the worst failing element (largest score among the bad ones)."""
    s = torch.where(bad, torch.nan_to_num(score.double(), nan=math.inf, posinf=math.inf), -1.0)
    flat = int(torch.argmax(s.reshape(-1)))
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), bad.shape))


def assert_close(name, case, target, out, ref, tol, what, call=None, only=None):
    """out within tol of ref (tolerances.compare); only: a bool mask (broadcast to ref) of the
    elements the law covers, None for all."""
    out_dtype = OPS[case.op].out_dtype(case.dtype)
    bad = T.compare(out, ref, tol, out_dtype)
    if only is not None:
        bad = bad & only
    if bool(bad.any()):
        i = worst(bad, (out.double() - ref).abs() / tol.clamp_min(1e-300))
        fail(name, case, target, f"{what}: {int(bad.sum())} of {bad.numel()} elements out of bounds",
             i, ref[i], out[i], tol[i], call)


def assert_bitwise(name, case, target, a, b, what, call=None):
    if a.shape != b.shape or a.dtype != b.dtype:
        fail(name, case, target, f"{what}: shape/dtype {tuple(a.shape)}/{a.dtype} vs {tuple(b.shape)}/{b.dtype}", call=call,
             kind=WrongOutput)
    same = (a == b) | (torch.isnan(a) & torch.isnan(b))
    if not bool(same.all()):
        i = worst(~same, (a.double() - b.double()).abs())
        fail(name, case, target, f"{what}: {int((~same).sum())} elements differ bitwise", i, b[i], a[i], call=call)


def finite_rows(t: torch.Tensor) -> torch.Tensor:
    return torch.isfinite(t.double()).all(-1)


@contextlib.contextmanager
def poisoned_allocations():
    """torch.empty and friends return NaN-filled memory (torch's deterministic-mode fill)."""
    import torch.utils.deterministic as det
    prev = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
            det.fill_uninitialized_memory)
    torch.use_deterministic_algorithms(True, warn_only=True)
    det.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(prev[0], warn_only=prev[1])
        det.fill_uninitialized_memory = prev[2]


def _call_code(case):
    return f"out = target.{case.op}({', '.join(case.spec.args)})"


# ----------------------------------------------------------------------------------------------
# agreement with the FP64 oracle
# ----------------------------------------------------------------------------------------------
def vjp_rows(case, args, strict):
    """The rows a VJP law covers: all of them in the strict tier, those of ordinary magnitude
    (tolerances.vjp_in_range) in the default tier; None (every row) for forward ops."""
    if strict or not OPS[case.op].is_vjp:
        return None
    return T.vjp_in_range(case.op, args[0].double(), args[1].double(), case.dtype)


def _torch_reference():
    from .targets import torch as torch_target
    return torch_target


def _record(case, target, args, out, ref, tol):
    """Feed the run's summary (plugin.py): the error as a fraction of the default and strict
    bounds, in ulps of the reference, and torch's own error on the same inputs as a fraction of
    the default bound (PyTorch's OpInfo criterion: how close the target is next to how close the
    reference library is). Steers Hypothesis towards the worst case."""
    if not getattr(target, "record", True) or not isinstance(out, torch.Tensor) or out.shape != ref.shape:
        return
    fin = torch.isfinite(ref) & torch.isfinite(out.double())
    if not bool(fin.any()):
        return
    err = (out.double() - ref).abs()[fin]
    frac = (err / tol[fin].clamp_min(1e-300)).max().item()
    _, tol_s = truth(case.op, case.dtype, args, T.depth)
    stats = dict(default=frac, strict=(err / tol_s[fin].clamp_min(1e-300)).max().item(),
                 ulps=(err / T.ulp(ref[fin], OPS[case.op].out_dtype(case.dtype))).max().item())
    ref_mod = _torch_reference()
    if target.module is not ref_mod and hasattr(target, "module"):
        try:
            t_out = getattr(ref_mod, case.op)(*args).double()
            t_fin = fin & torch.isfinite(t_out)
            if bool(t_fin.any()):
                stats["torch"] = ((t_out - ref).abs()[t_fin] / tol[t_fin].clamp_min(1e-300)).max().item()
        except Exception:  # torch does not offer this case (e.g. a dtype on this device): no figure
            pass
    record_worst(case.op, case.dtype, **stats)
    try:  # steer the search towards the worst case; only valid inside a @given test
        hypothesis.target(frac, label=f"bound used {case.op} {str(case.dtype).replace('torch.', '')}")
    except hypothesis.errors.InvalidArgument:
        pass


@invariant(*ALL, strict="matches_oracle_strict")
def matches_oracle(case: Case, target, strict=False):
    """out == FP64 oracle(same rounded inputs) within the tolerance table's derived bound
    (properties/tolerances.py); NaN exactly where the oracle has NaN, infinities exactly.
    default: the bound for a reduction in any summation order (tolerances.depth_any), and for the
    VJPs the rows of ordinary magnitude (tolerances.vjp_in_range), so that any correct
    float32-accumulating implementation passes (torch's CPU kernels exceed the tree-depth bound
    by 1.4x at D = 4097 and 3.4x at 65536, ordinary accumulation error, not a bug).
    strict (matches_oracle_strict): the bound at the project's reduction depth (tolerances.depth)
    on every row, cotangents near finfo.max included (an overflow-free VJP)."""
    check_oracle("matches_oracle_strict" if strict else "matches_oracle", case, target, strict=strict)


def check_oracle(name, case, target, poisoned=False, strict=False):
    """matches_oracle's check under another law's name (poisoned: under NaN-poisoned
    allocations, so that an output element never written reads NaN; strict: the strict tier's
    bound on every row)."""
    args = case.tensors(target.device)
    with poisoned_allocations() if poisoned else contextlib.nullcontext():
        out = run(target, case.op, *args)
    ref, tol = truth(case.op, case.dtype, args, T.depth if strict else T.depth_any)
    if not strict:
        _record(case, target, args, out, ref, tol)
    rows = vjp_rows(case, args, strict)
    assert_close(name, case, target, out, ref, tol, "differs from the FP64 oracle",
                 only=None if rows is None else rows[..., None])


# ----------------------------------------------------------------------------------------------
# laws of softmax itself
# ----------------------------------------------------------------------------------------------
@invariant("softmax")
def unit_row_sums(case, target):
    """sum_i y_i = 1 for every finite row, summed in FP64. Bound: |sum(y) - 1| <= sum_i tol_i
    (each y_i is within tol_i of the oracle, whose row sums to 1 within D * 2**-53)."""
    (x,) = case.tensors(target.device)
    y = run(target, "softmax", x).double()
    ref, tol = truth("softmax", case.dtype, [x])
    rows = finite_rows(x) & torch.isfinite(ref).all(-1) if x.shape[-1] else finite_rows(x)
    err = (y.sum(-1) - 1).abs()
    bound = tol.sum(-1) + x.shape[-1] * 2.0**-52
    bad = rows & ~(err <= bound)
    if x.shape[-1] and bool(bad.any()):
        i = worst(bad, err / bound)
        fail("unit_row_sums", case, target, "row does not sum to 1", i, 1.0, y.sum(-1)[i], bound[i])


@invariant("softmax", "log_softmax")
def within_range(case, target):
    """0 <= softmax <= 1 and log_softmax <= 0, exactly: no rounding can leave these intervals
    (1/s <= 1 and exp(d) <= 1 for d <= 0 in every correctly rounded arithmetic)."""
    (x,) = case.tensors(target.device)
    out = run(target, case.op, x).double()
    lo, hi = (0.0, 1.0) if case.op == "softmax" else (-math.inf, 0.0)
    bad = ~torch.isnan(out) & ((out < lo) | (out > hi))
    if bool(bad.any()):
        i = worst(bad, out.abs())
        fail("within_range", case, target, f"value outside [{lo}, {hi}]", i, hi, out[i])


@invariant("softmax", "log_softmax", "logsumexp", families=("grid",), strict="shift_invariance_bitwise")
def shift_invariance(case, target, strict=False):
    """op(x + c) against op(x) when x + c is exact (grid values, strategies.grid_value, and a shift
    of 37.25, or 37 for bfloat16). default: softmax and log_softmax agree within the sum of their
    two oracle tolerances, logsumexp(x + c) - c within that plus the rounding of the subtraction of
    c; a kernel whose result moved by more has no max subtraction or drops low bits of x - max.
    strict (shift_invariance_bitwise): softmax and log_softmax bitwise, since x - max(x) is then
    exactly the same and a kernel that subtracts the max computes identical values. Not default:
    an implementation may legitimately form the result another way (inductor's log_softmax on a
    GPU breaks the bitwise law while staying within its bound)."""
    name = "shift_invariance_bitwise" if strict else "shift_invariance"
    (x,) = case.tensors(target.device)
    c = GRID_SHIFT.get(case.dtype, 37.25)
    xs = x.double() + c
    assume(bool((xs.to(case.dtype).double() == xs)[~torch.isnan(xs)].all()))
    xs = xs.to(case.dtype)
    a = run(target, case.op, x)
    b = run(target, case.op, xs)
    call = f"out = target.{case.op}(x + {c})  # vs target.{case.op}(x)"
    if case.op == "logsumexp":
        ref, tol = truth("logsumexp", case.dtype, [x])
        _, tol2 = truth("logsumexp", case.dtype, [xs])
        tol = tol + tol2 + T.ulp(ref.abs() + abs(c), a.dtype)
        assert_close(name, case, target, b.double() - c, a.double(), tol,
                     f"logsumexp(x + {c}) - {c} != logsumexp(x)", call)
    elif strict:
        assert_bitwise(name, case, target, b, a, f"{case.op}(x + {c}) != {case.op}(x)", call)
    else:
        _, tol = truth(case.op, case.dtype, [x])
        assert_close(name, case, target, b.double(), a.double(), 2 * tol, f"{case.op}(x + {c}) != {case.op}(x)", call)


@invariant("softmax", "log_softmax", "logsumexp")
def permutation_equivariance(case, target):
    """op(x[..., p]) == op(x)[..., p] (logsumexp: unchanged) for a reversal-and-rotation p of the
    columns. Summation order may differ, so each side is held to its oracle bound: |a - b| <= 2 tol."""
    (x,) = case.tensors(target.device)
    D = x.shape[-1]
    assume(D >= 2)
    p = torch.roll(torch.arange(D - 1, -1, -1, device=x.device), D // 3)
    a = run(target, case.op, x[..., p])
    b = run(target, case.op, x)
    ref, tol = truth(case.op, case.dtype, [x])
    if case.op != "logsumexp":
        b, ref, tol = b[..., p], ref[..., p], tol[..., p]
    assert_close("permutation_equivariance", case, target, a.double(), b.double(), 2 * tol,
                 "permuting the columns changed the result", "p = ...  # reversed then rolled by D // 3\n"
                 f"out = target.{case.op}(x[..., p])")


@invariant("softmax", "log_softmax")
def order_preserving(case, target):
    """x_i <= x_j implies y_i <= y_j (and equal logits give equal outputs), exactly: exp, log and
    division by a common s are monotone under correct rounding."""
    (x,) = case.tensors(target.device)
    assume(x.shape[-1] >= 2)
    out = run(target, case.op, x).double()
    xs, idx = torch.sort(x.double(), dim=-1)
    ys = torch.gather(out, -1, idx)
    rows = finite_rows(x) & ~torch.isnan(out).any(-1)
    step_bad = (ys[..., 1:] < ys[..., :-1]) | ((xs[..., 1:] == xs[..., :-1]) & (ys[..., 1:] != ys[..., :-1]))
    bad = step_bad & rows[..., None]
    if bool(bad.any()):
        i = worst(bad, (ys[..., :-1] - ys[..., 1:]).abs())
        fail("order_preserving", case, target, "a larger logit got a smaller output (in sorted order)",
             i, ys[..., :-1][i], ys[..., 1:][i])


@invariant("softmax", "log_softmax", families=("constant",))
def constant_row_uniform(case, target):
    """A constant finite row gives 1/D (log_softmax: -log D), within the oracle bound (here
    d = 0, H = 0, so only the sum's depth and the final rounding remain)."""
    (x,) = case.tensors(target.device)
    assume(x.shape[-1] >= 1 and bool(torch.isfinite(x.double()).all()))
    assume(bool((x == x[..., :1]).all()))  # the law needs constant rows, whatever drew them
    out = run(target, case.op, x)
    D = x.shape[-1]
    ref = torch.full(out.shape, 1.0 / D if case.op == "softmax" else -math.log(D), dtype=torch.float64,
                     device=out.device)
    _, tol = truth(case.op, case.dtype, [x])
    assert_close("constant_row_uniform", case, target, out, ref, tol, "constant row is not uniform")


@invariant("log_softmax", families=("moderate", "huge", "grid", "one_hot", "constant", "neg_inf_blocks"),
           needs=("op:logsumexp",))
def log_softmax_is_x_minus_logsumexp(case, target):
    """log_softmax(x) == x - logsumexp(x) (each from the target), within tol(log_softmax) +
    tol(logsumexp) + rounding of the subtraction (u |x - lse|, in float64 here)."""
    (x,) = case.tensors(target.device)
    assume(x.shape[-1] >= 1)
    z = run(target, "log_softmax", x).double()
    lse = run(target, "logsumexp", x).double()
    rhs = x.double() - lse[..., None]
    _, tz = truth("log_softmax", case.dtype, [x])
    _, tl_ = truth("logsumexp", case.dtype, [x])
    tol = tz + tl_[..., None] + T.ulp(rhs, case.dtype)
    rows = finite_rows(x)
    rhs = torch.where(rows[..., None], rhs, z)  # edge rows are the oracle invariant's business
    assert_close("log_softmax_is_x_minus_logsumexp", case, target, z, rhs, tol,
                 "log_softmax(x) != x - logsumexp(x)", "out = target.log_softmax(x) - (x - target.logsumexp(x)[..., None])")


@invariant("log_softmax", needs=("op:softmax",))
def exp_log_softmax_is_softmax(case, target):
    """exp(log_softmax(x)) == softmax(x), within tol(softmax) + exp(z) * tol(log_softmax) * (1 + tol)
    (the first-order effect of z's error through exp)."""
    (x,) = case.tensors(target.device)
    z = run(target, "log_softmax", x).double()
    y = run(target, "softmax", x).double()
    _, tz = truth("log_softmax", case.dtype, [x])
    _, ty = truth("softmax", case.dtype, [x])
    ez = torch.exp(z)
    tol = ty + ez * torch.expm1(tz.clamp_max(700))
    tol = torch.nan_to_num(tol, nan=math.inf)
    assert_close("exp_log_softmax_is_softmax", case, target, ez, y, tol, "exp(log_softmax(x)) != softmax(x)",
                 "out = target.log_softmax(x).exp() - target.softmax(x)")


# ----------------------------------------------------------------------------------------------
# explicit VJPs
# ----------------------------------------------------------------------------------------------
@invariant(*VJP)
def vjp_rows_sum_to_zero(case, target):
    """The VJP of a shift-invariant map sums to zero over each row. With the given (rounded) y:
    sum(dx) = dot * (1 - sum(y)) exactly (softmax); sum(dz) * (1 - sum(exp z)) (log_softmax).
    Bound: that term (computed in FP64) + sum_i tol_i. Rows with non-finite inputs, or whose
    exact VJP overflows the dtype, are left to matches_oracle; so are rows beyond ordinary
    magnitude (tolerances.vjp_in_range, the strict tier's)."""
    a, g = case.tensors(target.device)
    dx = run(target, case.op, a, g).double()
    ref, tol = truth(case.op, case.dtype, [a, g])
    a64, g64 = a.double(), g.double()
    # everything in units of s, the power of two above max |g| (clamped at 2**1023): no FP64 sum
    # below can overflow where the exact one is finite (float64 cotangents near finfo.max; the
    # outputs then sum to at most about 2 D max|g|)
    s = oracles.reference._scale(g64)
    if case.op == "softmax_backward":
        expected = (a64 * (g64 / s)).sum(-1) * (1 - a64.sum(-1))
    else:
        expected = (g64 / s).sum(-1) * (1 - torch.exp(a64).sum(-1))
    # rows whose exact VJP overflows the dtype are excluded: there inf is the right output
    fits = (ref.abs() <= torch.finfo(case.dtype).max).all(-1)
    rows = finite_rows(a) & finite_rows(g) & fits & T.vjp_in_range(case.op, a64, g64, case.dtype)
    total = (dx / s).sum(-1)
    bound = (tol / s).sum(-1) + 4 * a.shape[-1] * 2.0**-53 * ((ref / s).abs().sum(-1) + expected.abs())
    bad = rows & ~((total - expected).abs() <= bound)
    if a.shape[-1] and bool(bad.any()):
        i = worst(bad, (total - expected).abs() / bound)
        u = s[..., 0][i]
        fail("vjp_rows_sum_to_zero", case, target, "VJP row does not sum to its exact value (about 0)",
             i, expected[i] * u, total[i] * u, bound[i] * u)


@invariant("softmax_backward")
def softmax_vjp_within_cotangent_spread(case, target):
    """|dx_i| <= |y_i| (sum_j |y_j| (max g - min g) + |1 - sum_j y_j| |g_i|), plus the kernel's
    tolerance. The softmax VJP at any y is dx_i = y_i sum_j y_j (g_i - g_j) + y_i (1 - sum y) g_i,
    so its exact value never leaves that bound (about max|g| / 2 at most, for a softmax output),
    and a kernel within its tolerance table entry (matches_oracle's bound) never leaves it by more.
    Unlike matches_oracle, the law does not rest on the FP64 oracle's value: at y = [1, 0],
    dy = [-max, max] (float64) a kernel and an oracle that both form 0 * inf read NaN alike. In
    units of s, the power of two above max|g| (no float64 overflow); the bound is evaluated in
    float64, with a relative slack of (D + 4) 2**-52 for that. Rows with non-finite inputs are left
    to matches_oracle, rows beyond ordinary magnitude (tolerances.vjp_in_range) to
    matches_oracle_strict."""
    a, g = case.tensors(target.device)
    n = a.shape[-1]
    dx = run(target, case.op, a, g).double()
    if not n:
        return
    _, tol = truth(case.op, case.dtype, [a, g])
    y, g64 = a.double(), g.double()
    s = oracles.reference._scale(g64)
    gs = g64 / s
    spread = gs.amax(-1, keepdim=True) - gs.amin(-1, keepdim=True)
    exact = y.abs() * (y.abs().sum(-1, keepdim=True) * spread + (1 - y.sum(-1, keepdim=True)).abs() * gs.abs())
    bound = exact * (1 + (n + 4) * 2.0**-52) + tol / s
    rows = finite_rows(a) & finite_rows(g) & T.vjp_in_range(case.op, y, g64, case.dtype)
    bad = rows[..., None] & ~((dx / s).abs() <= bound)
    if bool(bad.any()):
        i = worst(bad, (dx / s).abs() / bound)
        fail("softmax_vjp_within_cotangent_spread", case, target,
             f"softmax VJP outside its cotangent's spread: {int(bad.sum())} of {bad.numel()} elements "
             "(expected: the exact bound; tolerance: the kernel's)", i, exact[i] * s[i[:-1] + (0,)], dx[i], tol[i])


@invariant(*VJP, families=("moderate", "grid", "one_hot", "constant", "neg_inf_blocks", "huge"))
def vjp_matches_fp64_autograd(case, target):
    """VJP(y_r, g) == torch FP64 autograd of the forward at x, where y_r is the forward rounded to
    dtype. Bound: tol(VJP at y_r) + the effect of rounding y (_rounded_forward_effect), with
    |dy_j| <= half an ulp of dtype + twice the
    float64 forward bound (y_r and torch's y64 are each an FP64 forward: for float64 inputs, the
    difference of two FP64 forwards, up to a few ulps, is the whole term)."""
    x = case.inputs[0].values(target.device).double().requires_grad_(True)
    assume(x.shape[-1] >= 1 and bool(torch.isfinite(x).all()))
    a, g = case.tensors(target.device)
    dx = run(target, case.op, a, g)
    fwd = torch.softmax if case.op == "softmax_backward" else torch.log_softmax
    out64 = fwd(x, -1)
    g_log = case.logical(1, target.device).double()
    assume(bool(torch.isfinite(g_log).all()))
    (auto,) = torch.autograd.grad(out64, x, g_log)
    # torch's FP64 backward forms sum(g) / sum(y * g) unscaled: where that overflows, the
    # reference is not the exact VJP, and matches_oracle (scaled) is the check that applies
    assume(bool(torch.isfinite(auto).all()))
    _, tol = truth(case.op, case.dtype, [a, g])
    # |y_r - y64|: y_r is the FP64 oracle's forward rounded to dtype (half an ulp of dtype plus the
    # oracle's own FP64 error), y64 torch's FP64 forward (its own FP64 error); each FP64 error
    # within the float64 forward bound. Negligible below float64; for float64 it is the whole term.
    _, fwd64 = truth(OPS[case.op].forward, torch.float64, [x.detach()])
    fwd64 = torch.nan_to_num(fwd64, nan=0.0)  # NaN where the forward is degenerate: no term, as before
    half_ulp = 0.5 * T.ulp(out64.detach(), case.dtype) + 2 * fwd64
    half_ulp = torch.where(torch.isfinite(out64.detach()), half_ulp, 0.0)  # -inf z rounds exactly
    extra = _rounded_forward_effect(case.op, out64.detach(), g_log, half_ulp)
    # an infinite term (z = -finfo.max) times an exact 0 (exp(z), or a zero sum) propagates nothing
    extra = torch.nan_to_num(extra, nan=0.0).reshape(auto.shape)
    if a.shape != auto.shape:  # expanded layout on y: compare against the broadcast
        auto = auto.expand(a.shape)
        extra = extra.expand(a.shape)
    rows = T.vjp_in_range(case.op, a.double(), g.double(), case.dtype)  # beyond: matches_oracle_strict
    assert_close("vjp_matches_fp64_autograd", case, target, dx, auto.detach(), tol + extra,
                 "VJP differs from FP64 autograd", only=rows[..., None])


def _rounded_forward_effect(op, out, g, du):
    """How far the exact VJP at the rounded forward output (y_r = y + dy, or z_r = z + dz, with
    |dy_i| <= du_i) can be from the VJP at the exact one, for the cotangent g.
    softmax: y_r (g - dot_r) - y (g - dot) = dy (g - dot) - (y + dy) ddot, ddot = sum_j dy_j g_j,
    so the bound is du |g - dot| + (y + du) S with S = sum_j du_j |g_j|. (The second-order part,
    du S, matters where y_i is a 16-bit subnormal: its rounding is then as large as y_i itself.)
    log_softmax: (exp(z_r) - exp(z)) sum g, at most exp(z) expm1(du) |sum g|."""
    if op == "softmax_backward":
        dot = (out * g).sum(-1, keepdim=True)
        S = (du * g.abs()).sum(-1, keepdim=True)
        return du * (g - dot).abs() + (out + du) * S
    return torch.exp(out) * torch.expm1(du) * g.sum(-1, keepdim=True).abs()


@invariant(*VJP, families=("moderate", "grid", "one_hot", "constant"), max_cols=16)
def vjp_matches_finite_differences(case, target):
    """VJP(y_r, g)_j == (L(x + h e_j) - L(x - h e_j)) / 2h, L = sum(forward64(x) * g), h = 1e-5.
    Bound: VJP tolerance + rounding-of-y effect (as for autograd) + truncation
    h^2/6 * 2 sum|g| (third derivatives of softmax are below 1 in total) + roundoff: the error of
    each FP64 evaluation of L, (log2 D + 8) 2**-53 sum_i |g_i| (|out_i| + |d_i| + 2), over h."""
    xv = case.inputs[0].values(target.device).double()
    assume(xv.numel() >= 1 and bool(torch.isfinite(xv).all()) and float(xv.abs().max()) < 1e4)
    a, g = case.tensors(target.device)
    g_log = case.inputs[1].values(target.device).double()
    assume(bool(torch.isfinite(g_log).all()) and float(g_log.abs().max()) < 1e30 and a.shape == xv.shape)
    dx = run(target, case.op, a, g).double()
    fwd = oracles.softmax if case.op == "softmax_backward" else oracles.log_softmax
    cols = sorted({0, xv.shape[-1] // 2, xv.shape[-1] - 1})
    fd = oracles.fd_grad(fwd, xv, g_log, cols)
    _, tol = truth(case.op, case.dtype, [a, g])
    h = 1e-5
    sg = g_log.abs().sum(-1, keepdim=True)
    out = fwd(xv)
    rnd = _rounded_forward_effect(case.op, out, g_log, 0.5 * T.ulp(out, case.dtype))
    # each L(x +- h e_j) is off by at most (log2 D + 8) u sum_i |g_i| (|out_i| + |d_i| + 2) in FP64
    d = xv - xv.max(-1, keepdim=True).values
    l_err = (math.log2(xv.shape[-1]) + 8) * 2.0**-53 * (g_log.abs() * (fwd(xv).abs() + d.abs() + 2)).sum(-1, keepdim=True)
    fd_err = h * h / 3 * sg + l_err / h
    bound = (tol + rnd)[..., cols] + fd_err
    assert_close("vjp_matches_finite_differences", case, target, dx[..., cols], fd, bound,
                 f"VJP differs from central differences at columns {cols}")


@invariant("softmax", "log_softmax", "logsumexp", needs=("autograd",), families=("moderate", "grid", "one_hot"),
           max_cols=12)
def gradcheck_float64(case, target):
    """torch.autograd.gradcheck of the differentiable op in float64 (finite differences against
    the registered backward, torch's own tolerances atol=1e-5, rtol=1e-3)."""
    assume(case.dtype == torch.float64)
    (x,) = case.tensors(target.device)
    assume(0 < x.numel() <= 64 and bool(torch.isfinite(x).all()))
    x = x.detach().contiguous().requires_grad_(True)  # gradcheck perturbs in place: no stride-0 axes
    try:
        ok = torch.autograd.gradcheck(lambda t: run(target, case.op, t), (x,), eps=1e-6, atol=1e-5, rtol=1e-3,
                                      raise_exception=True)
    except RuntimeError as e:  # torch's GradcheckError
        fail("gradcheck_float64", case, target, f"gradcheck failed: {str(e).splitlines()[0]}",
             call=f"torch.autograd.gradcheck(target.{case.op}, (x.double().requires_grad_(),))")
    assert ok


# ----------------------------------------------------------------------------------------------
# memory, layout and determinism
# ----------------------------------------------------------------------------------------------
def _agree(name, case, target, out, base, args, strict, what, call=None):
    """Two results of the same op on the same values: bitwise in the strict tier; in the default
    tier within the sum of their two oracle tolerances (each is within its own of the truth), NaN
    patterns and infinities exactly, on the rows a VJP law covers (vjp_rows)."""
    if strict:
        assert_bitwise(name, case, target, out, base, what, call=call)
        return
    if out.shape != base.shape or out.dtype != base.dtype:
        fail(name, case, target, f"{what}: shape/dtype {tuple(out.shape)}/{out.dtype} vs {tuple(base.shape)}/{base.dtype}",
             call=call, kind=WrongOutput)
    _, tol = truth(case.op, case.dtype, args)
    rows = vjp_rows(case, args, strict)
    assert_close(name, case, target, out, base.double(), 2 * tol, what, call,
                 only=None if rows is None else rows[..., None])


@invariant(*ALL, strict="layout_invariance_bitwise")
def layout_invariance(case, target, strict=False):
    """A strided input gives the result of its contiguous copy. default: within the two results'
    oracle tolerances (torch's CPU logsumexp reduces a transposed float32 (2, 32) tensor in
    another order: 2.9899964 vs 2.9899962, both correct). strict (layout_invariance_bitwise):
    bitwise, since only the summation order could differ, and a kernel whose order depends on the
    memory layout gives callers results that change with how a tensor happens to be stored."""
    args = case.tensors(target.device)
    assume(any(not t.is_contiguous() for t in args))
    a = run(target, case.op, *args)
    b = run(target, case.op, *[t.contiguous() for t in args])
    _agree("layout_invariance_bitwise" if strict else "layout_invariance", case, target, a, b, args, strict,
           "strided input differs from its contiguous copy",
           call=f"out = target.{case.op}({', '.join(a_ for a_ in case.spec.args)})  # vs the same on .contiguous() copies")


@invariant(*ALL)
def inputs_unmodified(case, target):
    """The op leaves its inputs bitwise unchanged (NaN gaps of strided buffers included)."""
    args = case.tensors(target.device)
    bases = [t._base if t._base is not None else t for t in args]
    before = [b.clone() for b in bases]
    run(target, case.op, *args)
    for b0, b1 in zip(before, bases):
        assert_bitwise("inputs_unmodified", case, target, b1, b0, "an input (or its storage) was modified")


@invariant(*ALL)
def all_outputs_written(case, target):
    """Under NaN-poisoned allocations (torch.empty returns NaN), the output has NaN exactly where
    the FP64 oracle has: an element the kernel forgot to write stays NaN."""
    args = case.tensors(target.device)
    with poisoned_allocations():
        out = run(target, case.op, *args)
    ref, _ = truth(case.op, case.dtype, args)
    bad = torch.isnan(out.double()) != torch.isnan(ref)
    rows = vjp_rows(case, args, False)  # a VJP beyond ordinary magnitude may overflow to NaN
    if rows is not None:
        bad = bad & rows[..., None]
    if bool(bad.any()):
        i = worst(bad, torch.ones_like(ref))
        fail("all_outputs_written", case, target, "NaN pattern differs from the oracle under poisoned allocations",
             i, ref[i], out[i])


@invariant(*ALL)
def deterministic(case, target):
    """Two calls on the same input give bitwise equal results."""
    args = case.tensors(target.device)
    a = run(target, case.op, *args)
    b = run(target, case.op, *args)
    assert_bitwise("deterministic", case, target, b, a, "repeat call differs")


def _poison_other_rows(t: torch.Tensor, dtype) -> torch.Tensor:
    """A copy of t in t's own layout (strides, storage offset, the gaps of its storage) whose rows
    1.. hold NaN, inf, -inf and finfo.max in turn, row 0 t's own values. A tensor with a stride-0
    (expanded) batch axis cannot hold other rows' values apart from row 0: it is copied
    contiguously first."""
    lead = t.shape[:-1]
    if t.numel() == 0 or any(st_ == 0 and n > 1 for st_, n in zip(t.stride()[:-1], lead)):
        p = t.contiguous().clone()
    else:
        p = torch.empty(0, dtype=t.dtype, device=t.device).set_(
            t.untyped_storage().clone(), t.storage_offset(), t.shape, t.stride())
    if p.numel():
        r = torch.arange(math.prod(lead), device=t.device).reshape(*lead, 1)
        junk = torch.tensor([float("nan"), float("inf"), -float("inf"), torch.finfo(dtype).max],
                            dtype=torch.float64, device=t.device)[r % 4].to(t.dtype)
        p.copy_(torch.where(r == 0, p, junk))
    return p


@invariant(*ALL, strict="row_independence_bitwise")
def row_independence(case, target, strict=False):
    """Each row's result depends on that row alone: overwriting every other row (with NaN, inf and
    huge values, in the input's own layout) leaves row 0 of the output unchanged. default: within
    the two calls' oracle tolerances, as every law comparing two calls of a kernel that may pick
    its code path (and so its rounding) from what it is given; strict (row_independence_bitwise):
    bitwise."""
    args = case.tensors(target.device)
    lead = args[0].shape[:-1]
    assume(len(lead) >= 1 and math.prod(lead) >= 2 and args[0].shape[-1] >= 1)
    a = run(target, case.op, *args)
    poisoned = [_poison_other_rows(t, case.dtype) for t in args]
    b = run(target, case.op, *poisoned)
    a0 = a.reshape(-1, *a.shape[len(lead):])[:1]
    b0 = b.reshape(-1, *b.shape[len(lead):])[:1]
    row0 = [t.reshape(-1, t.shape[-1])[:1] if t.shape[:-1] == lead else t for t in args]
    _agree("row_independence_bitwise" if strict else "row_independence", case, target, b0, a0, row0, strict,
           "row 0 changed when other rows changed",
           call=f"out = target.{case.op}(...)  # rows 1.. replaced by nan/inf/-inf/max")


@invariant(*ALL)
def output_dtype_and_shape(case, target):
    """Output dtype: the input's (logsumexp: float32 for 16/32-bit input, float64 for float64);
    shape: the input's (logsumexp: without the last axis); device: the input's."""
    args = case.tensors(target.device)
    out = run(target, case.op, *args)
    want_shape = args[0].shape[:-1] if OPS[case.op].reduces else args[0].shape
    want_dtype = OPS[case.op].out_dtype(case.dtype)
    if not isinstance(out, torch.Tensor) or out.shape != want_shape or out.dtype != want_dtype or out.device != args[0].device:
        got = (tuple(out.shape), out.dtype, out.device) if isinstance(out, torch.Tensor) else type(out)
        fail("output_dtype_and_shape", case, target,
             f"expected shape {tuple(want_shape)}, dtype {want_dtype}, device {args[0].device}; got {got}", kind=WrongOutput)


@invariant(*ALL, needs=("dim",), strict="dim_argument_bitwise")
def dim_argument(case, target, strict=False):
    """op(x.movedim(-1, k), dim=k) == op(x) with the axis moved back, for every k and for negative
    k. default: within the two results' oracle tolerances (torch's softmax along a non-last dim
    runs another kernel: [0.37719, -0.39631] along dim 0 gives 0.31572136 against 0.31572133 along
    the last, both well within the bound); strict (dim_argument_bitwise): bitwise, since reducing a
    non-last axis is the same computation on the same rows."""
    name = "dim_argument_bitwise" if strict else "dim_argument"
    args = case.tensors(target.device)
    nd = args[0].ndim
    assume(nd >= 2)
    base = run(target, case.op, *args)
    for k in range(nd):
        moved = [t.movedim(-1, k) for t in args]
        for dim in (k, k - nd):
            out = run(target, case.op, *moved, dim=dim)
            if not OPS[case.op].reduces:
                out = out.movedim(k, -1)
            _agree(name, case, target, out, base, args, strict, f"dim={dim} differs from the last-axis result",
                   call=f"out = target.{case.op}(*[t.movedim(-1, {k}) for t in ({', '.join(case.spec.args)},)], dim={dim})")


# ==============================================================================================
# merges of (x, lse) states: softmax_merge, attention_merge (cases are MergeCase, case.py)
# ==============================================================================================
MERGES = ("softmax_merge", "attention_merge")


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Element-wise: equal values with equal signs (so -0.0 != 0.0), or both NaN."""
    a, b = a.double(), b.double()
    return ((a == b) & (torch.signbit(a) == torch.signbit(b))) | (torch.isnan(a) & torch.isnan(b))


def _state_ok(name, case, target, got, like, what, call=None):
    """got must be a (x, lse) pair of like's shapes, x in the case dtype and lse in its lse dtype,
    on like's device."""
    want = [(tuple(t.shape), d, t.device) for t, d in zip(like, (case.dtype, _lse_dtype(case.dtype)))]
    ok = isinstance(got, (tuple, list)) and len(got) == 2 and all(isinstance(t, torch.Tensor) for t in got)
    have = [(tuple(t.shape), t.dtype, t.device) for t in got] if ok else type(got)
    if not ok or have != want:
        fail(name, case, target, f"{what}: expected (x, lse) with (shape, dtype, device) {want}; got {have}", call=call,
             kind=WrongOutput)


def _lse_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _close(name, case, target, out, ref, tol, out_dtype, what, out_name, call=None):
    bad = T.compare(out, ref, tol, out_dtype)
    if bool(bad.any()):
        i = worst(bad, (out.double() - ref).abs() / tol.clamp_min(1e-300))
        fail(name, case, target, f"{what}: {int(bad.sum())} of {bad.numel()} elements of {out_name} out of bounds",
             i, ref[i], out[i], tol[i], call, out_name=out_name)


def _step_truth(case, xa, la, xb, lb):
    """FP64 merge of one step's actual inputs and its single-step tolerances (merge_value_bound /
    merge_lse_bound at depth 1, exact inputs): (x_ref, lse_ref, tol_x, tol_lse)."""
    merge = OPS[case.op].oracle
    x_ref, l_ref = merge(xa, la, xb, lb)
    mag, _ = merge(xa.double().abs(), la, xb.double().abs(), lb)  # sum of w |x|
    lam = torch.zeros_like(l_ref)
    for l in (la.double(), lb.double(), l_ref):
        lam = torch.maximum(lam, torch.where(torch.isfinite(l), l.abs(), 0.0))
    eps_x = T.merge_value_bound(case.dtype, 1, lam[..., None], mag, leaves=False)
    eps_l = T.merge_lse_bound(case.dtype, 1, lam, leaves=False)
    return (x_ref, l_ref, T.total_tolerance(eps_x, x_ref, case.dtype, case.dtype),
            T.total_tolerance(eps_l, l_ref, _lse_dtype(case.dtype), case.dtype))


@invariant(*MERGES, strict="merge_tree_with_garbage_states")
def merge_tree_matches_one_shot(case, target, strict=False):
    """Chunked-merge equivalence: merging the chunk states of a row (empty and fully masked
    chunks) in the drawn order and tree shape gives the one-shot
    FP64 softmax / attention and logsumexp of the whole row (softmax columns in the tree's leaf
    order), within merge_value_bound / merge_lse_bound (tolerances.py) at the tree's depth: each
    merge adds a few roundings, and the lse errors telescope along a chunk's path. Runs under
    NaN-poisoned allocations, so an output element never written shows up as NaN. default: empty
    states hold their natural values (MergeCase.natural); strict (merge_tree_with_garbage_states):
    garbage (NaN, inf, 0, -0, 1e4) in empty states, whose values must never reach the output."""
    case = case if strict else case.natural()
    with poisoned_allocations():
        out = case.run_tree(lambda *a: run(target, case.op, *a), target.device)
    check_one_shot("merge_tree_with_garbage_states" if strict else "merge_tree_matches_one_shot", case, target,
                   out, tree_leaves(case.tree), tree_depth(case.tree))


def one_shot_truth(case, device, chunks, H):
    """(x_ref, lse_ref, tol_x, tol_lse): the one-shot FP64 truth over the chunks' columns and the
    chunked-merge bounds at merge depth H."""
    x_ref, l_ref, mag, lam = case.reference(device, chunks)
    N = len(case.chunk_cols(chunks))
    tol_x = T.total_tolerance(T.merge_value_bound(case.dtype, H, lam[..., None], mag, N), x_ref, case.dtype, case.dtype)
    tol_l = T.total_tolerance(T.merge_lse_bound(case.dtype, H, lam, N), l_ref, _lse_dtype(case.dtype), case.dtype)
    return x_ref, l_ref, tol_x, tol_l


def _merge_agree(name, case, target, a, b, strict, what, call):
    """Two merged states of the whole tree: bitwise (signs of zeros included) in the strict tier,
    within twice the tree's chunked-merge bounds in the default tier (NaN patterns exactly)."""
    for i, nm in ((0, "x"), (1, "lse")):
        if a[i].shape != b[i].shape or a[i].dtype != b[i].dtype:
            fail(name, case, target, f"{what}: {nm} shape/dtype {tuple(a[i].shape)}/{a[i].dtype} vs "
                 f"{tuple(b[i].shape)}/{b[i].dtype}", call=call, kind=WrongOutput)
    if not strict:
        _, _, tol_x, tol_l = one_shot_truth(case, target.device, tree_leaves(case.tree), tree_depth(case.tree))
        _close(name, case, target, a[0], b[0].double(), 2 * tol_x, case.dtype, what, "x", call)
        _close(name, case, target, a[1], b[1].double(), 2 * tol_l, _lse_dtype(case.dtype), what, "lse", call)
        return
    for i, nm in ((0, "x"), (1, "lse")):
        bad = ~_bits_equal(a[i], b[i])
        if bool(bad.any()):
            j = worst(bad, torch.nan_to_num((a[i].double() - b[i].double()).abs(), nan=1.0))
            fail(name, case, target, f"{what} ({int(bad.sum())} elements of {nm} differ bitwise)", j, b[i][j], a[i][j],
                 out_name=nm, call=call)


def check_one_shot(name, case, target, out, chunks, H, call=None):
    """The merged state out of the given chunks (in column order) against the one-shot FP64 truth
    over their columns, within the chunked-merge bounds at merge depth H."""
    x_ref, l_ref, tol_x, tol_l = one_shot_truth(case, target.device, chunks, H)
    _state_ok(name, case, target, out, (x_ref, l_ref), "merged state", call)
    ld = _lse_dtype(case.dtype)
    if getattr(target, "record", True) and out[0].numel():
        fin = torch.isfinite(x_ref) & torch.isfinite(out[0].double())
        if bool(fin.any()):
            frac = ((out[0].double() - x_ref).abs()[fin] / tol_x[fin].clamp_min(1e-300)).max().item()
            ulps = ((out[0].double() - x_ref).abs()[fin] / T.ulp(x_ref[fin], case.dtype)).max().item()
            record_worst(case.op, case.dtype, default=frac, ulps=ulps)
    _close(name, case, target, out[0], x_ref, tol_x, case.dtype,
           f"merged chunks differ from the one-shot FP64 oracle (merge depth {H})", "x", call)
    _close(name, case, target, out[1], l_ref, tol_l, ld,
           f"merged lse differs from the one-shot FP64 logsumexp (merge depth {H})", "lse", call)


@invariant(*MERGES)
def merge_step_matches_oracle(case, target):
    """Every merge step of the tree, on its actual inputs (chunk states, or the target's own
    earlier results), matches the FP64 merge oracle of those inputs within the single-step bound
    (merge_value_bound / merge_lse_bound at depth 1 with exact inputs), NaN and infinities
    exactly: the MERGE_SEMANTICS rules (an empty side is the exact identity, both empty give o = 0
    or NaN p, NaN and +inf lse poison) on every state the tree meets."""
    assume(not isinstance(case.tree, int))
    case = case.natural()  # empty states' garbage is the strict tier's (merge_tree_with_garbage_states)
    steps = []

    def call(xa, la, xb, lb):
        out = run(target, case.op, xa, la, xb, lb)
        steps.append(((xa, la, xb, lb), out))
        return out

    case.run_tree(call, target.device)
    for i, (args, out) in enumerate(steps):
        x_ref, l_ref, tol_x, tol_l = _step_truth(case, *args)
        name = "out" if i == len(steps) - 1 else f"m{i}"
        _state_ok("merge_step_matches_oracle", case, target, out, (x_ref, l_ref), f"step {name}")
        _close("merge_step_matches_oracle", case, target, out[0], x_ref, tol_x, case.dtype,
               f"merge step {name} differs from the FP64 merge of its inputs", f"{name}[0]")
        _close("merge_step_matches_oracle", case, target, out[1], l_ref, tol_l, _lse_dtype(case.dtype),
               f"merge step {name}'s lse differs from the FP64 merge of its inputs", f"{name}[1]")


def _subtree_states(case, target):
    leaves = case.leaf_tensors(target.device)
    call = lambda *a: run(target, case.op, *a)
    return [case.run_tree(call, target.device, t, leaves) for t in case.tree]


@invariant(*MERGES)
def merge_commutative(case, target):
    """merge(a, b) == merge(b, a) for the root's two subtree states a, b (softmax: with the two
    column blocks swapped back). Toleranced, not bitwise: the law holds exactly in real
    arithmetic, and a correct merge may evaluate its two sides in an order-dependent way (e.g.
    lse_a + log(1 + exp(lse_b - lse_a)), eagerly), so each side is held to the single-step bound
    of the FP64 merge and the two may differ by twice that. NaN patterns must agree exactly."""
    assume(not isinstance(case.tree, int))
    case = case.natural()  # empty states' garbage is the strict tier's (merge_tree_with_garbage_states)
    a, b = _subtree_states(case, target)
    ab = run(target, case.op, *a, *b)
    ba = run(target, case.op, *b, *a)
    x_ref, l_ref, tol_x, tol_l = _step_truth(case, *a, *b)
    call = "\n".join(tree_code(case.tree[0], case.op, "a", "ma") + tree_code(case.tree[1], case.op, "b", "mb")
                     + [f"out = target.{case.op}(*a, *b), target.{case.op}(*b, *a)"])
    _state_ok("merge_commutative", case, target, ba, (x_ref, l_ref), "merge(b, a)", call)
    xba = ba[0]
    if case.op == "softmax_merge":
        db = b[0].shape[-1]
        xba = torch.cat([xba[..., db:], xba[..., :db]], -1)
    _close("merge_commutative", case, target, xba, ab[0].double(), 2 * tol_x, case.dtype,
           "merge(b, a) != merge(a, b)", "x", call)
    _close("merge_commutative", case, target, ba[1], ab[1].double(), 2 * tol_l, _lse_dtype(case.dtype),
           "merge(b, a) != merge(a, b)", "lse", call)


def _chains(leaves):
    left = leaves[0]
    for c in leaves[1:]:
        left = (left, c)
    right = leaves[-1]
    for c in reversed(leaves[:-1]):
        right = (c, right)
    return left, right


@invariant(*MERGES)
def merge_associative(case, target):
    """Generalised associativity: the left chain ((c0, c1), c2)... and the right chain
    (c0, (c1, (c2, ...))) over the same leaf order (three chunks or more) agree within the sum of
    their chunked-merge bounds (each within merge_value_bound / merge_lse_bound at depth k - 1 of
    the one-shot truth), NaN patterns exactly. Toleranced: each step rounds, so different trees
    round differently; the bound grows with the depth, as the tolerance derivation says."""
    leaves = tree_leaves(case.tree)
    assume(len(leaves) >= 3)
    case = case.natural()  # empty states' garbage is the strict tier's (merge_tree_with_garbage_states)
    lt, rt = _chains(leaves)
    call_t = lambda *a: run(target, case.op, *a)
    tensors = case.leaf_tensors(target.device)
    L = case.run_tree(call_t, target.device, lt, tensors)
    R = case.run_tree(call_t, target.device, rt, tensors)
    x_ref, l_ref, mag, lam = case.reference(target.device)
    H, N = len(leaves) - 1, case.n_keys
    tol_x = T.total_tolerance(T.merge_value_bound(case.dtype, H, lam[..., None], mag, N), x_ref, case.dtype, case.dtype)
    tol_l = T.total_tolerance(T.merge_lse_bound(case.dtype, H, lam, N), l_ref, _lse_dtype(case.dtype), case.dtype)
    call = "\n".join(tree_code(lt, case.op, "left", "ml") + tree_code(rt, case.op, "right", "mr") + ["out = left, right"])
    _state_ok("merge_associative", case, target, L, (x_ref, l_ref), "left chain", call)
    _state_ok("merge_associative", case, target, R, (x_ref, l_ref), "right chain", call)
    _close("merge_associative", case, target, R[0], L[0].double(), 2 * tol_x, case.dtype,
           "right chain != left chain", "x", call)
    _close("merge_associative", case, target, R[1], L[1].double(), 2 * tol_l, _lse_dtype(case.dtype),
           "right chain != left chain", "lse", call)


@invariant(*MERGES, strict="merge_identity_bitwise")
def merge_identity(case, target, strict=False):
    """An empty state e (lse = -inf) is the identity on both sides: merge(s, e) and merge(e, s)
    return s's values and lse (softmax: e's columns are 0). Exact, not toleranced: a correct
    merge's weights are exactly 1 and 0 there (exp(-inf) = 0, logaddexp(l, -inf) = l), and ring /
    causal attention merges many empty blocks, so any drift would accumulate. Rows where s itself
    is empty or poisoned follow MERGE_SEMANTICS exactly (both empty: o = 0 / NaN p; NaN / +inf
    lse: NaN). default: e holds its natural values (o = 0, or the NaN softmax of an all -inf row)
    and values are compared as numbers (-0.0 == 0.0: 0 * w + -0.0 is +0.0 in IEEE arithmetic, and
    no caller can tell). strict (merge_identity_bitwise): e holds garbage (NaN, inf, 0, -0, 1e4,
    or the chunk's own) and the result is s bitwise, signs of zeros included."""
    name = "merge_identity_bitwise" if strict else "merge_identity"
    leaves = tree_leaves(case.tree)
    c, e = leaves[0], leaves[-1]
    natural = 0.0 if case.op == "attention_merge" else math.nan
    g = dict(case.garbage).get(e, math.nan) if strict else natural
    tensors = case.leaf_tensors(target.device)
    xs, ls = tensors[c]
    xe = torch.full_like(tensors[e][0], g)
    le = torch.full_like(ls, -math.inf)
    merge = OPS[case.op].oracle
    for order, args in (("merge(s, e)", (xs, ls, xe, le)), ("merge(e, s)", (xe, le, xs, ls))):
        call = (f"e = torch.full_like(x{e}, {g!r}), torch.full_like(lse{c}, -inf)\n"
                f"out = target.{case.op}({'x%d, lse%d, *e' % (c, c) if order == 'merge(s, e)' else '*e, x%d, lse%d' % (c, c)})")
        out = run(target, case.op, *args)
        x_ref, l_ref = merge(*args)  # exact here: copies, zeros, NaN
        x_ref, l_ref = x_ref.to(case.dtype), l_ref.to(_lse_dtype(case.dtype))
        _state_ok(name, case, target, out, (x_ref, l_ref), order, call)
        for got, want, nm in ((out[0], x_ref, "x"), (out[1], l_ref, "lse")):
            if strict:
                bad = ~_bits_equal(got, want)
            else:
                g64, w64 = got.double(), want.double()
                bad = ~((g64 == w64) | (torch.isnan(g64) & torch.isnan(w64)))
            if bool(bad.any()):
                i = worst(bad, torch.ones_like(want, dtype=torch.float64))
                fail(name, case, target, f"{order} with an empty e is not {'bitwise ' if strict else ''}s "
                     f"({int(bad.sum())} elements of {nm} differ)", i, want[i], got[i], call=call, out_name=nm)


@invariant(*MERGES, strict="merge_layout_invariance_bitwise")
def merge_layout_invariance(case, target, strict=False):
    """Strided chunk states (padded, offset, transposed, interleaved, expanded x; offset, strided
    or stride-0 lse) give the results of their contiguous copies. default: within twice the
    tree's chunked-merge bounds (a kernel may take a vectorised path for contiguous rows and
    another for strided ones, contracting to FMA differently); strict
    (merge_layout_invariance_bitwise): bitwise, since the merge is element-wise per row."""
    case = case if strict else case.natural()
    tensors = case.leaf_tensors(target.device)
    assume(any(not t.is_contiguous() for st_ in tensors.values() for t in st_))
    call_t = lambda *a: run(target, case.op, *a)
    a = case.run_tree(call_t, target.device, None, tensors)
    b = case.run_tree(call_t, target.device, None, {k: tuple(t.contiguous() for t in v) for k, v in tensors.items()})
    _merge_agree("merge_layout_invariance_bitwise" if strict else "merge_layout_invariance", case, target, a, b,
                 strict, "strided states differ from their contiguous copies",
                 "\n".join(tree_code(case.tree, case.op) + ["# vs the same with every x{c}, lse{c} made .contiguous()"]))


@invariant(*MERGES)
def merge_inputs_unmodified(case, target):
    """Merging leaves every input state (and its storage, NaN gaps included) bitwise unchanged."""
    tensors = case.leaf_tensors(target.device)
    bases = [t._base if t._base is not None else t for st_ in tensors.values() for t in st_]
    before = [b.clone() for b in bases]
    case.run_tree(lambda *a: run(target, case.op, *a), target.device, None, tensors)
    for b0, b1 in zip(before, bases):
        assert_bitwise("merge_inputs_unmodified", case, target, b1, b0, "an input state (or its storage) was modified")


@invariant(*MERGES, strict="merge_row_independence_bitwise")
def merge_row_independence(case, target, strict=False):
    """Each row's merged state depends on that row's states alone: overwriting every other row of
    every chunk state (values and lse with NaN, inf, -inf, huge; in a contiguous copy) leaves row
    0 of the merged x and lse unchanged: within twice the tree's chunked-merge bounds (default),
    bitwise (strict, merge_row_independence_bitwise)."""
    case = case if strict else case.natural()
    tensors = case.leaf_tensors(target.device)
    x0, _ = tensors[0]
    lead = x0.shape[:-1]
    assume(len(lead) >= 1 and math.prod(lead) >= 2)
    call_t = lambda *a: run(target, case.op, *a)
    a = case.run_tree(call_t, target.device, None, tensors)
    junk = [math.nan, math.inf, -math.inf, torch.finfo(case.dtype).max]
    poisoned = {}
    for c, (x, l) in tensors.items():
        px = x.contiguous().clone().reshape(math.prod(lead), x.shape[-1])
        pl = l.contiguous().clone().reshape(math.prod(lead))
        for r in range(1, px.shape[0]):
            px[r] = junk[r % len(junk)]
            pl[r] = junk[(r + 1) % len(junk)]
        poisoned[c] = (px.reshape(x.shape), pl.reshape(l.shape))
    b = case.run_tree(call_t, target.device, None, poisoned)
    rows = [t.reshape(math.prod(lead), *t.shape[len(lead):])[:1] for t in (*a, *b)]
    # compared as a one-row case: the tree's bounds for row 0 come from the whole case's (per row)
    a0, b0 = (rows[0], rows[1]), (rows[2], rows[3])
    if strict:
        _merge_agree("merge_row_independence_bitwise", case, target, b0, a0, True,
                     "row 0 changed when the other rows changed",
                     "\n".join(tree_code(case.tree, case.op) + ["# vs the same with rows 1.. of every state replaced by nan/inf/-inf/max"]))
        return
    _, _, tol_x, tol_l = one_shot_truth(case, target.device, tree_leaves(case.tree), tree_depth(case.tree))
    tol_x = tol_x.reshape(math.prod(lead), *tol_x.shape[len(lead):])[:1]
    tol_l = tol_l.reshape(math.prod(lead))[:1]
    call = "\n".join(tree_code(case.tree, case.op) + ["# vs the same with rows 1.. of every state replaced by nan/inf/-inf/max"])
    _close("merge_row_independence", case, target, b0[0], a0[0].double(), 2 * tol_x, case.dtype,
           "row 0 changed when the other rows changed", "x[0]", call)
    _close("merge_row_independence", case, target, b0[1], a0[1].double(), 2 * tol_l, _lse_dtype(case.dtype),
           "row 0 changed when the other rows changed", "lse[0]", call)


# ==============================================================================================
# N-way merges: merge_states(o, lse), o (..., S, Dv), lse (..., S) (cases are StatesCase, case.py)
# ==============================================================================================
STATES = ("merge_states",)


def _states_truth(case, o, lse):
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
            T.total_tolerance(eps_l, l_ref, _lse_dtype(case.dtype), case.dtype))


def _states_close(name, case, target, got, want, tol_x, tol_l, what, call):
    """got against want (two (o, lse) pairs) within (tol_x, tol_l), NaN patterns exactly."""
    _state_ok(name, case, target, got, want, what, call)
    _close(name, case, target, got[0], want[0].double(), tol_x, case.dtype, what, "o", call)
    _close(name, case, target, got[1], want[1].double(), tol_l, _lse_dtype(case.dtype), what, "lse", call)


@invariant(*STATES)
def merge_states_matches_one_shot(case, target):
    """merge_states of a row's chunk states (stacked along S in any order; empty, masked and
    extreme-lse states: lse from -finfo.max to +finfo.max through the case's lse_shift) equals the
    one-shot FP64 attention over all the row's keys, the softmax-weighted sum of the values,
    within the chunked-merge bounds at depth max(S - 1, 1) (the bound of a left fold over the S
    states, which covers a one-pass merge: see _states_truth), under NaN-poisoned allocations.
    Tier default: a wrong merged output or lse is a bug for any user of split-KV attention."""
    o, lse = case.stacked(target.device)
    with poisoned_allocations():
        out = run(target, "merge_states", o, lse)
    check_one_shot("merge_states_matches_one_shot", case, target, out, case.order, max(len(case.order) - 1, 1))


@invariant(*STATES)
def merge_states_is_fold_of_attention_merge(case, target):
    """merge_states(o, lse) equals the left fold attention_merge(...attention_merge(s_0, s_1)...,
    s_{S-1}) of the same states: with the target's own attention_merge when it has one (each side
    within the bound of a fold of S - 1 merges of the FP64 merge of these inputs, so the two within
    twice that), else the FP64 fold (oracles.merge_states: within the bound once). Unlike the
    one-shot law, the reference is the merge of the actual rounded states, so the bound holds no
    term for their rounding. Tier default: the N-way merge must mean what its binary steps mean."""
    o, lse = case.stacked(target.device)
    out = run(target, "merge_states", o, lse)
    x_ref, l_ref, tol_x, tol_l = _states_truth(case, o, lse)
    S = lse.shape[-1]
    if target.has("attention_merge"):
        fold = (o[..., 0, :], lse[..., 0])
        for s in range(1, S):
            fold = tuple(run(target, "attention_merge", *fold, o[..., s, :], lse[..., s]))
        tol_x, tol_l = 2 * tol_x, 2 * tol_l
        call = ("fold = o[..., 0, :], lse[..., 0]\n"
                f"for s in range(1, {S}):\n    fold = target.attention_merge(*fold, o[..., s, :], lse[..., s])\n"
                "out = target.merge_states(o, lse), fold")
    else:
        fold = (x_ref, l_ref)
        call = "out = target.merge_states(o, lse)  # vs the FP64 fold of attention_merge over the states"
    _states_close("merge_states_is_fold_of_attention_merge", case, target, out, fold, tol_x, tol_l,
                  "merge_states differs from the fold of attention_merge over its states", call)


@invariant(*STATES)
def merge_states_permutation_invariant(case, target):
    """merge_states(o[..., p, :], lse[..., p]) == merge_states(o, lse) for a reversal-and-rotation
    p of the S states, each within its bound of the FP64 merge of these states (the order of a
    kernel's sum may follow S), so the two within twice it; NaN patterns exactly. Tier default: the
    states of split-KV attention come in whatever order the splits finish."""
    o, lse = case.stacked(target.device)
    S = lse.shape[-1]
    assume(S >= 2)
    p = torch.roll(torch.arange(S - 1, -1, -1, device=o.device), S // 3)
    a = run(target, "merge_states", o, lse)
    b = run(target, "merge_states", o[..., p, :], lse[..., p])
    _, _, tol_x, tol_l = _states_truth(case, o, lse)
    _states_close("merge_states_permutation_invariant", case, target, b, a, 2 * tol_x, 2 * tol_l,
                  "permuting the states changed the merge",
                  "p = ...  # the states reversed then rolled by S // 3\n"
                  "out = target.merge_states(o[..., p, :], lse[..., p]), target.merge_states(o, lse)")


def _insert_empty(o, lse, value):
    """o and lse with empty states (lse = -inf, values `value`) inserted: two first, one in the
    middle and one last."""
    S = lse.shape[-1]
    eo = torch.full((*o.shape[:-2], 1, o.shape[-1]), value, dtype=o.dtype, device=o.device)
    el = torch.full((*lse.shape[:-1], 1), -math.inf, dtype=lse.dtype, device=lse.device)
    k = S // 2
    return (torch.cat([eo, eo, o[..., :k, :], eo, o[..., k:, :], eo], -2),
            torch.cat([el, el, lse[..., :k], el, lse[..., k:], el], -1))


@invariant(*STATES)
def merge_states_empty_states_are_identities(case, target):
    """Empty states (lse = -inf) contribute nothing: with empty states inserted (two first, one in
    the middle, one last; values 0, or a finite garbage value of the case) the merge equals that
    of the others, each within its bound of the FP64 merge (a kernel's summation order may depend
    on S, so not bitwise); NaN patterns exactly. And rows whose states are all empty give o = 0 and
    lse = -inf exactly, whatever finite values the states hold. Tier default: causal and
    split-KV attention merge fully masked splits all the time."""
    o, lse = case.stacked(target.device)
    g = next((v for _, v in case.garbage), 0.0)
    o2, l2 = _insert_empty(o, lse, g)
    a = run(target, "merge_states", o, lse)
    b = run(target, "merge_states", o2, l2)
    _, _, tol_xa, tol_la = _states_truth(case, o, lse)
    _, _, tol_xb, tol_lb = _states_truth(case, o2, l2)
    _states_close("merge_states_empty_states_are_identities", case, target, b, a, tol_xa + tol_xb, tol_la + tol_lb,
                  "inserting empty states changed the merge",
                  f"e_o, e_lse = torch.full_like(o[..., :1, :], {g!r}), torch.full_like(lse[..., :1], -inf)\n"
                  f"k = o.shape[-2] // 2\n"
                  "o2 = torch.cat([e_o, e_o, o[..., :k, :], e_o, o[..., k:, :], e_o], -2)\n"
                  "lse2 = torch.cat([e_lse, e_lse, lse[..., :k], e_lse, lse[..., k:], e_lse], -1)\n"
                  "out = target.merge_states(o2, lse2), target.merge_states(o, lse)")
    ones = torch.ones_like(o) if o.shape[-1] else o
    le = torch.full_like(lse, -math.inf)
    out = run(target, "merge_states", ones, le)
    call = "out = target.merge_states(torch.ones_like(o), torch.full_like(lse, -inf))"
    zero = torch.zeros((*o.shape[:-2], o.shape[-1]), dtype=torch.float64, device=o.device)
    _state_ok("merge_states_empty_states_are_identities", case, target, out,
              (zero, torch.full(le.shape[:-1], -math.inf, dtype=torch.float64, device=o.device)), "all empty", call)
    for got, want, nm in ((out[0], 0.0, "o"), (out[1], -math.inf, "lse")):
        bad = ~(got.double() == want)
        if bool(bad.any()):
            i = worst(bad, torch.ones_like(got, dtype=torch.float64))
            fail("merge_states_empty_states_are_identities", case, target,
                 f"all states empty: {nm} is not {want} ({int(bad.sum())} elements)", i, want, got[i], call=call, out_name=nm)


@invariant(*STATES, tier="strict")
def merge_states_empty_garbage_ignored(case, target):
    """An empty state's values are never read: with one more empty state up front, the values of
    every empty state replaced by NaN, +inf, -inf and finfo.max give bitwise the same (o, lse) as
    with the values they held, signs of zeros included (a merge that selects the live states
    computes exactly the same thing; one that multiplies by the zero weight gets 0 * NaN = NaN).
    Tier strict: the contract leaves an empty state's o unspecified, and attention libraries that
    store empty states as zeros never put NaN there, so this is a robustness guarantee beyond the
    default contract."""
    o, lse = case.stacked(target.device)
    o1, l1 = _insert_empty(o, lse, 0.0)
    o1, l1 = o1[..., 1:, :], l1[..., 1:]  # one leading empty state is enough here
    empty = (l1 == -math.inf)[..., None].expand(o1.shape)
    junk = torch.tensor([math.nan, math.inf, -math.inf, torch.finfo(case.dtype).max], dtype=o1.dtype, device=o1.device)
    idx = torch.arange(o1.numel(), device=o1.device).reshape(o1.shape) % 4
    o2 = torch.where(empty, junk[idx], o1)
    a = run(target, "merge_states", o1, l1)
    b = run(target, "merge_states", o2, l1)
    call = ("o1, lse1 = ...  # the states with an empty one up front\n"
            "o2 = torch.where((lse1 == -inf)[..., None], junk, o1)  # nan/inf/-inf/max in every empty state\n"
            "out = target.merge_states(o2, lse1), target.merge_states(o1, lse1)")
    _state_ok("merge_states_empty_garbage_ignored", case, target, b, (a[0], a[1]), "garbage states", call)
    for i_, nm in ((0, "o"), (1, "lse")):
        bad = ~_bits_equal(b[i_], a[i_])
        if bool(bad.any()):
            j = worst(bad, torch.ones_like(a[i_], dtype=torch.float64))
            fail("merge_states_empty_garbage_ignored", case, target,
                 f"garbage in empty states changed {nm} ({int(bad.sum())} elements differ bitwise)", j, a[i_][j],
                 b[i_][j], call=call, out_name=nm)


# ==============================================================================================
# cross-entropy (ops "cross_entropy" and "cross_entropy_backward", drawn as CECase: logits,
# class-index targets, options, and for the backward the cotangent dloss). Every target call
# passes the case's keyword options (ignore_index, reduction, label_smoothing).
# ==============================================================================================
CE_FWD, CE_BWD = "cross_entropy", "cross_entropy_backward"
CE = (CE_FWD, CE_BWD)


def ce_run(case, target, *tensors, **overrides):
    return run(target, case.op, *tensors, **{**case.kwargs(), **overrides})


def ce_truth(case, args, reduction=None, label_smoothing=None, depth=T.depth_any, strict=False):
    """(reference, tolerance) in float64 for a CECase at the given (laid-out) tensors; the
    reduction and smoothing may be overridden (the forward only); depth: the reduction-depth
    model (tolerances.depth_any: default tier; tolerances.depth: strict). Not strict, the
    default tier's allowances: a gradient formed from log-probabilities rounded to the logits'
    dtype (torch's autograd saves log_softmax's output in the dtype: z_j off by half an ulp,
    2**-precision |z_j|, moves p_j by p_j expm1(2**-precision |z_j|)), a smoothed gradient formed
    from the two terms' cotangents, each rounded to the dtype, and a reduction formed from
    separately reduced terms each rounded to the dtype (torch's smoothed mean: (1 - eps) NLL +
    eps SMOOTH, four more roundings of at most half an ulp of sum |loss_i|)."""
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
    if case.op == CE_FWD:
        xt = torch.gather(x64, -1, tc[..., None])[..., 0]
        xt = torch.where(torch.isfinite(xt), xt, 0.0)
        # the mean of |x_j| as a sum of |x_j| / V, which cannot overflow (a mean of finfo.max
        # formed as sum / V is inf, and eps * inf with eps = 0 made the whole bound NaN)
        mean_abs = (torch.where(torch.isfinite(x64), x64.abs(), 0.0) / V).sum(-1)
        rows = oracles.ce.loss_rows(x64, t, ign_idx, eps)
        row_eps = T.ce_loss_bound(case.dtype, lse, H, dep, logs, xt, mean_abs,
                                  torch.where(torch.isfinite(rows), rows, 0.0), eps)
        row_eps = torch.where(ign, 0.0, row_eps)
        ref = oracles.ce.cross_entropy(x64, t, ign_idx, red, eps)
        count = (~ign).sum()
        rows_abs = torch.where(torch.isfinite(rows), rows.abs(), 0.0)
        eps_out = T.ce_reduced_bound(row_eps, rows_abs, x64[..., 0].numel(), count, red)
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
            # rounded and their sum rounded, |dg_j| <= 2u ((1 - eps) |s| [j = t] + (eps / V) |s|);
            # dx_j = g_j - p_j sum_k g_k carries dg_j + p_j sum_k |dg_k|, the sum at most 2u |s|
            terms = ((1 - eps) * hot + eps / V) * scale.abs()[..., None]
            dg = 2 * u * terms
            eps_g = eps_g + dg + y * dg.sum(-1, keepdim=True)
    eps_g = torch.where(ign[..., None], 0.0, eps_g)
    return ref, T.total_tolerance(eps_g, ref, case.dtype, case.dtype)


def _ce_record(case, out, ref, tol):
    fin = torch.isfinite(ref) & torch.isfinite(out.double())
    if bool(fin.any()):
        err = (out.double() - ref).abs()[fin]
        frac = (err / tol[fin].clamp_min(1e-300)).max().item()
        ulps = (err / T.ulp(ref[fin], case.dtype)).max().item()
        record_worst(case.op, case.dtype, default=frac, ulps=ulps)
        try:
            hypothesis.target(frac, label=f"bound used {case.op} {str(case.dtype).replace('torch.', '')}")
        except hypothesis.errors.InvalidArgument:
            pass


def _ce_shape(name, case, target, out, want_shape):
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(want_shape) or out.dtype != case.dtype:
        got = (tuple(out.shape), out.dtype) if isinstance(out, torch.Tensor) else type(out)
        fail(name, case, target, f"expected shape {tuple(want_shape)} and dtype {case.dtype}; got {got}", kind=WrongOutput)


def ce_default_mask(case, args, out_shape):
    """The outputs the default tier judges (bool, broadcast to the output), None for all. Two
    behaviours of a correct cross-entropy are left to the strict tier:
    * an ignored row holding NaN or +-inf logits: torch's gradient there is NaN (its
      log_softmax backward forms 0 * NaN), this project's is exactly 0 (oracles/semantics.py
      CE_SEMANTICS, its one deliberate difference from torch); either is accepted there.
    * a loss reduced over rows whose own loss overflows the compute precision (float32 for 16/32-bit
      logits): lse - x_t reaches 2 finfo.max for logits of +-finfo.max, so a float32 row loss is
      inf and so is torch's mean, where the exact mean may be finite (a robustness guarantee).
      A row is in range when 2 (|lse| + |x_t| + eps (|lse| + mean |x_j|)) <= finfo.max of the
      compute precision, the textbook formula's terms with the factor 2 covering their rounding.
    * a label_smoothing below float32's smallest normal with 16/32-bit logits: a float32 kernel
      holds it as 0, and 0 * inf is NaN where the exact loss is +inf.
    * (in the bound, not here) the gradient formed from the forward's log-probabilities rounded
      to the logits' dtype (autograd saves outputs in their dtype): ce_truth's rounded_forward."""
    x, t = args[0].detach().double(), args[1]
    ign = t == case.ignore_index
    if case.op == CE_BWD:
        bad_rows = ign & ~finite_rows(x)
        return None if not bool(bad_rows.any()) else ~bad_rows[..., None].expand(out_shape)
    if 0 < case.label_smoothing < torch.finfo(torch.float32).tiny and case.dtype != torch.float64:
        # a smoothing below float32's range is 0 to a float32 kernel (torch's too), and 0 times an
        # infinite lse - mean(x) is NaN where the exact term is +inf: the strict tier's
        return torch.zeros(out_shape, dtype=torch.bool, device=x.device)
    if case.reduction == "none" or x.shape[-1] == 0:
        return None
    big = torch.finfo(torch.float64 if case.dtype == torch.float64 else torch.float32).max
    fx = torch.where(torch.isfinite(x), x.abs(), 0.0)
    lse = oracles.logsumexp(torch.where(torch.isfinite(x), x, -math.inf)).abs().nan_to_num(0.0, posinf=0.0, neginf=0.0)
    tc = torch.where(ign, 0, t).clamp(0, x.shape[-1] - 1).long()
    xt = torch.gather(fx, -1, tc[..., None])[..., 0]
    need = lse + xt + case.label_smoothing * (lse + (fx / x.shape[-1]).sum(-1))
    in_range = bool(((2 * need <= big) | ign).all())
    return None if in_range else torch.zeros(out_shape, dtype=torch.bool, device=x.device)


@invariant(*CE, strict="ce_matches_oracle_strict")
def ce_matches_oracle(case, target, strict=False):
    """The loss (every reduction, label smoothing, ignored rows) and the gradient (times dloss,
    strided or expanded) equal the FP64 oracle (oracles/cross_entropy.py) at the same rounded
    inputs within the derived bounds (tolerances.ce_loss_bound, ce_reduced_bound, ce_grad_bound);
    NaN exactly where the oracle has NaN, infinities exactly. Output dtype is the logits' dtype,
    shape the loss's (forward) or the logits' (backward). default: the bound for any summation
    order, on the outputs ce_default_mask covers; strict (ce_matches_oracle_strict): the bound at
    the project's reduction depth on every output (an exactly zero gradient on ignored rows
    holding NaN / inf; an overflow-free mean)."""
    ce_check_oracle("ce_matches_oracle_strict" if strict else "ce_matches_oracle", case, target, strict=strict)


def ce_check_oracle(name, case, target, poisoned=False, strict=False):
    """ce_matches_oracle's check under another law's name (poisoned: under NaN-poisoned
    allocations; strict: the strict tier's bound on every output)."""
    args = case.tensors(target.device)
    with poisoned_allocations() if poisoned else contextlib.nullcontext():
        out = ce_run(case, target, *args)
    ref, tol = ce_truth(case, args, depth=T.depth if strict else T.depth_any, strict=strict)
    _ce_shape(name, case, target, out, ref.shape)
    if getattr(target, "record", True) and not strict:
        _ce_record(case, out, ref, tol)
    assert_close(name, case, target, out, ref, tol, "differs from the FP64 oracle",
                 only=None if strict else ce_default_mask(case, args, ref.shape))


@invariant(CE_FWD)
def ce_loss_nonnegative(case, target):
    """loss >= 0 exactly (NaN aside), a semantic requirement like 0 <= softmax <= 1: the exact
    loss is a sum of non-negative terms (lse - x_j with lse >= max x >= x_j), and a negative loss
    is impossible to a user who logs or compares it. Formed as rounded differences fl(lse) - x_j
    (rounding is monotone) it cannot go below 0; other formations can (an approximate log near
    S = 1, a fused multiply-add, the mean of x), and then the kernel must clamp, as this project's
    does. The bound is 0, not the oracle tolerance."""
    args = case.tensors(target.device)
    out = ce_run(case, target, *args).double()
    bad = out < 0
    if bool(bad.any()):
        i = worst(bad, -out)
        fail("ce_loss_nonnegative", case, target, "negative loss", i, 0.0, out[i])


@invariant(CE_FWD)
def ce_loss_is_lse_minus_target_logit(case, target):
    """Without smoothing, loss_i = logsumexp(x_i) - x_i[t_i] (reduction="none"), with logsumexp
    the target's own when it has one (else the FP64 oracle). Bound: tol(cross_entropy) +
    tol(logsumexp) (both against the same FP64 truth) + one rounding of the difference, on rows
    that are counted and whose logits are finite."""
    x, t = case.tensors(target.device)
    assume(x[..., 0].numel() >= 1)
    loss = ce_run(case, target, x, t, reduction="none", label_smoothing=0.0).double()
    lse = run(target, "logsumexp", x).double() if target.has("logsumexp") else oracles.logsumexp(x)
    ign = t == case.ignore_index
    tc = torch.where(ign, 0, t).clamp(0, x.shape[-1] - 1).long()
    xt = torch.gather(x.double(), -1, tc[..., None])[..., 0]
    rhs = lse - xt
    _, tol_ce = ce_truth(case, [x, t], reduction="none", label_smoothing=0.0)
    _, tol_lse = truth("logsumexp", case.dtype, [x])
    tol = tol_ce + tol_lse + T.ulp(rhs.abs(), case.dtype)
    rows = ~ign & finite_rows(x)
    assume(bool(rows.any()))
    rhs = torch.where(rows, rhs, loss)  # other rows: ce_matches_oracle's business
    tol = torch.where(rows, tol, 0.0)  # (their bound can be NaN, e.g. an ignored all -inf row)
    assert_close("ce_loss_is_lse_minus_target_logit", case, target, loss, rhs, tol,
                 "loss != logsumexp(x) - x[target]",
                 f"out = target.{CE_FWD}(logits, labels, ignore_index={case.ignore_index}, reduction='none')"
                 f"  # vs target.logsumexp(logits) - logits.gather(-1, labels[..., None])")


@invariant(CE_FWD)
def ce_reductions_agree(case, target):
    """mean * (number of counted rows) == sum == sum of reduction="none", each output within its
    oracle bound, so: |sum - sum(none)| <= tol(sum) + sum tol(none) and |mean * count - sum| <=
    count tol(mean) + tol(sum) (+ 2**-52 |sum| for forming mean * count in float64; at a quarter
    scale where mean * count overflows float64). With no counted row, mean is NaN (0 / 0) and sum
    is 0."""
    x, t = case.tensors(target.device)
    kw = dict(label_smoothing=case.label_smoothing)
    none = ce_run(case, target, x, t, reduction="none", **kw).double()
    total = ce_run(case, target, x, t, reduction="sum", **kw).double()
    mean = ce_run(case, target, x, t, reduction="mean", **kw).double()
    _, tn = ce_truth(case, [x, t], reduction="none")
    _, ts = ce_truth(case, [x, t], reduction="sum")
    _, tm = ce_truth(case, [x, t], reduction="mean")
    count = int((t != case.ignore_index).sum())
    call = f"out = [target.{CE_FWD}(logits, labels, reduction=r) for r in ('none', 'sum', 'mean')]"
    # the sum is the output held to the others (formed in float64), so a sum that overflows the
    # dtype where the float64 sum of the rows exceeds its range is accepted as infinity
    assert_close("ce_reductions_agree", case, target, total, none.sum(), ts + tn.sum(), "sum != sum of reduction='none'", call)
    if count == 0:
        if not bool(torch.isnan(mean)):
            fail("ce_reductions_agree", case, target, "mean over no counted rows is not NaN", (), math.nan, mean, call=call)
        return
    # float64 logits with a loss near finfo.max: mean * count can round past the range where the
    # sum itself does not (e.g. sum = finfo.max, mean = max / 3, 3 * mean = inf);
    # then both sides are compared at a quarter scale (a power of two: exact at that magnitude)
    s = 0.25 if bool(torch.isinf(mean * count) & torch.isfinite(mean)) else 1.0
    mc = (mean * s) * count
    assert_close("ce_reductions_agree", case, target, total * s, mc,
                 (count * tm + ts) * s + 2.0**-52 * torch.nan_to_num(mc.abs()), f"sum != mean * count ({count})", call)


@invariant(CE_BWD)
def ce_gradient_rows_sum_to_zero(case, target):
    """Each gradient row sums to 0: sum_j (p_j - (1 - eps)[j = t] - eps/V) = 1 - (1 - eps) - eps.
    Bound: sum_j tol_j (each element within its oracle bound) + (V + 2) 2**-53 sum_j |ref_j| (the
    oracle's own row sum). Rows with a non-finite reference are matches_oracle's business."""
    args = case.tensors(target.device)
    dx = ce_run(case, target, *args).double()
    ref, tol = ce_truth(case, args)
    V = ref.shape[-1]
    rows = torch.isfinite(ref).all(-1)
    keep = ce_default_mask(case, args, ref.shape)  # ignored rows of NaN / inf logits: strict tier's
    if keep is not None:
        rows = rows & keep.all(-1)
    total = dx.sum(-1)
    bound = tol.sum(-1) + (V + 2) * 2.0**-53 * ref.abs().sum(-1)
    bad = rows & ~(total.abs() <= bound)
    if bool(bad.any()):
        i = worst(bad, total.abs() / bound)
        fail("ce_gradient_rows_sum_to_zero", case, target, "gradient row does not sum to 0", i, 0.0, total[i], bound[i])


@invariant(*CE, strict="ce_ignored_nonfinite_rows_zero_gradient")
def ce_ignored_rows_do_not_count(case, target, strict=False):
    """Rows whose target is ignore_index do not take part: overwriting their logits with NaN, +-inf
    and the largest finite value leaves the output bitwise unchanged (loss, every reduction; the
    gradient), and their gradient rows are exactly zero. Both calls get contiguous logits (so
    only the ignored rows' values differ, not the memory layout). default: the gradient's ignored
    rows are overwritten with finite values only (+-finfo.max, 0): with NaN / inf there torch's
    gradient is NaN (0 * NaN in its log_softmax backward), a defensible choice; strict
    (ce_ignored_nonfinite_rows_zero_gradient): NaN and +-inf too, and the gradient stays exactly 0
    (this project's choice, oracles/semantics.py CE_SEMANTICS)."""
    name = "ce_ignored_nonfinite_rows_zero_gradient" if strict else "ce_ignored_rows_do_not_count"
    args = case.tensors(target.device)
    # fresh allocations on both sides: a kernel may pick its code by alignment (the contiguous
    # copy of a storage-offset view keeps the offset), and then its rounding may differ
    x, t = args[0].clone(memory_format=torch.contiguous_format), args[1]
    args = [x] + list(args[1:])
    ign = t == case.ignore_index
    assume(bool(ign.any()))
    if case.op == CE_BWD and not strict:  # the gradient of ignored non-finite rows is the strict tier's
        assume(bool(finite_rows(x)[ign].all()))
        junk = [-torch.finfo(case.dtype).max, 0.0, torch.finfo(case.dtype).max]
    else:
        junk = [math.nan, math.inf, -math.inf, torch.finfo(case.dtype).max]
    a = ce_run(case, target, *args)
    p = x.clone()
    flat, fi = p.reshape(-1, p.shape[-1]), ign.reshape(-1)
    for k, r in enumerate(fi.nonzero()[:, 0].tolist()):
        flat[r] = junk[k % len(junk)]
    b = ce_run(case, target, p, *args[1:])
    assert_bitwise(name, case, target, b, a, "ignored rows' logits changed the output",
                   call=f"out = target.{case.op}(...)  # logits of ignored rows replaced by {'/'.join(map(str, junk))}")
    if case.op == CE_BWD:
        bad = ign[..., None].expand(a.shape) & (a != 0)
        if bool(bad.any()):
            i = worst(bad, a.double().abs())
            fail(name, case, target, "an ignored row has a nonzero gradient", i, 0.0, a[i])


def _same_layout(t: torch.Tensor, factor: float) -> torch.Tensor:
    """factor * t with t's strides and storage offset (gaps of a strided view scaled too)."""
    base = t._base if t._base is not None else t
    return (base * factor).as_strided(t.shape, t.stride(), t.storage_offset())


@invariant(CE_BWD, strict="ce_gradient_linear_in_dloss_bitwise")
def ce_gradient_linear_in_dloss(case, target, strict=False):
    """The gradient is linear in dloss and depends on its values only: dx(4 dloss) == 4 dx(dloss),
    dx(-dloss) == -dx(dloss), and a strided or expanded (stride-0) dloss gives the result of its
    contiguous copy. default: within the oracle tolerances of both sides (torch's autograd forms
    the smoothing term in the logits' dtype, where eps / V * dloss can be subnormal in float16, so
    scaling dloss changes the rounding). strict (ce_gradient_linear_in_dloss_bitwise): bitwise,
    since scaling by a power of two or by -1 is exact in binary floating point and a kernel forming
    (softmax - onehot) * scale obeys it exactly; elements whose unscaled value is subnormal or
    zero, or whose scaled value overflows, are excluded."""
    name = "ce_gradient_linear_in_dloss_bitwise" if strict else "ce_gradient_linear_in_dloss"
    x, t, dl = case.tensors(target.device)
    a = ce_run(case, target, x, t, dl)
    call = "out = target.{op}(logits, labels, {arg}, ...)  # vs {vs}"
    c = ce_run(case, target, x, t, dl.contiguous())
    _, tol = ce_truth(case, [x, t, dl])
    layout_call = call.format(op=CE_BWD, arg="dloss.contiguous()", vs="dloss as laid out")
    if strict:
        assert_bitwise(name, case, target, c, a, "dloss's layout changed the gradient", call=layout_call)
    else:
        assert_close(name, case, target, c, a.double(), 2 * tol, "dloss's layout changed the gradient", layout_call)
    tiny, big = torch.finfo(case.dtype).tiny, torch.finfo(case.dtype).max
    for f in (4.0, -1.0):
        dlf = _same_layout(dl, f)
        b = ce_run(case, target, x, t, dlf).double()
        want = a.double() * f
        fcall = call.format(op=CE_BWD, arg=f"{f} * dloss", vs=f"{f} * target.{CE_BWD}(logits, labels, dloss)")
        if not strict:
            _, tol_f = ce_truth(case, [x, t, dlf])
            assert_close(name, case, target, b, want, tol_f + abs(f) * tol, f"dx({f} * dloss) != {f} * dx(dloss)", fcall)
            continue
        # a above the smallest normal (a == tiny may be a subnormal rounded up on the coarser
        # subnormal grid), the scaled value finite
        exact = (a.double().abs() > tiny) & (want.abs() <= big)
        same = (b == want) | (torch.isnan(b) & torch.isnan(want)) | ~exact
        if not bool(same.all()):
            i = worst(~same, (b - want).abs())
            fail(name, case, target, f"dx({f} * dloss) != {f} * dx(dloss)", i, want[i], b[i], call=fcall)


@invariant(*CE, families=("grid",))
def ce_shift_invariance(case, target):
    """loss(x + c) == loss(x) and dx(x + c) == dx(x) for grid logits and an exact shift c (37.25,
    bfloat16 37; strategies.GRID_SHIFT): the exact values are equal, so each side is held to its
    own oracle bound: |a - b| <= tol(x) + tol(x + c)."""
    args = case.tensors(target.device)
    x = args[0]
    c = GRID_SHIFT.get(case.dtype, 37.25)
    xs = x.double() + c
    assume(bool((xs.to(case.dtype).double() == xs)[~torch.isnan(xs)].all()))
    xs = xs.to(case.dtype)
    a = ce_run(case, target, *args)
    b = ce_run(case, target, xs, *args[1:])
    _, ta = ce_truth(case, args)
    _, tb = ce_truth(case, [xs] + list(args[1:]))
    assert_close("ce_shift_invariance", case, target, b, a.double(), ta + tb, f"shifting the logits by {c} changed the result",
                 f"out = target.{case.op}(logits + {c}, ...)  # vs target.{case.op}(logits, ...)")


@invariant(CE_BWD, families=("confident",))
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
    ref, tol = ce_truth(case, [x, t, dl], depth=T.depth, strict=True)
    tc = torch.where(ign, 0, t).clamp(0, x.shape[-1] - 1).long()
    rt = torch.gather(ref, -1, tc[..., None])[..., 0]
    tt = torch.gather(tol, -1, tc[..., None])[..., 0]
    # rows whose gradient a tiny dloss pushed below 2**-100 are skipped: there the bfloat16 output
    # is subnormal or close to it, and no bound resolves 1 - p_t (seen with dloss = 2**-126)
    rows = ~ign & (rt.abs() >= 2.0**-100) & torch.isfinite(rt)
    assume(bool(rows.any()))
    assert bool((tt[rows] < rt[rows].abs() / 4).all()), "harness: the bound does not resolve 1 - p_t"
    dx = ce_run(case, target, x, t, dl)
    if tuple(dx.shape) != tuple(x.shape):
        fail("ce_confident_bf16_rows_keep_gradient", case, target, f"gradient shape {tuple(dx.shape)}", kind=WrongOutput)
    out = torch.gather(dx.double(), -1, tc[..., None])[..., 0]
    out, rt, tt = torch.where(rows, out, 0.0), torch.where(rows, rt, 0.0), torch.where(rows, tt, 1.0)
    assert_close("ce_confident_bf16_rows_keep_gradient", case, target, out, rt, tt,
                 "target-column gradient of a confident bfloat16 row lost (softmax rounded before the one-hot?)")


@invariant(*CE)
def ce_inputs_unmodified(case, target):
    """logits (with the gaps of their storage), target and dloss are bitwise unchanged by the call."""
    args = case.tensors(target.device)
    bases = [a._base if a._base is not None else a for a in args]
    before = [b.clone() for b in bases]
    ce_run(case, target, *args)
    for name, b0, b1 in zip(("logits", "target", "dloss"), before, bases):
        assert_bitwise("ce_inputs_unmodified", case, target, b1, b0, f"{name} (or its storage) was modified")


@invariant(*CE)
def ce_all_outputs_written(case, target):
    """Under NaN-poisoned allocations (torch.empty returns NaN), the output has NaN exactly where
    the FP64 oracle has: an element or row the kernel forgot to write stays NaN."""
    args = case.tensors(target.device)
    with poisoned_allocations():
        out = ce_run(case, target, *args)
    ref, _ = ce_truth(case, args)
    _ce_shape("ce_all_outputs_written", case, target, out, ref.shape)
    bad = torch.isnan(out.double()) != torch.isnan(ref)
    keep = ce_default_mask(case, args, ref.shape) if case.op == CE_BWD else None
    if keep is not None:  # NaN or 0 on ignored rows of NaN / inf logits (ce_default_mask)
        bad = bad & keep
    if bool(bad.any()):
        i = worst(bad, torch.ones_like(ref))
        fail("ce_all_outputs_written", case, target, "NaN pattern differs from the oracle under poisoned allocations",
             i, ref[i], out[i])


@invariant(*CE, families=("out_of_range_target",), strict="ce_out_of_range_target_named")
def ce_out_of_range_target_raises(case, target, strict=False):
    """A target outside [0, V) that is not ignore_index raises instead of returning a result
    (inputs: strategies.ce_targets(invalid=True)). default: any exception (torch on CUDA raises a
    device-side assert, by design: an index check on the host would cost a synchronization);
    strict (ce_out_of_range_target_named): a Python exception whose message names the target, and
    no device-side crash."""
    name = "ce_out_of_range_target_named" if strict else "ce_out_of_range_target_raises"
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
            fail(name, case, target, f"raised {type(e).__name__} without naming the target: {e}")
        if device_assert(e):
            accept_context_loss()  # isolated, the worker restarts; in-process the context is lost
        return
    fail(name, case, target,
         f"an out-of-range target returned a result instead of raising: {out if out.numel() <= 4 else out.shape}")


# ==============================================================================================
# many rows, masked chunks, and autograd composition: laws that span the op families
# ==============================================================================================
@invariant(*ALL, *MERGES, *STATES, *CE, families=(MANY_ROWS,))
def many_rows_match_oracle(case, target):
    """Thousands of short rows (2**k and 2**k +- 1 rows up to the profile's element budget, rows
    of 1 to 32 elements: strategies.many_rows_cases) match the FP64 oracle within the same bounds
    as few rows do (each op's oracle law: matches_oracle, merge_tree_matches_one_shot,
    merge_states_matches_one_shot, ce_matches_oracle), under NaN-poisoned allocations. A kernel
    that tiles rows per program and miscounts its programs leaves tail rows unwritten (NaN) or
    drops them from a mean; a reduction whose per-row terms are stored in a 16-bit dtype loses
    them when there are many (each term is loss / N). The cross-entropy cases draw "mean" half the
    time, and rows that repeat one pattern, so that an error made alike in every row adds up.
    Tier default: batches of thousands of rows are the common case of every op."""
    if isinstance(case, StatesCase):
        o, lse = case.stacked(target.device)
        with poisoned_allocations():
            out = run(target, "merge_states", o, lse)
        check_one_shot("many_rows_match_oracle", case, target, out, case.order, max(len(case.order) - 1, 1))
    elif isinstance(case, MergeCase):
        with poisoned_allocations():
            out = case.run_tree(lambda *a: run(target, case.op, *a), target.device)
        check_one_shot("many_rows_match_oracle", case, target, out, tree_leaves(case.tree), tree_depth(case.tree))
    elif isinstance(case, CECase):
        ce_check_oracle("many_rows_match_oracle", case, target, poisoned=True)
    else:
        check_oracle("many_rows_match_oracle", case, target, poisoned=True)


@invariant(*FORWARD, families=(MASKED_CHUNKS,))
def masked_chunks_match_oracle(case, target):
    """Rows longer than a power of two 2**k (2**9 <= 2**k <= the profile's longest row) that hold
    whole blocks of -inf aligned to powers of two, [i 2**j, (i + 1) 2**j) for 9 <= j <= k
    (strategies.masked_chunks_input), match the FP64 oracle within its bound (matches_oracle's
    check). A kernel that cuts its rows into chunks of 2**j columns, declared in
    block_boundaries() or not, meets a chunk of nothing but -inf, whose own max is -inf. (The
    cross-entropy laws meet such chunks through the neg_inf_blocks family, which aims at the same
    powers of two; a law of their own here cost the CPU run ~13 s for rows of 2049 classes.) Tier
    default: attention masks and vocabulary masks produce such rows."""
    check_oracle("masked_chunks_match_oracle", case, target)


AUTOGRAD_OPS = ("softmax", "log_softmax", "logsumexp", CE_FWD)
_TORCH64 = {"softmax": lambda t: torch.softmax(t, -1), "log_softmax": lambda t: torch.log_softmax(t, -1)}


def _seeded(case, salt: str, shape, dtype, device) -> torch.Tensor:
    """Normal values rounded to dtype, seeded by the case's recipe (a replay gets the same)."""
    gen = torch.Generator().manual_seed(zlib.crc32(f"{salt}:{case!r}".encode()))
    return torch.randn(tuple(shape), generator=gen, dtype=torch.float64).to(dtype).to(device)


def _vjp_reference(case, x, g, y):
    """(FP64 autograd VJP of the op at x for the cotangent g, its bound for a correct kernel).
    softmax / log_softmax: the explicit VJP's bound at the output y the kernel saved (truth), plus
    how far the VJP moves between y and the exact forward: _rounded_forward_effect with |dy| within
    the forward's bound at x (each output of a correct kernel is) and twice the float64 forward's.
    logsumexp: dx = softmax(x) g, the FP64 oracle's softmax times g (torch's float64 backward forms
    exp(x - lse) with lse rounded to float64, which at |x| near 3e38 is off by far more than 1:
    for x = [max, max] it gives [1, 1] g), with softmax within its bound and the product rounded
    twice (2 u |dx|)."""
    if case.op == "logsumexp":
        x64 = x.detach().double()
        ref = oracles.softmax(x64) * g.double()[..., None]
        _, tol_p = truth("softmax", case.dtype, [x.detach()])
        # a backward that forms exp(x - lse) from the forward's saved output (autograd saves it,
        # rounded to its dtype: torch's does) moves dx by |dx| expm1(|lse error|), the error
        # within logsumexp's own bound; huge enough at |x| ~ finfo.max to cover anything there
        _, tol_l = truth("logsumexp", case.dtype, [x.detach()])
        saved = ref.abs() * torch.expm1(tol_l.clamp_max(700))[..., None]
        eps = g.double().abs()[..., None] * tol_p + 2 * T.TABLE[case.dtype].u_c * ref.abs() + torch.nan_to_num(saved, nan=0.0)
        return ref, T.total_tolerance(eps, ref, case.dtype, case.dtype)
    x64 = x.detach().double().requires_grad_(True)
    out64 = _TORCH64[case.op](x64)
    (ref,) = torch.autograd.grad(out64, x64, g.double())
    vjp = case.op + "_backward"
    _, tol = truth(vjp, case.dtype, [y.detach(), g])
    _, tol_f = truth(case.op, case.dtype, [x.detach()])
    _, fwd64 = truth(case.op, torch.float64, [x.detach()])
    y64 = out64.detach()
    du = torch.where(torch.isfinite(y64), tol_f + 2 * torch.nan_to_num(fwd64, nan=0.0), 0.0)
    extra = torch.nan_to_num(_rounded_forward_effect(vjp, y64, g.double(), du), nan=0.0)
    return ref, tol + extra


@invariant(*AUTOGRAD_OPS, needs=("autograd",), max_cols=128)
def autograd_composition(case, target):
    """Autograd through the op composes: the same input x (a leaf, as laid out) feeds two calls
    (two outputs, or two losses for cross_entropy) and x.grad already holds G0; after
    torch.autograd.backward of both with cotangents g1, g2 (seeded by the case), x.grad ==
    G0 + VJP(g1) + VJP(g2) against FP64 autograd (softmax, log_softmax: torch's float64 ops;
    logsumexp: the FP64 oracle's softmax times g; cross_entropy: the FP64 oracle's gradient,
    oracles/cross_entropy.py, which test_meta checks against torch's), each VJP within its bound (_vjp_reference; ce_truth) and the two
    additions in the dtype within an ulp of their largest partial sum. x and its storage, the
    targets, and the outputs the caller holds are bitwise unchanged by the backward. An explicit
    backward function cannot show a backward that writes into a saved tensor (the logits, the
    output) behind autograd's version counter: its second use then reads the gradient instead.
    Rows with NaN or +inf (softmax family) are left to the other laws; rows up to 128 columns (the
    law is about autograd's bookkeeping, which row length does not change; the other laws check
    long rows). Tier default: two losses on one set of logits, and gradient accumulation, are
    everyday training."""
    ce = isinstance(case, CECase)
    args = case.tensors(target.device)
    base = args[0]._base if args[0]._base is not None else args[0]
    before = [base.clone()] + [a.clone() for a in args[1:]]
    x = args[0].detach().requires_grad_(True)
    if not ce:
        xd = x.detach().double()
        assume(xd.shape[-1] >= 1 and not bool(torch.isnan(xd).any()) and not bool((xd == math.inf).any())
               and bool((xd > -math.inf).any(-1).all()))
    with torch.enable_grad():
        outs = [ce_run(case, target, x, *args[1:]) if ce else run(target, case.op, x) for _ in range(2)]
        if not all(isinstance(o, torch.Tensor) and o.requires_grad for o in outs):
            fail("autograd_composition", case, target, "the output does not require grad for an input that does")
        held = [o.detach().clone() for o in outs]
        gs = [_seeded(case, f"g{i}", o.shape, o.dtype, o.device) for i, o in enumerate(outs)]
        g0 = _seeded(case, "grad", x.shape, x.dtype, x.device)
        x.grad = g0.clone()
        with warnings.catch_warnings():  # a strided x's gradient need not share its strides
            warnings.filterwarnings("ignore", message="grad and param do not obey the gradient layout contract")
            torch.autograd.backward(outs, gs)
    call = ("x = x.detach().requires_grad_()\nx.grad = G0.clone()  # an existing gradient\n"
            + (f"l1 = target.{CE_FWD}(x, labels, {case.kwargs_code()}); l2 = target.{CE_FWD}(x, labels, {case.kwargs_code()})\n"
               "torch.autograd.backward([l1, l2], [g1, g2])" if ce else
               f"y1, y2 = target.{case.op}(x), target.{case.op}(x)\ntorch.autograd.backward([y1, y2], [g1, g2])")
            + "\nout = x.grad  # vs G0 + VJP(g1) + VJP(g2) in FP64")
    names = ("logits", "target") if ce else ("x",)
    for nm, b0, b1 in zip(names, before, [base] + list(args[1:])):
        assert_bitwise("autograd_composition", case, target, b1, b0, f"{nm} (or its storage) was modified by backward", call)
    for k, (o, h) in enumerate(zip(outs, held)):
        assert_bitwise("autograd_composition", case, target, o.detach(), h,
                       f"output {k + 1}, held by the caller, was modified by backward", call)
    if x.grad is None or tuple(x.grad.shape) != tuple(x.shape) or x.grad.dtype != x.dtype:
        got = None if x.grad is None else (tuple(x.grad.shape), x.grad.dtype)
        fail("autograd_composition", case, target, f"x.grad is {got}, expected shape {tuple(x.shape)} and {x.dtype}", call=call)
    refs, tols = [], []
    for g, y in zip(gs, held):
        if ce:
            bwd = dataclasses.replace(case, op=CE_BWD)
            r, t_ = ce_truth(bwd, [x.detach(), args[1], g])
        else:
            r, t_ = _vjp_reference(case, x, g, y)
        refs.append(r)
        tols.append(t_)
    ref = g0.double() + refs[0] + refs[1]
    size = g0.double().abs() + refs[0].abs() + refs[1].abs() + tols[0] + tols[1]
    tol = tols[0] + tols[1] + T.ulp(torch.nan_to_num(size, nan=0.0, posinf=0.0), case.dtype)
    tol = torch.nan_to_num(tol, nan=math.inf)
    bad = T.compare(x.grad, ref, tol, case.dtype)
    if ce:  # ignored rows of NaN / inf logits: NaN or 0 (ce_default_mask; torch gives NaN)
        keep = ce_default_mask(dataclasses.replace(case, op=CE_BWD), [x.detach(), args[1]], ref.shape)
        bad = bad if keep is None else bad & keep
    if bool(bad.any()):
        i = worst(bad, (x.grad.double() - ref).abs() / tol.clamp_min(1e-300))
        fail("autograd_composition", case, target,
             f"x.grad after two backward passes onto an existing gradient differs from G0 + VJP(g1) + VJP(g2): "
             f"{int(bad.sum())} of {bad.numel()} elements out of bounds", i, ref[i], x.grad[i], tol[i], call, out_name="x.grad")
