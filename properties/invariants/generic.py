"""The generic laws: written once, over op specs, they hold for every op (or every op with the
attribute they select by), whatever its family. A new op gets them from its spec alone."""
from __future__ import annotations

import math
import warnings
import zlib

import torch
from hypothesis import assume

from .. import tolerances
from ..strategies import MANY_ROWS
from ._checks import (assert_bitwise, bits_equal, call_op, check_oracle, expect_outputs, inputs_written_late, outputs,
                      poisoned_allocations, repeats_agree, storage_bases, worst)
from ._registry import fail, invariant


def every_op(op) -> bool:
    return True


@invariant(every_op)
def inputs_unmodified(case, target):
    """The op leaves its inputs bitwise unchanged, and the storage they view (the NaN gaps of
    strided buffers included): a merge tree leaves every chunk state unchanged, cross-entropy its
    logits, targets and dloss."""
    args = case.tensors(target.device)
    bases = storage_bases(args)
    before = [b.clone() for b in bases]
    call_op(case, target, args)
    for name, b0, b1 in zip(case.tensor_names(), before, bases):
        assert_bitwise(case, target, b1, b0, f"{name} (or its storage) was modified")


@invariant(every_op)
def all_outputs_written(case, target):
    """Under NaN-poisoned allocations (torch.empty returns NaN), every output has NaN exactly where
    the FP64 oracle has, on the elements the default tier judges (the spec's truth): an element
    or row the kernel forgot to write stays NaN. Merge cases feed their empty states' natural
    values (the default tier's)."""
    case = case.natural()
    args = case.tensors(target.device)
    with poisoned_allocations():
        out = call_op(case, target, args)
    truth = case.spec.truth(case, args)
    call = case.poisoned_call_code()
    expect_outputs(case, target, out, truth, call=call)
    for k, (got, e) in enumerate(zip(outputs(out), truth.outputs)):
        bad = torch.isnan(got.double()) != torch.isnan(e.value)
        if e.only is not None:
            bad = bad & e.only
        if bool(bad.any()):
            i = worst(bad, torch.ones_like(e.value))
            fail(case, target, _poisoned_what(case, target, k, i, bool(torch.isnan(got[i]))), i, e.value[i],
                 got[i], call=call, out_name=e.name)


def _poisoned_what(case, target, k, i, nan) -> str:
    """all_outputs_written's message for output k at element i: an element NaN only under the
    poisoned allocations is one the kernel does not write; NaN (or not) without them too is a
    wrong value, which the report says rather than blame unwritten memory."""
    plain = outputs(call_op(case, target, case.tensors(target.device)))
    if k < len(plain) and bool(torch.isnan(plain[k][i])) == nan:
        return ("NaN pattern differs from the oracle, with and without poisoned allocations (a wrong value, "
                "not an unwritten element)")
    return "NaN pattern differs from the oracle under poisoned allocations only (an element the op does not write)"


@invariant(every_op)
def deterministic(case, target):
    """Two calls on the same input give bitwise equal results, or, for an op the module declares
    NONDETERMINISTIC (its summation order fixed at run time, as atomic adds from concurrent
    programs give), two results each within its oracle bound. Tier default, and why the
    declaration: a caller who reruns a step to debug it, or compares two runs, needs the same
    bits, and an order that changes undeclared is most often a race; but flash-attention's
    backward accumulates dq with atomic adds unless deterministic=True, and PyTorch documents its
    CUDA ops that do (torch.use_deterministic_algorithms), so both projects' maintainers treat it
    as a choice. Declared, a race still fails: one that loses an update, or reads a value not yet
    written, lands beyond the bounds."""
    args = case.tensors(target.device)
    a = call_op(case, target, args)
    b = call_op(case, target, args)
    same = "each within its bound" if target.nondeterministic(case.op) else "bitwise equal"
    call = f"{case.call_code()}\nfirst = out\n{case.call_code()}\nout = first, out  # the same call twice: {same}"
    repeats_agree(case, target, b, a, args, "repeat call differs", call)


def _one_element_changed(t):
    """A contiguous copy of t with its first element changed (to 1, or 2 where it is 1), and that
    value; (None, None) for an empty t."""
    if t.numel() == 0:
        return None, None
    c = t.contiguous().clone()
    new = 2.0 if float(c.view(-1)[0]) == 1.0 else 1.0
    c.view(-1)[0] = new
    return c, new


@invariant(every_op)
def outputs_outlive_the_next_call(case, target):
    """The outputs a call returns belong to the caller: a second call, on the same arguments but
    for one element of the first (changed to 1, or 2), leaves the first call's outputs, as the
    caller holds them, bitwise unchanged. A kernel that returns a buffer it keeps (one per shape,
    to save the allocation) hands every caller the same memory, and each call overwrites the
    results held from the one before; laws that compare two calls cannot see it, since both
    sides are then the same tensor. Tier default: every torch op returns fresh outputs (but for
    out= and in-place variants), and a held result that changes under the caller is a bug."""
    args = case.tensors(target.device)
    first = outputs(call_op(case, target, args))
    held = [o.clone() for o in first]
    other, new = _one_element_changed(args[0])
    assume(other is not None)
    call_op(case, target, [other, *args[1:]])
    a0 = case.tensor_names()[0]
    call = (f"{case.call_code()}\nfirst = [o.clone() for o in (out if isinstance(out, (tuple, list)) else (out,))]\n"
            f"held = out\n{a0} = {a0}.contiguous().clone()\n{a0}.view(-1)[0] = {new}  # the second call's input\n"
            f"{case.call_code()}\nout = held  # vs first, bitwise")
    for k, (o, h) in enumerate(zip(first, held)):
        assert_bitwise(case, target, o, h, f"output {k + 1} of a call, as its caller holds it, changed when the op "
                       "was called again (one input element changed)", call)


# examples of follows_current_stream: the bug does not depend on the values, and each example
# waits out the side stream's head start (inputs_written_late, ~10 ms)
STREAM_EXAMPLES = 50


@invariant(every_op, needs=("cuda",), max_examples=STREAM_EXAMPLES)
def follows_current_stream(case, target):
    """The op works on torch's current stream. With a side stream current, the inputs are written
    on it behind a long-running kernel and the op is called at once (inputs_written_late); its
    outputs, copied on the side stream right after the call and read once the device is done,
    equal bitwise those of the same call on the default stream (taken once the device is done,
    whatever stream the op used). A kernel launched on the default stream,
    or on a stream of its own that does not wait for the caller's, reads the inputs before they
    are written (the zeros they held); one that waits but does not make the caller wait has its
    outputs read before they are written. Cases whose two calls on the default stream differ are
    left to `deterministic`; for an op declared NONDETERMINISTIC the two streams' outputs are each
    within its bound instead of bitwise equal, and the report names the one beyond it (where that
    is the default stream's, the op is wrong on any stream, which its oracle law reports too).
    Tier default: every CUDA op of PyTorch runs on the current stream (its CUDA semantics), Triton
    launches there, and a kernel that does not breaks every caller that overlaps work on streams
    (data loading, communication, graph capture on a side stream). On a CUDA device only;
    STREAM_EXAMPLES examples."""
    args = case.tensors(target.device)
    torch.cuda.synchronize(args[0].device if args else None)  # the inputs written before the reference

    def settled(tensors):  # the outputs once the whole device is done (whatever stream made them)
        out = outputs(call_op(case, target, tensors))
        torch.cuda.synchronize(args[0].device if args else None)
        return [o.clone() for o in out]

    want = settled(args)
    if not target.nondeterministic(case.op):  # declared: each result is held to its bound below
        again = settled(args)
        assume(len(again) == len(want) and all(a.shape == w.shape and a.dtype == w.dtype
                                               and bool(bits_equal(a, w).all()) for a, w in zip(again, want)))
    with inputs_written_late(args) as late:
        got = [o.clone() for o in outputs(call_op(case, target, list(late)))]
    names = ", ".join(case.tensor_names()) + ","
    call = "\n".join(
        ["from softmax_properties.properties.invariants._checks import inputs_written_late",
         "# expected: this call on the default stream, bitwise (made first, it also compiles the kernels:",
         "# a first call's compilation would outlast the side stream's head start below)"]
        + case.call_code().splitlines()
        + [f"with inputs_written_late(({names})) as ({names}):"]
        + ["    " + line for line in case.call_code().splitlines()]
        + ["    out = tuple(o.clone() for o in out) if isinstance(out, (tuple, list)) else out.clone()  # on the side stream"])
    repeats_agree(case, target, got, want, args, "the outputs on a side stream (inputs written on it just before the "
                  "call) differ from the default stream's", call,
                  names=("the default stream's result", "the side stream's result"))


@invariant(every_op)
def output_dtype_and_shape(case, target):
    """Every output has the shape, dtype and device the op's spec gives (its truth): the input's
    dtype and shape (logsumexp: float32 for 16/32-bit input, float64 for float64, or the input's
    dtype, as torch.logsumexp returns it, without the last axis; a merge's lse: float32 / float64;
    a loss: the targets' shape for reduction="none", else ()), on the input's device."""
    args = case.tensors(target.device)
    out = call_op(case, target, args)
    expect_outputs(case, target, out, case.spec.truth(case, args), "wrong outputs")


def draws_many_rows(op) -> bool:
    return op.many_rows is not None


@invariant(draws_many_rows, families=(MANY_ROWS,))
def many_rows_match_oracle(case, target):
    """Thousands of short rows (2**k and 2**k +- 1 rows up to the profile's element budget, rows
    of 1 to 32 elements: strategies.many_rows_cases) match the FP64 oracle within the same bounds
    as few rows do (each op's oracle law: matches_oracle, merge_tree_matches_one_shot,
    merge_states_matches_one_shot, ce_matches_oracle), under NaN-poisoned allocations. A kernel
    that tiles rows per program and miscounts its programs leaves tail rows unwritten (NaN) or
    drops them from a mean; a reduction whose per-row terms are stored in a 16-bit dtype loses
    them when there are many (each term is loss / N). The cross-entropy cases draw "mean" half the
    time, and rows that repeat one pattern, so that an error made alike in every row adds up.
    Tier default: batches of thousands of rows are the common case of every op."""
    check_oracle(case.natural(), target, poisoned=True)


def _seed(case, salt: str) -> int:
    return zlib.crc32(f"{salt}:{case!r}".encode())


def _seeded(case, salt: str, shape, dtype, device) -> torch.Tensor:
    """Normal values rounded to dtype, seeded by the case's recipe (a replay gets the same)."""
    gen = torch.Generator().manual_seed(_seed(case, salt))
    return torch.randn(tuple(shape), generator=gen, dtype=torch.float64, device="cpu").to(dtype).to(device)


def _seeded_code(case, salt: str, shape, dtype) -> str:
    """The reproducer's expression for _seeded(case, salt, shape, dtype, device): the same values
    (the seed written out), on the reproducer's device."""
    return (f"torch.randn({tuple(shape)}, generator=torch.Generator().manual_seed({_seed(case, salt)}), "
            f"dtype=torch.float64).to(torch.{str(dtype).replace('torch.', '')}).to(device)")


def has_grad_truth(op) -> bool:
    return op.differentiable and op.grad_truth is not None


def _differentiable_dtype(case, target):
    """The autograd laws judge the dtypes in which the target's op is differentiable (its autograd
    probe, Target.autograd_probe): a library that computes in float32 and refuses float64 is
    judged in float32 and the 16-bit dtypes it takes."""
    assume(case.dtype in target.autograd_dtypes(case.op))


def _finite_softmax_rows(case, x):
    """The softmax family's autograd laws judge rows without NaN or +inf and with a finite value
    (its FP64 autograd references are not defined elsewhere; the other laws check those rows)."""
    if case.spec.family == "softmax":
        xd = x.detach().double()
        assume(xd.shape[-1] >= 1 and not bool(torch.isnan(xd).any()) and not bool((xd == math.inf).any())
               and bool((xd > -math.inf).any(-1).all()))


@invariant(has_grad_truth, needs=("autograd",), max_cols=128)
def autograd_composition(case, target):
    """Autograd through the op composes: the same input x (a leaf, as laid out) feeds two calls
    (two outputs, or two losses for cross_entropy) and x.grad already holds G0; after
    torch.autograd.backward of both with cotangents g1, g2 (seeded by the case), x.grad ==
    G0 + VJP(g1) + VJP(g2) against the FP64 VJP of the op's spec (grad_truth: softmax,
    log_softmax: torch's float64 ops; logsumexp: the FP64 oracle's softmax times g; cross_entropy:
    the FP64 oracle's gradient, oracles/cross_entropy.py, which test_meta checks against torch's),
    each VJP within its bound and the two additions in the dtype within an ulp of their largest
    partial sum. x and its storage, the other arguments, and the outputs the caller holds are
    bitwise unchanged by the backward. An explicit backward function cannot show a backward that
    writes into a saved tensor (the logits, the output) behind autograd's version counter: its
    second use then reads the gradient instead. Rows with NaN or +inf of the softmax family are
    left to the other laws (its FP64 autograd references are not defined there); rows up to 128
    columns (the law is about autograd's bookkeeping, which row length does not change; the other
    laws check long rows). Tier default: two losses on one set of logits, and gradient
    accumulation, are everyday training."""
    _differentiable_dtype(case, target)
    args = case.tensors(target.device)
    base = storage_bases(args[:1])[0]
    before = [base.clone()] + [a.clone() for a in args[1:]]
    x = args[0].detach().requires_grad_(True)
    _finite_softmax_rows(case, x)
    with torch.enable_grad():
        outs = [call_op(case, target, [x, *args[1:]]) for _ in range(2)]
        if not all(isinstance(o, torch.Tensor) and o.requires_grad for o in outs):
            fail(case, target, "the output does not require grad for an input that does")
        held = [o.detach().clone() for o in outs]
        gs = [_seeded(case, f"g{i}", o.shape, o.dtype, o.device) for i, o in enumerate(outs)]
        g0 = _seeded(case, "grad", x.shape, x.dtype, x.device)
        x.grad = g0.clone()
        with warnings.catch_warnings():  # a strided x's gradient need not share its strides
            warnings.filterwarnings("ignore", message="grad and param do not obey the gradient layout contract")
            torch.autograd.backward(outs, gs)
    a0 = case.tensor_names()[0]
    one = case.call_code()
    steps = (f"storage = {a0}._base if {a0}._base is not None else {a0}  # the storage {a0} views\n"
             f"{a0} = {a0}.detach().requires_grad_()\n"
             f"G0 = {_seeded_code(case, 'grad', x.shape, x.dtype)}\n{a0}.grad = G0.clone()  # an existing gradient\n"
             f"{one.replace('out = ', 'y1 = ', 1)}\n{one.replace('out = ', 'y2 = ', 1)}\n"
             + "".join(f"g{i + 1} = {_seeded_code(case, f'g{i}', o.shape, o.dtype)}\n" for i, o in enumerate(outs))
             + "torch.autograd.backward([y1, y2], [g1, g2])\n")
    call = steps + f"out = {a0}.grad  # vs G0 + VJP(g1) + VJP(g2) in FP64"
    for k, (nm, b0, b1) in enumerate(zip(case.tensor_names(), before, [base] + list(args[1:]))):
        assert_bitwise(case, target, b1, b0, f"{nm} (or its storage) was modified by backward",
                       steps + f"out = {'storage' if k == 0 else nm}  # vs its values before the backward, bitwise")
    for k, (o, h) in enumerate(zip(outs, held)):
        assert_bitwise(case, target, o.detach(), h, f"output {k + 1}, held by the caller, was modified by backward",
                       steps + f"out = y{k + 1}  # vs its values before the backward, bitwise")
    if x.grad is None or tuple(x.grad.shape) != tuple(x.shape) or x.grad.dtype != x.dtype:
        got = None if x.grad is None else (tuple(x.grad.shape), x.grad.dtype)
        fail(case, target, f"{a0}.grad is {got}, expected shape {tuple(x.shape)} and {x.dtype}", call=call)
    refs, tols, only = [], [], None
    for g, y in zip(gs, held):
        r, t_, only = case.spec.grad_truth(case, [x, *args[1:]], g, y)
        refs.append(r)
        tols.append(t_)
    ref = g0.double() + refs[0] + refs[1]
    tol = tolerances.accumulated_bound(g0, refs, tols, case.dtype)
    bad = tolerances.compare(x.grad, ref, tol, case.dtype)
    if only is not None:
        bad = bad & only
    if bool(bad.any()):
        i = worst(bad, (x.grad.double() - ref).abs() / tol.clamp_min(1e-300))
        fail(case, target,
             f"{a0}.grad after two backward passes onto an existing gradient differs from G0 + VJP(g1) + VJP(g2): "
             f"{int(bad.sum())} of {bad.numel()} elements out of bounds", i, ref[i], x.grad[i], tol[i], call,
             out_name=f"{a0}.grad")


def _has_strided_cotangents(shape) -> bool:
    return len(shape) >= 1 and math.prod(shape) > 1


def _strided_cotangents(case, shape, dtype, device):
    """Cotangents of an output of this shape in the layouts autograd hands a backward, each with
    the reproducer's code for it: (what, g, code). Values seeded by the case, as _seeded's."""
    def seeded(salt, sh):
        return _seeded(case, salt, sh, dtype, device), _seeded_code(case, salt, sh, dtype)
    out = []
    if _has_strided_cotangents(shape):
        c, code = seeded("g_one_value", ())
        out.append(("one value expanded (out.sum()'s cotangent, scaled)", c.expand(tuple(shape)),
                    f"{code}.expand({tuple(shape)})"))
        wide, code = seeded("g_every_other", tuple(shape[:-1]) + (2 * shape[-1],))
        out.append(("every other column of a wider buffer", wide[..., ::2], f"{code}[..., ::2]"))
    if len(shape) >= 2 and shape[-1] > 1 and shape[-2] > 1:
        t, code = seeded("g_transposed", tuple(shape[:-2]) + (shape[-1], shape[-2]))
        out.append(("transposed", t.transpose(-1, -2), f"{code}.transpose(-1, -2)"))
    return out


def _assert_vjp(case, target, gx, x, rest, g, y, what: str, call: str):
    """gx, the gradient autograd returned for x (as the law laid it out) and the cotangent g of the
    output y, has x's shape and dtype and equals the FP64 VJP of g at x (the spec's grad_truth)
    within its bound, on the elements the spec judges."""
    a0 = case.tensor_names()[0]
    if gx is None or tuple(gx.shape) != tuple(x.shape) or gx.dtype != x.dtype:
        got = None if gx is None else (tuple(gx.shape), gx.dtype)
        fail(case, target, f"{what} is {got}, expected shape {tuple(x.shape)} and {x.dtype}", call=call)
    ref, tol, only = case.spec.grad_truth(case, [x, *rest], g, y.detach())
    bad = tolerances.compare(gx, ref, tol, case.dtype)
    if only is not None:
        bad = bad & only
    if bool(bad.any()):
        i = worst(bad, (gx.double() - ref).abs() / tol.clamp_min(1e-300))
        fail(case, target, f"{what} differs from its FP64 VJP: {int(bad.sum())} of {bad.numel()} elements out of "
             "bounds", i, ref[i], gx[i], tol[i], call, out_name=f"{a0}.grad")


def _differentiable_output(case, target, out):
    if not (isinstance(out, torch.Tensor) and out.requires_grad):
        fail(case, target, "the output does not require grad for an input that does")


@invariant(has_grad_truth, needs=("autograd",), max_cols=128)
def autograd_cotangent_layouts(case, target):
    """Autograd hands a backward the cotangent as the next op made it, in any layout: the
    cotangent of out.sum() is one value expanded (every stride 0), that of a transpose or of a
    slice is a strided view. For each such cotangent g of the op's output (one value expanded;
    every other column of a wider buffer; transposed, for outputs of two or more axes; values
    seeded by the case), the gradient autograd returns equals the FP64 VJP of g (the spec's
    grad_truth) within its bound, and g is left unchanged. A backward that takes the cotangent as
    contiguous (a kernel that steps rows by the row length, or a reshape that assumes it) reads
    the wrong elements or raises. Rows with NaN or +inf of the softmax family are left to the other
    laws, as in autograd_composition; rows up to 128 columns. Tier default: a sum or mean of an
    output, a transpose before the loss and a sliced output are everyday training code, and
    torch's backward takes a cotangent in any layout."""
    _differentiable_dtype(case, target)
    known = case.output_shape()
    assume(known is None or _has_strided_cotangents(known))  # a scalar loss has none: no call
    args = case.tensors(target.device)
    _finite_softmax_rows(case, args[0])
    probe = call_op(case, target, [args[0].detach(), *args[1:]])  # the output's shape, dtype and device
    layouts = _strided_cotangents(case, tuple(probe.shape), probe.dtype, probe.device)
    assume(layouts)
    a0 = case.tensor_names()[0]
    for what, g, g_code in layouts:
        held = g.clone()
        x = args[0].detach().requires_grad_(True)
        with torch.enable_grad():
            out = call_op(case, target, [x, *args[1:]])
            _differentiable_output(case, target, out)
            (gx,) = torch.autograd.grad(out, x, g)
        call = (f"{a0} = {a0}.detach().requires_grad_()\n{case.call_code()}\ng = {g_code}  # {what}\n"
                f"(gx,) = torch.autograd.grad(out, {a0}, g)\nout = gx  # vs the FP64 VJP of g")
        assert_bitwise(case, target, g, held, f"the cotangent ({what}) was modified by backward", call, out_name="g")
        _assert_vjp(case, target, gx, x, args[1:], g, out, f"the gradient for a cotangent {what}", call)


@invariant(has_grad_truth, needs=("autograd",), max_cols=128)
def autograd_backward_twice(case, target):
    """Backward can run twice. (1) On one graph: out = op(x), then torch.autograd.grad(out, x, g1,
    retain_graph=True) and torch.autograd.grad(out, x, g2), cotangents seeded by the case (not 1):
    each gradient equals the FP64 VJP of its cotangent (the spec's grad_truth) within its bound,
    and the first gradient, as its caller holds it, is bitwise unchanged by the second backward.
    (2) On two graphs whose backwards run in the other order than their forwards: ya = op(x),
    yb = op(x') (x' is x with one element changed, to 1 or 2), the backward of yb, then that of
    ya: each gradient equals the FP64 VJP at its own input. A backward that writes the gradient
    into a buffer saved for backward (to save an allocation) gives a wrong second gradient and
    changes the tensor the first call returned; a forward that keeps what it saves for backward
    in a buffer of its own, reused by the next call, gives the first graph the second's saved
    values. A backward may refuse to run again on its graph: an exception raised by a backward
    called with retain_graph=True or by the second one (torch.compile's "This backward function
    was compiled with non-empty donated buffers which requires create_graph=False and
    retain_graph=False") passes that part of the law, since a clear refusal is not a wrong value;
    the first gradient must still be unchanged. Rows with NaN or +inf of the softmax family are
    left to the other laws, as in autograd_composition; rows up to 128 columns. Tier default:
    loss.backward(retain_graph=True) then another backward (several losses on one forward, GAN
    and meta-learning loops), and forwards whose backwards run in the other order (gradient
    checkpointing, pipeline parallelism) are everyday training code, and torch's ops support
    both."""
    _differentiable_dtype(case, target)
    args = case.tensors(target.device)
    _finite_softmax_rows(case, args[0])
    rest = args[1:]
    a0 = case.tensor_names()[0]
    one = case.call_code()

    # (1) one graph, two backward calls; a backward that raises (refuses) ends this part
    x = args[0].detach().requires_grad_(True)
    with torch.enable_grad():
        out = call_op(case, target, [x, *rest])
        _differentiable_output(case, target, out)
        g1, g2 = (_seeded(case, f"twice_g{k}", out.shape, out.dtype, out.device) for k in (1, 2))
        grads = []
        for g, retain in ((g1, True), (g2, False)):
            try:
                (gx,) = torch.autograd.grad(out, x, g, retain_graph=retain)
            except Exception:  # noqa: BLE001 - a refusal to run backward (again) on this graph
                break
            grads.append((gx, gx.clone()))
    second = f"(gx2,) = torch.autograd.grad(out, {a0}, g2)"
    if len(grads) < 2:  # it refused: the reproducer prints the refusal and goes on
        second = f"try:\n    {second}\nexcept Exception as e:  # a refusal\n    print(f'refused: {{e}}')"
    head = "\n".join([f"{a0} = {a0}.detach().requires_grad_()", one,
                      *(f"g{k} = {_seeded_code(case, f'twice_g{k}', out.shape, out.dtype)}" for k in (1, 2)),
                      f"(gx1,) = torch.autograd.grad(out, {a0}, g1, retain_graph=True)", "first = gx1.clone()",
                      second]) + "\n"
    if grads:
        gx1, first = grads[0]
        assert_bitwise(case, target, gx1, first, "the first gradient, as its caller holds it, changed when backward ran "
                       "again on its graph", head + "out = gx1  # vs first, bitwise", out_name=f"{a0}.grad")
    for k, (g, (gx, _)) in enumerate(zip((g1, g2), grads), 1):
        _assert_vjp(case, target, gx, x, rest, g, out, f"the gradient of backward {k} of 2 on one graph",
                    head + f"out = gx{k}  # vs the FP64 VJP of g{k}")

    # (2) two graphs, backwards in the other order than the forwards
    other, new = _one_element_changed(args[0])
    if other is None:  # an empty input: no element to change
        return
    xa, xb = args[0].detach().requires_grad_(True), other.requires_grad_(True)
    _finite_softmax_rows(case, xb)
    with torch.enable_grad():
        ya = call_op(case, target, [xa, *rest])
        yb = call_op(case, target, [xb, *rest])
        _differentiable_output(case, target, ya)
        _differentiable_output(case, target, yb)
        ga = _seeded(case, "order_ga", ya.shape, ya.dtype, ya.device)
        gb = _seeded(case, "order_gb", yb.shape, yb.dtype, yb.device)
        (gxb,) = torch.autograd.grad(yb, xb, gb)
        (gxa,) = torch.autograd.grad(ya, xa, ga)
    call = (f"x0 = {a0}\n{a0} = xa = x0.detach().requires_grad_()\n{one.replace('out = ', 'ya = ', 1)}\n"
            f"{a0} = xb = x0.detach().contiguous().clone()\nxb.view(-1)[0] = {new}  # one element changed\n"
            f"xb.requires_grad_()\n{one.replace('out = ', 'yb = ', 1)}\n"
            f"ga = {_seeded_code(case, 'order_ga', ya.shape, ya.dtype)}\n"
            f"gb = {_seeded_code(case, 'order_gb', yb.shape, yb.dtype)}\n"
            f"(gxb,) = torch.autograd.grad(yb, xb, gb)  # the second graph's backward first\n"
            f"(gxa,) = torch.autograd.grad(ya, xa, ga)\n")
    _assert_vjp(case, target, gxb, xb, rest, gb, yb, "the gradient of the second of two graphs, its backward run "
                "first", call + "out = gxb  # vs the FP64 VJP of gb at xb")
    _assert_vjp(case, target, gxa, xa, rest, ga, ya, "the gradient of the first of two graphs, its backward run "
                "second", call + "out = gxa  # vs the FP64 VJP of ga at xa")
