"""The attention family's plumbing: options a target lacks, the causal alignment it declares,
and the autograd probe of an op of two outputs."""
from __future__ import annotations

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
    from ..families.attention.laws import _invisible_change, _masked
    inv = law(law_name)
    picked = []

    @settings(max_examples=80, deadline=None, database=None)
    @given(S.cases("attention", inv.families, inv.max_cols))
    def draw(case):
        if law_name == "mask_locality":
            assert _masked(case) and case.Lq >= 2 and case.Lk >= 2, case
            picked.append(_invisible_change(case) is not None)
        elif law_name == "split_kv_equivalence":
            assert not _masked(case) and case.Lk >= 2, case
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


def test_the_autograd_probe_takes_the_first_of_several_outputs():
    t = Target(_module("differentiable", attention=_causal_only))
    assert t.autograd_dtypes("attention") == Target.PROBE_DTYPES
    frozen = Target(_module("frozen", attention=lambda q, k, v: tuple(x.detach() for x in _causal_only(q, k, v))))
    assert t.supports_autograd("attention") and not frozen.supports_autograd("attention")
