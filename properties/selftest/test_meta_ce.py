"""Meta tests of cross-entropy: its semantics table against torch and the oracle, input validation
and autograd of the kernels, reproducers that rebuild their tensors exactly, and its bounds at the
edges of the range."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import assume, given, settings, strategies as st

from softmax_properties import kernels
from softmax_properties import oracles
from softmax_properties.kernels import _launch

from .. import strategies as S
from ..targets import OWN_KERNELS
from ..families.cross_entropy import strategies as CE
from ..families.cross_entropy.case import CECase
from .meta_support import DEV, agrees, all_ignored_mean, kernels_target


# ---------------------------------------------------------------------------- cross-entropy
@pytest.mark.parametrize("what,logits,tgt,eps,red,loss,grad,torch_grad", oracles.CE_SEMANTICS,
                         ids=[r[0] for r in oracles.CE_SEMANTICS])
def test_ce_semantics_table(what, logits, tgt, eps, red, loss, grad, torch_grad):
    """Every row of the cross-entropy table holds for torch (float64 F.cross_entropy; its
    gradient where the table records a deliberate difference), the FP64 oracle and the kernels."""
    import torch.nn.functional as F
    V = len(logits[0]) if logits else 3
    x = torch.tensor(logits, dtype=torch.float64).reshape(-1, V)
    t = torch.tensor(tgt, dtype=torch.int64)
    for impl in ("torch", "oracle", "kernels"):
        if impl == "oracle":
            dl = torch.ones(t.shape if red == "none" else (), dtype=torch.float64)
            got_l = oracles.ce.cross_entropy(x, t, -100, red, eps)
            got_g = oracles.ce.cross_entropy_backward(x, t, dl, -100, red, eps)
        else:
            xx = x.to(DEV).clone().requires_grad_(True)
            fn = F.cross_entropy if impl == "torch" else kernels.cross_entropy
            out = fn(xx, t.to(DEV), reduction=red, label_smoothing=eps)
            (g,) = torch.autograd.grad(out.sum(), xx)
            got_l, got_g = out.detach().cpu(), g.cpu()
        want_g = torch_grad if (impl == "torch" and torch_grad is not None) else grad
        assert agrees(got_l, loss, atol=1e-300), f"{impl}: loss {got_l.tolist()}, table says {loss}"
        assert agrees(got_g, torch.tensor(want_g, dtype=torch.float64).reshape(-1), atol=1e-300), \
            f"{impl}: grad {got_g.tolist()}, table says {want_g}"


def test_ce_rejects_bad_input():
    x, t = torch.randn(2, 3, device=DEV), torch.tensor([0, 1], device=DEV)
    ce, ceb = kernels.cross_entropy, kernels.cross_entropy_backward
    with pytest.raises(TypeError, match=r"cross_entropy: logits.dtype must be .*got torch.int64"):
        ce(torch.ones(2, 3, dtype=torch.int64, device=DEV), t)
    with pytest.raises(TypeError, match=r"target.dtype must be int32 or int64 .*got torch.float32.*class indices"):
        ce(x, t.float())
    with pytest.raises(ValueError, match=r"target must have shape logits.shape\[:-1\] = \(2,\).*got \(3,\)"):
        ce(x, torch.tensor([0, 1, 2], device=DEV))
    with pytest.raises(ValueError, match=r"reduction must be one of 'none', 'mean', 'sum', got 'avg'"):
        ce(x, t, reduction="avg")
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match=r"label_smoothing must be in \[0, 1\]"):
            ce(x, t, label_smoothing=bad)
    with pytest.raises(TypeError, match=r"ignore_index must be an int"):
        ce(x, t, ignore_index=1.0)
    with pytest.raises(ValueError, match=r"ignore_index must fit in int64, got 9223372036854775808"):
        ce(x, t, ignore_index=2**63)
    # an ignore_index beyond int32 with int32 targets matches no row: every target counts
    t32 = torch.tensor([2, 0], dtype=torch.int32, device=DEV)
    assert torch.equal(ce(x, t32, ignore_index=2**40), ce(x, t32))
    with pytest.raises(ValueError, match=r"at least one class"):
        ce(torch.ones(2, 0, device=DEV), t)
    for bad_t in ([0, 3], [-1, 0], [0, -101]):
        with pytest.raises(ValueError, match=r"target\[\d\] = -?\d+ is out of range: targets must be in \[0, 3\)"):
            ce(x, torch.tensor(bad_t, device=DEV))
    with pytest.raises(ValueError, match=r"dloss must have the loss's shape \(2,\) for reduction='none'"):
        ceb(x, t, torch.ones((), device=DEV), reduction="none")
    with pytest.raises(ValueError, match=r"dloss must have the loss's shape \(\) for reduction='mean'"):
        ceb(x, t, torch.ones(2, device=DEV))
    with pytest.raises(TypeError, match=r"dloss.dtype must be a floating-point dtype"):
        ceb(x, t, torch.ones((), dtype=torch.int64, device=DEV))
    with pytest.raises(ValueError, match=r"target\[1\] = 7 is out of range"):
        ceb(x, torch.tensor([0, 7], device=DEV), torch.ones((), device=DEV))
    if DEV == "cuda":
        with pytest.raises(ValueError, match=r"logits and target must be on the same device"):
            ce(x, t.cpu())
        with pytest.raises(ValueError, match=r"logits and dloss must be on the same device"):
            ceb(x, t, torch.ones(()))


def test_lce_rejects_bad_input():
    """linear_cross_entropy names the argument and what it expected, before any device work;
    its class weights are ce_weight in every message (weight is the linear layer's)."""
    lce = kernels.linear_cross_entropy
    h, w, t = torch.randn(2, 4, device=DEV), torch.randn(3, 4, device=DEV), torch.tensor([0, 2], device=DEV)
    with pytest.raises(ValueError, match=r"linear_cross_entropy: weight must be \(V, H\) with "
                                         r"H = hidden.shape\[-1\] = 4, got shape \(3, 5\)"):
        lce(h, torch.randn(3, 5, device=DEV), t)
    with pytest.raises(ValueError, match=r"weight must be \(V, H\), got shape \(12,\)"):
        lce(h, torch.randn(12, device=DEV), t)
    with pytest.raises(TypeError, match=r"weight.dtype must be hidden's dtype torch.float32, got torch.float64"):
        lce(h, w.double(), t)
    with pytest.raises(ValueError, match=r"bias must have shape \(V,\) = \(3,\), got \(4,\)"):
        lce(h, w, t, bias=torch.zeros(4, device=DEV))
    with pytest.raises(TypeError, match=r"bias must be None or a torch.Tensor, got list"):
        lce(h, w, t, bias=[0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match=r"target must have shape .*\(2,\).*got \(3,\)"):
        lce(h, w, torch.tensor([0, 1, 2], device=DEV))
    with pytest.raises(ValueError, match=r"ce_weight must have shape \(V,\) = \(3,\), one weight per class, "
                                         r"got \(4,\)"):
        lce(h, w, t, ce_weight=torch.ones(4, device=DEV))
    with pytest.raises(TypeError, match=r"ce_weight must be None or a torch.Tensor of 3 class weights, got tuple"):
        lce(h, w, t, ce_weight=(1.0, 1.0, 1.0))
    with pytest.raises(TypeError, match=r"ce_weight.dtype must be a floating-point dtype, got torch.int64"):
        lce(h, w, t, ce_weight=torch.ones(3, dtype=torch.int64, device=DEV))
    with pytest.raises(ValueError, match=r"z_loss must be a finite float >= 0, got -1.0"):
        lce(h, w, t, z_loss=-1.0)
    with pytest.raises(ValueError, match=r"target\[1\] = 3 is out of range"):
        lce(h, w, torch.tensor([0, 3], device=DEV))


def _declaring(**attrs):
    """A target module holding attrs (functions and declarations)."""
    import types
    m = types.ModuleType("declares")
    m.__dict__.update(attrs)
    return m


def _zero_empty_mean_module(declared: bool, options: bool = False):
    """The kernels' cross-entropy with a mean over no counted rows of 0 (liger-kernel's and
    fla-core's fused kernels), declared CE_EMPTY_MEAN = 0.0 or not; options: it also takes the
    kernels' weight, z_loss, softcap and logit_scale."""
    def cross_entropy_options(logits, target, *, ignore_index=-100, reduction="mean", label_smoothing=0.0,
                              weight=None, z_loss=0.0, softcap=None, logit_scale=1.0):
        out = kernels.cross_entropy(logits, target, ignore_index=ignore_index, reduction=reduction,
                                    label_smoothing=label_smoothing, weight=weight, z_loss=z_loss, softcap=softcap,
                                    logit_scale=logit_scale)
        if reduction == "mean" and not bool((target != ignore_index).any()):
            return torch.nan_to_num(out, nan=0.0)  # 0, and differentiable as the output it replaces
        return out

    def cross_entropy(logits, target, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        return cross_entropy_options(logits, target, ignore_index=ignore_index, reduction=reduction,
                                     label_smoothing=label_smoothing)
    return _declaring(cross_entropy=cross_entropy_options if options else cross_entropy,
                      **({"CE_EMPTY_MEAN": 0.0} if declared else {}))


def test_a_declared_zero_mean_of_no_counted_rows_is_judged_by_it():
    """CE_EMPTY_MEAN = 0.0: a mean over no counted rows is 0, as the target declares; undeclared,
    the same function fails, and the message names the declaration; the project's kernels (NaN,
    torch's) fail the declaration. A bad value is refused by name."""
    from ..failures import PropertyFailure
    from ..families.cross_entropy import strategies as CES
    from ..families.cross_entropy.laws import ce_matches_oracle, ce_reductions_agree
    from ..ops import Target

    def case(zero):
        return all_ignored_mean(empty_mean_zero=zero)
    declared, plain = Target(_zero_empty_mean_module(True)), Target(_zero_empty_mean_module(False))
    declared.device = plain.device = DEV
    ce_matches_oracle(case(True), declared)
    ce_reductions_agree(case(True), declared)
    with pytest.raises(PropertyFailure, match=r"not NaN \(a mean of 0 there is a convention: declare CE_EMPTY_MEAN"):
        ce_reductions_agree(case(False), plain)
    with pytest.raises(PropertyFailure, match="expected is NaN"):
        ce_matches_oracle(case(False), plain)
    with pytest.raises(PropertyFailure, match=r"not 0, as the target declares \(CE_EMPTY_MEAN = 0.0\)"):
        ce_reductions_agree(case(True), kernels_target())
    saved = S.TARGET.module
    try:
        S.TARGET.module = _zero_empty_mean_module(True)
        assert CES.empty_mean_zero()
        S.TARGET.module = _declaring(CE_EMPTY_MEAN=1.0)
        with pytest.raises(ValueError, match=r"CE_EMPTY_MEAN must be math.nan \(the default\) or 0.0, got 1.0"):
            CES.empty_mean_zero()
        S.TARGET.module = None
        assert not CES.empty_mean_zero()
    finally:
        S.TARGET.module = saved


def test_every_cross_entropy_law_judges_a_declared_zero_mean_by_it():
    """CE_EMPTY_MEAN = 0.0 holds in every law, not only those whose truth is ce_truth's: each
    cross_entropy law the declared module can run passes it on means over no counted rows, with
    and without smoothing and the options (a law forming its own FP64 reference with torch's NaN
    there fails a correct module that declares the convention)."""
    from hypothesis.errors import UnsatisfiedAssumption
    from ..applicability import skip_reason
    from ..invariants import laws_for
    from ..ops import Target
    from ..spec import lookup
    target = Target(_zero_empty_mean_module(True, options=True))
    target.device = DEV
    ran = set()
    for inv in laws_for(lookup("cross_entropy")):
        # the laws of any case and of the options' cases (a marker family's law, as
        # ce_out_of_range_target_raises, builds on its own kind of case)
        marker = any(not f.startswith(CE.CE_OPTIONS) for f in inv.families or ())
        if marker or skip_reason(inv, "cross_entropy", target):
            continue
        held = {f.partition(":")[2] for f in inv.families or ()} - {""}  # the options the law's cases hold on
        for opts in ({}, dict(weight=(1.0, 2.0), z_loss=0.25), dict(softcap=5.0, logit_scale=0.5)):
            if not held <= set(opts) or (inv.families and not opts):
                continue
            for eps in (0.0, 0.1):
                case = all_ignored_mean(label_smoothing=eps, empty_mean_zero=True, **opts)
                try:
                    inv.check(case, target)
                except UnsatisfiedAssumption:
                    continue
                ran.add(inv.name)
    assert {"ce_matches_oracle", "ce_options_match_oracle", "ce_softcap_is_capped_logits"} <= ran, sorted(ran)


def _weighted_extremes(w):
    """float32 logits [-finfo.max, finfo.max], target 0, reduction none, class weights w."""
    big = torch.finfo(torch.float32).max
    x = S.Logits(1, 2, "float32", ("const", big), ((0, 0, 1, -big),), "huge")
    return CECase("cross_entropy", torch.float32, S.Input(x, (), S.Layout()), CE.Targets((0,)), -100, "none", 0.0,
                  weight=(w,))


@pytest.mark.parametrize("law,case", [
    # weight 0.25 (and 0): torch forms lse - x_t = 6.8e38 before the weight, inf (NaN) in float32
    ("ce_options_match_oracle", _weighted_extremes(0.25)),
    ("ce_options_match_oracle", _weighted_extremes(0.0)),
    # torch sums the rows' unscaled smoothing terms (2 x 3.4e38) before it scales them by eps / V
    ("ce_matches_oracle", CECase(
        "cross_entropy", torch.bfloat16, S.Input(S.Logits(2, 2, "bfloat16", ("const", 0.0),
                                                          ((0, 1, 2, -3.3895e38), (1, 1, 2, -3.3895e38)), "huge"),
                                                 (2,), S.Layout()),
        CE.Targets((0, 0)), -100, "mean", 0.1)),
])
def test_torchs_cross_entropy_passes_where_its_unweighted_terms_overflow(law, case):
    """The default tier leaves to the strict tier the losses whose terms overflow the compute
    precision in the order torch forms them (ce_default_mask, ce_options_mask): lse - x_t before
    a weight below 1, and the smoothing sums reduced over the rows before eps / V. torch's
    cross_entropy passes these cases (it gives inf or NaN where the exact loss is finite); the
    project's kernels pass the strict tier on them."""
    from ..invariants import law as find
    from ..ops import Target
    from ..targets import torch as torch_target
    target = Target(torch_target)
    target.device = DEV
    find(law).check(case, target)
    find(law + "_strict").check(case, kernels_target())


def test_ce_devices_differ_and_cpu_outside_interpreter(monkeypatch):
    """Device checks run on the CPU too: a 'meta' target differs from CPU logits; and with the
    interpreter off, CPU logits are refused naming the argument."""
    x, t = torch.randn(2, 3, device=DEV), torch.tensor([0, 1], device=DEV)
    with pytest.raises(ValueError, match=r"logits and target must be on the same device, got .* and meta"):
        kernels.cross_entropy(x, t.to("meta"))
    with pytest.raises(ValueError, match=r"logits and dloss must be on the same device, got .* and meta"):
        kernels.cross_entropy_backward(x, t, torch.ones((), device="meta"))
    x, t = x.cpu(), t.cpu()
    monkeypatch.setattr(_launch, "interpreting", lambda: False)
    with pytest.raises(ValueError, match=r"logits is on device 'cpu', but the Triton kernels run on CUDA tensors"):
        kernels.cross_entropy(x, t)


def test_ce_autograd_and_compile():
    """kernels.cross_entropy trains (autograd through the custom op matches torch) and traces
    under torch.compile (fullgraph; aot_eager, so no C++ toolchain is needed on the CPU)."""
    import torch.nn.functional as F
    x = torch.randn(5, 37, dtype=torch.float64, device=DEV, requires_grad=True)
    t = torch.tensor([1, -100, 36, 0, 5], device=DEV)
    ref = torch.autograd.grad(F.cross_entropy(x, t, label_smoothing=0.2), x)[0]
    got = torch.autograd.grad(kernels.cross_entropy(x, t, label_smoothing=0.2), x)[0]
    assert torch.allclose(got, ref, atol=1e-12)
    f = torch.compile(lambda a, b: kernels.cross_entropy(a, b, reduction="sum"), backend="aot_eager", fullgraph=True)
    loss = f(x, t)
    (g,) = torch.autograd.grad(loss, x)
    assert torch.allclose(loss, F.cross_entropy(x, t, reduction="sum"), atol=1e-12)
    assert torch.allclose(g, torch.autograd.grad(F.cross_entropy(x, t, reduction="sum"), x)[0], atol=1e-12)
    assert torch.ops.softmax_props.cross_entropy.default is not None


def test_ce_never_modifies_logits_under_autograd():
    x = torch.randn(3, 300, dtype=torch.bfloat16, device=DEV)
    x0 = x.clone()
    xx = x.requires_grad_(True)
    kernels.cross_entropy(xx, torch.tensor([0, 299, 7], device=DEV), label_smoothing=0.1).backward()
    assert torch.equal(x.detach(), x0)


def test_ce_autograd_refuses_logits_changed_in_place_and_repeats_a_retained_backward():
    """The autograd Function prepares the backward's launch in the forward (views of the logits):
    logits changed in place before backward must raise autograd's version error, not give the
    gradient of other logits; a retained graph's second backward gives the same gradient."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 33, generator=g).to(DEV).requires_grad_(True)
    t = torch.tensor([0, 3, -100, 32, 7], device=DEV)
    loss = kernels.cross_entropy(x, t, label_smoothing=0.1)
    a = torch.autograd.grad(loss, x, retain_graph=True)[0]
    b = torch.autograd.grad(loss, x)[0]
    assert torch.equal(a, b)
    loss = kernels.cross_entropy(x, t)
    with torch.no_grad():
        x.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        torch.autograd.grad(loss, x)


@settings(max_examples=25)
@given(st.data())
def test_ce_reproducer_rebuilds_the_exact_tensors(data):
    """A CECase's reproducer, executed as printed (calling the kernels), yields bitwise its logits,
    class indices (``labels``: ``target`` is the module) and dloss, strides too, and an output."""
    case = data.draw(CE.ce_cases(data.draw(st.sampled_from(["cross_entropy", "cross_entropy_backward"])),
                                many_rows=data.draw(st.booleans())))
    scope = {}
    exec(case.reproducer(OWN_KERNELS), scope)
    assert isinstance(scope["out"], torch.Tensor)
    for name, t in zip(("logits", "labels", "dloss"), case.tensors(DEV)):
        r = scope[name]
        assert r.shape == t.shape and r.stride() == t.stride() and r.dtype == t.dtype, name
        assert bool(((r == t) | (r.isnan() & t.isnan())).all()), name


def test_ce_reductions_agree_accepts_an_overflowing_sum():
    """Two float16 rows of loss 40000: the float16 sum is inf while each row and the mean are
    finite. The law must accept it (the float64 sum of the rows exceeds float16's range); a
    version comparing the rows' float64 sum against the sum as the reference failed here."""
    from ..families.cross_entropy.case import CECase
    from ..families.cross_entropy.laws import ce_reductions_agree
    tg = kernels_target()
    lg = S.Logits(2, 2, "float16", ("const", 0.0), ((-1, 1, 2, -40000.0),))
    case = CECase("cross_entropy", torch.float16, S.Input(lg, (2,), S.Layout()), CE.Targets((1, 1)), -100, "sum", 0.0)
    assert bool(torch.isinf(kernels.cross_entropy(*case.tensors(DEV), **case.kwargs())))
    ce_reductions_agree(case, tg)


def test_ce_reductions_agree_when_mean_times_count_overflows():
    """float64 logits [[finfo.max, 0], [0, 0], [0, 0]], targets [1, 0, 0] (a GPU counterexample):
    the sum rounds to finfo.max (finite, right), the mean to max / 3, and 3 * mean in float64 to
    inf. The law's mean * count must not overflow where the sum does not."""
    from ..families.cross_entropy.case import CECase
    from ..families.cross_entropy.laws import ce_reductions_agree
    tg = kernels_target()
    big = torch.finfo(torch.float64).max
    lg = S.Logits(3, 2, "float64", ("const", 0.0), ((0, 0, 1, big),))
    case = CECase("cross_entropy", torch.float64, S.Input(lg, (3,), S.Layout()), CE.Targets((1, 0, 0)), -100,
                  "mean", 0.0)
    x, t = case.tensors(DEV)
    assert float(x[0, 0]) == big and bool(torch.isinf(kernels.cross_entropy(x, t).double() * 3))
    ce_reductions_agree(case, tg)


@pytest.mark.parametrize("eps", [0.0, 0.25])
def test_ce_bound_of_rows_at_the_float64_limit(eps):
    """float64 logits [finfo.max, finfo.max], target 0: the exact loss is log 2, but lse = max + log 2
    rounds to max, so any kernel that forms lse - x_t returns 0, within the derived bound (u |lse|
    is 2e292). Formed directly, the bound's mean |x_j| overflows to inf and eps * inf with eps = 0
    makes it NaN, which the comparison reads as 0: a half-ulp tolerance."""
    from ..families.cross_entropy.case import CECase
    from ..families.cross_entropy.laws import ce_matches_oracle
    from ..families.cross_entropy.truth import ce_truth
    tg = kernels_target()
    big = torch.finfo(torch.float64).max
    x = S.Logits(1, 2, "float64", ("const", big), (), "huge")
    case = CECase("cross_entropy", torch.float64, S.Input(x, (), S.Layout()), CE.Targets((0,)), -100, "mean", eps)
    ref, tol = ce_truth(case, case.tensors("cpu"))
    assert bool(torch.isfinite(tol)) and float(tol) > 1e290, tol
    ce_matches_oracle(case, tg)


def test_ce_grad_bound_is_not_first_order_in_the_lse_rounding():
    """float64 logits all 2**55 (ulp 8), V = 26829, target 0 (a GPU counterexample of
    ce_gradient_rows_sum_to_zero): lse = 2**55 + log V = 2**55 + 10.2 rounds to 2**55 + 8, so every
    p_j = exp(x_j - lse) = e**-8, 9x the exact 1/V -- a backward-stable answer (lse is within half
    an ulp). The bound linear in the argument's error (8) falls short of e**2.2 - 1 = 8.0001; the
    exact p expm1(|delta|) covers it."""
    from ..families.cross_entropy.case import CECase
    from ..families.cross_entropy.laws import ce_gradient_rows_sum_to_zero, ce_matches_oracle
    tg = kernels_target()
    x = S.Logits(1, 26829, "float64", ("const", 2.0**55), (), "bits")
    case = CECase("cross_entropy_backward", torch.float64, S.Input(x, (), S.Layout()), CE.Targets((0,)), -100,
                  "mean", 0.0, CE.DLoss(("const", 1.0)))
    dx = kernels.cross_entropy_backward(*case.tensors(DEV), reduction="mean")
    assert abs(float(dx[1]) - math.exp(-8.0)) < 1e-12  # the lse's rounding, as on the GPU
    ce_matches_oracle(case, tg)
    ce_gradient_rows_sum_to_zero(case, tg)


@pytest.mark.parametrize("dtype,V", [("float32", 81), ("float32", 1000), ("float64", 5000)])
def test_ce_smoothing_mean_at_the_range_end(dtype, V):
    """Every logit -finfo.max, label_smoothing 0.1, target 0: the exact loss is log V, and the kernel
    sums the mean of x for the smoothing term. Formed unscaled, that sum overflows to -inf by
    rounding (float32: V = 81 on a GPU, from V = 1000 under the interpreter) and the loss reads
    inf; the kernel sums the mean at a quarter scale (kernels/_cross_entropy.py)."""
    from ..families.cross_entropy.case import CECase
    from ..families.cross_entropy.laws import ce_matches_oracle
    tg = kernels_target()
    low = -torch.finfo(getattr(torch, dtype)).max
    x = S.Logits(1, V, dtype, ("const", low), (), "huge")
    case = CECase("cross_entropy", getattr(torch, dtype), S.Input(x, (), S.Layout()), CE.Targets((0,)), -100,
                  "mean", 0.1)
    ce_matches_oracle(case, tg)


def test_ce_z_loss_gradient_bound_admits_a_flushed_softmax():
    """float32 logits [60, -64 x 29, -28.5 at class 20], target 0, z-loss 0.5, mean (a GPU
    counterexample of ce_z_loss_term): p_20 = exp(-88.5) = 3.7e-39 is subnormal, and a kernel that
    flushes it (the GPU's FTZ exp) returns dx_20 = 0 with and without the z term, where the exact
    z term is 2 z lse p_20 = 2.2e-37, five times the output's FTZ floor. The target here is the
    kernels fed the logits whose p_j is below float32's smallest normal set to -inf: what an FTZ
    kernel computes, on any device."""
    import types

    from ..families.cross_entropy.case import CECase
    from ..families.cross_entropy.laws import ce_options_match_oracle, ce_z_loss_term
    from ..ops import Target

    tiny = torch.finfo(torch.float32).tiny

    def flushed(x, target, dloss, **kw):
        y = oracles.ce.transform(x.double(), kw.get("softcap"), kw.get("logit_scale", 1.0))
        p = torch.exp(y - torch.logsumexp(y, -1, keepdim=True))
        return kernels.cross_entropy_backward(x.masked_fill(p < tiny, float("-inf")), target, dloss, **kw)

    tg = Target(types.ModuleType("ftz_kernels"))
    tg.module.cross_entropy_backward = flushed
    tg.device = DEV
    x = S.Logits(1, 31, "float32", ("const", -64.0), ((0, 0, 1, 60.0), (0, 20, 21, -28.5)))
    case = CECase("cross_entropy_backward", torch.float32, S.Input(x, (), S.Layout()), CE.Targets((0,)), -100,
                  "mean", 0.0, CE.DLoss(("const", 1.0)), z_loss=0.5)
    args = case.tensors(DEV)
    assert float(flushed(*args, reduction="mean", z_loss=0.5)[20]) == 0.0
    assert float(kernels.cross_entropy_backward(*args, reduction="mean", z_loss=0.5)[20]) > 2e-37 \
        or DEV != "cpu"  # the interpreter keeps subnormals: the flush is the target's alone
    ce_z_loss_term(case, tg)
    ce_options_match_oracle(case, tg)


def test_ce_options_bounds_hold_where_eps_rounds_and_z_terms_near_overflow():
    """Two GPU counterexamples of correct kernels, both reproduced by the interpreter. (1) float32
    logits of 10478 classes, label_smoothing 0.98487 with unit class weights, mean: eps reaches
    the kernel as a float32 argument, 9.2e-9 off, and 1 - eps = 0.015 inherits that error whole
    (dx_t off by 9.4e-9 where a bound relative to 1 - eps allowed 8.8e-9). (2) float64 logits all
    finfo.max, logit_scale 0.5, z-loss 1e-4, dloss 3: the bound's dloss times lse overflowed
    (3 x 9e307) where the z term itself is 5e304, and 0 x inf made the bound NaN, read as 0."""
    from ..families.cross_entropy.case import CECase
    from ..families.cross_entropy.laws import ce_options_match_oracle, ce_z_loss_term
    tg = kernels_target()
    x = S.Logits(1, 10478, "float32", ("normal", 0, 3.0), (), "moderate")
    case = CECase("cross_entropy_backward", torch.float32, S.Input(x, (), S.Layout()), CE.Targets((1,)), -100,
                  "mean", 0.9848659542495182, CE.DLoss(("const", 1.0)), weight=(1.0,))
    ce_options_match_oracle(case, tg)
    big = torch.finfo(torch.float64).max
    x = S.Logits(12, 2, "float64", ("const", big), (), "huge")
    case = CECase("cross_entropy_backward", torch.float64, S.Input(x, (12,), S.Layout()), CE.Targets((0,) * 12),
                  -100, "none", 0.0, CE.DLoss(("const", 3.0)), z_loss=1e-4, logit_scale=0.5)
    ce_z_loss_term(case, tg)
    ce_options_match_oracle(case, tg)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_float32_loss_of_16_bit_logits_passes_the_default_tier_only(dtype):
    """A loss of 16-bit logits returned in float32 (the per-row buffer of fused kernels) is a
    convention (truth.loss_also): output_dtype_and_shape and ce_matches_oracle pass it in the
    default tier; the strict tier holds the contract's dtype. A float32 loss that is wrong still
    fails: the bound is the 16-bit loss's own."""
    import types

    from ..families.cross_entropy.case import CECase
    from ..families.cross_entropy.laws import ce_matches_oracle
    from ..invariants._checks import check_oracle
    from ..invariants._registry import checking
    from ..invariants.generic import output_dtype_and_shape
    from ..ops import Target

    def wide(scale):
        def cross_entropy(x, target, **kw):
            return kernels.cross_entropy(x.float(), target, **kw) * scale
        tg = Target(types.ModuleType("float32_loss"))
        tg.module.cross_entropy = cross_entropy
        tg.device = DEV
        return tg

    x = S.Logits(3, 5, str(dtype).replace("torch.", ""), ("normal", 0, 3.0), (), "moderate")
    case = CECase("cross_entropy", dtype, S.Input(x, (3,), S.Layout()), CE.Targets((0, 4, 2)), -100, "mean", 0.0,
                  None)
    output_dtype_and_shape(case, wide(1.0))
    ce_matches_oracle(case, wide(1.0))
    with pytest.raises(AssertionError, match="differs from the FP64 oracle"):
        ce_matches_oracle(case, wide(1.01))
    with pytest.raises(AssertionError, match="float32"), checking("ce_matches_oracle_strict", "strict"):
        check_oracle(case, wide(1.0), strict=True)


def test_lce_weight_grad_sum_bound_admits_subnormal_16_bit_gradients():
    """float16 hidden (2, 32) and weight (9, 32), targets [0, 0], mean, logit_scale 2**-20 (a
    counterexample of the project's kernels under the gpu profile): d weight's elements are about
    1e-7, subnormal in float16, where each rounding errs by up to half the smallest subnormal
    (3e-8), not by a relative 2**-11; the vocabulary sum of nine of them missed a relative-only
    bound (2.4e-7 against 1.6e-7)."""
    from ..families.cross_entropy.linear import LCECase, lce_weight_grad_sums_to_zero, lce_gradients_match_oracle
    case = LCECase("linear_cross_entropy", torch.float16, 2, 32, 9, 0, 1.0, False, CE.Targets((0, 0)), -100, "mean",
                   0.0, logit_scale=2.0**-20)
    lce_weight_grad_sums_to_zero(case, kernels_target())
    lce_gradients_match_oracle(case, kernels_target())


def _lce_dy_dz(z, t, dl, options, reduction, eps):
    """(y, J, dy, G): the transformed logits, dy/dz, d loss / d y and d loss / d z (FP64 oracle)."""
    sc, s, zl = options.get("softcap"), options.get("logit_scale", 1.0), options.get("z_loss", 0.0)
    w = options.get("weight")
    y = oracles.ce.transform(z, sc, s)
    J = oracles.ce.transform_grad(z, sc, s)
    dy = oracles.ce.cross_entropy_backward(y, t, dl, -100, reduction, eps, w, z_loss=zl)
    G = oracles.ce.cross_entropy_backward(z, t, dl, -100, reduction, eps, **options)
    return y, J, dy, G


def _lce_perturbed(N, V, seed, mag, rel, options, reduction, eps):
    """(bound, plain, fp64, errors): bounds.lce_dlogits_error's part that carries a logits error
    e (tol_G = 0), the same without the z-loss and softcap terms (g p r |s|), the FP64 d logits'
    own rounding (a few dozen ulps of the two), and |G(z + d) - G(z)| for perturbations d of e at
    its corners (d = +-e: all of one sign, and random signs) and inside."""
    from ..families.cross_entropy import bounds as B
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(N, V, generator=g, dtype=torch.float64) * mag
    t = torch.randint(0, V, (N,), generator=g)
    dl = torch.rand(N if reduction == "none" else (), generator=g, dtype=torch.float64) + 0.5
    e = torch.rand(N, V, generator=g, dtype=torch.float64) * rel
    if "weight" in options:  # a pattern over the classes, as the strategies draw it
        options = {**options, "weight": torch.tensor(options["weight"], dtype=torch.float64).repeat(V)[:V]}
    w = options.get("weight")
    y, J, dy, G = _lce_dy_dz(z, t, dl, options, reduction, eps)
    gs = oracles.ce.grad_scale(t, dl, -100, reduction, w)
    gz = oracles.ce.grad_scale(t, dl, -100, reduction, w, for_z=True)
    c = 1.0 if w is None else (1 - eps) * w[t] + eps * w.mean()
    bound = B.lce_dlogits_error(torch.zeros_like(z), y, J, dy if "softcap" in options else None, e,
                                (gs * c)[..., None], gz[..., None], options.get("z_loss", 0.0),
                                options.get("softcap"), options.get("logit_scale", 1.0))
    s = abs(options.get("logit_scale", 1.0))
    plain = (gs * c).abs()[..., None] * torch.softmax(y, -1) * torch.expm1(2 * s * e.amax(-1, keepdim=True)) * s
    ds = [torch.ones_like(e), -torch.ones_like(e)] + [torch.randint(0, 2, e.shape, generator=g) * 2.0 - 1
                                                      for _ in range(6)]
    ds += [torch.rand(e.shape, generator=g, dtype=torch.float64) * 2 - 1 for _ in range(4)]
    errs, fp64 = [], []
    for d in ds:
        Gp = _lce_dy_dz(z + d * e, t, dl, options, reduction, eps)[3]
        errs.append((Gp - G).abs())
        fp64.append(2.0**-47 * (G.abs() + Gp.abs()))
    return bound, plain, fp64, errs


_LCE_OPTIONS = [{}, {"z_loss": 0.3}, {"z_loss": 2.0}, {"softcap": 3.0}, {"softcap": 15.0, "logit_scale": 2.0},
                {"softcap": 5.0, "z_loss": 1.0}, {"logit_scale": 0.5, "z_loss": 0.01}, {"weight": (0.5, 2.0, 0.0)},
                {"weight": (3.0, 0.25), "z_loss": 0.5}, {"weight": (1.0, 0.0, 2.0), "softcap": 4.0, "z_loss": 1.0}]


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 4), st.integers(1, 12), st.integers(0, 2**16), st.sampled_from([1.0, 5.0, 30.0]),
       st.sampled_from([1e-3, 0.03, 0.3]), st.sampled_from(_LCE_OPTIONS), st.sampled_from(["mean", "sum", "none"]),
       st.sampled_from([0.0, 0.1]))
def test_lce_dlogits_bound_covers_the_d_logits_at_perturbed_logits(N, V, seed, mag, rel, options, reduction, eps):
    """The part of bounds.lce_dlogits_error that carries the logits' error bounds |G(z + d) - G(z)|
    for every perturbation |d_j| <= e_j, G the FP64 d logits with the options (class weights
    among them; _lce_perturbed's corners and inner points), up to the FP64 oracle's own rounding.
    Perturbations of up to a few tenths keep the check away from first order."""
    bound, _, fp64, errs = _lce_perturbed(N, V, seed, mag, rel, options, reduction, eps)
    assume(bool(torch.isfinite(bound).all()))  # a weighted mean of zero weight sum: NaN (the law needs a finite G)
    for err, f in zip(errs, fp64):
        i = int((err - bound - f).argmax())
        assert bool((err <= bound + f).all()), \
            f"|G(z + d) - G(z)| = {err.flatten()[i].item():.3g} past the bound {bound.flatten()[i].item():.3g}"


@pytest.mark.parametrize("options", [o for o in _LCE_OPTIONS if o.get("z_loss", 0) >= 0.3 or "softcap" in o],
                         ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_lce_dlogits_bound_needs_its_z_loss_and_softcap_terms(options):
    """With a z-loss of 0.3 or more, or a softcap, the d logits at some perturbed logits move past
    the bound without those options' terms (g p r |s|, the bound before them), on logits of order
    5 perturbed by up to 0.3: the terms are needed, not decoration."""
    for seed in range(40):
        _, plain, fp64, errs = _lce_perturbed(3, 6, seed, 5.0, 0.3, options, "mean", 0.0)
        if any(bool((err > plain + f).any()) for err, f in zip(errs, fp64)):
            return
    pytest.fail(f"{options}: no perturbation moved the d logits past g p r |s|")
