"""The autograd laws judge a target in the dtypes it is differentiable in, and accept a backward
that refuses to run again on its graph.

Most kernel libraries compute in float32 and refuse float64. The autograd probe
(Target.autograd_probe) tries float64, float32, bfloat16 and float16, and the laws that need
autograd draw their examples in the dtypes where it found a differentiable output, so such a
library's backward is judged; gradcheck_float64, which runs in float64 alone, is skipped with its
refusal as the reason. Here a float32-only target (refusing every other dtype with
NotImplementedError, a declared refusal) passes each autograd law on examples the law judged,
and a float32-only target whose backward reads its cotangent as if it were contiguous is caught.

A backward may raise rather than run twice on one graph (torch.compile's, with donated buffers):
a clear refusal, which autograd_backward_twice passes and which gradcheck_float64 never asks for
(each of its backward calls gets a graph of its own)."""
from __future__ import annotations

import types

import pytest
import torch
from hypothesis import HealthCheck, errors, find, given, settings, strategies as st

from .. import strategies as S
from ..applicability import skip_reason
from ..failures import PropertyFailure
from ..invariants import REGISTRY, law
from ..mutants import autograd_cotangent_as_contiguous
from ..ops import Target

FORWARDS = ("softmax", "log_softmax", "logsumexp")
AUTOGRAD_LAWS = [inv.name for inv in REGISTRY if "autograd" in inv.needs and "float64" not in inv.needs
                 and inv.tier == "default"]


def _float32_only(x: torch.Tensor, name: str):
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"{name}: x must be a floating-point torch.Tensor, got {x!r:.80}")
    if x.dtype != torch.float32:
        raise NotImplementedError(f"{name}: computes in float32 only, got {x.dtype}: float64 is not offered")


def _softmax(x):
    _float32_only(x, "softmax")
    return torch.softmax(x, -1)


def _log_softmax(x):
    _float32_only(x, "log_softmax")
    return torch.log_softmax(x, -1)


def _logsumexp(x):
    _float32_only(x, "logsumexp")
    return torch.logsumexp(x, -1)


def _softmax_vjp(y, g):
    """y * (g - sum(y * g)) computed in float32 (float64 for float64), as torch's CPU backward."""
    c = torch.promote_types(y.dtype, torch.float32)
    yc, gc = y.to(c), g.to(c)
    return (yc * (gc - (yc * gc).sum(-1, keepdim=True))).to(y.dtype)


def _softmax_strides_ignored(x):
    _float32_only(x, "softmax")
    return autograd_cotangent_as_contiguous.softmax(x)  # the mutant: its backward reads g as contiguous


def _module(name: str, **functions) -> types.ModuleType:
    module = types.ModuleType(f"{__name__}.{name}")
    module.SUITE_REFUSALS = (NotImplementedError,)
    for op, fn in functions.items():
        setattr(module, op, fn)
    return module


FLOAT32_ONLY = _module("float32_only", softmax=_softmax, log_softmax=_log_softmax, logsumexp=_logsumexp)
STRIDES_IGNORED = _module("float32_only_strides_ignored", softmax=_softmax_strides_ignored)


def _target(module, device) -> Target:
    t = Target(module)
    t.device, t.record = device, False
    return t


def _judged(inv, t, op, max_examples) -> list:
    """The dtypes of the examples inv judged (passed, not discarded) on t's op; fails the test
    when it judged none."""
    judged = []

    @settings(max_examples=max_examples, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def check(data):
        case = data.draw(S.cases(op, inv.families, inv.max_cols), label="case")
        inv.check(case, t)
        judged.append(case.dtype)

    try:
        check()
    except errors.Unsatisfiable as e:
        pytest.fail(f"{inv.name} judged none of {t.name}.{op}'s cases: {e}")
    return judged


def test_the_probe_finds_float32():
    """The probe answers per dtype: differentiable in float32, the refusal's message elsewhere; the
    laws that need autograd apply, and gradcheck_float64 is skipped naming the float64 refusal."""
    t = _target(FLOAT32_ONLY, "cpu")
    for op in FORWARDS:
        assert t.autograd_dtypes(op) == (torch.float32,), t.autograd_probe(op)
        assert t.supports_autograd(op) and not t.supports_autograd(op, torch.float64)
        for name in AUTOGRAD_LAWS:
            if op in law(name).ops:
                assert skip_reason(law(name), op, t) is None, name
        reason = skip_reason(law("gradcheck_float64"), op, t)
        assert reason is not None and "not differentiable in float64" in reason, reason
        assert "float64: NotImplementedError" in reason and "float64 is not offered" in reason, reason


def test_a_module_without_autograd_is_skipped_with_every_dtype_named():
    """An op differentiable in no dtype is skipped, with what the probe met in each."""
    plain = _module("no_autograd", softmax=lambda x: torch.softmax(x.detach(), -1))
    reason = skip_reason(law("autograd_composition"), "softmax", _target(plain, "cpu"))
    assert reason == (f"{__name__}.no_autograd.softmax is not differentiable in any dtype (its autograd probe: "
                      "float64, float32, bfloat16, float16: its output does not require grad)"), reason


@pytest.mark.parametrize("law_name,op", [(n, op) for n in AUTOGRAD_LAWS for op in FORWARDS if op in law(n).ops])
def test_autograd_laws_judge_a_float32_only_target(law_name, op, target):
    """Each autograd law passes the correct float32-only target on examples it judged (not all
    discarded: before the probe tried float32, the laws were skipped for such a target)."""
    inv, t = law(law_name), _target(FLOAT32_ONLY, target.device)
    assert skip_reason(inv, op, t) is None
    judged = _judged(inv, t, op, 15)
    assert set(judged) == {torch.float32}, judged


def test_dtypes_without_autograd_are_not_judged(target):
    """A module that takes float64 but returns a plain tensor there (no autograd in that dtype)
    is judged by the autograd laws in the dtypes where it is differentiable, not failed in float64."""
    module = _module("float64_without_autograd",
                     softmax=lambda x: torch.softmax(x.detach() if x.dtype == torch.float64 else x, -1))
    inv, t = law("autograd_composition"), _target(module, target.device)
    assert t.autograd_dtypes("softmax") == (torch.float32, torch.bfloat16, torch.float16)
    judged = _judged(inv, t, "softmax", 20)
    assert judged and torch.float64 not in judged, judged


def test_a_float32_only_backward_that_ignores_strides_is_caught(target):
    """autograd_cotangent_layouts catches the float32-only softmax whose backward reads its
    cotangent as contiguous, on a float32 case."""
    inv, t = law("autograd_cotangent_layouts"), _target(STRIDES_IGNORED, target.device)

    def fails(case) -> bool:
        try:
            inv.check(case, t)
        except PropertyFailure:
            return True
        except errors.UnsatisfiedAssumption:
            return False
        return False

    case = find(S.cases("softmax", inv.families, inv.max_cols), fails,
                settings=settings(max_examples=300, derandomize=True, database=None, deadline=None,
                                  suppress_health_check=list(HealthCheck)))
    assert case.dtype == torch.float32
    with pytest.raises(PropertyFailure, match=r"^\[autograd_cotangent_layouts\] \(default tier\) .*gradient for a "
                       r"cotangent .* differs from its FP64 VJP"):
        inv.check(case, t)


class _OnceOnly(torch.autograd.Function):
    """softmax whose backward runs once per graph and raises on a second call, as a compiled
    backward with donated buffers does."""

    @staticmethod
    def forward(ctx, x):
        y = torch.softmax(x, -1)
        ctx.save_for_backward(y)
        ctx.ran = False
        return y

    @staticmethod
    def backward(ctx, g):
        if ctx.ran:
            raise RuntimeError("This backward function was compiled with non-empty donated buffers which requires "
                               "create_graph=False and retain_graph=False")
        ctx.ran = True
        (y,) = ctx.saved_tensors
        return _softmax_vjp(y, g)


ONCE_ONLY = _module("backward_once_per_graph", softmax=_OnceOnly.apply)


@pytest.mark.parametrize("law_name", ["gradcheck_float64", "autograd_backward_twice"])
def test_a_backward_that_refuses_a_second_call_passes(law_name, target):
    """gradcheck_float64 (one graph per backward) and autograd_backward_twice (a refusal is not a
    wrong value) pass the softmax whose backward raises when called again on its graph, on
    examples they judged."""
    inv, t = law(law_name), _target(ONCE_ONLY, target.device)
    assert skip_reason(inv, "softmax", t) is None
    judged = _judged(inv, t, "softmax", 40)
    assert judged, f"{law_name} judged none of its cases"
