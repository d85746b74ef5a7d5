"""What the laws share: calling the target (refusals discard an example), comparing an output with
its truth or with another output, poisoned allocations, and the error statistics of the check
(kept in its record: properties/record.py)."""
from __future__ import annotations

import contextlib
import math

import hypothesis
import torch
from hypothesis import reject

from .. import record, tolerances
from ..failures import WrongOutput
from ..spec import OPS
from ._registry import fail


# ----------------------------------------------------------------------------------------------
# calling the target
# ----------------------------------------------------------------------------------------------
def run(target, op, *tensors, **kw):
    """Call the target; a declared refusal discards the example, anything else propagates. A call
    passing an option of OpSpec.offered that the target's function does not take is discarded
    (the strategies draw only offered options; a law's own override may still pass one): the
    target does not offer that problem (laws that need the option say so in their skip reason)."""
    offered = getattr(OPS.get(op), "offered", ())
    if offered and any(k in offered and not target.offers(op, k) for k in kw):
        reject()
    try:
        return target.call(op, *tensors, **kw)
    except target.refusals as e:
        record.refused(e)
        reject()


def op_call(case, target, *tensors, **overrides):
    """One call of the case's op on these tensors, with the case's keyword options (overridden by
    `overrides`)."""
    return run(target, case.op, *tensors, **{**case.kwargs(), **overrides})


def call_op(case, target, tensors, **overrides):
    """The op's result on the case's argument tensors as the case evaluates it (one call, or a
    merge tree of calls), each call with the case's options (overridden by `overrides`)."""
    return case.evaluate(lambda *a, **kw: run(target, case.op, *a, **{**kw, **overrides}), tensors)


def outputs(out) -> tuple:
    """A result as a tuple of its outputs (one tensor, or a tuple such as a merge's (x, lse))."""
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


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


# the side stream's head start in inputs_written_late: 10-20 ms at the clocks of current GPUs,
# far longer than the host takes to launch an op's kernels (a merge tree's calls included)
LATE_CYCLES = 20_000_000
# the copies keep their input's address modulo this many bytes (the CUDA caching allocator's block
# alignment): a kernel may choose its vector width, and with it its summation order, by alignment
LATE_ALIGN = 512


@contextlib.contextmanager
def inputs_written_late(tensors, cycles: int = LATE_CYCLES):
    """A side stream is current within the block, and the tensors' values are being written on it,
    behind a kernel that spins for `cycles` clock cycles (torch.cuda._sleep), into copies with the
    same sizes, strides and address alignment (modulo LATE_ALIGN bytes) that hold zeros until
    then; yields the copies. Work on the current stream sees the values; a kernel launched on
    another stream that does not wait for it reads the zeros. On exit the device is synchronized.
    CUDA tensors only."""
    if not tensors:
        yield ()
        return
    device = tensors[0].device
    copies, pairs = [], []
    for t in tensors:
        if t.numel() == 0:
            copies.append(t.clone())
            continue
        # the storage span the view reaches (its gaps and stride-0 repeats included), copied as
        # one flat range, so that views with overlapping elements keep their geometry
        span = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
        pad = (t.data_ptr() % LATE_ALIGN) // t.element_size()
        flat = torch.zeros(pad + span, dtype=t.dtype, device=t.device)
        pairs.append((flat[pad:], torch.as_strided(t, (span,), (1,), t.storage_offset())))
        copies.append(flat.as_strided(t.shape, t.stride(), pad))
    torch.cuda.synchronize(device)  # the zeros are in place before the side stream starts
    side = torch.cuda.Stream(device=device)
    try:
        with torch.cuda.stream(side):
            torch.cuda._sleep(cycles)
            for flat, src in pairs:
                flat.copy_(src)
            yield tuple(copies)
    finally:
        torch.cuda.synchronize(device)


def storage_bases(tensors) -> list:
    """The tensors whose storage each tensor views (itself when it is no view)."""
    return [t._base if t._base is not None else t for t in tensors]


# ----------------------------------------------------------------------------------------------
# comparing
# ----------------------------------------------------------------------------------------------
def worst(bad: torch.Tensor, score: torch.Tensor):
    """Index of the worst failing element (largest score among the bad ones)."""
    s = torch.where(bad, torch.nan_to_num(score.double(), nan=math.inf, posinf=math.inf), -1.0)
    flat = int(torch.argmax(s.reshape(-1)))
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat, device="cpu"), bad.shape))


def finite_rows(t: torch.Tensor) -> torch.Tensor:
    return torch.isfinite(t.double()).all(-1)


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Element-wise: equal values with equal signs (so -0.0 != 0.0), or both NaN."""
    a, b = a.double(), b.double()
    return ((a == b) & (torch.signbit(a) == torch.signbit(b))) | (torch.isnan(a) & torch.isnan(b))


def assert_close(case, target, out, ref, tol, what, call=None, only=None, dtype=None, out_name="out"):
    """out within tol of ref (tolerances.compare) for an output of dtype (default: the op's output
    dtype); only: a bool mask (broadcast to ref) of the elements the law covers, None for all."""
    tol = torch.nan_to_num(tol, nan=0.0)  # compare's reading of a NaN bound, so the report shows it
    dtype = dtype or case.spec.out_dtype(case.dtype)
    bad = tolerances.compare(out, ref, tol, dtype)
    if only is not None:
        bad = bad & only
    if bool(bad.any()):
        i = worst(bad, (out.double() - ref).abs() / tol.clamp_min(1e-300))
        of = "" if out_name == "out" else f" of {out_name}"
        fail(case, target, f"{what}: {int(bad.sum())} of {bad.numel()} elements{of} out of bounds "
             f"(worst: {tolerances.mismatch(out[i], ref[i], tol[i], dtype)})", i, ref[i], out[i], tol[i], call,
             out_name=out_name)


def assert_bitwise(case, target, a, b, what, call=None, out_name="out"):
    """a and b of the same shape and dtype hold equal values (-0.0 == 0.0) or NaN alike."""
    if a.shape != b.shape or a.dtype != b.dtype:
        fail(case, target, f"{what}: shape/dtype {tuple(a.shape)}/{a.dtype} vs {tuple(b.shape)}/{b.dtype}", call=call,
             kind=WrongOutput)
    same = (a == b) | (torch.isnan(a) & torch.isnan(b))
    if not bool(same.all()):
        i = worst(~same, (a.double() - b.double()).abs())
        fail(case, target, f"{what}: {int((~same).sum())} elements differ bitwise", i, b[i], a[i], call=call,
             out_name=out_name)


def repeats_agree(case, target, got, want, args, what, call=None, truth=None, hint=True,
                  names=("the first result", "the second result")):
    """Two results of the op on the same values (a repeat call, the same call on a side stream;
    outputs in the op's order): bitwise equal (-0.0 == 0.0, NaN alike), or, for an op the target
    declares NONDETERMINISTIC (ops.py), each within its own oracle bound of the truth (so within
    the sum of the two of each other), NaN patterns and infinities exactly, on the elements the
    tier judges: a result that lost an update fails whichever of the two it is (names: what the
    report calls want and got). An undeclared op whose results differ only within those bounds
    gets a report saying so and how to declare it (hint=False: not, where the two calls' inputs
    differ and so may their paths). truth: the case's spec.truth at args (formed here, once a
    difference shows)."""
    got, want = outputs(got), outputs(want)
    if len(got) != len(want):
        fail(case, target, f"{what}: {len(got)} outputs against {len(want)}", call=call, kind=WrongOutput)
    declared = target.nondeterministic(case.op)
    for k, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape or g.dtype != w.dtype:
            fail(case, target, f"{what}: output {k + 1}'s shape/dtype {tuple(g.shape)}/{g.dtype} vs "
                 f"{tuple(w.shape)}/{w.dtype}", call=call, kind=WrongOutput)
        same = (g == w) | (torch.isnan(g) & torch.isnan(w))
        if bool(same.all()):
            continue
        truth = truth if truth is not None else case.spec.truth(case, args)
        e = truth.outputs[k].returned_as(w.dtype) if k < len(truth.outputs) else None
        if e is None:  # an output the spec does not have: bitwise, declared or not
            assert_bitwise(case, target, g, w, what, call, out_name=f"output {k + 1}")
            continue
        if declared:
            for r, which in zip((w, g), names):
                assert_close(case, target, r, e.value, e.tol, f"{what}: {which} beyond its bound ({case.op} is "
                             "declared NONDETERMINISTIC)", call, only=e.only, dtype=e.dtype, out_name=e.name)
            continue
        tol = tolerances.agree(e.tol, e.tol)
        bad = tolerances.compare(g, w.double(), torch.nan_to_num(tol, nan=0.0), e.dtype)
        if e.only is not None:
            bad = bad & e.only
        note = "" if bool(bad.any()) or not hint else (
            " (each within the two results' oracle bounds: a summation order that changes from call to call, "
            f"as atomic adds give; a module whose {case.op} does so by design declares "
            f"NONDETERMINISTIC = ({case.op!r},))")
        i = worst(~same, torch.nan_to_num((g.double() - w.double()).abs(), nan=1.0))
        fail(case, target, f"{what}: {int((~same).sum())} elements differ bitwise{note}", i, w[i], g[i], call=call,
             out_name=e.name)


def assert_structure(case, target, out, want, what, call=None):
    """out is the outputs described by want, [(name, shape, dtype, device)] (one entry: a tensor;
    more: a tuple or list of tensors); dtype may be a tuple of the dtypes the tier accepts."""
    outs = outputs(out) if len(want) > 1 else (out,)
    ok = len(outs) == len(want) and all(isinstance(t, torch.Tensor) for t in outs)
    have = [(tuple(t.shape), t.dtype, t.device) for t in outs] if ok else type(out)

    def dtype_for(dtype, t):  # of several accepted dtypes, the one t has (else the first)
        if not isinstance(dtype, tuple):
            return dtype
        return t.dtype if ok and t.dtype in dtype else dtype[0]
    expect = [(tuple(shape), dtype_for(dtype, t), device)
              for (_, shape, dtype, device), t in zip(want, outs if ok else [None] * len(want))]
    if not ok or have != expect:
        names = want[0][0] if len(want) == 1 else f"({', '.join(n for n, *_ in want)})"
        either = "; ".join(f"{n}'s dtype may be {' or '.join(str(d) for d in dtype)}"
                           for n, _, dtype, _ in want if isinstance(dtype, tuple) and len(dtype) > 1)
        fail(case, target, f"{what}: expected {names} with (shape, dtype, device) "
             f"{expect[0] if len(want) == 1 else expect}{f' ({either})' if either else ''}; "
             f"got {have[0] if ok and len(want) == 1 else have}", call=call, kind=WrongOutput)


def expect_outputs(case, target, out, truth, what="outputs", call=None):
    """out has the outputs truth describes: their number, shapes, dtypes (any the tier accepts:
    OutputTruth.dtypes) and device."""
    assert_structure(case, target, out, [(e.name, e.value.shape, e.dtypes if e.also else e.dtype, e.value.device)
                                         for e in truth.outputs], what, call)


def check_outputs(case, target, out, truth, call=None, args=None, record=False):
    """out (the target's result) against truth: its outputs' structure, then each output within
    its bound on the elements the tier judges. record: add the error to the run's statistics (the
    default tier's oracle laws; args: the call's arguments, for the strict fraction and torch's
    own error)."""
    expect_outputs(case, target, out, truth, call=call)
    if record:
        record_error(case, target, args, out, truth)
    for got, e in zip(outputs(out), truth.outputs):
        e = e.returned_as(got.dtype)  # judged at the precision returned, where the tier accepts several
        assert_close(case, target, got, e.value, e.tol, e.what, call, only=e.only, dtype=e.dtype, out_name=e.name)


def check_oracle(case, target, poisoned=False, strict=False):
    """The oracle law of any op: the call's outputs equal the FP64 truth of its spec within the
    tier's bound (strict: the strict tier's). poisoned: under NaN-poisoned allocations, so that an
    output element never written reads NaN."""
    args = case.tensors(target.device)
    with poisoned_allocations() if poisoned else contextlib.nullcontext():
        out = call_op(case, target, args)
    check_outputs(case, target, out, case.spec.truth(case, args, strict=strict), args=args, record=not strict,
                  call=case.poisoned_call_code() if poisoned else None)


# ----------------------------------------------------------------------------------------------
# the run's error statistics (the plugin's summary)
# ----------------------------------------------------------------------------------------------
def record_error(case, target, args, out, truth):
    """Feed the run's summary with the first output's error: as a fraction of the default and
    strict bounds, in ulps of the reference, and torch's own error on the same inputs as a
    fraction of the default bound (PyTorch's OpInfo criterion: how close the target is next to how
    close the reference library is; the spec's torch_ref). Steers Hypothesis towards the worst
    case. args None: the default fraction and ulps only."""
    got, e = outputs(out)[0], truth.outputs[0]
    if not getattr(target, "record", True) or not isinstance(got, torch.Tensor) or got.shape != e.value.shape:
        return
    e = e.returned_as(got.dtype)
    fin = torch.isfinite(e.value) & torch.isfinite(got.double())
    if not bool(fin.any()):
        return
    ref = e.value[fin]
    err = (got.double()[fin] - ref).abs()
    frac = (err / e.tol[fin].clamp_min(1e-300)).max().item()
    stats = dict(default=frac)
    # ulps of the exact value where it lies in the dtype's normal range: below it the spacing is
    # the subnormal one (or float64's 5e-324), and an error of 1e-7 on an exact 0 read as 1e38 ulps
    normal = ref.abs() >= torch.finfo(e.dtype).tiny
    if bool(normal.any()):
        stats["ulps"] = (err[normal] / tolerances.ulp(ref[normal], e.dtype)).max().item()
    spec = case.spec
    if args is not None:
        tol_s = spec.truth(case, args, strict=True).outputs[0].tol
        stats["strict"] = (err / tol_s[fin].clamp_min(1e-300)).max().item()
        if spec.torch_ref is not None and getattr(getattr(target, "module", None), case.op, None) is not spec.torch_ref:
            try:
                t_out = outputs(case.evaluate(spec.torch_ref, args))[0].double()
                t_fin = fin & torch.isfinite(t_out)
                if bool(t_fin.any()):
                    stats["torch"] = ((t_out - e.value).abs()[t_fin] / e.tol[t_fin].clamp_min(1e-300)).max().item()
            except Exception:  # torch does not offer this case (e.g. a dtype on this device): no figure
                pass
    record.record_worst(case.op, case.dtype, **stats)
    try:  # steer the search towards the worst case; only valid inside a @given test
        hypothesis.target(frac, label=f"bound used {case.op} {str(case.dtype).replace('torch.', '')}")
    except hypothesis.errors.InvalidArgument:
        pass
