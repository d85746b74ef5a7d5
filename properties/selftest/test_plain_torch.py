"""The default tier's bar for a correct plain-PyTorch module (properties/selftest/plain_torch.py):
torch's conventions are not bugs.

* A bound is never NaN: where the exact result is NaN, a law comparing two outputs asks them to
  match exactly, and its report says what differs.
* logsumexp may return the input's dtype (torch.logsumexp's), judged at that precision; the strict
  tier keeps demanding float32 for 16-bit input, and a logsumexp whose sum is itself formed in
  16 bits (torch.logsumexp of bfloat16 input, directly) stays below the bar.
* A cross-entropy gradient formed as exp(x - lse) - onehot keeps its NaN only where the logits
  poison the row ([inf, 0] gives [nan, 0]): every law judges it by the same rule
  (families/cross_entropy/truth.py, nan_rows_keep_their_nan), and a gradient with the NaN scrubbed away still fails.

The direct cases run in well under a second each; the default laws then run on the module with a
few examples each, the laws that once failed it among them."""
from __future__ import annotations

import math
import types

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from .. import strategies as S, tolerances
from ..case import Case
from ..families.cross_entropy.case import CECase
from ..families.cross_entropy.strategies import DLoss, Targets
from ..failures import OutOfTolerance, PropertyFailure, WrongOutput
from ..invariants import law
from ..invariants._checks import assert_close
from ..invariants._registry import checking
from ..mutants import ce_backward_nan_scrubbed
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


def _ce_case(op, rows, target, reduction="none", dloss=None):
    return CECase(op, torch.float32, _logits(rows), Targets(tuple(target)), -100, reduction, 0.0,
                  dloss if dloss is not None or op == "cross_entropy" else DLoss())


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
        assert not bool(torch.isnan(e.tol).any()) and bool((e.tol[torch.isnan(e.value)] == 0).all()), (name, e.tol)
    ref, tol = OPS["log_softmax"].truth_at(torch.float32, [x], tolerances.depth_any)
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
    zeros = torch.zeros(2, dtype=torch.float64)
    assert not bool(tolerances.compare(torch.zeros(2), zeros, nan_tol, torch.float32).any())
    assert bool(tolerances.compare(torch.ones(2), torch.zeros(2, dtype=torch.float64), nan_tol, torch.float32).all())


# ----------------------------------------------------------------------------------------------
# logsumexp in the input's dtype
# ----------------------------------------------------------------------------------------------
LSE_ROWS = [[0.0, -5.0], [0.3, -1.2], [100.5, 99.0]]  # lse near 0 (a fine bfloat16 grid), and near 100


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["output_dtype_and_shape", "matches_oracle", "all_outputs_written",
                                  "permutation_equivariance", "layout_invariance"])
def test_logsumexp_in_the_input_dtype_passes_the_default_tier(name, dtype, target):
    """torch.logsumexp returns the input's dtype: a logsumexp computed in float32 and cast to the
    16-bit input dtype (rounded twice) meets every default law, judged at the returned precision."""
    plain = _target(target.device)
    assert plain.call("logsumexp", torch.zeros(2, 3, dtype=dtype)).dtype == dtype
    case = _case("logsumexp", LSE_ROWS, dtype)
    if name == "layout_invariance":
        case = Case("logsumexp", dtype, (Input(case.inputs[0].logits, (3,), Layout("transposed")),))
    assert _fails(name, case, plain) is None


def test_the_strict_tier_keeps_float32_for_a_16_bit_lse(target):
    """matches_oracle_strict still demands the contract's float32 lse for 16-bit input."""
    e = _fails("matches_oracle_strict", _case("logsumexp", LSE_ROWS), _target(target.device))
    assert isinstance(e, WrongOutput) and "torch.float32" in str(e) and "torch.bfloat16" in str(e), e


def test_a_logsumexp_of_another_dtype_still_fails():
    """Neither tier accepts a dtype that is neither float32 nor the input's (float16 for bfloat16
    input), and the report names both accepted dtypes."""
    plain = _target("cpu", logsumexp=lambda x, dim=-1: plain_torch.logsumexp(x, dim).to(torch.float16))
    e = _fails("output_dtype_and_shape", _case("logsumexp", LSE_ROWS), plain)
    assert isinstance(e, WrongOutput) and "may be torch.float32 or torch.bfloat16" in str(e), e


def test_a_logsumexp_summed_in_16_bits_stays_below_the_bar(target):
    """The default tier's bar for 16-bit input is float32 arithmetic inside: torch.logsumexp
    applied to bfloat16 input directly rounds its sum of exponentials to bfloat16 before the log
    ([0, -5]: 0.0077820 where the exact lse is 0.0067153, a float32 sum rounded once gives
    0.0067139), an error the returned dtype's rounding does not cover."""
    direct = _target(target.device, logsumexp=lambda x, dim=-1: torch.logsumexp(x, dim))
    assert isinstance(_fails("matches_oracle", _case("logsumexp", LSE_ROWS), direct), OutOfTolerance)


# ----------------------------------------------------------------------------------------------
# a cross-entropy gradient formed as exp(x - lse) - onehot: [inf, 0] gives [nan, 0]
# ----------------------------------------------------------------------------------------------
POISONED = [[inf, 0.0], [0.0, 0.0]]


@pytest.mark.parametrize("name,op", [("ce_matches_oracle", "cross_entropy_backward"),
                                     ("all_outputs_written", "cross_entropy_backward"),
                                     ("autograd_cotangent_layouts", "cross_entropy"),
                                     ("autograd_composition", "cross_entropy")])
def test_a_gradient_that_keeps_its_nan_where_the_logits_poison_the_row(name, op, target):
    """float32 logits [[inf, 0], [0, 0]], targets [0, 0], reduction 'none': the exact gradient's
    row 0 is NaN, plain_torch's is [nan, 0] (exp(inf - inf), exp(0 - inf) - 0). The explicit
    backward's laws and the autograd laws accept it alike."""
    plain = _target(target.device)
    x = torch.tensor(POISONED, device=target.device)
    dx = plain.call("cross_entropy_backward", x, torch.tensor([0, 0], device=target.device),
                    torch.ones(2, device=target.device), reduction="none")
    assert math.isnan(dx[0, 0]) and dx[0, 1] == 0.0, dx
    assert _fails(name, _ce_case(op, POISONED, (0, 0)), plain) is None


@pytest.mark.parametrize("rows", [POISONED, [[nan, 1.0], [0.0, 0.0]], [[-inf, -inf], [0.0, 0.0]]])
def test_a_gradient_with_its_nan_scrubbed_still_fails(rows, target):
    """The rule leaves the elements beside the poison free, not the poison: a backward that stores
    NaN as 0 (mutants/ce_backward_nan_scrubbed) fails ce_matches_oracle on a row with +inf, with
    NaN, and on an all -inf row (every element poisons it)."""
    scrubbed = Target(ce_backward_nan_scrubbed)
    scrubbed.device, scrubbed.record = target.device, False
    e = _fails("ce_matches_oracle", _ce_case("cross_entropy_backward", rows, (0, 0)), scrubbed)
    assert e is not None and "expected is NaN, actual is not" in str(e), e


# ----------------------------------------------------------------------------------------------
# the default laws on plain_torch, a few examples each
# ----------------------------------------------------------------------------------------------
PAIRS = [("output_dtype_and_shape", "logsumexp"), ("matches_oracle", "logsumexp"), ("all_outputs_written", "logsumexp"),
         ("permutation_equivariance", "logsumexp"), ("shift_invariance", "logsumexp"),
         ("layout_invariance", "logsumexp"), ("dim_argument", "logsumexp"), ("row_independence", "logsumexp"),
         ("autograd_composition", "logsumexp"), ("autograd_cotangent_layouts", "logsumexp"),
         ("log_softmax_is_x_minus_logsumexp", "log_softmax"), ("matches_oracle", "log_softmax"),
         ("matches_oracle", "softmax"), ("matches_oracle", "softmax_backward"),
         ("matches_oracle", "log_softmax_backward"),
         ("ce_matches_oracle", "cross_entropy"), ("ce_matches_oracle", "cross_entropy_backward"),
         ("ce_loss_is_lse_minus_target_logit", "cross_entropy"), ("all_outputs_written", "cross_entropy_backward"),
         ("autograd_composition", "cross_entropy"), ("autograd_cotangent_layouts", "cross_entropy")]
EXAMPLES = 15  # per pair: the whole set runs in about ten seconds on two CPU cores


@pytest.mark.parametrize("name,op", PAIRS, ids=[f"{n}-{o}" for n, o in PAIRS])
def test_plain_torch_passes_the_default_laws(name, op, target):
    """Each default law of PAIRS (those that once failed such a module among them: the output
    dtype of logsumexp, the autograd laws on cross_entropy, the oracle laws) holds for plain_torch
    on the cases the suite draws for it."""
    inv = law(name)
    assert inv.tier == "default" and op in inv.ops
    plain = _target(target.device)

    @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def check(data):
        inv.check(data.draw(S.cases(op, inv.families, inv.max_cols), label="case"), plain)

    check()
