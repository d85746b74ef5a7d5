"""The default tier's bar for a correct plain-PyTorch module (properties/selftest/plain_torch.py):
torch's conventions are not bugs.

* A bound is never NaN: where the exact result is NaN, a law comparing two outputs asks them to
  match exactly, and its report says what differs.

Each direct case runs in well under a second."""
from __future__ import annotations

import math
import types

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from .. import tolerances as T
from ..case import Case
from ..failures import PropertyFailure
from ..invariants import law
from ..invariants._checks import assert_close
from ..invariants._registry import checking
from ..ops import OPS, Target
from ..strategies import Input, Layout, Logits
from . import plain_torch

inf, nan = math.inf, math.nan


def _target(device, **overrides):
    """plain_torch as a target on device, with some of its functions replaced."""
    if overrides:
        module = types.ModuleType(f"{plain_torch.__name__}_with_{'_'.join(overrides)}")
        module.__dict__.update({k: v for k, v in vars(plain_torch).items() if not k.startswith("__")})
        module.__dict__.update(overrides)
    else:
        module = plain_torch
    target = Target(module)
    target.device, target.record = device, False
    return target


def _logits(rows, dtype="float32"):
    """An Input of these rows of logit values, contiguous."""
    cols = len(rows[0])
    patches = tuple((r, c, c + 1, v) for r, row in enumerate(rows) for c, v in enumerate(row) if v != 0.0)
    return Input(Logits(len(rows), cols, dtype, ("const", 0.0), patches, "special"), (len(rows),), Layout())


def _case(op, rows, dtype=torch.bfloat16):
    return Case(op, dtype, (_logits(rows, str(dtype).replace("torch.", "")),))


def _fails(name, case, target):
    """The failure the law raises on the case, or None (inside Hypothesis, as the suite runs a law:
    a case the law does not judge is an error here)."""
    found = []

    @settings(max_examples=1, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.just(case))
    def run(c):
        try:
            law(name).check(c, target)
        except PropertyFailure as e:
            found.append(e)

    run()
    return found[0] if found else None


# ----------------------------------------------------------------------------------------------
# bounds are never NaN, and reports say what differs
# ----------------------------------------------------------------------------------------------
def _nan_to_zero_log_softmax(x, dim=-1):
    """log_softmax with NaN results stored as 0."""
    return torch.nan_to_num(torch.log_softmax(x.float(), dim), nan=0.0).to(x.dtype)


def test_laws_comparing_two_calls_compare_nan_rows_by_value():
    """Logits [[nan, 0], [0, 0]]: the exact log_softmax of row 0 is NaN, where the bound used to
    be NaN too, and dim_argument reported two equal results as 'actual=0.0 expected=0.0
    tolerance=nan ... out of bounds'. The two calls agree (both 0.0): dim_argument passes; the
    NaN scrubbed away is matches_oracle's failure, whose report says so."""
    module = _target("cpu", log_softmax=_nan_to_zero_log_softmax)
    case = _case("log_softmax", [[nan, 0.0], [0.0, 0.0]], torch.float32)
    assert _fails("dim_argument", case, module) is None
    e = _fails("matches_oracle", case, module)
    assert "expected is NaN, actual is not" in str(e) and "tolerance=nan" not in str(e), e


def test_a_bound_is_never_nan_and_an_exact_match_is_asked_where_the_truth_is_nan():
    """The truth of every op at a NaN or +inf input has no NaN bound (0 where the exact result is
    NaN); two outputs held to each other there must then be equal, and the report says where
    they differ and why, with no 'tolerance=nan'."""
    case = _case("log_softmax", [[nan, 0.0], [inf, 1.0]], torch.float32)
    (x,) = case.tensors()
    for name in ("softmax", "log_softmax", "logsumexp"):
        e = OPS[name].truth(Case(name, torch.float32, case.inputs), [x])[0]
        assert not bool(torch.isnan(e.tol).any()) and bool((e.tol[torch.isnan(e.ref)] == 0).all()), (name, e.tol)
    ref, tol = OPS["log_softmax"].reference(torch.float32, [x], T.depth_any)
    assert not bool(torch.isnan(tol).any())
    same = torch.zeros(2, 2, dtype=torch.float64)
    with checking("layout_invariance", "default"):
        assert_close(case, _target("cpu"), same, same, 2 * tol, "strided input differs")
        with pytest.raises(PropertyFailure) as e:
            assert_close(case, _target("cpu"), same + torch.eye(2, dtype=torch.float64), same, 2 * tol,
                         "strided input differs")
    assert "unequal where an exact match is due" in str(e.value) and "tolerance=0" in str(e.value), e.value
    assert "nan" not in str(e.value).split("reproducer")[0].split("tolerance=")[1], e.value
    # a NaN bound formed elsewhere is read as an exact match, not as 'out of bounds' of NaN
    nan_tol = torch.full((2,), nan, dtype=torch.float64)
    assert not bool(T.compare(torch.zeros(2), torch.zeros(2, dtype=torch.float64), nan_tol, torch.float32).any())
    assert bool(T.compare(torch.ones(2), torch.zeros(2, dtype=torch.float64), nan_tol, torch.float32).all())
