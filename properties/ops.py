"""The built-in ops, one OpSpec each (properties/spec.py says what every field means), and the
target adapter (the module under test, chosen at run time). Importing this module registers the
ops; the laws select among them by their specs' attributes (properties/invariants/)."""
from __future__ import annotations

import importlib
import inspect
import math
import types

import torch

from softmax_properties import oracles

from . import strategies as S, truth
from .spec import OPS, OpSpec, lookup, lse_dtype, lse_or_input_dtype, register
from .targets import torch as torch_target


# ----------------------------------------------------------------------------------------------
# edge rows (oracles/semantics.py) as each op's semantics: (what, args, options, expected outputs)
# ----------------------------------------------------------------------------------------------
def _t(values, dtype=torch.float64):
    return torch.tensor(values, dtype=dtype)


def _row(values):
    return _t(values).reshape(1, len(values))


def _forward_rows(column):
    return tuple((what, (_row(row),), {}, (_t([out]).reshape(1, -1) if isinstance(out, list) else _t([out]),))
                 for what, row, *outs in oracles.SEMANTICS for out in (outs[column],))


def _merge_rows(column):
    """MERGE_SEMANTICS rows for softmax_merge (column 0: p) or attention_merge (column 1: o)."""
    rows = []
    for what, la, xa, lb, xb, *outs in oracles.MERGE_SEMANTICS:
        values, lse = outs[column], outs[2]
        if values is None:
            continue
        args = (_row(xa), _t([la]), _row(xb), _t([lb]))
        rows.append((what, args, {}, (_row(values), _t([lse]))))
    return tuple(rows)


def _states_rows():
    """attention_merge's rows of MERGE_SEMANTICS as N-way merges of two states (an empty state's
    values are dropped, NaN included: the table's identities)."""
    rows = []
    for what, la, xa, lb, xb, _, o, lse in oracles.MERGE_SEMANTICS:
        if o is None or not xa or not xb:
            continue
        rows.append((what, (_t([[[xa[0]], [xb[0]]]]), _t([[la, lb]])), {}, (_t([[o]]), _t([lse]))))
    return tuple(rows)


def _ce_rows(backward: bool):
    rows = []
    for what, logits, tgt, eps, red, loss, grad, _ in oracles.CE_SEMANTICS:
        V = len(logits[0]) if logits else 3
        x, t = _t(logits).reshape(-1, V), _t(tgt, torch.int64)
        options = dict(reduction=red, label_smoothing=eps)
        if backward:
            dloss = torch.ones(t.shape if red == "none" else (), dtype=torch.float64)
            rows.append((what, (x, t, dloss), options, (_t(grad).reshape(x.shape),)))
        else:
            rows.append((what, (x, t), options, (_t(loss),)))
    return tuple(rows)


def _class_indices(x: torch.Tensor):
    """A cross-entropy call around float64 logits x: class 0 for every row."""
    return (x, torch.zeros(x.shape[:-1], dtype=torch.int64, device=x.device)), {}


# ----------------------------------------------------------------------------------------------
# the ops, in the order the suite lists them
# ----------------------------------------------------------------------------------------------
_SOFTMAX_FAMILY = dict(family="softmax", truth=truth.logits_truth, cases=S.logit_case, many_rows=S.many_row_logit_case,
                       has_dim=True)

register(OpSpec("softmax", args=("x",), oracle=oracles.softmax, reference=truth.softmax_reference,
                differentiable=True, out_range=(0.0, 1.0), normalized=True, grad_truth=truth.normalized_grad_truth,
                semantics=_forward_rows(0), torch_ref=torch_target.softmax, **_SOFTMAX_FAMILY))
register(OpSpec("log_softmax", args=("x",), oracle=oracles.log_softmax, reference=truth.log_softmax_reference,
                differentiable=True, out_range=(-math.inf, 0.0), grad_truth=truth.normalized_grad_truth,
                semantics=_forward_rows(1), torch_ref=torch_target.log_softmax, **_SOFTMAX_FAMILY))
register(OpSpec("logsumexp", args=("x",), oracle=oracles.logsumexp, reference=truth.logsumexp_reference,
                out_dtype=lse_dtype, default_out_dtypes=lse_or_input_dtype, reduces=True, differentiable=True,
                grad_truth=truth.logsumexp_grad_truth,
                semantics=_forward_rows(2), torch_ref=torch_target.logsumexp, **_SOFTMAX_FAMILY))
register(OpSpec("softmax_backward", args=("y", "dy"), oracle=oracles.softmax_backward, forward="softmax",
                reference=truth.softmax_backward_reference, torch_ref=torch_target.softmax_backward, **_SOFTMAX_FAMILY))
register(OpSpec("log_softmax_backward", args=("z", "dz"), oracle=oracles.log_softmax_backward, forward="log_softmax",
                reference=truth.log_softmax_backward_reference, torch_ref=torch_target.log_softmax_backward,
                **_SOFTMAX_FAMILY))

# merges of two (x, lse) states, returning (x, lse); drawn as a MergeCase (a row's chunk states
# and a merge tree over them)
register(OpSpec("softmax_merge", "merge", ("p_a", "lse_a", "p_b", "lse_b"), oracles.softmax_merge, truth.merge_truth,
                S.merge_case, S.many_row_merge_case, semantics=_merge_rows(0), torch_ref=torch_target.softmax_merge))
register(OpSpec("attention_merge", "merge", ("o_a", "lse_a", "o_b", "lse_b"), oracles.attention_merge,
                truth.merge_truth, S.merge_case, S.many_row_merge_case, semantics=_merge_rows(1),
                torch_ref=torch_target.attention_merge))
# the N-way merge of S states stacked along axis -2 (o) / -1 (lse); drawn as a StatesCase
register(OpSpec("merge_states", "merge_states", ("o", "lse"), oracles.merge_states, truth.states_truth, S.states_case,
                S.many_row_states_case, semantics=_states_rows()))

# cross-entropy with class-index targets and keyword options (ignore_index, reduction,
# label_smoothing); drawn as a CECase
CE_OPTIONS = ("ignore_index", "reduction", "label_smoothing")
register(OpSpec("cross_entropy", "cross_entropy", ("logits", "target"), oracles.ce.cross_entropy,
                truth.cross_entropy_truth, S.ce_case, S.many_row_ce_case, differentiable=True,
                grad_truth=truth.cross_entropy_grad_truth, sample=_class_indices, semantics=_ce_rows(False),
                torch_ref=torch_target.cross_entropy, options=CE_OPTIONS))
register(OpSpec("cross_entropy_backward", "cross_entropy", ("logits", "target", "dloss"),
                oracles.ce.cross_entropy_backward, truth.cross_entropy_truth, S.ce_case, S.many_row_ce_case,
                forward="cross_entropy", semantics=_ce_rows(True), torch_ref=torch_target.cross_entropy_backward,
                options=CE_OPTIONS))

from .families import attention  # noqa: E402,F401  (the attention family: its ops and laws)


# ----------------------------------------------------------------------------------------------
# the target
# ----------------------------------------------------------------------------------------------
# Exceptions a target may raise to refuse an input it does not support (the example is then
# discarded). By default only NotImplementedError, Python's own word for "not supported": TypeError
# and ValueError are also what a broken call raises (arguments that do not bind, a shape check that
# rejects a valid input), and taken as refusals they turned such a module's every test into a skip
# and its run green. A module that refuses with them says so in SUITE_REFUSALS; the project's own
# kernels declare none (any exception is a failure).
DEFAULT_REFUSALS = (NotImplementedError,)


class TargetError(Exception):
    """The module named by --target cannot be tested at all: it does not import, or an offered
    function cannot take the calls of the contract. The message says what and how to fix it."""


def _import_failure(name: str, e: BaseException) -> str:
    """What importing the target raised, with the traceback through the target's own files only
    (importlib's and the suite's frames dropped)."""
    import traceback

    from .report import is_suite_frame
    te = traceback.TracebackException(type(e), e, e.__traceback__)
    keep = [f for f in te.stack
            if not (f.filename.startswith("<frozen") or "importlib" in f.filename or is_suite_frame(f))]
    te.stack = traceback.StackSummary.from_list(keep)
    text = "".join(te.format()).rstrip()
    return f"--target {name!r}: importing the module raised {type(e).__name__}: {e}\n{text}"


class Target:
    """The module under test (its import name, or the module itself). Functions reduce over the
    last axis; missing ones are skipped."""

    # the dtypes the autograd probe tries, float64 first (gradcheck_float64's, and the one most
    # kernel libraries refuse: they compute in float32)
    PROBE_DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)

    def __init__(self, module):
        if isinstance(module, types.ModuleType):
            self.name, self.module = module.__name__, module
        else:
            self.name = module
            try:
                self.module = importlib.import_module(module)
            except Exception as e:  # a syntax error, a missing dependency, an error at import
                raise TargetError(_import_failure(module, e)) from e
        self.declares_refusals = hasattr(self.module, "SUITE_REFUSALS")
        self.refusals = tuple(getattr(self.module, "SUITE_REFUSALS", DEFAULT_REFUSALS))
        self.device = "cpu"
        self._autograd = {}

    def contract_errors(self) -> list:
        """One line per offered function whose signature cannot take the call every law makes
        (its spec's tensor arguments by position, its options by keyword): such a function is
        broken, not refusing, and every example would fail alike. Functions without an
        inspectable signature (builtins) are not judged here."""
        errors = []
        for name, spec in OPS.items():
            fn = self.fn(name)
            if fn is None:
                continue
            try:
                sig = inspect.signature(fn)
            except (TypeError, ValueError):
                continue
            try:
                sig.bind(*spec.args, **{o: None for o in spec.options})
            except TypeError as e:
                errors.append(f"{self.name}.{name}{sig}: {e}; expected {spec.call_signature}")
        return errors

    def fn(self, op_name: str):
        f = getattr(self.module, op_name, None)
        return f if callable(f) else None

    def has(self, op_name: str) -> bool:
        return self.fn(op_name) is not None

    def accepts_dim(self, op_name: str) -> bool:
        try:
            return "dim" in inspect.signature(self.fn(op_name)).parameters
        except (TypeError, ValueError):
            return False

    def accepts_option(self, op_name: str, option: str) -> bool:
        """The op's function takes the keyword option (by name, or through **kwargs)."""
        try:
            params = inspect.signature(self.fn(op_name)).parameters
        except (TypeError, ValueError):
            return False
        return option in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())

    def call(self, op_name: str, *tensors, **kw):
        return self.fn(op_name)(*tensors, **kw)

    def autograd_probe(self, op_name: str) -> dict:
        """{dtype: None where the op returns an output that requires grad for an input that does,
        else what the call raised or returned}, for each of PROBE_DTYPES: its spec's sample call
        around a (2, 3) tensor of that dtype. Probed once per op (the laws that need autograd
        judge the dtypes where it is None)."""
        if op_name not in self._autograd:
            self._autograd[op_name] = {dtype: self._probe(op_name, dtype) for dtype in self.PROBE_DTYPES}
        return self._autograd[op_name]

    def _probe(self, op_name: str, dtype: torch.dtype):
        try:
            x = torch.zeros(2, 3, dtype=dtype, device=self.device, requires_grad=True)
            args, kwargs = lookup(op_name).sample(x)
            out = self.call(op_name, *args, **kwargs)
        except Exception as e:  # an op that cannot take such an input (a refusal of the dtype included)
            return f"{type(e).__name__}: {str(e)[:200]}"
        if isinstance(out, (tuple, list)) and out:  # an op of several outputs: its first (attention's o)
            out = out[0]
        if not isinstance(out, torch.Tensor):
            return f"it returned {type(out).__name__}, not a tensor"
        return None if out.requires_grad else "its output does not require grad"

    def autograd_dtypes(self, op_name: str) -> tuple:
        """The dtypes in which the op is differentiable (autograd_probe), float64 first."""
        return tuple(dtype for dtype, why in self.autograd_probe(op_name).items() if why is None)

    def supports_autograd(self, op_name: str, dtype: torch.dtype = None) -> bool:
        """True when the op is differentiable in some dtype of PROBE_DTYPES (in dtype, if given):
        most kernel libraries compute in float32 and refuse float64, and their autograd is
        judged in the dtypes they take."""
        dtypes = self.autograd_dtypes(op_name)
        return bool(dtypes) if dtype is None else dtype in dtypes

    def autograd_refused(self, op_name: str, dtypes=None) -> str:
        """What the autograd probe met in the given dtypes where the op is not differentiable,
        one clause per distinct message ('float64: NotImplementedError: ...'), or ''."""
        probe = self.autograd_probe(op_name)
        by_message = {}
        for dtype in self.PROBE_DTYPES if dtypes is None else dtypes:
            if probe.get(dtype) is not None:
                by_message.setdefault(probe[dtype], []).append(str(dtype).replace("torch.", ""))
        return "; ".join(f"{', '.join(names)}: {why}" for why, names in by_message.items())


__all__ = ["OPS", "DEFAULT_REFUSALS", "Target", "TargetError"]
