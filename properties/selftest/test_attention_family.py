"""The attention family's plumbing: options a target lacks, the causal alignment and the empty
rows' lse it declares, and the autograd probe of an op of two outputs."""
from __future__ import annotations

import math
import types

import pytest
import torch
from hypothesis.errors import UnsatisfiedAssumption

from ..applicability import skip_reason
from ..families.attention import strategies as AS
from ..families.attention.case import AttnCase
from ..invariants import law
from ..invariants._checks import op_call
from ..mutants import _attn_base
from ..ops import Target


def _module(name, **fns):
    m = types.ModuleType(f"{__name__}.{name}")
    m.__dict__.update(fns)
    return m


def _causal_only(q, k, v, *, causal=False, scale=None):
    return _attn_base.attention(q, k, v, causal=causal, scale=scale)


def test_an_option_the_target_lacks_discards_the_case_and_skips_laws_that_need_it():
    t = Target(_module("causal_only", attention=_causal_only))
    case = AttnCase("attention", torch.float32, 1, 1, 1, 3, 3, 4, 4, window=(1, 0))
    with pytest.raises(UnsatisfiedAssumption):
        op_call(case, t, *case.tensors())
    plain = AttnCase("attention", torch.float32, 1, 1, 1, 3, 3, 4, 4, causal=True)
    o, lse = op_call(plain, t, *plain.tensors())
    assert o.shape == (1, 1, 3, 4) and lse.shape == (1, 1, 3)
    none = Target(_module("no_options", attention=lambda q, k, v: _attn_base.attention(q, k, v)))
    assert skip_reason(law("mask_locality"), "attention", none) == \
        f"the law needs the option causal=, which {none.name}.attention does not take"
    assert skip_reason(law("mask_locality"), "attention", t) is None


@pytest.mark.parametrize("empty", [False, True])
def test_cases_draw_only_the_options_the_target_offers(empty):
    """The strategies draw the options of OpSpec.offered that the target's function takes
    (strategies.OFFERED, set by the plugin from the signatures): a causal-only target never gets
    a case with a window, scale or softcap (such cases would only be discarded at the call), and
    its empty-row cases leave a query no key without a window."""
    from hypothesis import given, settings
    from .. import strategies as S
    t = Target(_module("causal_only", attention=_causal_only))
    saved = S.OFFERED.values
    seen = []
    try:
        S.OFFERED.values = {"attention": t.offered("attention")}
        assert S.OFFERED.values["attention"] == ("causal", "scale")

        @settings(max_examples=60, deadline=None, database=None)
        @given(AS.attn_cases("attention", empty=empty))
        def draw(case):
            assert case.window is None and case.softcap is None
            seen.append((case.causal, case.scale))
        draw()
    finally:
        S.OFFERED.values = saved
    assert any(c for c, _ in seen) and any(sc is not None for _, sc in seen)


@pytest.mark.parametrize("law_name", ["mask_locality", "split_kv_equivalence", "grouped_heads_match_repeated"])
def test_a_law_gets_the_cases_its_precondition_needs(law_name):
    """The laws whose precondition a plain draw meets one time in two to four draw their cases
    with it (the families masked, unmasked, grouped): every case meets it, and mask_locality
    finds keys to change in most (a window of unbounded sides masks nothing)."""
    from hypothesis import given, settings
    from .. import strategies as S
    from ..families.attention.laws import _invisible_change
    inv = law(law_name)
    picked = []

    @settings(max_examples=80, deadline=None, database=None)
    @given(S.cases("attention", inv.families, inv.max_cols))
    def draw(case):
        if law_name == "mask_locality":
            assert case.masked and case.Lq >= 2 and case.Lk >= 2, case
            picked.append(_invisible_change(case) is not None)
        elif law_name == "split_kv_equivalence":
            assert not case.masked and case.Lk >= 2, case
        else:
            assert case.group > 1, case
    draw()
    assert law_name != "mask_locality" or sum(picked) >= 0.8 * len(picked), f"{sum(picked)} of {len(picked)}"


def test_the_declared_alignment_reaches_the_cases():
    saved = AS.TARGET.module
    try:
        AS.TARGET.module = _module("top_left", ATTENTION_CAUSAL_ALIGNMENT="top_left")
        assert AS.alignment() == "top_left"
        AS.TARGET.module = _module("bad", ATTENTION_CAUSAL_ALIGNMENT="left")
        with pytest.raises(ValueError, match="ATTENTION_CAUSAL_ALIGNMENT"):
            AS.alignment()
        AS.TARGET.module = None
        assert AS.alignment() == "bottom_right"
    finally:
        AS.TARGET.module = saved


def _flash_empty_lse_module(declared: bool):
    """The project's kernels with flash-attention's lse for a query without a key: +inf in the
    forward's lse, and the backward taking it (mapped back to -inf for the kernels)."""
    from softmax_properties import kernels

    def attention(q, k, v, *, causal=False, scale=None, window=None, softcap=None):
        o, lse = kernels.attention(q, k, v, causal=causal, scale=scale, window=window, softcap=softcap)
        return o, lse.masked_fill(lse == -math.inf, math.inf)

    def attention_backward(q, k, v, o, lse, do, **options):
        return kernels.attention_backward(q, k, v, o, lse.masked_fill(lse == math.inf, -math.inf), do, **options)

    extra = dict(ATTENTION_EMPTY_LSE=math.inf) if declared else {}
    return _module("flash_empty_lse" + ("_declared" if declared else ""), attention=attention,
                   attention_backward=attention_backward, **extra)


def _empty_row_cases(empty_lse):
    """A causal Lq > Lk case (its first Lq - Lk queries see no key) and an Lk = 0 case, each as
    attention and as attention_backward."""
    return [AttnCase(op, torch.float32, 1, 2, 1, Lq, Lk, 8, 8, seed=3, causal=causal, empty_lse=empty_lse)
            for op in ("attention", "attention_backward") for Lq, Lk, causal in ((5, 3, True), (3, 0, False))]


def test_a_declared_empty_lse_of_plus_inf_is_the_truth_and_the_backwards_input():
    """flash-attention writes lse = +inf for a query without a key. Declared (ATTENTION_EMPTY_LSE =
    math.inf), the laws ask it, and the explicit backward is given it; undeclared, the same
    functions fail attention_empty_rows, whose message names the declaration, and the oracle law.
    The project's kernels declaring +inf fail: the declaration is judged, not trusted."""
    from ..failures import PropertyFailure
    from .meta_support import DEV, kernels_target
    flash = Target(_flash_empty_lse_module(True))
    flash.device = DEV
    for case in _empty_row_cases(math.inf):
        for name in ("attention_empty_rows", "attention_matches_oracle", "zero_sum_vjps"):
            if name != "zero_sum_vjps" or case.backward:
                law(name).check(case, flash)
    assert math.inf in case.tensors(DEV)[4] and "masked_fill(lse == -inf, inf)" in case.reproducer("m")
    plain = Target(_flash_empty_lse_module(False))
    plain.device = DEV
    for case in _empty_row_cases(-math.inf)[:2]:
        with pytest.raises(PropertyFailure, match="is \\[inf\\], expected -inf .*ATTENTION_EMPTY_LSE = math.inf"):
            law("attention_empty_rows").check(case, plain)
        with pytest.raises(PropertyFailure, match="lse"):
            law("attention_matches_oracle").check(case, plain)
    with pytest.raises(PropertyFailure, match="expected \\+inf, as declared"):
        law("attention_empty_rows").check(_empty_row_cases(math.inf)[0], kernels_target())


@pytest.mark.parametrize("op", ["attention", "attention_backward"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_kernels_pass_both_tiers_at_a_head_dimension_of_256(op, dtype):
    """Head dimension 256 (Gemma's), which only the gpu profile's lengths reach in the draws
    (strategies.HEAD_DIMS): the project's kernels at it, plain, causal with grouped heads, and
    with softcap and a window, within both tiers' bounds, and the gpu profile draws it."""
    from hypothesis import given, settings
    from .meta_support import kernels_target
    from .. import strategies as S
    from ..plugin import LIMITS
    t = kernels_target()
    for kw in (dict(), dict(causal=True, Hq=4), dict(softcap=5.0, window=(2, 1))):
        case = AttnCase(op, dtype, 1, kw.pop("Hq", 2), 1, 19, 37, 256, 256, seed=3, **kw)
        law("attention_matches_oracle").check(case, t)
        law("attention_matches_oracle_strict").check(case, t)
    seen = set()
    saved = S.set_limits(LIMITS["gpu"])
    try:

        @settings(max_examples=200, deadline=None, database=None)
        @given(AS.attn_cases(op))
        def draw(case):
            seen.add(case.D)

        draw()
    finally:
        S.set_limits(saved)
    assert 256 in seen


def test_the_declared_empty_lse_reaches_the_cases():
    saved = AS.TARGET.module
    try:
        AS.TARGET.module = _flash_empty_lse_module(True)
        assert AS.empty_lse() == math.inf
        AS.TARGET.module = _module("bad", ATTENTION_EMPTY_LSE=0.0)
        with pytest.raises(ValueError, match="ATTENTION_EMPTY_LSE must be -math.inf .* or math.inf, got 0.0"):
            AS.empty_lse()
        AS.TARGET.module = None
        assert AS.empty_lse() == -math.inf
    finally:
        AS.TARGET.module = saved


def test_the_autograd_probe_takes_the_first_of_several_outputs():
    t = Target(_module("differentiable", attention=_causal_only))
    assert t.autograd_dtypes("attention") == Target.PROBE_DTYPES
    frozen = Target(_module("frozen", attention=lambda q, k, v: tuple(x.detach() for x in _causal_only(q, k, v))))
    assert t.supports_autograd("attention") and not frozen.supports_autograd("attention")


def test_an_lse_in_base_2_is_named_in_the_report():
    """attention_matches_oracle's report says so when the lse is log2 of the sum (lse x ln 2 is
    the truth), and not for an lse wrong otherwise (lse + 1)."""
    from ..failures import PropertyFailure
    from ..mutants import attn_lse_base2
    from .meta_support import DEV
    case = AttnCase("attention", torch.float32, 1, 1, 1, 3, 5, 8, 8, seed=1)
    base2 = Target(attn_lse_base2)
    base2.device = DEV
    with pytest.raises(PropertyFailure, match=r"lse out of bounds .*\(lse times ln 2 matches the truth: base-2 units"):
        law("attention_matches_oracle").check(case, base2)

    def shifted(q, k, v):
        o, lse = _attn_base.attention(q, k, v)
        return o, lse + 1.0
    off = Target(_module("lse_plus_one", attention=shifted))
    off.device = DEV
    with pytest.raises(PropertyFailure) as e:
        law("attention_matches_oracle").check(case, off)
    assert "base-2" not in str(e.value)


def _within_bounds(pairs):
    """Each (result, truth output) pair within the truth's bound, the first elements outside
    named."""
    from .. import tolerances
    for got, e in pairs:
        bad = tolerances.compare(got, e.value, e.tol, e.dtype)
        assert not bool(bad.any()), (e.name, got[bad][:3], e.value[bad][:3], e.tol[bad][:3])


# torch eager's attention in float16 (properties/targets/torch.py: (q k^T) * scale in the input
# dtype, k and v repeat_interleave'd to the query heads), each case one the default tier's
# backward bound rejected before it allowed the composition's own roundings (bounds.py, "In the
# default tier"): the scaled score gradient rounded again below float16's normal range (G = 1),
# and each query head's dk, dv rounded before the group's sum (G > 1; the last case in the normal
# range, dv -8.297 where the exact value is -8.289)
_EAGER_F16 = [
    (dict(B=2, Hq=4, Hkv=1, Lq=5, Lk=13, D=1, seed=318104, mags=(2**-5, 0.5, 2**-7, 1.0), scale=2**-5), False),
    (dict(B=2, Hq=4, Hkv=1, Lq=1, Lk=18, D=8, seed=261681, mags=(2**-9, 2**-8, 2**-8, 2**-10), scale=1.0), True),
    (dict(B=1, Hq=4, Hkv=1, Lq=4, Lk=5, D=32, seed=281085, mags=(2**-8, 0.125, 0.125, 2**-10), causal=True), True),
    (dict(B=1, Hq=1, Hkv=1, Lq=5, Lk=9, D=1, seed=556210, mags=(32.0, 2**-9, 2**-10, 2**-9), scale=0.125), False),
    (dict(B=2, Hq=2, Hkv=2, Lq=4, Lk=36, D=32, seed=37964, mags=(1.0, 2**-5, 2**-10, 2**-4), scale=2**-5), False),
    (dict(B=2, Hq=2, Hkv=1, Lq=2, Lk=14, D=16, seed=500413, mags=(2**-10, 0.5, 32.0, 32.0), scale=1.0), False),
]


@pytest.mark.parametrize("shape,with_dlse", _EAGER_F16)
def test_torch_eager_float16_gradients_pass_the_default_tier(shape, with_dlse):
    """Autograd through torch eager's float16 attention (o, and lse with its cotangent where
    with_dlse) gives dq, dk, dv within the default tier's bounds: a correct composition's
    roundings are not failures. Before those allowances the six cases failed by 1.02-2.58 times
    the bound."""
    from ..families.attention.truth import grads_truth
    from ..targets import torch as eager
    case = AttnCase("attention", torch.float16, Dv=shape["D"], alignment=eager.ATTENTION_CAUSAL_ALIGNMENT, **shape)
    base = case.tensors("cpu")
    do, dlse = case.logical("do"), (case.lse_cotangent() if with_dlse else None)
    leaves = [t.detach().requires_grad_(True) for t in base]
    with torch.enable_grad():
        o, lse = eager.attention(*leaves, **case.kwargs())
        outs, cots = ((o, lse), (do, dlse)) if with_dlse else ((o,), (do,))
        grads = torch.autograd.grad(outs, leaves, cots)
    _within_bounds(zip(grads, grads_truth(case, *(t.detach() for t in base), do, dlse=dlse)))


def _gemma2_eager(q, k, v, *, causal=False, scale=None, softcap=None):
    """Gemma-2's eager attention (HF transformers): the scores and their softcap (t / c, tanh,
    * c) in the input dtype, the softmax in float32 cast back, k and v repeated to the heads."""
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    s = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if softcap:
        s = torch.tanh(s / softcap) * softcap
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), -torch.inf)
    return torch.softmax(s.float(), -1).to(q.dtype) @ v, torch.logsumexp(s.float(), -1)


# each case one the default tier's forward bound rejected before it allowed the softcap's three
# roundings in the input dtype (bounds.py, "In the default tier", (4))
_GEMMA2 = [
    dict(dtype=torch.bfloat16, B=1, Hq=1, Hkv=1, Lq=5, Lk=1, D=1, seed=76519, mags=(8.0, 1.0, 16.0, 1.0),
         causal=True, scale=1.0, softcap=5.0),
    dict(dtype=torch.float16, B=1, Hq=4, Hkv=2, Lq=2, Lk=22, D=1, seed=440615, mags=(1.0, 1.0, 16.0, 1.0),
         constant_keys=True, causal=True, scale=0.5, softcap=5.0),
]


@pytest.mark.parametrize("shape", _GEMMA2)
def test_a_16bit_softcap_composition_passes_the_default_tier(shape):
    """Gemma-2's eager attention, softcap computed in the input dtype: o and lse, and dq, dk, dv
    through o, within the default tier's bounds (before its allowance, lse was off by 1.21-1.30
    times the bound), and the strict tier (a flash kernel's float32 softcap) still rejects the
    lse of the first."""
    from ..families.attention.truth import forward_truth, grads_truth
    from .. import tolerances
    case = AttnCase("attention", Dv=shape["D"], alignment="top_left", **shape)
    base = case.tensors("cpu")
    do = case.logical("do")
    leaves = [t.detach().requires_grad_(True) for t in base]
    with torch.enable_grad():
        o, lse = _gemma2_eager(*leaves, **case.kwargs())
        grads = torch.autograd.grad(o, leaves, do)
    plain = [t.detach() for t in base]
    outs = list(zip((o.detach(), lse.detach()), forward_truth(case, *plain)[0]))
    outs += list(zip(grads, grads_truth(case, *plain, do)))
    _within_bounds(outs)
    if shape["dtype"] == torch.bfloat16:
        strict = forward_truth(case, *plain, strict=True)[0][1]
        assert bool(tolerances.compare(lse.detach(), strict.value, strict.tol, strict.dtype).any())
