"""Meta tests: the helpers themselves (oracle against mpmath, the semantics table against torch
and the oracle, input validation of the kernels, reproducers that rebuild their tensor exactly)."""
from __future__ import annotations

import contextlib
import math

import pytest
import torch
from hypothesis import Phase, find, given, settings, strategies as st

from softmax_properties import kernels
from softmax_properties import oracles
from softmax_properties.kernels import _launch

from .. import interpreter, strategies as S
from ..invariants import REGISTRY
from ..targets import OWN_KERNELS
from .meta_support import DEV, agrees, kernels_target


# ---------------------------------------------------------------------------- the FP64 oracle
@given(st.lists(st.floats(-700, 700), min_size=1, max_size=12))
def test_fp64_oracle_matches_mpmath(row):
    """The FP64 oracle is within its own bound (tolerances with u = 2**-53) of 50-digit mpmath."""
    x = torch.tensor([row], dtype=torch.float64)
    D = len(row)
    sm, lsm, lse = oracles.softmax(x)[0], oracles.log_softmax(x)[0], oracles.logsumexp(x)[0]
    m_sm, m_lsm, m_lse = oracles.mp_softmax(row), oracles.mp_log_softmax(row), oracles.mp_logsumexp(row)
    d = x[0] - x[0].max()
    u = 2.0**-53
    for i in range(D):
        if m_sm[i] > 0:
            assert abs(sm[i].item() - m_sm[i]) <= m_sm[i] * u * (2 * abs(d[i].item()) + 2 * 745 + D + 10) + 1e-300
        assert abs(lsm[i].item() - m_lsm[i]) <= u * (abs(d[i].item()) + 2 * 745 + D + 10 + abs(m_lsm[i]))
    assert abs(lse.item() - m_lse) <= u * (abs(m_lse) + D + 10 + 2 * 745)


def _one_chain_sum(t, keepdim=False):
    """A sum in one sequential chain of additions, as torch's CUDA sum did on a column-strided row."""
    out = t.cumsum(-1)[..., -1:] if t.shape[-1] else t.new_zeros(t.shape[:-1] + (1,))
    return out if keepdim else out[..., 0]


@pytest.mark.parametrize("summed_by", ["row_sum", "one_chain"])
def test_fp64_oracle_sums_meet_the_depth_contract(summed_by, monkeypatch):
    """The tolerance table charges the FP64 oracle's row sums depth(D) u, as it charges a kernel's
    (tolerances docstring); the oracle sums by pairwise halving (oracles.reference.row_sum) so
    that holds on every layout and device. Row [c, 0, ..., 0] of 4096 columns with exp(-c) =
    0.75 ulp(1): a one-chain sum gains a quarter ulp of 1 per addition (~2000 u in y_0), a tree
    of depth 12 at most 12 u. softmax_bound's oracle share for y_0 (d_0 = 0, H ~ 0) is
    (depth(D) + 10) u = 41 u. Under `one_chain` the check must fail: it can."""
    from softmax_properties.oracles import reference
    from .. import tolerances
    if summed_by == "one_chain":
        monkeypatch.setattr(reference, "row_sum", _one_chain_sum)
    n = 4096
    c = 52 * math.log(2) - math.log(0.75)
    x = torch.zeros(2, n, dtype=torch.float64)
    x[:, 0] = c
    y0 = oracles.softmax(x.t().contiguous().t())[0, 0].item()  # the layout of the GPU's failing case
    exact = oracles.mp_softmax([c] + [0.0] * (n - 1))[0]
    within = abs(y0 - exact) <= exact * tolerances.U_ORACLE * (tolerances.depth(n) + 10)
    assert within == (summed_by == "row_sum"), (summed_by, (y0 - exact) / exact / tolerances.U_ORACLE)


@pytest.mark.parametrize("what,row,sm,lsm,lse", oracles.SEMANTICS, ids=[r[0] for r in oracles.SEMANTICS])
def test_semantics_table(what, row, sm, lsm, lse):
    """Every row of the semantics table holds for torch (the reference for meaning), the FP64
    oracle and the project's kernels."""
    x = torch.tensor(row, dtype=torch.float64).reshape(1, len(row))

    for impl in ("torch", "oracle", "kernels"):
        if impl == "torch":
            got = (torch.softmax(x, -1), torch.log_softmax(x, -1), torch.logsumexp(x, -1))
        elif impl == "oracle":
            got = (oracles.softmax(x), oracles.log_softmax(x), oracles.logsumexp(x))
        else:
            xd = x.to(DEV)
            got = tuple(t.cpu() for t in (kernels.softmax(xd), kernels.log_softmax(xd), kernels.logsumexp(xd)))
        for name, g, want in zip(("softmax", "log_softmax", "logsumexp"), got, (sm, lsm, lse)):
            assert agrees(g, want), f"{impl} {name}({row}) = {g.tolist()}, table says {want}"


# ---------------------------------------------------------------------------- input validation
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "logsumexp"])
def test_forward_rejects_bad_input(op):
    f = getattr(kernels, op)
    with pytest.raises(TypeError, match=r"x.dtype must be .*got torch.int64"):
        f(torch.ones(2, 3, dtype=torch.int64))
    with pytest.raises(TypeError, match=r"x.dtype .*torch.bool"):
        f(torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(TypeError, match=r"x.dtype .*complex64"):
        f(torch.ones(2, 3, dtype=torch.complex64))
    with pytest.raises(TypeError, match=r"x must be a torch.Tensor, got list"):
        f([1.0, 2.0])
    with pytest.raises(ValueError, match=r"dim=2 is out of range for a 2-d tensor; expected -2 <= dim <= 1"):
        f(torch.ones(2, 3, device=DEV), dim=2)
    with pytest.raises(TypeError, match=r"dim must be an int"):
        f(torch.ones(2, 3, device=DEV), dim=1.0)


@pytest.mark.parametrize("op,a,b", [("softmax_backward", "y", "dy"), ("log_softmax_backward", "z", "dz")])
def test_backward_rejects_bad_input(op, a, b):
    f = getattr(kernels, op)
    y = torch.rand(2, 3, device=DEV)
    with pytest.raises(ValueError, match=rf"{a} and {b} must have the same shape"):
        f(y, torch.rand(2, 4, device=DEV))
    with pytest.raises(TypeError, match=rf"{a} and {b} must have the same dtype"):
        f(y, torch.rand(2, 3, dtype=torch.float64, device=DEV))
    with pytest.raises(ValueError, match=rf"{a} requires grad; {op} is an explicit VJP"):
        f(y.clone().requires_grad_(), torch.rand(2, 3, device=DEV))
    with pytest.raises(ValueError, match=rf"{b} requires grad"):
        f(y, torch.rand(2, 3, device=DEV).requires_grad_())
    with pytest.raises(TypeError, match=rf"{b}.dtype must be"):
        f(y, torch.ones(2, 3, dtype=torch.int32, device=DEV))
    with pytest.raises(ValueError, match=r"dim=-3 is out of range"):
        f(y, torch.rand(2, 3, device=DEV), dim=-3)
    if DEV == "cuda":
        with pytest.raises(ValueError, match=rf"({b} is on device 'cpu'|{a} and {b} must be on the same device)"):
            f(y, torch.rand(2, 3))


def test_cpu_tensor_outside_interpreter_is_refused(monkeypatch):
    monkeypatch.setattr(_launch, "interpreting", lambda: False)
    with pytest.raises(ValueError, match=r"x is on device 'cpu', but the Triton kernels run on CUDA tensors"):
        kernels.softmax(torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"y is on device 'cpu'"):
        kernels.softmax_backward(torch.ones(2, 3), torch.ones(2, 3))


def test_autograd_and_compile_registration():
    x = torch.randn(3, 5, dtype=torch.float64, device=DEV, requires_grad=True)
    w = torch.arange(5.0, dtype=torch.float64, device=DEV)
    (kernels.softmax(x) * w).sum().backward()
    ref = torch.autograd.grad((torch.softmax(x, -1) * w).sum(), x)[0]
    assert torch.allclose(x.grad, ref, atol=1e-12)
    assert torch.ops.softmax_props.softmax.default is not None


# ---------------------------------------------------------------------------- harness helpers
@settings(max_examples=25)
@given(st.data())
def test_reproducer_rebuilds_the_exact_tensors(data):
    """The printed reproducer, executed, yields bitwise the tensors the case fed the target."""
    op = data.draw(st.sampled_from(["softmax", "softmax_backward"]))
    fams = data.draw(st.sampled_from([None, (S.MANY_ROWS,)] + ([(S.MASKED_CHUNKS,)] if op == "softmax" else [])))
    case = data.draw(S.cases(op, fams))
    code = case.reproducer(OWN_KERNELS, call="out = None")
    scope = {}
    exec(code, scope)
    for name, t in zip(case.spec.args, case.tensors(DEV)):
        r = scope[name]  # built on the reproducer's device, which is DEV
        assert r.shape == t.shape and r.stride() == t.stride() and r.dtype == t.dtype
        assert bool(((r == t) | (r.isnan() & t.isnan())).all())


def test_every_invariant_has_a_docstring_and_ops():
    for inv in REGISTRY:
        assert inv.check.__doc__ and inv.ops, inv.name


def test_layout_planner_covers_strided_batches():
    """Two non-collapsible batch axes, stride 0, offsets: planned without a copy."""
    base = torch.randn(4, 1, 10)
    x = base.expand(4, 3, 10)[:, :, 1:]  # stride-0 axis, row padding, storage offset
    y = torch.empty(x.shape)
    plan = _launch.plan_rows([x], [(y, False)], 2)
    assert plan.inputs[0].data_ptr() == x.data_ptr()  # no copy
    assert (plan.n_rows, plan.n_cols, plan.n1, plan.in_strides[0]) == (12, 9, 3, (10, 0))


def test_vjp_bounds_cover_a_subnormal_rounded_y():
    """float16 y = softmax of 255 logits with one at 17 (y_0 ~ 1, the rest float16 subnormals, each
    rounded by as much as itself) and dy = 65504: sum(y_r) = 1.00023, so the exact VJP at y_r is
    y_i * -15.25, while the VJP at the exact y is ~0. The kernel's answer on a GPU is the former;
    a bound missing the second-order term du_i * sum_j du_j |g_j| rejects it."""
    from ..case import Case
    from ..families.softmax.laws import vjp_matches_finite_differences, vjp_matches_fp64_autograd
    tg = kernels_target()
    x = S.Logits(1, 255, "float16", ("normal", 0, 3.0), ((0, 0, 1, 17.0),), "moderate")
    g = S.Logits(1, 255, "float16", ("const", 65504.0), (), "constant")
    case = Case("softmax_backward", torch.float16, (S.Input(x, (), S.Layout()), S.Input(g, (), S.Layout())))
    vjp_matches_fp64_autograd(case, tg)
    vjp_matches_finite_differences(case, tg)


def test_lsm_bwd_bound_when_the_sum_of_abs_dz_overflows():
    """float64 z = 0 and dz ~ N(0, 2.2e307) over 255 columns: sum |dz| overflows, and the FP64
    oracle's own sum is 13 ulps off the exact dx (the kernel's exact sum is right). Formed
    directly, the bound's oracle term depth * u * sum |dz| reads NaN (inf times 0), a half-ulp
    tolerance; the bound forms it in units of 2**64."""
    from fractions import Fraction
    from ..truth import truth_at as truth
    from .. import tolerances
    z = S.Logits(1, 255, "float64", ("const", 0.0), (), "moderate").values()
    dz = S.Logits(1, 255, "float64", ("normal", 0, 2.2471164185778946e+307), (), "huge").values()
    total = sum(Fraction(float(v)) for v in dz[0])
    exact = torch.tensor([[float(Fraction(float(v)) - total) for v in dz[0]]], dtype=torch.float64)
    ref, tol = truth("log_softmax_backward", torch.float64, [z, dz])
    assert bool(torch.isfinite(tol).all())
    assert bool(((ref - exact).abs() <= tol).all()), "the bound must cover the oracle's own error"
    out = kernels.log_softmax_backward(z.to(DEV), dz.to(DEV)).cpu()
    assert not bool(tolerances.compare(out, ref, tol, torch.float64).any())


_SPECIAL_X = [-math.inf, -300.0, -150.0, -100.0, -70.0, -1.0, 0.0, 1.0, 88.0, math.inf, math.nan]
_SPECIAL_G = [math.inf, -math.inf, math.nan, 0.0, 1.0, -1.0, 3.0e38, -3.0e38, 1e-40, 6e4,
              1.7976931348623157e308, -1.7976931348623157e308]


@pytest.mark.parametrize("op", ["softmax_backward", "log_softmax_backward"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_vjp_special_value_grid(op, dtype):
    """Every pair of special logits and every pair of special cotangents, each row of two
    columns (17,424 rows in one call): the VJP of the rounded forward matches the oracle under the
    tolerance table, NaN for NaN and each infinity exactly: random draws rarely reach such rows
    (z = -inf or NaN with an infinite sum of dz). softmax: a row of finite y (a softmax output) and
    finite dy has a finite VJP, checked apart from the oracle: dx_i = y_i sum_j y_j (g_i - g_j), so
    |dx_i| <= 2 y_i (1 - y_i) max|g| <= max|g| / 2 (y = [1, 0], dy = [-max, max] in float64 is
    where the naive y * (g - sum) reads 0 * inf = NaN, in a kernel and an oracle alike)."""
    from ..truth import truth_at as truth
    from .. import tolerances
    xs = torch.tensor([[a, b] for a in _SPECIAL_X for b in _SPECIAL_X], dtype=torch.float64)
    gs = torch.tensor([[a, b] for a in _SPECIAL_G for b in _SPECIAL_G], dtype=torch.float64)
    x = xs.repeat_interleave(len(gs), 0)
    g = gs.repeat(len(xs), 1).to(dtype)
    fwd = oracles.softmax if op == "softmax_backward" else oracles.log_softmax
    a = fwd(x).to(dtype)
    out = getattr(kernels, op)(a.to(DEV), g.to(DEV)).cpu()
    ref, tol = truth(op, dtype, [a, g])
    if op == "softmax_backward":
        fin = (torch.isfinite(a.double()) & torch.isfinite(g.double())).all(-1)
        for name, v in (("kernel", out), ("oracle", ref)):
            nonfinite = fin & ~torch.isfinite(v.double()).all(-1)
            assert not bool(nonfinite.any()), (f"{name}: a non-finite VJP of a finite row, first "
                                               f"y={a[nonfinite][0].tolist()} dy={g[nonfinite][0].tolist()} "
                                               f"dx={v[nonfinite][0].tolist()}")
    bad = tolerances.compare(out, ref, tolerances.total_tolerance(tol, ref, dtype, dtype), dtype)
    if bool(bad.any()):
        i = int(bad.any(-1).nonzero()[0])
        pytest.fail(f"{int(bad.any(-1).sum())} rows differ; first: a={a[i].tolist()} g={g[i].tolist()} "
                    f"out={out[i].tolist()} ref={ref[i].tolist()}")


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "logsumexp", "softmax_backward", "log_softmax_backward"])
def test_long_rows_take_one_path_for_every_layout(op):
    """A long row's path (looped or split) depends on the shape alone: reducing dim=0 of the
    transposed tensor (strided output columns) launches the same kernel as the last axis. Were
    the path chosen by layout, dim_argument would fail bitwise on a GPU (e.g. (2, 49151) float32,
    strided output columns sending the dim=0 call to the split path): the two paths round
    differently there (not under the interpreter, where this test checks the choice itself)."""
    rows = max(2, _launch.loop_rows(torch.device(DEV)))
    D = 2 * _launch.max_block(torch.float32) + 3
    x = torch.randn(rows, D, device=DEV)
    args = [x] if op in ("softmax", "log_softmax", "logsumexp") else [torch.softmax(x, -1), torch.randn_like(x)]
    fn = getattr(kernels, op)
    kinds = []
    for moved, dim in ((args, -1), ([t.movedim(-1, 0) for t in args], 0)):
        _launch.VARIANTS.clear()
        fn(*moved, dim=dim)
        kinds.append(sorted({v[0] for v in _launch.VARIANTS}))
    assert kinds[0] == kinds[1], kinds


# ---------------------------------------------------------------------------- several GPUs
@pytest.mark.skipif(DEV != "cuda" or torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_kernels_run_on_their_inputs_device():
    """Triton launches on the current CUDA device: every op, given tensors on another GPU than
    the current one, must run there and return bitwise what it returns with that GPU current."""
    here = torch.cuda.current_device()
    other = torch.device("cuda", (here + 1) % torch.cuda.device_count())
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(33, 1000, generator=g) * 5).to(other)
    dy = torch.randn(33, 1000, generator=g).to(other)
    lse = torch.randn(33, generator=g).to(other)
    t = torch.randint(0, 1000, (33,), generator=g).to(other)
    calls = {
        "softmax": lambda: kernels.softmax(x), "log_softmax": lambda: kernels.log_softmax(x),
        "logsumexp": lambda: kernels.logsumexp(x),
        "softmax_backward": lambda: kernels.softmax_backward(kernels.softmax(x), dy),
        "log_softmax_backward": lambda: kernels.log_softmax_backward(kernels.log_softmax(x), dy),
        "attention_merge": lambda: kernels.attention_merge(x, lse, dy, lse.flip(0)),
        "softmax_merge": lambda: kernels.softmax_merge(x, lse, dy, lse.flip(0)),
        "cross_entropy": lambda: kernels.cross_entropy(x, t, reduction="none"),
        "cross_entropy_backward": lambda: kernels.cross_entropy_backward(x, t, dy[:, 0], reduction="none"),
    }
    for name, call in calls.items():
        with torch.cuda.device(other):
            want = call()
        got = call()
        assert torch.cuda.current_device() == here
        for w, o in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
            assert o.device == other, f"{name}: output on {o.device}, inputs on {other}"
            assert torch.equal(w.nan_to_num(), o.nan_to_num()), f"{name}: differs when {other} is not the current device"


# ---------------------------------------------------------------------------- direct launches
def test_launch_tags_refine_tritons_specialization():
    """_launch.Launcher caches compiled kernels by _launch._tag of each argument: a hit must be the
    kernel Triton would pick, so equal tags must mean equal Triton specializations (Triton's
    native specialize_impl, for each of the three parameter rules). A private Triton function:
    the test skips where it is missing."""
    try:
        from triton._C.libtriton import native_specialize_impl
        from triton.backends.nvidia.compiler import CUDABackend
    except ImportError as e:  # pragma: no cover - depends on the Triton build
        pytest.skip(f"Triton's native specialize_impl is not importable: {e}")
    base = torch.empty(64, dtype=torch.float32)
    values = [base, base[1:], base[4:], torch.empty(8, dtype=torch.bfloat16), torch.empty(8, dtype=torch.int64)[1:],
              0, 1, 2, 15, 16, 17, 32, -1, -16, -17, 2**31 - 16, 2**31 - 1, 2**31, 2**31 + 16, -2**31, -2**31 - 1,
              -2**31 - 16, 2**63 - 1, 2**63, 2**63 + 16, 0.0, 0.5, -1e300, True, False, None]
    for rule, (spec, align) in enumerate([(False, False), (True, False), (True, True)]):
        seen = {}
        for v in values:
            tag = _launch._tag(v, rule)
            assert tag is not None, v
            triton_key = native_specialize_impl(CUDABackend, v, False, spec, align)
            key = (type(v).__name__, tag)
            assert seen.setdefault(key, triton_key) == triton_key, (rule, v, tag, triton_key, seen[key])


def _direct_equals_jit(monkeypatch, run, launchers):
    """run() twice through Launcher (the second hits every launcher's cache), once through the JIT
    function: the three lists of outputs bitwise equal. launchers: the Launchers run() must have
    filled (or a function returning them, for Launchers made on first use)."""
    monkeypatch.setattr(_launch, "DIRECT_LAUNCH", True)
    first, again = run(), run()
    launchers = launchers() if callable(launchers) else launchers
    assert all(len(k.cache) for k in launchers)
    monkeypatch.setattr(_launch, "DIRECT_LAUNCH", False)
    jit = run()
    for a, b, c in zip(first, again, jit):
        assert torch.equal(a, b) and torch.equal(a, c)


@pytest.mark.skipif(DEV != "cuda", reason="direct launches happen on the GPU only (the interpreter runs the JIT function)")
def test_direct_launch_matches_the_jit_launch(monkeypatch):
    """The same cross-entropy forward and backward through Launcher hits and through the JIT
    function, on aligned and unaligned logits and both target dtypes: bitwise equal results."""
    from softmax_properties.kernels import _cross_entropy as ce

    def run():
        out = []
        for off, tdt in ((0, torch.int64), (1, torch.int32), (0, torch.int32)):
            g = torch.Generator().manual_seed(off)
            x = torch.randn(70, 1001, generator=g).to(DEV, torch.bfloat16)[:, off:off + 1000]
            t = torch.randint(0, 1000, (70,), generator=g).to(DEV, tdt)
            loss, lse, stats = ce.forward_stats(x, t)
            out += [loss, lse, ce.backward_rows(x, t, torch.ones((), device=DEV), lse, -100, "mean", 0.0, stats)]
        return out
    _direct_equals_jit(monkeypatch, run, (ce._fwd, ce._bwd, ce._targets, ce._reduce))


@pytest.mark.skipif(DEV != "cuda", reason="direct launches happen on the GPU only (the interpreter runs the JIT function)")
def test_softmax_family_direct_launch_matches_the_jit_launch(monkeypatch):
    """The softmax-family forward and backward kernels through Launcher hits and through the JIT
    function: whole rows (short, with sub-rows for logsumexp, and long), split rows (few rows
    longer than a block), looped rows (many of them), aligned and unaligned: bitwise equal."""
    from softmax_properties.kernels import _softmax as sm
    mb = _launch.max_block(torch.float32)
    shapes = [(300, 128, 0), (300, 129, 1), (5, 2000, 0), (2, 2 * mb + 3, 1),
              (max(2, _launch.loop_rows(torch.device(DEV))), 2 * mb + 16, 0)]

    def run():
        out = []
        for n, d, off in shapes:
            g = torch.Generator().manual_seed(n + d)
            for dt in (torch.bfloat16, torch.float32):
                x = torch.randn(n, d + off, generator=g).to(DEV, dt)[:, off:]  # off 0: contiguous
                dy = torch.randn(n, d, generator=g).to(DEV, dt)
                y, z = kernels.softmax(x), kernels.log_softmax(x)
                out += [y, z, kernels.logsumexp(x), kernels.softmax_backward(y, dy), kernels.log_softmax_backward(z, dy)]
        return out
    _direct_equals_jit(monkeypatch, run, lambda: (sm._FWD, sm._BWD, sm._FWD_LOOP, sm._BWD_LOOP, *sm._BWD_CAPPED.values()))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=0, max_size=3), st.integers(1, 7), st.integers(1, 2), st.booleans())
def test_contiguous_plan_is_the_general_plan(batch, d, n_in, per_row):
    """plan_rows' shortcut for contiguous tensors reduced along the last axis gives the general
    planner's plan, field by field (so the same kernel variant and arguments: VEC and TWO_AXES
    read the strides)."""
    xs = [torch.empty(batch + [d]) for _ in range(n_in)]
    outs = [(torch.empty(batch if per_row else batch + [d]), per_row)]
    fast = _launch._plan_contiguous(xs, outs)
    slow = _launch._plan_general(xs, outs, len(batch))
    assert (fast.n_rows, fast.n_cols, fast.n1, fast.in_strides, fast.out_strides, fast.out_col_strides) == \
        (slow.n_rows, slow.n_cols, slow.n1, slow.in_strides, slow.out_strides, slow.out_col_strides)
    assert [t.data_ptr() for t in fast.inputs] == [t.data_ptr() for t in slow.inputs]
    assert _launch.plan_rows(xs, outs, len(batch)) == fast


def test_knobs_are_read_again_on_reload(monkeypatch):
    """Tuning knobs come from a snapshot of the environment (_launch.knob): a change is seen after
    reload_knobs(), and row_config's cache follows it."""
    try:
        monkeypatch.delenv("SOFTMAX_KERNELS_TILE", raising=False)
        _launch.reload_knobs()
        base = _launch.row_config(128, torch.float32)
        monkeypatch.setenv("SOFTMAX_KERNELS_TILE", "256")
        assert _launch.row_config(128, torch.float32) == base  # not reloaded yet
        _launch.reload_knobs()
        assert _launch.row_config(128, torch.float32).block_r == 2
        monkeypatch.delenv("SOFTMAX_KERNELS_TILE")
        _launch.reload_knobs()
        assert _launch.row_config(128, torch.float32) == base
    finally:
        monkeypatch.undo()
        _launch.reload_knobs()


@pytest.mark.parametrize("knob,settings", [("ATTN_KERNELS_BWD_DP_FIRST", ("", "16,32,64,128,256")),
                                           ("ATTN_KERNELS_BWD_OFF32", ("", "16,32,64,128,256"))])
@pytest.mark.parametrize("causal,softcap,shape", [(False, None, (37, 50, 16, 16)), (True, 5.0, (70, 45, 64, 32))])
def test_attention_launch_choices_change_the_code_not_the_values(monkeypatch, knob, settings, causal, softcap, shape):
    """The dk/dv kernel's DP_FIRST (ATTN_KERNELS_BWD_DP_FIRST) only moves a matmul, and its OFF32
    (ATTN_KERNELS_BWD_OFF32) only narrows the query offsets: dq, dk and dv are bitwise the same
    either way (grouped heads, a mask, softcap, partial blocks)."""
    from softmax_properties.kernels import _attention as AT
    Lq, Lk, D, Dv = shape
    g = torch.Generator().manual_seed(1)
    q, k, v, do = (torch.randn(*s, generator=g).to(DEV, torch.bfloat16)
                   for s in ((2, 4, Lq, D), (2, 2, Lk, D), (2, 2, Lk, Dv), (2, 4, Lq, Dv)))
    o, lse = AT.attention(q, k, v, causal=causal, softcap=softcap)
    grads = []
    try:
        for setting in settings:
            monkeypatch.setenv(knob, setting)
            _launch.reload_knobs()
            flag = AT.dp_first if knob == "ATTN_KERNELS_BWD_DP_FIRST" else lambda dt, bd: AT.off32(q, do, 16, bd)
            assert flag(q.dtype, max(16, D)) == bool(setting)
            grads.append(AT.attention_backward(q, k, v, o, lse, do, causal=causal, softcap=softcap))
    finally:
        monkeypatch.undo()
        _launch.reload_knobs()
    for name, a, b in zip(("dq", "dk", "dv"), *grads):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("stride,fits", [(2**20, True), (2**24 - 2, True), (2**24, False), (2**40, False)])
def test_attention_off32_holds_every_offset_a_head_forms(monkeypatch, stride, fits):
    """OFF32 (int32 query offsets in the dk/dv kernel) only where every offset of a head fits in
    int32, the masked rows past the end included: Lq 64, a query block of 32, a head-dimension
    block of 128, bounded by (64 + 2 * 32) * stride + 128 (meta tensors: strides only); and only
    for the blocks listed."""
    from softmax_properties.kernels import _attention as AT
    big = torch.empty_strided((1, 2, 64, 128), (0, 0, stride, 1), device="meta")
    small = torch.empty((1, 2, 64, 128), device="meta")
    try:
        monkeypatch.setenv("ATTN_KERNELS_BWD_OFF32", "64,128")
        _launch.reload_knobs()
        assert AT.off32(big, small, 32, 128) == fits
        assert AT.off32(small, big, 32, 128) == fits
        assert AT.off32(small, small, 32, 128)
        monkeypatch.setenv("ATTN_KERNELS_BWD_OFF32", "64")
        _launch.reload_knobs()
        assert not AT.off32(small, small, 32, 128)
    finally:
        monkeypatch.undo()
        _launch.reload_knobs()


def test_attention_backward_takes_its_long_launch_from_its_length(monkeypatch):
    """The compiled backward's launch (interpreting patched off): ATTN_BWD_16_LONG (causal:
    ATTN_BWD_16_LONG_CAUSAL where it lists the block), with OFF32, for 16-bit inputs of at least
    ATTN_BWD_LONG_FROM queries without softcap; ATTN_BWD_16 below that, with softcap, for
    float32, or under an ATTN_KERNELS_BWD override; and the length where it changes, and the
    causal launch's blocks, are block boundaries."""
    from softmax_properties.kernels import _attention as AT
    from softmax_properties.kernels import tuning as T
    monkeypatch.setattr(_launch, "interpreting", lambda: False)
    n, bf = T.ATTN_BWD_LONG_FROM, torch.bfloat16
    for D, long in T.ATTN_BWD_16_LONG.items():
        head = torch.empty((1, 1, n, D), dtype=bf, device="meta")
        assert AT.bwd_config(bf, D, D, False, n) == long and AT.bwd_long(bf, D, D, False, n)
        causal = T.ATTN_BWD_16_LONG_CAUSAL.get(D, long)
        assert AT.bwd_config(bf, D, D, False, n, True) == causal
        assert AT.bwd_config(bf, D, D, False, n - 1, True) == T.ATTN_BWD_16[D]
        assert {causal[0], causal[1]} <= set(AT.block_boundaries(bf, D))
        assert AT.bwd_config(bf, D, D, False, n - 1) == T.ATTN_BWD_16[D]
        assert not AT.bwd_long(bf, D, D, True, n) and not AT.bwd_long(torch.float32, D, D, False, n)
        assert AT.bwd_config(torch.float32, D, D, False, n) == T.ATTN_BWD_32[D]
        assert n in AT.block_boundaries(bf, D) and n not in AT.block_boundaries(torch.float32, D)
        assert AT.off32(head, head, long[0], D, True) == (D in T.ATTN_BWD_OFF32)
        assert not AT.off32(head, head, long[0], D, False)
    # a causal launch listed for a block: taken by causal backwards of the long lengths only, its
    # blocks among the boundaries, and asked for by backward() where no query sees a key past its
    # diagonal (right == 0: causal, or a window whose right side is 0)
    listed = (64, 16, 4, 2, 128, 64, 8, 3)
    monkeypatch.setattr(T, "ATTN_BWD_16_LONG_CAUSAL", {128: listed})
    assert AT.bwd_config(bf, 128, 128, False, n, True) == listed != AT.bwd_config(bf, 128, 128, False, n)
    assert AT.bwd_config(bf, 128, 128, False, n - 1, True) == T.ATTN_BWD_16[128]
    assert 16 in AT.block_boundaries(bf, 128) and 16 not in AT.block_boundaries(bf, 64)
    asked = []

    class Asked(Exception):
        pass

    def spy(*args):
        asked.append(args[-1])
        raise Asked

    x, lse = torch.zeros(1, 1, 4, 8), torch.zeros(1, 1, 4)
    with monkeypatch.context() as m:
        m.setattr(AT, "bwd_config", spy)
        for right in (0, None, 2):
            with pytest.raises(Asked):
                AT.backward(x, x, x, x, lse, x, None, 1.0, 3, right, None)
    assert asked == [True, False, False]
    try:
        monkeypatch.setenv("ATTN_KERNELS_BWD", "32/128/8/3/128/64/8/3")
        _launch.reload_knobs()
        assert AT.bwd_config(bf, 128, 128, False, n) == (32, 128, 8, 3, 128, 64, 8, 3)
        assert not AT.bwd_long(bf, 128, 128, False, n)
    finally:
        monkeypatch.undo()
        _launch.reload_knobs()


@pytest.mark.parametrize("name,setting", [("ATTN_KERNELS_BWD", "32/128/8/3"), ("ATTN_KERNELS_BWD", "a/b"),
                                          ("ATTN_KERNELS_BWD", "32/0/8/3/128/64/8/3"),
                                          ("ATTN_KERNELS_BWD_DP_FIRST", "64;128"), ("ATTN_KERNELS_BWD_OFF32", "x"),
                                          ("ATTN_KERNELS_FWD", "128/64/8")])
def test_a_malformed_attention_knob_is_named(monkeypatch, name, setting):
    """A malformed attention launch override raises a ValueError naming the variable, not an
    unpacking error or a silent default."""
    from softmax_properties.kernels import _attention as AT
    try:
        monkeypatch.setenv(name, setting)
        _launch.reload_knobs()
        with pytest.raises(ValueError, match=f"{name}: expected"):
            AT.fwd_config(torch.bfloat16, 64, 64)
            AT.bwd_config(torch.bfloat16, 64, 64)
            AT.dp_first(torch.bfloat16, 64)
            AT.off32(*(torch.empty((1, 1, 4, 64), dtype=torch.bfloat16, device="meta"),) * 2, 32, 64)
    finally:
        monkeypatch.undo()
        _launch.reload_knobs()


def test_plain_eager_calls_skip_the_library_op_only_where_it_adds_nothing():
    """kernels.softmax / log_softmax / logsumexp call the kernels directly for a plain tensor that
    needs no gradient (kernels._plain_eager: no softmax_props op in the profiler's record) and go
    through the torch.library op otherwise: with a gradient to record, under torch.jit.trace
    (the trace must hold the op, or it would replay nothing), under a torch function mode, a
    dispatch mode or vmap. Same results bitwise either way."""
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    def ops_run(fn):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            out = fn()
        return out, {e.name for e in prof.events() if e.name.startswith("softmax_props::")}

    class Passthrough(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    class PassthroughDispatch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    x = torch.randn(6, 37, device=DEV, dtype=torch.float32)
    for name in ("softmax", "log_softmax", "logsumexp"):
        fn, op_name = getattr(kernels, name), f"softmax_props::{name}"
        plain, ran = ops_run(lambda: fn(x))
        assert not ran, (name, ran)
        for how, call in (("grad", lambda: fn(x.clone().requires_grad_())),
                          ("function mode", lambda: _in_mode(Passthrough(), lambda: fn(x))),
                          ("dispatch mode", lambda: _in_mode(PassthroughDispatch(), lambda: fn(x)))):
            out, ran = ops_run(call)
            assert op_name in ran, (name, how, ran)
            assert torch.equal(out.detach(), plain), (name, how)
        traced = torch.jit.trace(lambda t: fn(t), (x,))
        assert op_name in str(traced.graph), (name, traced.graph)
        assert torch.equal(traced(x), plain)
        seen = []
        torch.func.vmap(lambda r: seen.append(kernels._plain_eager(r)) or r)(x)
        assert seen == [False], name
        with torch.no_grad():
            assert kernels._plain_eager(x.clone().requires_grad_())


def _in_mode(mode, fn):
    with mode:
        return fn()


class _NoStreams:
    """torch.cuda's stream calls made no-ops, for running follows_current_stream's machinery on
    the CPU: the side stream's copies then happen where inputs_written_late issues them (on a GPU,
    in stream order, behind the spinning kernel)."""

    def __init__(self, monkeypatch):
        self.sleeps = []
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
        monkeypatch.setattr(torch.cuda, "Stream", lambda device=None: object())
        monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
        monkeypatch.setattr(torch.cuda, "_sleep", self.sleeps.append)


def test_inputs_written_late_copies_every_layout(monkeypatch):
    """The copies inputs_written_late yields have each input's shape, strides, values and address
    alignment (modulo the CPU allocator's 64 bytes here; on a GPU, the caching allocator's 512),
    views with gaps, a storage offset and stride-0 (overlapping) axes included, and hold zeros
    until the side stream writes them (behind its spinning kernel)."""
    from ..invariants._checks import LATE_CYCLES, inputs_written_late
    streams = _NoStreams(monkeypatch)
    base = torch.arange(1.0, 61.0, dtype=torch.float64).reshape(6, 10)
    tensors = [base[1:5, 2:9:2], base.t(), base[2, :4].expand(3, 4), base[:0], torch.tensor([3, 0, 2]),
               base.to(torch.bfloat16)[::2], base.to(torch.bfloat16).reshape(-1)[3:50]]
    seen_zeros = []
    monkeypatch.setattr(torch.Tensor, "copy_", _recording_copy(torch.Tensor.copy_, seen_zeros))
    with inputs_written_late(tensors) as late:
        got = [(t.shape, t.stride(), t.clone(), t.data_ptr()) for t in late]
    assert streams.sleeps == [LATE_CYCLES]
    assert seen_zeros and all(seen_zeros)  # every copy landed on zeros
    for t, (shape, stride, v, ptr) in zip(tensors, got):
        assert shape == t.shape and (t.numel() == 0 or stride == t.stride()) and torch.equal(v, t)
        assert t.numel() == 0 or (ptr - t.data_ptr()) % 64 == 0, (t.storage_offset(), ptr % 512, t.data_ptr() % 512)


def _recording_copy(copy, seen):
    def rec(self, src, *a, **kw):
        seen.append(bool((self == 0).all()))
        return copy(self, src, *a, **kw)
    return rec


@pytest.mark.skipif(interpreter.device() == "cuda", reason="on a GPU the law itself runs on real streams "
                    "(test_property[follows_current_stream-*]); the kernels there ask torch.cuda for the current "
                    "stream, which the no-op streams cannot answer")
@pytest.mark.parametrize("op", ["softmax", "softmax_merge", "cross_entropy"])
def test_follows_current_stream_machinery(op, monkeypatch):
    """follows_current_stream (a GPU law) run on the CPU with streams made no-ops: it passes the
    project's kernels; with the inputs left unwritten during the call (as a kernel launched on
    another stream sees them) it fails, and its report's reproducer calls the op inside
    inputs_written_late."""
    from ..invariants import generic, law
    _NoStreams(monkeypatch)
    inv, tg = law("follows_current_stream"), kernels_target()

    @settings(max_examples=5, derandomize=True, database=None, deadline=None)
    @given(S.cases(op, inv.families, 64))
    def passes(case):
        inv.check(case, tg)

    passes()

    class _Unwritten:  # the copies are written only after the block: the op reads zeros
        def __init__(self, tensors):
            self.tensors, self.copies = tensors, [torch.zeros_like(t) for t in tensors]

        def __enter__(self):
            return tuple(self.copies)

        def __exit__(self, *exc):
            for c, t in zip(self.copies, self.tensors):
                c.copy_(t)
            return False

    monkeypatch.setattr(generic, "inputs_written_late", _Unwritten)
    report = _first_failure(inv, tg, op)
    assert report.startswith("[follows_current_stream] (default tier)"), report
    assert "with inputs_written_late((" in report, report


def _first_failure(inv, tg, op) -> str:
    """The report of the first of up to 50 generated cases of op (derandomized) on which the
    invariant inv fails for the target tg (hypothesis.errors.NoSuchExample if none does)."""
    from ..case import PropertyFailure
    reports = []

    def fails(case) -> bool:
        try:
            inv.check(case, tg)
        except PropertyFailure as e:
            reports.append(str(e))
            return True
        return False

    find(S.cases(op, inv.families, 64), fails, settings=settings(max_examples=50, derandomize=True, database=None,
                                                                   deadline=None, phases=[Phase.generate]))
    return reports[-1]


@pytest.mark.skipif(interpreter.device() == "cuda", reason="the no-op streams cannot answer the kernels' stream "
                    "queries on a GPU (as test_follows_current_stream_machinery)")
def test_follows_current_stream_names_the_result_beyond_its_bound(monkeypatch):
    """For an op declared NONDETERMINISTIC, follows_current_stream holds each stream's result to
    its bound, and its report says which one is beyond it: lost_atomic_add loses an update on
    every other call (odd ones, counted from here), the first of which is the default stream's
    reference call, so the report blames that one, not the side stream."""
    import importlib
    from ..invariants import law
    from ..ops import Target
    from .. import mutants
    _NoStreams(monkeypatch)
    inv = law("follows_current_stream")
    lost = importlib.import_module(f"{mutants.__name__}.lost_atomic_add")
    monkeypatch.setattr(lost, "_CALLS", [0])  # each example calls twice: the default stream's call is odd
    tg = Target(lost)
    tg.device = DEV
    report = _first_failure(inv, tg, "softmax_backward")
    assert "the default stream's result beyond its bound" in report, report


def _nan_first_column_softmax(x):
    """softmax whose first column is NaN: a wrong value, written on every call."""
    y = torch.softmax(x.double(), -1).to(x.dtype)
    y[..., :1] = math.nan
    return y


def test_all_outputs_written_tells_an_unwritten_element_from_a_wrong_nan():
    """all_outputs_written's report says whether the NaN it found is there only under the
    poisoned allocations (an element the op does not write: ce_ignored_grad_unwritten) or also without
    them (a wrong value, which the law should not blame on unwritten memory)."""
    import importlib
    import types
    from ..invariants import law
    from ..ops import Target
    from .. import mutants
    inv = law("all_outputs_written")
    unwritten = Target(importlib.import_module(f"{mutants.__name__}.ce_ignored_grad_unwritten"))
    module = types.ModuleType("nan_first_column")
    module.softmax = _nan_first_column_softmax
    wrong = Target(module)
    unwritten.device = wrong.device = DEV
    report = _first_failure(inv, unwritten, "cross_entropy_backward")
    assert "under poisoned allocations only (an element the op does not write)" in report, report
    report = _first_failure(inv, wrong, "softmax")
    assert "with and without poisoned allocations (a wrong value, not an unwritten element)" in report, report
