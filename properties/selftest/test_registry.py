"""The op registry: a new op is its spec, a kernel and its oracle.

A toy op, softmax with a temperature (``softmax_t(x, dim=-1, temperature=1.0)``, truth: the FP64
softmax of x / T), is registered from an OpSpec alone, here, without touching the suite: its case
strategy, FP64 truth and bound, output rule and attributes. Every default-tier law that selects it
by those attributes (the generic laws and the softmax family's) then runs on a toy implementation
and passes; broken toy implementations are caught by the generic laws, so the test can fail. The
built-in specs are checked against their semantics rows, and registration against bad specs."""
from __future__ import annotations

import math
import sys
import types
from dataclasses import dataclass

import pytest
import torch
from hypothesis import HealthCheck, errors, find, given, settings, strategies as st

from softmax_properties import oracles

from .. import replay, strategies as S
from ..families.softmax import strategies as SM, truth
from ..applicability import device_reason, skip_reason
from ..case import Case
from ..failures import PropertyFailure
from ..invariants import law, laws_for
from ..ops import OPS, Target
from ..spec import OpSpec, lookup, register, registered
from ..strategies import Input, Layout, Logits

TEMPERATURES = (0.25, 0.5, 1.0, 2.0, 4.0)  # powers of two: x / T is exact wherever it does not overflow


# ----------------------------------------------------------------------------------------------
# the toy op: its case type, strategy, oracle, bound and spec
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TemperatureCase(Case):
    """A Case of the softmax family with the keyword option temperature."""

    temperature: float = 1.0

    def kwargs(self) -> dict:
        return {"temperature": self.temperature}


def _with_temperature(draw, case):
    T = draw(st.sampled_from(TEMPERATURES), label="temperature")
    return TemperatureCase(case.op, case.dtype, case.inputs, T)


def draw_toy(draw, spec, families=None, max_cols=None):
    return _with_temperature(draw, SM.logit_case(draw, spec, families, max_cols))


def draw_toy_many_rows(draw, spec):
    return _with_temperature(draw, SM.many_row_logit_case(draw, spec))


def toy_oracle(x, temperature=1.0):
    return oracles.softmax(x.double() / temperature)


def toy_truth_at(dtype, args, depth, temperature=1.0):
    """softmax's bound at the scaled logits x / T: a kernel that divides by a power of two T does
    so exactly (in float64 here), so softmax's error analysis holds for x / T as it stands."""
    return truth.softmax_truth_at(dtype, [args[0].double() / temperature], depth)


def torch_softmax_t(x, dim=-1, temperature=1.0):
    return torch.softmax(x / temperature, dim)


TOY = OpSpec(
    name="softmax_t", family="softmax", args=("x",), oracle=toy_oracle, truth=truth.logits_truth, cases=draw_toy,
    many_rows=draw_toy_many_rows, truth_at=toy_truth_at, differentiable=True, has_dim=True,
    out_range=(0.0, 1.0), normalized=True, torch_ref=torch_softmax_t,
    semantics=(("temperature 2 halves the logits", (torch.tensor([[0.0, math.log(9)]], dtype=torch.float64),),
                {"temperature": 2.0}, (torch.tensor([[0.25, 0.75]], dtype=torch.float64),)),
               ("all -inf row", (torch.tensor([[-math.inf, -math.inf]], dtype=torch.float64),), {"temperature": 0.5},
                (torch.tensor([[math.nan, math.nan]], dtype=torch.float64),))))


# ----------------------------------------------------------------------------------------------
# the toy implementation (this module is the target) and two broken ones
# ----------------------------------------------------------------------------------------------
SUITE_REFUSALS = ()


def softmax_t(x: torch.Tensor, dim: int = -1, temperature: float = 1.0) -> torch.Tensor:
    """softmax(x / temperature) along dim, computed in float64 and rounded to x's dtype."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"softmax_t: x must be a floating-point torch.Tensor, got {x!r:.80}")
    if not temperature > 0:
        raise ValueError(f"softmax_t: temperature must be positive, got {temperature!r}")
    return torch.softmax(x.double() / temperature, dim).to(x.dtype)


def _in_place(x, dim=-1, temperature=1.0):
    """Writes the result over its input (a memory-saving 'optimisation')."""
    return x.copy_(softmax_t(x, dim, temperature)) if x.is_contiguous() else softmax_t(x, dim, temperature)


def _float32_for_16_bit(x, dim=-1, temperature=1.0):
    """Returns float32 for 16-bit inputs (the compute dtype leaks out)."""
    y = torch.softmax(x.double() / temperature, dim)
    return y.to(torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype)


BROKEN = {"in_place": (_in_place, "inputs_unmodified"), "float32_for_16_bit": (_float32_for_16_bit, "output_dtype_and_shape")}


def _toy_target(device: str, fn=softmax_t) -> Target:
    """The toy implementation fn as a target on device (the suite's: CUDA unless interpreting)."""
    if fn is softmax_t:
        target = Target(sys.modules[__name__])
    else:
        module = types.ModuleType(f"{__name__}.{fn.__name__.strip('_')}")
        module.softmax_t, module.SUITE_REFUSALS = fn, ()
        target = Target(module)
    target.device, target.record = device, False
    return target


with registered(TOY):
    TOY_LAWS = [inv.name for inv in laws_for(TOY) if inv.tier == "default"]
GENERIC = [name for name in TOY_LAWS if law(name).check.__module__.endswith(".generic")]


def test_the_toy_is_selected_by_attributes_and_unregistered_after():
    """The generic laws and the softmax family's laws select the toy by its spec alone; leaving
    the block unregisters it."""
    assert {"inputs_unmodified", "all_outputs_written", "deterministic", "output_dtype_and_shape",
            "many_rows_match_oracle"} <= set(GENERIC)
    assert {"matches_oracle", "unit_row_sums", "within_range", "layout_invariance", "dim_argument",
            "gradcheck_float64"} <= set(TOY_LAWS)
    assert "autograd_composition" not in TOY_LAWS  # the spec gives no grad_truth
    assert "softmax_t" not in OPS


@pytest.mark.parametrize("law_name", TOY_LAWS)
def test_toy_op_passes_the_laws_that_select_it(law_name, target):
    """Each default-tier law that selects the toy holds for the toy implementation on the cases its
    spec draws (the temperature included)."""
    with registered(TOY):
        inv, toy = law(law_name), _toy_target(target.device)
        where = device_reason(inv, toy)
        if where:
            pytest.skip(where)
        assert skip_reason(inv, TOY.name, toy) is None

        @settings(max_examples=20, derandomize=True, database=None, deadline=None,
                  suppress_health_check=list(HealthCheck))
        @given(st.data())
        def check(data):
            inv.check(data.draw(S.cases(TOY.name, inv.families, inv.max_cols), label="case"), toy)

        try:
            check()
        except errors.Unsatisfiable as e:
            pytest.fail(f"{law_name} judged none of the toy's cases: {e}")


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_generic_laws_catch_a_broken_toy(broken, target):
    """A broken toy implementation fails a generic law on a case the toy's spec draws: the law the
    bug breaks (writing over the input: inputs_unmodified; a float32 result for 16-bit input:
    output_dtype_and_shape). Its failure report names the law and prints the temperature."""
    fn, expected = BROKEN[broken]
    with registered(TOY):
        inv, toy = law(expected), _toy_target(target.device, fn)

        def fails(case) -> bool:
            try:
                inv.check(case, toy)
            except PropertyFailure:
                return True
            except errors.UnsatisfiedAssumption:
                return False
            return False

        case = find(S.cases(TOY.name, inv.families, inv.max_cols), fails,
                    settings=settings(max_examples=200, derandomize=True, database=None, deadline=None,
                                      suppress_health_check=list(HealthCheck)))
        with pytest.raises(PropertyFailure, match=rf"^\[{expected}\] \(default tier\)") as e:
            inv.check(case, toy)
        assert f"temperature={case.temperature!r}" in str(e.value)


@pytest.mark.parametrize("name", list(OPS) + [TOY.name])
def test_every_spec_oracle_meets_its_semantics_rows(name):
    """Each spec's oracle reproduces its semantics rows (edge rows from oracles/semantics.py for
    the built-in ops), NaN for NaN and infinities exactly."""
    spec = TOY if name == TOY.name else lookup(name)
    if not spec.semantics:
        pytest.skip(f"{name} declares no semantics rows")
    for what, args, options, expected in spec.semantics:
        got = spec.oracle(*args, **options)
        got = got if isinstance(got, tuple) else (got,)
        assert len(got) == len(expected), what
        for g, want in zip(got, expected):
            g, want = g.double().reshape(want.shape), want.double()
            close = (g == want) | (torch.isnan(g) & torch.isnan(want)) | ((g - want).abs() <= 1e-12 * want.abs())
            assert bool(close.all()), f"{name} [{what}]: {g.tolist()}, the row says {want.tolist()}"


def test_registration_rejects_bad_specs():
    with pytest.raises(ValueError, match="registered twice"):
        register(lookup("softmax"))
    with pytest.raises(ValueError, match="must be a Python identifier"):
        OpSpec("soft max", "softmax", ("x",), toy_oracle, truth.logits_truth, draw_toy)
    with pytest.raises(ValueError, match="args must be a non-empty tuple of argument names"):
        OpSpec("softmax_u", "softmax", (), toy_oracle, truth.logits_truth, draw_toy)
    with pytest.raises(TypeError, match="oracle must be callable"):
        OpSpec("softmax_u", "softmax", ("x",), None, truth.logits_truth, draw_toy)
    with pytest.raises(ValueError, match="its forward op 'softmax_u' is not registered"):
        register(OpSpec("softmax_u_backward", "softmax", ("y", "dy"), toy_oracle, truth.logits_truth, draw_toy,
                        forward="softmax_u"))
    with pytest.raises(KeyError, match="unknown op 'softmax_u': registered ops are softmax, "):
        lookup("softmax_u")


def test_a_toy_family_case_replays(tmp_path):
    """A failing case of an op registered outside the built-in families, of the case type
    registered with it (this module's TemperatureCase), is written as a replay file that loads
    back to the same case and replays its law: PASS on the toy implementation, FAIL on one that
    ignores the temperature. Unregistered, the op's file is refused by name."""
    broken = tmp_path / "toy_ignores_temperature.py"
    broken.write_text("import torch\n\nSUITE_REFUSALS = ()\n\n\n"
                      "def softmax_t(x, dim=-1, temperature=1.0):\n    return torch.softmax(x.double(), dim).to(x.dtype)\n")
    row = Logits(1, 2, "float32", ("const", 0.0), ((0, 0, 1, 3.0),), family="moderate")
    case = TemperatureCase("softmax_t", torch.float32, (Input(row, (), Layout()),), 0.25)
    path = tmp_path / "saved.py"
    with registered(TOY):
        path.write_text(replay.render("matches_oracle", __name__, case, "", str(path)))
        inv, loaded, failed_on = replay.load(str(path))
        assert (inv, loaded, failed_on) == ("matches_oracle", case, __name__) and type(loaded) is TemperatureCase
        assert replay.replay(inv, loaded, __name__)[0] == "PASS"
        status, text = replay.replay(inv, loaded, str(broken))
        assert status == "FAIL" and "temperature=0.25" in text, text
    with pytest.raises(ValueError, match=r"CASE must be a case of a registered op"):
        replay.load(str(path))


def test_a_law_of_one_dtype_draws_only_that_dtype():
    """Invariant.dtypes reaches the strategies (strategies.only_dtypes, set around each law's
    search): gradcheck_float64's cases are all float64, where the rejection of the others made it
    call its check five times per example on a GPU; the restriction ends with the block."""
    assert law("gradcheck_float64").dtypes == (torch.float64,)
    seen = set()

    @settings(max_examples=40, deadline=None, database=None)
    @given(st.data())
    def draw(data):
        for op in ("softmax", "logsumexp", "cross_entropy", "attention", "attention_merge", "merge_states"):
            seen.add(data.draw(S.cases(op)).dtype)
    with S.only_dtypes(law("gradcheck_float64").dtypes):
        draw()
    assert seen == {torch.float64} and S.ONLY.dtypes is None
