"""The fused linear cross-entropy, linear_cross_entropy(hidden (N, H), weight (V, H), target (N,),
*, bias, ignore_index, reduction, label_smoothing[, ce_weight, z_loss, softcap, logit_scale]) =
cross_entropy(hidden @ weight.T + bias, target, ..., weight=ce_weight, ...): its case, strategy, FP64 truth and bound,
OpSpec and laws. A family of its own ("linear_cross_entropy": the cross-entropy laws do not apply
to it), in the cross-entropy package whose case, strategies and truth it reuses."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
from hypothesis import assume, reject, strategies as st

from softmax_properties import oracles

from ... import interpreter, tolerances
from ...case import OpCase, preamble
from ...invariants._checks import assert_bitwise, assert_close, op_call, run
from ...failures import WrongOutput
from ...invariants._registry import fail, invariant
from ...snippets import built
from ...spec import OpSpec, OutputTruth, Truth, register
from ...strategies import OFFERED, draw_index, dtypes
from ...tolerances import agree
from . import bounds as B
from .case import CECase, _Code
from .strategies import ce_option_values, ce_options, ce_targets, empty_mean_zero
from .truth import ce_options_mask, ce_default_mask, ce_truth, loss_also

OP = "linear_cross_entropy"
# cross_entropy's options; its class weights are ce_weight here (weight is the linear layer's), as
# liger-kernel names them
LCE_OFFERED = ("ce_weight", "z_loss", "softcap", "logit_scale")
_CE_NAME = {"ce_weight": "weight"}  # an offered option's name among cross_entropy's


@dataclass(frozen=True)
class _Classes:
    """A logits stand-in for LCECase.ce_view: the class count (logits.logits.cols) and nothing else."""

    cols: int

    @property
    def logits(self):
        return self


@dataclass(frozen=True)
class LCECase(OpCase):
    """hidden (N, H) and weight (V, H) drawn as seeded normals (hidden of scale `scale`, weight of
    scale 1 / sqrt(H), so the logits are of order `scale`) rounded to the dtype, an optional bias
    (V,) of the same kind, class-index targets, and cross_entropy's options (class weights
    ``ce_weight``: a pattern repeated over the V classes, as CECase.weight)."""

    op: str
    dtype: torch.dtype
    N: int
    H: int
    V: int
    seed: int
    scale: float
    bias: bool
    targets: object  # strategies.Targets
    ignore_index: int
    reduction: str
    label_smoothing: float
    z_loss: float = 0.0
    softcap: float = None
    logit_scale: float = 1.0
    ce_weight: tuple = None
    empty_mean_zero: bool = False  # CE_EMPTY_MEAN = 0.0 declared (CECase)

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).replace("torch.", "")

    @property
    def batch(self) -> tuple:
        """The rows (the loss's shape under reduction="none")."""
        return (self.N,)

    def _reps(self) -> int:
        return -(-self.V // len(self.ce_weight))

    def ce_weight_tensor(self, device=None, dtype=torch.float32):
        if self.ce_weight is None:
            return None
        dev = device or interpreter.device()
        return torch.tensor(self.ce_weight, dtype=dtype, device=dev).repeat(self._reps())[:self.V]

    def _normal(self, name, shape, seed, scale) -> str:
        return (f"{name} = (torch.randn({tuple(shape)}, generator=torch.Generator().manual_seed({seed}), "
                f"dtype=torch.float64) * {scale!r}).to(torch.{self.dtype_name}).to(device)")

    def tensors_code(self) -> str:
        return "\n".join([self._normal("hidden", (self.N, self.H), self.seed, self.scale),
                          self._normal("weight", (self.V, self.H), self.seed + 1, 1 / math.sqrt(max(self.H, 1))),
                          self.targets.code("labels", (self.N,))])

    def bias_tensor(self, device=None):
        if not self.bias:
            return None
        return built(self._normal("b", (self.V,), self.seed + 2, 1.0), "b", device=device or interpreter.device())

    def tensors(self, device="cpu") -> list:
        code = self.tensors_code()
        return [built(code, n, device=device) for n in ("hidden", "weight", "labels")]

    def options(self) -> dict:
        on = dict(ce_weight=self.ce_weight, z_loss=self.z_loss, softcap=self.softcap, logit_scale=self.logit_scale)
        off = dict(ce_weight=None, z_loss=0.0, softcap=None, logit_scale=1.0)
        return {k: v for k, v in on.items() if v != off[k]}

    def kwargs(self) -> dict:
        kw = dict(ignore_index=self.ignore_index, reduction=self.reduction, label_smoothing=self.label_smoothing)
        if self.bias:
            kw["bias"] = self.bias_tensor()
        opts = self.options()
        if "ce_weight" in opts:
            opts["ce_weight"] = self.ce_weight_tensor()
        return {**kw, **opts}

    def kwargs_code(self) -> str:
        kw = self.kwargs()
        if "ce_weight" in kw:
            kw["ce_weight"] = _Code(f"torch.tensor({list(self.ce_weight)!r}, dtype=torch.float32, device=device)"
                                    f".repeat({self._reps()})[:{self.V}]")
        parts = [f"{k}={v!r}" for k, v in kw.items() if k != "bias"]
        return ", ".join((["bias=b"] if self.bias else []) + parts)

    def tensor_names(self) -> tuple:
        return ("hidden", "weight", "labels")

    def call_code(self) -> str:
        return f"out = target.{self.op}(hidden, weight, labels, {self.kwargs_code()})"

    def ce_view(self, reduction=None) -> CECase:
        """The cross-entropy case of the same options (its truth's parameters; no tensors: its
        logits stand-in holds only the class count, which its weights' tensor reads)."""
        return CECase("cross_entropy", self.dtype, _Classes(self.V), None, self.ignore_index,
                      reduction or self.reduction, self.label_smoothing, None, self.ce_weight, self.z_loss,
                      self.softcap, self.logit_scale, self.empty_mean_zero)

    def family(self) -> str:
        return "normal"

    def describe(self, device="cpu") -> str:
        return "\n  ".join([f"op={self.op}", f"dtype={self.dtype_name}", f"options: {self.kwargs_code()}",
                            f"hidden: ({self.N}, {self.H}) normal x {self.scale} seed {self.seed}; "
                            f"weight: ({self.V}, {self.H}); bias: {self.bias}",
                            f"target: {list(self.targets.values)} dtype={self.targets.dtype}"])

    def reproducer(self, target_name: str, call: str = None) -> str:
        lines = preamble(target_name)
        lines.append(self.tensors_code())
        if self.bias:
            lines.append(self._normal("b", (self.V,), self.seed + 2, 1.0))
        lines.append(call or self.call_code())
        lines.append("print(out)")
        return "\n".join(lines)


def chunk_sizes() -> tuple:
    """The row counts at which the target's chunking changes (the project's kernels: its chunk
    rows under the interpreter); the strategy draws N and V just past them."""
    try:
        from softmax_properties.kernels import _linear_cross_entropy as K
        return (K.INTERPRETER_CHUNK_ROWS,) if interpreter.interpreting() else (K.INTERPRETER_CHUNK_ROWS, 64, 128)
    except Exception:  # noqa: BLE001 - any target: a few small sizes
        return (8,)


@st.composite
def lce_cases(draw, max_n=None):
    """An LCECase: N and V each small, or a chunk size + 1 (a ragged last chunk, the tail that a
    fused kernel's chunking drops), H from 1 to 32; logits of order 1 to 30; a bias half the time;
    the options the target takes (OFFERED) drawn as for cross-entropy."""
    dtype = draw(dtypes(), label="dtype")
    sizes = chunk_sizes()
    pick = lambda lo, hi: st.one_of(st.integers(lo, hi), st.sampled_from(sizes).map(lambda c: c + 1))  # noqa: E731
    N = draw(pick(0, 5), label="N")
    V = draw(pick(1, 9), label="V")
    if max_n is not None:
        N = min(N, max_n)
    H = draw(st.one_of(st.integers(1, 8), st.just(32)), label="H")
    ignore_index, reduction, eps = draw(ce_options(), label="options")
    targets = draw(ce_targets(N, V, ignore_index), label="target")
    targets = dataclasses.replace(targets, stride=1)
    back = {v: k for k, v in _CE_NAME.items()}
    offered = tuple(_CE_NAME.get(o, o) for o in OFFERED.of(_SPEC))
    # class weights: patterns of two values at least, so that rows of different classes weigh
    # differently (what a chunked weighted mean gets wrong)
    opts = draw(ce_option_values(offered, min_pattern=2), label="lce_options") if draw(st.booleans()) else {}
    opts = {back.get(k, k): v for k, v in opts.items()}
    return LCECase(OP, dtype, N, H, V, draw(st.integers(0, 2**16), label="seed"),
                   draw(st.sampled_from([1.0, 4.0, 30.0]), label="scale"), draw(st.booleans(), label="bias"),
                   targets, ignore_index, reduction, float(eps), **opts, empty_mean_zero=empty_mean_zero())


def lce_case(draw, spec, families=None, max_cols=None):
    return draw(lce_cases())


def _class_weights(case, t):
    """(w, w_t, ce_rows, divisor) for the case's class weights, float64 on t's device: the weights
    (V,), each row's weight w[t] (0 on ignored rows), (1 - eps) |w_t| + eps mean_j |w_j| and the
    mean's |sum of w[t]|; (None, None, None, None) without class weights."""
    w = case.ce_weight_tensor(t.device, torch.float64)
    if w is None:
        return None, None, None, None
    live = t != case.ignore_index
    wt = torch.where(live, w[torch.where(live, t, 0).clamp(0, case.V - 1).long()], 0.0)
    eps = case.label_smoothing
    return w, wt, (1 - eps) * wt.abs() + eps * w.abs().mean(), oracles.ce.divisors(t, case.ignore_index, w)[0].abs()


def lce_extra(case, z, dz, reduction, t):
    """The loss's error from logits within dz of z (bounds.lce_loss_extra), for a case's options."""
    J = oracles.ce.transform_grad(z, case.softcap, case.logit_scale)
    y = oracles.ce.transform(z, case.softcap, case.logit_scale)
    _, _, ce_rows, divisor = _class_weights(case, t)
    return B.lce_loss_extra(dz, J, y, case.z_loss, t != case.ignore_index, reduction, ce_rows, divisor)


def lce_truth(case, args, strict=False, reduction=None):
    """The loss against the FP64 oracle (oracles/linear_cross_entropy.py, the logits in float64):
    the cross-entropy bound at the FP64 logits (ce_truth, with the options) plus the logits'
    error carried through the loss (lce_extra of bounds.lce_logits_error), on the outputs the
    cross-entropy's default mask judges."""
    hidden, weight, t = args[:3]
    red = reduction or case.reduction
    bias = case.kwargs().get("bias")
    bias = None if bias is None else bias.to(hidden.device)
    z = oracles.linear_cross_entropy.logits(hidden, weight, bias)
    view = case.ce_view(red)
    ref, tol = ce_truth(view, [z, t], depth=tolerances.depth if strict else tolerances.depth_any, strict=strict)
    tol = tol + lce_extra(case, z, B.lce_logits_error(case.dtype, hidden, weight, bias, z), red, t)
    mask = None if strict else (ce_options_mask if view.options() else ce_default_mask)(view, [z, t], ref.shape)
    return Truth((OutputTruth("out", ref, tol, case.dtype, mask, also=loss_also(case, tol, strict)),))


def _oracle(hidden, weight, target, **kw):
    return oracles.linear_cross_entropy.linear_cross_entropy(hidden, weight, target, **kw)


_SPEC = OpSpec(OP, "linear_cross_entropy", ("hidden", "weight", "target"), _oracle, lce_truth, lce_case, None,
               options=("ignore_index", "reduction", "label_smoothing"), offered=LCE_OFFERED)
register(_SPEC)


def linear(op) -> bool:
    return op.family == "linear_cross_entropy"


@invariant(linear)
def lce_matches_oracle(case, target, strict=False):
    """The loss equals the FP64 oracle (the logits hidden @ weight.T + bias in float64, then the
    cross-entropy oracle) within the cross-entropy's bound plus the two matmuls' error carried
    through the loss (lce_truth: length-H dot products accumulated at the compute precision, the
    logits rounded to the dtype)."""
    from ...invariants._checks import check_oracle
    check_oracle(case, target, strict=strict)


@invariant(linear, needs=("op:cross_entropy",))
def lce_is_cross_entropy_of_logits(case, target):
    """linear_cross_entropy(hidden, weight, target, bias) equals the target's own
    cross_entropy(hidden @ weight.T + bias) (the logits formed by torch in the dtype), the same
    options: within the sum of the two bounds, the first's logits' error once more (the two
    references differ by at most that: the second's logits are within lce_logits_error of the
    first's)."""
    hidden, weight, t = case.tensors(target.device)
    assume(case.N > 0)
    a = op_call(case, target, hidden, weight, t).double()
    bias = case.kwargs().get("bias")
    z = hidden @ weight.T + (bias if bias is not None else 0)
    view = case.ce_view()
    kw = {**view.kwargs()}
    b = run(target, "cross_entropy", z, t, **kw).double()
    lt = lce_truth(case, [hidden, weight, t]).outputs[0]
    _, tol_ce = ce_truth(view, [z, t])
    z64 = oracles.linear_cross_entropy.logits(hidden, weight, bias)
    extra = lce_extra(case, z64, B.lce_logits_error(case.dtype, hidden, weight, bias, z64), case.reduction, t)
    only = lt.only if lt.only is not None else torch.ones(lt.value.shape, dtype=torch.bool, device=lt.value.device)
    assert_close(case, target, a, b, torch.nan_to_num(agree(lt.tol, tol_ce) + extra, nan=0.0),
                 "linear_cross_entropy != cross_entropy(hidden @ weight.T + bias)",
                 f"{case.call_code()}\nfirst = out\nz = hidden @ weight.T" + (" + b" if case.bias else "")
                 + f"\nout = first, target.cross_entropy(z, labels, {view.kwargs_code()})", only=only)


@invariant(linear)
def lce_rows_split_recombine(case, target):
    """The loss does not depend on how the rows are passed: the rows split in two calls (at a
    drawn row) and recombined as the reduction says (none: concatenated; sum: added; mean: the
    two sums added over the count of counted rows, or over the sum of their class weights) equal
    one call on all rows: a chunked kernel whose mean divides each chunk by its own count or
    weight sum fails here. Bound: the whole call's bound plus the parts' (the sum's bounds at
    reduction="sum", divided by the mean's divisor)."""
    hidden, weight, t = case.tensors(target.device)
    assume(case.N >= 2)
    k = 1 + draw_split(case)
    whole = op_call(case, target, hidden, weight, t).double()
    red = case.reduction
    part_red = "none" if red == "none" else "sum"
    pa = op_call(case, target, hidden[:k], weight, t[:k], reduction=part_red).double()
    pb = op_call(case, target, hidden[k:], weight, t[k:], reduction=part_red).double()
    ca, cb = (dataclasses.replace(case, N=k, targets=_rows(case.targets, 0, k), reduction=part_red),
              dataclasses.replace(case, N=case.N - k, targets=_rows(case.targets, k, case.N), reduction=part_red))
    ta = lce_truth(ca, [hidden[:k], weight, t[:k]]).outputs[0].tol
    tb = lce_truth(cb, [hidden[k:], weight, t[k:]]).outputs[0].tol
    tw = lce_truth(case, [hidden, weight, t]).outputs[0]
    weights = case.ce_weight_tensor(t.device, torch.float64)
    divisor = float(oracles.ce.divisors(t, case.ignore_index, weights)[0])  # the count without weights
    if red == "none":
        rec = torch.cat([pa, pb])
    elif red == "sum":
        rec = pa + pb
    else:
        # with class weights and a z-loss the mean divides the two terms by different divisors
        # (sum w[t], the count), which the parts' sums no longer tell apart
        assume(divisor != 0 and not (weights is not None and case.z_loss))
        rec = (pa + pb) / divisor
    tol = B.lce_split_bound(tw.tol, ta, tb, red, divisor)
    only = tw.only if tw.only is not None else torch.ones(tw.value.shape, dtype=torch.bool, device=tw.value.device)
    only = only & torch.isfinite(rec)
    assert_close(case, target, whole, rec, torch.nan_to_num(tol, nan=0.0),
                 f"rows split at {k} and recombined ({red}) != one call", only=only)


def _dlogits(case, hidden, weight, bias, t, dl):
    """The FP64 d logits G for the cotangent dl (the cross-entropy backward's truth at the FP64
    logits, with the case's options) and bounds.lce_dlogits_error of the d logits a kernel forms
    from its own logits."""
    z = oracles.linear_cross_entropy.logits(hidden, weight, bias)
    G, tol_G = ce_truth(dataclasses.replace(case.ce_view(), op="cross_entropy_backward"), [z, t, dl])
    w, wt, _, _ = _class_weights(case, t)
    g = oracles.ce.grad_scale(t, dl, case.ignore_index, case.reduction, w)
    g_z = oracles.ce.grad_scale(t, dl, case.ignore_index, case.reduction, w, for_z=True)
    eps = case.label_smoothing
    c = 1.0 if w is None else (1 - eps) * wt + eps * w.mean()  # the cross-entropy term's factor of p_j
    y = oracles.ce.transform(z, case.softcap, case.logit_scale)
    J = dy = None
    if case.softcap is not None:  # d loss / d y, the d logits before the softcap's chain rule
        J = oracles.ce.transform_grad(z, case.softcap, case.logit_scale)
        dy = oracles.ce.cross_entropy_backward(y, t, dl, case.ignore_index, case.reduction, eps, w,
                                               z_loss=case.z_loss)
    dG = B.lce_dlogits_error(tol_G, y, J, dy, B.lce_logits_error(case.dtype, hidden, weight, bias, z),
                             (g * c)[..., None], g_z[..., None], case.z_loss, case.softcap, case.logit_scale)
    return G, dG


@invariant(linear)
def lce_gradients_match_oracle(case, target):
    """d hidden, d weight and d bias (autograd, a cotangent seeded by the case) equal the FP64
    chain rule (oracles.linear_cross_entropy.linear_cross_entropy_backward: d logits G at the FP64
    logits, then G weight, G^T hidden, the column sums of G) within bounds.lce_grad_bounds, and
    the same when only one input requires grad (hidden, weight or bias, chosen by the case). A
    fused kernel that forms a gradient only when another input requires grad (d weight only if
    hidden does: a frozen backbone under a trained output layer gets no gradient), drops a tail
    chunk's rows from d hidden, accumulates d weight over chunks in a 16-bit dtype, or leaves out
    the z-loss term's or the softcap's share of the d logits fails here. Every option: the d
    logits' error from the kernel's own logits is carried through p, lse and the softcap's
    derivative (bounds.lce_dlogits_error); cases with a finite G. Tier default: a training step's
    gradients, and partly frozen models, are the op's purpose."""
    assume(case.N > 0)
    from ...invariants.generic import _seed
    hidden, weight, t = case.tensors(target.device)
    bias = case.bias_tensor(target.device)
    names = ("hidden", "weight") + (("bias",) if case.bias else ())
    alone = names[_seed(case, "grad_subset") % len(names)]
    var = {"hidden": "hidden", "weight": "weight", "bias": "b"}  # their names in the reproducer
    truth = None
    for wanted in (names, (alone,)):
        leaves = dict(hidden=hidden.detach().clone(), weight=weight.detach().clone(),
                      bias=None if bias is None else bias.detach().clone())
        for n in wanted:
            leaves[n].requires_grad_(True)
        with torch.enable_grad():
            out = op_call(case, target, leaves["hidden"], leaves["weight"], t, bias=leaves["bias"])
        if truth is None:  # the first pass: every input requires grad
            if not (isinstance(out, torch.Tensor) and out.requires_grad):
                reject()  # a target whose op is not differentiable
            truth = _grad_truth(case, hidden, weight, bias, t, out)
        refs, tols, dl, dl_code = truth
        which = " and ".join(wanted) + (" (only)" if len(wanted) < len(names) else "")
        call = ("\n".join(f"{var[n]}.requires_grad_(True)" for n in wanted) + f"\n{case.call_code()}\n"
                f"dl = {dl_code}\ngrads = torch.autograd.grad(out, [{', '.join(var[n] for n in wanted)}], dl)")
        if not (isinstance(out, torch.Tensor) and out.requires_grad):
            fail(case, target, f"the loss does not require grad when {which} requires grad", call=call,
                 kind=WrongOutput)
        try:
            grads = torch.autograd.grad(out, [leaves[n] for n in wanted], dl)
        except RuntimeError as e:
            fail(case, target, f"autograd found no gradient for {which}: {str(e).splitlines()[0]}", call=call,
                 kind=WrongOutput)
        for k, (n, g) in enumerate(zip(wanted, grads)):
            assert_close(case, target, g, refs[n], tols[n], f"d {n}, with {which} requiring grad, differs from "
                         "the FP64 chain rule", call + f"\nout = grads[{k}]  # d {n}", dtype=case.dtype,
                         out_name=f"d {n}")


def _grad_truth(case, hidden, weight, bias, t, out, salt="lce_dloss"):
    """For the gradient laws: the cotangent (seeded by the case and salt, of out's shape and
    dtype) and its code, and per input the FP64 gradient and its bound (rows with a finite G)."""
    from ...invariants.generic import _seeded, _seeded_code
    dl = _seeded(case, salt, out.shape, out.dtype, out.device)
    dl_code = _seeded_code(case, salt, out.shape, out.dtype)
    G, dG = _dlogits(case, hidden, weight, bias, t, dl)
    assume(bool(torch.isfinite(G).all()))
    W64, H64 = weight.detach().double(), hidden.detach().double()
    refs = dict(hidden=G @ W64, weight=G.T @ H64, bias=G.sum(0))
    eps = B.lce_grad_bounds(case.dtype, G, dG, W64.abs(), H64.abs(), case.N, case.V)
    tols = {n: tolerances.total_tolerance(e, refs[n], case.dtype, case.dtype)  # the final rounding
            for n, e in zip(("hidden", "weight", "bias"), eps)}
    return refs, tols, dl, dl_code


@invariant(linear)
def lce_backward_twice(case, target):
    """Backward can run twice. (1) On one graph: loss = linear_cross_entropy(hidden, weight, ...),
    torch.autograd.grad(loss, inputs, g1, retain_graph=True), then again with g2 (cotangents
    seeded by the case, not 1: a loss scale, or two losses on one forward): each set of gradients
    equals the FP64 chain rule of its cotangent within bounds.lce_grad_bounds, and the first set,
    as its caller holds it, is bitwise unchanged by the second backward. A fused kernel forms
    the gradients in its forward (for dloss = 1) and scales them by the cotangent in its
    backward: scaled in place (to save an allocation), the second backward returns g1 g2 times
    the gradient and changes the first one it returned. (2) On two graphs whose backwards run in
    the other order than their forwards (the second forward on hidden with one element changed):
    each set equals the chain rule at its own inputs (gradients kept in a buffer shared by the
    calls fail). A backward that refuses to run again on its graph (an exception with
    retain_graph) passes part (1), a clear refusal not being a wrong value. Tier default: loss
    scaling and gradient checkpointing are everyday training code."""
    assume(case.N > 0)
    hidden, weight, t = case.tensors(target.device)
    bias = case.bias_tensor(target.device)
    names = ("hidden", "weight") + (("bias",) if case.bias else ())
    var = {"hidden": "hidden", "weight": "weight", "bias": "b"}

    def leaves(h=hidden):
        return dict(hidden=h.detach().clone().requires_grad_(True), weight=weight.detach().clone().requires_grad_(True),
                    bias=None if bias is None else bias.detach().clone().requires_grad_(True))

    def forward(lv):
        with torch.enable_grad():
            out = op_call(case, target, lv["hidden"], lv["weight"], t, bias=lv["bias"])
        if not (isinstance(out, torch.Tensor) and out.requires_grad):
            reject()  # a target whose op is not differentiable
        return out

    def judge(grads, truth, what, call):
        refs, tols, _, _ = truth
        for k, (n, g) in enumerate(zip(names, grads)):
            assert_close(case, target, g, refs[n], tols[n], f"d {n} of {what} differs from the FP64 chain rule",
                         call + f"\nout = {what.split()[0]}[{k}]  # d {n}", dtype=case.dtype, out_name=f"d {n}")

    grab = ", ".join(var[n] for n in names)
    head = "\n".join(f"{var[n]}.requires_grad_(True)" for n in names) + f"\n{case.call_code()}\n"
    lv = leaves()
    out = forward(lv)
    t1 = _grad_truth(case, hidden, weight, bias, t, out, "lce_dloss")
    t2 = _grad_truth(case, hidden, weight, bias, t, out, "lce_dloss2")
    call = head + (f"g1, g2 = {t1[3]}, {t2[3]}\nfirst = torch.autograd.grad(out, [{grab}], g1, retain_graph=True)\n"
                   f"held = [g.clone() for g in first]\nsecond = torch.autograd.grad(out, [{grab}], g2)")
    first = torch.autograd.grad(out, [lv[n] for n in names], t1[2], retain_graph=True)
    held = [g.clone() for g in first]
    judge(first, t1, "first backward", call)
    try:
        second = torch.autograd.grad(out, [lv[n] for n in names], t2[2])
    except RuntimeError:
        second = None  # refused: a clear refusal, not a wrong value
    for k, (n, g, h) in enumerate(zip(names, first, held)):
        assert_bitwise(case, target, g, h, f"d {n} of the first backward changed when backward ran again",
                       call + f"\nout = first[{k}]  # vs held[{k}]", out_name=f"d {n}")
    if second is not None:
        judge(second, t2, "second backward (the graph retained)", call)

    # (2) two graphs, backwards in the other order
    h2 = hidden.detach().clone()
    h2.view(-1)[case.seed % h2.numel()] = 1.0 if float(h2.view(-1)[case.seed % h2.numel()]) != 1.0 else 2.0
    la, lb = leaves(), leaves(h2)
    oa, ob = forward(la), forward(lb)
    ta = t1  # the same inputs and cotangent as part (1)'s first backward
    tb = _grad_truth(case, h2, weight, bias, t, ob, "lce_dloss2")
    gb = torch.autograd.grad(ob, [lb[n] for n in names], tb[2])
    ga = torch.autograd.grad(oa, [la[n] for n in names], ta[2])
    i = case.seed % hidden.numel()
    call = (f"hidden2 = hidden.clone()\nhidden2.view(-1)[{i}] = {float(h2.view(-1)[i])!r}\n"
            + "\n".join(f"{var[n]}.requires_grad_(True)" for n in names) + "\nhidden2.requires_grad_(True)\n"
            f"{case.call_code()}\nya = out\n{case.call_code().replace('(hidden, ', '(hidden2, ')}\nyb = out\n"
            f"gb = torch.autograd.grad(yb, [{grab.replace('hidden', 'hidden2')}], {tb[3]})\n"
            f"ga = torch.autograd.grad(ya, [{grab}], {ta[3]})")
    judge(ga, ta, "ga (the first forward's graph, its backward second)", call)
    judge(gb, tb, "gb (the second forward's graph, its backward first)", call)


def draw_split(case) -> int:
    """The split row, from the case's seed (the law draws no data of its own): in [0, N - 2]."""
    return case.seed % (case.N - 1)


def _rows(targets, lo, hi):
    return dataclasses.replace(targets, values=tuple(targets.values[lo:hi]))


@invariant(linear)
def lce_weight_grad_sums_to_zero(case, target):
    """Without z-loss and softcap every row of d logits sums to zero (softmax sums to 1, the
    one-hot and the smoothing's eps / V terms to (1 - eps) + eps; with class weights,
    (1 - eps) w_t (p - onehot) + eps / V (sum(w) p - w) sums to zero too; the logit scale
    multiplies the row), so d weight = (d logits)^T hidden summed over the vocabulary is zero:
    sum_j dW_jk = sum_i (sum_j G_ij) h_ik = 0 (autograd, dloss = 1). Bound, summing over j the
    error of each dW_jk = sum_i G_ij h_ik: G_ij within the cross-entropy backward's bound at the
    FP64 logits (ce_truth) plus the logits' error carried into p (p_ij expm1(2 |s| D_i),
    D_i = max_j lce_logits_error, times the row's scale), times |h_ik|; the product's length-N float32
    sum and G and dW rounded to the dtype, ((N + 1) u_c + 2 * 2**-p) sum_i |G_ij h_ik|; the
    float64 sum over the V rows, (V + 1) 2**-53 sum_j |dW_jk|. Targets whose op is not
    differentiable in the weight: the example is rejected."""
    assume(case.z_loss == 0 and case.softcap is None and case.N > 0)
    hidden, weight, t = case.tensors(target.device)
    w = weight.detach().clone().requires_grad_(True)
    out = op_call(case, target, hidden, w, t)
    if not (isinstance(out, torch.Tensor) and out.requires_grad):
        reject()
    dl = torch.ones_like(out)
    (dw,) = torch.autograd.grad(out, w, dl)
    total = dw.double().sum(0)
    bias = case.kwargs().get("bias")
    G, dG = _dlogits(case, hidden, weight, bias, t, dl)
    tol = B.lce_weight_grad_sum_bound(case.dtype, G, dG, hidden.detach().double().abs(), case.N, case.V)
    ok = torch.isfinite(G).all()
    assume(bool(ok))
    assert_close(case, target, total, torch.zeros_like(total), torch.nan_to_num(tol, nan=0.0, posinf=math.inf),
                 "d weight summed over the vocabulary != 0",
                 f"weight.requires_grad_(True)\n{case.call_code()}\n"
                 "out = torch.autograd.grad(out, weight, torch.ones_like(out))[0].double().sum(0)",
                 dtype=torch.float64)
