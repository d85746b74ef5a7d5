"""Meta tests of the merges: the two-state and N-way merge semantics tables against the oracles and
the kernels, input validation of the merge kernels, reproducers that rebuild their states exactly."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from softmax_properties import kernels
from softmax_properties import oracles
from softmax_properties.kernels import _launch

from ..targets import OWN_KERNELS
from ..families.merge import strategies as MS
from ..families.merge_states import strategies as SS
from .meta_support import DEV, agrees


# ---------------------------------------------------------------------------- merges
@pytest.mark.parametrize("what,la,xa,lb,xb,p,o,lse", oracles.MERGE_SEMANTICS, ids=[r[0] for r in oracles.MERGE_SEMANTICS])
def test_merge_semantics_table(what, la, xa, lb, xb, p, o, lse):
    """Every row of MERGE_SEMANTICS holds for the FP64 merge oracle and the project's kernels
    (float32 and float64), signs of zeros included."""
    for dt in (torch.float64, torch.float32):
        ld = torch.float64 if dt == torch.float64 else torch.float32
        args = (torch.tensor([xa], dtype=dt, device=DEV).reshape(1, len(xa)), torch.tensor([la], dtype=ld, device=DEV),
                torch.tensor([xb], dtype=dt, device=DEV).reshape(1, len(xb)), torch.tensor([lb], dtype=ld, device=DEV))
        want_lse = torch.tensor([lse], dtype=ld).double()  # the table's lse, rounded to the lse dtype
        for impl, sm, am in (("oracle", oracles.softmax_merge, oracles.attention_merge),
                             ("kernels", kernels.softmax_merge, kernels.attention_merge)):
            # float32 kernels on a GPU use exp/log/division approximations (ex2.approx, lg2.approx,
            # div.full: about 2 ulp each), so their arithmetic rows may differ by a few ulps; NaN,
            # infinities, zero signs and the exact rows (identities, empty sides) must still match
            ulps = 0 if (impl == "oracle" or dt == torch.float64) else 4
            got_p, got_l = (t.cpu().to(d) for t, d in zip(sm(*args), (dt, ld)))  # oracle: FP64, rounded
            assert agrees(got_p, torch.tensor(p, dtype=torch.float64).to(dt), zero_signs=True, ulps=ulps), f"{impl} softmax_merge [{what}] {dt}: p={got_p.tolist()}, table says {p}"
            assert agrees(got_l, want_lse.to(ld), zero_signs=True, ulps=ulps), f"{impl} softmax_merge [{what}] {dt}: lse={got_l.tolist()}, table says {lse}"
            if o is not None:
                got_o, got_l = (t.cpu().to(d) for t, d in zip(am(*args), (dt, ld)))
                assert agrees(got_o, torch.tensor(o, dtype=torch.float64).to(dt), zero_signs=True, ulps=ulps), f"{impl} attention_merge [{what}] {dt}: o={got_o.tolist()}, table says {o}"
                assert agrees(got_l, want_lse.to(ld), zero_signs=True, ulps=ulps), f"{impl} attention_merge [{what}] {dt}: lse={got_l.tolist()}"


@pytest.mark.parametrize("row_a", oracles.SEMANTICS, ids=[r[0] for r in oracles.SEMANTICS])
def test_merge_semantics_follow_the_one_shot_table(row_a):
    """The merge rules are the one-shot ops' rules: for every pair of SEMANTICS rows (a, b),
    merging torch's softmax / logsumexp of a and of b (the oracle) gives torch's of the
    concatenation [a, b]; and the attention oracle over [a, b] is the merge of its chunks'."""
    xa = torch.tensor(row_a[1], dtype=torch.float64).reshape(1, -1)
    for row_b in oracles.SEMANTICS:
        xb = torch.tensor(row_b[1], dtype=torch.float64).reshape(1, -1)
        x = torch.cat([xa, xb], -1)
        p, lse = oracles.softmax_merge(torch.softmax(xa, -1), torch.logsumexp(xa, -1), torch.softmax(xb, -1),
                                       torch.logsumexp(xb, -1))
        if x.shape[-1]:  # torch's softmax of an all-masked / empty row is the table's
            assert agrees(p, torch.softmax(x, -1), zero_signs=True), f"{row_a[0]} + {row_b[0]}: p={p.tolist()}"
        assert agrees(lse, torch.logsumexp(x, -1), zero_signs=True), f"{row_a[0]} + {row_b[0]}: lse={lse.tolist()}"
        v = torch.arange(1.0, 2.0 * x.shape[-1] + 1, dtype=torch.float64).reshape(1, x.shape[-1], 2)
        oa, la = oracles.attention(xa, v[:, :xa.shape[-1]])
        ob, lb = oracles.attention(xb, v[:, xa.shape[-1]:])
        o, l2 = oracles.attention_merge(oa, la, ob, lb)
        o_ref, l_ref = oracles.attention(x, v)
        assert bool((((o - o_ref).abs() <= 1e-12 * o_ref.abs().clamp_min(1)) | (o.isnan() & o_ref.isnan())).all()), \
            f"{row_a[0]} + {row_b[0]}: attention o={o.tolist()} one-shot {o_ref.tolist()}"
        assert agrees(l2, l_ref, zero_signs=True)


@pytest.mark.parametrize("op,x", [("softmax_merge", "p"), ("attention_merge", "o")])
def test_merge_rejects_bad_input(op, x):
    f = getattr(kernels, op)
    a, la = torch.rand(2, 3, 4, device=DEV), torch.rand(2, 3, device=DEV)
    with pytest.raises(ValueError, match=rf"{x}_a and {x}_b must have the same (leading )?shape"):
        f(a, la, torch.rand(2, 2, 4, device=DEV), la)
    with pytest.raises(TypeError, match=rf"{x}_a and {x}_b must have the same dtype, got torch.float32 and torch.float16"):
        f(a, la, a.half(), la)
    with pytest.raises(TypeError, match=rf"lse_b.dtype must be torch.float32 \(the logsumexp dtype for {x}_a.dtype=torch.float32\), got torch.float16"):
        f(a, la, a, la.half())
    with pytest.raises(TypeError, match=r"lse_a.dtype must be torch.float64 .*got torch.float32"):
        f(a.double(), la, a.double(), la.double())
    with pytest.raises(ValueError, match=r"lse_a must have shape \(2, 3\)"):
        f(a, la[:, :2], a, la)
    with pytest.raises(TypeError, match=rf"{x}_b.dtype must be .*got torch.int32"):
        f(a, la, a.int(), la)
    with pytest.raises(TypeError, match=r"lse_a must be a torch.Tensor, got float"):
        f(a, 0.0, a, la)
    with pytest.raises(ValueError, match=rf"{x}_a must have at least one axis"):
        f(torch.tensor(1.0, device=DEV), torch.tensor(1.0, device=DEV), torch.tensor(1.0, device=DEV), la)
    if op == "attention_merge":
        with pytest.raises(ValueError, match=r"o_a and o_b must have the same shape"):
            f(a, la, a[..., :3], la)
    if DEV == "cuda":
        with pytest.raises(ValueError, match=r"(lse_b is on device 'cpu'|must be on the same device)"):
            f(a, la, a, la.cpu())


def test_merge_cpu_tensor_outside_interpreter_is_refused(monkeypatch):
    monkeypatch.setattr(_launch, "interpreting", lambda: False)
    for f, x in ((kernels.softmax_merge, "p_a"), (kernels.attention_merge, "o_a")):
        with pytest.raises(ValueError, match=rf"{x} is on device 'cpu', but the Triton kernels run on CUDA tensors"):
            f(torch.ones(2, 3), torch.ones(2), torch.ones(2, 3), torch.ones(2))


@settings(max_examples=25)
@given(st.data())
def test_merge_reproducer_rebuilds_the_exact_states(data):
    """A MergeCase's printed reproducer, executed, yields bitwise every chunk state (values,
    shapes, strides) the case fed the target, and its merge calls name the tree's steps."""
    op = data.draw(st.sampled_from(["softmax_merge", "attention_merge"]))
    case = data.draw(MS.merge_cases(op))
    code = case.reproducer(OWN_KERNELS, call="out = None")
    scope = {}
    exec(code, scope)
    for c, (x, lse) in case.leaf_tensors(DEV).items():
        for name, t in ((f"x{c}", x), (f"lse{c}", lse)):
            r = scope[name]
            assert r.shape == t.shape and r.dtype == t.dtype, name
            assert r.stride() == t.stride() or t.numel() == 0, name  # an empty tensor's strides are arbitrary
            assert bool(((r == t) | (r.isnan() & t.isnan())).all()), name
    from ..families.merge.case import tree_code, tree_depth
    lines = tree_code(case.tree, op)
    assert len(lines) == max(1, len(case.bounds()) - 1) and (tree_depth(case.tree) == 0 or lines[-1].startswith("out = target."))


# ---------------------------------------------------------------------------- N-way merges
def _states(rows, ld, dt):
    """o (1, S, 1) and lse (1, S) from [(lse_s, o_s)]."""
    return (torch.tensor([[[v] for _, v in rows]], dtype=torch.float64).to(dt).to(DEV),
            torch.tensor([[l for l, _ in rows]], dtype=torch.float64).to(ld).to(DEV))


_N_WAY = [
    # what                                  states [(lse, o)]                                       o          lse
    ("one state is itself",                  [(1.5, 0.25)],                                         0.25,      1.5),
    ("three empty states",                   [(-math.inf, 2.0), (-math.inf, 3.0), (-math.inf, 0.0)], 0.0,      -math.inf),
    ("two empty states lead",                [(-math.inf, 5.0), (-math.inf, 5.0), (0.0, 1.0)],       1.0,       0.0),
    ("lse below -5e4",                       [(-60000.0, 1.0), (-60001.0, 0.0), (-math.inf, 9.0)],
     1 / (1 + math.exp(-1)), -60000 + math.log1p(math.exp(-1))),
    ("equal lse near +finfo.max",            [(3e38, 1.0), (3e38, 3.0), (3e38, 5.0)],               3.0,       3e38 + math.log(3)),
    ("NaN beats +inf",                       [(math.inf, 1.0), (math.nan, 1.0), (0.0, 1.0)],         math.nan,  math.nan),
    ("+inf lse: NaN o, lse +inf",            [(0.0, 1.0), (math.inf, 1.0)],                          math.nan,  math.inf),
]


@pytest.mark.parametrize("what,rows,o,lse", _N_WAY, ids=[r[0] for r in _N_WAY])
def test_merge_states_semantics(what, rows, o, lse):
    """merge_states (FP64 oracle and the project's kernel, float32 and float64) on N-way rows:
    one state, empty states anywhere, lse below -5e4 and near +finfo.max, NaN and +inf lse."""
    for dt in (torch.float64, torch.float32):
        ld = torch.float64 if dt == torch.float64 else torch.float32
        args = _states(rows, ld, dt)
        for impl, fn in (("oracle", oracles.merge_states), ("kernels", kernels.merge_states)):
            got_o, got_l = (t.cpu().to(d) for t, d in zip(fn(*args), (dt, ld)))
            ulps = 0 if (impl == "oracle" or dt == torch.float64) else 4
            assert agrees(got_o, torch.tensor([[o]], dtype=torch.float64).to(dt), ulps=ulps), f"{impl} [{what}] {dt}: o={got_o.tolist()}"
            assert agrees(got_l, torch.tensor([lse], dtype=torch.float64).to(ld), ulps=ulps), f"{impl} [{what}] {dt}: lse={got_l.tolist()}"


@pytest.mark.parametrize("what,la,xa,lb,xb,p,o,lse", [r for r in oracles.MERGE_SEMANTICS if r[6] is not None],
                         ids=[r[0] for r in oracles.MERGE_SEMANTICS if r[6] is not None])
def test_merge_states_of_two_follows_the_merge_table(what, la, xa, lb, xb, p, o, lse):
    """merge_states of two states (either order) is attention_merge's row of MERGE_SEMANTICS, for
    the FP64 oracle and the kernels, except that an empty state's NaN values are dropped as well
    (the table's identities); zero signs are not asked of an N-way sum."""
    for dt in (torch.float64, torch.float32):
        ld = torch.float64 if dt == torch.float64 else torch.float32
        for order in ((la, xa, lb, xb), (lb, xb, la, xa)):
            args = _states([(order[0], order[1][0]), (order[2], order[3][0])], ld, dt)
            for impl, fn in (("oracle", oracles.merge_states), ("kernels", kernels.merge_states)):
                got_o, got_l = (t.cpu().to(d) for t, d in zip(fn(*args), (dt, ld)))
                ulps = 0 if (impl == "oracle" or dt == torch.float64) else 4
                assert agrees(got_o, torch.tensor([o], dtype=torch.float64).to(dt), ulps=ulps), f"{impl} [{what}] {dt}: o={got_o.tolist()}"
                assert agrees(got_l, torch.tensor([lse], dtype=torch.float64).to(ld), ulps=ulps), f"{impl} [{what}] {dt}"


@settings(max_examples=50)
@given(st.integers(1, 6), st.integers(0, 2**16), st.lists(st.sampled_from([-math.inf, 0.0, 3.0, -50.0, 700.0]), max_size=6))
def test_merge_states_oracle_is_a_fold_of_attention_merge(S_, seed, lses):
    """The FP64 N-way oracle equals the left fold of the FP64 attention_merge oracle (to 1e-12
    relative; NaN and the empty state exactly), so merge_states' laws and attention_merge's agree
    on what a merge is."""
    g = torch.Generator().manual_seed(seed)
    o = torch.randn(3, S_, 4, generator=g, dtype=torch.float64)
    lse = torch.randn(3, S_, generator=g, dtype=torch.float64) * 5
    for i, v in enumerate(lses[:S_]):
        lse[i % 3, i] = v
    got_o, got_l = oracles.merge_states(o, lse)
    fo, fl = o[:, 0], lse[:, 0]
    for s_ in range(1, S_):
        fo, fl = oracles.attention_merge(fo, fl, o[:, s_], lse[:, s_])
    if S_ == 1:  # one state: itself, except that an empty one is the empty state
        fo = torch.where((fl == -math.inf)[:, None], 0.0, fo)
    assert bool((((got_o - fo).abs() <= 1e-12 * fo.abs().clamp_min(1)) | (got_o.isnan() & fo.isnan())).all())
    assert bool((((got_l - fl).abs() <= 1e-12 * fl.abs().clamp_min(1)) | (got_l == fl) | (got_l.isnan() & fl.isnan())).all())


def test_merge_states_rejects_bad_input():
    f = kernels.merge_states
    o, lse = torch.rand(2, 3, 4, device=DEV), torch.rand(2, 3, device=DEV)
    with pytest.raises(TypeError, match=r"merge_states: lse.dtype must be torch.float32 \(the logsumexp dtype for o.dtype=torch.float32\), got torch.float16"):
        f(o, lse.half())
    with pytest.raises(TypeError, match=r"lse.dtype must be torch.float64 .*got torch.float32"):
        f(o.double(), lse)
    with pytest.raises(ValueError, match=r"lse must have shape \(2, 3\)"):
        f(o, lse[:, :2])
    with pytest.raises(ValueError, match=r"o must hold at least one state \(S = o.shape\[-2\] >= 1\)"):
        f(o[:, :0], lse[:, :0])
    with pytest.raises(ValueError, match=r"o must have shape \(..., S, Dv\)"):
        f(o[0, 0], lse[0])
    with pytest.raises(TypeError, match=r"o.dtype must be .*got torch.int32"):
        f(o.int(), lse)
    with pytest.raises(TypeError, match=r"lse must be a torch.Tensor, got float"):
        f(o, 0.0)
    if DEV == "cuda":
        with pytest.raises(ValueError, match=r"(lse is on device 'cpu'|must be on the same device)"):
            f(o, lse.cpu())


def test_merge_states_cpu_tensor_outside_interpreter_is_refused(monkeypatch):
    monkeypatch.setattr(_launch, "interpreting", lambda: False)
    with pytest.raises(ValueError, match=r"o is on device 'cpu', but the Triton kernels run on CUDA tensors"):
        kernels.merge_states(torch.ones(2, 3, 4), torch.ones(2, 3))


def test_merge_states_any_strides_and_empty_batch():
    """Strided states (states axis outermost, padded rows, stride-0 lse along heads) give bitwise
    the result of their contiguous copies; an empty batch gives empty outputs."""
    g = torch.Generator().manual_seed(1)
    base = torch.randn(5, 2, 3, 24, generator=g).to(DEV)  # (S, batch, heads, Dv + 4)
    o = base[..., :20].permute(1, 2, 0, 3)  # (2, 3, S, 20), states axis outermost, padded rows
    lse = (torch.randn(2, 1, 5, generator=g) * 3).to(DEV).expand(2, 3, 5)
    a = kernels.merge_states(o, lse)
    b = kernels.merge_states(o.contiguous(), lse.contiguous())
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    e = kernels.merge_states(torch.ones(0, 3, 4, device=DEV), torch.ones(0, 3, device=DEV))
    assert e[0].shape == (0, 4) and e[1].shape == (0,)


@settings(max_examples=25)
@given(st.data())
def test_merge_states_reproducer_rebuilds_the_exact_states(data):
    """A StatesCase's reproducer, executed, yields bitwise the o and lse (shapes, strides) the case
    fed the target, and runs the target."""
    case = data.draw(SS.states_cases(many_rows=data.draw(st.booleans())))
    scope = {}
    exec(case.reproducer(OWN_KERNELS), scope)
    for name, t in zip(("o", "lse"), case.stacked(DEV)):
        r = scope[name]
        assert r.shape == t.shape and r.dtype == t.dtype, name
        assert r.stride() == t.stride() or t.numel() == 0, name
        assert bool(((r == t) | (r.isnan() & t.isnan())).all()), name
    assert isinstance(scope["out"], tuple)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_merge_states_bound_holds_where_lse_rounding_erases_the_weights(dtype):
    """Two keys of scores 0.0025 and -9.5 (weights 0.99993 and 7.5e-5) shifted by -1e9, one state
    each (and an empty one), values 3.8e-5 and 0.91 (the seed): their float32 lse round to the
    same multiple of 64, so a correct merge weighs them equally, 0.45 away from the exact
    answer. merge_value_bound must allow it: its weights' error is exp of the exponent's error,
    not the first-order term (an H200 run of many_rows_match_oracle drew such a row among 65,535
    and failed the project's kernels)."""
    from ..families.merge_states.case import StatesCase
    from ..invariants._checks import check_oracle
    from ..strategies import Layout, Logits
    from .meta_support import kernels_target
    name = str(dtype).replace("torch.", "")
    case = StatesCase(op="merge_states", dtype=dtype, scores=Logits(rows=1, cols=2, dtype=name,
                      fill=("const", 0.002528828103095293), patches=((0, 1, 2, -9.49649715423584),)),
                      batch=(1,), cuts=(0, 1), masked=(), garbage=(), tree=((0, 1), 2), dv=1, v_seed=117, qk=(),
                      layout=Layout(kind="contiguous", k=0), lse_layout="contiguous", lse_shift=-1e9)
    o, lse = case.stacked_values()
    assert lse[0, 1] == lse[0, 2] and bool(lse[0, 0] == -math.inf)  # the rounding erased the weights
    assert float(o[0, 2, 0].abs()) > 3000 * float(o[0, 1, 0].abs())  # the light value is the larger
    check_oracle(case, kernels_target(), poisoned=True)

